"""The typed-kernel rewrites as one registry (hyb.schedule.rewrites): their order, their gates,
what each applied and refused (inspect("rewrites")), and the same decisions in inspect("schedule")."""
import warnings

import numpy as np
import pytest

import hyb
from hyb.dsl import tir
from hyb.schedule import rewrites
from hyb.schedule.options import parse_options
from hyb.target import host_cpu

SRC = '''
def matmul(a, w):
    out = output_tensor((a.shape[0], w.shape[0]), a.dtype)
    for i in range(a.shape[0]):
        for o in range(w.shape[0]):
            val = a.dtype(0)
            for k in range(a.shape[1]):
                val += a[i, k] * w[o, k]
            out[i, o] = max(val, 0.0)
    return out

def wider(a, w):
    out = output_tensor((a.shape[0], w.shape[0]), a.dtype)
    for i in range(a.shape[0]):
        for o in range(w.shape[0]):
            val = float64(0.0)
            for k in range(a.shape[1]):
                val += a[i, k] * w[o, k]
            out[i, o] = val
    return out

def argmax_rows(x):
    idx = output_tensor((x.shape[0],), "int32")
    for i in range(x.shape[0]):
        best = x[i, 0]
        k = 0
        for j in range(x.shape[1]):
            if x[i, j] > best:
                best = x[i, j]
                k = j
        idx[i] = k
    return idx
'''
A = np.random.default_rng(0).standard_normal((16, 24)).astype(np.float32)
W = np.random.default_rng(1).standard_normal((20, 24)).astype(np.float32)
X = np.random.default_rng(2).standard_normal((8, 100)).astype(np.float32)


def compiled(name, *args, **options):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return getattr(hyb.compile_source(SRC, threads=1, **options), name).compile(*args)


def test_the_rewrites_run_in_the_declared_order_each_timed_under_its_name():
    names = [rw.name for rw in rewrites.REWRITES]
    assert names == ["privatise", "accumulate", "recompute", "reuse", "argext", "guarded", "transpose"]
    assert [rw.stage for rw in rewrites.REWRITES] == names
    timed = [stage for stage, _ in compiled("matmul", A, W).timings.stages]
    assert [s for s in timed if s in names] == names


@pytest.mark.parametrize("schedule, off", [
    ("auto", {}),
    ("original", {n: 'schedule="original"' for n in ("accumulate", "recompute", "reuse", "argext", "guarded",
                                                      "transpose")}),
    ({"recompute": False}, {"recompute": "recompute is off"}),
    ({"fuse": False}, {"recompute": "fuse is off"}),
    ({"reassociate": False}, {"argext": "sums are not reassociated"}),
    ({"vectorize": False}, {"guarded": "vectorize is off"}),
    ({"tile": False}, {"transpose": "tile is False"}),
])
def test_each_gate_is_the_pipelines(schedule, off):
    opts = parse_options(schedule).resolve(host_cpu(1), False)
    for rw in rewrites.REWRITES:
        assert rw.applies_when(host_cpu(1), opts) == (rw.name not in off), rw.name
        assert rw.gate.why_not(host_cpu(1), opts) == off.get(rw.name), rw.name
    text = compiled("matmul", A, W, schedule=schedule).inspect("rewrites")
    for name, why in off.items():
        assert f"{name}: not run: {why}\n" in text


def test_only_privatise_runs_off_the_cpu():
    class Gpu:
        kind = "cuda"

    opts = parse_options("auto").resolve(host_cpu(1), False)
    assert [rw.name for rw in rewrites.REWRITES if rw.applies_when(Gpu(), opts)] == ["privatise"]


def test_applied_and_refused_with_the_reason():
    applied = compiled("matmul", A, W).inspect("rewrites")
    assert ("accumulate:\n  applied: accumulator `val` (line 6) replaced by `out[i, o]` (line 9): the sum "
            "accumulates in the stored tensor\n") in applied
    assert "privatise: nothing found\n" in applied
    refused = compiled("wider", A, W).inspect("rewrites")
    assert "accumulate:\n  refused: accumulator `val` (line 16): its dtype float64 differs from `out`'s float32\n" \
        in refused
    argext = compiled("argmax_rows", X).inspect("rewrites")
    assert "argext:\n  applied: running maximum of `best` with its first index `k`" in argext


def test_the_report_holds_the_schedules_decisions_in_order():
    for name, args in (("matmul", (A, W)), ("wider", (A, W)), ("argmax_rows", (X,))):
        ck = compiled(name, *args)
        report = ck.middle.rewrites
        decisions = report.decisions()
        assert decisions
        schedule = ck.inspect("schedule")
        assert [schedule.index(d) for d in decisions] == sorted(schedule.index(d) for d in decisions)
        for o in report.outcomes:
            assert set(o.decisions) == set(o.applied) | set(o.refused)


def test_a_driver_over_records_of_ones_own():
    seen = []

    def match(typed):
        seen.append(typed.name)
        return rewrites.Match(typed, (rewrites.Applied("one"), rewrites.Refused("two", "why", "two kept: why")))

    mine = (rewrites.Rewrite("mine", "mine", rewrites.Gate(), match),
            rewrites.Rewrite("off", "off", rewrites.Gate((rewrites.NOT_ORIGINAL,)), match))
    typed = compiled("matmul", A, W).typed
    opts = parse_options("original").resolve(host_cpu(1), False)
    stages = []

    class Timed:
        def __init__(self, stage):
            stages.append(stage)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

    out, report = rewrites.run(typed, host_cpu(1), opts, Timed, mine)
    assert out is typed and seen == [typed.name] and stages == ["mine"]
    assert report.decisions() == ("one", "two kept: why")
    assert report.describe() == 'mine:\n  applied: one\n  refused: two: why\noff: not run: schedule="original"\n'


def test_rewrite_stmts_replaces_statements_by_lists_and_goes_on_below_the_others():
    typed = compiled("matmul", A, W).typed
    out = next(n for n, t in typed.tensors.items() if t.source_name == "out")
    found = []

    def by(s, around):
        if isinstance(s, tir.Store) and s.tensor == out and not around[2:]:
            found.append(around)
            return [s, s]
        return None

    body = tir.rewrite_stmts(typed.body, by)
    assert found and all(len(a) == 2 for a in found)
    before = sum(isinstance(s, tir.Store) for s in tir.walk_stmts(typed.body))
    after = sum(isinstance(s, tir.Store) for s in tir.walk_stmts(body))
    assert after == before + len(found)
    assert tir.rewrite_stmts(typed.body, lambda s, around: None) == typed.body
