"""What a process keeps of the code it compiled: dropped kernels go, a kernel's signatures are
bounded, and only the recent signatures keep the pipeline's records (hyb.runtime.variants)."""
import ctypes
import gc
import weakref

import numpy as np
import pytest

import hyb
from hyb.codegen import jit
from hyb.runtime import variants

SRC = """
def scale(a):
    c = output_tensor(a.shape, a.dtype)
    for i in range(a.shape[0]):
        c[i] = a[i] * 3.0 + 1.0
    return c
"""

ROWS = """
def rowmax(x):
    out = output_tensor((x.shape[0],), x.dtype)
    for i in range(x.shape[0]):
        m = x[i, 0]
        for j in range(1, x.shape[1]):
            m = max(m, x[i, j])
        out[i] = m
    return out
"""


def kernel(src=SRC, **options):
    mod = hyb.compile_source(src, **options)
    return next(getattr(mod, n) for n in dir(mod) if isinstance(getattr(mod, n), hyb.Kernel))


def malloc_in_use() -> int:
    libc = ctypes.CDLL("libc.so.6")

    class MallInfo2(ctypes.Structure):
        _fields_ = [(n, ctypes.c_size_t) for n in
                    "arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks fordblks keepcost".split()]
    libc.mallinfo2.restype = MallInfo2
    return libc.mallinfo2().uordblks


@pytest.fixture
def no_disk_cache(monkeypatch):
    monkeypatch.setenv("HYB_CACHE", "0")


def test_a_dropped_kernel_goes_with_its_compiled_signatures(no_disk_cache):
    k = kernel()
    for n in (5, 6, 7):
        np.testing.assert_allclose(k(np.arange(n, dtype=np.float32)), np.arange(n) * 3.0 + 1.0)
    held = [weakref.ref(k)] + [weakref.ref(c) for c in k._cache.values()]
    del k
    gc.collect()
    assert all(r() is None for r in held)  # (the recent signatures' records are held weakly)


def test_llvm_optimisation_keeps_nothing_per_compile(no_disk_cache):
    # the pass manager of each compile is freed (llvmlite's close() alone leaves ~75 KB each)
    ir = kernel().compile(np.ones(8, np.float32)).llvm_ir
    for _ in range(3):
        jit.object_code(jit.optimize(ir))
    gc.collect()
    before = malloc_in_use()
    for _ in range(40):
        with jit.private_context() as scratch:
            jit.object_code(jit.optimize(ir, scratch))
    gc.collect()
    assert (malloc_in_use() - before) / 40 < 8_000


def test_a_module_that_fails_in_a_private_context_is_freed_once():
    # the context closes the module it holds before itself (else the module's object would free
    # it a second time when collected: a crash)
    bad = "define i32 @f(i32 %x) {\nentry:\n  %y = add i32 %x, %z\n  %z = add i32 %y, 1\n  ret i32 %y\n}\n"
    with pytest.raises(RuntimeError, match="does not dominate all uses"):
        with jit.private_context() as scratch:
            jit.optimize(bad, scratch)
    assert all(m.closed for m in scratch.modules) and len(scratch.modules) == 1
    gc.collect()


def test_old_signatures_release_their_records_and_show_the_same_stages(no_disk_cache):
    k = kernel(ROWS, shapes="specialise")
    first = np.arange(12.0, dtype=np.float32).reshape(3, 4)
    ck = k.compile(first)
    shown = {s: ck.inspect(s) for s in ("schedule", "loops", "llvm", "llvm-opt", "asm")}
    for n in range(variants.RECENT + 1):  # more signatures compiled since
        k.compile(np.ones((3, 5 + n), np.float32))
    assert ck._middle is None and ck.code.llvm_ir is None and ck.code.llvm_opt is None
    np.testing.assert_array_equal(ck(first), first.max(axis=1))
    for stage, text in shown.items():
        assert ck.inspect(stage) == text, stage
    assert ck._middle is not None  # made again, and kept while it is recent


def test_a_kernel_keeps_at_most_max_variants_signatures(no_disk_cache):
    k = kernel(ROWS, shapes="specialise", max_variants=3)
    hot = np.arange(6.0, dtype=np.float32).reshape(2, 3)
    k(hot)
    for n in range(6):
        x = np.arange(2.0 * (4 + n), dtype=np.float32).reshape(2, 4 + n)
        np.testing.assert_array_equal(k(x), x.max(axis=1))
        np.testing.assert_array_equal(k(hot), hot.max(axis=1))  # called between compiles: kept
        assert len(k._cache) <= 3 and len(k._plans) <= 3 and len(k._fast) <= 3
    assert any(specs[0].shape == hot.shape for specs, _ in k._cache)
    x = np.arange(8.0, dtype=np.float32).reshape(2, 4)  # dropped long ago: compiled again
    np.testing.assert_array_equal(k(x), x.max(axis=1))


@pytest.mark.parametrize("fastcall_on", ["1", "0"])
def test_the_bound_holds_under_either_dispatcher(no_disk_cache, monkeypatch, fastcall_on):
    from hyb.runtime import fastcall
    if fastcall_on == "0":
        monkeypatch.setattr(fastcall, "entry", fastcall.python_entry)
        monkeypatch.setattr(fastcall, "call", fastcall.python_call)
    monkeypatch.setenv("HYB_MAX_VARIANTS", "2")
    k = kernel(shapes="specialise")
    for n in range(1, 6):
        np.testing.assert_allclose(k(np.arange(n, dtype=np.float32)), np.arange(n) * 3.0 + 1.0)
    assert len(k._cache) == 2 and len(k._plans) <= 2


@pytest.mark.parametrize("value", [0, -1, 2.5, True, "8"])
def test_a_bad_max_variants_is_refused(value):
    with pytest.raises(hyb.HybridArgumentError, match="max_variants=.* must be a positive integer"):
        kernel(max_variants=value)


def test_a_bad_hyb_max_variants_is_refused(no_disk_cache, monkeypatch):
    monkeypatch.setenv("HYB_MAX_VARIANTS", "many")
    with pytest.raises(hyb.HybridArgumentError, match="HYB_MAX_VARIANTS='many' must be a positive integer"):
        kernel()(np.ones(3, np.float32))


def test_a_compile_keeps_little_of_the_isl_work(no_disk_cache):
    # islpy keeps 32 bytes for each argument an isl call takes and each string it returns, and a
    # compile makes thousands of calls; the middle end asks its frequent questions with calls that
    # keep nothing (hyb.schedule.islmem). A row kernel's compile for a new shape keeps about 30 KB
    # here (47 KB when every union was built anew from isl's taking calls).
    def new_shape(n):
        k = kernel(ROWS, shapes="specialise", max_variants=1)
        np.testing.assert_array_equal(k(np.ones((4, 10 + n), np.float32)), np.ones(4, np.float32))

    for n in range(3):
        new_shape(n)
    gc.collect()
    before = malloc_in_use()
    for n in range(3, 23):
        new_shape(n)
    gc.collect()
    assert (malloc_in_use() - before) / 20 < 40_000
