"""``hyb.nn.Cell``: MindSpore's building block for networks, run eagerly.

A subclass calls ``super().__init__()``, assigns its operators, sub-cells and Parameters as
attributes and computes in ``construct``; calling the cell runs ``construct``::

    class Net(hyb.nn.Cell):
        def __init__(self):
            super().__init__()
            self.w = hyb.Parameter(np.ones(3, np.float32), name="w")
        def construct(self, x):
            return (self.w * x).sum()

    net = Net()
    hyb.grad(net, grad_position=None, weights=net.trainable_params())(x)

``trainable_params()`` lists the Parameters that require a gradient, this cell's first, in
the order they were assigned, then those of its sub-cells in turn.
"""
from __future__ import annotations

import numpy as np

from .errors import HybridArgumentError, HybridTypeError, HybridUnsupportedError
from .tensor import Parameter, ParameterTuple

__all__ = ["Cell"]


class Cell:
    """Base class of networks: ``construct`` computes, ``__call__`` runs it."""

    def __init__(self, auto_prefix=True, flags=None):
        object.__setattr__(self, "_params", {})
        object.__setattr__(self, "_cells", {})
        object.__setattr__(self, "training", False)
        object.__setattr__(self, "requires_grad", False)

    def _registry(self, kind):
        # A subclass that forgot super().__init__() still works.
        if kind not in self.__dict__:
            object.__setattr__(self, kind, {})
        return self.__dict__[kind]

    def __setattr__(self, name, value):
        params, cells = self._registry("_params"), self._registry("_cells")
        params.pop(name, None)
        cells.pop(name, None)
        if isinstance(value, Parameter):
            if value.name is None:
                value.name = name
            params[name] = value
        elif isinstance(value, ParameterTuple):
            params[name] = value
        elif isinstance(value, Cell):
            cells[name] = value
        object.__setattr__(self, name, value)

    def __delattr__(self, name):
        self._registry("_params").pop(name, None)
        self._registry("_cells").pop(name, None)
        object.__delattr__(self, name)

    def construct(self, *args, **kwargs):
        raise HybridUnsupportedError(f"{type(self).__name__} does not define construct()", None,
                                     "a Cell subclass computes its output in construct(self, *inputs)")

    def __call__(self, *args, **kwargs):
        declared = self.__dict__.get("_declared_inputs")
        if declared is not None:
            check_inputs(type(self).__name__, declared, args)
        return self.construct(*args, **kwargs)

    def set_inputs(self, *inputs):
        """Declare the inputs' shapes and dtypes, as MindSpore does before compiling a network
        for dynamic shapes: ``net.set_inputs(Tensor(shape=[4, None], dtype=hyb.float32))``.  hyb
        runs eagerly, so nothing is compiled; each later call is checked against the declaration
        (rank, the dimensions given as numbers, dtype), as MindSpore checks it."""
        object.__setattr__(self, "_declared_inputs", tuple(inputs))
        return self

    def get_inputs(self):
        """What :meth:`set_inputs` declared (None before it)."""
        return self.__dict__.get("_declared_inputs")

    # ------------------------------------------------------------------ parameters and cells
    def parameters_and_names(self, prefix=""):
        """``(name, Parameter)`` pairs, this cell's first, then its sub-cells'; each once."""
        seen = set()
        for name, p in self._walk(prefix):
            if id(p) not in seen:
                seen.add(id(p))
                yield name, p

    def _walk(self, prefix):
        for name, value in self._registry("_params").items():
            if isinstance(value, ParameterTuple):
                for i, p in enumerate(value):
                    yield f"{prefix}{name}.{i}", p
            else:
                yield prefix + name, value
        for name, cell in self._registry("_cells").items():
            yield from cell._walk(f"{prefix}{name}.")

    def get_parameters(self):
        """Every Parameter, trainable or not."""
        return (p for _, p in self.parameters_and_names())

    def trainable_params(self):
        """The Parameters that require a gradient, as a list (pass it as ``weights``)."""
        return [p for p in self.get_parameters() if p.requires_grad]

    def untrainable_params(self):
        return [p for p in self.get_parameters() if not p.requires_grad]

    def name_cells(self):
        """The direct sub-cells, by attribute name."""
        return dict(self._registry("_cells"))

    def cells(self):
        return list(self._registry("_cells").values())

    # ------------------------------------------------------------------ flags (accepted; hyb is eager)
    def set_grad(self, requires_grad=True):
        object.__setattr__(self, "requires_grad", requires_grad)
        return self

    def set_train(self, mode=True):
        object.__setattr__(self, "training", mode)
        for cell in self.cells():
            cell.set_train(mode)
        return self

    def __repr__(self):
        inner = ", ".join(f"{name}={cell!r}" for name, cell in self._registry("_cells").items())
        return f"{type(self).__name__}<{inner}>"


def check_inputs(cell: str, declared: tuple, args: tuple):
    """A call's arguments against ``set_inputs``: the count, and for each declared tensor its
    rank, its dimensions that are numbers (None is any size) and its dtype."""
    if len(args) != len(declared):
        raise HybridArgumentError(f"{cell}.set_inputs declared {len(declared)} inputs; the call passes {len(args)}",
                                  None, "call the network with the inputs set_inputs declared, or declare them again")
    for pos, (want, got) in enumerate(zip(declared, args)):
        if not hasattr(want, "shape") or not hasattr(want, "dtype") or tuple(want.shape) == (-2,):
            continue  # not a tensor, or a tensor of any rank: nothing to check
        arr = np.asarray(got.asnumpy() if hasattr(got, "asnumpy") else got)
        shape, dtype = arr.shape, arr.dtype
        wanted = tuple(want.shape)  # a TensorSpec writes any size as None
        if len(shape) != len(wanted) or any(w is not None and w != n for w, n in zip(wanted, shape)):
            shown = "[" + ", ".join("None" if w is None else str(w) for w in wanted) + "]"
            raise HybridTypeError(f"input {pos} of {cell} has shape {list(shape)}, but set_inputs declared {shown}",
                                  None, "None in a declared shape is any size; a number must match")
        if np.dtype(want.dtype) != dtype:
            raise HybridTypeError(f"input {pos} of {cell} has dtype {dtype}, but set_inputs declared "
                                  f"{np.dtype(want.dtype)}", None, "cast the input, or declare its dtype")
