"""``Custom``: one operator built from a user's implementation, as MindSpore's ``ops.Custom``.

The implementation is one of several kinds (``func_type``):

* ``"hybrid"`` / ``"akg"`` (``kind_hybrid.py``): a kernel in hyb's language (a ``@hyb.hybrid`` kernel, a kernel of a
  ``.hyb`` file, or a plain Python function written in the language), compiled by hyb;
* ``"pyfunc"`` (``kind_pyfunc.py``): a Python function on NumPy arrays;
* ``"aot"`` (``kind_aot.py``): ``"path/to/lib.so:func"`` or a source hyb compiles (``"path/add.cc:func"``),
  a C function with MindSpore's aot signature ``int func(int nparam, void **params, int *ndims,
  int64_t **shapes, const char **dtypes, void *stream, void *extra)`` and its optional ``funcInit``,
  ``funcInferShape`` and ``funcInferType``;
* ``"tbe"`` / ``"aicpu"``: Ascend-only kinds, refused.

A call converts its arguments (``hyb.Tensor``, NumPy arrays, scalars) to NumPy, checks them
against the operator information for the current device target (``hyb/ops/reginfo.py``),
works out the outputs' shapes and dtypes (declared by ``out_shape``/``out_dtype``, inferred
from a hybrid kernel, or both and compared), runs the implementation and returns
``hyb.Tensor`` results.  When an argument takes part in a gradient computation the call
records itself on hyb's tape with a backward function: the user's ``bprop`` if given, else
the kernel's derived gradient (``Kernel.grad()``) for hybrid kernels.
"""
from __future__ import annotations

import numpy as np

from .. import autograd, context
from ..errors import HybridArgumentError, HybridTypeError, HybridUnsupportedError
from . import reginfo
from .kind_aot import AotImpl, AotKernelError, caller_dir
from .kind_hybrid import HybridImpl
from .kind_pyfunc import PyfuncImpl
from .values import (as_dtypes, as_shapes, check_output_rows, dout_like, dtype_of, evaluate, is_array_like,
                     matching_rows, shape_of, to_numpy, wrap)

__all__ = ["Custom", "AotKernelError", "FUNC_TYPES"]


FUNC_TYPES = ("hybrid", "akg", "pyfunc", "aot", "tbe", "aicpu")
_ASCEND_ONLY = ("tbe", "aicpu")


