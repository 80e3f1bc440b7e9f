"""The CUDA target: a compiled kernel whose code is CUDA C, run through pycuda.

Compiling for ``target="cuda"`` needs neither pycuda nor a GPU: the CUDA C source
(``inspect("cuda")``) and its PTX (``inspect("ptx")``, through the local ``nvcc``) are made
without them.  Running needs pycuda (imported on the first run) and a GPU; without either a
:class:`~hyb.errors.HybridUnsupportedError` says which is missing.

Arguments: NumPy arrays are copied to the device and outputs copied back (arrays written in
place are updated); pycuda ``GPUArray``s and objects with ``__cuda_array_interface__`` are
used in place, and then the outputs the kernel makes come back as ``GPUArray``s.
"""
from __future__ import annotations

import functools
import os
import shutil
import subprocess
import tempfile

import numpy as np

from ..codegen import abi
from ..codegen import cuda as cuda_codegen
from ..dsl import stages
from ..dsl import tir
from ..dsl import types
from ..dsl.check import arg_spec
from ..errors import HybridArgumentError, HybridError, HybridUnsupportedError
from ..target import cuda_device
from .arguments import check_in_place, prepare_arrays
from .compiler import STAGES, CompiledKernel
from .pipeline import emit_warnings, middle_end
from .sites import site_error

CUDA_STAGES = stages.names("cuda")
PTX_ARCH = cuda_device().arch  # the architecture inspect("ptx") compiles for


def _is_device_array(a) -> bool:
    return hasattr(a, "__cuda_array_interface__") or (hasattr(a, "gpudata") and hasattr(a, "shape"))


def _device_standin(a) -> np.ndarray:
    """A zero-byte NumPy array with the shape and dtype of a device array (for the signature)."""
    if hasattr(a, "__cuda_array_interface__"):
        cai = a.__cuda_array_interface__
        shape, dtype = tuple(cai["shape"]), np.dtype(cai["typestr"])
    else:
        shape, dtype = tuple(a.shape), np.dtype(a.dtype)
    return np.lib.stride_tricks.as_strided(np.zeros(1, dtype), shape, (0,) * len(shape))


def call(kernel, args, target="cuda"):
    """Kernel.__call__ for the CUDA target: device arrays are taken as they are."""
    if not any(_is_device_array(a) for a in args):
        arrays = prepare_arrays(kernel, args)
        return kernel._compiled(arrays, target).run(arrays)
    standins = [_device_standin(a) if _is_device_array(a) else a for a in args]
    arrays = prepare_arrays(kernel, standins)
    ck = kernel._compiled(arrays, target)
    real = [a if _is_device_array(a) else arr for a, arr in zip(args, arrays)]
    return ck.run(real)


