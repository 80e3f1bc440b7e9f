"""The dependence analysis one top-level nest at a time: the same flow as isl's analysis of the
whole program, anti dependences only since the last sure write (the rest follow through it), and
a cost that grows with the program's length rather than its square."""
from __future__ import annotations

import islpy as isl
import numpy as np
import pytest

import hyb
from hyb.schedule import deps, extract, verify

KERNELS = {
    "nests into one output": '''
def k(a):
    c = output_tensor(a.shape, a.dtype)
    for i in range(a.shape[0]):
        c[i] += a[i]
    for i in range(a.shape[0]):
        c[i] = c[i] * 2.0
    for i in range(1, a.shape[0]):
        c[i] += c[i - 1]
    return c
''',
    "a temporary under conditions": '''
def k(a):
    t = allocate(a.shape, a.dtype)
    c = output_tensor(a.shape, a.dtype)
    for i in range(a.shape[0]):
        if a[i] > 0.0:
            t[i] = a[i]
        else:
            t[i] = -a[i]
    for i in range(a.shape[0]):
        if a[i] > 0.5:
            t[i] = t[i] * 3.0
    for i in range(a.shape[0]):
        c[i] = t[i] + t[a.shape[0] - 1 - i]
    return c
''',
    "row reductions": '''
def k(a):
    c = output_tensor(a.shape, a.dtype)
    for i in range(a.shape[0]):
        m = a[i, 0]
        for j in range(a.shape[1]):
            m = max(m, a[i, j])
        s = 0.0
        for j in range(a.shape[1]):
            c[i, j] = exp(a[i, j] - m)
            s += c[i, j]
        for j in range(a.shape[1]):
            c[i, j] = c[i, j] / s
    for i in range(a.shape[0]):
        for j in range(1, a.shape[1]):
            c[i, j] += c[i, j - 1]
    return c
''',
    "products": '''
def k(a):
    t = allocate((a.shape[0], a.shape[0]), a.dtype)
    c = output_tensor((a.shape[0], a.shape[0]), a.dtype)
    for i in range(a.shape[0]):
        for j in range(a.shape[0]):
            for k in range(a.shape[1]):
                t[i, j] += a[i, k] * a[j, k]
    for i in range(a.shape[0]):
        for j in range(a.shape[0]):
            for k in range(a.shape[0]):
                c[i, j] += t[i, k] * t[k, j]
    return c
''',
}


def arg(name):
    return np.random.default_rng(0).standard_normal((6,) if name in ("nests into one output",
                                                                     "a temporary under conditions") else (5, 4))


def program(name) -> extract.PolyProgram:
    k = hyb.compile_source(KERNELS[name], schedule={"reassociate": False}).k
    return extract.extract(k.typed(arg(name)))


@pytest.mark.parametrize("name", sorted(KERNELS))
@pytest.mark.parametrize("expanded", [True, False])
def test_the_flow_is_isls_for_the_whole_program(name, expanded):
    p = program(name)
    order, reads = p.union("order"), p.union("reads", expanded)
    must, may = p.union("must_writes", expanded), p.union("may_writes", expanded)
    for sink, must_src, may_src in ((reads, must, may), (may, must, may), (may, must, reads)):
        ours = deps.dataflow(sink, must_src, may_src, order)
        whole = deps.isl_dataflow(sink, must_src, may_src, order)
        assert ours.get_may_dependence().is_equal(whole.get_may_dependence())
        assert ours.get_may_no_source().is_equal(whole.get_may_no_source())
        assert ours.get_full_may_dependence().is_equal(whole.get_full_may_dependence())


