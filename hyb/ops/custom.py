"""``Custom``: one operator built from a user's implementation, as MindSpore's ``ops.Custom``.

The implementation is one of several kinds (``func_type``):

* ``"hybrid"`` / ``"akg"``: a kernel in hyb's language (a ``@hyb.hybrid`` kernel, a kernel of a
  ``.hyb`` file, or a plain Python function written in the language), compiled by hyb;
* ``"pyfunc"``: a Python function on NumPy arrays;
* ``"aot"``: ``"path/to/lib.so:func"``, a C function with MindSpore's aot signature
  ``int func(int nparam, void **params, int *ndims, int64_t **shapes, const char **dtypes,
  void *stream, void *extra)``, called through ctypes;
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

import ctypes
import inspect
import os
import sys

import numpy as np

from .. import autograd, context
from ..dsl import ast as A
from ..errors import HybridArgumentError, HybridError, HybridTypeError, HybridUnsupportedError
from ..runtime.compiler import prepare_arrays
from ..runtime.kernel import Kernel, hybrid
from ..tensor import Tensor
from . import reginfo as R

FUNC_TYPES = ("hybrid", "akg", "pyfunc", "aot", "tbe", "aicpu")
_ASCEND_ONLY = ("tbe", "aicpu")
_HYB_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class AotKernelError(HybridError):
    """An aot kernel returned a non-zero status; ``code`` holds it."""

    def __init__(self, message, code: int, span=None, hint=None):
        self.code = code
        super().__init__(message, span, hint)


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
            self._impl = _HybridImpl(func, func_type)
        elif func_type == "pyfunc":
            self._impl = _PyfuncImpl(func)
        else:
            self._impl = _AotImpl(func, _caller_dir())
            if out_shape is None or out_dtype is None:
                raise HybridArgumentError(
                    f"aot operator `{self._impl.name}` needs out_shape and out_dtype: hyb allocates its outputs", None,
                    "e.g. out_shape=lambda x, _: x, out_dtype=lambda x, _: x")
        self.name = self._impl.name
        self.reg_info = _select_infos(func, reg_info, func_type)
        for info in self.reg_info:
            self._check_info(info)

    def __repr__(self):
        return f"<hyb.ops.Custom {self.name} ({self.func_type})>"

    @property
    def kernel(self):
        """The hyb ``Kernel`` of a hybrid/akg operator (None for other kinds): ``op.kernel.grad()``
        is the gradient kernel hyb derives for it."""
        return getattr(self._impl, "kernel", None)

    # ------------------------------------------------------------------ operator information
    def _check_info(self, info: R.OpInfo):
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
            _check_order(where, "input", info.input_names, inputs)
        n_out = impl.static_output_count
        if n_out is not None and n_out != len(info["outputs"]):
            raise HybridArgumentError(
                f"{where}: declares {len(info['outputs'])} outputs ({', '.join(info.output_names)}) but "
                f"`{impl.name}` returns {n_out}", None, "declare one output per returned tensor, in order")
        if impl.static_output_names is not None:
            _check_order(where, "output", info.output_names, impl.static_output_names)

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
        target = _device_target()
        info = self._info_for(target)
        inputs, attrs, given_attrs = self._split(args, info)
        arrays = [_to_numpy(a, pos) for pos, a in enumerate(inputs)]
        rows = _matching_rows(self, info, arrays, target)
        declared = self._declared_specs(args, arrays + given_attrs)
        outs = self._impl.run(self, arrays, attrs, declared, target)
        if info is not None:
            _check_output_rows(self, info, rows, outs)
        tensors = [_wrap(o) for o in outs]
        _record(self, list(args), arrays, attrs, outs, tensors)
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
                attrs[a["name"]] = R.convert_attr(a, value, where)
            elif a.get("value") is not None:
                attrs[a["name"]] = R.convert_attr(a, a["value"], where)
            elif a.get("default_value") is not None:
                attrs[a["name"]] = R.convert_attr(a, a["default_value"], where)
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
        shapes = _evaluate(self, "out_shape", self.out_shape, [_shape_of(v) for v in values])
        dtypes = _evaluate(self, "out_dtype", self.out_dtype, [_dtype_of(v) for v in values])
        shapes = None if shapes is None else _as_shapes(self, shapes)
        dtypes = None if dtypes is None else _as_dtypes(self, dtypes)
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
        douts = [_dout_like(d, o) for d, o in zip(douts, outs)]
        if self.bprop is not None:
            return self._run_bprop(call_args, outs, douts)
        grads = self._impl.derived_gradient(self, arrays, attrs, outs, douts)
        return grads + [None] * (len(call_args) - len(grads))

    def _run_bprop(self, call_args, outs, douts):
        fresh = [_wrap(np.array(_to_numpy(a, i))) if _is_array_like(a) else a for i, a in enumerate(call_args)]
        out = [_wrap(o.copy()) for o in outs]
        dout = [_wrap(d) for d in douts]
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
            shape = _shape_of(a)
            if _is_array_like(a) and g.shape != shape:
                raise HybridTypeError(f"{where} returned a gradient of shape {g.shape} for input {pos} "
                                      f"of shape {shape}", None, "each gradient has its input's shape")
            grads.append(g)
        return grads


# ---------------------------------------------------------------------- implementations
class _HybridImpl:
    """A kernel in hyb's language, compiled by hyb."""

    takes_kwargs = False
    optional_names = ()

    def __init__(self, func, func_type):
        if isinstance(func, Kernel):
            self.kernel = func
        elif callable(func) and inspect.isfunction(func):
            self.kernel = hybrid(func)
        else:
            raise HybridArgumentError(
                f'func_type="{func_type}" needs a @hyb.hybrid kernel or a Python function written in hyb\'s '
                f"language, not {type(func).__name__}", None,
                'for a compiled library use func_type="aot" and "path/to/lib.so:function"')
        self.name = self.kernel.name
        self.param_names = list(self.kernel.params)
        returned = _returned(self.kernel.kdef)
        self.static_output_count = None if returned is None else len(returned)
        self.static_output_names = returned
        self._typed = {}

    def _kernel_args(self, op, arrays, attrs):
        """Arguments in the kernel's parameter order: inputs fill the parameters that are not
        attributes, in order; attributes go by name."""
        if not attrs:
            return list(arrays)
        inputs = iter(arrays)
        out = []
        for p in self.param_names:
            if p not in attrs:
                out.append(next(inputs))
            elif attrs[p] is None:
                raise HybridArgumentError(f"attribute `{p}` of Custom op `{op.name}` has no value, and kernel "
                                          f"`{self.name}` needs one", None,
                                          "pass it after the inputs, or give it a default_value")
            else:
                out.append(attrs[p])
        return out

    def typed(self, kargs):
        key = tuple((a.shape, a.dtype.str) if isinstance(a, np.ndarray) else type(a) for a in kargs)
        t = self._typed.get(key)
        if t is None:
            t = self._typed[key] = self.kernel.typed(*kargs)
        return t

    def run(self, op, arrays, attrs, declared, target):
        kargs = self._kernel_args(op, arrays, attrs)
        typed = self.typed(kargs)
        real = [(tuple(typed.tensors[n].shape), np.dtype(typed.tensors[n].dtype)) for n in typed.outputs]
        if declared is not None:
            _compare_specs(op, declared, real)
        # Operators are functional: a kernel that writes an input in place gets a copy.
        written = typed.written
        run_args = [a.copy() if isinstance(a, np.ndarray) and name in written else a
                    for name, a in zip(typed.inputs, kargs)]
        if target == "GPU":
            ck = self.kernel.compile(*run_args, target="cuda")  # the CUDA back end: refused until it is built
            got = ck.run(prepare_arrays(self.kernel, run_args))
        else:
            got = self.kernel(*run_args)
        return list(got) if isinstance(got, tuple) else [got]

    def derived_gradient(self, op, arrays, attrs, outs, douts):
        kargs = self._kernel_args(op, arrays, attrs)
        g = self.kernel.grad()
        got = g(*kargs, *douts)
        got = list(got) if isinstance(got, tuple) else [got]
        by_param = dict(zip(self.param_names, got))
        inputs = [p for p in self.param_names if p not in attrs]
        return [by_param[p] for p in inputs]


