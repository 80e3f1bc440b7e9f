"""hyb kernels as PyTorch operators, with their derived gradients: ``hyb.torch.op(kernel)``.

    import torch, hyb, hyb.torch

    matmul = hyb.torch.op(hyb.load("examples/matmul.hyb").matmul)
    a = torch.randn(4, 3, dtype=torch.float64, requires_grad=True)
    c = matmul(a, torch.randn(3, 5, dtype=torch.float64))   # runs hyb's compiled kernel
    c.sum().backward()                                     # runs matmul.grad()

``op`` registers a ``torch.library`` custom operator (``torch.ops.hyb.<name>``) with

* a CPU implementation that hands the tensors' memory to the kernel as NumPy arrays (no copy
  for contiguous CPU tensors; a tensor on another device is copied to the host and back) and
  wraps the NumPy outputs with ``torch.from_numpy`` (no copy either);
* a fake (meta) implementation: the outputs' shapes and dtypes come from hyb's type checker for
  the inputs' shapes and dtypes, without running or compiling anything;
* autograd: the backward runs a second custom operator, ``torch.ops.hyb.<name>_grad``, that calls
  the kernel's gradient kernel (``kernel.grad()``) or the ``bprop`` kernel given.

Importing ``hyb`` does not import this module (nor torch): ``import hyb.torch``.
"""
from __future__ import annotations

import itertools
import re
import threading

import numpy as np
import torch

from .adapters import OpState, Signature, check_bprop_count, gradient_for, per_input
from .autodiff.reverse import param_kinds
from .dsl import types
from .dsl.check import ArgSpec, arg_spec
from .errors import HybridArgumentError
from .runtime.kernel import Kernel

__all__ = ["op", "param_kinds"]

NAMESPACE = "hyb"
_lock = threading.Lock()
_taken: set = set()



# ------------------------------------------------------------------ dtypes
# torch.bfloat16 is ml_dtypes.bfloat16 in NumPy (torch's .numpy() refuses it: its memory is viewed
# as int16 and reinterpreted, both ways).
_DTYPES = {getattr(torch, n): n for n in (
    "bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "float16", "bfloat16", "float32",
    "float64")}
_TORCH = {v: k for k, v in _DTYPES.items()}


def _torch_dtype(np_dtype) -> torch.dtype:
    return _TORCH[np.dtype(np_dtype).name]


def _numpy_dtype(t: torch.Tensor) -> str:
    """The dtype name of a tensor's elements in hyb (bfloat16 needs ml_dtypes)."""
    dt = _DTYPES.get(t.dtype)
    if dt is None:
        raise HybridArgumentError(f"a tensor of dtype {t.dtype} was passed; hyb kernels take bool, int8 ... "
                                  "int64, uint8 ... uint64, float16, bfloat16, float32 and float64", None,
                                  "convert it first, e.g. `x.float()`")
    if dt == "bfloat16":
        types.bfloat16()
    return dt


def _to_numpy(t: torch.Tensor) -> np.ndarray:
    """The tensor's memory as a NumPy array (a view: no copy for a CPU tensor)."""
    t = t.detach()
    if t.device.type != "cpu":
        t = t.cpu()
    dt = _numpy_dtype(t)
    t = t.resolve_conj().resolve_neg()
    if dt == "bfloat16":
        return t.view(torch.int16).numpy().view(types.bfloat16())
    return t.numpy()


