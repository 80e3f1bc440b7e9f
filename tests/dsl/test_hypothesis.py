"""Emulation parity: compiled kernels == the reference interpreter.

Hypothesis draws whole kernels from :mod:`kernelgen`:

* loop nests of depth 1-3 over the tensors' shape: ``range(n)``, ``range(lo, n - hi[, 2|3])``,
  negative steps, bounds from an outer loop (``range(i + 1)``, ``range(i, n)``,
  ``range(n - 1, i - 1, -1)``), bounds read from tensors, every loop hint, ``grid(shape)``;
* statements: element stores and every augmented assignment, scalar locals (weak constants,
  typed scalars, accumulators), ``if``/``elif``/``else`` with affine and data-dependent
  conditions, ``allocate`` at the top and inside loops, several outputs, an input written in
  place, 0-d tensors, a second kernel called (inlined), module constants, scalar parameters;
* expressions: in-bounds shifted, reversed, halved and data-dependent subscripts, guarded
  shifts (``a[i - 2] if i >= 2 else ...``), weak int/float literals, shapes, ``len``, ``.ndim``,
  ``+ - * / // % **``, unary ``-``, casts to every dtype, ``x if c else y``, comparisons (chained),
  ``and``/``or``/``not``, ``bool()``, and the intrinsics (``abs`` ... ``popcount``, ``max``/``min``,
  ``sqrt``, and in some kernels the transcendental ones);
* random shapes (0 and 1 included, square ones for triangular loops), dtypes (float32/64 and
  int32/64 mixed, or every dtype from bool to uint64, float16 and bfloat16), values (negative, zero,
  integer extremes, nan/inf/-0.0 in some runs) and ``schedule=``/``threads=`` options (the
  isl scheduler, the original order, tiny tiles).

Each kernel runs compiled and emulated on copies of the same arguments; outputs and in-place
inputs must agree: integers exactly, floats to ~1e-5 (float32) / 1e-12 (float64) / 1e-3
(float16) / 8e-3 (bfloat16) of the output's magnitude (wider where transcendental functions are involved), nan
where nan, the same infinities.  A variant lets data-dependent subscripts leave their tensor:
compiled code must raise ``HybridIndexError`` exactly when emulate does.

By default the runs are derandomized (the same examples on every run, so the suite stays
deterministic); ``HYB_HYPOTHESIS=explore`` draws new examples with 10x the budget::

    HYB_HYPOTHESIS=explore pytest tests/dsl/test_hypothesis.py -q

The generator stays clear of the compiler bugs these tests found (kernelgen.Config:
``stable_conditions``, ``avoid_parallel_bug``, ``dd_writes``); each one is pinned at the end of
this file as a minimal regression test marked ``xfail(strict=True)``: when a fix lands, the
test XPASSes (fails), the mark goes, and the matching Config knob can be flipped.
"""
from __future__ import annotations

import os
import warnings
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import HealthCheck, given, note, settings

import hyb

from tests import kernelgen as kg

EXPLORE = os.environ.get("HYB_HYPOTHESIS") == "explore"


def budget(n):
    return settings(max_examples=n * 10 if EXPLORE else n, deadline=None, derandomize=not EXPLORE,
                    database=None if not EXPLORE else settings.default.database,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                           HealthCheck.filter_too_much, HealthCheck.large_base_example],
                    print_blob=EXPLORE)


RTOL = {"float16": 1e-3, "bfloat16": 8e-3, "float32": 1e-5, "float64": 1e-12}
# Programs with transcendental intrinsics or pow(): NumPy and libm may differ by a few ulp.
RTOL_INEXACT = {"float16": 4e-3, "bfloat16": 3e-2, "float32": 1e-4, "float64": 1e-10}


def as_tuple(r):
    return r if isinstance(r, tuple) else (r,)


