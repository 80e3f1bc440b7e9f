"""Running extrema with their index (argmax, argmin, first and last index): rewritten into a
vector extremum pass and a vector index pass (hyb.schedule.argext), bit for bit the loop as written,
NaNs, ties and zeros of both signs included."""
import numpy as np
import pytest

import hyb

TEMPLATE = '''
def arg(x, start):
    n = x.shape[0]
    d = x.shape[1]
    idx = output_tensor((n,), "int32")
    val = output_tensor((n,), x.dtype)
    for i in range(n):
        best = start[i]
        k = -1
        for j in range(d):
            if COND:
                best = x[i, j]
                k = j
        idx[i] = k
        val[i] = best
    return idx, val
'''
FORMS = {"first max": "x[i, j] > best", "last max": "x[i, j] >= best", "first min": "x[i, j] < best",
         "last min": "x[i, j] <= best", "first max, flipped": "best < x[i, j]"}
KERNELS = {form: hyb.compile_source(TEMPLATE.replace("COND", cond), threads=1).arg for form, cond in FORMS.items()}
WIDTHS = [0, 1, 5, 63, 64, 65, 130, 511]


def data(n, d, dtype, seed):
    rng = np.random.default_rng(seed)
    if np.dtype(dtype).kind == "f":
        x = rng.integers(-4, 5, (n, d)).astype(dtype)  # few levels: ties in every row
        x[x == 0] = np.where(rng.random(int((x == 0).sum())) < 0.5, -0.0, 0.0)
        start = rng.integers(-5, 6, n).astype(dtype)
        if n > 2:
            start[0] = np.nan                           # an initial NaN: nothing is ever taken
            x[1, rng.integers(0, d) if d else 0:] = np.nan if d else 0   # NaNs in a row: never taken
            start[2] = -0.0
    else:
        x = rng.integers(-4, 5, (n, d)).astype(dtype)
        start = rng.integers(-5, 6, n).astype(dtype)
    return x, start


def same_bits(a, b):
    a, b = np.asarray(a), np.asarray(b)
    assert a.dtype == b.dtype and a.shape == b.shape
    if a.dtype.kind == "f":
        np.testing.assert_array_equal(a.view(f"u{a.itemsize}"), b.view(f"u{b.itemsize}"))
    else:
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("dtype", ["float32", "float64", "int32"])
@pytest.mark.parametrize("form", list(FORMS))
def test_rewritten_loops_are_the_written_loops_bit_for_bit(form, dtype):
    k = KERNELS[form]
    for seed, d in enumerate(WIDTHS):
        x, start = data(7, d, dtype, seed)
        got, want = k(x, start), k.emulate(x, start)
        for g, w in zip(got, want):
            same_bits(g, w)
    x, start = data(5, 130, dtype, 99)
    assert "with its" in k.compile(x, start).inspect("schedule")


def test_numpy_argmax_as_written():
    src = '''
def argmax_rows(x):
    idx = output_tensor((x.shape[0],), "int32")
    for i in range(x.shape[0]):
        best = x[i, 0]
        k = 0
        for j in range(1, x.shape[1]):
            if x[i, j] > best:
                best = x[i, j]
                k = j
        idx[i] = k
    return idx
'''
    k = hyb.compile_source(src).argmax_rows
    rng = np.random.default_rng(3)
    for d in (1, 2, 37, 512, 1000):
        x = rng.integers(0, 7, (9, d)).astype(np.float32)
        np.testing.assert_array_equal(k(x), np.argmax(x, axis=1))
    text = k.compile(x).inspect("schedule")
    assert "running maximum of `best` with its first index `k` (line 7)" in text, text