def _from_numpy(a: np.ndarray) -> torch.Tensor:
    """A tensor sharing the memory of a NumPy array (bfloat16 through its bits)."""
    if a.dtype.name == "bfloat16":
        return torch.from_numpy(a.view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(a)


def _spec(a) -> ArgSpec:
    if isinstance(a, torch.Tensor):
        # int() of a symbolic size (torch.compile with dynamic shapes) specialises on its value:
        # a hyb kernel is compiled for one signature.
        return ArgSpec(tuple(int(s) for s in a.shape), _numpy_dtype(a))
    return arg_spec(a)


def _device(args) -> torch.device:
    for a in args:
        if isinstance(a, torch.Tensor):
            return a.device
    return torch.device("cpu")


class _Op(OpState):
    """The state behind one registered operator."""

    def __init__(self, kernel: Kernel, bprop, name: str | None, scalars):
        super().__init__(kernel, bprop, scalars, "hyb.torch.op")
        self.name = _unique_name(name or kernel.name)

    # ---------------------------------------------------------------- schemas
    def _params(self):
        names = [_schema_name(p) for p in self.kernel.params]
        return [f"{'Tensor' if k == 'tensor' else 'Scalar'} {n}" for k, n in zip(self.kinds, names)]

    def schema(self) -> str:
        ret = "Tensor" if self.n_out == 1 else "(" + ", ".join(["Tensor"] * self.n_out) + ")"
        return f"({', '.join(self._params())}) -> {ret}"

    def grad_schema(self) -> str:
        douts = [f"Tensor dout{i}" for i in range(self.n_out)]
        return f"({', '.join(self._params() + douts)}) -> Tensor[]"

    # ---------------------------------------------------------------- signatures
    def signature(self, args) -> Signature:
        specs = [_spec(a) for a in args]
        key = tuple(specs)
        sig = self._sigs.get(key)
        if sig is None:
            sig = self._sigs[key] = Signature(self.kernel, specs)
        return sig

    # ---------------------------------------------------------------- forward
    def forward(self, *args):
        sig = self.signature(args)
        arrays = []
        for i, a in enumerate(args):
            if isinstance(a, torch.Tensor):
                a = _to_numpy(a)
                if i in sig.copy:
                    a = a.copy()
            arrays.append(a)
        outs = self.kernel(*arrays)
        outs = list(outs) if isinstance(outs, tuple) else [outs]
        return self._wrap(outs, _device(args), single=self.n_out == 1)

    def forward_fake(self, *args):
        sig = self.signature(args)
        dev = _device(args)
        outs = [torch.empty(shape, dtype=_torch_dtype(dt), device=dev) for shape, dt in sig.outputs]
        return outs[0] if self.n_out == 1 else tuple(outs)

    @staticmethod
    def _wrap(outs, device, single):
        seen = set()
        result = []
        for o in outs:
            o = np.asarray(o)
            if id(o) in seen:  # one array returned twice: outputs must not alias
                o = o.copy()
            seen.add(id(o))
            t = _from_numpy(o)
            result.append(t if device.type == "cpu" else t.to(device))
        return result[0] if single else tuple(result)

    # ---------------------------------------------------------------- gradient
    def differentiable(self, args) -> list:
        """Positions of the inputs that get a gradient: floating-point tensors."""
        return [i for i, a in enumerate(args) if isinstance(a, torch.Tensor) and a.is_floating_point()]

    def grad_kernel(self):
        return self.bprop if isinstance(self.bprop, Kernel) else self.kernel.grad()

    def backward_impl(self, *args):
        n = len(self.kernel.params)
        inputs, douts = args[:n], args[n:]
        arrays = [_to_numpy(a) if isinstance(a, torch.Tensor) else a for a in inputs]
        darrays = [_to_numpy(d) for d in douts]
        g = self.grad_kernel()
        got = g(*arrays, *darrays)
        got = list(got) if isinstance(got, tuple) else [got]
        got = per_input(got, self.kernel, self.kinds, g, "return one gradient per input, or one per tensor input, "
                        "in the inputs' order")
        result = []
        for i in self.differentiable(inputs):
            x = arrays[i]
            d = gradient_for(got[i], x, self.kernel, i, g)
            if d is x or np.shares_memory(d, x):
                d = d.copy()
            t = _from_numpy(d)
            result.append(t if inputs[i].device.type == "cpu" else t.to(inputs[i].device))
        return result

    def backward_fake(self, *args):
        inputs = args[:len(self.kernel.params)]
        return [torch.empty(inputs[i].shape, dtype=inputs[i].dtype, device=inputs[i].device)
                for i in self.differentiable(inputs)]



def _schema_name(p: str) -> str:
    return p + "_" if p in ("self", "out", "dout") or re.fullmatch(r"dout\d+", p) else p


def _unique_name(base: str) -> str:
    base = re.sub(r"\W", "_", base)
    with _lock:
        for k in itertools.chain([None], itertools.count(1)):
            name = base if k is None else f"{base}_{k}"
            if all(n not in _taken and not hasattr(getattr(torch.ops, NAMESPACE), n) for n in (name, name + "_grad")):
                _taken.update((name, name + "_grad"))
                return name
    raise AssertionError("unreachable")


def op(kernel: Kernel, bprop=None, *, name: str | None = None, scalars=None):
    """Register ``kernel`` as the PyTorch custom operator ``torch.ops.hyb.<name>`` and return it.

    ``bprop``: the backward, instead of the derived ``kernel.grad()``; either a hyb kernel that
    takes the inputs then one incoming gradient per output and returns one gradient per input
    (or per tensor input), like ``kernel.grad()``, or a Python function ``bprop(*inputs, out,
    dout)`` on torch tensors returning a tuple of one gradient (or ``None``) per input
    (MindSpore's convention; ``out`` and ``dout`` are tuples for several outputs).

    ``name``: the operator's name (default: the kernel's, with ``_1``, ``_2``, ... appended if
    taken). ``scalars``: names of the parameters that are numbers (``Scalar`` in the schema);
    by default read from the kernel's text (see :func:`param_kinds`).

    The result is a ``torch.library.CustomOpDef``: call it with tensors (and Python numbers
    for scalar parameters); ``.kernel`` is the hyb kernel and ``.grad_op`` the gradient
    operator."""
    state = _Op(kernel, bprop, name, scalars)
    qual = f"{NAMESPACE}::{state.name}"

    def forward(*args):
        return state.forward(*args)

    custom = torch.library.custom_op(qual, forward, mutates_args=(), schema=state.schema())
    custom.register_fake(lambda *args: state.forward_fake(*args))

    def grad_forward(*args):
        return state.backward_impl(*args)

    grad_op = None
    if not (callable(bprop) and not isinstance(bprop, Kernel)):
        grad_op = torch.library.custom_op(qual + "_grad", grad_forward, mutates_args=(), schema=state.grad_schema())
        grad_op.register_fake(lambda *args: state.backward_fake(*args))

    def setup_context(ctx, inputs, output):
        outs = (output,) if state.n_out == 1 else tuple(output)
        tensors = [a for a in inputs if isinstance(a, torch.Tensor)]
        ctx.save_for_backward(*tensors, *(outs if grad_op is None else ()))
        ctx.numbers = [None if isinstance(a, torch.Tensor) else a for a in inputs]
        ctx.n_tensors = len(tensors)
        ctx.out_meta = [(o.shape, o.dtype, o.device) for o in outs]

    def backward(ctx, *douts):
        saved = ctx.saved_tensors
        it = iter(saved[:ctx.n_tensors])
        inputs = [next(it) if x is None else x for x in ctx.numbers]
        if grad_op is None:
            outs = saved[ctx.n_tensors:]
            douts = [d if d is not None else torch.zeros(shape, dtype=dtype, device=device)
                     for d, (shape, dtype, device) in zip(douts, ctx.out_meta)]
            got = bprop(*inputs, *((outs[0], douts[0]) if state.n_out == 1 else (tuple(outs), tuple(douts))))
            if not isinstance(got, (tuple, list)):
                got = (got,)
            check_bprop_count(state.kernel, got, len(inputs))
            return tuple(None if not isinstance(a, torch.Tensor) or not a.is_floating_point() else g
                         for a, g in zip(inputs, got))
        douts = [d if d is not None else torch.zeros(shape, dtype=dtype, device=device)
                 for d, (shape, dtype, device) in zip(douts, ctx.out_meta)]
        grads = grad_op(*inputs, *douts)
        result = [None] * len(inputs)
        for i, g in zip(state.differentiable(inputs), grads):
            result[i] = g
        return tuple(result)

    custom.register_autograd(backward, setup_context=setup_context)
    custom.kernel = kernel
    custom.grad_op = grad_op
    custom.hyb_name = state.name
    return custom