def assert_same(got, want, what, rtol=None):
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape, f"{what}: shape {got.shape} (compiled) != {want.shape} (emulated)"
    assert got.dtype == want.dtype, f"{what}: dtype {got.dtype} (compiled) != {want.dtype} (emulated)"
    name = want.dtype.name
    if name == "bfloat16":  # exactly as float32 (NumPy's testing knows its own floats only)
        got, want = got.astype(np.float32), want.astype(np.float32)
    if want.dtype.kind != "f":
        np.testing.assert_array_equal(got, want, err_msg=what)
        return
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want), err_msg=f"{what}: nan positions")
    inf = np.isinf(want)
    np.testing.assert_array_equal(got[inf], want[inf], err_msg=f"{what}: infinities")
    finite = np.isfinite(want)
    np.testing.assert_array_equal(np.isfinite(got), finite, err_msg=f"{what}: finite positions")
    if finite.any():
        rtol = (rtol or RTOL)[name]
        scale = max(1.0, float(np.abs(want[finite]).max()))
        np.testing.assert_allclose(got[finite], want[finite], rtol=rtol, atol=rtol * scale, err_msg=what)


def copy(a):
    return a.copy() if isinstance(a, np.ndarray) else a


def run_both(source, arrays, inplace=(), rtol=None, options=None):
    """Compile and emulate `k` of `source` on copies of `arrays`; assert they agree."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", hyb.HybridWarning)
        kernel = hyb.compile_source(source, "generated.hyb", **(options or {})).k
        compiled_args = [copy(a) for a in arrays]
        emulated_args = [copy(a) for a in arrays]
        try:
            got = as_tuple(kernel(*compiled_args))
        except hyb.HybridArgumentError as e:  # a Python int that does not fit its dtype: both refuse it
            assert "is out of bounds for" in e.message, e
            with pytest.raises(hyb.HybridArgumentError) as info:
                kernel.emulate(*emulated_args)
            assert info.value.message == e.message
            return
        emu = as_tuple(kernel.emulate(*emulated_args))
    assert len(got) == len(emu)
    for n, (g, e) in enumerate(zip(got, emu)):
        assert_same(g, e, f"output {n}", rtol)
    for pos, (orig, c, e) in enumerate(zip(arrays, compiled_args, emulated_args)):
        if not isinstance(orig, np.ndarray):
            continue
        if pos in inplace:
            assert_same(c, e, f"input {pos} (written in place)", rtol)
        else:
            bits = f"u{orig.dtype.itemsize}"  # bit for bit (NaN too, in every float dtype)
            np.testing.assert_array_equal(c.view(bits), orig.view(bits), err_msg=f"compiled kernel changed input {pos}")
            np.testing.assert_array_equal(e.view(bits), orig.view(bits), err_msg=f"emulate changed input {pos}")
    return got, emu


def check(prog: kg.Program):
    note(prog.describe())
    run_both(prog.source, prog.args, prog.inplace, RTOL_INEXACT if prog.inexact else None, prog.options)


# ------------------------------------------------------------------ property tests
DEFAULT = kg.Config()


@budget(250)
@given(kg.programs(DEFAULT))
def test_parity_random_kernels(prog):
    """float32/64 and int32/64 tensors, every construct the generator knows."""
    check(prog)


@budget(200)
@given(kg.programs(replace(DEFAULT, dtypes=kg.ALL_DTYPES)))
def test_parity_all_dtypes(prog):
    """bool, int8..int64, uint8..uint64, float16..float64: promotion, wrapping, conversions."""
    check(prog)


@budget(120)
@given(kg.programs(replace(DEFAULT, rank=(1,), max_stmts=5, expr_depth=4, dtypes=kg.ALL_DTYPES)))
def test_parity_expressions_1d(prog):
    """Deeper expression trees on vectors: casts, selects, //, %, **, intrinsics, comparisons."""
    check(prog)


@budget(120)
@given(kg.programs(replace(DEFAULT, rank=(2, 3), max_stmts=10, expr_depth=2)))
def test_parity_loop_nests(prog):
    """Deeper nests, more statements: triangular/strided/reversed bounds, guards, accumulators,
    temporaries, in-place updates, tiny tiles."""
    check(prog)


