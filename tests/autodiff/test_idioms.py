"""Closed-form adjoints of reduction idioms and reverse loops that run forwards.

A running maximum or minimum (``m = max(m, e)`` over a loop nest) gets the gradient of its
result sent to the positions holding it, split evenly among ties (PyTorch's ``amax`` rule);
its gradient kernel keeps no tape.  Reverse loops whose iterations share nothing but adjoint
sums run forwards.  Each gradient is compared with a NumPy reference (and, where torch is
installed, with torch's autograd), compiled and in the interpreter, at sizes 1, odd and larger
than a vector, and with rows of no iteration.
"""
import numpy as np
import pytest

import hyb

SRC = '''
def rowmax(x):
    n = x.shape[0]
    d = x.shape[1]
    out = output_tensor((n,), x.dtype)
    for i in range(n):
        m = x[i, 0]
        for j in range(1, d):
            m = max(m, x[i, j])
        out[i] = m
    return out


def rowmin_scaled(x, w):
    n = x.shape[0]
    d = x.shape[1]
    out = output_tensor((n,), x.dtype)
    for i in range(n):
        m = x[i, 0] * w[0]
        for j in range(1, d):
            m = min(x[i, j] * w[j], m)
        out[i] = 2.0 * m
    return out


def max_from_constant(x):
    n = x.shape[0]
    d = x.shape[1]
    out = output_tensor((n,), x.dtype)
    for i in range(n):
        m = x.dtype(-1.0e30)
        for j in range(d):
            m = max(m, x[i, j])
        out[i] = m
    return out


def window_max(x):
    n = x.shape[0]
    h = x.shape[1]
    w = x.shape[2]
    out = output_tensor((n,), x.dtype)
    for b in range(n):
        m = x[b, 0, 0]
        for p in range(h):
            for q in range(w):
                m = max(m, x[b, p, q])
        out[b] = m
    return out


def softmax(x):
    n = x.shape[0]
    d = x.shape[1]
    out = output_tensor((n, d), x.dtype)
    for i in range(n):
        m = x[i, 0]
        for j in range(1, d):
            m = max(m, x[i, j])
        s = x.dtype(0.0)
        for j in range(d):
            e = exp(x[i, j] - m)
            out[i, j] = e
            s += e
        for j in range(d):
            out[i, j] = out[i, j] / s
    return out


def logsumexp(x):
    n = x.shape[0]
    d = x.shape[1]
    out = output_tensor((n,), x.dtype)
    for i in range(n):
        m = x[i, 0]
        for j in range(1, d):
            m = max(m, x[i, j])
        s = x.dtype(0.0)
        for j in range(d):
            s += exp(x[i, j] - m)
        out[i] = m + log(s)
    return out


def cummax(x):
    n = x.shape[0]
    out = output_tensor((n,), x.dtype)
    m = x[0]
    for i in range(n):
        m = max(m, x[i])
        out[i] = m
    return out


def prefix_product(x):
    n = x.shape[0]
    out = output_tensor((n,), x.dtype)
    out[0] = x[0]
    for i in range(1, n):
        out[i] = out[i - 1] * x[i]
    return out
'''

MOD = hyb.compile_source(SRC, "idioms.hyb", threads=1)
SHAPES = [(1, 1), (3, 1), (2, 7), (5, 37), (0, 4), (4, 130)]


def tied(rng, shape, dtype):
    """Values on a coarse grid: every row has ties, its maximum and minimum often among them."""
    return rng.integers(-3, 4, size=shape).astype(dtype)


def even_split(x, dout, pick):
    """The gradient of ``pick`` (np.max / np.min) over the last axes of ``x``, split evenly among ties."""
    axes = tuple(range(1, x.ndim))
    best = pick(x, axis=axes, keepdims=True) if x.size else np.zeros((x.shape[0],) + (1,) * (x.ndim - 1))
    hit = (x == best).astype(np.float64)
    count = hit.sum(axis=axes, keepdims=True) if x.size else np.ones_like(best)
    return hit / count * dout.reshape((-1,) + (1,) * (x.ndim - 1))


