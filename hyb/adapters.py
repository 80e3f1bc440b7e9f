"""What the framework adapters (``hyb.torch``, ``hyb.jax``) share: the checks of the kernel and
its ``scalars=`` option, what the type checker says about one call signature, and the checks of
the gradients a gradient kernel or a Python ``bprop`` returns. Nothing here imports a framework.
"""
from __future__ import annotations

import numpy as np

from .autodiff.reverse import param_kinds
from .dsl import ast as syntax
from .dsl import types
from .dsl.check import check_kernel
from .errors import HybridArgumentError, HybridTypeError
from .runtime.kernel import Kernel


class OpState:
    """The kernel behind one adapter's operator: its backward (``bprop``), the kind of each
    parameter (``"tensor"`` or ``"scalar"``) and the number of outputs. ``adapter`` names the
    function the user called, for the error of a value that is not a kernel."""

    def __init__(self, kernel: Kernel, bprop, scalars, adapter: str):
        if not isinstance(kernel, Kernel):
            raise HybridTypeError(f"{adapter} takes a hyb kernel (`@hyb.hybrid`, `hyb.load(...).name`), not a "
                                  f"{type(kernel).__name__}", None, None)
        self.kernel = kernel
        self.bprop = bprop
        self.kinds = param_kinds(kernel)
        if scalars is not None:
            unknown = set(scalars) - set(kernel.params)
            if unknown:
                raise HybridArgumentError(f"scalars= names {', '.join(sorted(unknown))}, which `{kernel.name}` does not "
                                          f"take", None, f"its parameters: {', '.join(kernel.params)}")
            self.kinds = ["scalar" if p in scalars else "tensor" for p in kernel.params]
        body = kernel.kdef.body
        self.n_out = len(body[-1].values) if body and isinstance(body[-1], syntax.Return) else 1
        self._sigs: dict = {}


class Signature:
    """What the checker says about one call signature: output shapes and dtypes, and which inputs the
    kernel writes or returns (those are copied first: the operator is functional)."""

    def __init__(self, kernel: Kernel, specs: list):
        typed = check_kernel(kernel.kdef, kernel.module, specs)
        self.outputs = [(tuple(typed.tensors[n].shape), types.numpy_dtype(typed.tensors[n].dtype))
                        for n in typed.outputs]
        touched = set(typed.written) | set(typed.outputs)
        self.copy = {i for i, n in enumerate(typed.inputs) if n in touched}


def check_bprop_count(kernel: Kernel, got, n_inputs: int) -> None:
    """A Python ``bprop`` returns one gradient (or None) per input."""
    if len(got) != n_inputs:
        raise HybridArgumentError(f"bprop of `{kernel.name}` returned {len(got)} gradients for "
                                  f"{n_inputs} inputs", None, "return one gradient (or None) per input")


def per_input(got: list, kernel: Kernel, kinds: list, g: Kernel, hint: str) -> list:
    """The gradients the gradient kernel ``g`` returned, one per input of ``kernel`` (None for a
    scalar input where ``g`` returned one per tensor input)."""
    n = len(kernel.params)
    if len(got) == n:
        return got
    tensor_pos = [i for i, k in enumerate(kinds) if k == "tensor"]
    if len(got) != len(tensor_pos):
        raise HybridTypeError(f"the gradient kernel `{g.name}` of `{kernel.name}` returned {len(got)} gradients; "
                              f"`{kernel.name}` takes {n} inputs ({len(tensor_pos)} tensors)", g.kdef.span, hint)
    full = [None] * n
    for i, x in zip(tensor_pos, got):
        full[i] = x
    return full


def gradient_for(d, x: np.ndarray, kernel: Kernel, i: int, g: Kernel) -> np.ndarray:
    """The gradient ``d`` (None: zero) for input ``i`` of ``kernel``, the array ``x``: checked to
    have its shape, in its dtype, C-contiguous."""
    d = np.zeros(x.shape, x.dtype) if d is None else np.asarray(d)
    if d.shape != x.shape:
        raise HybridTypeError(f"the gradient kernel `{g.name}` returned a gradient of shape {d.shape} for "
                              f"`{kernel.params[i]}`, of shape {x.shape}", g.kdef.span,
                              "each gradient has its input's shape")
    return np.require(d, dtype=x.dtype, requirements="C")  # (ascontiguousarray makes 0-d arrays 1-d)
