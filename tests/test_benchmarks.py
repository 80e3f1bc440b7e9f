"""The benchmark suite (benchmarks/, `python -m benchmarks`) at PolyBench's MINI size: every version
agrees before anything is timed, and the table, CSV, JSON (and chart, with matplotlib) are written.
Numba and matplotlib belong to the `bench` extra; without them their parts are skipped, not failed."""
import csv
import dataclasses
import importlib.util
import json
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/ sits beside hyb/, not in it

import benchmarks  # noqa: E402
from benchmarks import harness  # noqa: E402

HAS_NUMBA = importlib.util.find_spec("numba") is not None
HAS_MPL = importlib.util.find_spec("matplotlib") is not None
KERNELS = ("gemm", "atax", "jacobi-2d", "softmax")


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    out = tmp_path_factory.mktemp("bench")
    rc = benchmarks.main(["--size", "mini", "--kernels", ",".join(KERNELS), "--repeat", "1",
                          "--compile-repeat", "1", "--min-time", "0.001", "--out", str(out)])
    return rc, out


def test_suite_runs_and_every_version_agrees(run):
    rc, out = run
    doc = json.loads((out / "results.json").read_text())
    rows = {r["name"]: r for r in doc["kernels"]}
    assert set(rows) == set(KERNELS)
    for name, r in rows.items():
        assert r["status"] == "ok", (name, r["problems"])
        assert r["mismatch"] == [] and r["errors"] == {}, name
        assert r["time"]["hyb"] > 0 and r["compile_s"] > 0, name
        assert r["time"]["numpy"] > 0, name
        if HAS_NUMBA:
            assert r["time"]["numba"] > 0, name
        else:
            assert "numba" in r["na"], name
    assert rc == 0
    assert rows["atax"]["na"].get("numba-par") or not HAS_NUMBA  # no legal parallel loop in atax as written