def both(kernel, *args):
    """The gradient compiled and in the interpreter, which must agree."""
    g = kernel.grad()
    got = g(*args)
    emu = g.emulate(*args)
    for a, b in zip(got if isinstance(got, tuple) else (got,), emu if isinstance(emu, tuple) else (emu,)):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    return got


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", SHAPES)
def test_running_maximum_splits_ties_evenly(shape, dtype):
    rng = np.random.default_rng(hash((shape, dtype.__name__)) % 2**32)
    x = tied(rng, shape, dtype)
    if shape[1] == 0 or shape[0] == 0:
        x = np.zeros(shape, dtype)
    dout = rng.standard_normal(shape[0]).astype(dtype)
    got = both(MOD.rowmax, x, dout)
    np.testing.assert_allclose(got, even_split(x.astype(np.float64), dout.astype(np.float64), np.max), rtol=1e-6)


@pytest.mark.parametrize("shape", SHAPES)
def test_running_minimum_of_an_expression_sends_its_share_through_the_expression(shape):
    rng = np.random.default_rng(7)
    x = tied(rng, shape, np.float64)
    w = rng.choice([1.0, 2.0], size=shape[1])
    dout = rng.standard_normal(shape[0])
    dx, dw = both(MOD.rowmin_scaled, x, w, dout)
    share = even_split(x * w, 2.0 * dout, np.min) if x.size else np.zeros(shape)
    np.testing.assert_allclose(dx, share * w, atol=1e-12)
    np.testing.assert_allclose(dw, (share * x).sum(axis=0), atol=1e-12)


def test_a_maximum_started_from_a_constant_gives_the_constant_nothing():
    x = np.array([[1.0, 5.0, 5.0, 2.0], [-4.0, -4.0, -4.0, -4.0]])
    dout = np.array([3.0, 2.0])
    got = both(MOD.max_from_constant, x, dout)
    np.testing.assert_allclose(got, [[0, 1.5, 1.5, 0], [0.5, 0.5, 0.5, 0.5]])


@pytest.mark.parametrize("shape", [(1, 1, 1), (2, 3, 5), (3, 4, 33)])
def test_maximum_over_a_loop_nest(shape):
    rng = np.random.default_rng(3)
    x = tied(rng, shape, np.float64)
    dout = rng.standard_normal(shape[0])
    got = both(MOD.window_max, x, dout)
    np.testing.assert_allclose(got, even_split(x, dout, np.max), atol=1e-12)


def _softmax_grad(x, dout):
    e = np.exp(x - x.max(axis=1, keepdims=True))
    y = e / e.sum(axis=1, keepdims=True)
    return y * (dout - (dout * y).sum(axis=1, keepdims=True))


@pytest.mark.parametrize("shape", [(1, 1), (3, 5), (4, 37), (2, 300)])
def test_softmax_and_logsumexp_with_tied_maxima(shape):
    rng = np.random.default_rng(11)
    x = tied(rng, shape, np.float32) * np.float32(0.5)
    dout = rng.standard_normal(shape).astype(np.float32)
    np.testing.assert_allclose(both(MOD.softmax, x, dout), _softmax_grad(x.astype(np.float64), dout), atol=2e-6)
    d1 = dout[:, 0].copy()
    e = np.exp(x.astype(np.float64) - x.max(axis=1, keepdims=True))
    want = e / e.sum(axis=1, keepdims=True) * d1[:, None]
    np.testing.assert_allclose(both(MOD.logsumexp, x, d1), want, atol=2e-6)


def test_against_torch_autograd():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(5)
    x = tied(rng, (6, 29), np.float64)
    dout = rng.standard_normal(6)
    t = torch.tensor(x, requires_grad=True)
    torch.amax(t, dim=1).backward(torch.tensor(dout))
    np.testing.assert_allclose(MOD.rowmax.grad()(x, dout), t.grad.numpy(), atol=1e-12)
    t = torch.tensor(x, requires_grad=True)
    d2 = rng.standard_normal((6, 29))
    torch.softmax(t, dim=1).backward(torch.tensor(d2))
    np.testing.assert_allclose(MOD.softmax.grad()(x, d2), t.grad.numpy(), atol=1e-12)


