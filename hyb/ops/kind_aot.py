"""``func_type="aot"``: a C/C++ function with MindSpore's aot signature,
``int Name(int nparam, void **params, int *ndims, int64_t **shapes, const char **dtypes, void *stream,
void *extra)``, in a shared library (``"path/lib.so:Name"``) or in a source hyb compiles
(``"path/add.cc:Name"``, ``.cpp``, ``.cxx``, ``.c``; ``.cu`` with nvcc, see ``aot_build.py``).

Beside ``Name`` hyb looks up MindSpore's optional companions in the library:

* ``NameInit(int *ndims, int64_t **shapes, const char **dtypes, AotExtra *extra)``: run once for
  each new combination of input/output shapes, dtypes and attribute values, before the first
  launch with it (inputs then outputs in the arrays).  Workspace it asks for with
  ``extra->SetWorkSpace({bytes, ...})`` comes after the outputs in ``params`` (1-d ``uint8``
  buffers; ``nparam`` counts them); what it stores with ``SetKernelData`` is deleted when hyb
  drops the combination (it keeps the last 8 per operator) or the operator.
* ``NameInferShape(int *ndims, int64_t **shapes, AotExtra *extra)`` returning
  ``std::vector<int64_t>`` (one output) or ``std::vector<std::vector<int64_t>>`` (several): used
  when ``out_shape`` is None.
* ``NameInferType(std::vector<TypeId> type_ids, AotExtra *extra)`` returning ``TypeId`` or
  ``std::vector<TypeId>`` (MindSpore's TypeId numbers): used when ``out_dtype`` is None.

``extra`` is always a valid ``AotExtra`` (``hyb/include/custom_aot_extra.h``) holding the
operator's attributes; hyb's runtime library (``aot_runtime.cc``) implements it and makes every
call into the library, so that a C++ exception (``Attr`` of an unknown name or of the wrong type)
becomes a Python error instead of ending the process.
"""
from __future__ import annotations

import collections
import ctypes
import os
import sys
import threading
import warnings
import weakref

import numpy as np

from .. import context
from ..errors import HybridArgumentError, HybridError, HybridTypeError, HybridUnsupportedError, HybridWarning
from . import aot_build, reginfo
from .values import no_gradient, refused

_HYB_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# MindSpore's TypeId values of the dtypes aot kernels take (also in custom_aot_extra.h).
TYPE_IDS = {"bool": 30, "int8": 32, "int16": 33, "int32": 34, "int64": 35, "uint8": 37, "uint16": 38,
            "uint32": 39, "uint64": 40, "float16": 42, "float32": 43, "float64": 44, "bfloat16": 45}
_DTYPE_OF_ID = {v: k for k, v in TYPE_IDS.items()}
_CONFIGS_KEPT = 8


class AotKernelError(HybridError):
    """An aot kernel (or its Init function) returned a non-zero status; ``code`` holds it."""

    def __init__(self, message, code: int, span=None, hint=None):
        self.code = code
        super().__init__(message, span, hint)


class AotExceptionError(HybridError):
    """A function of an aot library threw a C++ exception other than hyb's attribute errors."""


