"""The spellings benchmark (benchmarks/spellings.py, `python -m benchmarks spellings`): every spelling of
every kernel computes what its NumPy reference computes, at tiny sizes; the group is selected by
`python -m benchmarks spellings` and by `--kernels spellings`; its table is written."""
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/ sits beside hyb/, not in it

import benchmarks  # noqa: E402
from benchmarks import spellings as S  # noqa: E402

CASES = [(k.name, sp.name) for k in S.KERNELS.values() for sp in k.spellings]


@pytest.mark.parametrize("kernel,spelling", CASES, ids=[f"{k}: {s}" for k, s in CASES])
def test_every_spelling_agrees_with_numpy(kernel, spelling):
    k = S.KERNELS[kernel]
    sp = next(s for s in k.spellings if s.name == spelling)
    data = S.make_data(k, "tiny", seed=1)
    args = S.hyb_args(k, sp, data)
    got = S.outputs(S.compile_spelling(k, sp, args)(*args))
    ok, err = S.check(k, got, k.reference(data))
    assert ok, f"{kernel}, {spelling}: largest error {err:.3g}"


def test_each_kernel_has_spellings_that_differ():
    for k in S.KERNELS.values():
        sources = [sp.source for sp in k.spellings if not sp.float32_scalars]
        assert len(sources) >= 2 and len(set(sources)) == len(sources), k.name


def test_the_peers_functions_agree_with_the_reference():
    fns = S.numpy_functions()
    for k in S.KERNELS.values():
        data = S.make_data(k, "tiny", seed=2)
        ok, err = S.check(k, S.outputs(fns[k.name](*[data[p] for p in k.params])), k.reference(data))
        assert ok, (k.name, err)


def test_the_group_runs_and_writes_its_table(tmp_path, monkeypatch):
    ran = []

    def fake_hyb(kernel, opts, log):
        ran.append((kernel.name, opts.size, opts.peers))
        rows = [{"kernel": kernel.name, "spelling": sp.name, "status": "ok", "time": 0.001 * (n + 1), "runs": 3,
                 "compile_s": 0.1, "check": 0.0, "error": None, "vs_fastest": float(n + 1)}
                for n, sp in enumerate(kernel.spellings)]
        rows[-1].update(status="MISMATCH", time=None, vs_fastest=None, error="differs")
        return rows

    monkeypatch.setattr(S, "run_hyb", fake_hyb)
    rc = benchmarks.main(["spellings", "--kernels", "softmax", "--peers", "none", "--out", str(tmp_path)])
    assert rc == 1 and ran == [("softmax", "bench", [])]  # (the MISMATCH row)
    md = (tmp_path / "spellings.md").read_text()
    assert md.startswith("## Spellings") and "| softmax (2048×1024) | m = x[i, 0], max(); s = float32(0.0) | 1 | 1.00× |" in md
    assert "**MISMATCH**" in md


def test_a_slow_version_is_timed_by_its_budget(monkeypatch):
    t = S.Timed(lambda: None, [], [], [])
    clock = iter(np.arange(0.0, 100.0, 0.5))  # each run takes 0.5 s
    monkeypatch.setattr(S.time, "perf_counter", lambda: next(clock))
    S.time_versions({"slow": t}, repeat=9, budget=1.2)
    assert t.samples == [0.5, 0.5]