@pytest.mark.parametrize("name", sorted(KERNELS))
def test_the_loops_keep_every_anti_dependence_left_out(name, monkeypatch):
    # every read before every later write of its element, with no write killing another: the
    # compiled loops must order all of them, though the analysis lists only those since the
    # last sure write (as for a long kernel: these short ones would keep them all)
    monkeypatch.setattr(deps, "FULL_ANTI_STATEMENTS", 0)
    k = hyb.compile_source(KERNELS[name], schedule={"reassociate": False}).k
    a = arg(name)
    np.testing.assert_allclose(k(a), k.emulate(a), rtol=1e-13, atol=1e-15)  # exp: last bit
    ck = k.compile(a)
    p = ck.poly
    order, reads, may = p.union("order"), p.union("reads"), p.union("may_writes")
    every_anti = deps.conservative_flow(may, isl.UnionMap.empty(reads.get_space()), reads, order)
    every_anti = every_anti.get_may_dependence()
    assert ck.deps.anti.union(ck.deps.output).is_subset(every_anti.union(ck.deps.output))
    broken = verify.violations(ck.nest, every_anti.union(ck.deps.all), ck.cell_deps.all)
    assert broken is not None and broken.is_empty()


def nests(n: int) -> str:
    body = "".join(f"    for i in range(a.shape[0]):\n        c[i] += a[i] * {k + 1}.0\n" for k in range(n))
    return f"def k(a):\n    c = output_tensor(a.shape, a.dtype)\n{body}    return c\n"


@pytest.mark.parametrize("name", sorted(KERNELS))
def test_a_short_kernel_keeps_every_anti_dependence(name):
    # (the scheduler weighs the distances of all of them)
    ck = hyb.compile_source(KERNELS[name]).k.compile(arg(name))
    p = ck.poly
    order, reads, may = p.union("order"), p.union("reads"), p.union("may_writes")
    every_anti = deps.conservative_flow(may, isl.UnionMap.empty(reads.get_space()), reads, order)
    assert ck.deps.anti.is_equal(every_anti.get_may_dependence().coalesce())


def test_a_long_sequence_of_nests_gets_exact_dependences_and_a_schedule():
    k = hyb.compile_source(nests(256)).k
    a = np.arange(7.0)
    np.testing.assert_allclose(k(a), a * (256 * 257 / 2))
    ck = k.compile(a)
    assert ck.deps.exact
    assert "dependence analysis stopped" not in ck.inspect("schedule")
    assert ck.deps.anti.union(ck.deps.output).n_map() <= 2 * 256  # linear, not 256 * 255 / 2


def test_the_budget_grows_with_the_statements():
    p1 = extract.extract(hyb.compile_source(nests(3)).k.typed(np.ones(4)))
    p2 = extract.extract(hyb.compile_source(nests(100)).k.typed(np.ones(4)))
    assert deps.budget_for(p1, 1000) == 1000
    assert deps.budget_for(p2, 1000) == 1000 * -(-100 // deps.BUDGET_STATEMENTS)
    assert deps.budget_for(p2, 0) == 0


def deep(depth: int) -> str:
    names = [f"i{k}" for k in range(depth)]
    text = "def k(a):\n    c = output_tensor((2,), a.dtype)\n"
    for k, v in enumerate(names):
        text += "    " * (k + 1) + f"for {v} in range(2):\n"
    return text + "    " * (depth + 1) + f"c[i0] += a[{names[-1]}]\n    return c\n"


def test_a_deep_reduction_s_intricate_dependences_are_over_approximated_and_said():
    k = hyb.compile_source(deep(10)).k
    a = np.array([1.0, 2.0])
    np.testing.assert_array_equal(k(a), [768.0, 768.0])
    np.testing.assert_array_equal(k.emulate(a), [768.0, 768.0])
    ck = k.compile(a)
    assert ck.deps.simplified == (("S0", "S0"),)
    assert ck.inspect("schedule").startswith(
        "dependences S0 -> S0 over-approximated (every earlier access of an element): the exact ones have "
        f"more than {deps.MAX_DEPENDENCE_CONSTRAINTS} constraints in a piece\n")
    assert "isl scheduler took longer" not in ck.inspect("schedule")
    # the replacement holds every exact dependence
    p = ck.poly
    exact = deps.isl_dataflow(p.union("reads"), p.union("must_writes"), p.union("may_writes"), p.union("order"))
    assert exact.get_may_dependence().is_subset(ck.deps.flow)


@pytest.mark.parametrize("name", sorted(KERNELS))
def test_ordinary_kernels_keep_their_exact_dependences(name):
    k = hyb.compile_source(KERNELS[name]).k
    ck = k.compile(arg(name))
    assert ck.deps.simplified == ()
    assert "over-approximated" not in ck.inspect("schedule")