class _PyfuncImpl:
    """A Python function on NumPy arrays."""

    static_output_count = None
    static_output_names = None

    def __init__(self, func):
        if not callable(func):
            raise HybridArgumentError(f'func_type="pyfunc" needs a Python function, not {type(func).__name__}',
                                      None, None)
        self.func = func
        self.name = getattr(func, "__name__", type(func).__name__)
        self.param_names, self.optional_names, self.takes_kwargs = _python_params(func)

    def run(self, op, arrays, attrs, declared, target):
        got = self.func(*arrays, **{k: v for k, v in attrs.items() if v is not None})
        got = list(got) if isinstance(got, (tuple, list)) else [got]
        outs = [np.asarray(g.asnumpy() if hasattr(g, "asnumpy") else g) for g in got]
        # Outputs are new arrays: one that is (a view of) an input is copied.
        outs = [o.copy() if any(isinstance(a, np.ndarray) and np.shares_memory(o, a) for a in arrays) else o
                for o in outs]
        if declared is not None:
            _compare_specs(op, declared, [(o.shape, o.dtype) for o in outs], returned=True)
        return outs

    def derived_gradient(self, op, *_):
        raise _no_gradient(op)


class _AotImpl:
    """A C function with MindSpore's aot signature in a shared library."""

    param_names = None
    takes_kwargs = True
    static_output_count = None
    static_output_names = None

    def __init__(self, func, caller_dir):
        if not isinstance(func, str) or ":" not in func:
            raise HybridArgumentError(f'func_type="aot" needs "path/to/lib.so:function", got {func!r}', None,
                                      'e.g. Custom("./add.so:CustomAdd", ..., func_type="aot")')
        path, _, fname = func.rpartition(":")
        self.name = fname
        self.path = _find_library(path, caller_dir)
        try:
            lib = ctypes.CDLL(self.path)
        except OSError as e:
            raise HybridArgumentError(f"cannot load aot library {path}: {e}", None,
                                      "build it with e.g. `g++ --shared -fPIC -o add.so add.cc`") from None
        try:
            self.cfunc = getattr(lib, fname)
        except AttributeError:
            raise HybridArgumentError(f"aot library {path} has no function `{fname}`", None,
                                      'declare it `extern "C"` so that its name is not mangled') from None
        self.cfunc.restype = ctypes.c_int
        self.cfunc.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(ctypes.c_int),
                               ctypes.POINTER(ctypes.POINTER(ctypes.c_int64)), ctypes.POINTER(ctypes.c_char_p),
                               ctypes.c_void_p, ctypes.c_void_p]
        self._lib = lib
        # A library built by `hyb aot` also exports `<func>_last_error`, which says what was wrong.
        self.last_error = getattr(lib, fname + "_last_error", None)
        if self.last_error is not None:
            self.last_error.restype = ctypes.c_char_p
            self.last_error.argtypes = []

    def run(self, op, arrays, attrs, declared, target):
        if target == "GPU":
            raise HybridUnsupportedError(
                f"aot operator `{self.name}`: hyb calls aot kernels on the CPU with host memory; it has no GPU "
                "runtime for CUDA kernels", None, 'build the kernel for the CPU and set device_target="CPU"')
        if any(s is None for s, _ in declared) or any(d is None for _, d in declared):
            raise HybridArgumentError(f"aot operator `{self.name}` needs out_shape and out_dtype", None, None)
        ins = [np.asarray(a) for a in arrays]  # numbers become 0-d arrays
        ins = [a if a.flags.c_contiguous and a.dtype.isnative
               else np.array(a, dtype=a.dtype.newbyteorder("="), order="C") for a in ins]
        outs = [np.zeros(shape, dtype) for shape, dtype in declared]
        buffers = ins + outs
        for pos, b in enumerate(buffers):
            if b.dtype.name not in R.DTYPE_NAMES:
                what = f"input {pos}" if pos < len(ins) else f"output {pos - len(ins)}"
                raise HybridTypeError(f"aot operator `{self.name}`: {what} has dtype {b.dtype}, which aot kernels "
                                      "do not take", None, "supported: " + ", ".join(R.DTYPE_NAMES))
        n = len(buffers)
        # Each shape array is padded with 1s up to nparam entries: a loop over nparam instead of
        # ndims (as in the CPU add.cc example) then multiplies by 1 instead of reading past the end.
        width = max([n, 8] + [b.ndim for b in buffers])
        shape_arrays = [(ctypes.c_int64 * width)(*(list(b.shape) + [1] * (width - b.ndim))) for b in buffers]
        params = (ctypes.c_void_p * n)(*[b.ctypes.data for b in buffers])
        ndims = (ctypes.c_int * n)(*[b.ndim for b in buffers])
        shapes = (ctypes.POINTER(ctypes.c_int64) * n)(
            *[ctypes.cast(s, ctypes.POINTER(ctypes.c_int64)) for s in shape_arrays])
        dtypes = (ctypes.c_char_p * n)(*[b.dtype.name.encode() for b in buffers])
        extra = _AotAttrs.make({k: v for k, v in attrs.items() if v is not None})
        code = self.cfunc(n, params, ndims, shapes, dtypes, None,
                          ctypes.cast(ctypes.pointer(extra), ctypes.c_void_p) if extra is not None else None)
        if code != 0:
            detail = self.last_error() if self.last_error is not None else None
            raise AotKernelError(f"aot kernel `{self.name}` in {self.path} returned {code}"
                                 + (f": {detail.decode(errors='replace')}" if detail else ""), code, None,
                                 "the kernel's own code says what a non-zero status means")
        return outs

    def derived_gradient(self, op, *_):
        raise _no_gradient(op)