class AotImpl:
    """An aot operator's library and the per-configuration ``AotExtra`` objects of its calls."""

    param_names = None
    takes_kwargs = True
    static_output_count = None
    static_output_names = None

    def __init__(self, func, caller_dir):
        if isinstance(func, str) and func.isidentifier():
            raise refused(HybridUnsupportedError(
                f'func_type="aot" with the bare name {func!r} is an Ascend C operator (MindSpore finds it in the '
                "Ascend operator package by name), which runs on Huawei Ascend NPUs; hyb does not target them", None,
                'give hyb a CPU kernel: "path/file.cc:Name" (C++ with the aot signature) or a hybrid kernel'))
        if not isinstance(func, str) or ":" not in func:
            raise HybridArgumentError(f'func_type="aot" needs "path/to/lib.so:function", got {func!r}', None,
                                      'e.g. Custom("./add.so:CustomAdd", ..., func_type="aot"), or a source: '
                                      '"./add.cc:CustomAdd"')
        path, _, fname = func.rpartition(":")
        self.name = fname
        self.source = None
        self.cuda = False
        ext = os.path.splitext(path)[1].lower()
        if ext in aot_build.SOURCE_SUFFIXES + aot_build.CUDA_SUFFIXES:
            self.source = find_file(path, caller_dir, "source")
            self.cuda = ext in aot_build.CUDA_SUFFIXES
            if self.cuda and context.device_target() != "GPU":
                raise cuda_on_cpu(self.name, path)
            self.path = aot_build.compile_source(self.source, cuda=self.cuda)
        else:
            self.path = find_file(path, caller_dir, "library")
        shown = path if self.source is None else f"{path} (compiled to {self.path})"
        try:
            lib = ctypes.CDLL(self.path)
        except OSError as e:
            raise HybridArgumentError(f"cannot load aot library {shown}: {e}", None,
                                      "build it with e.g. `g++ -shared -fPIC -o add.so add.cc`, or give the source "
                                      '("./add.cc:CustomAdd") and hyb compiles it') from None
        self._lib = lib
        self.shown = shown
        if not hasattr(lib, fname):
            raise HybridArgumentError(f"aot library {shown} has no function `{fname}`", None,
                                      f'define `extern "C" int {fname}(int nparam, void **params, int *ndims, '
                                      'int64_t **shapes, const char **dtypes, void *stream, void *extra)` '
                                      '(`extern "C"`, so that its name is not mangled)')
        self.kernel = _address(lib, fname)
        self.init = _address(lib, fname + "Init")
        self.infer_shape = _address(lib, fname + "InferShape")
        self.infer_type = _address(lib, fname + "InferType")
        # A library built by `hyb aot` also exports `<func>_last_error`, which says what was wrong.
        self.last_error = getattr(lib, fname + "_last_error", None)
        if self.last_error is not None:
            self.last_error.restype = ctypes.c_char_p
            self.last_error.argtypes = []
        self._configs = collections.OrderedDict()
        # One call at a time per operator: a combination dropped from _configs is freed at once,
        # which must not happen while another thread's launch uses it.
        self._lock = threading.Lock()
        # Kernel data is deleted by code in the kernel's library: the finalizer keeps it loaded.
        self._finalizer = weakref.finalize(self, _free_configs, self._configs, lib)
        self._finalizer.atexit = False

    # ------------------------------------------------------------------ checks when the op is made
    def check_op(self, op):
        """``out_shape``/``out_dtype`` against the companions, attributes against ``NameInit``."""
        lacking = []
        if op.out_shape is None and self.infer_shape is None:
            lacking.append(("out_shape", "InferShape"))
        if op.out_dtype is None and self.infer_type is None:
            lacking.append(("out_dtype", "InferType"))
        if lacking:
            what = " and ".join(a for a, _ in lacking)
            funcs = " nor ".join(f"`{self.name}{f}`" for _, f in lacking)
            raise HybridArgumentError(
                f"aot operator `{self.name}` needs {what}: hyb allocates its outputs, and its library "
                f"{self.shown} has {'neither ' if len(lacking) > 1 else 'no '}{funcs}", None,
                "e.g. out_shape=lambda x, _: x, out_dtype=lambda x, _: x, or define "
                + " / ".join(f"`{self.name}{f}`" for _, f in lacking) + " in the library (see custom_aot_extra.h)")
        for info in op.reg_info:
            if info.attr_names and self.init is None and self.infer_shape is None and self.infer_type is None:
                raise HybridArgumentError(
                    f"aot library {self.shown} has no function `{self.name}Init`, but the operator information of "
                    f"`{self.name}` declares attributes ({', '.join(info.attr_names)}), which an aot kernel reads "
                    f"in `{self.name}Init` through AotExtra", None,
                    f'define `extern "C" int {self.name}Init(int *ndims, int64_t **shapes, const char **dtypes, '
                    'AotExtra *extra)` (#include "custom_aot_extra.h") reading them with extra->Attr<T>("name"), '
                    "or drop the attributes from the operator information")

    # ------------------------------------------------------------------ calls
    def run(self, op, arrays, attrs, declared, target):
        with self._lock:
            return self._run(op, arrays, attrs, declared, target)

    def _run(self, op, arrays, attrs, declared, target):
        if self.cuda and target != "GPU":
            raise cuda_on_cpu(self.name, self.source)
        if target == "GPU":
            raise HybridUnsupportedError(
                f"aot operator `{self.name}`: hyb calls aot kernels on the CPU with host memory; it has no GPU "
                "runtime for CUDA kernels", None, 'build the kernel for the CPU and set device_target="CPU"')
        info = op._info_for(target)
        ins = [np.asarray(a) for a in arrays]  # numbers become 0-d arrays
        ins = [a if a.flags.c_contiguous and a.dtype.isnative
               else np.array(a, dtype=a.dtype.newbyteorder("="), order="C") for a in ins]
        for pos, a in enumerate(ins):
            check_dtype(self.name, f"input {pos}", a.dtype)
        if info is not None and info.attr_only:
            info = None  # attributes only: no inputs or outputs to count
        n_out = len(declared) if declared else (len(info["outputs"]) if info is not None else None)
        if info is not None and n_out != len(info["outputs"]):
            raise HybridArgumentError(
                f"aot operator `{self.name}`: its operator information declares {len(info['outputs'])} outputs "
                f"({', '.join(info.output_names)}) but out_shape/out_dtype give {n_out}", None,
                "give one shape and one dtype per declared output (a tuple of them for several outputs)")
        if declared is None:
            declared = [(None, None)] * (n_out or 1)
        values = {k: v for k, v in attrs.items() if v is not None}
        key = (tuple((a.shape, a.dtype.str) for a in ins), tuple(declared), tuple(sorted(values.items())))
        config = self._configs.get(key)
        if config is None:
            config = self._configure(ins, declared, values, n_out)
            self._configs[key] = config
            while len(self._configs) > _CONFIGS_KEPT:
                _free_extra(self._configs.popitem(last=False)[1].extra)
        else:
            self._configs.move_to_end(key)
        outs = [Guarded(shape, dtype) for shape, dtype in config.specs]
        workspace = [Guarded((size,), np.uint8) for size in config.workspace]
        buffers = ins + [g.array for g in outs + workspace]
        status = _call(runtime().hyb_aot_call_kernel, "kernel", self, self.kernel, len(buffers),
                       *_param_arrays(buffers), None, config.extra, with_status=True)
        for what, guarded in [(f"output {i}", g) for i, g in enumerate(outs)] + \
                [(f"workspace buffer {i}", g) for i, g in enumerate(workspace)]:
            guarded.check(self, what)
        outs = [g.array for g in outs]
        if status != 0:
            detail = self.last_error() if self.last_error is not None else None
            raise AotKernelError(f"aot kernel `{self.name}` in {self.shown} returned {status}"
                                 + (f": {detail.decode(errors='replace')}" if detail else ""), status, None,
                                 "the kernel's own code says what a non-zero status means")
        return outs

    def _configure(self, ins, declared, attrs, n_out):
        """A new AotExtra for these inputs, declared outputs and attributes: the outputs' shapes and
        dtypes (inferred where not declared), then ``NameInit`` and the workspace it asks for."""
        extra = new_extra(self.name, attrs)
        try:
            shapes = [s for s, _ in declared]
            dtypes = [d for _, d in declared]
            several = n_out is not None and n_out > 1
            if any(s is None for s in shapes):
                shapes = self._infer_shapes(ins, extra, several, n_out)
            if any(d is None for d in dtypes):
                dtypes = self._infer_types(ins, extra, several, len(shapes))
            if len(shapes) != len(dtypes):
                raise HybridArgumentError(
                    f"aot operator `{self.name}`: {len(shapes)} output shapes but {len(dtypes)} output dtypes", None,
                    "out_shape / InferShape and out_dtype / InferType must give one entry per output")
            specs = [(tuple(int(n) for n in s), np.dtype(d)) for s, d in zip(shapes, dtypes)]
            for pos, (_, d) in enumerate(specs):
                check_dtype(self.name, f"output {pos}", d)
            workspace = []
            if self.init is not None:
                buffers = ins + [np.empty((0,), d) for _, d in specs]
                _, ndims, shape_ptrs, dtype_names = _param_arrays(buffers, [a.shape for a in ins]
                                                                  + [s for s, _ in specs])
                status = _call(runtime().hyb_aot_call_init, "Init function", self, self.init, ndims, shape_ptrs,
                               dtype_names, extra, with_status=True)
                if status != 0:
                    raise AotKernelError(f"aot function `{self.name}Init` in {self.shown} returned {status}", status,
                                         None, "the library's own code says what a non-zero status means")
                rt = runtime()
                workspace = [int(rt.hyb_aot_workspace_at(extra, i)) for i in range(rt.hyb_aot_workspace_count(extra))]
            return _Config(extra, specs, workspace)
        except BaseException:
            _free_extra(extra)
            raise

    def _infer_shapes(self, ins, extra, several, n_out):
        rt = runtime()
        _, ndims, shape_ptrs, _ = _param_arrays(ins)
        _call(rt.hyb_aot_call_infer_shape, "InferShape function", self, self.infer_shape, int(several), ndims,
              shape_ptrs, extra)
        shapes = []
        for i in range(rt.hyb_aot_shape_count()):
            rank = rt.hyb_aot_shape_rank(i)
            dims = rt.hyb_aot_shape_dims(i)
            shapes.append(tuple(dims[k] for k in range(rank)))
        where = f"`{self.name}InferShape` in {self.shown}"
        if n_out is not None and len(shapes) != n_out:
            raise HybridArgumentError(f"{where} gave {len(shapes)} shapes for {n_out} outputs", None,
                                      "return one shape per output (std::vector<std::vector<int64_t>>)")
        for s in shapes:
            if any(n < 0 for n in s):
                raise HybridArgumentError(
                    f"{where} gave the shape {list(s)}; hyb calls it with the inputs' actual shapes and needs "
                    "every output dimension (no -1 or -2)", None,
                    "compute the output's shape from `shapes` and `ndims`")
        return shapes

    def _infer_types(self, ins, extra, several, n_out):
        rt = runtime()
        ids = (ctypes.c_int * max(1, len(ins)))(*[TYPE_IDS[a.dtype.name] for a in ins])
        _call(rt.hyb_aot_call_infer_type, "InferType function", self, self.infer_type, int(several), ids,
              len(ins), extra)
        got = [rt.hyb_aot_type_at(i) for i in range(rt.hyb_aot_type_count())]
        where = f"`{self.name}InferType` in {self.shown}"
        if len(got) != n_out:
            raise HybridArgumentError(f"{where} gave {len(got)} types for {n_out} outputs", None,
                                      "return one TypeId per output (std::vector<TypeId> for several)")
        unknown = [t for t in got if t not in _DTYPE_OF_ID]
        if unknown:
            raise HybridTypeError(
                f"{where} returned TypeId {unknown[0]}, which is not a tensor dtype aot kernels take", None,
                "return one of the inputs' type_ids, or a value of hyb_aot::kNumberType* (custom_aot_extra.h)")
        return [_DTYPE_OF_ID[t] for t in got]

    def derived_gradient(self, op, *_):
        raise no_gradient(op)


