"""The forward PyTorch and JAX peers of the ML kernels (benchmarks/ml_peers.py: the variants torch,
torch-compile and jax) and the busy-neighbour measurement (benchmarks/load.py, `--load`).

torch and jax belong to the `bench` extra: the tests that run them skip without them; nothing here
times torch.compile (its cold compile takes seconds per kernel)."""
import importlib.util
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/ sits beside hyb/, not in it

from benchmarks import harness, load, ml_peers, report  # noqa: E402
from benchmarks.peers import DEFAULT_VARIANTS, ML_PEERS, VARIANTS  # noqa: E402

ML = [b for b in harness.all_benches().values() if b.group == "ml"]


def test_every_ml_kernel_has_peers():
    assert {b.name for b in ML} == set(ml_peers.KERNELS)
    assert set(ML_PEERS) <= set(VARIANTS) and set(ML_PEERS) <= set(DEFAULT_VARIANTS)


def _outputs_agree(fns, convert, name_of_call):
    for b in ML:
        dims = b.dims("mini")
        pristine = b.init(dims)
        arrays, consts = ml_peers.inputs_of(b, pristine)
        got = name_of_call(fns[b.name], consts, arrays)
        assert len(got) == len(b.outputs), b.name
        ok, err = report.agrees([convert(g) for g in got], ml_peers.reference(b, pristine), b.rtol, b.atol)
        assert ok, (b.name, err)


def test_torch_functions_compute_the_kernels():
    torch = pytest.importorskip("torch")
    fns = ml_peers.torch_functions()
    assert set(fns) == set(ml_peers.KERNELS)
    _outputs_agree(fns, lambda t: t.numpy(), lambda f, c, xs: f(c, *[torch.from_numpy(x) for x in xs]))
    b = harness.all_benches()["bias-silu-t"]
    x = b.init(b.dims("mini"))
    y = fns["bias-silu-t"]({}, torch.from_numpy(x["x"]), torch.from_numpy(x["b"]))[0]
    assert y.is_contiguous()  # the transposition is done, not left to a view


def test_jax_functions_compute_the_kernels():
    jax = pytest.importorskip("jax")
    fns = ml_peers.jax_functions()
    assert set(fns) == set(ml_peers.KERNELS)
    _outputs_agree(fns, np.asarray, lambda f, c, xs: jax.jit(lambda *a: f(c, *a))(*xs))


# ------------------------------------------------------------------ options and the harness

def test_options_and_child_arguments():
    opts = harness.parse_args([])
    assert set(ML_PEERS) <= set(opts.variants) and opts.load is False and opts.load_seconds == 1.0
    assert "--load" not in harness.child_args(opts, "softmax", Path("x.json"))
    opts = harness.parse_args(["--variants", "hyb,torch,jax", "--load", "--load-seconds", "0.5", "--hyb-threads", "2"])
    assert opts.variants == ["hyb", "torch", "jax"] and opts.load and opts.load_seconds == 0.5
    a = harness.child_args(opts, "softmax", Path("x.json"))
    assert "--load" in a and "--load-seconds=0.5" in a and "--variants=hyb,torch,jax" in a and "--hyb-threads=2" in a
    with pytest.raises(SystemExit):
        harness.parse_args(["--variants", "hyb,tensorflow"])


def test_peers_not_installed_are_not_available_and_only_for_ml_kernels(tmp_path, monkeypatch):
    monkeypatch.setattr(ml_peers, "installed", lambda framework: False)
    opts = harness.parse_args(["--size", "mini", "--repeat", "1", "--compile-repeat", "1", "--min-time", "0.001",
                               "--variants", "hyb,numpy,torch,torch-compile,jax"])
    cc = harness.CCompiler(tmp_path)
    row = harness.run_bench(harness.all_benches()["softmax"], opts, cc, "mini")
    assert row["status"] == "ok" and row["errors"] == {} and row["mismatch"] == []
    assert set(row["na"]) == set(ML_PEERS) and "not installed" in row["na"]["torch"]
    assert row["ml_peers"]["jax"]["status"] == "n/a" and not set(row["time"]) & set(ML_PEERS)
    gemm = harness.run_bench(harness.all_benches()["gemm"], opts, cc, "mini")
    assert "ml_peers" not in gemm and not set(gemm["na"]) & set(ML_PEERS)
    md = report.markdown({**_meta(), "variants": opts.variants}, [row, gemm], None)
    line = next(x for x in md.splitlines() if x.startswith("| gemm |"))
    assert line.count(" — ") >= 5 and " n/a " not in line  # the PyTorch and JAX columns of a PolyBench kernel


