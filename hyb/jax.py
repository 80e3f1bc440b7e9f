"""hyb kernels as JAX functions, with their derived gradients: ``hyb.jax.op(kernel)``.

    import jax, jax.numpy as jnp, hyb, hyb.jax

    matmul = hyb.jax.op(hyb.load("examples/matmul.hyb").matmul)
    loss = lambda a, b: matmul(a, b).sum()
    jax.jit(jax.grad(loss))(a, b)          # forward and backward run hyb's compiled kernels

``op`` returns a function with a ``jax.custom_vjp``: the forward calls the kernel through
``jax.pure_callback`` on the host CPU (output shapes and dtypes come from hyb's type checker,
without running anything), the backward calls the kernel's gradient kernel
(``kernel.grad()``) or the ``bprop`` given, the same way. It works under ``jax.jit``,
``jax.grad``/``jax.vjp`` and ``jax.vmap`` (a batch runs the kernel once per element); forward
mode (``jax.jvp``) is not defined for a ``custom_vjp``.

Importing ``hyb`` does not import this module (nor jax): ``import hyb.jax``.
"""
from __future__ import annotations

import contextlib
import functools
import warnings

import jax
import numpy as np

from .adapters import OpState, Signature, check_bprop_count, gradient_for, per_input
from .autodiff.reverse import param_kinds
from .dsl import types
from .dsl.check import ArgSpec
from .errors import HybridArgumentError
from .runtime.kernel import Kernel

__all__ = ["op", "param_kinds"]