class _Config:
    __slots__ = ("extra", "specs", "workspace")

    def __init__(self, extra, specs, workspace):
        self.extra, self.specs, self.workspace = extra, specs, workspace


GUARD_BYTES = 1 << 16
_CANARY = 0xA5


class Guarded:
    """An output or workspace buffer of an aot kernel with a guard zone after it: a kernel that
    writes past the end of its buffer (MindSpore's memory pool hides such bugs) writes into the
    guard, not into hyb's heap, and :meth:`check` reports it."""

    def __init__(self, shape, dtype):
        dtype = np.dtype(dtype)
        self.nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        self.raw = np.zeros(self.nbytes + GUARD_BYTES, np.uint8)
        self.raw[self.nbytes:] = _CANARY
        self.array = self.raw[:self.nbytes].view(dtype).reshape(shape)

    def check(self, impl, what):
        guard = self.raw[self.nbytes:]
        touched = np.flatnonzero(guard != _CANARY)
        if not touched.size:
            return
        past = int(touched[-1]) + 1
        where = (f"aot kernel `{impl.name}` in {impl.shown} wrote past the end of its {what} "
                 f"({self.nbytes} bytes): at least {past} bytes beyond it")
        if past >= GUARD_BYTES - 64:
            raise HybridError(where + f", to the end of hyb's {GUARD_BYTES}-byte guard zone, so memory after it may "
                              "be corrupted", None, "size the loops by the buffer's shape (ndims/shapes); "
                              "workspace sizes given to SetWorkSpace are in bytes")
        warnings.warn(HybridWarning(where + f"; hyb's {GUARD_BYTES}-byte guard zone took the stray writes and the "
                                    "results are the buffer's own bytes. The kernel has a bug: size its loops by "
                                    "the buffer's shape (workspace sizes given to SetWorkSpace are in bytes)"),
                      stacklevel=4)


