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
from benchmarks.peers import DEFAULT_VARIANTS, ML_PEERS  # noqa: E402

HAS_NUMBA = importlib.util.find_spec("numba") is not None
HAS_MPL = importlib.util.find_spec("matplotlib") is not None
KERNELS = ("gemm", "atax", "jacobi-2d", "softmax")


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    out = tmp_path_factory.mktemp("bench")
    # the default versions but the PyTorch and JAX peers (tests/test_bench_peers.py has theirs)
    variants = ",".join(v for v in DEFAULT_VARIANTS if v not in ML_PEERS)
    rc = benchmarks.main(["--size", "mini", "--kernels", ",".join(KERNELS), "--repeat", "1", "--variants", variants,
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
    # hyb's IEEE and reassociating modes run for the row kernels only, and are not "n/a" elsewhere
    assert rows["softmax"]["time"]["hyb-ieee"] > 0 and rows["softmax"]["time"]["hyb-reassoc"] > 0
    for name in ("gemm", "atax", "jacobi-2d"):
        assert not set(rows[name]["time"]) & {"hyb-ieee", "hyb-reassoc"}, name
        assert not set(rows[name]["na"]) & {"hyb-ieee", "hyb-reassoc"}, name


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


def test_the_cold_and_second_shape_compile_times_are_written(run):
    _, out = run
    doc = json.loads((out / "results.json").read_text())
    rows = {r["name"]: r for r in doc["kernels"]}
    for name, r in rows.items():
        # the same kernel compiled again for the arrays of the next size: shape-generic code, or that shape
        assert r["second_compile_s"] > 0 and isinstance(r["second_generic"], bool), name
        assert r["second_shape"].startswith("small: "), (name, r["second_shape"])
        stages = [stage for stage, _ in r["compile_stages"]]  # the cold compile, stage by stage
        assert {"check", "extract", "dependences", "plan", "LLVM optimisation"} <= set(stages), (name, stages)
        assert all(seconds >= 0 for _, seconds in r["compile_stages"]), name
    mini = harness.all_benches()["jacobi-2d"].dims("mini")
    assert f"TSTEPS={mini['TSTEPS']}" in rows["jacobi-2d"]["second_shape"]  # a constant of its text, kept
    s = doc["geomean"]["polybench"]
    assert s["second_compile_n"] == 3
    assert s["second_compile_max_s"] == max(rows[n]["second_compile_s"] for n in ("gemm", "atax", "jacobi-2d"))
    assert s["second_compile_median_s"] == rows[sorted(("gemm", "atax", "jacobi-2d"),
                                                     key=lambda n: rows[n]["second_compile_s"])[1]]["second_compile_s"]
    md = (out / "results.md").read_text()
    assert "| kernel | dims | check | hyb compile s | hyb 2nd shape compile s |" in md
    assert "second-shape compile median" in md and "(n=3)" in md
    with open(out / "results.csv", newline="") as f:
        assert all(float(r["hyb_second_shape_compile_s"]) > 0 for r in csv.DictReader(f))


def test_the_compile_summary_and_the_mark_of_a_shape_compiled_on_its_own():
    from benchmarks import report

    rows = []
    for name, cold, second, generic in (("gemm", 0.2, 0.5, True), ("atax", 0.4, 0.25, False),
                                         ("bicg", 0.3, 0.75, True), ("mvt", 0.1, None, None)):
        r = harness.new_row(harness.all_benches()[name], "mini")
        r.update(compile_s=cold, second_compile_s=second, second_generic=generic)
        rows.append(r)
    s = report.summary(rows, "polybench")
    assert (s["compile_median_s"], s["compile_max_s"]) == (0.25, 0.4)
    assert (s["second_compile_median_s"], s["second_compile_max_s"], s["second_compile_n"]) == (0.5, 0.75, 3)
    assert [report.second_cell(r) for r in rows] == ["0.500", "0.250 †", "0.750", "—"]


def test_the_second_shape_is_the_next_size_with_the_kernel_texts_constants_kept():
    b = harness.all_benches()["jacobi-2d"]
    for size, other in (("mini", "small"), ("medium", "small"), ("small", "mini")):
        dims = b.dims(size)
        name, dims2, data = harness.second_shape(b, size, dims, b.init(dims))
        assert name == other and dims2["TSTEPS"] == dims["TSTEPS"] and dims2["N"] == b.dims(other)["N"]
        assert harness._shapes(b, data) != harness._shapes(b, b.init(dims))


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
                     "conv2d", "batched-matmul", "elementwise-chain", "gelu", "silu-chain", "rmsnorm",
                     "log-softmax", "lstm-cell", "quantize-int8"):
        assert required in names


def test_the_dense_group_is_selected_by_name():
    chosen, gemm = harness.select("dense")
    assert [b.name for b in chosen] == ["dgemm-1024", "sgemm-1000x1100x900"] and not gemm
    dims = [b.dims("medium") for b in chosen]
    assert dims == [{"NI": 1024, "NJ": 1024, "NK": 1024}, {"NI": 1000, "NJ": 1100, "NK": 900}]
    assert chosen[0].init(dims[0])["A"].dtype == np.float64 and chosen[1].init(dims[1])["A"].dtype == np.float32
    with pytest.raises(SystemExit, match="polybench, ml, dense"):
        harness.select("densest")


# ------------------------------------------------------------------ elementwise and row kernels

ROW_KERNELS = ("gelu", "silu-chain", "rmsnorm", "log-softmax", "lstm-cell", "quantize-int8")
MORE_ROW_KERNELS = ("argmax-rows", "bias-silu-t", "add-rmsnorm", "topk-rows")  # benchmarks/ml_more.py


def test_the_rows_group_is_the_elementwise_and_row_kernels():
    chosen, gemm = harness.select("rows")
    names = [b.name for b in chosen]
    assert set(ROW_KERNELS) | {"softmax", "layernorm", "elementwise-chain"} | set(MORE_ROW_KERNELS) == set(names)
    assert not gemm
    for b in chosen:
        assert b.group == "ml" and b.hyb_modes, b.name
        assert b.dims("medium") in ({"N": 2048, "D": 1024}, {"N": 2048, "M": 1024}, {"N": 2048, "H": 1024},
                                    {"N": 4096, "D": 512}), b.name


@pytest.mark.parametrize("size", ["mini", "small"])
def test_row_kernels_plain_loops_agree_with_numpy(size):
    """The loops Numba compiles, run as plain Python (cheap at these sizes), against the NumPy peer:
    what the benchmark times under Numba computes what the others compute."""
    from benchmarks.report import agrees

    for name in ROW_KERNELS:
        b = harness.all_benches()[name]
        dims = b.dims(size)
        if size == "small":  # the plain-Python loops are slow: a few rows of the small size
            dims = {**dims, "N": 3}
        got, ref = b.init(dims), b.init(dims)
        b.loops(*[got[p] for p in b.params])
        b.numpy(*[ref[p] for p in b.params])
        ok, err = agrees([got[o] for o in b.outputs], [ref[o] for o in b.outputs], b.rtol, b.atol)
        assert ok, (name, size, err)


def test_row_kernels_run_in_every_hyb_mode_and_agree(tmp_path):
    rc = benchmarks.main(["--size", "mini", "--kernels", ",".join(ROW_KERNELS), "--no-isolate",
                          "--variants", "hyb,hyb-ieee,hyb-reassoc,numpy", "--repeat", "1", "--compile-repeat", "1",
                          "--min-time", "0.001", "--out", str(tmp_path)])
    doc = json.loads((tmp_path / "results.json").read_text())
    rows = {r["name"]: r for r in doc["kernels"]}
    assert list(rows) == list(ROW_KERNELS)
    for name, r in rows.items():
        assert r["status"] == "ok" and r["mismatch"] == [] and r["errors"] == {}, (name, r["problems"])
        assert all(r["time"][v] > 0 for v in ("hyb", "hyb-ieee", "hyb-reassoc", "numpy")), name
    assert rc == 0
    q = harness.all_benches()["quantize-int8"].init(harness.all_benches()["quantize-int8"].dims("mini"))
    assert q["q"].dtype == np.int8 and np.abs(q["x"] / q["scale"][:, None]).max() > 127  # the clip is exercised
    md = (tmp_path / "results.md").read_text()
    table = md.split("## Elementwise and row kernels", 1)[1].split("## Speed targets", 1)[0]
    for name in ROW_KERNELS:
        assert f"| {name} |" in table
    assert "| lstm-cell |" in table and "no target |" in table
    targets = {t["target"]: t for t in doc["targets"]}
    assert "gelu, one thread, fast-math: hyb ≥ 1.5× Numba" in targets  # Numba was not run: not measured
    assert targets["gelu, one thread, fast-math: hyb ≥ 1.5× Numba"]["met"] is None
    assert targets["silu-chain, one thread, fast-math: hyb ≥ 2× NumPy"]["met"] in (True, False)


def _row(name, hyb, numba, numpy):
    return {"name": name, "group": "ml", "status": "ok", "dims": "N=1 D=1", "modes": True, "mismatch": [],
            "errors": {}, "na": {}, "time": {"hyb": hyb, "numba": numba, "numpy": numpy}}


def test_row_targets_are_judged_per_kernel_and_only_for_one_fast_math_thread():
    from benchmarks import report

    meta = {"fastmath": True, "hyb_threads": 1}
    assert report.row_verdict(_row("gelu", 1.0, 1.6, 1.0), meta) == ("met", True)
    text, met = report.row_verdict(_row("silu-chain", 1.0, 2.0, 1.9), meta)
    assert met is False and "NumPy 1.90× < 2×" in text and "Numba" not in text
    assert report.row_verdict(_row("lstm-cell", 1.0, 0.1, 0.1), meta) == ("no target", None)
    text, met = report.row_verdict(_row("rmsnorm", 1.0, 9.0, 9.0), {"fastmath": False, "hyb_threads": 1})
    assert met is None and "without fast-math" in text
    got = {what: met for what, _, met in report.targets([_row("softmax", 1.0, 1.4, 3.0)], None, meta)}
    assert got == {"softmax, one thread, fast-math: hyb ≥ 1.5× Numba": False,
                   "softmax, one thread, fast-math: hyb ≥ 1× NumPy": True}


# ------------------------------------------------------------------ --grad: the gradient column

GRAD_KERNELS = ("gemm", "conv2d", "softmax", "layernorm", "jacobi-2d")


def test_grad_option_times_checked_gradients(tmp_path, monkeypatch):
    from benchmarks import grad_peers

    # PyTorch and JAX as if not installed: their peers are reported as not available, without a child process
    monkeypatch.setattr(grad_peers, "installed", lambda framework: False)
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
        assert set(g["peers"]) == {"torch", "torch-compile", "jax"}, name
        assert all(p["status"] == "n/a" and p["time"] is None for p in g["peers"].values()), name
        assert "download.pytorch.org/whl/cpu" in g["peers"]["torch"]["error"]
        assert g["vs"] == {}, name
    assert rc == 0  # peers that are not installed do not fail the run
    md = (tmp_path / "results.md").read_text()
    assert "## Gradient kernels" in md
    table = md.split("## Gradient kernels", 1)[1]
    for name in GRAD_KERNELS:
        assert f"| {name} |" in table
        row = next(line for line in table.splitlines() if line.startswith(f"| {name} |"))
        assert row.count(" n/a ") == 3 and "| — | — | — |" in row, row  # three peers, no ratios
    assert "torch eager not run: torch is not installed" in table and "JAX not run: jax is not installed" in table
    assert doc["grad"]["kernels"] == len(GRAD_KERNELS) and doc["grad"]["torch_n"] == 0 and doc["grad"]["jax"] is None
    targets = {t["target"]: t for t in doc["targets"]}
    assert targets["gradient geomean ≥ 1.2× torch.compile"]["met"] is None
    assert targets["gradient ≤ 2.5× its forward, every gradient kernel"]["met"] in (True, False)
    with open(tmp_path / "results.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert all(float(r["grad_over_forward"]) > 0 and r["grad_torch_s"] == "" for r in rows)


def test_grad_option_reports_a_wrong_gradient(monkeypatch, capsys):
    from benchmarks import grad as gradbench

    opts = harness.parse_args(["--size", "mini", "--repeat", "1", "--compile-repeat", "1", "--min-time", "0.001",
                               "--variants", "hyb", "--grad", "--grad-peers", "none"])
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
    assert "--grad-peers=torch,torch-compile,jax" in harness.child_args(opts, "gemm", Path("x.json"))
    assert "--grad" not in harness.child_args(harness.parse_args([]), "gemm", Path("x.json"))
    opts = harness.parse_args(["--grad", "--grad-peers", "none"])
    assert opts.grad_peers == [] and "--grad-peers=none" in harness.child_args(opts, "gemm", Path("x.json"))
    assert harness.parse_args(["--grad-peers", "jax,torch"]).grad_peers == ["torch", "jax"]
    with pytest.raises(SystemExit):
        harness.parse_args(["--grad-peers", "tensorflow"])


# the gradient kernels of --grad: NumPy reference gradients, and the PyTorch and JAX peers

ALL_GRAD_KERNELS = ("softmax", "log-softmax", "layernorm", "rmsnorm", "gelu", "silu-chain", "conv2d", "gemm",
                    "attention", "max-pool", "jacobi-2d")


def test_the_gradient_kernels():
    from benchmarks import grad as gradbench

    assert gradbench.GRAD_KERNELS == ALL_GRAD_KERNELS and set(gradbench.REFERENCES) == set(ALL_GRAD_KERNELS)
    assert gradbench.TARGET_RATIO == 2.5


def _float64_data(bench, dims):
    return {k: (v.astype(np.float64) if isinstance(v, np.ndarray) and v.dtype.kind == "f" else v)
            for k, v in bench.init(dims).items()}


@pytest.mark.parametrize("name", ALL_GRAD_KERNELS)
def test_reference_gradients_agree_with_finite_differences(name):
    """The NumPy peer run in float64 is the forward function; the reference's directional derivative
    along a random direction of each input matches a central difference of sum(out * dout)."""
    from benchmarks import grad as gradbench

    bench = harness.all_benches()[name]
    dims = bench.dims("mini")
    data = _float64_data(bench, dims)

    def outputs(values):
        bufs = {k: (v.copy() if isinstance(v, np.ndarray) else v) for k, v in values.items()}
        bench.numpy(*[bufs[p] for p in bench.params])
        return [bufs[o] for o in bench.outputs]

    outs = outputs(data)
    rng = np.random.default_rng(7)
    douts = [rng.standard_normal(o.shape) for o in outs]
    ref = gradbench.reference_grads(bench, {p: data[p] for p in bench.hyb_params}, douts, dims)
    assert len(ref) == len(bench.hyb_params)

    def loss(values):
        return sum(float((o * d).sum()) for o, d in zip(outputs(values), douts) if o.dtype.kind == "f")

    h = 1e-6
    for param, grad in zip(bench.hyb_params, ref):
        if grad is None:
            assert not isinstance(data[param], np.ndarray), (name, param)
            continue
        v = rng.standard_normal(data[param].shape)
        fd = (loss({**data, param: data[param] + h * v}) - loss({**data, param: data[param] - h * v})) / (2 * h)
        assert abs(fd - float((grad * v).sum())) <= 1e-5 * max(1.0, abs(fd)), (name, param)


def _peer_case(name):
    from benchmarks import grad as gradbench
    from benchmarks import grad_peers

    bench = harness.all_benches()[name]
    dims = bench.dims("mini")
    pristine = bench.init(dims)
    arrays, consts, float_outs = grad_peers.inputs_of(bench, dims, pristine)
    douts = gradbench.make_douts([pristine[o] for o in bench.outputs])
    ref = gradbench.reference_grads(bench, {p: pristine[p] for p in bench.hyb_params}, douts, dims)
    ref = [r for p, r in zip(bench.hyb_params, ref) if p in arrays]
    return bench, list(arrays.values()), consts, [douts[k] for k in float_outs], ref


def test_torch_peers_compute_the_reference_gradients():
    """Each kernel's PyTorch function, under eager autograd, gives the NumPy reference gradients."""
    torch = pytest.importorskip("torch")
    from benchmarks import grad as gradbench
    from benchmarks import grad_peers
    from benchmarks.report import agrees

    fns, _ = grad_peers.torch_functions()
    for name in ALL_GRAD_KERNELS:
        bench, arrays, consts, douts, ref = _peer_case(name)
        leaves = [torch.from_numpy(a).requires_grad_() for a in arrays]
        got = torch.autograd.grad(fns[name](consts, *leaves), leaves, [torch.from_numpy(d) for d in douts])
        assert all(g.dtype == leaf.dtype for g, leaf in zip(got, leaves)), name
        ok, err = agrees([g.numpy() for g in got], ref, *gradbench.grad_tolerance(bench))
        assert ok, (name, err)


def test_jax_peers_compute_the_reference_gradients():
    """The JAX functions of the kernels added with the peers, and of gemm (float64), under jit(vjp)."""
    jax = pytest.importorskip("jax")
    from benchmarks import grad as gradbench
    from benchmarks import grad_peers
    from benchmarks.report import agrees

    fns = grad_peers.jax_functions()
    with jax.enable_x64(True):  # gemm is a float64 kernel
        for name in ("log-softmax", "rmsnorm", "gelu", "silu-chain", "attention", "max-pool", "gemm"):
            bench, arrays, consts, douts, ref = _peer_case(name)

            def grads(xs, ds, f=fns[name], consts=consts):
                return jax.vjp(lambda *x: f(consts, *x), *xs, has_aux=True)[1](ds)

            got = jax.jit(grads)(tuple(arrays), tuple(douts))
            assert all(g.dtype == a.dtype for g, a in zip(got, arrays)), name
            ok, err = agrees([np.asarray(g) for g in got], ref, *gradbench.grad_tolerance(bench))
            assert ok, (name, err)


@pytest.mark.skipif(importlib.util.find_spec("torch") is None or importlib.util.find_spec("jax") is None,
                    reason="needs torch and jax")
def test_gradient_peers_run_in_child_processes_on_one_thread():
    """The max pool's eager PyTorch and JAX peers in their child processes: checked, timed, on one thread."""
    from benchmarks import grad_peers

    opts = harness.parse_args(["--size", "mini", "--repeat", "1", "--min-time", "0.001", "--budget", "1"])
    bench = harness.all_benches()["max-pool"]
    dims = bench.dims("mini")
    res = grad_peers.run(bench, opts, dims, bench.init(dims), 1, ["torch", "jax"])
    assert set(res) == {"torch", "jax"}
    for peer, r in res.items():
        assert r["status"] == "ok" and r["time"] > 0 and r["check"] == 0.0, (peer, r)
        assert r["threads"] == 1 and r["version"]
        assert r["cpu_per_wall"] < 1.5, (peer, r["cpu_per_wall"])  # one core busy, not two
    assert "set_num_threads(1)" in res["torch"]["thread_setting"]
    assert "xla_cpu_multi_thread_eigen=false" in res["jax"]["thread_setting"]


def test_the_max_pool_forward_agrees_with_its_peers(tmp_path):
    """hyb's max pool (values and int32 argmax) against NumPy and C, and the loops against NumPy."""
    from benchmarks.report import agrees

    opts = harness.parse_args(["--size", "mini", "--repeat", "1", "--compile-repeat", "1", "--min-time", "0.001",
                               "--variants", "hyb,numpy,c"])
    bench = harness.all_benches()["max-pool"]
    row = harness.run_bench(bench, opts, harness.CCompiler(tmp_path, cflags=opts.cflags), "mini")
    assert row["status"] == "ok" and row["reference"] == "numpy", row["problems"]
    assert row["check"]["hyb"] == 0.0 and row["check"].get("c", 0.0) == 0.0
    dims = bench.dims("mini")
    got, ref = bench.init(dims), bench.init(dims)
    bench.loops(*[got[p] for p in bench.params])
    bench.numpy(*[ref[p] for p in bench.params])
    assert ref["arg"].dtype == np.int32 and len(np.unique(ref["arg"] % 2 + 2 * ((ref["arg"] // dims["W"]) % 2))) == 4
    assert agrees([got[o] for o in bench.outputs], [ref[o] for o in bench.outputs], 0, 0)[0]
    # no ties inside a window: the four values of each differ by at least 1/16
    x = ref["x"][:, :, :dims["H"] // 2 * 2, :dims["W"] // 2 * 2]
    win = x.reshape(*x.shape[:2], dims["H"] // 2, 2, dims["W"] // 2, 2).transpose(0, 1, 2, 4, 3, 5)
    assert np.diff(np.sort(win.reshape(*win.shape[:4], 4), axis=-1), axis=-1).min() > 0.06


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


def test_the_call_overhead_row(tmp_path, capsys):
    from benchmarks import call_overhead

    assert harness.select("calls") == ([], False)  # not a kernel of the suite: main() runs the module
    assert call_overhead.main(["--repeat", "3", "--sizes", "4,100", "--out", str(tmp_path)]) == 0
    doc = json.loads((tmp_path / "calls.json").read_text())
    assert doc["sizes"] == [4, 100]
    expected = {"hyb", "hyb-python", "numpy"} | ({"numba"} if HAS_NUMBA else set())
    assert set(doc["times"]) == expected and all(t > 0 for ts in doc["times"].values() for t in ts)
    md = (tmp_path / "calls.md").read_text()
    assert "| 4 |" in md and "| 100 |" in md and md in capsys.readouterr().out


def _grad_row(name, forward, grad, eager=None, compiled=None, jax=None, status="ok"):
    peers = {p: {"status": "ok", "time": t} if t else {"status": "n/a", "time": None, "error": "not installed"}
             for p, t in (("torch", eager), ("torch-compile", compiled), ("jax", jax))}
    return {"name": name, "group": "ml", "status": "ok", "dims": "N=1", "modes": False, "mismatch": [], "errors": {},
            "na": {}, "time": {"hyb": forward}, "notes": [], "problems": [],
            "grad": {"status": status, "time": grad, "forward": forward, "ratio": grad / forward, "peers": peers,
                     "check_mini": 0.0, "check": 0.0, "error": None if status == "ok" else "it differs"}}


def test_gradient_targets_are_judged_per_kernel_and_over_the_geometric_means():
    from benchmarks import report

    fast = _grad_row("gelu", 1.0, 2.0, eager=4.0, compiled=3.0, jax=1.7)     # 2x forward, 0.85x the best
    slow = _grad_row("conv2d", 1.0, 3.0, eager=2.0, compiled=4.0, jax=6.0)   # 3x forward, below eager
    assert report.grad_verdict(fast) == ("met", True)
    text, met = report.grad_verdict(slow)
    assert met is False and "gradient/forward 3.00× > 2.5×" in text and "eager 0.67× < 1×" in text
    assert "best compiled" not in text                                       # 4/3 of the faster compiled peer
    text, met = report.grad_verdict(_grad_row("gemm", 1.0, 2.0, eager=1.999))
    assert met is False and "eager 0.9995× < 1×" in text  # not 1.00× < 1×
    assert report.grad_verdict(_grad_row("gemm", 1.0, 2.0, status="MISMATCH"))[1] is None
    s = report.grad_summary([fast, slow])
    assert s["torch-compile"] == pytest.approx((1.5 * 4 / 3) ** 0.5) and s["jax_n"] == 2
    assert s["best-compiled"] == pytest.approx((0.85 * 4 / 3) ** 0.5)
    got = {what: met for what, _, met in report.grad_targets([fast, slow])}
    assert got == {"gradient ≤ 2.5× its forward, every gradient kernel": False,
                   "gradient ≥ 1× torch eager autograd, every gradient kernel": False,
                   "gradient ≥ 0.8× the faster of torch.compile and JAX, every gradient kernel": True,
                   "gradient geomean ≥ 1.2× torch.compile": True,
                   "gradient geomean ≥ 1× JAX": True}
    # one framework missing: its columns are n/a, the rest is still judged
    only_torch = _grad_row("softmax", 1.0, 2.0, eager=3.0, compiled=2.5)
    md = "\n".join(report.grad_markdown([only_torch], {"grad_peer_threads": 1, "grad_peers": ["torch", "torch-compile",
                                                                                              "jax"]}))
    line = next(x for x in md.splitlines() if x.startswith("| softmax | N=1 |"))
    assert "| 3000 | 2500 | n/a | 1.50× | 1.25× | — | met |" in line  # times in ms
    assert "JAX not run: not installed" in md


# ------------------------------------------------------------------ benchmarks/ml_more.py

MORE_KERNELS = ("argmax-rows", "bias-silu-t", "bmm-small-t", "add-rmsnorm", "topk-rows")


def test_the_more_ml_kernels_belong_to_the_ml_group():
    chosen, _ = harness.select("ml")
    assert set(MORE_KERNELS) <= {b.name for b in chosen}
    rows = {b.name for b in harness.select("rows")[0]}
    assert set(MORE_ROW_KERNELS) <= rows and "bmm-small-t" not in rows
    dims = {name: harness.all_benches()[name].dims("medium") for name in MORE_KERNELS}
    assert dims == {"argmax-rows": {"N": 4096, "D": 512}, "bias-silu-t": {"N": 2048, "D": 1024},
                    "bmm-small-t": {"Z": 64, "M": 32, "N": 40, "K": 48}, "add-rmsnorm": {"N": 2048, "D": 1024},
                    "topk-rows": {"N": 4096, "D": 512}}
    for name in MORE_ROW_KERNELS:  # rows whose length is no multiple of a vector at the checked sizes
        for size in ("mini", "small"):
            assert harness.all_benches()[name].dims(size)["D"] % 8 != 0, (name, size)


@pytest.mark.parametrize("size", ["mini", "small"])
def test_the_more_ml_kernels_plain_loops_agree_with_numpy(size):
    from benchmarks.report import agrees

    for name in MORE_KERNELS:
        b = harness.all_benches()[name]
        dims = b.dims(size)
        if size == "small":  # the plain-Python loops are slow: a few rows (batches) of the small size
            dims = {**dims, **({"Z": 2} if "Z" in dims else {"N": 5})}
        got, ref = b.init(dims), b.init(dims)
        b.loops(*[got[p] for p in b.params])
        b.numpy(*[ref[p] for p in b.params])
        ok, err = agrees([got[o] for o in b.outputs], [ref[o] for o in b.outputs], b.rtol, b.atol)
        assert ok, (name, size, err)


def test_the_more_ml_kernels_agree_in_every_version(tmp_path):
    variants = "hyb,hyb-ieee,hyb-reassoc,numpy,c" + (",numba" if HAS_NUMBA else "")
    rc = benchmarks.main(["--size", "mini", "--kernels", ",".join(MORE_KERNELS), "--no-isolate",
                          "--variants", variants, "--repeat", "1", "--compile-repeat", "1",
                          "--min-time", "0.001", "--out", str(tmp_path)])
    doc = json.loads((tmp_path / "results.json").read_text())
    rows = {r["name"]: r for r in doc["kernels"]}
    assert list(rows) == list(MORE_KERNELS)
    for name, r in rows.items():
        assert r["status"] == "ok" and r["mismatch"] == [] and r["errors"] == {}, (name, r["problems"])
        assert r["time"]["hyb"] > 0 and r["time"]["numpy"] > 0, name
        assert r["time"].get("c", 1.0) > 0 and ("c" in r["time"] or "c" in r["na"]), name
        modes = {"hyb-ieee", "hyb-reassoc"} & set(r["time"])
        assert modes == ({"hyb-ieee", "hyb-reassoc"} if name in MORE_ROW_KERNELS else set()), name
    assert rows["argmax-rows"]["check"]["hyb"] == 0.0 and rows["topk-rows"]["check"]["hyb"] == 0.0
    assert rc == 0


def test_the_argmax_rows_data_has_ties_and_the_first_index_wins():
    """Most rows hold their maximum more than once; some answers are 0 with a later tie, and the
    answers are spread over the row, so keeping the last equal value or stopping early is caught."""
    b = harness.all_benches()["argmax-rows"]
    for size in ("mini", "small"):
        dims = b.dims(size)
        data = b.init(dims)
        x, idx = data["x"], data["idx"]
        assert x.dtype == np.float32 and idx.dtype == np.int32 and idx.shape == (dims["N"],)
        ref = np.argmax(x, axis=1)
        ties = (x == x.max(axis=1, keepdims=True)).sum(axis=1)
        assert (ties > 1).mean() > 0.5, size
        last = dims["D"] - 1 - np.argmax(x[:, ::-1], axis=1)
        assert np.any(ref != last) and np.any((ref == 0) & (ties > 1)), size
        assert len(np.unique(ref)) > dims["N"] // 4 and ref.max() > dims["D"] // 2, size
        b.numpy(x, idx)
        assert np.array_equal(idx, ref)


def test_the_topk_rows_data_has_no_ties_and_numpy_sorts_the_top_values():
    b = harness.all_benches()["topk-rows"]
    dims = b.dims("small")
    data = b.init(dims)
    x = data["x"]
    assert all(len(np.unique(row)) == dims["D"] for row in x)
    b.numpy(*[data[p] for p in b.params])
    order = np.argsort(-x, axis=1)[:, :8]
    assert np.array_equal(data["idx"], order) and np.array_equal(data["vals"], np.take_along_axis(x, order, 1))


def test_bias_silu_is_stored_transposed_and_add_rmsnorm_returns_only_y():
    benches = harness.all_benches()
    b = benches["bias-silu-t"]
    data = b.init(b.dims("mini"))
    b.numpy(*[data[p] for p in b.params])
    t = data["x"].astype(np.float64) + data["b"]
    assert data["y"].shape == data["x"].shape[::-1]
    assert np.allclose(data["y"], (t / (1.0 + np.exp(-t))).T, rtol=1e-5, atol=1e-6)
    r = benches["add-rmsnorm"]
    assert r.outputs == ("y",) and "t" in r.params and "t" not in r.hyb_params
    assert "allocate((n, d)" in r.hyb and (r.rtol, r.atol) == (benches["rmsnorm"].rtol, benches["rmsnorm"].atol)
