"""Vector marks (hyb.schedule.vector) and the unit-stride loop moved below reduction bands
(plan._Shaper.sink): where they apply, where they do not, the LLVM loop metadata, and that the
results do not change."""
import numpy as np
import pytest

import hyb
from hyb.errors import HybridArgumentError
from hyb.schedule import loops as L

SRC = '''
def window_partials(x, dout, taps):
    r = taps.shape[0]
    s = taps.shape[1]
    c = x.shape[1]
    k = dout.shape[1]
    p = dout.shape[2]
    q = dout.shape[3]
    partial = output_tensor((k, c, r, s, q), x.dtype)
    for kk in range(k):
        for cc in range(c):
            for rr in range(r):
                for ss in range(s):
                    for n in range(x.shape[0]):
                        for pp in range(p):
                            for qq in range(q):
                                partial[kk, cc, rr, ss, qq] += x[n, cc, pp + rr, qq + ss] * dout[n, kk, pp, qq]
    return partial

def conv(x, w):
    k = w.shape[0]
    c = x.shape[0]
    p = x.shape[1] - w.shape[2] + 1
    q = x.shape[2] - w.shape[3] + 1
    out = output_tensor((k, p, q), x.dtype)
    for kk in range(k):
        for pp in range(p):
            for qq in range(q):
                for cc in range(c):
                    for rr in range(w.shape[2]):
                        for ss in range(w.shape[3]):
                            out[kk, pp, qq] += x[cc, pp + rr, qq + ss] * w[kk, cc, rr, ss]
    return out

def column_sums(a):
    out = output_tensor((a.shape[1],), a.dtype)
    for i in range(a.shape[0]):
        for j in range(a.shape[1]):
            out[j] += a[i, j]
    return out

def row_sums(a):
    out = output_tensor((a.shape[0],), a.dtype)
    for i in range(a.shape[0]):
        s = 0.0
        for j in range(a.shape[1]):
            s += a[i, j]
        out[i] = s
    return out

def strided(a):
    out = output_tensor((a.shape[1], a.shape[0]), a.dtype)
    for i in range(a.shape[0]):
        for j in range(a.shape[1]):
            out[j, i] = a[i, j] * 2
    return out
'''


def partials_ref(x, dout, taps):
    r, s = taps.shape
    _, k, p, q = dout.shape
    out = np.zeros((k, x.shape[1], r, s, q), x.dtype)
    for rr in range(r):
        for ss in range(s):
            out[:, :, rr, ss, :] = np.einsum("nkpq,ncpq->kcq", dout, x[:, :, rr:rr + p, ss:ss + q])
    return out


def conv_ref(x, w):
    k, c, r, s = w.shape
    p, q = x.shape[1] - r + 1, x.shape[2] - s + 1
    out = np.zeros((k, p, q), x.dtype)
    for rr in range(r):
        for ss in range(s):
            out += np.einsum("kc,cpq->kpq", w[:, :, rr, ss], x[:, rr:rr + p, ss:ss + q])
    return out


def mod(**options):
    return hyb.compile_source(SRC, filename="vector.hyb", **options)


