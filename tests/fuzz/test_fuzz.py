"""Differential fuzzing, the bounded CI campaign, and the regressions it found.

The cases come from tests/fuzz (which drives tests/kernelgen.py): random valid kernels with loop nests of
depth 1-4, affine and triangular bounds, in-bounds affine subscripts, guards, scalar temporaries,
reductions, intrinsics, every dtype, in-place updates and loop-carried dependences, each compiled under
random kernel options (isl's schedule, the original order, explicit tile sizes and register blocks, threads, interchange and
fusion on or off; fast-math off) and compared with ``emulate``; the same generator, restricted to float64,
checks ``kernel.grad()`` against finite differences; mutated source text must give a HybridError or a
kernel; and no program, mutants included, may take more than CI_COMPILE_SECONDS to compile (compile_time:
over it twice, each compile fresh).

The examples are derandomized (the same on every run).  ``python -m tests.fuzz --minutes N`` runs a long
campaign with fresh examples; ``HYB_HYPOTHESIS=explore`` makes these tests draw 10x as many new ones.
"""
from __future__ import annotations

import os
import random
import sys
from pathlib import Path

import islpy as isl
import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, given, note, settings
from hypothesis import strategies as st

import hyb
from tests.fuzz import compile_time, corpus, oracle, programs

EXPLORE = os.environ.get("HYB_HYPOTHESIS") == "explore"
# The compile-time limit of these tests.  ``python -m tests.fuzz`` holds programs to 2 s; these
# examples compile in up to about 2 s on an idle machine, and a machine busy with other tests can
# take twice as long, so a bound five times as generous catches a compile that blows up (or hangs:
# it is stopped) without failing on a busy machine.
CI_COMPILE_SECONDS = 10.0


@pytest.fixture(autouse=True)
def generous_compile_time_limit():
    with compile_time.limit(CI_COMPILE_SECONDS):
        yield


def budget(n):
    return settings(max_examples=n * 10 if EXPLORE else n, deadline=None, derandomize=not EXPLORE, database=None,
                    suppress_health_check=list(HealthCheck), print_blob=EXPLORE,
                    phases=[Phase.explicit, Phase.reuse, Phase.generate, Phase.target, Phase.shrink])


# ------------------------------------------------------------------ the bounded campaign
@budget(220)
@given(programs.cases())
def test_campaign_compiled_equals_emulate(case):
    name, prog = case
    note(f"config: {name}\n{prog.describe()}")
    oracle.check_parity(prog)


@budget(60)
@given(programs.cases({"oob": programs.OUT_OF_BOUNDS}))
def test_campaign_runtime_index_errors(case):
    """Data-dependent subscripts that may leave their tensor: HybridIndexError exactly when emulate raises it."""
    _, prog = case
    note(prog.describe())
    oracle.check_parity(prog, allow_index_errors=True)


def test_campaign_gradients_match_finite_differences():
    outcomes = []

    @budget(40)
    @given(programs.cases({"grad": programs.GRAD}), st.integers(0, 2 ** 31))
    def judge(case, seed):
        _, prog = case
        note(prog.describe())
        outcomes.append(oracle.check_grad(prog, seed))

    judge()
    # About three in four cases are judged (the others' forward values are not finite, mostly); a
    # campaign that judges fewer than half has stopped checking gradients.
    judged = sum(o.startswith("ok") for o in outcomes)
    assert judged >= len(outcomes) / 2, f"{judged} of {len(outcomes)} cases judged: {sorted(set(outcomes))}"


def test_campaign_gradient_idioms_and_ties():
    """Programs shaped like softmax, layernorm, running maxima (in idiom form and not), reductions into
    tensors, recurrences and stencils, in float64 and float32, against finite differences; and running
    maxima on tied values against the even split among the ties."""
    outcomes = []

    @budget(10)
    @given(programs.grad_cases(("idioms", "ties")), st.integers(0, 2 ** 31))
    def judge(case, seed):
        name, prog = case
        note(f"{name}, oracle seed {seed}\n{prog.describe()}")
        outcomes.append(oracle.check_gradient_case(name, prog, seed))

    judge()
    if not EXPLORE:  # the derandomized slice draws both kinds of case, and the closed form at least once
        assert any(o.startswith("ok") for o in outcomes), outcomes
        assert any(o.startswith("ties: ok") for o in outcomes), outcomes
        assert any(o.endswith("closed form") for o in outcomes), outcomes