class Custom:
    """A custom operator (MindSpore's ``ops.Custom``).

    ``func``: the implementation (see the module docstring for each ``func_type``).
    ``out_shape``, ``out_dtype``: the outputs' shapes and dtypes, either fixed (a shape, a
    dtype, or a tuple of them for several outputs) or callables that receive the shapes
    (tuples) / dtypes (NumPy dtypes) of the call's arguments.  Hybrid kernels may omit them:
    hyb infers them from the kernel; if given, they must agree with it.
    ``bprop``: ``bprop(*inputs, out, dout)`` returning a tuple with one gradient per input.
    ``reg_info``: operator information (``CustomRegOp(...).get_op_info()``, or a list of them,
    at most one per target); it takes precedence over ``@custom_info_register``.
    """

    def __init__(self, func, out_shape=None, out_dtype=None, func_type="hybrid", bprop=None, reg_info=None):
        if func_type not in FUNC_TYPES:
            raise HybridArgumentError(f"unknown func_type {func_type!r}", None,
                                      "func_type is one of " + ", ".join(repr(t) for t in FUNC_TYPES))
        if func_type in _ASCEND_ONLY:
            raise HybridUnsupportedError(
                f'func_type="{func_type}" operators run on Huawei Ascend hardware, which hyb does not target', None,
                'write the operator as func_type="hybrid" (compiled by hyb), "pyfunc" (NumPy) or "aot" (a C library)')
        if bprop is not None and not callable(bprop):
            raise HybridArgumentError(f"bprop must be a function, not {type(bprop).__name__}", None,
                                      "def bprop(*inputs, out, dout): return (dx, ...)")
        self.func = func
        self.func_type = func_type
        self.out_shape = out_shape
        self.out_dtype = out_dtype
        self.bprop = bprop
        if func_type in ("hybrid", "akg"):
            self._impl = HybridImpl(func, func_type)
        elif func_type == "pyfunc":
            self._impl = PyfuncImpl(func)
        else:
            self._impl = AotImpl(func, caller_dir())
        self.name = self._impl.name
        self.reg_info = select_infos(func, reg_info, func_type)
        for info in self.reg_info:
            self._check_info(info)
        if func_type == "aot":
            self._impl.check_op(self)  # out_shape/out_dtype or InferShape/InferType; attributes and Init

    def __repr__(self):
        return f"<hyb.ops.Custom {self.name} ({self.func_type})>"

    @property
    def kernel(self):
        """The hyb ``Kernel`` of a hybrid/akg operator (None for other kinds): ``op.kernel.grad()``
        is the gradient kernel hyb derives for it."""
        return getattr(self._impl, "kernel", None)

    # ------------------------------------------------------------------ operator information
    def _check_info(self, info: reginfo.OpInfo):
        """The information's inputs, outputs and attributes against the implementation."""
        where = f"operator information of Custom op `{self.name}`"
        if info["target"] is not None:
            where += f" for {info['target']}"
        impl = self._impl
        attrs = info.attr_names
        params = impl.param_names  # None when the implementation's parameters are unknown (aot, *args)
        if params is not None:
            unknown = [a for a in attrs if a not in params and not impl.takes_kwargs]
            if unknown:
                raise HybridArgumentError(
                    f"{where}: attribute `{unknown[0]}` is not a parameter of `{impl.name}` "
                    f"({', '.join(params) or 'no parameters'})", None,
                    "attribute names must be the names of the implementation's scalar parameters")
            inputs = [p for p in params if p not in attrs]
            required = [p for p in inputs if p not in impl.optional_names]
            if not len(required) <= len(info["inputs"]) <= len(inputs):
                raise HybridArgumentError(
                    f"{where}: declares {len(info['inputs'])} inputs ({', '.join(info.input_names)}) but "
                    f"`{impl.name}` takes {len(inputs)} ({', '.join(inputs) or 'none'})"
                    + (f" besides its attributes {', '.join(attrs)}" if attrs else ""), None,
                    "declare one input per parameter, in the implementation's order")
            check_order(where, "input", info.input_names, inputs)
        n_out = impl.static_output_count
        if n_out is not None and n_out != len(info["outputs"]):
            raise HybridArgumentError(
                f"{where}: declares {len(info['outputs'])} outputs ({', '.join(info.output_names)}) but "
                f"`{impl.name}` returns {n_out}", None, "declare one output per returned tensor, in order")
        if impl.static_output_names is not None:
            check_order(where, "output", info.output_names, impl.static_output_names)

    def _info_for(self, target: str):
        """The operator information that applies on ``target`` (None when there is none)."""
        if not self.reg_info:
            return None
        for info in self.reg_info:
            if info["target"] == target:
                return info
        for info in self.reg_info:
            if info["target"] is None:
                return info
        have = ", ".join(sorted(i["target"] for i in self.reg_info))
        raise HybridArgumentError(
            f"Custom op `{self.name}` has operator information for {have} only; the device target is {target}",
            None, f'register a CustomRegOp with .target("{target}") or set hyb.set_context(device_target=...)')

    # ------------------------------------------------------------------ calling
    def __call__(self, *args):
        target = device_target()
        info = self._info_for(target)
        inputs, attrs, given_attrs = self._split(args, info)
        arrays = [to_numpy(a, pos) for pos, a in enumerate(inputs)]
        rows = matching_rows(self, info, arrays, target)
        declared = self._declared_specs(args, arrays + given_attrs)
        outs = self._impl.run(self, arrays, attrs, declared, target)
        if info is not None:
            check_output_rows(self, info, rows, outs)
        tensors = [wrap(o) for o in outs]
        record(self, list(args), arrays, attrs, outs, tensors)
        return tensors[0] if len(tensors) == 1 else tuple(tensors)

    def _split(self, args, info):
        """The call's inputs, every attribute's value (by name; None for an optional attribute
        without one) and the values of the attributes the call passed.

        Attributes come from the call's arguments after the inputs, in the information's order,
        else from the information's ``value``, else from its ``default_value``."""
        if info is None:
            return list(args), {}, []
        n_in, declared = len(info["inputs"]), info["attr"]
        if not n_in <= len(args) <= n_in + len(declared):
            raise HybridArgumentError(
                f"Custom op `{self.name}` takes {n_in} inputs ({', '.join(info.input_names)})"
                + (f", then optionally its attributes ({', '.join(info.attr_names)})" if declared else "")
                + f"; got {len(args)} arguments", None, None)
        given = list(args[n_in:])
        attrs = {}
        for pos, a in enumerate(declared):
            where = f"attribute `{a['name']}` of Custom op `{self.name}`"
            if pos < len(given):
                value = given[pos]
                if hasattr(value, "asnumpy"):
                    value = value.asnumpy()
                if isinstance(value, np.ndarray) and value.ndim == 0:
                    value = value.item()
                attrs[a["name"]] = reginfo.convert_attr(a, value, where)
            elif a.get("value") is not None:
                attrs[a["name"]] = reginfo.convert_attr(a, a["value"], where)
            elif a.get("default_value") is not None:
                attrs[a["name"]] = reginfo.convert_attr(a, a["default_value"], where)
            elif a["param_type"] == "required":
                raise HybridArgumentError(f"{where} is required and has no value", None,
                                          "pass it after the inputs, or give it a value or default_value in the "
                                          "operator information")
            else:
                attrs[a["name"]] = None
        return list(args[:n_in]), attrs, [attrs[a["name"]] for a in declared[:len(given)]]

    def _declared_specs(self, args, values):
        """``[(shape, dtype)]`` from ``out_shape``/``out_dtype`` (either may be None: not declared)."""
        if self.out_shape is None and self.out_dtype is None:
            return None
        shapes = evaluate(self, "out_shape", self.out_shape, [shape_of(v) for v in values])
        dtypes = evaluate(self, "out_dtype", self.out_dtype, [dtype_of(v) for v in values])
        shapes = None if shapes is None else as_shapes(self, shapes)
        dtypes = None if dtypes is None else as_dtypes(self, dtypes)
        if shapes is not None and dtypes is not None and len(shapes) != len(dtypes):
            raise HybridArgumentError(
                f"Custom op `{self.name}`: out_shape gives {len(shapes)} outputs but out_dtype gives {len(dtypes)}",
                None, "give one shape and one dtype per output")
        n = len(shapes) if shapes is not None else len(dtypes)
        return [(shapes[i] if shapes is not None else None, dtypes[i] if dtypes is not None else None)
                for i in range(n)]

    # ------------------------------------------------------------------ gradients
    def _backward(self, call_args, arrays, attrs, outs, douts):
        """Gradients of the call's arguments given the outputs' gradients ``douts``."""
        douts = [dout_like(d, o) for d, o in zip(douts, outs)]
        if self.bprop is not None:
            return self._run_bprop(call_args, outs, douts)
        grads = self._impl.derived_gradient(self, arrays, attrs, outs, douts)
        return grads + [None] * (len(call_args) - len(grads))

    def _run_bprop(self, call_args, outs, douts):
        fresh = [wrap(np.array(to_numpy(a, i))) if is_array_like(a) else a for i, a in enumerate(call_args)]
        out = [wrap(o.copy()) for o in outs]
        dout = [wrap(d) for d in douts]
        if len(outs) == 1:
            got = self.bprop(*fresh, out[0], dout[0])
        else:
            got = self.bprop(*fresh, tuple(out), tuple(dout))
        where = f"bprop of Custom op `{self.name}`"
        if not isinstance(got, (tuple, list)):
            raise HybridTypeError(f"{where} returned a {type(got).__name__}, not a tuple of input gradients", None,
                                  "return a tuple with one gradient per input, e.g. `return (dx,)`")
        if len(got) != len(call_args):
            raise HybridArgumentError(f"{where} returned {len(got)} gradients for {len(call_args)} inputs", None,
                                      "return one gradient per input, in the inputs' order")
        grads = []
        for pos, (g, a) in enumerate(zip(got, call_args)):
            if g is None:
                grads.append(None)
                continue
            g = np.asarray(g.asnumpy() if hasattr(g, "asnumpy") else g)
            shape = shape_of(a)
            if is_array_like(a) and g.shape != shape:
                raise HybridTypeError(f"{where} returned a gradient of shape {g.shape} for input {pos} "
                                      f"of shape {shape}", None, "each gradient has its input's shape")
            grads.append(g)
        return grads


