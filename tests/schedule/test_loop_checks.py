"""The checks of generated loops against the dependences (hyb.schedule.verify) and what they cost:
the order of shape-generic loops read at sample sizes, the loops of a plan with register blocks
checked once when rewritten (and stage by stage where that check fails), the plan's test of
private scalars judged one statement pair at a time, and a shape-generic compile refused where its
dependence analysis goes past its share of the budget."""
import islpy as isl
import numpy as np
import pytest

import hyb
from hyb.runtime import pipeline
from hyb.schedule import loops, plan, verify
from hyb.schedule.shaping import padded
from tests.fuzz.corpus import SOFTMAX

GEMM = '''
def gemm(a, b):
    c = output_tensor((a.shape[0], b.shape[1]), a.dtype)
    for i in range(a.shape[0]):
        for j in range(b.shape[1]):
            for k in range(a.shape[1]):
                c[i, j] += a[i, k] * b[k, j]
    return c
'''

ROWS = SOFTMAX  # a row softmax: private scalars (the row's max and sum)


def _operands(n, m, p, seed=0):
    rng = np.random.default_rng(seed)
    return rng.random((n, m)), rng.random((m, p))


def test_the_order_read_at_sizes_is_the_order_for_all_sizes_at_them():
    k = hyb.compile_source(GEMM, shapes="generic").gemm
    a, b = _operands(70, 9, 45)
    middle = k.compile(a, b).middle
    nest = middle.nest
    params = verify.size_symbols(nest.kernel)
    assert params, "shape-generic loops have run-time sizes"
    whole, places = verify.executed_order(nest)
    for value in (1, 7, 67):
        at = {p: value + i for i, p in enumerate(params)}
        point = isl.Set("[%s] -> { : %s }" % (", ".join(params), " and ".join(f"{p} = {v}" for p, v in at.items())))
        there, places_there = verify.executed_order(nest, at)
        assert places_there == places
        assert there.intersect_params(point).is_equal(whole.intersect_params(point))


def test_loops_with_register_blocks_are_checked_once_when_rewritten(monkeypatch):
    monkeypatch.setenv("HYB_CACHE", "0")
    k = hyb.compile_source(GEMM).gemm
    a, b = _operands(70, 64, 45)
    ck = k.compile(a, b)
    assert "register block" in ck.inspect("schedule")
    stages = [name for name, _ in ck.timings.stages]
    assert stages.count("loop checks") == 1 and stages.count("loop nest") == 1
    np.testing.assert_allclose(ck(a, b), a @ b, rtol=1e-12)


def test_rewritten_loops_that_break_a_dependence_are_made_again_checked_stage_by_stage(monkeypatch):
    """A register-block rewrite that ran a reduction's loop on threads: the final check fails, the
    stages run again with a check after each, and the loops without the rewrite are kept."""
    real = pipeline.promote.promote

    def on_threads(poly, nest):
        promoted, decisions = real(poly, nest)
        every = {id(x): {"parallel": True} for x in loops.loops(promoted.body)}
        return loops.with_flags(promoted, every), decisions

    monkeypatch.setattr(pipeline.promote, "promote", on_threads)
    monkeypatch.setenv("HYB_CACHE", "0")  # (the disk cache would serve the loops made without the fault)
    k = hyb.compile_source(GEMM, threads=2).gemm
    a, b = _operands(70, 64, 45)
    ck = k.compile(a, b)
    assert "register blocks not kept in registers: the rewritten loops broke dependences" in ck.inspect("schedule")
    stages = [name for name, _ in ck.timings.stages]
    assert stages.count("loop checks") == 1 and stages.count("loop nest") == 2
    np.testing.assert_allclose(ck(a, b), a @ b, rtol=1e-12)


def _respects_whole(sched, deps):
    """The test of plan._respects made on every dependence at once (its earlier form)."""
    if deps.is_empty():
        return True
    smap = padded(sched.get_map())
    times = deps.apply_domain(smap).apply_range(smap)
    maps = []
    smap.foreach_map(maps.append)
    lex_lt = isl.UnionMap.from_map(isl.Map.lex_lt(maps[0].get_space().range()))
    late = times.subtract(lex_lt)
    if late.is_empty():
        return True
    bad = deps.intersect(smap.apply_range(late).apply_range(smap.reverse()))
    for pairs in plan._other_threads(sched):
        bad = bad.subtract(pairs)
    return bad.is_empty()


@pytest.mark.parametrize("shapes", ["specialise", "generic"])
def test_private_scalars_are_judged_pair_by_pair_as_on_all_dependences_at_once(monkeypatch, shapes):
    real, answers = plan._respects, []

    def both(sched, deps):
        got = real(sched, deps)
        answers.append((got, _respects_whole(sched, deps)))
        return got

    monkeypatch.setattr(plan, "_respects", both)
    # (isl's first schedule puts the rows' maxima and sums in nests of their own, which interleaves
    # the scalars' lifetimes; schedule.fuse would join the nests again before the judging)
    monkeypatch.setattr(plan.fuse, "fuse", lambda p, deps, sched, keep: (sched, []))
    monkeypatch.setenv("HYB_CACHE", "0")
    k = hyb.compile_source(ROWS, shapes=shapes).k
    x = np.random.default_rng(1).random((33, 70))
    want = np.exp(x - x.max(axis=1, keepdims=True))
    np.testing.assert_allclose(k(x), want / want.sum(axis=1, keepdims=True), rtol=1e-12)
    assert answers and all(a == b for a, b in answers)
    assert {a for a, _ in answers} == {True, False}  # (a schedule that interleaves lifetimes was met)


def test_a_shape_generic_compile_past_its_share_of_the_analysis_is_refused(monkeypatch):
    monkeypatch.setattr(pipeline, "GENERIC_ANALYSIS_SHARE", 10 ** 9)  # a budget of one operation
    monkeypatch.setenv("HYB_CACHE", "0")
    k = hyb.compile_source(GEMM, shapes="generic").gemm
    a, b = _operands(20, 9, 13)
    ck = k.compile(a, b)
    assert not getattr(ck, "generic", False)
    assert "no shape-generic code: the dependence analysis for all sizes went past its budget of 1 isl operations" \
        in ck.inspect("schedule")
    np.testing.assert_allclose(ck(a, b), a @ b, rtol=1e-12)
    # code for the shape is analysed with the whole budget: exact dependences, isl's schedule
    assert "isl scheduler" in ck.inspect("schedule")
