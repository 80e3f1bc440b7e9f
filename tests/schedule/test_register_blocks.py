"""Register and cache blocks of contractions (hyb.schedule.blocking, hyb.schedule.promote): which
loop nests get them, found from accesses and dependences alone, and that the results equal NumPy's
and the interpreter's with blocks on and off, at sizes that fill no block, one row, odd and prime."""
import itertools
import re

import numpy as np
import pytest

import hyb
from hyb.errors import HybridArgumentError
from hyb.schedule.blocking import block_shape, cache_tiles
from hyb.target import CpuTarget


def gemm_in_order(order: str) -> str:
    loops = {"i": "range(c.shape[0])", "j": "range(c.shape[1])", "k": "range(a.shape[1])"}
    body = "def gemm_{o}(c, a, b):\n".format(o=order)
    pad = "    "
    for v in order:
        body += f"{pad}for {v} in {loops[v]}:\n"
        pad += "    "
    body += f"{pad}c[i, j] += a[i, k] * b[k, j]\n    return c\n"
    return body


ORDERS = ["".join(p) for p in itertools.permutations("ijk")]

SRC = "\n".join(gemm_in_order(o) for o in ORDERS) + '''

def gemm_ab(alpha, beta, c, a, b):
    for i in range(c.shape[0]):
        for j in range(c.shape[1]):
            c[i, j] *= beta
        for k in range(a.shape[1]):
            for j in range(c.shape[1]):
                c[i, j] += alpha * a[i, k] * b[k, j]
    return c

def gemm_tt(a, b):
    c = output_tensor((a.shape[1], b.shape[0]), a.dtype)
    for i in range(a.shape[1]):
        for j in range(b.shape[0]):
            for k in range(a.shape[0]):
                c[i, j] += a[k, i] * b[j, k]
    return c

def bmm(a, b):
    c = output_tensor((a.shape[0], a.shape[1], b.shape[2]), a.dtype)
    for n in range(a.shape[0]):
        for i in range(a.shape[1]):
            for k in range(a.shape[2]):
                for j in range(b.shape[2]):
                    c[n, i, j] += a[n, i, k] * b[n, k, j]
    return c

def two_mm(a, b, c):
    t = allocate((a.shape[0], b.shape[1]), a.dtype)
    d = output_tensor((a.shape[0], c.shape[1]), a.dtype)
    for i in range(a.shape[0]):
        for j in range(b.shape[1]):
            for k in range(a.shape[1]):
                t[i, j] += a[i, k] * b[k, j]
    for i in range(a.shape[0]):
        for j in range(c.shape[1]):
            for k in range(b.shape[1]):
                d[i, j] += t[i, k] * c[k, j]
    return d

def syrk(c, a):
    for i in range(c.shape[0]):
        for k in range(a.shape[1]):
            for j in range(i + 1):
                c[i, j] += a[i, k] * a[j, k]
    return c

def row_products(a, c4):
    acc = allocate((a.shape[2],), a.dtype)
    for r in range(a.shape[0]):
        for q in range(a.shape[1]):
            for p in range(a.shape[2]):
                acc[p] = 0.0
                for s in range(a.shape[2]):
                    acc[p] += a[r, q, s] * c4[s, p]
            for p in range(a.shape[2]):
                a[r, q, p] = acc[p]
    return a

def upper_gram(g, d):
    for i in range(g.shape[0]):
        for j in range(i + 1, g.shape[1]):
            for k in range(d.shape[0]):
                g[i, j] += d[k, i] * d[k, j]
    return g

def conv(x, w):
    k = w.shape[0]
    p = x.shape[1] - w.shape[2] + 1
    q = x.shape[2] - w.shape[3] + 1
    out = output_tensor((k, p, q), x.dtype)
    for kk in range(k):
        for pp in range(p):
            for qq in range(q):
                for cc in range(x.shape[0]):
                    for rr in range(w.shape[2]):
                        for ss in range(w.shape[3]):
                            out[kk, pp, qq] += x[cc, pp + rr, qq + ss] * w[kk, cc, rr, ss]
    return out

def attention_scores(q, kt):
    s = output_tensor((q.shape[0], kt.shape[0]), q.dtype)
    for i in range(q.shape[0]):
        for j in range(kt.shape[0]):
            for d in range(q.shape[1]):
                s[i, j] += q[i, d] * kt[j, d]
    return s

def scores_reversed(q, kt):
    s = output_tensor((q.shape[0], kt.shape[0]), q.dtype)
    for i in range(q.shape[0]):
        for j in range(kt.shape[0]):
            for d in range(q.shape[1]):
                s[i, j] += q[i, d] * kt[j, q.shape[1] - 1 - d]
    return s

def gemm_relu(a, b):
    c = output_tensor((a.shape[0], b.shape[1]), a.dtype)
    for i in range(a.shape[0]):
        for j in range(b.shape[1]):
            for k in range(a.shape[1]):
                c[i, j] = c[i, j] + a[i, k] * b[k, j]
            c[i, j] = max(c[i, j], 0.0)
    return c
'''