class _AotAttrs(ctypes.Structure):
    """What ``extra`` points at when an aot operator has attributes (NULL otherwise)::

        struct HybAttrs { int nattr; const char **names; const char **types; const char **values; };

    Values are text: ``"0.5"``, ``"7"``, ``"true"``, a string as is, a list as ``"1,2,3"``.
    """

    _fields_ = [("nattr", ctypes.c_int), ("names", ctypes.POINTER(ctypes.c_char_p)),
                ("types", ctypes.POINTER(ctypes.c_char_p)), ("values", ctypes.POINTER(ctypes.c_char_p))]

    @classmethod
    def make(cls, attrs: dict):
        if not attrs:
            return None
        names = [k.encode() for k in attrs]
        types = [_attr_type(v).encode() for v in attrs.values()]
        values = [_attr_text(v).encode() for v in attrs.values()]
        n = len(names)
        s = cls(n, (ctypes.c_char_p * n)(*names), (ctypes.c_char_p * n)(*types), (ctypes.c_char_p * n)(*values))
        s._keep = (names, types, values)
        return s


def _attr_type(v) -> str:
    if isinstance(v, tuple):
        return "list" + (_attr_type(v[0]).capitalize() if v else "Int")
    return {bool: "bool", int: "int", float: "float", str: "str"}.get(type(v), "str")