class CudaCompiledKernel(CompiledKernel):
    """CUDA C for one kernel and one signature; pycuda compiles and runs it on first use."""

    target = "cuda"

    def __init__(self, typed: tir.TypedKernel, specs: list, options):
        self.typed = typed
        self.specs = list(specs)
        self.options = options
        self.name = typed.name
        self.target_machine = cuda_device()
        self._middle = middle_end(typed, options, self.target_machine)
        emit_warnings(self._middle.warnings)
        self._stages: dict = {}
        self._asm = None
        self.generated = cuda_codegen.generate(self._middle.code, fastmath=options.fastmath)
        self._stages["cuda"] = self.generated.source
        self.check_sites = self.generated.sites
        self.buffers = self.generated.buffers
        self._written = typed.written
        self._kinds = [typed.tensors[n].kind for n in typed.inputs]
        made = [n for n in self.buffers if n not in typed.inputs]
        self._made_names = made
        # the buffers to make, as the code has them (a stage may have reshaped a temporary)
        code_tensors = self._middle.code.kernel.tensors
        self.made_tensors = [code_tensors.get(n) or typed.tensors[n] for n in made]
        self._out_index = [typed.inputs.index(n) if n in typed.inputs else -(made.index(n) + 1)
                           for n in typed.outputs]
        self._module = None
        self._functions: dict = {}

    def inspect(self, stage: str = "loops") -> str:
        """As :meth:`CompiledKernel.inspect`, with ``"cuda"`` (the CUDA C) and ``"ptx"`` (nvcc's PTX
        for ``sm_90``) in place of the LLVM stages."""
        if stage == "cuda":
            return self._stages["cuda"]
        if stage == "ptx":
            if "ptx" not in self._stages:
                self._stages["ptx"] = nvcc_ptx(self._stages["cuda"], self.generated.nvcc_options)
            return self._stages["ptx"]
        if stage in STAGES and stage not in CUDA_STAGES:  # the CPU's own stages
            raise HybridUnsupportedError(f"inspect({stage!r}): kernel `{self.name}` was compiled for target "
                                         "\"cuda\"", None, "its stages are: " + ", ".join(CUDA_STAGES))
        if stage not in STAGES:
            raise HybridArgumentError(f"unknown stage {stage!r}", None, "choose one of: " + ", ".join(CUDA_STAGES))
        return super().inspect(stage)

    def __repr__(self):
        sig = ", ".join(str(s) for s in self.specs)
        return f"<CompiledKernel {self.name}({sig}) target=cuda>"

    def _repr_html_(self) -> str:
        """In a notebook: the stages as tabs, the CUDA C in place of the LLVM ones."""
        import html as _html

        from . import html as html_view
        panels = []
        for stage in stages.tabs("cuda"):
            try:
                inner = f"<pre>{html_view._highlighted(self.inspect(stage), stage)}</pre>"
            except HybridError as e:
                inner = f'<pre style="color:#b00">{_html.escape(e.render())}</pre>'
            panels.append((stage, inner))
        sig = ", ".join(_html.escape(str(s)) for s in self.specs)
        return html_view.tabs(f"<b>CompiledKernel</b> <code>{_html.escape(self.name)}({sig})</code> (CUDA)", panels)

    # ------------------------------------------------------------ running
    def __call__(self, *args):
        if any(_is_device_array(a) for a in args):
            standins = [_device_standin(a) if _is_device_array(a) else a for a in args]
            arrays = prepare_arrays(self.typed, standins)
            real = [a if _is_device_array(a) else arr for a, arr in zip(args, arrays)]
        else:
            arrays = real = prepare_arrays(self.typed, args)
        specs = [arg_spec(a) for a in arrays]
        if specs != self.specs:
            got = ", ".join(str(s) for s in specs)
            want = ", ".join(str(s) for s in self.specs)
            raise HybridArgumentError(f"kernel `{self.name}` was compiled for ({want}) but called with ({got})",
                                      self.typed.span, "call the Kernel itself: it compiles once per signature")
        return self.run(real)

    def _load(self):
        if self._module is None:
            driver()  # a current context (or the error saying what is missing)
            from pycuda.compiler import SourceModule
            self._module = SourceModule(self._stages["cuda"], options=self.generated.nvcc_options, no_extern_c=True)
            self._functions = {}
        return self._module

    def _function(self, name):
        f = self._functions.get(name)
        if f is None:
            f = self._functions[name] = self._load().get_function(name)
        return f

    def run(self, arrays: list):
        drv = driver()
        self._load()
        k = self.typed
        if self._written & set(k.inputs) and not any(_is_device_array(a) for a in arrays):
            check_in_place(k, arrays, self._written)
        keep = []  # device allocations alive until the launches are done
        pointers = []
        params = []
        copy_back = []  # (caller's numpy array, device allocation)
        any_device = False
        for name, kind, a in zip(k.inputs, self._kinds, arrays):
            t = k.tensors[name]
            if kind == "param":
                dt = types.concrete(t.dtype)
                if dt == "bfloat16":  # its 16 bits (pycuda packs NumPy's own scalar types only)
                    params.append(np.array(a, dtype=types.bfloat16()).view(np.uint16)[()])
                else:
                    params.append(np.array(a, dtype="uint8" if dt == "bool" else dt)[()])
                continue
            if _is_device_array(a):
                any_device = True
                pointers.append(_device_pointer(a, t))
                continue
            host = np.ascontiguousarray(a)
            alloc = drv.mem_alloc(max(1, host.nbytes))
            keep.append(alloc)
            if host.nbytes:
                drv.memcpy_htod(alloc, host)
            pointers.append(int(alloc))
            if name in self._written:
                copy_back.append((a, alloc, host))
        made = []
        for t in self.made_tensors:
            nbytes = int(np.prod(t.shape, dtype=np.int64)) * types.numpy_dtype(t.dtype).itemsize
            alloc = drv.mem_alloc(max(1, nbytes))
            drv.memset_d8(alloc, 0, max(1, nbytes))
            keep.append(alloc)
            made.append(alloc)
            pointers.append(int(alloc))
        nscalars = max(1, len(self.generated.scalars))
        sc = drv.mem_alloc(8 * nscalars)
        drv.memset_d8(sc, 0, 8 * nscalars)
        rt_bytes = 8 * abi.block_length()  # the runtime block: its first slots, zeroed
        err = drv.mem_alloc(rt_bytes)
        drv.memset_d8(err, 0, rt_bytes)
        keep += [sc, err]
        fixed = [np.uintp(p) for p in pointers] + params + [np.uintp(int(sc)), np.uintp(int(err))]
        walk_plan(self.generated.plan, {}, lambda it, env: self._launch(it, env, fixed))
        err_host = np.zeros(abi.block_length(), np.int64)
        drv.memcpy_dtoh(err_host, err)
        code = int(err_host[abi.RT_CODE])
        if code:
            raise site_error(self.name, self.check_sites[code - 1], int(err_host[abi.RT_INDEX]),
                             int(err_host[abi.RT_AXIS]))
        for orig, alloc, host in copy_back:
            out = np.empty_like(host)
            if out.nbytes:
                drv.memcpy_dtoh(out, alloc)
            orig[...] = out
        outs = []
        for i in self._out_index:
            if i >= 0:
                outs.append(arrays[i])
                continue
            n = self._made_names[-i - 1]
            t = k.tensors[n]
            dtype = types.numpy_dtype(t.dtype)
            if any_device:
                from pycuda import gpuarray
                outs.append(gpuarray.GPUArray(t.shape, dtype, gpudata=made[-i - 1]))
            else:
                host = np.zeros(t.shape, dtype)
                if host.nbytes:
                    drv.memcpy_dtoh(host, made[-i - 1])
                outs.append(host)
        return None if not outs else outs[0] if len(outs) == 1 else tuple(outs)

    def _launch(self, it: cuda_codegen.Launch, env: dict, fixed: list):
        shape = launch_shape(it, env)
        if shape is not None:
            grid, block, extra = shape
            self._function(it.kernel)(*fixed, *[np.int64(env[c]) for c in it.counters], *extra,
                                      block=block, grid=grid)


