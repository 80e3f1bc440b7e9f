"""``hyb.Function``: an operator whose forward and backward are written together.

A subclass defines two static methods; ``forward`` saves in a context what ``backward`` needs::

    class Mul(hyb.Function):
        @staticmethod
        def forward(ctx, x, y):
            ctx.save_for_backward(x, y)
            return x * y                       # runs without recording: Tensors, NumPy, kernels
        @staticmethod
        def backward(ctx, dout):
            x, y = ctx.saved_tensors
            return (dout * y if ctx.needs_input_grad[0] else None,
                    dout * x if ctx.needs_input_grad[1] else None)

    z = Mul.apply(x, y)                        # on the tape of hyb.grad / value_and_grad

``apply`` runs ``forward`` with recording switched off (so hybrid kernels, Custom operators
and Tensor arithmetic inside it put nothing on the tape), turns NumPy results into Tensors,
and, when an input takes part in a gradient, records one operation whose backward function
calls ``backward(ctx, *douts)`` (one Tensor per output, zeros where no gradient arrived).
``backward`` returns one gradient (or ``None``) per input of ``forward``; a gradient of a
broadcast input's shape is summed back to the input's shape.

The C++ form of the same interface (``hyb::Function<T>``, ``hyb::AutogradContext``, in
``hyb/include/hyb_extension.h``, built by :class:`hyb.ops.CustomOpBuilder`) records through
:func:`_cpp_record` below.
"""
from __future__ import annotations

import numpy as np

from . import autograd
from .errors import HybridArgumentError, HybridTypeError, HybridUnsupportedError
from .tensor import Tensor

__all__ = ["Function", "AutogradContext"]


class AutogradContext:
    """What ``forward`` passes to ``backward`` (MindSpore's ``AutogradContext``, PyTorch's ``ctx``).

    * ``save_for_backward(*tensors)``: keep Tensors (or arrays, or ``None``) for ``backward``;
    * ``saved_tensors``: the tuple saved, in order;
    * ``needs_input_grad``: one bool per input of ``forward``: does that input need a gradient;
    * ``needs_grad(tensor)``: the same, asked with an input (C++'s ``NeedGrad``);
    * any other attribute (``ctx.alpha = 2``) is kept for ``backward`` as well.
    """

    def __init__(self, inputs=(), needs_input_grad=()):
        self._inputs = tuple(inputs)
        self.needs_input_grad = tuple(needs_input_grad)
        self._saved = ()

    def save_for_backward(self, *tensors):
        """Keep ``tensors`` for ``backward`` (``ctx.saved_tensors``); one list or tuple is also
        accepted, as C++'s ``SaveForBackward({a, b})``."""
        if len(tensors) == 1 and isinstance(tensors[0], (list, tuple)):
            tensors = tuple(tensors[0])
        for i, t in enumerate(tensors):
            if t is not None and not isinstance(t, (Tensor, np.ndarray, np.generic, int, float, bool)):
                raise HybridTypeError(f"save_for_backward(): argument {i} is a {type(t).__name__}, not a Tensor",
                                      None, "save Tensors (or arrays, or None); keep other values as ctx "
                                            "attributes: ctx.name = value")
        self._saved = tuple(tensors)

    @property
    def saved_tensors(self) -> tuple:
        """The values given to ``save_for_backward``, in order (``()`` when nothing was saved)."""
        return self._saved

    def needs_grad(self, tensor) -> bool:
        """Whether ``tensor`` (an input of ``forward``) needs a gradient."""
        for x, need in zip(self._inputs, self.needs_input_grad):
            if x is tensor:
                return need
        return False

    # MindSpore's C++ spellings, for code ported back and forth.
    NeedGrad = needs_grad

    def NeedsInputGrad(self, i: int) -> bool:
        return bool(self.needs_input_grad[i]) if 0 <= i < len(self.needs_input_grad) else False

    def SaveForBackward(self, tensors):
        self.save_for_backward(*tensors)

    def GetSavedTensors(self) -> tuple:
        return self.saved_tensors