def _attr_text(v) -> str:
    if isinstance(v, tuple):
        return ",".join(_attr_text(x) for x in v)
    if isinstance(v, bool):
        return "true" if v else "false"
    return repr(v) if isinstance(v, float) else str(v)


# ---------------------------------------------------------------------- helpers
def _select_infos(func, reg_info, func_type) -> list:
    """The operator information that applies: ``reg_info`` if given, else the decorator's."""
    if reg_info is None:
        reg_info = getattr(func, "reg_info", None) if func_type != "aot" else None
    if reg_info is None:
        return []
    items = list(reg_info) if isinstance(reg_info, (list, tuple)) else [reg_info]
    infos = [R.normalize_info(i) for i in items]
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


def _check_order(where, what, declared: list, actual: list):
    for i, name in enumerate(declared):
        if name in actual and actual.index(name) != i:
            raise HybridArgumentError(
                f"{where}: {what} {i} is `{name}`, but `{name}` is {what} {actual.index(name)} of the "
                f"implementation ({', '.join(actual)})", None,
                f"declare the {what}s in the implementation's order")


def _returned(kdef: A.KernelDef):
    """The names a kernel returns (its last top-level ``return``; ``""`` for an expression that
    is not a name), or None without one."""
    for stmt in reversed(kdef.body):
        if isinstance(stmt, A.Return):
            return [v.id if isinstance(v, A.Name) else "" for v in stmt.values]
    return None