def walk_plan(items, env: dict, launch):
    """Run a launch plan: host loops and conditions evaluated here, ``launch(Launch, env)`` for each kernel."""
    for it in items:
        if isinstance(it, cuda_codegen.Launch):
            launch(it, env)
        elif isinstance(it, cuda_codegen.HostFor):
            s = it.loop
            v = cuda_codegen.eval_lexpr(s.init, env)
            while True:
                env[s.var] = v
                if not cuda_codegen.eval_lexpr(s.cond, env):
                    break
                walk_plan(it.body, env, launch)
                v += s.step
            env.pop(s.var, None)
        else:
            walk_plan(it.then if cuda_codegen.eval_lexpr(it.cond, env) else it.orelse, env, launch)


def launch_shape(it: cuda_codegen.Launch, env: dict):
    """(grid, block, trailing int64 arguments) of one launch, or None when it has no iterations."""
    if it.dims == 0:
        return (1, 1), (1, 1, 1), []
    if it.dims == 1:
        trips = cuda_codegen.trip_count(it.loop, env)
        if trips is None:  # the kernel strides over a fixed grid while the loop's condition holds
            return (cuda_codegen.GRID_STRIDE_BLOCKS, 1), (cuda_codegen.BLOCK_1D, 1, 1), [np.int64(1 << 62)]
        if trips <= 0:
            return None
        return (min(-(-trips // cuda_codegen.BLOCK_1D), (1 << 31) - 1), 1), (cuda_codegen.BLOCK_1D, 1, 1), [np.int64(trips)]
    ty_ = cuda_codegen.trip_count(it.loop, env)
    tx = cuda_codegen.trip_count(it.inner, {**env, it.loop.var: cuda_codegen.eval_lexpr(it.loop.init, env)})
    if not ty_ or not tx or ty_ <= 0 or tx <= 0:
        return None
    bx, by = cuda_codegen.BLOCK_2D
    grid = (min(-(-tx // bx), (1 << 31) - 1), min(-(-ty_ // by), 65535))
    return grid, (bx, by, 1), [np.int64(ty_), np.int64(tx)]


def _device_pointer(a, t: tir.Tensor) -> int:
    if hasattr(a, "__cuda_array_interface__"):
        cai = a.__cuda_array_interface__
        strides = cai.get("strides")
        if strides is not None:
            itemsize = np.dtype(cai["typestr"]).itemsize
            want = _c_strides(tuple(cai["shape"]), itemsize)
            if tuple(strides) != want:
                raise HybridArgumentError(f"argument `{t.source_name}` is a device array that is not C-contiguous",
                                          t.span, "pass a contiguous copy")
        return int(cai["data"][0])
    flags = getattr(a, "flags", None)
    if flags is not None and not getattr(flags, "c_contiguous", True):
        raise HybridArgumentError(f"argument `{t.source_name}` is a device array that is not C-contiguous",
                                  t.span, "pass a contiguous copy")
    return int(a.gpudata)


def _c_strides(shape, itemsize):
    out = []
    s = itemsize
    for d in reversed(shape):
        out.append(s)
        s *= d
    return tuple(reversed(out))


@functools.lru_cache(maxsize=None)
def _driver_or_error():
    try:
        import pycuda.driver as drv
    except ImportError as e:
        return None, HybridUnsupportedError(
            f"running a kernel compiled for target=\"cuda\" needs pycuda, which is not installed ({e})", None,
            "install pycuda (pip install pycuda, with the CUDA toolkit) on a machine with an NVIDIA GPU; "
            "inspect(\"cuda\") and inspect(\"ptx\") work without it, and target=\"cpu\" runs here")
    try:
        drv.init()
        if drv.Device.count() < 1:
            raise RuntimeError("no CUDA device found")
        try:
            import pycuda.autoprimaryctx  # noqa: F401
        except ImportError:
            import pycuda.autoinit  # noqa: F401
    except Exception as e:  # noqa: BLE001 - pycuda raises its own error types
        return None, HybridUnsupportedError(
            f"running a kernel compiled for target=\"cuda\" needs an NVIDIA GPU; pycuda found none ({e})", None,
            "run on a machine with a GPU, or compile for target=\"cpu\"")
    return drv, None


def driver():
    """pycuda's driver module with a context made current, or the error saying what is missing."""
    drv, error = _driver_or_error()
    if error is not None:
        raise error
    return drv


def nvcc_path() -> str | None:
    return shutil.which("nvcc") or next((p for p in ("/usr/local/cuda/bin/nvcc", "/usr/local/bin/nvcc")
                                         if os.path.exists(p)), None)


def nvcc_ptx(source: str, options=(), arch: str = PTX_ARCH) -> str:
    """PTX of a CUDA C source through the local nvcc."""
    nvcc = nvcc_path()
    if nvcc is None:
        raise HybridUnsupportedError("inspect('ptx') needs nvcc (the CUDA toolkit), which was not found on PATH",
                                     None, "install the CUDA toolkit, or use inspect('cuda') for the CUDA C")
    with tempfile.TemporaryDirectory(prefix="hyb-ptx-") as d:
        src, out = os.path.join(d, "kernel.cu"), os.path.join(d, "kernel.ptx")
        with open(src, "w") as f:
            f.write(source)
        r = subprocess.run([nvcc, "-ptx", f"-arch={arch}", *options, "-o", out, src], capture_output=True, text=True)
        if r.returncode != 0:
            from ..errors import HybridInternalError
            raise HybridInternalError(f"nvcc failed on the generated CUDA C:\n{r.stderr.strip()}", "cuda")
        with open(out) as f:
            return f.read()


def compile_kernel(typed, specs, options) -> CudaCompiledKernel:
    return CudaCompiledKernel(typed, specs, options)