def select_infos(func, reg_info, func_type) -> list:
    """The operator information that applies: ``reg_info`` if given, else the decorator's."""
    if reg_info is None:
        reg_info = getattr(func, "reg_info", None) if func_type != "aot" else None
    if reg_info is None:
        return []
    items = list(reg_info) if isinstance(reg_info, (list, tuple)) else [reg_info]
    infos = [reginfo.normalize_info(i) for i in items]
    seen = {}
    for info in infos:
        t = info["target"]
        if t in seen:
            raise HybridArgumentError(
                f"operator information for target {t or '(any)'} is given twice "
                f"(`{seen[t]['op_name']}` and `{info['op_name']}`)", None,
                "an operator has one registration per target; merge the dtype_format rows into one")
        seen[t] = info
    return infos


def check_order(where, what, declared: list, actual: list):
    for i, name in enumerate(declared):
        if name in actual and actual.index(name) != i:
            raise HybridArgumentError(
                f"{where}: {what} {i} is `{name}`, but `{name}` is {what} {actual.index(name)} of the "
                f"implementation ({', '.join(actual)})", None,
                f"declare the {what}s in the implementation's order")


def device_target() -> str:
    return context.device_target()


def record(op, call_args, arrays, attrs, outs, tensors):
    """Put the call on hyb's tape when one of its arguments takes part in a gradient."""
    if not autograd.needs_grad(*call_args):
        return

    def backward(douts):
        return op._backward(call_args, arrays, attrs, outs, list(douts))

    autograd.record(call_args, tensors, backward, name=f"Custom({op.name})")