# (m, n, k): empty, one row, fewer than a block, not multiples of any block or tile (primes), blocks
SIZES = [(0, 5, 7), (1, 1, 1), (1, 33, 17), (7, 70, 3), (13, 131, 29), (37, 67, 101)]


@pytest.fixture(scope="module")
def mod():
    return hyb.compile_source(SRC, "blocks.hyb", fastmath=False)


@pytest.fixture(scope="module")
def packed():
    # blocks at every size (the model makes none for less work than MIN_BLOCK_WORK), and packing
    return hyb.compile_source(SRC, "blocks.hyb", fastmath=False, schedule={"pack": True, "register": (4, 16)})


@pytest.fixture(scope="module")
def unblocked():
    # each cell's sum in the program's order (a register block keeps that order across k; without
    # blocks, the default mode would let the reduction loop run as vector partial sums)
    return hyb.compile_source(SRC, "blocks.hyb", fastmath=False, schedule={"register": False, "reassociate": False})


def in_order(unblocked, blocked):
    """The unblocked code's sums (in the program's order, each product and addition rounded apart)
    against the blocked code's: the same order of additions, but the default mode fuses each
    product into its addition (an FMA), so they agree to the last bits, not bit for bit."""
    tight = {"float64": (1e-13, 1e-13), "float32": (1e-5, 2e-5)}[unblocked.dtype.name]
    np.testing.assert_allclose(blocked, unblocked, rtol=tight[0], atol=tight[1])


def rnd(shape, dtype, seed=0):
    g = np.random.default_rng(seed + sum(shape))
    if np.dtype(dtype).kind == "f":
        return g.standard_normal(shape).astype(dtype)
    return g.integers(-4, 5, shape).astype(dtype)


def schedule_of(kernel, *args) -> str:
    return kernel.compile(*args).inspect("schedule")


@pytest.mark.parametrize("order", ORDERS)
def test_every_loop_order_is_blocked_and_right(mod, packed, order):
    for m, n, kk in SIZES:
        a, b, c = rnd((m, kk), "float32"), rnd((kk, n), "float32"), rnd((m, n), "float32", 1)
        got = mod.kernels[f"gemm_{order}"](c.copy(), a, b)
        np.testing.assert_allclose(got, c + a @ b, rtol=2e-5, atol=2e-4)
        # blocked or not, packed or not: the same operations in the same order, the same bits
        np.testing.assert_array_equal(packed.kernels[f"gemm_{order}"](c.copy(), a, b), got)
    a, b, c = rnd((40, 50), "float32"), rnd((50, 70), "float32"), rnd((40, 70), "float32")
    text = schedule_of(mod.kernels[f"gemm_{order}"], c, a, b)
    assert "register block" in text and "accumulated in registers" in text, text