def cuda_on_cpu(name, path):
    return HybridUnsupportedError(
        f"aot operator `{name}`: {path} is a CUDA source, which needs device_target GPU; the device target is "
        f"{context.device_target()}", None,
        'write the kernel in C/C++ ("./add.cc:Name") for the CPU, or set hyb.set_context(device_target="GPU") '
        "before making the operator")


def check_dtype(name, what, dtype):
    if np.dtype(dtype).name not in reginfo.DTYPE_NAMES:
        raise HybridTypeError(f"aot operator `{name}`: {what} has dtype {np.dtype(dtype)}, which aot kernels "
                              "do not take", None, "supported: " + ", ".join(reginfo.DTYPE_NAMES))


def _address(lib, name):
    try:
        return ctypes.cast(getattr(lib, name), ctypes.c_void_p).value
    except AttributeError:
        return None


def _param_arrays(buffers, shapes=None):
    """``params``, ``ndims``, ``shapes`` and ``dtypes`` for ``buffers`` (``shapes`` overrides
    theirs).  Each shape array is padded with 1s up to nparam entries: a loop over nparam instead
    of ndims (as in the CPU add.cc example) then multiplies by 1 instead of reading past the end."""
    n = len(buffers)
    shapes = [b.shape for b in buffers] if shapes is None else shapes
    width = max([n, 8] + [len(s) for s in shapes])
    shape_arrays = [(ctypes.c_int64 * width)(*(list(s) + [1] * (width - len(s)))) for s in shapes]
    params = (ctypes.c_void_p * max(1, n))(*[b.ctypes.data for b in buffers])
    ndims = (ctypes.c_int * max(1, n))(*[len(s) for s in shapes])
    shape_ptrs = (ctypes.POINTER(ctypes.c_int64) * max(1, n))(
        *[ctypes.cast(s, ctypes.POINTER(ctypes.c_int64)) for s in shape_arrays])
    shape_ptrs._keep = shape_arrays
    dtypes = (ctypes.c_char_p * max(1, n))(*[b.dtype.name.encode() for b in buffers])
    return params, ndims, shape_ptrs, dtypes