def test_table_csv_and_chart_are_written(run):
    _, out = run
    md = (out / "results.md").read_text()
    for name in KERNELS:
        assert f"| {name} |" in md
    assert "Geometric mean of hyb's speedup, PolyBench kernels" in md
    assert "## Speed targets" in md
    with open(out / "results.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert [r["kernel"] for r in rows] == list(KERNELS)
    assert all(r["status"] == "ok" and float(r["hyb_s"]) > 0 and float(r["speedup_vs_numpy"]) > 0 for r in rows)
    assert (out / "speedups.png").exists() == HAS_MPL


def test_a_wrong_version_is_reported_and_marked(capsys):
    opts = harness.parse_args(["--size", "mini", "--repeat", "1", "--compile-repeat", "1", "--min-time", "0.001",
                               "--variants", "hyb,numpy"])

    def wrong(alpha, beta, C, A, B):
        C[:] = 0.5

    bench = dataclasses.replace(harness.all_benches()["gemm"], numpy=wrong)
    row = harness.run_bench(bench, opts, harness.CCompiler(Path("."), cflags=opts.cflags), "mini")
    assert row["status"] == "MISMATCH" and row["mismatch"] == ["hyb"]
    assert "MISMATCH gemm" in capsys.readouterr().err


def test_every_kernel_has_sizes_and_data():
    for b in harness.all_benches().values():
        for size in ("mini", "small", "medium", "large"):
            assert b.sizes[size], (b.name, size)
        data = b.init(b.dims("mini"))
        assert set(b.params) <= set(data) and set(b.hyb_params) <= set(data), b.name
        assert all(np.all(np.isfinite(v)) for v in data.values() if isinstance(v, np.ndarray)), b.name
    names = set(harness.all_benches())
    for required in ("gemm", "2mm", "3mm", "atax", "bicg", "mvt", "gemver", "gesummv", "syrk", "syr2k", "trmm",
                     "doitgen", "jacobi-1d", "jacobi-2d", "heat-3d", "seidel-2d", "fdtd-2d", "covariance",
                     "correlation", "lu", "cholesky", "trisolv", "floyd-warshall", "softmax", "layernorm",
                     "conv2d", "batched-matmul", "elementwise-chain"):
        assert required in names


def test_the_dense_group_is_selected_by_name():
    chosen, gemm = harness.select("dense")
    assert [b.name for b in chosen] == ["dgemm-1024", "sgemm-1000x1100x900"] and not gemm
    dims = [b.dims("medium") for b in chosen]
    assert dims == [{"NI": 1024, "NJ": 1024, "NK": 1024}, {"NI": 1000, "NJ": 1100, "NK": 900}]
    assert chosen[0].init(dims[0])["A"].dtype == np.float64 and chosen[1].init(dims[1])["A"].dtype == np.float32
    with pytest.raises(SystemExit, match="polybench, ml, dense"):
        harness.select("densest")


# ------------------------------------------------------------------ --grad: the gradient column

GRAD_KERNELS = ("gemm", "conv2d", "softmax", "layernorm", "jacobi-2d")


def test_grad_option_times_checked_gradients(tmp_path):
    rc = benchmarks.main(["--size", "mini", "--kernels", ",".join(GRAD_KERNELS), "--grad", "--variants", "hyb,numpy",
                          "--repeat", "1", "--compile-repeat", "1", "--min-time", "0.001", "--no-isolate",
                          "--out", str(tmp_path)])
    doc = json.loads((tmp_path / "results.json").read_text())
    rows = {r["name"]: r for r in doc["kernels"]}
    assert set(rows) == set(GRAD_KERNELS)
    for name, r in rows.items():
        g = r["grad"]
        assert g["status"] == "ok", (name, g["error"])
        assert g["check_mini"] is not None and g["check"] is not None, name
        assert g["time"] > 0 and g["forward"] == r["time"]["hyb"] and g["ratio"] == g["time"] / g["forward"], name
        assert "hyb-grad" not in r["time"], name
    assert rc == 0
    md = (tmp_path / "results.md").read_text()
    assert "## Gradient kernels" in md
    table = md.split("## Gradient kernels", 1)[1]
    for name in GRAD_KERNELS:
        assert f"| {name} |" in table
    with open(tmp_path / "results.csv", newline="") as f:
        assert all(float(r["grad_over_forward"]) > 0 for r in csv.DictReader(f))


def test_grad_option_reports_a_wrong_gradient(monkeypatch, capsys):
    from benchmarks import grad as gradbench

    opts = harness.parse_args(["--size", "mini", "--repeat", "1", "--compile-repeat", "1", "--min-time", "0.001",
                               "--variants", "hyb", "--grad"])
    right = gradbench.REFERENCES["softmax"]
    monkeypatch.setitem(gradbench.REFERENCES, "softmax", lambda a, d, dims: [2.0 * g for g in right(a, d, dims)])
    row = harness.run_bench(harness.all_benches()["softmax"], opts, harness.CCompiler(Path(".")), "mini")
    assert row["status"] == "ok"                      # the forward kernel is fine
    assert row["grad"]["status"] == "MISMATCH" and row["grad"]["time"] is None
    assert "gradient MISMATCH" in capsys.readouterr().err


def test_grad_option_is_passed_to_child_processes_and_off_by_default():
    assert harness.parse_args([]).grad is False
    opts = harness.parse_args(["--grad"])
    assert "--grad" in harness.child_args(opts, "gemm", Path("x.json"))
    assert "--grad" not in harness.child_args(harness.parse_args([]), "gemm", Path("x.json"))


def test_child_processes_run_numpy_without_the_blas_guards():
    opts = harness.parse_args(["--size", "mini", "--blas-threads", "default"])
    env = harness.child_env(opts, {"OPENBLAS_CORETYPE": "Haswell", "OPENBLAS_L2_SIZE": "1048576", "PATH": "/bin"})
    assert env == {"PATH": "/bin"}
    opts = harness.parse_args(["--size", "mini"])  # one BLAS thread by default
    env = harness.child_env(opts, {"OPENBLAS_CORETYPE": "Haswell"})
    assert "OPENBLAS_CORETYPE" not in env and env["OPENBLAS_NUM_THREADS"] == "1"


def test_the_blas_kernel_is_recorded(run):
    _, out = run
    doc = json.loads((out / "results.json").read_text())
    blas = doc["meta"]["blas"]
    if importlib.util.find_spec("threadpoolctl") is None:
        assert blas == "unknown (pip install threadpoolctl to record it)"
    else:
        assert " kernel, threads: " in blas, blas
    assert f"BLAS: {blas}" in (out / "results.md").read_text()