def test_campaign_mutated_source_gives_hybrid_errors_only():
    """1200 mutants of the seed corpus (token deletions, swaps, duplications, junk tokens, random bytes, line
    edits, truncation): parse and type-check give a HybridError or a kernel, each within the compile-time
    limit; one in ten that checks is also compiled, run and emulated."""
    rng = random.Random(20261121)
    seeds = corpus.cases()
    seen = {"error": 0, "valid": 0, "parsed": 0}
    for n in range(1200):
        src, args = seeds[n % len(seeds)]
        text = oracle.mutate(src, rng)
        try:
            seen[oracle.check_frontend(text, args, run=(n % 10 == 0))] += 1
        except Exception as e:
            raise AssertionError(f"mutant {n} raised {type(e).__name__}: {e}\n--- source ---\n{text}") from e
    assert seen["error"] > 600 and seen["valid"] > 50, seen  # the mutants reach the checker, not only the parser


def test_time_limit_catches_a_hang():
    import time
    with pytest.raises(oracle.Hang), oracle.time_limit(0.2):
        time.sleep(5)


def test_mutations_are_reproducible_and_varied():
    src = corpus.MATMUL
    a = [oracle.mutate(src, random.Random(s)) for s in range(50)]
    b = [oracle.mutate(src, random.Random(s)) for s in range(50)]
    assert a == b and len(set(a)) > 40 and src not in a[:5]


def test_command_line_campaign_runs(tmp_path):
    """`python -m tests.fuzz` parses its options (a tiny campaign: one round of each kind), the
    compile-time limit among them."""
    import subprocess
    root = Path(__file__).resolve().parents[2]
    r = subprocess.run([sys.executable, "-m", "tests.fuzz", "--minutes", "0.01", "--round-size", "2",
                        "--kinds", "parity,frontend", "--seed", "3", "--out", str(tmp_path / "f"),
                        "--compile-seconds", str(CI_COMPILE_SECONDS)],
                       cwd=root, capture_output=True, text=True, timeout=120, check=False)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "parity: ok=" in r.stdout and "done:" in r.stdout
    assert "compile-time: " in r.stdout and f"compiles timed (limit {CI_COMPILE_SECONDS:g} s)" in r.stdout
    assert (tmp_path / "f" / "slowest-compile.txt").read_text().startswith("# the slowest compile of the campaign: ")


# ------------------------------------------------------------------ regressions found by the campaign
ZERO_D_INPUT = '''
def k(a, s):
    c = output_tensor(a.shape, a.dtype)
    for i in range(a.shape[0]):
        c[i] = a[i] * s[()]
    return c
'''


def test_regression_zero_d_input_gets_a_gradient():
    # Shrunk from the gradient campaign (`x2 = np.array(0.0)`, unused: d_x2 should be 0.0).  The derived source
    # computes and returns d_s; the call drops it.  compiled and emulated: (array([2., 2., 2.]), None);
    # expected: (array([2., 2., 2.]), array(3.)).
    k = hyb.compile_source(ZERO_D_INPUT).k
    a, s, dout = np.arange(3.0), np.array(2.0), np.ones(3)
    da, ds = k.grad()(a, s, dout)
    np.testing.assert_array_equal(da, [2.0, 2.0, 2.0])
    assert isinstance(ds, np.ndarray) and ds.shape == () and ds == 3.0


TWO_SCALARS_TAPED = '''
def k(x):
    y = output_tensor((1,), "float64")
    s = 1.0
    for j in range(x.shape[0]):
        t = 1.0
        for k in range(x.shape[1]):
            s *= x[j, k]
            t *= x[j, k]
        y[0] = t
    y[0] = s
    return y
'''


