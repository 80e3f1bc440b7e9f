"""Array contraction (hyb.schedule.contract): temporaries whose values live within one iteration
of the fused loops become scalars and lose their buffers; the others keep them.  Each result is
compared with the interpreter and with NumPy."""
import re
import warnings

import numpy as np
import pytest

import hyb
from hyb.codegen import abi

CHAIN = '''
def chain(a, b, c):
    n = a.shape[0]
    m = a.shape[1]
    t1 = allocate((n, m), a.dtype)
    t2 = allocate((n, m), a.dtype)
    t3 = allocate((n, m), a.dtype)
    out = output_tensor((n, m), a.dtype)
    for i in range(n):
        for j in range(m):
            t1[i, j] = a[i, j] * b[i, j] + c[i, j]
    for i in range(n):
        for j in range(m):
            t2[i, j] = max(t1[i, j], 0.0)
    for i in range(n):
        for j in range(m):
            t3[i, j] = t2[i, j] * sigmoid(t2[i, j])
    for i in range(n):
        for j in range(m):
            out[i, j] = t3[i, j] + 0.5 * sqrt(abs(a[i, j])) - tanh(b[i, j])
    return out

def chain1(a):
    n = a.shape[0]
    t = allocate((n,), a.dtype)
    u = allocate((n,), a.dtype)
    out = output_tensor((n,), a.dtype)
    for i in range(n):
        t[i] = a[i] * 3.0 - 1.0
    for i in range(n):
        u[i] = t[i] * t[i]
    for i in range(n):
        out[i] = u[i] + t[i]
    return out

def row_norms(a):
    n = a.shape[0]
    m = a.shape[1]
    sq = allocate((n, m), a.dtype)
    out = output_tensor((n,), a.dtype)
    for i in range(n):
        s = 0.0
        for j in range(m):
            sq[i, j] = a[i, j] * a[i, j]
            s += sq[i, j]
        out[i] = s
    return out

def neighbour(a):
    n = a.shape[0]
    m = a.shape[1]
    t = allocate((n, m), a.dtype)
    out = output_tensor((n, m), a.dtype)
    for i in range(n):
        for j in range(m):
            t[i, j] = a[i, j] * 2.0
    for i in range(n):
        for j in range(1, m):
            out[i, j] = t[i, j] + t[i, j - 1]
    return out

def neighbour_row(a):
    n = a.shape[0]
    m = a.shape[1]
    t = allocate((n, m), a.dtype)
    out = output_tensor((n, m), a.dtype)
    for i in range(n):
        for j in range(m):
            t[i, j] = a[i, j] * 2.0
        for j in range(1, m):
            out[i, j] = t[i, j] + t[i, j - 1]
    return out

def transposed(a):
    n = a.shape[0]
    t = allocate((n, n), a.dtype)
    out = output_tensor((n, n), a.dtype)
    for i in range(n):
        for j in range(n):
            t[i, j] = a[i, j] + 1.0
    for i in range(n):
        for j in range(n):
            out[i, j] = t[j, i] * 2.0
    return out

def read_first(a):
    n = a.shape[0]
    t = allocate((n,), a.dtype)
    out = output_tensor((n,), a.dtype)
    for i in range(n):
        out[i] = t[i] + a[i]
        t[i] = a[i] * 2.0
    return out

def returned(a):
    n = a.shape[0]
    t = allocate((n,), a.dtype)
    out = output_tensor((n,), a.dtype)
    for i in range(n):
        t[i] = a[i] * 2.0
    for i in range(n):
        out[i] = t[i] + 1.0
    return out, t

def branch(a):
    n = a.shape[0]
    t = allocate((n,), a.dtype)
    out = output_tensor((n,), a.dtype)
    for i in range(n):
        if a[i] > 0.0:
            t[i] = a[i] * 2.0
        out[i] = t[i] + 1.0
    return out
'''


def _sigmoid(x):
    return 1 / (1 + np.exp(-x))


