"""``func_type="aot"``: a C function with MindSpore's aot signature in a shared library,
``int func(int nparam, void **params, int *ndims, int64_t **shapes, const char **dtypes,
void *stream, void *extra)``, called through ctypes."""
from __future__ import annotations

import ctypes
import os
import sys

import numpy as np

from ..errors import HybridArgumentError, HybridError, HybridTypeError, HybridUnsupportedError
from . import reginfo
from .values import no_gradient

_HYB_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class AotKernelError(HybridError):
    """An aot kernel returned a non-zero status; ``code`` holds it."""

    def __init__(self, message, code: int, span=None, hint=None):
        self.code = code
        super().__init__(message, span, hint)


class AotImpl:
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
        self.path = find_library(path, caller_dir)
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
            if b.dtype.name not in reginfo.DTYPE_NAMES:
                what = f"input {pos}" if pos < len(ins) else f"output {pos - len(ins)}"
                raise HybridTypeError(f"aot operator `{self.name}`: {what} has dtype {b.dtype}, which aot kernels "
                                      "do not take", None, "supported: " + ", ".join(reginfo.DTYPE_NAMES))
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
        extra = AotAttrs.make({k: v for k, v in attrs.items() if v is not None})
        code = self.cfunc(n, params, ndims, shapes, dtypes, None,
                          ctypes.cast(ctypes.pointer(extra), ctypes.c_void_p) if extra is not None else None)
        if code != 0:
            detail = self.last_error() if self.last_error is not None else None
            raise AotKernelError(f"aot kernel `{self.name}` in {self.path} returned {code}"
                                 + (f": {detail.decode(errors='replace')}" if detail else ""), code, None,
                                 "the kernel's own code says what a non-zero status means")
        return outs

    def derived_gradient(self, op, *_):
        raise no_gradient(op)


class AotAttrs(ctypes.Structure):
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
        types = [attr_type(v).encode() for v in attrs.values()]
        values = [attr_text(v).encode() for v in attrs.values()]
        n = len(names)
        s = cls(n, (ctypes.c_char_p * n)(*names), (ctypes.c_char_p * n)(*types), (ctypes.c_char_p * n)(*values))
        s._keep = (names, types, values)
        return s


def attr_type(v) -> str:
    if isinstance(v, tuple):
        return "list" + (attr_type(v[0]).capitalize() if v else "Int")
    return {bool: "bool", int: "int", float: "float", str: "str"}.get(type(v), "str")


def attr_text(v) -> str:
    if isinstance(v, tuple):
        return ",".join(attr_text(x) for x in v)
    if isinstance(v, bool):
        return "true" if v else "false"
    return repr(v) if isinstance(v, float) else str(v)


def caller_dir():
    """The directory of the first source file outside hyb on the stack (where a relative aot
    path is looked for after the working directory)."""
    frame = sys._getframe(1)
    while frame is not None:
        fname = os.path.abspath(frame.f_code.co_filename)
        if not fname.startswith(_HYB_DIR + os.sep):
            return os.path.dirname(fname)
        frame = frame.f_back
    return os.getcwd()


def find_library(path, caller_dir):
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