def partial_args(nb, c, k, p, q, r=3, s=3, dtype=np.float32, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((nb, c, p + r - 1, q + s - 1)).astype(dtype)
    dout = rng.standard_normal((nb, k, p, q)).astype(dtype)
    return x, dout, np.zeros((r, s), dtype)


def test_reduction_band_goes_above_the_unit_stride_loop_which_is_marked_vector():
    ck = mod().window_partials.compile(*partial_args(4, 8, 16, 32, 32))
    schedule, loops = ck.inspect("schedule"), ck.inspect("loops")
    assert "innermost member moved below 1 reduction band(s)" in schedule
    inner = [ln.strip() for ln in loops.splitlines() if "for (" in ln][-1]
    assert inner.startswith("vector for (") and "<= 31" in inner, loops
    # the statement's last argument (qq) is the vector loop's counter
    node = ck.nest.body[0]
    while isinstance(node, L.For):
        loop, node = node, node.body[0]
    assert loop.vector and isinstance(node, L.StmtCall) and L.fmt_expr(node.args[-1]) == loop.var
    ir = ck.inspect("llvm")
    assert '!"llvm.loop.unroll.disable"' in ir and '!"llvm.loop.vectorize.followup_all"' in ir


def test_vectorize_false_keeps_isl_order_and_no_metadata():
    ck = mod(schedule={"vectorize": False}).window_partials.compile(*partial_args(4, 8, 16, 32, 32))
    assert "moved below" not in ck.inspect("schedule")
    assert "vector for" not in ck.inspect("loops")
    assert "llvm.loop" not in ck.inspect("llvm")


def test_short_reduction_loops_stay_inside_the_vector_loop():
    # a forward convolution: the 3x3 filter loops are unrolled by LLVM; `qq` stays above them
    rng = np.random.default_rng(1)
    x = rng.standard_normal((4, 34, 34)).astype(np.float32)
    w = rng.standard_normal((8, 4, 3, 3)).astype(np.float32)
    ck = mod(schedule={"register": False}).conv.compile(x, w)  # (with blocks: test_register_blocks)
    assert "moved below" not in ck.inspect("schedule")
    loops = ck.inspect("loops")
    lines = [ln.strip() for ln in loops.splitlines() if "for (" in ln]
    vector = [i for i, ln in enumerate(lines) if ln.startswith("vector for")]
    assert len(vector) == 1 and len(lines) - vector[0] == 3, loops  # the vector loop, then rr and ss


def test_loops_that_are_not_marked():
    a = np.ones((40, 12))  # 12 iterations: shorter than MIN_TRIPS
    assert "vector for" not in mod().column_sums.compile(a).inspect("loops")
    b = np.ones((40, 40))  # `out[j, i]` and `a[i, j]`: the innermost loop strides through one of them
    loops = mod(schedule="original").strided.compile(b).inspect("loops")
    assert loops.count("vector for") == 1  # the inner `j`: unit stride in `a`
    # 200 iterations: LLVM does not unroll the loop whole anyway, and the mark would stop it
    # from interleaving the vectorised loop
    assert "vector for" not in mod(schedule="original").strided.compile(np.ones((40, 200))).inspect("loops")
    # a sum into one scalar: LLVM keeps several partial sums only where it may interleave
    loops = mod().row_sums.compile(np.ones((40, 48))).inspect("loops")
    assert "for (" in loops and "vector for" not in loops


@pytest.mark.parametrize("vectorize", [True, False])
@pytest.mark.parametrize("dims", [(1, 1, 1, 1, 1), (2, 2, 3, 5, 7), (3, 3, 16, 32, 32), (1, 2, 4, 17, 33),
                                  (2, 1, 2, 16, 0), (0, 2, 5, 40, 16), (2, 2, 5, 40, 16)])
def test_partials_match_numpy(vectorize, dims):
    m = mod(schedule={"vectorize": vectorize})
    for dtype, tol in ((np.float32, 1e-4), (np.float64, 1e-12)):
        args = partial_args(*dims, dtype=dtype, seed=sum(dims))
        got = m.window_partials(*args)
        np.testing.assert_allclose(got, partials_ref(*args), rtol=tol, atol=tol)
        np.testing.assert_allclose(got, m.window_partials.emulate(*args), rtol=tol, atol=tol)


@pytest.mark.parametrize("shape", [(1, 3, 3), (3, 20, 36), (2, 9, 5)])
def test_conv_and_column_sums_match_numpy(shape):
    rng = np.random.default_rng(len(shape))
    x = rng.standard_normal(shape)
    w = rng.standard_normal((5, shape[0], 3, 3))
    m = mod()
    a = rng.standard_normal((shape[1], shape[2] * 7))
    for name, args, want in (("conv", (x, w), conv_ref(x, w)), ("column_sums", (a,), a.sum(axis=0)),
                             ("strided", (a,), a.T * 2), ("row_sums", (a,), a.sum(axis=1))):
        got = m.kernels[name](*args)
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12, err_msg=name)
        np.testing.assert_allclose(got, m.kernels[name].emulate(*args), rtol=1e-12, atol=1e-12, err_msg=name)


def test_vectorize_option_must_be_a_bool():
    with pytest.raises(HybridArgumentError, match="schedule option vectorize=1 must be True or False"):
        mod(schedule={"vectorize": 1}).column_sums(np.ones((2, 2)))


EXP_SRC = '''
def scaled(a):
    out = output_tensor(a.shape, a.dtype)
    for i in range(a.shape[0]):
        out[i] = a[i] * 2.0
    return out

def exps(a):
    out = output_tensor(a.shape, a.dtype)
    for i in range(a.shape[0]):
        out[i] = exp(a[i])
    return out
'''


def test_wide_vectors_on_avx512_except_around_scalar_math_calls():
    """LLVM keeps to 256-bit vectors on AVX-512 CPUs unless a function asks for 512; hyb asks,
    except where a loop calls a math function that has neither a vector instruction nor a vector
    variant in libmvec (`exp` with the schedule option vector_math off)."""
    import llvmlite.binding as llvm

    from hyb.codegen import vecmath

    wide = bool(llvm.get_host_cpu_features().get("avx512f", False))
    m = hyb.compile_source(EXP_SRC)
    scalar = hyb.compile_source(EXP_SRC, schedule={"vector_math": False})
    a = np.linspace(-2, 2, 100)
    plain, calls = m.scaled.compile(a).inspect("llvm"), scalar.exps.compile(a).inspect("llvm")
    assert plain.count('"prefer-vector-width"="512"') == (plain.count("\ndefine ") if wide else 0)
    assert "prefer-vector-width" not in calls
    if vecmath.variants("exp", "float64"):
        vector = m.exps.compile(a).inspect("llvm")
        assert vector.count('"prefer-vector-width"="512"') == (vector.count("\ndefine ") if wide else 0)
    np.testing.assert_allclose(m.scaled(a), a * 2.0)
    np.testing.assert_allclose(scalar.exps(a), np.exp(a), rtol=1e-15)
    np.testing.assert_allclose(m.exps(a), np.exp(a), rtol=1e-15)