def outcome(run, args):
    try:
        return run(*args), None
    except hyb.HybridIndexError as e:
        return None, e


@budget(100)
@given(kg.programs(replace(DEFAULT, out_of_bounds=True, dd_writes=False)))
def test_parity_runtime_index_errors(prog):
    """Data-dependent subscripts that may leave their tensor: compiled code raises HybridIndexError
    exactly when emulate does (and otherwise agrees with it)."""
    note(prog.describe())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", hyb.HybridWarning)
        kernel = hyb.compile_source(prog.source, "generated.hyb", **prog.options).k
        got, got_err = outcome(kernel, [copy(a) for a in prog.args])
        emu, emu_err = outcome(kernel.emulate, [copy(a) for a in prog.args])
    assert (got_err is None) == (emu_err is None), f"compiled raised {got_err!r}, emulate raised {emu_err!r}"
    if got_err is None:
        rtol = RTOL_INEXACT if prog.inexact else None
        for n, (g, e) in enumerate(zip(as_tuple(got), as_tuple(emu))):
            assert_same(g, e, f"output {n}", rtol)
    else:
        assert "generated.hyb" in str(got_err) and "generated.hyb" in str(emu_err)


# ------------------------------------------------------------------ regressions found by the tests above
# Each is the minimal kernel a failing example shrank to; `xfail(strict=True)` keeps the suite green
# until the compiler is fixed, and turns red (XPASS) as soon as it is, so the mark gets removed.

COND_REWRITTEN_SCALAR = '''
def k(a):
    c = output_tensor(a.shape, a.dtype)
    for i in range(a.shape[0]):
        s = a[i]
        if s > 0:
            s = -s
            c[i] = s
    return c
'''

COND_REWRITTEN_INPLACE = '''
def k(a):
    c = output_tensor(a.shape, a.dtype)
    for i in range(a.shape[0]):
        if a[i] > 0:
            a[i] = -a[i]
        else:
            c[i] = 1
    return c, a
'''

COND_REWRITTEN_OUTPUT = '''
def k(a):
    c = output_tensor(a.shape, a.dtype)
    for i in range(a.shape[0]):
        if c[i] == 0:
            c[i] = 5
            c[i] += 1
    return c
'''


@pytest.mark.parametrize("source,inplace", [(COND_REWRITTEN_SCALAR, ()), (COND_REWRITTEN_INPLACE, (0,)),
                                            (COND_REWRITTEN_OUTPUT, ())], ids=["scalar", "inplace", "output"])
def test_regression_if_condition_changed_by_its_own_branch(source, inplace):
    # emulated: scalar [-1, 0, -3]; inplace c = [0, 1, 0]; output [6, 6, 6]
    # compiled: scalar [0, 0, 0];   inplace c = [1, 1, 1]; output [5, 5, 5]
    run_both(source, [np.array([1.0, -2.0, 3.0])], inplace)


ZERO_D_OUTPUT = '''
def k(a):
    c = output_tensor((), a.dtype)
    for i in range(a.shape[0]):
        c[()] += a[i]
    return c
'''

ZERO_D_INPLACE = '''
def k(a, b):
    for i in range(b.shape[0]):
        a[()] += b[i]
    return a
'''


def test_regression_zero_d_output_is_an_array():
    x = np.arange(5.0)
    kernel = hyb.compile_source(ZERO_D_OUTPUT).k
    got, emu = kernel(x), kernel.emulate(x)
    assert type(got) is np.ndarray and got.shape == () and got == 10  # compiled: array(10.)
    assert type(emu) is np.ndarray and emu.shape == () and emu == 10  # emulated: np.float64(10.0)


def test_regression_zero_d_input_written_in_place():
    kernel = hyb.compile_source(ZERO_D_INPLACE).k
    for run in (kernel, kernel.emulate):
        a = np.array(1.0)
        out = run(a, np.arange(3.0))
        # compiled: a == array(4.), out is a; emulated: a == array(1.), out == np.float64(4.0)
        assert out is a and a == 4.0, run