def test_program_order_and_other_bodies_are_left_as_written():
    x, start = data(4, 70, "float32", 5)
    ordered = hyb.compile_source(TEMPLATE.replace("COND", FORMS["first max"]),
                                 schedule={"reassociate": False}).arg
    assert "with its" not in ordered.compile(x, start).inspect("schedule")
    # a value that a vector and a scalar pass might round differently, and a third statement
    for body in ("best = exp(x[i, j])", "best = x[i, j]\n                k = j\n                idx[i] = j"):
        src = (TEMPLATE.replace("COND", "exp(x[i, j]) > best" if "exp" in body else FORMS["first max"])
               .replace("best = x[i, j]\n                k = j", body + ("\n                k = j" if "exp" in body else "")))
        kernel = hyb.compile_source(src).arg
        assert "with its" not in kernel.compile(x, start).inspect("schedule"), src
        for g, w in zip(kernel(x, start), kernel.emulate(x, start)):
            if "exp" in body and g.dtype.kind == "f":  # hyb's exp and NumPy's may be an ulp apart
                np.testing.assert_allclose(g, w, rtol=2.4e-7)
            else:
                same_bits(g, w)


def test_a_running_maximum_runs_in_whole_chunks_and_an_overlapping_last_one():
    src = '''
def row_max(x):
    out = output_tensor((x.shape[0],), x.dtype)
    for i in range(x.shape[0]):
        m = x[i, 0]
        for j in range(1, x.shape[1]):
            m = max(m, x[i, j])
        out[i] = m
    return out
'''
    rng = np.random.default_rng(0)
    for d in (2, 64, 65, 66, 129, 1024):
        k = hyb.compile_source(src).row_max
        x = rng.standard_normal((5, d)).astype(np.float32)
        x[1, d // 2] = np.nan
        x[2] = -0.0
        got = k(x)
        same_bits(got[[0, 1, 3, 4]], x.max(axis=1)[[0, 1, 3, 4]])
        assert got[2] == 0.0
        chunked = "running max of `m` (line 6): whole chunks of 64" in k.compile(x).inspect("schedule")
        assert chunked == (d - 1 > 64 and (d - 1) % 64 != 0), d


LANES = '''
def lanes(x, y, s):
    n = x.shape[0]
    d = x.shape[1]
    idx = output_tensor((n,), "int64")
    val = output_tensor((n,), x.dtype)
    for i in range(n):
        best = x[i, 0]
        k = 0
        for j in range(LO, HI):
            if COND:
                best = E
                k = j
        idx[i] = k
        val[i] = best
    return idx, val
'''
# values that move with j along the last axis, shifted, and ones that do not (a row's, a scalar's)
VALUES = {"plain": ("1", "d", "x[i, j]"), "shifted": ("1", "d", "x[i, j - 1]"),
          "a row's bias": ("0", "d", "x[i, j] + y[i, 0]"), "scaled": ("0", "d", "x[i, j] * s"),
          "a difference": ("0", "d - 3", "x[i, j + 3] - y[i, j]")}


def lanes_kernel(value, op, **options):
    lo, hi, e = VALUES[value]
    cond = f"{e} {op} best" if op in (">", "<", ">=", "<=") else f"best {'<' if op == 'flipped >' else '>'} {e}"
    src = LANES.replace("LO", lo).replace("HI", hi).replace("COND", cond).replace("E", e)
    return hyb.compile_source(src, **options).lanes


@pytest.mark.parametrize("dtype", ["float32", "float64", "int8", "uint8", "int16", "uint32", "int64"])
@pytest.mark.parametrize("value", list(VALUES))
def test_one_lane_pass_is_the_written_loop_bit_for_bit(value, dtype):
    """The first or last index of a maximum or minimum whose elements lie along the loop: one
    vector pass (lanes of every width), the loop as written where the row is shorter than a
    vector."""
    rng = np.random.default_rng(len(value))
    for op in (">", "<", ">=", "<=", "flipped >"):
        k = lanes_kernel(value, op, threads=1)
        for d in (4, 9, 16, 17, 33, 64, 100, 257):
            x, _ = data(6, d, dtype, d)
            y, _ = data(6, d, dtype, d + 1)
            s = np.array(rng.integers(-2, 3) or 1).astype(dtype)[()]
            got, want = k(x, y, s), k.emulate(x, y, s)
            for g, w in zip(got, want):
                same_bits(g, w)
        text = k.compile(x, y, s).inspect("schedule")
        assert "one vector pass, each lane keeping its own" in text, text


def test_one_lane_pass_on_threads_and_for_every_shape():
    x, _ = data(300, 130, "float32", 4)
    y, _ = data(300, 130, "float32", 5)
    s = np.float32(1.5)
    for options in ({"threads": 2}, {"shapes": "generic"}):
        k = lanes_kernel("a row's bias", ">", **options)
        for rows, d in ((300, 130), (7, 65), (3, 5)):
            a, b = np.ascontiguousarray(x[:rows, :d]), np.ascontiguousarray(y[:rows, :d])
            for g, w in zip(k(a, b, s), k.emulate(a, b, s)):
                same_bits(g, w)


def test_a_subscript_past_the_end_is_reported_as_the_loop_reports_it():
    src = LANES.replace("LO", "0").replace("HI", "d").replace("COND", "x[i, j + 1] > best").replace(
        "E", "x[i, j + 1]")
    k = hyb.compile_source(src).lanes
    x = np.arange(2 * 40, dtype=np.float32).reshape(2, 40)
    with pytest.raises(hyb.HybridIndexError) as got:
        k(x, x, np.float32(1))
    with pytest.raises(hyb.HybridIndexError) as want:
        k.emulate(x, x, np.float32(1))
    assert str(got.value) == str(want.value)
    assert "x[i, j + 1]" in str(got.value) and "40" in str(got.value)


def test_strided_values_keep_two_passes():
    src = TEMPLATE.replace("COND", "x[i, j] >= best")
    x, start = data(3, 70, "float32", 1)
    text = hyb.compile_source(src).arg.compile(x, start).inspect("schedule")
    assert "running maximum of `best` with its last index `k` (line 10): one vector pass" in text, text
    strided = TEMPLATE.replace("COND", FORMS["first max"]).replace("x[i, j]", "x[j, i]").replace("(n,)", "(d,)").replace(
        "for i in range(n)", "for i in range(d)").replace("for j in range(d)", "for j in range(n)")
    x = np.random.default_rng(2).integers(-3, 4, (90, 90)).astype(np.float32)
    start = np.zeros(90, np.float32)
    k = hyb.compile_source(strided).arg
    assert "one vector pass" not in k.compile(x, start).inspect("schedule")
    for g, w in zip(k(x, start), k.emulate(x, start)):
        same_bits(g, w)


FIRST = '''
def first(x, y, t):
    n = x.shape[0]
    d = x.shape[1]
    idx = output_tensor((n,), "int32")
    for i in range(n):
        k = K0
        for j in range(d):
            if COND:
                k = j
        idx[i] = k
    return idx
'''
FIRST_FORMS = {"after a sentinel": ("-1", "k == -1 and x[i, j] > t"),
               "test second, flipped": ("-1", "x[i, j] >= y[i, j] and -1 == k"),
               "the row's length": ("d", "k == d and x[i, j] - t != y[i, j]"),
               "a bias": ("-5", "k == -5 and x[i, j] + y[i, 0] < t")}


@pytest.mark.parametrize("dtype", ["float32", "float64", "int8", "int32", "uint16"])
@pytest.mark.parametrize("form", list(FIRST_FORMS))
def test_the_first_index_meeting_a_condition_is_the_written_loops(form, dtype):
    k0, cond = FIRST_FORMS[form]
    for options in ({"threads": 1}, {"threads": 2}, {"shapes": "generic"}):
        k = hyb.compile_source(FIRST.replace("K0", k0).replace("COND", cond), **options).first
        for d in (0, 3, 16, 17, 40, 100, 300):
            x, _ = data(9, d, dtype, d)
            y, _ = data(9, d, dtype, d + 7)
            if np.dtype(dtype).kind == "f" and d:
                x[2] = np.nan                          # never greater, never equal: always `!=`
                x[3, d // 2:] = 4                      # a hit in the second half only
            t = np.array(3 if np.dtype(dtype).kind != "u" else 6).astype(dtype)[()]
            np.testing.assert_array_equal(k(x, y, t), k.emulate(x, y, t))
    assert "first index `k` meeting a condition (line 8): one vector pass" in k.compile(x, y, t).inspect("schedule")


def test_a_first_index_whose_start_value_the_loop_can_take_runs_as_written():
    src = FIRST.replace("K0", "3").replace("COND", "k == 3 and x[i, j] > t")
    k = hyb.compile_source(src).first
    x = np.tile(np.array([0, 0, 0, 5, 0, 7, 9], np.float32), (4, 1))  # the hit at 3 keeps k == 3: 5 next
    t = np.float32(1)
    assert "meeting a condition" not in k.compile(x, x, t).inspect("schedule")
    np.testing.assert_array_equal(k(x, x, t), k.emulate(x, x, t))
    np.testing.assert_array_equal(k(x, x, t), [5, 5, 5, 5])


def test_rows_known_to_be_shorter_than_a_vector_keep_the_passes():
    """A trip count known now below a vector's lanes (16 float32, 8 float64) would run the lane
    pass's fallback, the loop as written, every time: such loops keep the two passes."""
    for dtype, d, lanes in (("float32", 15, False), ("float32", 16, True), ("float64", 7, False),
                            ("float64", 8, True)):
        x, start = data(4, d, dtype, d)
        k = hyb.compile_source(TEMPLATE.replace("COND", FORMS["first max"])).arg
        text = k.compile(x, start).inspect("schedule")
        assert ("one vector pass" in text) == lanes and ("then a vector pass for the index" in text) != lanes, text
        for g, w in zip(k(x, start), k.emulate(x, start)):
            same_bits(g, w)
    k = hyb.compile_source(FIRST.replace("K0", "-1").replace("COND", FIRST_FORMS["after a sentinel"][1])).first
    x, _ = data(3, 15, "float32", 2)
    assert "meeting a condition" not in k.compile(x, x, np.float32(1)).inspect("schedule")
    np.testing.assert_array_equal(k(x, x, np.float32(1)), k.emulate(x, x, np.float32(1)))


ALONE = '''
def extremum(x, start):
    n = x.shape[0]
    d = x.shape[1]
    val = output_tensor((n,), x.dtype)
    for i in range(n):
        m = start[i]
        for j in range(d):
            if COND:
                m = E
        val[i] = m
    return val
'''


@pytest.mark.parametrize("dtype", ["float32", "float64", "int32"])
@pytest.mark.parametrize("strided", [False, True])
def test_a_running_extremum_by_if_without_an_index_is_the_written_loop(strided, dtype):
    """``if x[i, j] > m: m = x[i, j]`` with no index: the same lane pass (or passes, where the
    elements are strided) as the argmax, the extremum read back from the element the index pass
    finds, so that NaNs and the first of equal zeros come out as the branch leaves them."""
    for cond in ("x[i, j] > m", "x[i, j] >= m", "x[i, j] < m", "m >= x[i, j]"):
        e = "x[j, i]" if strided else "x[i, j]"
        src = ALONE.replace("COND", cond.replace("x[i, j]", e)).replace("E", e)
        if strided:
            src = src.replace("range(n)", "range(d)").replace("range(d):\n            if", "range(n):\n            if")
            src = src.replace("(n,)", "(d,)")
        k = hyb.compile_source(src, threads=1).extremum
        for seed, d in enumerate(WIDTHS):
            x, start = data(7, d, dtype, seed)
            if strided:
                x = np.ascontiguousarray(x.T)  # its columns the rows of the extremum
            same_bits(k(x, start), k.emulate(x, start))
        x, start = data(5, 130, dtype, 99)
        text = k.compile(np.ascontiguousarray(x.T) if strided else x, start).inspect("schedule")
        which = "minimum" if "<" in cond and not cond.startswith("m") else "maximum"
        if cond.startswith("m >="):
            which = "minimum"
        want = "then a vector pass for the index" if strided else "one vector pass, each lane"
        assert f"running {which} of `m` (line 8): {'a vector' if strided else ''}" in text and want in text, text