@pytest.mark.parametrize("dtype", ["float64", "int32", "int64", "float32"])
def test_alpha_beta_in_each_dtype(mod, packed, dtype):
    for m, n, kk in SIZES:
        a, b, c = rnd((m, kk), dtype), rnd((kk, n), dtype), rnd((m, n), dtype, 1)
        alpha, beta = np.dtype(dtype).type(3), np.dtype(dtype).type(2)
        want = beta * c + alpha * (a @ b)
        got = mod.kernels["gemm_ab"](alpha, beta, c.copy(), a, b)
        plain = packed.kernels["gemm_ab"](alpha, beta, c.copy(), a, b)
        np.testing.assert_array_equal(plain, got)  # blocked or not, packed or not: the same bits
        if np.dtype(dtype).kind == "i":
            np.testing.assert_array_equal(got, want)
            np.testing.assert_array_equal(plain, want)
        else:
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4)
    a, b, c = rnd((40, 50), dtype), rnd((50, 70), dtype), rnd((40, 70), dtype)
    text = schedule_of(mod.kernels["gemm_ab"], np.dtype(dtype).type(1), np.dtype(dtype).type(1), c, a, b)
    assert "before the reduction loops" in text and f"({dtype}, for " in text, text


@pytest.mark.parametrize("name", ["gemm_tt", "attention_scores"])
def test_transposed_operands(mod, packed, unblocked, name):
    for m, n, kk in SIZES:
        if name == "gemm_tt":
            a, b = rnd((kk, m), "float64"), rnd((n, kk), "float64")
            want = a.T @ b.T
        else:
            a, b = rnd((m, kk), "float64"), rnd((n, kk), "float64")
            want = a @ b.T
        got = mod.kernels[name](a, b)
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
        # each cell's sum in the same order, blocked or not, packed or not
        np.testing.assert_array_equal(packed.kernels[name](a, b), got)
        in_order(unblocked.kernels[name](a, b), got)
        if m * n * kk <= 13 * 131 * 29:
            np.testing.assert_allclose(got, mod.kernels[name].emulate(a, b), rtol=1e-12, atol=1e-12)
    if name == "gemm_tt":
        # vectorised along i, where a[k, i] is unit-stride (c is read and written across the
        # vector only outside the reduction loop)
        text = schedule_of(mod.kernels[name], rnd((40, 50), "float64"), rnd((70, 40), "float64"))
        assert "register block" in text and "accumulated in registers" in text
    else:
        # no loop reads both operands with unit stride: vectorised along j, each KC x NR panel of
        # kt[j, d] packed with j as its unit stride
        a, b = rnd((40, 50), "float64"), rnd((70, 50), "float64")
        text = schedule_of(mod.kernels[name], a, b)
        assert "accumulated in registers" in text and "panel of `kt` packed" in text, text
        off = hyb.compile_source(SRC, "blocks.hyb", fastmath=False, schedule={"pack": False})
        assert "register block" not in schedule_of(off.kernels[name], a, b)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("name", ["attention_scores", "scores_reversed"])
def test_transposed_panel_copied_in_squares_or_runs_of_steps(unblocked, dtype, name):
    # kt[j, d] is unit-stride along the reduction: its panel is copied in squares of one vector's
    # lanes transposed in registers (kt[j, n - 1 - d], walked backwards, in runs of
    # promote.PACK_STEPS steps), here across reduction tiles of 20 steps (no multiple of a square
    # or a run) and sizes whose last square, run, tile and block are all short
    tiled = hyb.compile_source(SRC, "blocks.hyb", fastmath=False,
                               schedule={"register": (4, 16), "cache_tile": (8, 32, 20)})
    k = tiled.kernels[name]
    for m, n, kk in [(8, 16, 16), (9, 33, 101), (13, 47, 40), (37, 67, 21), (16, 32, 32)]:
        q, kt = rnd((m, kk), dtype), rnd((n, kk), dtype)
        got = k(q, kt)
        kn = kt if name == "attention_scores" else kt[:, ::-1]
        np.testing.assert_allclose(got, q.astype(np.float64) @ kn.T.astype(np.float64),
                                   rtol=1e-5 if dtype == "float32" else 1e-12, atol=1e-5 if dtype == "float32" else 1e-12)
        in_order(unblocked.kernels[name](q, kt), got)
    loops = k.compile(rnd((37, 101), dtype), rnd((67, 101), dtype)).inspect("loops")
    side = 16 if dtype == "float32" else 8
    assert "panel <- memory" in loops, loops
    if name == "attention_scores":
        assert f"S0_kb += {side})" in loops and f"transposed {side}x{side} for" in loops, loops
    else:
        assert "S0_kb += 16)" in loops and "transposed" not in loops, loops