@contextlib.contextmanager
def _quiet_fork():
    """hyb runs isl's scheduler in a forked child (it runs isl only, then exits); JAX warns about
    any fork of its multithreaded process."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r"os\.fork\(\) was called", category=RuntimeWarning)
        yield


def _weak(a) -> bool:
    if isinstance(a, (bool, int, float)):
        return True
    try:
        return bool(jax.dtypes.is_weakly_typed(a))
    except Exception:
        return False


class _Op(OpState):
    def __init__(self, kernel: Kernel, bprop, scalars):
        super().__init__(kernel, bprop, scalars, "hyb.jax.op")

    # ------------------------------------------------------------ signatures (at trace time)
    def meta(self, args) -> tuple:
        """``(shape, dtype name, weak)`` of each argument: hashable, fixed while tracing."""
        if len(args) != len(self.kinds):
            raise HybridArgumentError(f"`{self.kernel.name}` takes {len(self.kinds)} arguments "
                                      f"({', '.join(self.kernel.params)}), got {len(args)}", self.kernel.kdef.span, None)
        out = []
        for p, k, a in zip(self.kernel.params, self.kinds, args):
            shape, dtype = tuple(np.shape(a)), np.dtype(jax.numpy.result_type(a)).name
            if k == "scalar" and shape != ():
                raise HybridArgumentError(f"`{self.kernel.name}` takes `{p}` as a number, got an array of shape {shape}",
                                          self.kernel.kdef.span, "pass a Python number or a 0-d array")
            out.append((shape, dtype, k == "scalar" and _weak(a)))
        return tuple(out)

    def specs(self, meta) -> list:
        specs = []
        for k, (shape, dtype, weak) in zip(self.kinds, meta):
            if k == "tensor":
                specs.append(ArgSpec(shape, dtype))
            elif dtype == "bool":
                specs.append(ArgSpec((), "bool", True))
            elif weak:
                specs.append(ArgSpec((), types.WEAK_INT if np.dtype(dtype).kind in "iu" else types.WEAK_FLOAT, True))
            else:
                specs.append(ArgSpec((), dtype, True))
        return specs

    def signature(self, meta):
        sig = self._sigs.get(meta)
        if sig is None:
            sig = self._sigs[meta] = Signature(self.kernel, self.specs(meta))
        return sig.outputs, sig.copy

    @staticmethod
    def host(meta, kinds, arrays, copy=()):
        """The callback's NumPy arguments as the kernel takes them: scalars as numbers, arrays
        the kernel writes copied (the callback's arrays are read-only)."""
        out = []
        for i, (k, (_, dtype, weak), a) in enumerate(zip(kinds, meta, arrays)):
            a = np.asarray(a)
            if k == "scalar":
                a = a.item() if weak else a[()]
            elif i in copy:
                a = a.copy()
            out.append(a)
        return out

    # ------------------------------------------------------------ forward
    def forward(self, *args):
        meta = self.meta(args)
        outs, copy = self.signature(meta)
        n = self.n_out

        def callback(*arrays):
            with _quiet_fork():
                got = self.kernel(*self.host(meta, self.kinds, arrays, copy))
            got = got if isinstance(got, tuple) else (got,)
            return tuple(np.asarray(g) for g in got)

        shapes = tuple(jax.ShapeDtypeStruct(s, d) for s, d in outs)
        res = jax.pure_callback(callback, shapes, *args, vmap_method="sequential")
        return res[0] if n == 1 else tuple(res)

    # ------------------------------------------------------------ backward
    def differentiable(self, meta) -> list:
        return [i for i, (k, (_, dtype, _w)) in enumerate(zip(self.kinds, meta))
                if k == "tensor" and types.is_float(dtype)]

    def backward(self, args, outs, douts):
        meta = self.meta(args)
        diff = self.differentiable(meta)
        if callable(self.bprop) and not isinstance(self.bprop, Kernel):
            got = self.bprop(*args, *((outs[0], douts[0]) if self.n_out == 1 else (tuple(outs), tuple(douts))))
            got = tuple(got) if isinstance(got, (tuple, list)) else (got,)
            check_bprop_count(self.kernel, got, len(args))
            return tuple(got[i] if i in diff else None for i in range(len(args)))
        g = self.bprop if isinstance(self.bprop, Kernel) else self.kernel.grad()
        kinds, n = self.kinds, len(args)

        def callback(*arrays):
            inputs = self.host(meta, kinds, arrays[:n])
            with _quiet_fork():
                got = g(*inputs, *[np.asarray(d) for d in arrays[n:]])
            got = list(got) if isinstance(got, tuple) else [got]
            got = per_input(got, self.kernel, kinds, g, "return one gradient per input, or one per tensor input")
            return tuple(gradient_for(got[i], inputs[i], self.kernel, i, g) for i in diff)

        shapes = tuple(jax.ShapeDtypeStruct(meta[i][0], types.numpy_dtype(meta[i][1])) for i in diff)
        douts = [jax.numpy.zeros(o.shape, o.dtype) if d is None else d for o, d in zip(outs, douts)]
        grads = jax.pure_callback(callback, shapes, *args, *douts, vmap_method="sequential") if diff else ()
        result = [None] * n
        for i, d in zip(diff, grads):
            result[i] = d
        return tuple(result)



def op(kernel: Kernel, bprop=None, *, scalars=None):
    """A JAX function that runs ``kernel``, with a ``jax.custom_vjp`` for its gradient.

    Call it with JAX or NumPy arrays (and numbers for scalar parameters); it returns an array, or
    a tuple for several outputs. ``bprop``: the backward, instead of the derived ``kernel.grad()``;
    a hyb kernel taking the inputs then one incoming gradient per output and returning one
    gradient per input (or per tensor input), or a Python function ``bprop(*inputs, out, dout)``
    on JAX arrays returning one gradient (or ``None``) per input. Integer inputs and scalar
    parameters get no gradient (zero). ``scalars``: the names of the parameters that are numbers
    (by default read from the kernel's text)."""
    state = _Op(kernel, bprop, scalars)

    @jax.custom_vjp
    def f(*args):
        return state.forward(*args)

    def fwd(*args):
        out = state.forward(*args)
        return out, (args, out)

    def bwd(res, dout):
        args, out = res
        outs = (out,) if state.n_out == 1 else tuple(out)
        douts = (dout,) if state.n_out == 1 else tuple(dout)
        return state.backward(args, outs, douts)

    f.defvjp(fwd, bwd)

    @functools.wraps(f)
    def call(*args):
        return f(*args)

    call.__name__ = call.__qualname__ = kernel.name
    call.__doc__ = f"`{kernel.name}` ({', '.join(kernel.params)}) as a JAX function (hyb.jax.op)."
    call.kernel = kernel
    return call
