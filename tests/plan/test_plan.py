"""The plan stage alone: a polyhedral program and its dependences -> a Plan record."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import hyb
from hyb.schedule import deps, extract, plan
from hyb.schedule.options import parse_options
from hyb.target import host_cpu

SRC = '''def matmul(a, b):
    c = output_tensor((a.shape[0], b.shape[1]), a.dtype)
    for i in range(a.shape[0]):
        for j in range(b.shape[1]):
            for k in range(a.shape[1]):
                c[i, j] += a[i, k] * b[k, j]
    return c

def prefix(x):
    for i in range(1, x.shape[0]):
        x[i] = x[i] + x[i - 1]
    return x
'''


def program(name, *args):
    typed = hyb.compile_source(SRC).kernels[name].typed(*args)
    p = extract.extract(typed)
    return p, deps.compute(p)


def test_a_matrix_product_is_tiled_and_runs_on_threads():
    a = np.zeros((128, 128))
    p, d = program("matmul", a, a)
    made = plan.plan(p, d, parse_options(None).resolve(host_cpu(1)))
    assert made.tree is not None
    text = made.describe()
    assert "tiled" in text and "`parallel`" in text and "schedule tree:" in text


def test_options_steer_the_plan():
    a = np.zeros((64, 64))
    p, d = program("matmul", a, a)
    original = plan.plan(p, d, parse_options("original").resolve(host_cpu(1)))
    assert original.tree is None and original.decisions == ('original program order (schedule="original")',)
    untiled = plan.plan(p, d, parse_options({"tile": False}).resolve(host_cpu(1)))
    assert not any("tiled" in x for x in untiled.decisions)


def test_a_carried_dependence_keeps_its_loop_serial():
    p, d = program("prefix", np.zeros(100_000))
    made = plan.plan(p, d, parse_options(None).resolve(host_cpu(1)))
    assert not any("marked `parallel`" in x for x in made.decisions)


def test_a_plan_is_an_immutable_record():
    a = np.zeros((16, 16))
    p, d = program("matmul", a, a)
    made = plan.plan(p, d, parse_options(None).resolve(host_cpu(1)))
    with pytest.raises(dataclasses.FrozenInstanceError):
        made.tree = None
    noted = made.noted("one more decision", 0)
    assert noted.decisions[0] == "one more decision" and made.decisions[0] != "one more decision"


def _chain(n: int) -> str:
    """n loop nests in a row through one output: one connected problem to isl's scheduler."""
    body = "".join(f"    for i in range(a.shape[0]):\n        c[i] += a[i] * {k}.0\n" for k in range(n))
    return f"def acc(a):\n    c = output_tensor(a.shape, a.dtype)\n{body}    return c\n"


def test_runs_of_nests_are_scheduled_one_by_one_where_isl_gives_up_on_the_whole():
    a = np.arange(50.0)
    k = hyb.compile_source(_chain(100)).acc
    ck = k.compile(a)
    why = ck.inspect("schedule")
    assert ("isl scheduler gave up (operation limit) for the whole kernel: its 4 runs of consecutive loop nests "
            f"(at most {plan.GROUP_STATEMENTS} statements each) scheduled one by one, in their order") in why
    # each run fused into one loop by isl, and the runs into one along `i` (schedule.fuse: every
    # dependence between them joins the same `i`)
    assert ck.inspect("loops").count("for (") == 1 and "loop nests fused along their outer loop" in why
    np.testing.assert_allclose(ck(a), a * (100 * 99 / 2), rtol=1e-12)
    for n in (1, 7, 33):  # one element, odd, not a multiple of a vector or a tile
        b = np.random.default_rng(n).random(n)
        np.testing.assert_allclose(k(b), k.emulate(b), rtol=1e-12)
        np.testing.assert_allclose(k(b), b * (100 * 99 / 2), rtol=1e-12)
    groups = plan._nest_groups(program_of(_chain(100), a))
    assert [len(g) for g in groups] == [32, 32, 32, 4]
    # a kernel isl schedules whole is not split
    assert "runs of consecutive" not in hyb.compile_source(_chain(40)).acc.compile(a).inspect("schedule")


def program_of(src, *args):
    return extract.extract(hyb.compile_source(src).acc.typed(*args))