def test_the_gradient_keeps_no_tape_and_names_its_rule():
    x = np.ones((3, 8), np.float32)
    text = MOD.softmax.compile(x).inspect("grad")
    assert "# tape: 0 bytes for this signature" in text
    assert "# rule: running maximum `m` (line 59): its gradient goes to the positions holding the maximum, " \
           "split evenly among ties; no tape" in text
    src = MOD.softmax.grad().source
    assert "_at_" not in src and "m_ties" in src
    assert "for i in range(n):" in src  # the reverse of the row loop runs forwards


def test_a_maximum_read_inside_its_loop_keeps_its_tape():
    """A running maximum whose intermediate values are read (a cumulative maximum) is no idiom."""
    x = np.array([0.5, 2.0, 1.0, 3.0, -1.0])
    dout = np.array([1.0, 10.0, 100.0, 1000.0, 10000.0])
    got = both(MOD.cummax, x, dout)
    np.testing.assert_allclose(got, [1.0, 110.0, 0.0, 11000.0, 0.0])
    assert "# rule:" not in MOD.cummax.compile(x).inspect("grad")


def test_a_recurrence_keeps_its_reverse_loop():
    x = np.array([1.5, -2.0, 0.5, 3.0, 1.25])
    dout = np.array([1.0, 2.0, -1.0, 0.5, 2.0])
    src = MOD.prefix_product.grad().source
    assert "range(n - 1, 0, -1)" in src
    p = np.cumprod(x)
    want = np.array([sum(dout[k] * p[k] / x[i] for k in range(i, len(x))) for i in range(len(x))])
    np.testing.assert_allclose(both(MOD.prefix_product, x, dout), want, rtol=1e-12)


def test_gradient_sums_are_reassociated_unless_the_kernel_says_not():
    from hyb.target import host_cpu

    k = hyb.compile_source(SRC, "idioms.hyb").softmax
    assert k.grad().options.schedule_for(host_cpu()).reassociate is True
    assert k.options.schedule_for(host_cpu()).reassociate is True
    k = hyb.compile_source(SRC, "idioms.hyb", schedule={"reassociate": False}).softmax
    assert k.grad().options.schedule_for(host_cpu()).reassociate is False


CHAIN = '''
def chain(a, b, w):
    n = a.shape[0]
    d = a.shape[1]
    t1 = allocate((n, d), a.dtype)
    t2 = allocate((n, d), a.dtype)
    out = output_tensor((n, d), a.dtype)
    for i in range(n):
        for j in range(d):
            t1[i, j] = a[i, j] * b[i, j]
    for i in range(n):
        for j in range(d):
            t2[i, j] = t1[i, j] * sigmoid(t1[i, j])
    for i in range(n):
        for j in range(d):
            out[i, j] = t2[i, j] * w[j] + t1[i, j]
    return out


def shifted(a):
    n = a.shape[0]
    t = allocate((n,), a.dtype)
    out = output_tensor((n,), a.dtype)
    for i in range(n):
        t[i] = a[i] * a[i]
        if i > 0:
            out[i] = t[i - 1] * 3.0
    return out
'''