def test_record_puts_each_outcome_in_its_place():
    row = harness.new_row(harness.all_benches()["gelu"], "mini")
    ml_peers.record(row, {"torch": ml_peers.new_peer(time=2e-3, check=1e-7, compile_s=0.1, samples=5),
                          "torch-compile": ml_peers.new_peer("MISMATCH", check=0.5, error="outputs differ"),
                          "jax": ml_peers.new_peer("ERROR", error="the jax process failed")})
    assert row["time"] == {"torch": 2e-3} and row["check"] == {"torch": 1e-7, "torch-compile": 0.5}
    assert row["mismatch"] == ["torch-compile"] and row["errors"] == {"jax": "the jax process failed"}
    assert report.cell(row, "torch-compile") == "**MISMATCH**" and report.cell(row, "jax") == "error"


@pytest.mark.skipif(importlib.util.find_spec("torch") is None or importlib.util.find_spec("jax") is None,
                    reason="needs torch and jax")
def test_peers_run_checked_in_child_processes_on_one_thread():
    opts = harness.parse_args(["--size", "mini", "--repeat", "1", "--min-time", "0.001", "--budget", "1"])
    bench = harness.all_benches()["max-pool"]
    dims = bench.dims("mini")
    pristine = bench.init(dims)
    res = ml_peers.run(bench, opts, dims, pristine, 1, ["torch", "jax"])
    assert set(res) == {"torch", "jax"}
    for peer, r in res.items():
        assert r["status"] == "ok" and r["time"] > 0 and r["check"] == 0.0, (peer, r)
        assert r["threads"] == 1 and r["cpu_per_wall"] < 1.5, (peer, r)
    assert "set_num_threads(1)" in res["torch"]["thread_setting"]
    assert "xla_cpu_multi_thread_eigen=false" in res["jax"]["thread_setting"]
    wrong = [o + 1 for o in ml_peers.reference(bench, pristine)]
    r = ml_peers.run(bench, opts, dims, pristine, 1, ["jax"], ref=wrong)["jax"]
    assert r["status"] == "MISMATCH" and r["time"] is None and r["check"] > 0


# ------------------------------------------------------------------ the report

def _meta(**kw):
    meta = {"size": "medium", "date": "2026-01-01", "cpu": "cpu", "cores": 2, "commit": "abc", "python": "3",
            "numpy": "2", "numba": "0", "llvmlite": "0", "cc_version": "gcc", "cc": "gcc", "cflags": "-O3",
            "fastmath": False, "schedule": None, "hyb_threads": 1, "threads": 2, "repeat": 1, "compile_repeat": 1,
            "variants": ["hyb", "numpy", "torch", "torch-compile", "jax"], "ml_peers": list(ML_PEERS),
            "frameworks": {"torch": "2.13.0+cpu", "jax": "0.10.2", "jaxlib": "0.10.2"}, "load_seconds": 1.0}
    meta.update(kw)
    return meta


def _row(name, hyb, eager, compiled, jax, status="ok", load_ratio=None):
    peers = {"torch": (eager, 0.0), "torch-compile": (compiled, 8.0), "jax": (jax, 0.2)}
    row = {"name": name, "group": "ml", "size": "medium", "dims": "N=1", "status": status, "compile_s": 0.1,
           "time": {"hyb": hyb, "numpy": 2 * hyb}, "samples": {}, "first_call_s": {}, "errors": {}, "na": {},
           "check": {}, "mismatch": [], "problems": [], "notes": [], "reference": "numpy", "modes": False}
    ml_peers.record(row, {p: ml_peers.new_peer(time=t, compile_s=c, check=0.0, cpu_per_wall=1.0,
                                               thread_setting="one thread") for p, (t, c) in peers.items()})
    if load_ratio:
        row["load"] = {"neighbours": 2, "neighbours_alive": 2, "idle_median": hyb, "idle_p95": hyb,
                       "loaded_median": hyb, "loaded_p95": hyb * load_ratio, "ratio": load_ratio,
                       "idle_samples": 100, "loaded_samples": 100, "error": None}
    return row