# ---------------------------------------------------------------------- hyb's runtime library
_RUNTIME = None


def runtime():
    """hyb's aot runtime library (``aot_runtime.cc``), built on first use."""
    global _RUNTIME
    if _RUNTIME is None:
        lib = ctypes.CDLL(aot_build.runtime_library())
        P, I, S = ctypes.c_void_p, ctypes.c_int, ctypes.c_char_p
        sigs = {
            "hyb_aot_error": (S, []),
            "hyb_aot_extra_new": (P, [S, I, ctypes.POINTER(S), ctypes.POINTER(S)]),
            "hyb_aot_extra_free": (I, [P]),
            "hyb_aot_workspace_count": (I, [P]),
            "hyb_aot_workspace_at": (ctypes.c_size_t, [P, I]),
            "hyb_aot_call_init": (I, [P, P, P, P, P, ctypes.POINTER(I)]),
            "hyb_aot_call_kernel": (I, [P, I, P, P, P, P, P, P, ctypes.POINTER(I)]),
            "hyb_aot_call_infer_shape": (I, [P, I, P, P, P]),
            "hyb_aot_shape_count": (I, []),
            "hyb_aot_shape_rank": (I, [I]),
            "hyb_aot_shape_dims": (ctypes.POINTER(ctypes.c_int64), [I]),
            "hyb_aot_call_infer_type": (I, [P, I, P, I, P]),
            "hyb_aot_type_count": (I, []),
            "hyb_aot_type_at": (I, [I]),
        }
        for name, (res, args) in sigs.items():
            f = getattr(lib, name)
            f.restype, f.argtypes = res, args
        _RUNTIME = lib
    return _RUNTIME


