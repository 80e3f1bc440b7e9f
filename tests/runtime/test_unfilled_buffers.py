"""Outputs and temporaries allocated without zeros: only those of which every element is surely
written before anything reads it (deps.written_before_read); the others still start at zero."""
import numpy as np
import pytest

import hyb

SRC = '''
def full(a):
    c = output_tensor(a.shape, a.dtype)
    t = allocate(a.shape, a.dtype)
    for i in range(a.shape[0]):
        for j in range(a.shape[1]):
            t[i, j] = a[i, j] * 2
    for i in range(a.shape[0]):
        for j in range(a.shape[1]):
            c[i, j] = t[i, a.shape[1] - 1 - j]
    return c

def accumulate(a):
    c = output_tensor((a.shape[0],), a.dtype)
    for i in range(a.shape[0]):
        for k in range(a.shape[1]):
            c[i] += a[i, k]
    return c

def skip_first(a):
    c = output_tensor((a.shape[0],), a.dtype)
    for i in range(1, a.shape[0]):
        c[i] = a[i, 0]
    return c

def lower(a):
    c = output_tensor(a.shape, a.dtype)
    for i in range(a.shape[0]):
        for j in range(i + 1):
            c[i, j] = a[i, j]
    return c

def data_dependent(a, idx):
    c = output_tensor((a.shape[0],), a.dtype)
    for i in range(a.shape[0]):
        c[idx[i]] = a[i, 0]
    return c

def guarded(a):
    c = output_tensor((a.shape[0],), a.dtype)
    for i in range(a.shape[0]):
        if a[i, 0] > 0.0:
            c[i] = a[i, 1]
    return c
'''

MOD = hyb.compile_source(SRC, threads=1)
REFS = {
    "full": lambda a: (a * 2)[:, ::-1],
    "accumulate": lambda a: a.sum(axis=1),
    "skip_first": lambda a: np.concatenate([np.zeros(min(1, len(a))), a[1:, 0]]).astype(a.dtype),
    "lower": np.tril,
    "guarded": lambda a: np.where(a[:, 0] > 0, a[:, 1], 0).astype(a.dtype),
}
UNFILLED = {"full": ("c", "t"), "accumulate": (), "skip_first": (), "lower": (), "guarded": ()}


@pytest.mark.parametrize("name", list(REFS))
def test_only_buffers_written_before_read_skip_the_zeros(name):
    kernel = getattr(MOD, name)
    rng = np.random.default_rng(1)
    shapes = [(0, 0), (1, 1), (7, 7), (33, 33)] if name == "lower" else [(0, 2), (1, 2), (7, 5), (33, 33)]
    for shape in shapes:
        a = rng.uniform(-1, 1, shape)
        ck = kernel.compile(a)
        if min(shape) > 1:  # (at sizes 0 and 1 more buffers are written whole, or have nothing to fill)
            assert ck.code.unfilled == tuple(n for n in ck.buffers[1:] if n in UNFILLED[name])
        for _ in range(3):  # (freed buffers come back from the allocator holding old values)
            garbage = [np.full((64, 64), np.nan) for _ in range(4)]
            del garbage
            np.testing.assert_allclose(kernel(a), REFS[name](a), rtol=1e-12, atol=1e-12)


def test_a_scatter_through_an_index_tensor_keeps_the_zeros():
    a = np.arange(10.0).reshape(5, 2)
    idx = np.array([0, 0, 2, 2, 4])
    ck = MOD.data_dependent.compile(a, idx)
    assert ck.code.unfilled == ()
    np.testing.assert_array_equal(ck(a, idx), [2.0, 0.0, 6.0, 0.0, 8.0])


def test_the_disk_cache_keeps_which_buffers_skip_the_zeros(tmp_path, monkeypatch):
    monkeypatch.setenv("HYB_CACHE_DIR", str(tmp_path))
    a = np.ones((4, 3))
    first = hyb.compile_source(SRC, "unfilled.hyb").full.compile(a)
    again = hyb.compile_source(SRC, "unfilled.hyb").full.compile(a)
    assert again._middle is None  # loaded from the disk cache, not compiled
    assert "c" in first.code.unfilled
    assert again.code.unfilled == first.code.unfilled
    np.testing.assert_array_equal(again(a), np.full((4, 3), 2.0))