def compiled(source, args, **options):
    """`k` of `source` compiled for `args` with `options` (the compiled kernel, for ``inspect``)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", hyb.HybridWarning)
        return hyb.compile_source(source, "generated.hyb", **options).k.compile(*args)


def force_parallel_marks(monkeypatch):
    """Compile without the scheduler's refusal to mark a band whose first member is constant (isl
    makes no loop of that member, so the mark lands on the loop of the next one): the schedules the
    two bugs below were found with.  No disk cache meanwhile, so that code compiled this way serves
    no other test."""
    from hyb.schedule import parallel
    monkeypatch.setattr(parallel, "_constant_first_member", lambda band: False)
    monkeypatch.setenv("HYB_CACHE", "0")


PARALLEL_DEGENERATE_BAND = '''
def k(x):
    y = output_tensor((2, 4, 4), "float64")
    for i in range(4):
        for j in range(2):
            s = int64(x[0] * 0 + 1)
            for k in range(1, 4):
                y[x[0], k + x[0] * 0, k - 1 + x[0] * 0] = 2.0
            y[0, i, j] = s
    return y
'''


@pytest.mark.parametrize("marks", ["as_scheduled", "forced"])
def test_regression_parallel_mark_on_dependent_loop(marks, monkeypatch):
    # The scheduler fuses the three statements into a band [0 / 1 - j / 0; j / k / 1 + 2j] with
    # coincident = [1, 0]; its first member is constant for each c0, so the AST's first loop is the
    # second member, which carries the flow dependence s = 1 -> y[0, i, j] = s.  Run on 2+ threads
    # (each with its own copy of s), that loop leaves column 1 of y[0] at 0 (emulated: 1).
    # (`s` and the subscripts are written so that hyb cannot see through them: a constant `s` or
    # affine subscripts would let the analysis find this kernel's legal parallel loops.)
    # Every loop of this kernel carries a dependence (each (i, j) stores into the cells of
    # y[x[0]]), so none may run on threads: as scheduled no band is marked; with the marks forced
    # the check of the generated loops finds the broken dependence and keeps the original order.
    if marks == "forced":
        force_parallel_marks(monkeypatch)
    opts = {"threads": 2, "schedule": {"min_parallel_work": 0}}
    x = np.array([1])
    ck = compiled(PARALLEL_DEGENERATE_BAND, [x], **opts)
    assert "parallel for" not in ck.inspect("loops")
    if marks == "forced":
        assert "generated loops broke dependences" in ck.inspect("schedule")
    (got,), _ = run_both(PARALLEL_DEGENERATE_BAND, [x], options=opts)
    want = np.zeros((2, 4, 4))
    want[0, :, :2] = 1.0
    want[1, [1, 2, 3], [0, 1, 2]] = 2.0
    np.testing.assert_array_equal(got, want)


PARALLEL_SCALAR_LIVE_IN_OUT = '''
def k(a):
    c = output_tensor(a.shape, a.dtype)
    for i in range(a.shape[0]):
        for j in range(i + 1, a.shape[0]):
            s = a[i]
            s += 1
            c[i] = s
    return c
'''


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("marks", ["as_scheduled", "forced"])
def test_regression_parallel_loop_drops_scalar_update(marks, threads, monkeypatch):
    # With the marks forced, the schedule puts `s += 1` alone in a one-iteration `parallel for`
    # (bounds `(c0 <= 2) ? 0 : 1`), between `s = a[i]` and `c[i] = s`: s is live into and out of
    # the loop marked parallel, whose outlined body would update a private copy of s (a = [10, 20,
    # 30]: [10, 20, 0] instead of emulate's [11, 21, 0]).  The checks of the generated loops cannot
    # read such bounds, so the original order is used (its outer loop may run on threads).
    if marks == "forced":
        force_parallel_marks(monkeypatch)
    opts = {"threads": threads, "schedule": {"min_parallel_work": 0}}
    a = np.array([10, 20, 30])
    ck = compiled(PARALLEL_SCALAR_LIVE_IN_OUT, [a], **opts)
    text = ck.inspect("loops")
    # no loop on threads between the scalar's definition and its use: none, or the outer loop of
    # the original order (isl's loops, whose bounds the checks cannot read, are not kept)
    assert "parallel for" not in text or (text.startswith("parallel for") and text.count("parallel for") == 1)
    # (the scheduler keeps the scalar's lifetimes in one iteration of `i`, or the loops it makes
    # cannot be read by the check and the original order is kept)
    sched = ck.inspect("schedule")
    assert ("generated loops could not be checked" in sched
            or "scalar locals privatised, each kept in one iteration" in sched), sched
    (got,), _ = run_both(PARALLEL_SCALAR_LIVE_IN_OUT, [a], options=opts)
    np.testing.assert_array_equal(got, [11, 21, 0])


DEPS_CRASH = '''
def k(x):
    u = output_tensor((2, 2), "int32")
    for i in range(1, -1, -3):
        for j in range(i, 2):
            u[j // 2, 0] = 1
        u[i, 0] = 2
    u[x[0], 1] = 3
    return u
'''


def test_regression_compute_flow_crash():
    # compiled: islpy._isl.Error: call to isl_union_access_info_compute_flow failed: affine expression
    # involves some of the domain dimensions (schedule="original" too; it comes from deps.compute);
    # emulated: [[1, 0], [2, 3]].  A 2-iteration loop (range(3, -1, -3) on a 4x4 tensor) compiles.
    run_both(DEPS_CRASH, [np.array([1])])


AST_ORDER = '''
def k(x0):
    y0 = output_tensor((2, 3), "int32")
    for i in range(2):
        for j in range(i + 1, 3):
            y0[1 - i, 2 - j] = 0
            y0[x0[i, j], j] = j
        for j in range(i):
            y0[1, 1] = 7
            y0[0, 2] = 1
            y0[0, x0[0, 0] + 2] -= 1
        for j in range(3):
            y0[i, j] = -3
    return y0
'''


def test_regression_scheduled_code_breaks_output_dependence():
    # With x0[1, 2] == 0, iteration (i=1, j=2) writes y0[0, 2] = 2, then (i=1, j=0) sets y0[0, 2] = 1 and
    # subtracts 1.  isl's AST generator, given the skewed schedule isl's scheduler picks here, emits
    # `y0[0, 2] = 1` first; the check of the generated loops against the dependences (verify.py)
    # catches it and the kernel falls back to the original order.
    run_both(AST_ORDER, [np.array([[0, 0, 0], [1, 1, 0]])])


NESTED_CONDITION_ELIF = '''
def k(x):
    y = output_tensor(x.shape, "float32")
    for i in range(x.shape[0]):
        if x[i] == 0:
            y[i] = 1
        elif x[int32(x[i]) - 1] > 0:
            y[i] = 2
    return y
'''

NESTED_CONDITION_IF = '''
def k(x):
    y = output_tensor(x.shape, "float32")
    for i in range(x.shape[0]):
        if x[i] != 0:
            if x[int32(x[i]) - 1] > 0:
                y[i] = 2
    return y
'''


@pytest.mark.parametrize("source", [NESTED_CONDITION_ELIF, NESTED_CONDITION_IF], ids=["elif", "nested_if"])
def test_regression_nested_condition_evaluated_eagerly(source):
    # x = [0, 0]: the inner condition, which reads x[-1], is never reached in Python.
    # emulated: [1, 1] (elif) and [0, 0] (nested if); compiled: HybridIndexError "index -1 is out of
    # bounds for axis 0 of `x`" at the inner condition.  `c1 and c2` and `a if c else b` are lazy, as they should be.
    run_both(source, [np.array([0.0, 0.0])])
