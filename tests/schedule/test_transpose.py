"""Nests that read along one dimension and write along another (a transpose, NCHW to NHWC, a bias
and activation stored transposed): run in tiles staged through a buffer (hyb.schedule.transpose),
with the results of the nest as written."""
import numpy as np
import pytest

import hyb

SRC = '''
def bias_silu_t(x, b):
    y = output_tensor((x.shape[1], x.shape[0]), x.dtype)
    for i in range(x.shape[0]):
        for j in range(x.shape[1]):
            t = x[i, j] + b[j]
            y[j, i] = t / (1.0 + exp(-t))
    return y

def transpose(x):
    y = output_tensor((x.shape[1], x.shape[0]), x.dtype)
    for i in range(x.shape[0]):
        for j in range(x.shape[1]):
            y[j, i] = x[i, j]
    return y

def nchw_to_nhwc(x):
    y = output_tensor((x.shape[0], x.shape[2], x.shape[3], x.shape[1]), x.dtype)
    for n in range(x.shape[0]):
        for h in range(x.shape[2]):
            for c in range(x.shape[1]):
                for w in range(x.shape[3]):
                    y[n, h, w, c] = x[n, c, h, w]
    return y

def row_major(x):
    y = output_tensor(x.shape, x.dtype)
    for i in range(x.shape[0]):
        for j in range(x.shape[1]):
            y[i, j] = x[i, j] * 2.0
    return y
'''
SHAPES = [(1, 1), (65, 64), (64, 65), (130, 70), (200, 129), (0, 100), (300, 3)]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_staged_nests_give_the_written_results(shape, dtype):
    mod = hyb.compile_source(SRC, "transpose.hyb")  # code for this shape (staged where it is large enough)
    rng = np.random.default_rng(shape[0] * 100 + shape[1])
    x = rng.standard_normal(shape).astype(dtype)
    b = rng.standard_normal(shape[1]).astype(dtype)
    np.testing.assert_array_equal(mod.transpose(x), x.T)
    got, want = mod.bias_silu_t(x, b), mod.bias_silu_t.emulate(x, b)
    np.testing.assert_allclose(got, want, rtol=4e-6 if dtype == "float32" else 1e-14, atol=0)
    x4 = rng.standard_normal((2, shape[0], 3, shape[1])).astype(dtype)  # c x w: the staged pair
    np.testing.assert_array_equal(mod.nchw_to_nhwc(x4), x4.transpose(0, 2, 3, 1))


def test_the_decision_and_where_it_is_not_taken():
    mod = hyb.compile_source(SRC, "transpose.hyb")  # each kernel's first shape: code for that shape
    x, b = np.ones((100, 130), np.float32), np.ones(130, np.float32)
    text = mod.bias_silu_t.compile(x, b).inspect("schedule")
    assert "reads along `j` and writes `y` along `i`: run in 64x64 tiles" in text, text
    assert "64x64 tiles" in mod.transpose.compile(x).inspect("schedule")
    # a nest inside other loops (channels and pixels of NCHW to NHWC)
    x4 = np.ones((2, 100, 3, 130), np.float32)
    assert "reads along `w` and writes `y` along `c`: run in 64x64 tiles" in \
        mod.nchw_to_nhwc.compile(x4).inspect("schedule")
    np.testing.assert_array_equal(hyb.compile_source(SRC, threads=2).nchw_to_nhwc(x4), x4.transpose(0, 2, 3, 1))
    # rows written along the loop that reads them, nests too small for a tile, and shape-generic
    # code (the tiles are sized for loops whose bounds are known): as written
    assert "tiles, each computed" not in mod.row_major.compile(x).inspect("schedule")
    small = np.ones((64, 500), np.float32)
    assert "tiles, each computed" not in hyb.compile_source(SRC).transpose.compile(small).inspect("schedule")
    assert "tiles, each computed" not in mod.transpose.compile(np.ones((99, 130), np.float32)).inspect("schedule")
    # schedule="original" keeps the nest as written
    original = hyb.compile_source(SRC, schedule="original").transpose
    assert "tiles, each computed" not in original.compile(x).inspect("schedule")
    np.testing.assert_array_equal(original(x), x.T)


def test_a_staged_kernel_from_the_disk_cache(tmp_path, monkeypatch):
    """The tile is a buffer the runtime allocates: code loaded from the disk cache knows its shape."""
    from hyb.runtime import cache

    monkeypatch.setenv("HYB_CACHE_DIR", str(tmp_path))
    x = np.arange(100 * 130, dtype=np.float32).reshape(100, 130)
    first = hyb.compile_source(SRC, "transpose.hyb").transpose
    np.testing.assert_array_equal(first(x), x.T)
    hits = []
    real = cache.load
    monkeypatch.setattr(cache, "load", lambda key: (lambda e: (hits.append(e is not None), e)[1])(real(key)))
    again = hyb.compile_source(SRC, "transpose.hyb").transpose
    np.testing.assert_array_equal(again(x), x.T)
    assert hits == [True]


TRANSPOSE = '''
def tr(x):
    y = output_tensor((x.shape[1], x.shape[0]), x.dtype)
    for i in range(x.shape[0]):
        for j in range(x.shape[1]):
            y[j, i] = x[i, j]
    return y
'''


@pytest.mark.parametrize("dtype", ["float32", "float64", "int32", "int64", "int16", "bool"])
def test_whole_tiles_copied_out_through_registers_and_edges_as_written(dtype):
    """Whole 64x64 tiles of 4- and 8-byte elements leave the tile as blocks transposed in
    registers; tiles cut short at an edge, and other element sizes, are copied as written."""
    rng = np.random.default_rng(7)
    for shape in ((128, 192), (130, 200), (65, 257), (192, 66)):
        x = (rng.integers(-50, 50, shape) > 0) if dtype == "bool" else rng.integers(-50, 50, shape).astype(dtype)
        for threads in (1, 2):
            k = hyb.compile_source(TRANSPOSE, threads=threads).tr
            np.testing.assert_array_equal(k(x), x.T)
    assert "copied out along `i`" in k.compile(x).inspect("schedule")


def test_the_copied_out_tensor_and_the_tile_need_no_zeros():
    """The copy out writes every element of its tile's block (a store under no condition in
    loops with affine bounds), so neither the output nor the tile is filled with zeros first."""
    x = np.ones((130, 200), np.float32)
    ck = hyb.compile_source(TRANSPOSE).tr.compile(x)
    assert set(ck.code.unfilled) == {"y", "y_tile"}, ck.code.unfilled