def test_regression_gradient_of_two_scalars_updated_in_one_inner_loop():
    # Shrunk from the gradient campaign.  k.grad()(x, dout) raises
    # HybridNameError: <gradient of k>:9:50: error: unknown name `t` (in `t_at_k = allocate((max(0, x.shape[1]),), t.dtype)`).
    # Expected: y[0] = prod(x), so d_x = prod(x) / x * dout.
    k = hyb.compile_source(TWO_SCALARS_TAPED).k
    x = np.array([[0.5, 1.5], [2.0, -0.75]])
    np.testing.assert_allclose(k(x), [x.prod()])
    np.testing.assert_allclose(k.grad()(x, np.ones(1)), x.prod() / x, rtol=1e-12)


OVERWRITTEN_SHIFTED_READ = '''
def k(x):
    y = output_tensor((x.shape[0],), "float64")
    for i in range(x.shape[0]):
        y[0] = x[i + 1] if i < x.shape[0] - 1 else 1.0
    return y
'''


def test_regression_gradient_of_overwritten_store_with_shifted_read():
    # Shrunk from the gradient campaign (`y0[i // 2] = 1 / (x0[i + 1] if i < n - 1 else 1)`).  With x = [0.5, 2.0]
    # iteration 1 overwrites y[0] with 1.0, so y = [1, 0] does not depend on x: the gradient is [0, 0].
    # compiled and emulated gradient: [0, 1] (dout[0] reaches x[1] through the overwritten store).
    # `y[0] = x[i]` and `y[0] = x[n - 1 - i]` are right; `y[0] = x[i + 1] if i < n - 1 else x[0]` is wrong too
    # ([1, 1] instead of [1, 0]).
    k = hyb.compile_source(OVERWRITTEN_SHIFTED_READ).k
    x, dout = np.array([0.5, 2.0]), np.array([1.0, 10.0])
    np.testing.assert_array_equal(k(x), [1.0, 0.0])
    np.testing.assert_array_equal(k.grad()(x, dout), [0.0, 0.0])


INT_THEN_FLOAT_SCALAR = '''
def k(x0, x1):
    y0 = output_tensor((x0.shape[0],), "float64")
    for i in range(x0.shape[0]):
        s1 = i
        s1 = ((0 + 0) + x0[i])
        y0[i] = s1
    return y0
'''


def test_regression_scalar_first_assigned_a_loop_variable_then_a_float():
    # Shrunk from the gradient campaign: `s1 = i` then `s1 = x0[i]`.  A scalar takes the promoted type
    # of all its values, so s1 is a float64, y0 is x0, and the gradient must agree with that: it once
    # took s1 for an integer from its first value alone (derivative 0).
    k = hyb.compile_source(INT_THEN_FLOAT_SCALAR).k
    x = np.array([0.3, 1.7])
    np.testing.assert_array_equal(k(x, x), x)
    np.testing.assert_array_equal(k.emulate(x, x), x)
    dx0, dx1 = k.grad()(x, x, np.ones(2))
    np.testing.assert_array_equal(dx0, [1.0, 1.0])
    np.testing.assert_array_equal(dx1, [0.0, 0.0])


TEMPORARY_TAPED_IN_A_SWEEP = '''
def k(x0):
    y0 = output_tensor((x0.shape[0], x0.shape[1], x0.shape[2]), "float64")
    for i in range(x0.shape[0]):
        s1 = 0.0
        for j in range(x0.shape[1]):
            s1 = ((0 + 0) + (0 + 0))
            t2 = allocate((x0.shape[2],), "float64")
            s3 = 0.0
            for k in range(x0.shape[2]):
                s1 = 0
                s4 = 0.0
                s1 = 0
                t2[x0.shape[2] - 1 - k] = (s4 + (0 + 0))
                if ((-s1) < ((t2[k - 1] if k >= 1 else 0) + 0)):
                    y0[i, j, k] = abs(float64((0 + x0[i, j, k])))
    return y0
'''


def test_regression_a_taped_temporary_the_first_sweep_does_not_declare():
    # From the gradient campaign: the sweep that records the old values of `t2` allocated the tape as
    # `allocate(..., t2.dtype)` where no `t2 = allocate(...)` came before it (HybridNameError `t2`).
    k = hyb.compile_source(TEMPORARY_TAPED_IN_A_SWEEP).k
    g = k.grad()
    assert "t2_tape = allocate((max(0, x0.shape[2]),), 'float64')" in g.source
    for shape in [(1, 1, 1), (2, 3, 4)]:
        x = np.random.default_rng(1).uniform(0.5, 1.5, shape)
        np.testing.assert_array_equal(g(x, np.ones(shape)), np.zeros(shape))  # t2 holds zeros: no branch taken