def test_batched_and_two_products(mod):
    for m, n, kk in SIZES:
        a, b = rnd((3, m, kk), "float32"), rnd((3, kk, n), "float32")
        np.testing.assert_allclose(mod.kernels["bmm"](a, b), a @ b, rtol=2e-5, atol=2e-4)
        a, b, c = rnd((m, kk), "float64"), rnd((kk, n), "float64"), rnd((n, m + 2), "float64")
        np.testing.assert_allclose(mod.kernels["two_mm"](a, b, c), a @ b @ c, rtol=1e-11, atol=1e-10)
    a, b = rnd((2, 40, 50), "float32"), rnd((2, 50, 70), "float32")
    assert "register block" in schedule_of(mod.kernels["bmm"], a, b)


def test_triangular_and_convolution_stay_right(mod, unblocked):
    for m, _, kk in SIZES:
        c, a = rnd((m, m), "float64", 3), rnd((m, kk), "float64")
        want = c + np.tril(a @ a.T)
        np.testing.assert_allclose(mod.kernels["syrk"](c.copy(), a), want, rtol=1e-12, atol=1e-12)
    # a[j, k] needs a packed panel, and in the triangle j <= i no panel made outside the rows is
    # full for every row: no block
    assert "register block" not in schedule_of(mod.kernels["syrk"], rnd((70, 70), "float64"), rnd((70, 50), "float64"))
    x, w = rnd((8, 12, 37), "float32"), rnd((32, 8, 3, 3), "float32")
    want = np.zeros((32, 10, 35), np.float32)
    for r in range(3):
        for s in range(3):
            want += np.einsum("cpq,kc->kpq", x[:, r:r + 10, s:s + 35], w[:, :, r, s])
    got = mod.kernels["conv"](x, w)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    in_order(unblocked.kernels["conv"](x, w), got)
    # the output channel makes the block's rows (its inputs are the vector every row reuses), and the
    # taps' loops isl put in bands of their own join the reduction loops around the block
    text = schedule_of(mod.kernels["conv"], x, w)
    assert "register block" in text and "accumulated in registers across loop(s) `" in text, text
    line = next(ln for ln in text.splitlines() if "accumulated in registers" in ln)
    assert line.split("across loop(s)")[1].count("`") == 6, line  # cc, rr and ss


def test_triangle_blocks_full_where_every_row_is(mod, packed, unblocked):
    # j > i: a block is full where its first and last rows both start at the tile's first column
    # and reach NR columns; the others run in the block's array with each row's own bounds
    for m, _, kk in SIZES + [(70, 0, 33)]:
        g, d = rnd((m, m), "float64", 2), rnd((kk, m), "float64")
        want = g + np.triu(d.T @ d, 1)
        got = mod.kernels["upper_gram"](g.copy(), d)
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
        np.testing.assert_array_equal(packed.kernels["upper_gram"](g.copy(), d), got)
        in_order(unblocked.kernels["upper_gram"](g.copy(), d), got)
        if m * kk <= 13 * 29:  # the interpreter, at the small sizes
            np.testing.assert_allclose(got, mod.kernels["upper_gram"].emulate(g.copy(), d), rtol=1e-12, atol=1e-12)
    text = schedule_of(mod.kernels["upper_gram"], rnd((70, 70), "float64"), rnd((33, 70), "float64"))
    assert "accumulated in registers" in text, text


def test_block_of_one_row(mod, packed, unblocked):
    # acc[p] is reused for every (r, q), so no loop but p moves the written cell: a block of one
    # row keeps a vector of acc in registers across s
    for m, n, kk in SIZES + [(3, 4, 70)]:
        a, c4 = rnd((m, n, kk), "float64"), rnd((kk, kk), "float64", 1)
        got = mod.kernels["row_products"](a.copy(), c4)
        np.testing.assert_allclose(got, a @ c4, rtol=1e-12, atol=1e-12)
        np.testing.assert_array_equal(packed.kernels["row_products"](a.copy(), c4), got)
        in_order(unblocked.kernels["row_products"](a.copy(), c4), got)
        if m * n * kk <= 13 * 131 * 29:
            np.testing.assert_allclose(got, mod.kernels["row_products"].emulate(a.copy(), c4), rtol=1e-12, atol=1e-12)
    text = schedule_of(mod.kernels["row_products"], rnd((5, 6, 70), "float64"), rnd((70, 70), "float64"))
    assert "register block 1x" in text and "accumulated in registers" in text, text


