"""The CUDA back end (hyb.codegen.cuda, hyb.runtime.cuda) where there may be no GPU.

* Every kernel of the differential suite (tests/runtime/test_differential.py, which includes the
  examples), in every dtype it type-checks for, and the gradients of the float ones, is
  turned into CUDA C that the local ``nvcc`` compiles for ``sm_90`` (skipped without nvcc).
  The sources are compiled in a few batches (kernel names made unique) to keep this quick.
* The same CUDA C, compiled by the host C++ compiler with a small shim (``blockIdx``,
  ``threadIdx``, ``__half``, ...; each launch run thread by thread on a small grid whose
  strides the kernels honour), is run on the differential cases: its outputs must equal the
  NumPy references and the CPU back end's.  This checks the CUDA C's semantics (mapping,
  launch plan, guards, numerics) though not CUDA's math library or real concurrency.
* Without pycuda (or a GPU) running says which is missing; inspect("cuda") works anyway.
* Tests marked ``gpu`` run the kernels through pycuda on a real GPU; they skip without one.
"""
from __future__ import annotations

import ctypes
import hashlib
import os
import re
import shutil
import subprocess
import tempfile
import warnings
import zlib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

import hyb
from hyb.codegen import cuda as cg
from hyb.codegen import llvm as cpu_cg
from hyb.dsl import types as ty
from hyb.errors import HybridIndexError, HybridUnsupportedError
from hyb.runtime import cuda as rt
from hyb.runtime.sites import site_error
from tests.runtime import test_differential as td

NVCC = rt.nvcc_path()
CXX = shutil.which("g++") or shutil.which("clang++")
needs_nvcc = pytest.mark.skipif(NVCC is None, reason="nvcc (the CUDA toolkit) is not installed")
needs_cxx = pytest.mark.skipif(CXX is None, reason="no host C++ compiler")

ALL_DTYPES = list(ty.ALL_DTYPES)


def _gpu_available() -> bool:
    try:
        rt.driver()
    except HybridUnsupportedError:
        return False
    return True


gpu = pytest.mark.gpu


def needs_gpu():
    if not _gpu_available():
        pytest.skip("needs pycuda and an NVIDIA GPU")


# ------------------------------------------------------------------ building many sources at once
def _unique(source: str, tag: str) -> tuple[str, dict]:
    """The kernels of ``source`` without the prelude, each ``__global__`` name suffixed with ``tag``."""
    body = source[len(cg.PRELUDE):] if source.startswith(cg.PRELUDE) else source
    names = {}

    def rename(m):
        names[m.group(1)] = f"{m.group(1)}_{tag}"
        return f"{m.group(1)}_{tag}("

    body = re.sub(r'(?<=__global__ void )(\w+)\(', rename, body)
    return body, names