STRIDED_SCALAR_CELLS = '''
def k(x0):
    y0 = output_tensor((), "float64")
    for i in range(x0.shape[0] - 1, -1, -3):
        s1 = (0 + (x0[i + 1, i] if i < x0.shape[0] - 1 else 0))
        for j in range(i + 1):
            s1 = 0
        y0[()] = s1
    return y0
'''


def test_regression_each_private_scalar_is_a_cell_of_its_own():
    # From the gradient campaign: the gradient kernel's private scalars (s1, d_s1, g, g_2), each taken
    # as one memory cell, all lost their names and became a single anonymous cell; with a stride-3
    # loop isl's dataflow analysis then failed ("affine expression involves some of the domain
    # dimensions"). Each scalar is now its own cell.
    from hyb.schedule import deps, extract

    k = hyb.compile_source(STRIDED_SCALAR_CELLS).k
    x = np.arange(16.0).reshape(4, 4)
    np.testing.assert_array_equal(k(x), 0.0)
    g = k.grad()
    np.testing.assert_array_equal(g(x, np.array(1.0)), np.zeros((4, 4)))
    p = extract.extract(g.typed(x, np.array(1.0)))
    cells = set()
    p.union("may_writes", expanded=False).foreach_map(lambda m: cells.add(m.get_tuple_name(isl.dim_type.out)))
    assert {"s1", "d_s1", "g", "g_2"} <= cells
    d = deps.compute(p, expanded=False)
    assert not d.flow.is_empty()


STRIDED_OUTPUT_DEPENDENCE = '''
def k(x0):
    y0 = output_tensor(x0.shape, "float32")
    for i in range(0, x0.shape[0], 2):
        for j in range(i + 1):
            y0[i, i, i] = ((0 + 0) + (0 + x0[i, i, i]))
            for k in range(i + 1, x0.shape[2]):
                s1 = 0.0
                s1 = (0 + 0)
                y0[i, i, i] = s1
    return y0
'''


def test_regression_isl_dataflow_failure_falls_back_to_a_conservative_answer():
    # From the parity campaign: isl's dataflow analysis fails on the scalar cell written in a
    # triangular nest under a stride-2 loop ("affine expression involves some of the domain
    # dimensions"); the dependences fall back to every earlier access of the same element.
    from hyb.schedule import deps, extract

    k = hyb.compile_source(STRIDED_OUTPUT_DEPENDENCE, threads=2).k
    x = np.arange(64.0).reshape(4, 4, 4)
    np.testing.assert_array_equal(k(x), k.emulate(x))
    p = extract.extract(k.typed(x))
    d = deps.compute(p, expanded=False)
    assert not d.output.is_empty()  # s1's writes stay ordered


BOOL_SCALAR_TAPE = '''
def k(x0):
    y0 = output_tensor((), "float64")
    t0 = allocate((x0.shape[0], x0.shape[1]), "float64")
    for i in range(x0.shape[0]):
        s1 = ((0 < t0[i, i]) and (0 < 0))
        t0[i, i] = ((0 + 0) + (0 + 0))
        if s1:
            y0[()] = ((x0[i, i] + 0) + (0 + 0))
    return y0
'''


def test_regression_a_bool_scalar_is_taped_as_a_bool():
    # From the gradient campaign: the tape of a bool scalar was int64, and restoring it (`s1 = s1_saved[i]`)
    # made s1 an int64 (a scalar takes the type of all its values), which `if s1:` rejects.
    g = hyb.compile_source(BOOL_SCALAR_TAPE).k.grad()
    assert "'bool')" in g.source
    np.testing.assert_array_equal(g(np.ones((2, 2)), np.array(1.0)), np.zeros((2, 2)))
    # the same with a bool() cast deciding an overwrite (`not` needed a condition in the gradient)
    src = (
        "def k(x0):\n    y0 = output_tensor(x0.shape, 'float64')\n    for i in range(x0.shape[0]):\n"
        "        s1 = bool(x0[i, i])\n        s2 = (x0[i, i] ** 2)\n"
        "        x0[i, i] = (((0 + 0) / (0 + 1)) if s1 else s2)\n    return y0, x0\n")
    x = np.array([[0.5, 0.0], [0.0, 0.0]])
    dx = hyb.compile_source(src).k.grad()(x.copy(), np.ones_like(x), np.ones_like(x))
    np.testing.assert_array_equal(dx, [[0.0, 1.0], [1.0, 0.0]])