def test_report_of_the_peers_and_their_targets():
    fast = _row("gelu", 1e-3, 4e-3, 2e-3, 1.5e-3, load_ratio=1.2)   # 2x torch.compile, 1.5x JAX
    slow = _row("conv2d", 1e-3, 1e-3, 0.8e-3, 0.9e-3, load_ratio=4.0)
    md = report.markdown(_meta(), [fast, slow], None)
    head = next(x for x in md.splitlines() if x.startswith("| kernel | dims | check | hyb compile s"))
    assert "| vs torch.compile | vs JAX |" in head and "torch eager ms" in head
    # (no second-shape compile in this row: "—")
    assert "| gelu | N=1 | ok | 0.100 | — | 1.00 | 2.00 | 4.00 | 2.00 | 1.50 | 2.00× | 2.00× | 1.50× |" in md
    s = report.summary([fast, slow], "ml")
    assert s["torch-compile"] == pytest.approx((2.0 * 0.8) ** 0.5) and s["jax_n"] == 2
    assert "vs torch.compile 1.26× (n=2), vs JAX 1.16× (n=2)" in md
    assert "## ML kernels against PyTorch and JAX" in md and "versions: torch 2.13.0+cpu" in md
    assert "torch 2.13.0+cpu, jax 0.10.2" in md.split("\n- hyb options")[0]  # in the header
    got = {what: (text, met) for what, text, met in report.targets([fast, slow], None, _meta())}
    every = got["every ML kernel, one thread, default mode: hyb ≥ 1× torch.compile"]
    assert every[1] is False and "conv2d 0.80×" in every[0]
    assert got["ML geomean, one thread, default mode: hyb ≥ 1.3× torch.compile"][1] is False
    assert got["ML geomean, one thread, default mode: hyb ≥ 1× JAX"][1] is True
    assert got["ML geomean, one thread, fast-math: hyb ≥ 1.5× torch.compile"] == ("not judged (a default run)", None)
    # the busy neighbour: its table and target
    assert "## hyb beside a busy neighbour" in md and "| conv2d | N=1 | 1.00 | 1.00 | 4.00 | 4.00× | 100, 100 |" in md
    neighbour = got["busy neighbour on every CPU: hyb's p95 ≤ 3× its idle median, every kernel"]
    assert neighbour[1] is False and "missed by conv2d 4.00×" in neighbour[0]
    # fast-math on one thread judges the fast-math target; two threads judge none
    got = {what: met for what, _, met in report.targets([fast, slow], None, _meta(fastmath=True))}
    assert got["ML geomean, one thread, fast-math: hyb ≥ 1.5× torch.compile"] is False
    got = {what: text for what, text, _ in report.targets([fast], None, _meta(hyb_threads=2))}
    assert got["ML geomean, one thread, default mode: hyb ≥ 1× JAX"] == "not judged (hyb and its peers on 2 threads)"


# ------------------------------------------------------------------ the busy neighbour

def _alive(pid: int) -> bool:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    return "\nState:\tZ" not in status


def test_neighbours_are_killed_also_on_an_error():
    with pytest.raises(RuntimeError):
        with load.Neighbours(2) as nb:
            pids = [p.pid for p in nb.procs]
            assert nb.running() == 2
            raise RuntimeError("a kernel failed")
    assert not any(_alive(pid) for pid in pids)


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads /proc")
def test_a_neighbour_stops_when_its_parent_dies():
    code = ("import os, sys; sys.path.insert(0, sys.argv[1]); from benchmarks import load\n"
            "nb = load.Neighbours(1).__enter__(); print(nb.procs[0].pid, flush=True); os._exit(0)\n")
    out = subprocess.run([sys.executable, "-c", code, str(Path(__file__).resolve().parents[1])], capture_output=True,
                         text=True, timeout=60)
    pid = int(out.stdout.split()[0])
    deadline = time.monotonic() + 10
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    alive = _alive(pid)
    if alive:
        os.kill(pid, 9)
    assert not alive


def test_measure_reports_idle_and_loaded_calls():
    class Calls:
        def reset(self, _pristine):
            pass

        def call(self):
            sum(range(200))

    res = load.measure(Calls(), {}, seconds=0.05, neighbours=1)
    assert res["neighbours"] == 1 and res["neighbours_alive"] == 1
    assert res["idle_samples"] >= load.LEAST_SAMPLES and res["loaded_samples"] >= load.LEAST_SAMPLES
    assert 0 < res["idle_median"] <= res["idle_p95"] and res["loaded_median"] <= res["loaded_p95"]
    assert res["ratio"] == res["loaded_p95"] / res["idle_median"]
    assert load.p95(list(range(101))) == 95
