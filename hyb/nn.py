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

from .errors import HybridUnsupportedError
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
        return self.construct(*args, **kwargs)

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