MODULO_OF_A_STRIDED_LOOP = '''
def k(x0, p0, p1):
    y0 = output_tensor(x0.shape, "float64")
    y1 = output_tensor((), "float32")
    for i in range(0, x0.shape[0], 2):
        s1 = p0
        for j in range(x0.shape[1]):
            for k in range(x0.shape[2]):
                s1 = (0 < x0[i, j, (i) % x0.shape[2]])
                y0[i, x0.shape[1] - 1 - j, k] = x0[i, j, (i) % x0.shape[2]] * 2.0
        y1[()] = s1
    return y0, y1
'''


def test_regression_modulo_of_a_strided_loop_variable_in_a_subscript():
    # From the parity campaign: the subscript `i % 3` of a loop with step 2 has a rational
    # coefficient in isl (i = 2 i'), and the loop-order heuristic took it for an integer (an
    # exception inside isl's callback, reported as "isl_schedule_map_schedule_node_bottom_up failed").
    k = hyb.compile_source(MODULO_OF_A_STRIDED_LOOP, "mod.hyb", threads=2).k
    x = np.random.default_rng(0).standard_normal((5, 3, 3)).astype(np.float32)
    got, want = k(x, False, 0), k.emulate(x, False, 0)
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_array_equal(got[1], want[1])
    assert got[0][4, 2, 1] == np.float64(x[4, 0, 1]) * 2.0


UNSIGNED_BOUND = '''
def k(x0):
    y0 = output_tensor((x0.shape[0],), "bool")
    for i in range((uint8(1) - x0.shape[0]) % x0.shape[0]):
        y0[i] = True
    return y0


def j(x0):
    y0 = output_tensor((x0.shape[0],), "float64")
    for i in range(x0.shape[0]):
        y0[(int8(i) * int8(100)) % x0.shape[0]] += 1.0
    return y0
'''


@pytest.mark.parametrize("n", [1, 2, 3, 5, 7])
def test_regression_narrow_integer_arithmetic_wraps_in_bounds_and_subscripts(n):
    # From the parity campaign: `uint8(1) - 3` is 254 in NumPy (and emulate), but the loop bound was
    # given to isl, whose integers do not wrap, as -2. Arithmetic in a type narrower than int64 (or
    # unsigned) is not affine any more.
    m = hyb.compile_source(UNSIGNED_BOUND, "narrow.hyb", threads=2)
    x = np.zeros(n, np.int8)
    np.testing.assert_array_equal(m.k(x), m.k.emulate(x))
    with np.errstate(over="ignore"):
        assert m.k(x).sum() == min(n, (np.uint8(1) - np.uint8(n)) % n)
        want = np.zeros(n)
        for i in range(n):
            want[(int(np.int8(i) * np.int8(100))) % n] += 1.0
    np.testing.assert_array_equal(m.j(x), want)
    np.testing.assert_array_equal(m.j.emulate(x), want)


PRODUCT_INTO_AN_ELEMENT = '''
def k(x0):
    y0 = output_tensor((), "float64")
    y0[()] = 1.0
    for i in range(x0.shape[0]):
        y0[()] *= x0[i]
    return y0
'''