def _python_params(func):
    """``(names, names with defaults, takes **kwargs)`` of a Python function's parameters;
    ``(None, (), True)`` when they are unknown (no signature, or ``*args``)."""
    try:
        sig = inspect.signature(func)
    except (TypeError, ValueError):
        return None, (), True
    ps = list(sig.parameters.values())
    if any(p.kind == p.VAR_POSITIONAL for p in ps):
        return None, (), True
    named = [p for p in ps if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
    return ([p.name for p in named], {p.name for p in named if p.default is not p.empty},
            any(p.kind == p.VAR_KEYWORD for p in ps))


def _caller_dir():
    """The directory of the first source file outside hyb on the stack (where a relative aot
    path is looked for after the working directory)."""
    frame = sys._getframe(1)
    while frame is not None:
        fname = os.path.abspath(frame.f_code.co_filename)
        if not fname.startswith(_HYB_DIR + os.sep):
            return os.path.dirname(fname)
        frame = frame.f_back
    return os.getcwd()


def _find_library(path, caller_dir):
    if os.path.isabs(path):
        candidates = [path]
    else:
        candidates = [os.path.abspath(path), os.path.join(caller_dir, path)]
    for c in candidates:
        if os.path.isfile(c):
            return c
    raise HybridArgumentError(f"aot library {path} not found (looked in: {', '.join(dict.fromkeys(candidates))})",
                              None, "build it first, e.g. `g++ --shared -fPIC -o add.so add.cc`, or give an "
                              "absolute path")


def _device_target() -> str:
    return context.device_target()


def _is_array_like(a) -> bool:
    return isinstance(a, np.ndarray) or hasattr(a, "asnumpy") or isinstance(a, (list, tuple))


def _to_numpy(a, pos):
    """A call argument as NumPy: an array, or a scalar kept as is (kernels take scalars)."""
    if hasattr(a, "asnumpy"):
        return np.asarray(a.asnumpy())
    if isinstance(a, np.ndarray) or isinstance(a, (bool, int, float, np.generic)):
        return a
    if isinstance(a, (list, tuple)):
        return np.asarray(a)
    raise HybridTypeError(f"argument {pos} of a Custom op is a {type(a).__name__}", None,
                          "pass hyb.Tensor values, NumPy arrays or numbers")


def _wrap(a) -> Tensor:
    """A Tensor over a NumPy array (sharing it: the arrays wrapped here are new)."""
    return Tensor.from_numpy(a)


def _shape_of(v) -> tuple:
    return tuple(np.shape(v)) if not isinstance(v, str) else ()


def _dtype_of(v):
    if isinstance(v, str):
        return str
    if isinstance(v, (np.ndarray, np.generic)):
        return v.dtype
    return np.dtype(type(v)) if isinstance(v, (bool, int, float)) else np.asarray(v).dtype


def _evaluate(op, what, spec, values):
    if spec is None or not callable(spec) or isinstance(spec, (type, np.dtype)):
        return spec
    try:
        inspect.signature(spec).bind(*values)
    except TypeError:
        raise HybridArgumentError(
            f"Custom op `{op.name}`: {what} cannot be called with the {len(values)} arguments of the call", None,
            f"{what} receives one {'shape' if what == 'out_shape' else 'dtype'} per argument of the call") from None
    except ValueError:  # no signature (a builtin): just call it
        pass
    return spec(*values)


def _is_shape(s) -> bool:
    return isinstance(s, (tuple, list)) and all(isinstance(d, (int, np.integer)) and not isinstance(d, bool)
                                                for d in s)


def _as_shapes(op, s) -> list:
    if isinstance(s, (int, np.integer)) and not isinstance(s, bool):
        return [(int(s),)]
    if _is_shape(s):
        return [tuple(int(d) for d in s)]
    if isinstance(s, (tuple, list)) and s and all(_is_shape(x) for x in s):
        return [tuple(int(d) for d in x) for x in s]
    raise HybridArgumentError(f"Custom op `{op.name}`: out_shape gave {s!r}, which is not a shape or a tuple of "
                              "shapes", None, "a shape is a tuple of ints, e.g. (2, 3)")


def _as_dtypes(op, d) -> list:
    items = list(d) if isinstance(d, (tuple, list)) else [d]
    out = []
    for x in items:
        try:
            out.append(np.dtype(x))
        except TypeError:
            raise HybridArgumentError(f"Custom op `{op.name}`: out_dtype gave {x!r}, which is not a dtype", None,
                                      "use hyb.float32, np.float32 or \"float32\"") from None
    return out


def _compare_specs(op, declared, real, returned=False):
    """Declared ``(shape, dtype)`` of each output against the implementation's real ones."""
    made = "returned" if returned else "makes"
    if len(declared) != len(real):
        raise HybridTypeError(f"Custom op `{op.name}` declares {len(declared)} outputs but `{op._impl.name}` "
                              f"{made} {len(real)}", None, "give one out_shape and out_dtype per output")
    for i, ((dshape, ddtype), (rshape, rdtype)) in enumerate(zip(declared, real)):
        if dshape is not None and tuple(dshape) != tuple(rshape):
            raise HybridTypeError(f"Custom op `{op.name}`: out_shape declares {tuple(dshape)} for output {i} but "
                                  f"`{op._impl.name}` {made} shape {tuple(rshape)}", None,
                                  "fix out_shape, or omit it for a hybrid kernel (hyb infers it)")
        if ddtype is not None and np.dtype(ddtype) != np.dtype(rdtype):
            raise HybridTypeError(f"Custom op `{op.name}`: out_dtype declares {np.dtype(ddtype)} for output {i} but "
                                  f"`{op._impl.name}` {made} {np.dtype(rdtype)}", None,
                                  "fix out_dtype, or omit it for a hybrid kernel (hyb infers it)")


def _fits(dtype_name: str, value) -> bool:
    """Whether a call argument fits a row's dtype (``""`` fits anything; a Python number fits
    any dtype of its kind, as NumPy's weak scalars do)."""
    if not dtype_name:
        return True
    if isinstance(value, (np.ndarray, np.generic)):
        return value.dtype.name == dtype_name
    kind = np.dtype(dtype_name).kind
    if isinstance(value, bool):
        return kind == "b"
    if isinstance(value, int):
        return kind in "iu"
    if isinstance(value, float):
        return kind == "f"
    return False


def _describe(value) -> str:
    if isinstance(value, (np.ndarray, np.generic)):
        return value.dtype.name
    return type(value).__name__


def _matching_rows(op, info, arrays, target):
    """The rows of ``info`` the inputs' dtypes fit (None without rows); an error when none do."""
    if info is None or not info["dtype_format"]:
        return None
    rows = [r for r in info.rows() if all(_fits(d, a) for d, a in zip(r, arrays))]
    if not rows:
        got = ", ".join(_describe(a) for a in arrays)
        raise HybridTypeError(
            f"Custom op `{op.name}` does not support inputs of dtype ({got}) on {target}; "
            f"its operator information supports (inputs) -> (outputs):\n{info.describe_rows()}", None,
            "cast the inputs, or add a dtype_format row to the CustomRegOp")
    return rows


def _check_output_rows(op, info, rows, outs):
    n_in = len(info["inputs"])
    if len(outs) != len(info["outputs"]):
        raise HybridTypeError(f"Custom op `{op.name}`: its operator information declares {len(info['outputs'])} "
                              f"outputs but `{op._impl.name}` gave {len(outs)}", None, None)
    if rows is not None and not any(all(not d or d == o.dtype.name for d, o in zip(r[n_in:], outs)) for r in rows):
        got = ", ".join(o.dtype.name for o in outs)
        raise HybridTypeError(
            f"Custom op `{op.name}` gives outputs of dtype ({got}), which no row of its operator information "
            f"for these inputs allows; it supports (inputs) -> (outputs):\n{info.describe_rows()}", None,
            "fix out_dtype or the dtype_format rows")


def _dout_like(d, out):
    """An output's incoming gradient as an array of the output's shape and dtype (zeros for None)."""
    if d is None:
        return np.zeros(out.shape, out.dtype)
    d = np.asarray(d.asnumpy() if hasattr(d, "asnumpy") else d, dtype=out.dtype)
    return np.array(np.broadcast_to(d, out.shape))


def _no_gradient(op):
    return HybridUnsupportedError(
        f'Custom op `{op.name}` (func_type="{op.func_type}") has no bprop, and hyb derives gradients only for '
        "hybrid kernels", None, "pass bprop=... to Custom: bprop(*inputs, out, dout) returns (dx, ...)")


def _record(op, call_args, arrays, attrs, outs, tensors):
    """Put the call on hyb's tape when one of its arguments takes part in a gradient."""
    if not autograd.needs_grad(*call_args):
        return

    def backward(douts):
        return op._backward(call_args, arrays, attrs, outs, list(douts))

    autograd.record(call_args, tensors, backward, name=f"Custom({op.name})")