def test_other_statement_after_the_reduction(mod):
    for m, n, kk in SIZES:
        a, b = rnd((m, kk), "float32"), rnd((kk, n), "float32")
        np.testing.assert_allclose(mod.kernels["gemm_relu"](a, b), np.maximum(a @ b, 0), rtol=2e-5, atol=2e-4)


def test_blocks_agree_with_the_interpreter(mod):
    a, b, c = rnd((13, 29), "float64"), rnd((29, 67), "float64"), rnd((13, 67), "float64")
    k = mod.kernels["gemm_ab"]
    got = k(2.0, 0.5, c.copy(), a, b)
    np.testing.assert_allclose(got, k.emulate(2.0, 0.5, c.copy(), a, b), rtol=1e-13, atol=1e-13)


def test_register_option_and_loops(mod):
    src = gemm_in_order("ikj")
    a, b, c = rnd((30, 40), "float32"), rnd((40, 50), "float32"), rnd((30, 50), "float32")
    k = hyb.compile_source(src, "g.hyb", schedule={"register": (4, 16)}).kernels["gemm_ikj"]
    ck = k.compile(c, a, b)
    assert "register block 4x16" in ck.inspect("schedule")
    loops = ck.inspect("loops")
    assert "S0.acc" in loops and "S0.load" in loops and "S0.store" in loops and "vector for" in loops
    np.testing.assert_allclose(k(c.copy(), a, b), c + a @ b, rtol=2e-5, atol=2e-4)
    off = hyb.compile_source(src, "g.hyb", schedule={"register": False}).kernels["gemm_ikj"]
    assert "register block" not in off.compile(c, a, b).inspect("schedule")
    for bad in [(4,), (0, 16), "big", (4, 16.0), (True, 4)]:
        with pytest.raises(HybridArgumentError, match="schedule option register="):
            hyb.compile_source(src, "g.hyb", schedule={"register": bad}).kernels["gemm_ikj"](c.copy(), a, b)
    for bad in ["yes", 1, None]:
        with pytest.raises(HybridArgumentError, match=f"schedule option pack={bad!r} must be True or False"):
            hyb.compile_source(src, "g.hyb", schedule={"pack": bad})