def test_regression_product_accumulated_in_a_tensor_element():
    # From the gradient campaign (`y0[()] *= ((x0[i, i] / x0[i, i]) + ...)` in a 2-D nest).  y = x0 * x1 * x2,
    # so d_x = [x1 * x2, x0 * x2, x0 * x1] = [15, 10, 6]; compiled and emulated once gave [15, 5, 1]: the
    # gradient kernel multiplied by the 1.0 stored before the loop instead of the product so far.
    # `y0[()] = y0[()] * x0[i]`, `/=`, a row product `y0[i] *= x0[i, j]` and a temporary went wrong alike.
    k = hyb.compile_source(PRODUCT_INTO_AN_ELEMENT).k
    x = np.array([2.0, 3.0, 5.0])
    assert k(x) == 30.0
    np.testing.assert_allclose(k.grad()(x, np.array(1.0)), [15.0, 10.0, 6.0])
    np.testing.assert_allclose(k.grad().emulate(x, np.array(1.0)), [15.0, 10.0, 6.0])
    rows = hyb.compile_source(PRODUCT_INTO_AN_ELEMENT.replace("output_tensor((), ", "output_tensor((1,), ")
                              .replace("y0[()]", "y0[0]").replace("*=", "/=")).k
    np.testing.assert_allclose(rows.grad()(x, np.ones(1)), -1.0 / (x * x.prod()))  # y = 1 / prod(x)


TRANSCENDENTAL_ROW_MAXIMUM = '''
def k(x):
    y = output_tensor((x.shape[0],), x.dtype)
    for i in range(x.shape[0]):
        m = x.dtype(-1.0e30)
        for j in range(x.shape[1]):
            m = max(m, exp(x[i, j]))
        y[i] = m
    return y
'''


def test_regression_closed_form_maximum_of_a_transcendental():
    # From the gradient campaign (the running maximum of exp(x0[j]) in a logsumexp).  The closed form's tie
    # counting loop computed exp(x[i, j]) again and compared it with m; compiled with the vector math library
    # (the default), that exp could differ from the one m was taken from in the last place, no position tied,
    # and the gradient at the maximum came out inf here (0 for other values).
    k = hyb.compile_source(TRANSCENDENTAL_ROW_MAXIMUM).k
    x = np.array([[-1.03, 0.31, -0.42, 0.04, -0.59, 0.59, -0.33, -0.96, 0.17, 1.09, -0.55, -1.49, 1.14, 1.2,
                   1.04, 0.49, -0.53]])
    want = np.zeros_like(x)
    want[0, 13] = np.exp(1.2)
    np.testing.assert_allclose(k.grad().emulate(x, np.ones(1)), want, rtol=1e-12)
    np.testing.assert_allclose(k.grad()(x, np.ones(1)), want, rtol=1e-12)
    # a value compared through a math function keeps its tape: no closed form
    assert "# rule:" not in k.compile(x).inspect("grad")


def test_tie_model_splits_among_candidates():
    """The reference of the tie check, by hand: a row maximum started from its first element (not visited
    again) and one started from a constant, with w scaling the operand."""
    tm = programs.TieModel((2, 4), (1,), "max", "xw", "first", ("fwd",), "m", ("x0", "w"))
    x = np.array([[1.0, 3.0, 3.0, -2.0], [2.0, 2.0, 1.0, 2.0]])
    w = np.array([1.0, 1.0, 1.0, 1.0])
    dx, dw = tm.gradient([x, w], np.array([6.0, 3.0]))
    np.testing.assert_array_equal(dx, [[0, 3, 3, 0], [1, 1, 0, 1]])
    np.testing.assert_array_equal(dw, [2, 11, 9, 2])  # share * x at each tie, summed over rows
    tm = programs.TieModel((3,), (0,), "min", "x", "const", ("rev",), "cm", ("x0",))
    (dx,) = tm.gradient([np.array([0.0, -1.0, -1.0])], np.array(2.0))
    np.testing.assert_array_equal(dx, [0, 3, 3])  # y = 3 m: 6 split between the two minima