class Function:
    """Base class of operators with a hand-written backward (see the module docstring).

    Subclasses define ``forward(ctx, *args)`` and ``backward(ctx, *grads)`` as static methods
    and are called with ``MyFunction.apply(*args)``.
    """

    @staticmethod
    def forward(ctx, *args):
        raise HybridUnsupportedError("this Function does not define forward(ctx, *inputs)", None,
                                     "define @staticmethod def forward(ctx, x, ...): ... return output")

    @staticmethod
    def backward(ctx, *grads):
        raise HybridUnsupportedError("this Function does not define backward(ctx, *douts)", None,
                                     "define @staticmethod def backward(ctx, dout): ... return (dx, ...)")

    @classmethod
    def apply(cls, *args, **kwargs):
        """Run ``forward`` on ``args`` (keyword arguments are passed on and never differentiated);
        return its result with Tensors for arrays, recorded on the tape when an input needs a
        gradient."""
        if cls is Function:
            raise HybridUnsupportedError("Function.apply is called on a subclass", None,
                                         "class MyOp(hyb.Function): define forward and backward, then MyOp.apply(x)")
        need = tuple(autograd.needs_grad(a) if isinstance(a, Tensor) else False for a in args)
        ctx = AutogradContext(args, need)
        with autograd.no_grad():
            result = cls.forward(ctx, *args, **kwargs)
        single = not isinstance(result, (tuple, list))
        items = [result] if single else list(result)
        outputs = [_as_output(v, args) for v in items]
        tensors = [(i, t) for i, t in enumerate(outputs) if isinstance(t, Tensor)]
        # A saved output is kept as a Tensor of its own (same data, off the tape), so that the
        # output does not hold itself alive through its node's backward.
        ctx._saved = tuple(Tensor.from_numpy(s._data) if isinstance(s, Tensor) and
                           any(s is o for o in items + outputs) else s for s in ctx._saved)
        if any(need) and tensors:
            _record_function(cls, ctx, args, outputs, tensors)
        if single:
            return outputs[0]
        return tuple(outputs) if isinstance(result, tuple) else outputs

    def __init__(self, *args, **kwargs):
        if args or kwargs:
            raise HybridUnsupportedError(f"{type(self).__name__}(...) makes a Function object; call "
                                         f"{type(self).__name__}.apply(...) to run it", None, None)

    def __call__(self, *args, **kwargs):
        return type(self).apply(*args, **kwargs)


def _as_output(value, inputs):
    """An output of ``forward`` as a new Tensor: arrays wrapped, an input or a Tensor that is
    already on the tape copied into a fresh Tensor (sharing its data); other values as they are."""
    if isinstance(value, Tensor):
        if value._tracked or any(value is x for x in inputs):
            return Tensor.from_numpy(value._data)
        return value
    if isinstance(value, (np.ndarray, np.generic)):
        return Tensor.from_numpy(np.asarray(value))
    return value


def _record_function(cls, ctx, args, outputs, tensors):
    name = cls.__name__
    n_outputs = len(outputs)
    where = [i for i, _ in tensors]          # not the outputs themselves: they point to this node

    def backward(douts):
        grads = [None] * n_outputs
        for i, d in zip(where, douts):
            grads[i] = Tensor.from_numpy(d)
        got = cls.backward(ctx, *grads)
        if not isinstance(got, (tuple, list)):
            got = (got,)
        got = list(got)
        if len(got) > len(args) and all(g is None for g in got[len(args):]):
            got = got[:len(args)]
        if len(got) != len(args):
            raise HybridArgumentError(f"the backward of Function `{name}` returned {len(got)} gradient(s) for "
                                      f"{len(args)} input(s) of forward", None,
                                      "return one gradient (or None) per input of forward, in order")
        return [_input_grad(g, x, need, f"the gradient `{name}.backward` returned for input {pos}")
                for pos, (g, x, need) in enumerate(zip(got, args, ctx.needs_input_grad))]

    backward.__name__ = name
    autograd.record(list(args), [t for _, t in tensors], backward, name=name)