def test_first_contributions_assign_and_dead_clears_are_gone():
    mod = hyb.compile_source(CHAIN, "chain.hyb", threads=1)
    src = mod.chain.grad().source
    # t2 has one reader: the store of t2 does not clear its adjoint; t1 has two: its store clears it
    assert "d_t2[i_2, j_2] = 0.0" not in src and "d_t1[i, j] = 0.0" in src
    # the second reader of t1 adds to what the first gave
    assert "d_t1[i_2, j_2] += g * sigmoid_v" in src
    # an input read by one statement at one cell per iteration: assigned; w is read at j only: added to
    assert "d_a[i, j] = g_2 * b[i, j]" in src and "d_w[j_3] += " in src
    rng = np.random.default_rng(2)
    for shape in [(1, 1), (3, 5), (4, 37), (0, 3)]:
        a, b = rng.standard_normal(shape), rng.standard_normal(shape)
        w, dout = rng.standard_normal(shape[1]), rng.standard_normal(shape)
        t1 = a * b
        sig = 1 / (1 + np.exp(-t1))
        dt2 = dout * w
        dt1 = dt2 * (sig + t1 * sig * (1 - sig)) + dout
        da, db, dw = both(mod.chain, a, b, w, dout)
        np.testing.assert_allclose(da, dt1 * b, atol=1e-12)
        np.testing.assert_allclose(db, dt1 * a, atol=1e-12)
        np.testing.assert_allclose(dw, (dout * t1 * sig).sum(axis=0), atol=1e-12)


def test_a_temporary_read_in_its_store_loop_keeps_its_clear():
    mod = hyb.compile_source(CHAIN, "chain.hyb", threads=1)
    src = mod.shifted.grad().source
    assert "d_t[i - 1] += " in src
    a = np.array([1.0, -2.0, 0.5, 3.0])
    dout = np.array([5.0, 1.0, 2.0, -1.0])
    want = np.array([3 * dout[1] * 2 * a[0], 3 * dout[2] * 2 * a[1], 3 * dout[3] * 2 * a[2], 0.0])
    np.testing.assert_allclose(both(mod.shifted, a, dout), want)


ARG = '''
def argmax_rows(x):
    n = x.shape[0]
    d = x.shape[1]
    best = output_tensor((n,), x.dtype)
    arg = output_tensor((n,), "int32")
    for i in range(n):
        m = x[i, 0]
        k = 0
        for j in range(d):
            v = x[i, j] * 2.0
            if v > m:
                m = v
                k = j
        best[i] = m
        arg[i] = k
    return best, arg


def argmin_flipped(x):
    n = x.shape[0]
    d = x.shape[1]
    best = output_tensor((n,), x.dtype)
    for i in range(n):
        m = x[i, 0]
        for j in range(1, d):
            if m > x[i, j]:
                m = x[i, j]
        best[i] = m
    return best


def last_max(x):
    n = x.shape[0]
    d = x.shape[1]
    best = output_tensor((n,), x.dtype)
    for i in range(n):
        m = x[i, 0]
        for j in range(1, d):
            if x[i, j] >= m:
                m = x[i, j]
        best[i] = m
    return best
'''


def first_winner(vals, init, better):
    """Index (-1: the initial value) of the position a strict comparison leaves holding the result."""
    best, at = init, -1
    for j, v in enumerate(vals):
        if better(v, best):
            best, at = v, j
    return at


@pytest.mark.parametrize("shape", [(1, 1), (3, 4), (5, 37), (0, 3)])
def test_branch_form_gives_the_first_winner_everything(shape):
    mod = hyb.compile_source(ARG, "arg.hyb", threads=1)
    rng = np.random.default_rng(9)
    x = tied(rng, shape, np.float64)
    dbest, darg = rng.standard_normal(shape[0]), np.zeros(shape[0], np.int32)
    got = both(mod.argmax_rows, x, dbest, darg)
    want = np.zeros(shape)
    for i in range(shape[0]):
        at = first_winner(2.0 * x[i], x[i, 0], lambda a, b: a > b)
        if at < 0:
            want[i, 0] += dbest[i]
        else:
            want[i, at] += 2.0 * dbest[i]
    np.testing.assert_allclose(got, want)
    got = both(mod.argmin_flipped, x, dbest)
    want = np.zeros(shape)
    for i in range(shape[0]):
        at = first_winner(x[i, 1:], x[i, 0], lambda a, b: a < b)
        want[i, at + 1 if at >= 0 else 0] += dbest[i]
    np.testing.assert_allclose(got, want)
    text = mod.argmax_rows.compile(x).inspect("grad")
    assert "# tape: 0 bytes" in text and "goes to the first position holding it" in text