CANCELLING_READS = '''
def k(x):
    y = output_tensor(x.shape, x.dtype)
    for j in range(x.shape[0]):
        y[j] = x[j] * 3.0 + ((x[j] + x[j]) - (x[j] + x[j])) * 1.0e20
    return y
'''


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_regression_a_statements_reads_of_one_element_are_summed_before_its_adjoint(dtype):
    # From the gradient campaign (`y0[j] = ((x0[j] + x0[j]) - (x0[j] + x0[j])) * m1 + ...` with m1 near -4e24,
    # the running maximum from -1e30).  Each read of x[j] was an increment of its own: d_x[j] got 3 * g, then
    # +1e20 * g twice and -1e20 * g twice, and the 3 * g was lost (0 instead of 3).  The terms are now
    # counted before they reach the adjoint: those four cancel exactly and add nothing.
    k = hyb.compile_source(CANCELLING_READS).k
    x, g = np.linspace(-1.0, 1.0, 5).astype(dtype), np.ones(5, dtype)
    grad = k.grad()
    np.testing.assert_array_equal(grad(x, g), np.full(5, 3.0, dtype))
    np.testing.assert_array_equal(grad.emulate(x, g), np.full(5, 3.0, dtype))
    assert [ln.strip() for ln in grad.source.splitlines() if ln.strip().startswith("d_x[")] == ["d_x[j] = g * 3.0"]
    square = hyb.compile_source(CANCELLING_READS.replace("x[j] * 3.0 + ((x[j] + x[j]) - (x[j] + x[j])) * 1.0e20",
                                                         "x[j] * x[j]")).k.grad()
    np.testing.assert_allclose(square(x, g), 2.0 * x, rtol=1e-6)
    assert len([ln for ln in square.source.splitlines() if ln.strip().startswith("d_x[")]) == 1


OVERWRITTEN_WITH_A_NEIGHBOUR = '''
def k(x0):
    y0 = output_tensor((x0.shape[0],), "float64")
    for i in range(x0.shape[0]):
        y0[i] = 1.0
    for i in range(x0.shape[0]):
        y0[i] = x0[i] + (x0[i - 1] if i > 0 else 0.0)
    return y0
'''


@pytest.mark.parametrize("first", ["for i in range(x0.shape[0]):\n        y0[i] = 1.0",
                                   "if x0.shape[0] < 0:\n        for i in range(x0.shape[0]):\n            y0[i] = 1.0"])
def test_regression_an_outputs_last_store_gathered_reads_the_incoming_gradient(first):
    # From the gradient campaign (an output stored in a branch that does not run, then by a loop that reads
    # `x0[i + 1]`).  The reverse of the last store, made as one gather loop per read, read the output's
    # adjoint buffer, which is never filled from the incoming gradient when a last store covers every
    # element: the gradient was 0.  It reads the incoming gradient, as the plain reverse loop does.
    src = OVERWRITTEN_WITH_A_NEIGHBOUR.replace("for i in range(x0.shape[0]):\n        y0[i] = 1.0", first, 1)
    k = hyb.compile_source(src).k
    for n in (1, 2, 7):
        x, d = np.arange(1.0, n + 1), np.linspace(1.0, 2.0, n)
        want = d + np.concatenate([d[1:], [0.0]])  # y[i] = x[i] + x[i - 1]
        np.testing.assert_allclose(k.grad()(x, d), want, rtol=1e-12)
        np.testing.assert_allclose(k.grad().emulate(x, d), want, rtol=1e-12)


SUM_OF_LARGE_EXPONENTIALS = '''
def k(x):
    y = output_tensor(x.shape, x.dtype)
    for i in range(x.shape[0]):
        s = x.dtype(0.0)
        for j in range(x.shape[1]):
            s += exp(x[i, j])
        for j in range(x.shape[1]):
            y[i, j] = exp(x[i, j]) / s
    return y
'''


def test_regression_the_derivative_of_a_quotient_by_a_large_denominator():
    # From the gradient campaign (a float32 softmax of values up to 50, without the maximum taken out).
    # The derivative of a / b by b was written -(g * a / (b * b)): b * b overflows in float32 once b is past
    # 1.8e19 (here b is a sum of exponentials near 1e22), and the whole path through b came out zero. It is
    # written -(g * (a / b) * (1.0 / b)).
    k = hyb.compile_source(SUM_OF_LARGE_EXPONENTIALS).k
    rng = np.random.default_rng(3)
    x = rng.uniform(40.0, 50.0, (3, 7))
    d = rng.standard_normal((3, 7))
    want = k.grad()(x, d)
    y = k(x)  # (the closed form of a softmax's gradient, as a check on the float64 one)
    np.testing.assert_allclose(want, y * (d - (y * d).sum(axis=1, keepdims=True)), rtol=1e-9, atol=1e-12)
    for run in (k.grad(), k.grad().emulate):
        got = run(x.astype(np.float32), d.astype(np.float32))
        np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-4 * np.abs(want).max())
