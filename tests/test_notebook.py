"""examples/notebook.ipynb: stored without outputs, and executed in a Jupyter kernel (nbclient and
ipykernel, the test extra) every cell runs without an error and the kernels render as HTML: the
kernel's source, and the compiled kernel's stages as tabs, of the kernel and of its gradient."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOK = ROOT / "examples" / "notebook.ipynb"

nbformat = pytest.importorskip("nbformat", reason="needs nbformat (the test extra) to read the notebook")


def read():
    return nbformat.read(str(NOTEBOOK), as_version=4)


def test_notebook_is_stored_without_outputs():
    nb = read()
    nbformat.validate(nb)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert code
    for cell in code:
        assert cell.outputs == [] and cell.execution_count is None, cell.source
    assert nb.metadata.kernelspec.name == "python3"


def html_outputs(cell):
    return [o.data["text/html"] for o in cell.outputs if "text/html" in o.get("data", {})]


def text_outputs(cell):
    return "".join(o.get("text", "") for o in cell.outputs if o.output_type == "stream")


def test_notebook_runs_and_renders_html(monkeypatch):
    nbclient = pytest.importorskip("nbclient", reason="needs nbclient (the test extra) to run the notebook")
    pytest.importorskip("ipykernel", reason="needs ipykernel (the test extra) to run the notebook")
    # The kernel process imports this checkout's hyb, and inherits the test's own cache folder.
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(ROOT)] + [p for p in [os.environ.get("PYTHONPATH")] if p]))
    nb = read()
    client = nbclient.NotebookClient(nb, timeout=120, kernel_name="python3",
                                     resources={"metadata": {"path": str(NOTEBOOK.parent)}})
    client.execute()  # raises CellExecutionError, with the cell and its traceback, if a cell fails

    code = [c for c in nb.cells if c.cell_type == "code"]
    for cell in code:
        assert cell.execution_count is not None, cell.source
        assert not [o for o in cell.outputs if o.output_type == "error"], cell.source
    by_source = {c.source.splitlines()[0]: c for c in code}

    # the kernel: its source, not compiled yet
    (kernel_html,) = html_outputs(by_source["@hyb.hybrid"])
    assert "<b>hyb.Kernel</b>" in kernel_html and "softmax" in kernel_html and "not compiled yet" in kernel_html

    # the compiled kernel: one tab per stage, each stage's text in it
    (compiled_html,) = html_outputs(by_source["ck = softmax.compile(x)"])
    assert "<b>CompiledKernel</b>" in compiled_html and "softmax(float64[64, 100])" in compiled_html
    for stage in ("loops", "schedule", "llvm-opt", "asm", "grad"):
        assert f">{stage}</label>" in compiled_html, stage
    assert 'type="radio"' in compiled_html and "<pre>" in compiled_html
    assert '<span class="hyb-label">S0</span>(c0' in compiled_html  # the loops, highlighted

    assert "max difference from NumPy:" in text_outputs(code[2])
    assert "for (" in text_outputs(by_source["print(ck.inspect('loops'))"])
    assert "total" in text_outputs(by_source["print(ck.inspect('timings'))"])

    # the derived gradient: its source, its check against the formula, its own stages
    assert "def softmax_grad(x, dout):" in text_outputs(by_source["softmax_grad = softmax.grad()"])
    assert "max difference from the formula:" in text_outputs(by_source["dy = rng.standard_normal(x.shape)"])
    (grad_html,) = html_outputs(code[-1])
    assert "<b>CompiledKernel</b>" in grad_html and "softmax_grad(" in grad_html