def test_a_branch_that_keeps_the_last_winner_is_differentiated_as_written():
    mod = hyb.compile_source(ARG, "arg.hyb", threads=1)
    x = np.array([[1.0, 3.0, 3.0, 2.0], [4.0, 4.0, 1.0, 4.0]])
    dbest = np.array([1.0, 2.0])
    np.testing.assert_allclose(both(mod.last_max, x, dbest), [[0, 0, 1, 0], [0, 0, 0, 2]])
    assert "# rule:" not in mod.last_max.compile(x).inspect("grad")


ROWS = '''
def rescaled(x):
    n = x.shape[0]
    d = x.shape[1]
    out = output_tensor((n, d), x.dtype)
    for i in range(n):
        m = x[i, 0]
        s = x.dtype(0.0)
        for j in range(d):
            s += exp(x[i, j] - m)
        m = m * 0.5
        for j in range(d):
            out[i, j] = exp(x[i, j] - m) / s
    return out


def shifted_last(x):
    n = x.shape[0]
    out = output_tensor((n,), x.dtype)
    for i in range(n):
        out[i] = x[i] * x[i]
    for i in range(1, n):
        out[i] = out[i] + out[i - 1]
    return out
'''


def test_softmax_gradient_computes_each_exponential_once_and_reads_dout_itself():
    src = MOD.softmax.grad().source
    code = "\n".join(line for line in src.splitlines() if not line.strip().startswith("#"))
    assert code.count("exp(") == 2  # the row's element, and the type of its allocation
    assert "exp_row[j_3]" in src and "e = exp_row[j_2]" in src
    assert "grid(" not in src  # no copy of dout
    assert "g = dout[i, j_3]" in src


def test_a_call_whose_inputs_change_after_its_loop_is_computed_again():
    mod = hyb.compile_source(ROWS, "rows.hyb", threads=1)
    src = mod.rescaled.grad().source
    assert "_row" not in src
    rng = np.random.default_rng(4)
    x = rng.standard_normal((3, 7))
    dout = rng.standard_normal((3, 7))
    got = both(mod.rescaled, x, dout)
    eps = 1e-6
    want = np.zeros_like(x)
    for idx in np.ndindex(x.shape):
        xp, xm = x.copy(), x.copy()
        xp[idx] += eps
        xm[idx] -= eps
        want[idx] = ((mod.rescaled(xp) - mod.rescaled(xm)) * dout).sum() / (2 * eps)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-8)


def test_a_last_store_reading_other_cells_of_its_output_keeps_the_copy_of_dout():
    mod = hyb.compile_source(ROWS, "rows.hyb", threads=1)
    src = mod.shifted_last.grad().source
    assert "d_out[idx] = dout[idx]" in src
    x = np.array([1.0, -2.0, 3.0, 0.5])
    dout = np.array([1.0, 2.0, 3.0, 4.0])
    # out = cumsum(x**2) after the first element: d x_k = 2 x_k * sum(dout[max(k,1)...]) (+ dout[0] for k = 0)
    tail = np.cumsum(dout[::-1])[::-1]
    want = 2 * x * np.array([dout[0] + tail[1], tail[1], tail[2], tail[3]])
    np.testing.assert_allclose(both(mod.shifted_last, x, dout), want)


def test_rows_only_where_the_gradient_runs_on_one_thread():
    """A row allocated in a reversed loop's body keeps that loop off threads: a kernel that runs
    on several threads computes the value again instead, and its gradient's row loop is parallel."""
    k = hyb.compile_source(SRC, "idioms.hyb", threads=2).softmax
    src = k.grad().source
    assert "_row" not in src
    x = np.random.default_rng(0).standard_normal((64, 300)).astype(np.float32)
    assert "parallel for" in k.grad().compile(x, x).inspect("loops")
    np.testing.assert_allclose(k.grad()(x, x), MOD.softmax.grad()(x, x), rtol=1e-5, atol=1e-6)