_NO_ATTR, _ATTR_TYPE = 1, 2


def _call(entry, what, impl, *args, with_status=False):
    """Call a runtime entry point that calls into the library: the status the library's function
    returned (when ``with_status``), or a raised error for an exception it threw."""
    status = ctypes.c_int(0)
    kind = entry(*args, ctypes.byref(status)) if with_status else entry(*args)
    if kind == 0:
        return status.value
    message = runtime().hyb_aot_error().decode(errors="replace")
    if kind == _NO_ATTR:
        raise HybridArgumentError(
            f"{message}; asked for by the {what} of `{impl.name}` in {impl.shown}", None,
            'declare it in the operator information: CustomRegOp(...).attr("name", "required", "all", value=...)')
    if kind == _ATTR_TYPE:
        raise HybridTypeError(f"{message} (in the {what} of `{impl.name}` in {impl.shown})", None,
                              "ask for the attribute's own type (Attr<int64_t> for an int, Attr<float> for a float, "
                              "Attr<bool>, Attr<std::string>, Attr<std::vector<...>> for a list), or change the "
                              "attribute's value_type / value in the operator information")
    raise AotExceptionError(f"aot operator `{impl.name}`: {message}", None,
                            f"the exception came from the library's own code ({impl.shown})")


def encode_attr(value) -> bytes:
    """hyb's text form of an attribute value for the runtime library (see ``decode`` there)."""
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, bool):
        return b"b1" if value else b"b0"
    if isinstance(value, int):
        return f"i{value};".encode()
    if isinstance(value, float):
        return f"f{value!r};".encode()
    if isinstance(value, str):
        data = value.encode()
        return f"s{len(data)}:".encode() + data
    if isinstance(value, (tuple, list)):
        return f"l{len(value)}:".encode() + b"".join(encode_attr(v) for v in value)
    raise HybridTypeError(f"an aot attribute cannot hold {value!r} ({type(value).__name__})", None,
                          "attributes are bools, ints, floats, strings, or lists of them")


def new_extra(name, attrs: dict):
    rt = runtime()
    n = len(attrs)
    names = (ctypes.c_char_p * max(1, n))(*[k.encode() for k in attrs])
    values = (ctypes.c_char_p * max(1, n))(*[encode_attr(v) for v in attrs.values()])
    extra = rt.hyb_aot_extra_new(name.encode(), n, names, values)
    if not extra:
        raise HybridArgumentError(f"aot operator `{name}`: {rt.hyb_aot_error().decode(errors='replace')}", None,
                                  "a string attribute cannot contain a NUL character")
    return extra


def _free_extra(extra):
    if _RUNTIME is not None and extra:
        _RUNTIME.hyb_aot_extra_free(extra)


def _free_configs(configs, lib):
    for config in configs.values():
        _free_extra(config.extra)
    configs.clear()
    del lib  # held until here: the kernel data's destructors are in it


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


def find_file(path, caller_dir, what="library"):
    if os.path.isabs(path):
        candidates = [path]
    else:
        candidates = [os.path.abspath(path), os.path.join(caller_dir, path)]
    for c in candidates:
        if os.path.isfile(c):
            return c
    hint = ("build it first, e.g. `g++ -shared -fPIC -o add.so add.cc`, or give the source (\"./add.cc:Name\"), "
            "or an absolute path") if what == "library" else "give an absolute path, or one relative to the " \
        "working directory or to the calling script"
    raise HybridArgumentError(f"aot {what} {path} not found (looked in: {', '.join(dict.fromkeys(candidates))})",
                              None, hint)