def test_block_shape_from_the_register_budget():
    avx512 = CpuTarget(vector_bits=512, vector_registers=32)
    avx2 = CpuTarget(vector_bits=256, vector_registers=16)
    assert block_shape(avx512, 4, 1000, 1000) == (6, 64)
    assert block_shape(avx512, 8, 1000, 1000) == (6, 32)
    assert block_shape(avx2, 4, 1000, 1000) == (4, 24)
    for machine, size in [(avx512, 4), (avx512, 8), (avx2, 4), (avx2, 8)]:
        mr, nr = block_shape(machine, size, None, None)
        lanes = machine.vector_bits // (8 * size)
        assert nr % lanes == 0 and mr * (nr // lanes) + nr // lanes + 1 <= machine.vector_registers
    assert block_shape(avx512, 4, 1000, 8) is None  # shorter than one vector
    assert block_shape(avx512, 4, 1, 1000) is None
    # J shorter than four vectors and no multiple of them: one block across all of it, of 4 rows
    # (blocks of 32 would leave 8 columns to the scalar edge code)
    assert block_shape(avx512, 4, 3, 40) == (3, 40)
    assert block_shape(avx512, 4, 32, 40) == (4, 40)
    assert block_shape(avx512, 4, 64, 20) == (4, 20)
    assert block_shape(avx512, 4, 32, 48) == (8, 48)  # a multiple: as before
    assert block_shape(avx512, 8, 32, 40) == (6, 32)  # five float64 vectors: as before
    assert block_shape(avx512, 4, 1000, 1100) == (6, 64)
    mc, nc, kc = cache_tiles(avx512, 4, 6, 64, (1000, 1000, 1000))
    assert mc % 6 == 0 and nc % 64 == 0 and 6 * kc * 4 <= avx512.l1d_bytes // 2
    assert kc * nc * 4 <= avx512.l2_bytes // 2
    assert cache_tiles(avx512, 4, 6, 64, (5, 10, 3)) == (6, 64, 3)


def test_machine_model_from_the_environment(monkeypatch):
    from hyb.target import host_cpu
    monkeypatch.setenv("HYB_CPU", "l1d=48K, l2=2M,vector_bits=256,vector_registers=16,fma_units=1")
    m = host_cpu()
    assert (m.l1d_bytes, m.l2_bytes, m.vector_bits, m.vector_registers, m.fma_units) == (48 << 10, 2 << 20, 256, 16, 1)
    assert block_shape(m, 4, 1000, 1000) == (4, 24)
    src = gemm_in_order("ikj")
    a, b, c = rnd((30, 40), "float32"), rnd((40, 50), "float32"), rnd((30, 50), "float32")
    k = hyb.compile_source(src, "g.hyb").kernels["gemm_ikj"]
    assert "register block 4x24" in k.compile(c, a, b).inspect("schedule")
    np.testing.assert_allclose(k(c.copy(), a, b), c + a @ b, rtol=2e-5, atol=2e-4)
    for bad, says in [("l2", "use name=value"), ("l4=1M", "use name=value"), ("l2=2X", "positive whole number"),
                      ("vector_bits=384", "128, 256 or 512"), ("vector_registers=0", "positive whole number")]:
        monkeypatch.setenv("HYB_CPU", bad)
        with pytest.raises(HybridArgumentError, match=f"HYB_CPU entry '{bad}'.*{says}"):
            host_cpu()


def test_tune_measures_keeps_the_fastest_and_caches_it(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("HYB_CACHE_DIR", str(tmp_path))
    src = SRC  # gemm_ab among others: a contraction with a statement before its reduction
    a, b, c = rnd((50, 40), "float32"), rnd((40, 70), "float32"), rnd((50, 70), "float32", 1)
    k = hyb.compile_source(src, "t.hyb", schedule="tune").kernels["gemm_ab"]
    got = k(np.float32(2), np.float32(3), c.copy(), a, b)
    np.testing.assert_allclose(got, 3 * c + 2 * (a @ b), rtol=1e-5, atol=1e-4)
    err = capsys.readouterr().err
    assert "hyb: tuning `gemm_ab` for (float32, float32, float32[50, 70], float32[50, 40], float32[40, 70])" in err
    assert "1/" in err and "schedule='auto'" in err and "schedule={'register': False}" in err
    chosen = err.split("chose schedule=")[1].split("\n")[0].rsplit(" (", 1)[0]
    assert "tile" in chosen or chosen in ("'auto'", "{'register': False}")
    # a new process (here: a new module) loads the winner from the disk cache without measuring
    k2 = hyb.compile_source(src, "t.hyb", schedule="tune").kernels["gemm_ab"]
    again = k2(np.float32(2), np.float32(3), c.copy(), a, b)
    np.testing.assert_array_equal(again, got)
    assert "tuning" not in capsys.readouterr().err
    text = k2.compile(np.float32(2), np.float32(3), c, a, b).inspect("schedule")
    if "tile" in chosen:
        sizes = re.search(r"'cache_tile': (\([^)]*\))", chosen).group(1)
        assert f"tiled {sizes}" in text, (chosen, text)
    # a kernel without a contraction tries tile sizes
    src = """
def scaled_sum(a, b):
    c = output_tensor(a.shape, a.dtype)
    for i in range(a.shape[0]):
        for j in range(a.shape[1]):
            c[i, j] = 2 * a[i, j] + b[i, j]
    return c
"""
    k3 = hyb.compile_source(src, "u.hyb", schedule="tune").kernels["scaled_sum"]
    np.testing.assert_allclose(k3(c, c), 3 * c, rtol=1e-6)
    err = capsys.readouterr().err
    assert "5 schedules" in err and "'tile': False" in err and "'tile': (16, 16, 64)" in err, err


def test_packed_panels_and_row_values_in_the_loops(packed, mod):
    a, b, c = rnd((200, 80), "float64"), rnd((80, 96), "float64"), rnd((200, 96), "float64")
    ck = packed.kernels["gemm_ab"].compile(2.0, 0.5, c, a, b)
    text, loops = ck.inspect("schedule"), ck.inspect("loops")
    assert "register tiles of J outside those of I, for a packed panel" in text
    assert "panel of `b` packed for the register block of S1" in text
    assert "S1.pack(" in loops and "S1.hacc(" in loops and "S1.rows(" in loops
    # alpha * a[i, k] moves with the rows and k only: computed before the reduction
    assert "the part of its update that moves only with the rows" in text
    np.testing.assert_allclose(ck(2.0, 0.5, c.copy(), a, b), 0.5 * c + 2.0 * (a @ b), rtol=1e-12, atol=1e-12)
    # (compiled for this shape: an 80 x 32 float64 panel stays in L1 as it is, so none is packed)
    plain = hyb.compile_source(SRC, "blocks.hyb", fastmath=False).kernels["gemm_ab"].compile(2.0, 0.5, c, a, b)
    assert "packed" not in plain.inspect("schedule") and "S1.rows(" in plain.inspect("loops")
    # a panel is made only outside the register tiles of the rows that reuse it
    lines = loops.splitlines()
    pack_at = next(n for n, ln in enumerate(lines) if "S1.pack(" in ln)
    block_at = next(n for n, ln in enumerate(lines) if "S1.hacc(" in ln)
    depth = lambda ln: len(ln) - len(ln.lstrip())
    assert depth(lines[pack_at]) < depth(lines[block_at])


def test_gpu_schedules_make_no_register_blocks():
    from hyb.schedule.options import parse_options
    from hyb.target import cuda_device
    for given in (None, "auto", "tune", {"tile": True}, {"parallel": False}):
        assert parse_options(given).resolve(cuda_device()).register is False, given
    assert parse_options({"register": (4, 16)}).resolve(cuda_device()).register == (4, 16)  # asked for


FLOORED = '''
def halves(x):
    y = output_tensor(x.shape, x.dtype)
    for g in grid(x.shape):
        y[g[0] // 2, g[1], g[2]] = x[g[0], g[1], g[2]] + 1.0
    return y
'''


@pytest.mark.parametrize("schedule", ["original", None])
def test_a_subscript_that_moves_through_a_floor_is_no_reduction(schedule):
    """`y[i // 2, ..]` moves with `i` (not by one): `i` is no reduction loop that a register block
    could keep the cells across (it was taken for one, and only the first row was written)."""
    x = np.arange(27.0).reshape(3, 3, 3)
    k = hyb.compile_source(FLOORED, schedule=schedule).halves
    np.testing.assert_array_equal(k(x), k.emulate(x))
    assert "register block" not in k.compile(x).inspect("schedule")


@pytest.mark.parametrize("n", [17, 20, 37, 40, 50, 63])
def test_blocks_across_a_short_j_with_a_vector_in_part(n):
    src = """
def bmm_t(a, b):
    c = output_tensor((a.shape[0], a.shape[1], b.shape[1]), a.dtype)
    for z in range(a.shape[0]):
        for i in range(a.shape[1]):
            for j in range(b.shape[1]):
                for k in range(a.shape[2]):
                    c[z, i, j] += a[z, i, k] * b[z, j, k]
    return c
"""
    a, b = rnd((5, 34, 29), "float32"), rnd((5, n, 29), "float32")
    k = hyb.compile_source(src, threads=1).bmm_t
    np.testing.assert_allclose(k(a, b), a @ b.transpose(0, 2, 1), rtol=2e-5, atol=2e-5)
    from hyb.target import host_cpu

    shape = block_shape(host_cpu(1), 4, 34, n)
    if shape is not None:  # the block the machine model chose is the one made
        assert f"register block {shape[0]}x{shape[1]}" in k.compile(a, b).inspect("schedule")


def test_rows_a_power_of_two_apart_crowd_the_l2_and_their_panel_is_packed(monkeypatch):
    from hyb.schedule.blocking import aliased

    zen = CpuTarget(l2_bytes=1 << 20, l2_ways=16)
    # a 1024 x 128 float32 tile of a 1024-wide matrix: its rows start in 16 of the 1024 sets
    assert aliased(zen, 4096, 1024, 128 * 4)
    # of a 512-wide one, 512 rows: 32 sets, and the tile just fits the ways they have
    assert not aliased(zen, 2048, 512, 128 * 4)
    # rows 4400 bytes apart (1100 float32) start at every offset: no crowding, whatever the tile
    assert not aliased(zen, 4400, 4096, 128 * 4)
    assert not aliased(zen, 4160, 1024, 128 * 4)  # 65 lines apart: every set in turn
    monkeypatch.setenv("HYB_CPU", "l2=1M,vector_bits=512,vector_registers=32")
    # 16 rows: too few register tiles of I for a panel to pay for itself (blocking.panel_pays), so
    # only the crowding of a 1024-wide b's rows makes one; 96 rows: a panel pays at either width
    for n, rows, packed in ((1024, 16, True), (1000, 16, False), (1000, 96, True)):
        k = hyb.compile_source(gemm_in_order("ikj"), "g.hyb").kernels["gemm_ikj"]
        a, b, c = rnd((rows, n), "float32"), rnd((n, n), "float32", 1), rnd((rows, n), "float32", 2)
        text = k.compile(c, a, b).inspect("schedule")
        assert ("panel of `b` packed" in text) == packed, (n, rows, text)
    got = k(c.copy(), a, b)
    np.testing.assert_allclose(got, c + a @ b, rtol=1e-4, atol=1e-3)
    a, b, c = rnd((96, 1024), "float32"), rnd((1024, 1024), "float32", 1), rnd((96, 1024), "float32", 2)
    np.testing.assert_allclose(k(c.copy(), a, b), c + a @ b, rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("rows,cols", [(1, 200), (5, 200), (11, 96), (13, 64), (100, 130)])
def test_the_last_rows_and_columns_get_register_blocks_of_their_own(monkeypatch, rows, cols):
    monkeypatch.setenv("HYB_CPU", "vector_bits=512,vector_registers=32")
    src = SRC
    a, b, c = rnd((rows, 70), "float32"), rnd((70, cols), "float32", 1), rnd((rows, cols), "float32", 2)
    k = hyb.compile_source(src, "t.hyb").kernels["gemm_ab"]
    got = k(np.float32(2), np.float32(3), c.copy(), a, b)
    np.testing.assert_allclose(got, 3 * c + 2 * (a @ b), rtol=1e-5, atol=1e-4)
    text = k.compile(np.float32(2), np.float32(3), c, a, b).inspect("schedule")
    shape = re.search(r"register block (\d+)x(\d+) of", text)
    assert (shape is not None) == (rows > 1), text
    mr, nr = (int(shape.group(1)), int(shape.group(2))) if shape else (rows, cols)
    last = f"the last {rows % mr} row{'s' * (rows % mr > 1)} of I"
    assert (last in text) == (rows > mr and rows % mr > 0), text
    ec = cols % nr
    last = f"the last {ec} column{'s' * (ec > 1)} of J (on {-(-ec // 16) * 16})"
    assert (last in text) == (shape is not None and cols > nr and ec > 0), text
    ik = hyb.compile_source(gemm_in_order("ikj"), "g.hyb").kernels["gemm_ikj"]
    np.testing.assert_allclose(ik(c.copy(), a, b), c + a @ b, rtol=1e-5, atol=1e-4)
    for dtype in ("float64", "int32"):
        a2, b2, c2 = (x.astype(dtype) for x in (np.round(a * 4), np.round(b * 4), np.round(c * 4)))
        np.testing.assert_allclose(ik(c2.copy(), a2, b2), c2 + a2 @ b2, rtol=1e-12)