def chain_ref(a, b, c):
    t2 = np.maximum(a * b + c, 0)
    return t2 * _sigmoid(t2) + 0.5 * np.sqrt(np.abs(a)) - np.tanh(b)


def chain1_ref(a):
    t = a * 3 - 1
    return t * t + t


def row_norms_ref(a):
    return (a * a).sum(axis=1)


def _arrays(shape, dtype, k=1, seed=0):
    rng = np.random.default_rng(seed)
    return [(rng.standard_normal(shape) * 2).astype(dtype) for _ in range(k)]


def _module(**options):
    return hyb.compile_source(CHAIN, "contract.hyb", **options)


MOD = _module(schedule={"recompute": False})  # contraction, not computing temporaries at their reads
APART = _module(schedule={"fuse": False})
ORIGINAL = _module(schedule="original")


def _contracted(ck) -> list:
    return re.findall(r"temporary `(\w+)` contracted to a scalar", ck.inspect("schedule"))


def _signature_pointers(ck) -> int:
    head = re.search(r"define i32 @\"?hyb_\w+\"?\((.*)\)", ck.llvm_ir).group(1)
    return head.count("ptr") - 1  # the runtime block is the last


def _check(kernel, args, ref, dtype):
    got = kernel(*args)
    emulated = kernel.emulate(*args)
    tol = dict(rtol=2e-5, atol=1e-5) if dtype == np.float32 else dict(rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(got, emulated, **tol)
    np.testing.assert_allclose(got, ref(*args), **tol)
    assert got.dtype == dtype


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", [(0, 4), (1, 1), (3, 5), (33, 515)])
def test_chain_contracted(shape, dtype):
    args = _arrays(shape, dtype, 3)
    _check(MOD.chain, args, chain_ref, dtype)
    ck = MOD.chain.compile(*args)
    if 0 in shape:
        return  # no statement runs: nothing to contract
    assert _contracted(ck) == ["t1", "t2", "t3"]
    assert ck.buffers == ["a", "b", "c", "out"] == abi.buffer_order(ck.middle.code.kernel)
    assert _signature_pointers(ck) == 4
    if shape != (1, 1):  # (one element: no loops to fuse)
        assert "loop nests fused into loop" in ck.inspect("schedule")
    loops = ck.inspect("loops")
    assert "{scalars: `t1`, `t2`}" in loops and "{scalars: `t3`}" in loops


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("n", [0, 1, 7, 1025])
def test_chain_1d_contracted(n, dtype):
    args = _arrays((n,), dtype)
    _check(MOD.chain1, args, chain1_ref, dtype)
    if n:
        ck = MOD.chain1.compile(*args)
        assert _contracted(ck) == ["t", "u"] and ck.buffers == ["a", "out"]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", [(1, 1), (5, 3), (33, 513)])
def test_temporary_feeding_a_reduction(shape, dtype):
    # isl puts the producer in loops of its own (keeping its loops parallel): the loops as written
    # hold each value of `sq` within one iteration
    args = _arrays(shape, dtype)
    _check(ORIGINAL.row_norms, args, row_norms_ref, dtype)
    ck = ORIGINAL.row_norms.compile(*args)
    assert _contracted(ck) == ["sq"] and ck.buffers == ["a", "out"]
    if shape == (5, 3):
        _check(MOD.row_norms, args, row_norms_ref, dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", [(0, 4), (1, 1), (33, 515)])
def test_fuse_off_keeps_buffers(shape, dtype):
    args = _arrays(shape, dtype, 3)
    _check(APART.chain, args, chain_ref, dtype)
    ck = APART.chain.compile(*args)
    assert _contracted(ck) == [] and ck.buffers == ["a", "b", "c", "t1", "t2", "t3", "out"]
    assert "fused" not in ck.inspect("schedule") and "scalars:" not in ck.inspect("loops")
    args = _arrays((shape[0] * 9,), dtype)
    _check(APART.chain1, args, chain1_ref, dtype)
    assert APART.chain1.compile(*args).buffers == ["a", "t", "u", "out"]


def test_temporary_in_a_parallel_loop():
    mod = _module(schedule={"min_parallel_work": 0, "recompute": False}, threads=3)
    args = _arrays((67, 515), np.float32, 3)
    _check(mod.chain, args, chain_ref, np.float32)
    ck = mod.chain.compile(*args)
    assert "parallel for" in ck.inspect("loops")
    assert _contracted(ck) == ["t1", "t2", "t3"] and ck.buffers == ["a", "b", "c", "out"]
    assert ".par0" in ck.llvm_ir  # outlined: each thread its own copy of the scalars


def test_disk_cache_keeps_the_buffer_list():
    args = _arrays((5, 3), np.float64)
    first = _module(schedule="original").row_norms
    assert first.compile(*args).buffers == ["a", "out"]
    again = _module(schedule="original").row_norms  # a new module: its code comes from the disk cache
    ck = again.compile(*args)
    assert ck._middle is None and ck.code.buffers == ("a", "out") and ck.buffers == ["a", "out"]
    _check(again, args, row_norms_ref, np.float64)


def _kept(kernel, args, name, ref, why=None):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ck = kernel.compile(*args)
        got, emulated = kernel(*args), kernel.emulate(*args)
    for g, e, r in zip(*(x if isinstance(x, tuple) else (x,) for x in (got, emulated, ref))):
        np.testing.assert_allclose(g, e, rtol=1e-12)
        np.testing.assert_allclose(g, r, rtol=1e-12)
    assert _contracted(ck) == [] and name in ck.buffers and "scalars:" not in ck.inspect("loops")
    if why is not None:
        assert f"temporary `{name}` kept in memory: {why}" in ck.inspect("schedule")
    return ck


def test_neighbouring_cell_keeps_buffer():
    (a,) = _arrays((6, 9), np.float64)
    ref = np.zeros_like(a)
    ref[:, 1:] = 2 * a[:, 1:] + 2 * a[:, :-1]
    _kept(MOD.neighbour, [a], "t", ref)
    # in one loop `i` as written: the row's later writes come between a write and its read
    _kept(ORIGINAL.neighbour_row, [a], "t", ref, "another write of it runs between a write and the read of its value")


def test_other_iteration_order_keeps_buffer():
    (a,) = _arrays((7, 7), np.float64)
    _kept(MOD.transposed, [a], "t", (a.T + 1) * 2)


def test_read_before_written_keeps_buffer():
    (a,) = _arrays((9,), np.float64)
    _kept(MOD.read_first, [a], "t", a.copy(), "a read of it sees the zero it starts with")


def test_returned_temporary_keeps_buffer():
    (a,) = _arrays((9,), np.float64)
    _kept(MOD.returned, [a], "t", (a * 2 + 1, a * 2))


def test_written_in_a_branch_keeps_buffer():
    (a,) = _arrays((9,), np.float64)
    _kept(MOD.branch, [a], "t", np.where(a > 0, a * 2, 0) + 1,
          "it is written under a condition evaluated when the loops run")


def test_cuda_keeps_contracted_scalars_in_each_thread():
    """The GPU's grid loops hold all the accesses: each thread keeps its own copy of the scalars
    (CUDA C text only; no GPU needed)."""
    args = _arrays((33, 515), np.float32, 3)
    ck = MOD.chain.compile(*args)
    source = ck.inspect("cuda")
    gpu = ck._stages["cuda-kernel"]
    assert _contracted(gpu) == ["t1", "t2", "t3"] and gpu.buffers == ["a", "b", "c", "out"]
    assert "GPU: loops `c0` and `c1` carry no dependence: a 2-D grid" in gpu.inspect("schedule")
    kernel = source[source.index('extern "C" __global__'):]
    head = kernel[:kernel.index("{")]
    assert "t_t1" not in head and "t_out" in head
    assert "float s_t1 = " in kernel and "s_t1 = ((" in kernel
    assert "*(float *)(hyb_sc + 0) = s_t1" not in kernel  # a grid kernel writes no scalar back