def _batches(items: list, n: int) -> list:
    size = max(1, -(-len(items) // n))
    return [items[i:i + size] for i in range(0, len(items), size)]


def _run(cmd) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True)


def _compile_batches(sources: list, compile_one, jobs: int = 4):
    """Compile ``[(label, source)]`` in ``jobs`` batches; on a failure, find the sources that fail alone."""
    batches = _batches(sources, jobs)
    with ThreadPoolExecutor(max_workers=min(len(batches), os.cpu_count() or 2)) as pool:
        results = list(pool.map(compile_one, batches))
    failed = []
    for batch, r in zip(batches, results):
        if r.returncode != 0:
            for label, src in batch:
                one = compile_one([(label, src)])
                if one.returncode != 0:
                    failed.append(f"{label}:\n{one.stderr[-3000:]}")
                    if len(failed) >= 3:
                        break
            if not failed:
                failed.append(f"a batch failed, but each of its sources compiles alone:\n{r.stderr[-3000:]}")
    return failed


# ------------------------------------------------------------------ the kernels
def _case_sources():
    """(label, CudaCompiledKernel) for every differential case, in every dtype that type-checks,
    and for the gradients of the float cases."""
    out = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for case in td.CASES:
            shape = case.shapes[-1]
            for dt in ALL_DTYPES:
                try:
                    args = case.args(np.random.default_rng(0), shape, dt)
                except Exception:  # noqa: BLE001 - the case makes no arguments of this dtype
                    continue
                try:
                    ck = case.kernel.compile(*args, target="cuda")
                except hyb.HybridError:
                    continue  # the case does not type-check for this dtype
                out.append((f"{case.name}-{dt}", ck))
            if "float32" in case.dtypes:
                args = case.args(np.random.default_rng(0), shape, "float32")
                try:
                    g = case.kernel.grad()
                    douts = [np.ones_like(o) for o in td.as_tuple(case.kernel(*[a.copy() for a in args]))]
                    ck = g.compile(*args, *douts, target="cuda")
                except hyb.HybridError:
                    continue  # no gradient for this kernel
                out.append((f"{case.name}-grad-float32", ck))
    return out


@pytest.fixture(scope="module")
def case_kernels():
    return _case_sources()


@needs_nvcc
def test_every_test_kernel_compiles_with_nvcc(case_kernels, tmp_path):
    assert len(case_kernels) > 300
    dtypes = {label.rsplit("-", 1)[1] for label, _ in case_kernels}
    assert dtypes == set(ALL_DTYPES)
    sources = [(label, ck.inspect("cuda")) for label, ck in case_kernels]
    options = cg.NVCC_OPTIONS

    def compile_one(batch):
        parts = [cg.PRELUDE]
        for i, (label, src) in enumerate(batch):
            body, _ = _unique(src, f"u{i}")
            parts.append(f"// ---- {label}\n{body}")
        d = tempfile.mkdtemp(dir=tmp_path)
        path = os.path.join(d, "batch.cu")
        Path(path).write_text("\n".join(parts))
        return _run([NVCC, "-c", f"-arch={rt.PTX_ARCH}", *options, "-o", os.path.join(d, "batch.o"), path])

    failed = _compile_batches(sources, compile_one)
    assert not failed, "nvcc rejects the CUDA C of:\n" + "\n".join(failed)


# ------------------------------------------------------------------ the CUDA C run on the host
SHIM = r"""/* Host shim: generated CUDA C compiled by a host C++ compiler; a launch runs thread by thread. */
#include <math.h>
#include <string.h>
#include <stdint.h>
#define __global__
#define __device__
#define __forceinline__ inline
#define __restrict__ __restrict
struct hyb_dim3 { unsigned int x, y, z; };
static hyb_dim3 blockIdx, threadIdx, blockDim, gridDim;
extern "C" void hyb_emu_set(unsigned bx, unsigned by, unsigned tx, unsigned ty, unsigned gdx, unsigned gdy,
                            unsigned bdx, unsigned bdy) {
    blockIdx.x = bx; blockIdx.y = by; threadIdx.x = tx; threadIdx.y = ty;
    gridDim.x = gdx; gridDim.y = gdy; blockDim.x = bdx; blockDim.y = bdy;
    blockIdx.z = threadIdx.z = 0; gridDim.z = blockDim.z = 1;
}
struct __half { unsigned short x; };
static inline float __half2float(__half h) { _Float16 v; memcpy(&v, &h.x, 2); return (float)v; }
static inline __half __float2half_rn(float f) { _Float16 v = (_Float16)f; __half r; memcpy(&r.x, &v, 2); return r; }
static inline __half __ushort_as_half(unsigned short b) { __half r; r.x = b; return r; }
struct __nv_bfloat16 { unsigned short x; };
static inline unsigned short __bfloat16_as_ushort(__nv_bfloat16 h) { return h.x; }
static inline __nv_bfloat16 __ushort_as_bfloat16(unsigned short b) { __nv_bfloat16 r; r.x = b; return r; }
static inline unsigned int __float_as_uint(float f) { unsigned int i; memcpy(&i, &f, 4); return i; }
static inline float __uint_as_float(unsigned int i) { float f; memcpy(&f, &i, 4); return f; }
static inline float __int_as_float(int i) { float f; memcpy(&f, &i, 4); return f; }
static inline int __float_as_int(float f) { int i; memcpy(&i, &f, 4); return i; }
static inline double __longlong_as_double(long long i) { double d; memcpy(&d, &i, 8); return d; }
static inline int __popc(unsigned int x) { return __builtin_popcount(x); }
static inline int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
static inline unsigned long long atomicCAS(unsigned long long *p, unsigned long long cmp, unsigned long long v) {
    unsigned long long old = *p; if (old == cmp) *p = v; return old;
}
"""


class _Half(ctypes.Structure):
    _fields_ = [("x", ctypes.c_uint16)]


_CT = {"bool": ctypes.c_uint8, "int8": ctypes.c_int8, "uint8": ctypes.c_uint8, "int16": ctypes.c_int16,
       "uint16": ctypes.c_uint16, "int32": ctypes.c_int32, "uint32": ctypes.c_uint32, "int64": ctypes.c_int64,
       "uint64": ctypes.c_uint64, "float32": ctypes.c_float, "float64": ctypes.c_double}


class HostLibrary:
    """Many CUDA compiled kernels' sources built into one shared library by the host compiler."""

    def __init__(self, kernels: list, workdir):
        self.names = {}
        parts = []
        for i, ck in enumerate(kernels):
            body, names = _unique(ck.inspect("cuda"), f"u{i}")
            parts.append(body)
            self.names[id(ck)] = names
        digest = hashlib.sha1("".join(parts).encode()).hexdigest()[:12]
        batches = _batches(parts, 2)
        libs = []

        def build(k):
            src = os.path.join(workdir, f"emu{digest}_{k}.cpp")
            prelude = cg.PRELUDE.replace("#include <cuda_fp16.h>", "").replace("#include <cuda_bf16.h>", "")
            Path(src).write_text(SHIM + prelude + "\n".join(batches[k]))
            so = src[:-4] + ".so"
            return _run([CXX, "-O1", "-shared", "-fPIC", "-w", "-o", so, src]), so

        with ThreadPoolExecutor(max_workers=2) as pool:
            built = list(pool.map(build, range(len(batches))))
        for r, so in built:
            assert r.returncode == 0, r.stderr[-4000:]
            libs.append(ctypes.CDLL(so))
        self.libs = libs

    def function(self, ck, name):
        real = self.names[id(ck)][name]
        for lib in self.libs:
            try:
                return lib, getattr(lib, real)
            except AttributeError:
                continue
        raise KeyError(real)

    def run(self, ck, *args, reverse=False):
        """Run ``ck`` (a CudaCompiledKernel) on NumPy arguments as pycuda would, on the host.  With
        ``reverse``, the threads of each launch run last to first: a result that depends on the
        order of threads (a dependence the grid does not respect) then shows."""
        k = ck.typed
        arrays = td.as_tuple(args)
        arrays = list(arrays)
        pointers, params, keep, copy_back = [], [], [], []
        for name, kind, a in zip(k.inputs, ck._kinds, arrays):
            t = k.tensors[name]
            dt = ty.concrete(t.dtype)
            if kind == "param":
                if dt in ty.HALVES:  # its 16 bits
                    params.append(_Half(int(np.array(a, ty.numpy_dtype(dt)).view(np.uint16))))
                else:
                    params.append(_CT[dt](np.array(a, dtype="uint8" if dt == "bool" else dt)[()].item()))
                continue
            work = np.ascontiguousarray(a).copy()
            keep.append(work)
            pointers.append(work.ctypes.data)
            if name in ck._written:
                copy_back.append((a, work))
        made = [np.zeros(t.shape, ty.concrete(t.dtype)) for t in ck.made_tensors]
        pointers += [m.ctypes.data for m in made]
        sc = np.zeros(max(1, len(ck.generated.scalars)), np.int64)
        err = np.zeros(4, np.int64)
        fixed = [ctypes.c_void_p(p) for p in pointers] + params + [ctypes.c_void_p(sc.ctypes.data),
                                                                    ctypes.c_void_p(err.ctypes.data)]

        def launch(it, env):
            shape = rt.launch_shape(it, env)
            if shape is None:
                return
            (gx, gy), (bx, by, _), extra = shape
            # A small grid: the kernels stride over whatever grid they are given.
            gx, gy, bx, by = min(gx, 3), min(gy, 2), min(bx, 4), min(by, 2)
            lib, f = self.function(ck, it.kernel)
            args = fixed + [ctypes.c_longlong(env[c]) for c in it.counters] + [ctypes.c_longlong(int(e)) for e in extra]
            threads = [(bxi, byi, txi, tyi) for byi in range(gy) for bxi in range(gx)
                       for tyi in range(by) for txi in range(bx)]
            for bxi, byi, txi, tyi in (reversed(threads) if reverse else threads):
                lib.hyb_emu_set(bxi, byi, txi, tyi, gx, gy, bx, by)
                f(*args)

        rt.walk_plan(ck.generated.plan, {}, launch)
        if err[2]:
            raise site_error(ck.name, ck.check_sites[int(err[2]) - 1], int(err[0]), int(err[1]))
        for orig, work in copy_back:
            orig[...] = work
        outs = [arrays[i] if i >= 0 else made[-i - 1] for i in ck._out_index]
        return outs[0] if len(outs) == 1 else tuple(outs)


def _seeded_args(case, shape, dtype):
    rng = np.random.default_rng(zlib.crc32(f"{case.name}{shape}{dtype}".encode()))
    return case.args(rng, shape, dtype)


DIFF_PARAMS = list(td.params())
EXTRA_DTYPES = ["float16", "bfloat16", "int8", "int16", "uint8", "uint16", "uint32", "uint64", "bool"]


def _extra_params():
    for case in td.CASES:
        for dt in EXTRA_DTYPES:
            if dt not in case.dtypes:
                yield pytest.param(case, case.shapes[-1], dt, id=f"{case.name}-{dt}")


EXTRA_PARAMS = list(_extra_params())


@pytest.fixture(scope="module")
def host_library(tmp_path_factory):
    if CXX is None:
        pytest.skip("no host C++ compiler")
    kernels = {}  # the compiled kernel, its HybridTypeError, or None where the case makes no such arguments
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for p in DIFF_PARAMS + EXTRA_PARAMS:
            case, shape, dtype = p.values
            try:
                args = _seeded_args(case, shape, dtype)
            except (ValueError, OverflowError):  # NumPy cannot hold the case's values in this dtype
                kernels[p.id] = None
                continue
            try:
                kernels[p.id] = case.kernel.compile(*args, target="cuda")
            except hyb.HybridTypeError as e:  # the kernel does not type-check for this dtype
                kernels[p.id] = e
    lib = HostLibrary([ck for ck in kernels.values() if ck is not None and not isinstance(ck, hyb.HybridTypeError)],
                      tmp_path_factory.mktemp("cuda-host"))
    return lib, kernels


@needs_cxx
@pytest.mark.parametrize("case,shape,dtype", DIFF_PARAMS)
def test_cuda_c_on_host_matches_numpy(case, shape, dtype, host_library, request):
    lib, kernels = host_library
    ck = kernels[request.node.callspec.id]
    assert ck is not None and not isinstance(ck, hyb.HybridTypeError), f"no CUDA kernel for {case.name}: {ck}"
    args = _seeded_args(case, shape, dtype)
    want = tuple(np.asarray(w) for w in td.as_tuple(case.ref(*[a.copy() for a in args])))
    run_args = [a.copy() for a in args]
    got = td.as_tuple(lib.run(ck, *run_args, reverse=True))  # threads last to first
    assert len(got) == len(want)
    for k, (g, w) in enumerate(zip(got, want)):
        td.assert_close(g, w, f"CUDA C output {k} vs numpy")
    for pos, (orig, c) in enumerate(zip(args, run_args)):
        if pos not in case.inplace:
            np.testing.assert_array_equal(c, orig, err_msg=f"CUDA C changed input {pos}")
        else:
            assert any(g is run_args[pos] for g in got), "the in-place input is returned itself"


@needs_cxx
@pytest.mark.parametrize("case,shape,dtype", EXTRA_PARAMS)
def test_cuda_c_on_host_matches_cpu_in_other_dtypes(case, shape, dtype, host_library, request):
    lib, kernels = host_library
    ck = kernels[request.node.callspec.id]
    if ck is None:
        pytest.skip(f"{case.name} makes no {dtype} arguments")
    args = _seeded_args(case, shape, dtype)
    if isinstance(ck, hyb.HybridTypeError):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with pytest.raises(hyb.HybridError) as cpu:
                case.kernel.compile(*[a.copy() for a in args])
        assert type(cpu.value) is type(ck) and str(cpu.value) == str(ck), \
            f"the CUDA target refuses {case.name} in {dtype} ({ck}), the CPU target differently: {cpu.value}"
        pytest.skip(f"{case.name} does not type-check for {dtype} (on either target)")
    if dtype == "float16" and not cpu_cg.half_in_hardware():
        pytest.skip("the CPU back end needs F16C for float16")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        want = td.as_tuple(case.kernel(*[a.copy() for a in args]))
    got = td.as_tuple(lib.run(ck, *[a.copy() for a in args]))
    for k, (g, w) in enumerate(zip(got, want)):
        assert g.dtype == w.dtype and g.shape == w.shape
        if dtype == "bfloat16":  # (NumPy's testing sees NaN only in its own float types)
            g, w = g.astype(np.float32), w.astype(np.float32)
        np.testing.assert_array_equal(g, w, err_msg=f"CUDA C output {k} vs the CPU back end ({dtype})")


INTRINSICS = hyb.compile_source('''
def intrinsics(a, b):
    c = output_tensor((24, a.shape[0]), a.dtype)
    for i in range(a.shape[0]):
        c[0, i] = sqrt(abs(a[i])) + rsqrt(abs(b[i]) + 1)
        c[1, i] = exp(a[i] * 0.5) - expm1(b[i] * 0.25)
        c[2, i] = log(abs(a[i]) + 1) + log1p(abs(b[i]))
        c[3, i] = sin(a[i]) * cos(b[i]) + tan(a[i] * 0.1)
        c[4, i] = tanh(a[i]) + sigmoid(b[i]) + erf(a[i])
        c[5, i] = atan(a[i]) + atan2(a[i], b[i])
        c[6, i] = floor(a[i]) + ceil(b[i]) * 2 + trunc(a[i] * 3)
        c[7, i] = round(a[i] * 4)
        c[8, i] = max(a[i], b[i]) - min(a[i], b[i])
        c[9, i] = sign(a[i]) + sign(b[i] - b[i])
        c[10, i] = a[i] // b[i]
        c[11, i] = a[i] % b[i]
        c[12, i] = abs(a[i]) ** b[i]
        c[13, i] = float32(isnan(a[i] / b[i])) + float32(isinf(a[i] / b[i])) * 2 + float32(isfinite(a[i] / b[i])) * 4
        c[14, i] = float32(int32(a[i] * 1000.0))
        c[15, i] = float32(uint8(a[i] * 100.0))
        c[16, i] = float32(int64(a[i] * 1e20))
        c[17, i] = float32(uint64(abs(a[i]) * 1e19))
        c[18, i] = float16(a[i] * 1000.0)
        c[19, i] = float32(bool(a[i])) + float32(a[i] > b[i] or a[i] != a[i])
        c[20, i] = -a[i] + a[i] / b[i]
        c[21, i] = power(abs(b[i]), 0.5)
        c[22, i] = float32(popcount(int32(a[i] * 1000.0))) + float32(ceil_div(int32(a[i] * 100.0), 7))
        c[23, i] = a[i] if a[i] > 0.0 else b[i]
    return c
''').intrinsics


def _special(dtype, n=64):
    rng = np.random.default_rng(7)
    a = rng.uniform(-3, 3, n)
    a[:9] = [np.nan, -1.0, 0.0, -0.0, 1.0, np.inf, -np.inf, 0.5, -2.5]
    b = rng.uniform(-2, 2, n)
    b[:9] = [1.0, 0.0, -0.0, np.nan, -1.5, 2.0, np.inf, -0.5, 0.0]
    return a.astype(dtype), b.astype(dtype)


@needs_cxx
@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32", "float64"])
def test_intrinsics_on_host_match_cpu(dtype, tmp_path):
    if dtype == "float16" and not cpu_cg.half_in_hardware():
        pytest.skip("the CPU back end needs F16C for float16")
    a, b = _special(dtype)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ck = INTRINSICS.compile(a, b, target="cuda")
        want = INTRINSICS(a, b)
    lib = HostLibrary([ck], tmp_path)
    got = lib.run(ck, a, b)
    if dtype == "bfloat16":  # (NumPy's testing sees NaN only in its own float types)
        got, want = got.astype(np.float32), want.astype(np.float32)
    # Rows of math functions may differ in the last place (LLVM turns pow(x, 0.5) into sqrt, say);
    # the others (rounding, divmod, casts, comparisons, max/min, sign, popcount) are exact.
    inexact = [0, 1, 2, 3, 4, 5, 12, 21]
    exact = [r for r in range(got.shape[0]) if r not in inexact]
    np.testing.assert_array_equal(got[exact], want[exact])
    rtol = {"float16": 1e-3, "bfloat16": 8e-3, "float32": 1e-6, "float64": 1e-14}[dtype]
    np.testing.assert_allclose(got[inexact].astype(np.float64), want[inexact].astype(np.float64), rtol=rtol,
                               atol=rtol)


INDEXED = hyb.compile_source('''
def gather(a, idx):
    c = output_tensor(idx.shape, a.dtype)
    for i in range(idx.shape[0]):
        c[i] = a[idx[i]]
    return c
''').gather


@needs_cxx
def test_runtime_bounds_check_on_host(tmp_path):
    a = np.arange(5, dtype=np.float32)
    ok = np.array([4, 0, 2], np.int64)
    ck = INDEXED.compile(a, ok, target="cuda")
    lib = HostLibrary([ck], tmp_path)
    np.testing.assert_array_equal(lib.run(ck, a, ok), a[ok])
    with pytest.raises(HybridIndexError) as e:
        lib.run(ck, a, np.array([1, 7, 2], np.int64))
    assert "index 7 is out of bounds for axis 0 of `a` (shape (5,))" in str(e.value)
    with pytest.raises(HybridIndexError) as cpu:
        INDEXED(a, np.array([1, 7, 2], np.int64))
    assert e.value.span == cpu.value.span


ASSERTING = hyb.compile_source('''
def checked(a, w):
    assert a.shape[0] == w.shape[0], "same lengths"
    c = output_tensor(a.shape, a.dtype)
    for i in range(a.shape[0]):
        assert w[i] >= 0, "weights must be non-negative"
        c[i] = a[i] * w[i]
    return c
''', "asserting.hyb").checked


@needs_cxx
def test_runtime_assert_on_host(tmp_path):
    a = np.arange(4, dtype=np.float32)
    ck = ASSERTING.compile(a, a, target="cuda")
    assert "hyb_fail(hyb_err, 0, 0, 1); return; }" in ck.inspect("cuda")
    lib = HostLibrary([ck], tmp_path)
    np.testing.assert_array_equal(lib.run(ck, a, a), a * a)
    bad = np.array([1, 1, -1, 1], np.float32)
    with pytest.raises(hyb.HybridAssertionError) as e:
        lib.run(ck, a, bad)
    with pytest.raises(hyb.HybridAssertionError) as cpu:
        ASSERTING(a, bad)
    assert str(e.value) == str(cpu.value)
    assert "kernel `checked`: assertion failed: weights must be non-negative" in str(e.value)


def _data_dependent_runs():
    from tests.dsl import test_data_dependent as dd
    rng = np.random.default_rng(3)
    a = rng.standard_normal((9, 5))
    yield "hist", dd.MOD.hist, [rng.integers(0, 8, 100).astype(np.uint8), rng.standard_normal(100)]
    yield "gather", dd.MOD.gather, [a[0].astype(np.float32), rng.integers(0, 5, 10)]
    yield "ragged", dd.MOD.ragged, [rng.integers(0, 6, 9), a]
    yield "ragged_start", dd.MOD.ragged_start, [np.array([0, 2, 5, 4]), np.arange(20.0).reshape(4, 5)]
    yield "quadratic", dd.MOD.quadratic, [np.arange(1.0, 4.0)]
    yield "guarded", dd.MOD.guarded, [np.arange(1.0, 5.0), np.array([0.0, 1.0, -1.0, 0.0])]
    yield "hist_oob", dd.MOD.hist, [np.array([0, 8, 1]), np.ones(3)]
    yield "ragged_oob", dd.MOD.ragged, [np.array([2, 6]), np.ones((2, 5))]
    yield "guarded_oob", dd.MOD.guarded, [np.ones(3), np.array([1.0, 0.0, 0.0])]


@needs_cxx
def test_data_dependent_kernels_on_host(tmp_path):
    """Opaque statements (loops with bounds read from tensors), guards and scatters: the CUDA C
    gives the CPU back end's results, and the same errors at the same places."""
    runs = list(_data_dependent_runs())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cks = [k.compile(*args, target="cuda") for _, k, args in runs]
    lib = HostLibrary(cks, tmp_path)
    for (name, k, args), ck in zip(runs, cks):
        try:
            want = k(*[a.copy() for a in args])
        except HybridIndexError as cpu:
            with pytest.raises(HybridIndexError) as gpu_side:
                lib.run(ck, *[a.copy() for a in args])
            assert gpu_side.value.message == cpu.message and gpu_side.value.span == cpu.span, name
            continue
        np.testing.assert_array_equal(lib.run(ck, *[a.copy() for a in args]), want, err_msg=name)


# ------------------------------------------------------------------ the mapping and the launch plan
def _launches(plan):
    for it in plan:
        if isinstance(it, cg.Launch):
            yield it
        elif isinstance(it, cg.HostFor):
            yield from _launches(it.body)
        elif isinstance(it, cg.HostIf):
            yield from _launches(it.then)
            yield from _launches(it.orelse)


def test_elementwise_2d_is_a_2d_grid():
    x = np.ones((7, 13), np.float32)
    ck = td.ew2.compile(x, x, target="cuda")
    (launch,) = ck.generated.plan
    assert launch.dims == 2
    src = ck.inspect("cuda")
    assert "blockIdx.y" in src and "_ix < hyb_trips_x" in src
    assert rt.launch_shape(launch, {}) == ((1, 1), (32, 8, 1), [7, 13])


def test_matmul_keeps_the_reduction_in_the_thread():
    a, b = np.ones((40, 50), np.float32), np.ones((50, 60), np.float32)
    ck = td.matmul_fn.compile(a, b, target="cuda")
    (launch,) = ck.generated.plan
    assert launch.dims == 2  # i and j over the grid, k in each thread
    grid, block, extra = rt.launch_shape(launch, {})
    assert grid == (2, 5) and block == (32, 8, 1) and extra == [40, 60]
    assert "(l_c2 <= 49ll)" in ck.inspect("cuda")


@needs_nvcc
def test_matmul_accumulator_stays_in_a_register():
    a = np.ones((64, 64), np.float32)
    ptx = td.matmul_fn.compile(a, a, target="cuda").inspect("ptx")
    assert ptx.count("st.global") == 1  # c[i, j] is stored once, after the k loop
    assert "ld.global.nc" in ptx  # read-only inputs through the read-only cache (const __restrict__)


def test_serial_kernel_runs_in_one_thread():
    ck = td.MOD.prefix_sum.compile(np.ones(9, np.float64), target="cuda")
    (launch,) = ck.generated.plan
    assert launch.dims == 0 and rt.launch_shape(launch, {}) == ((1, 1), (1, 1, 1), [])
    assert "<<<1, 1>>> (serial)" in ck.inspect("cuda")
    # the scalar local lives in the scalar block and a serial kernel writes it back
    assert "*(double *)(hyb_sc + 0) = s_s;" in ck.inspect("cuda")


TIME_LOOP = hyb.compile_source('''
def heat(a, steps):
    b = allocate(a.shape, a.dtype)
    for t in range(4):
        for i in range(1, a.shape[0] - 1):
            b[i] = (a[i - 1] + a[i] + a[i + 1]) / 3
        for i in range(1, a.shape[0] - 1):
            a[i] = b[i]
    return a
''').heat


@needs_cxx
def test_outer_serial_loop_is_walked_by_the_host(tmp_path):
    a = np.linspace(0, 1, 300)
    ck = TIME_LOOP.compile(a, 3, target="cuda")
    fors = [it for it in ck.generated.plan if isinstance(it, cg.HostFor)]
    assert fors and list(_launches(ck.generated.plan))
    assert all(la.dims >= 1 for la in _launches(ck.generated.plan))
    lib = HostLibrary([ck], tmp_path)
    want = TIME_LOOP.emulate(a.copy(), 3)
    got = lib.run(ck, a.copy(), 3)
    np.testing.assert_allclose(got, want, rtol=1e-12)


DOUBLE = '''
def f(a):
    c = output_tensor(a.shape, a.dtype)
    for i in {loop}(a.shape[0]):
        c[i] = a[i] * 2
    return c
'''


@pytest.mark.parametrize("loop, options, dims", [("range", {}, 1), ("serial", {}, 0),
                                                  ("range", {"schedule": "original"}, 0),
                                                  ("range", {"schedule": {"parallel": False}}, 0)])
def test_grid_respects_serial_loops_and_schedule_options(loop, options, dims):
    k = hyb.compile_source(DOUBLE.format(loop=loop), **options).f
    (launch,) = k.compile(np.ones(100), target="cuda").generated.plan
    assert launch.dims == dims


def test_host_loop_arithmetic_is_isl_s():
    from hyb.schedule import loops as L
    env = {"c0": -7}
    assert cg.eval_lexpr(L.LOp("fdiv_q", [L.LVar("c0"), L.LInt(2)]), env) == -4
    assert cg.eval_lexpr(L.LOp("pdiv_q", [L.LInt(7), L.LInt(2)]), env) == 3
    assert cg.eval_lexpr(L.LOp("zdiv_r", [L.LVar("c0"), L.LInt(3)]), env) == -1
    loop = L.For("c1", L.LInt(2), L.LOp("le", [L.LVar("c1"), L.LOp("min", [L.LInt(10), L.LInt(20)])]), 3, [])
    assert cg.trip_count(loop, {}) == 3  # 2, 5, 8
    loop = L.For("c1", L.LInt(5), L.LOp("lt", [L.LVar("c1"), L.LInt(5)]), 1, [])
    assert cg.trip_count(loop, {}) == 0


def test_scalar_parameters_are_kernel_arguments():
    k = hyb.compile_source('''
def scale(a, s):
    c = output_tensor(a.shape, a.dtype)
    for i in range(a.shape[0]):
        c[i] = a[i] * s
    return c
''').scale
    src = k.compile(np.ones(4, np.float16), np.float16(2), target="cuda").inspect("cuda")
    assert re.search(r"__global__ void hyb_scale_k0\(const __half \*__restrict__ t_a, __half \*__restrict__ t_c, "
                     r"__half p_s, unsigned char", src)
    assert "hyb_f2h((hyb_h2f(_ld" in src  # float16 arithmetic in float, rounded after the operation
    bf16 = ty.bfloat16()
    src = k.compile(np.ones(4, bf16), bf16.type(2), target="cuda").inspect("cuda")
    assert re.search(r"__global__ void hyb_scale_k0\(const __nv_bfloat16 \*__restrict__ t_a, __nv_bfloat16 "
                     r"\*__restrict__ t_c, __nv_bfloat16 p_s, unsigned char", src)
    # bfloat16 arithmetic in float, its conversions on its bits
    assert "__uint_as_float(((unsigned int)(((unsigned int)(hyb_bf2bits(_ld" in src and "hyb_bits2bf(" in src


SCALE = hyb.compile_source('''
def scale(a, s, flag):
    c = output_tensor(a.shape, a.dtype)
    for i in range(a.shape[0]):
        c[i] = a[i] * s if flag else a[i] - s
    return c
''').scale


@needs_cxx
@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32", "float64", "int8", "uint16", "int64", "uint64"])
def test_scalar_parameters_on_host(dtype, tmp_path):
    if dtype == "float16" and not cpu_cg.half_in_hardware():
        pytest.skip("the CPU back end needs F16C for float16")
    a = (np.arange(10) % 7).astype(dtype)
    cks = [SCALE.compile(a, np.dtype(dtype).type(3), flag, target="cuda") for flag in (True, False)]
    lib = HostLibrary(cks, tmp_path)
    for ck, flag in zip(cks, (True, False)):
        s = np.dtype(dtype).type(3)
        np.testing.assert_array_equal(lib.run(ck, a, s, flag), SCALE(a, s, flag))


# ------------------------------------------------------------------ inspection and errors without a GPU
ADD = hyb.load(td.EXAMPLES / "add.hyb").add


def test_inspect_cuda_needs_no_gpu():
    x = np.ones((4, 4), np.float32)
    ck = ADD.compile(x, x, target="cuda")
    src = ck.inspect("cuda")
    assert src.startswith("#include <cuda_fp16.h>")
    assert 'extern "C" __global__ void hyb_add_k0(' in src and "launch plan" in src
    assert "parallel for" in ck.inspect("loops")
    assert "2-D grid" in ck.inspect("schedule")
    assert ck.inspect("ast") == ADD.compile(x, x).inspect("ast")
    with pytest.raises(HybridUnsupportedError, match="compiled for target \"cuda\""):
        ck.inspect("llvm")
    with pytest.raises(hyb.HybridArgumentError, match="unknown stage"):
        ck.inspect("sass")
    # A CPU kernel shows the CUDA C of its signature too.
    assert ADD.compile(x, x).inspect("cuda") == src
    assert "target=cuda" in repr(ck)
    page = ck._repr_html_()
    assert "__global__" in page and "(CUDA)" in page


@needs_nvcc
def test_inspect_ptx():
    x = np.ones(5, np.float64)
    ptx = td.MOD.ew1.compile(x, x, target="cuda").inspect("ptx")
    assert ".target sm_90" in ptx and ".entry hyb_ew1_k0(" in ptx
    assert "fma.rn" not in ptx  # -fmad=false: no contraction, as the CPU path


def test_inspect_ptx_without_nvcc(monkeypatch):
    x = np.ones(6, np.float64)
    ck = td.MOD.ew1.compile(x, x, target="cuda")
    monkeypatch.setattr(rt, "nvcc_path", lambda: None)
    with pytest.raises(HybridUnsupportedError, match="needs nvcc"):
        ck.inspect("ptx")


def test_running_without_pycuda_says_so(monkeypatch):
    monkeypatch.setattr(rt, "_driver_or_error", lambda: (None, HybridUnsupportedError(
        "running a kernel compiled for target=\"cuda\" needs pycuda, which is not installed", None, None)))
    x = np.ones(3, np.float32)
    x2 = np.ones((2, 3), np.float32)

    @hyb.hybrid(target="cuda")
    def add3(a, b):
        c = output_tensor(a.shape, a.dtype)  # noqa: F821
        for i in range(a.shape[0]):
            c[i] = a[i] + b[i]
        return c

    with pytest.raises(HybridUnsupportedError, match="needs pycuda") as e:
        add3(x, x)
    assert isinstance(e.value, NotImplementedError)
    ck = add3.compile(x, x)
    assert "__global__" in ck.inspect("cuda")
    with pytest.raises(HybridUnsupportedError, match="needs pycuda"):
        ck(x, x)
    with pytest.raises(HybridUnsupportedError, match="needs pycuda"):
        ADD.compile(x2, x2, target="cuda")(x2, x2)


def test_device_target_gpu_sends_plain_kernels_to_cuda(monkeypatch):
    """hyb.set_context(device_target="GPU"): a kernel made without target= compiles CUDA C and runs
    through pycuda (here missing); target="cpu" keeps a kernel on the CPU whatever the context."""
    from hyb import context
    monkeypatch.setattr(rt, "_driver_or_error", lambda: (None, HybridUnsupportedError(
        "running a kernel compiled for target=\"cuda\" needs pycuda, which is not installed", None, None)))
    x = np.arange(4.0)
    plain = td.MOD.ew1
    pinned = hyb.hybrid(target="cpu")(_add_py)
    context._reset()
    try:
        assert plain.target == "cpu" and not isinstance(plain.compile(x, x), rt.CudaCompiledKernel)
        hyb.set_context(device_target="GPU")
        assert plain.target == "cuda"
        ck = plain.compile(x, x)
        assert isinstance(ck, rt.CudaCompiledKernel) and "__global__" in ck.inspect("cuda")
        with pytest.raises(HybridUnsupportedError, match="needs pycuda"):
            plain(x, x)
        assert pinned.target == "cpu"
        np.testing.assert_array_equal(pinned(x, x), x + x)
    finally:
        context._reset()
    assert plain.target == "cpu"


def _add_py(a, b):
    c = output_tensor(a.shape, a.dtype)  # noqa: F821
    for i in range(a.shape[0]):
        c[i] = a[i] + b[i]
    return c


@pytest.mark.skipif(_gpu_available(), reason="a GPU is available")
def test_running_without_a_gpu_names_what_is_missing():
    x = np.ones(3, np.float32)
    with pytest.raises(HybridUnsupportedError) as e:
        ADD.compile(x[None], x[None], target="cuda")(x[None], x[None])
    msg = str(e.value)
    assert "needs pycuda" in msg or "needs an NVIDIA GPU" in msg


def test_device_array_standin():
    class FakeDevice:
        __cuda_array_interface__ = {"shape": (3, 4), "typestr": "<f4", "data": (0, False), "version": 3}

    s = rt._device_standin(FakeDevice())
    assert s.shape == (3, 4) and s.dtype == np.float32 and s.strides == (0, 0)


# ------------------------------------------------------------------ on a GPU
@gpu
def test_differential_on_gpu():
    """Every (case, shape, dtype) of the differential suite on the GPU against NumPy (one test,
    so that a machine without a GPU skips it at once)."""
    needs_gpu()
    failures = []
    for p in DIFF_PARAMS:
        case, shape, dtype = p.values
        args = _seeded_args(case, shape, dtype)
        want = tuple(np.asarray(w) for w in td.as_tuple(case.ref(*[a.copy() for a in args])))
        run_args = [a.copy() for a in args]
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                got = td.as_tuple(case.kernel.compile(*run_args, target="cuda")(*run_args))
            for k, (g, w) in enumerate(zip(got, want)):
                td.assert_close(g, w, f"GPU output {k} vs numpy")
            for pos in case.inplace:
                td.assert_close(run_args[pos], want[[g is run_args[pos] for g in got].index(True)],
                                f"in-place input {pos}")
        except Exception as e:  # noqa: BLE001 - collect them all
            failures.append(f"{p.id}: {str(e)[:500]}")
    assert not failures, f"{len(failures)} of {len(DIFF_PARAMS)} fail on the GPU:\n" + "\n".join(failures[:20])


@gpu
def test_gpuarrays_are_used_in_place():
    needs_gpu()
    from pycuda import gpuarray
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    k = hyb.load(td.EXAMPLES / "add.hyb", target="cuda").add
    dx = gpuarray.to_gpu(x)
    out = k(dx, dx)
    assert isinstance(out, gpuarray.GPUArray)
    np.testing.assert_array_equal(out.get(), x + x)
    np.testing.assert_array_equal(k(x, x), x + x)


@gpu
def test_bounds_check_on_gpu():
    needs_gpu()
    a = np.arange(5, dtype=np.float32)
    with pytest.raises(HybridIndexError, match="index 7 is out of bounds"):
        INDEXED.compile(a, np.array([7], np.int64), target="cuda")(a, np.array([7], np.int64))