def _input_grad(g, x, need: bool, what: str):
    """A returned gradient as an array of the input's shape (broadcast gradients summed back),
    or None where the input needs none."""
    if g is None or not need:
        return None
    arr = np.asarray(g._data if isinstance(g, Tensor) else g)
    shape = tuple(x.shape)
    if arr.shape != shape and arr.ndim >= len(shape):
        try:
            arr = autograd.unbroadcast(arr, shape)
        except ValueError:
            raise HybridArgumentError(f"{what} has shape {arr.shape}, expected {shape}", None,
                                      "return one gradient per input, shaped like that input") from None
    return arr


# --------------------------------------------------------------------------- the C++ bridge
# hyb_extension.h calls these (through pybind11) to turn Python values into BaseTensors and to
# put a C++ Function<T>::Apply on the tape.

def _cpp_input(value):
    """``(source Tensor or None, C-contiguous native-endian array, dtype name)`` for a value
    passed where a ``BaseTensorPtr`` is expected; None when it is not a tensor or a number."""
    source = None
    if isinstance(value, Tensor):
        source, arr = value, value._data
    elif isinstance(value, np.ndarray):
        arr = value
    elif isinstance(value, (bool, int, float, np.generic)):
        arr = Tensor(value)._data                  # Python floats are float32, as hyb.Tensor(2.0)
    else:
        return None
    if arr.dtype.kind not in "biuf" and arr.dtype.name != "bfloat16":
        return None
    if not arr.dtype.isnative:
        arr = arr.astype(arr.dtype.newbyteorder("="))
    arr = _contiguous(arr)
    return source, arr, arr.dtype.name


def _contiguous(arr):
    """``arr`` itself when C-contiguous, else a C-contiguous copy (0-d arrays stay 0-d, which
    ``np.ascontiguousarray`` does not do)."""
    arr = np.asarray(arr)
    return arr if arr.flags.c_contiguous else np.array(arr, order="C")


def _cpp_needs_grad(value) -> bool:
    return autograd.needs_grad(value)


def _cpp_wrap(array) -> Tensor:
    return Tensor.from_numpy(array)


def _cpp_record(name, inputs, outputs, cpp_backward, tensor_positions):
    """Record a C++ ``Function<T>::Apply``: ``inputs`` has one entry per argument of ``Forward``
    (the source Tensor, or None), ``outputs`` the new Tensors, ``cpp_backward(douts)`` calls
    ``T::Backward`` and gives one Tensor (or None) per tensor argument or per argument."""
    inputs = list(inputs)
    positions = list(tensor_positions)
    shapes = [tuple(x.shape) if isinstance(x, Tensor) else None for x in inputs]

    def backward(douts):
        got = list(cpp_backward([_contiguous(d) for d in douts]))
        if len(got) == len(positions) and len(got) != len(inputs):
            full = [None] * len(inputs)
            for p, g in zip(positions, got):
                full[p] = g
            got = full
        if len(got) != len(inputs):
            raise HybridArgumentError(
                f"{name}::Backward returned {len(got)} gradient(s) for {len(inputs)} argument(s) of Forward "
                f"({len(positions)} of them tensors)", None,
                "return one BaseTensorPtr (or nullptr) per tensor argument of Forward, in order")
        return [None if shape is None else _input_grad(g, x, True, f"the gradient {name}::Backward returned "
                                                                   f"for argument {pos}")
                for pos, (g, x, shape) in enumerate(zip(got, inputs, shapes))]

    backward.__name__ = name
    autograd.record(inputs, list(outputs), backward, name=name)
