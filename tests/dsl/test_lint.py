"""`hyb check FILE` without a signature (hyb.dsl.lint): what needs no shapes is checked, with the
checker's own errors, and no correct kernel is flagged."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import hyb
from hyb.dsl.lint import lint
from hyb.dsl.parser import parse_file, parse_string
from tests.autodiff.gradcases import CASES as GRAD_CASES
from tests.dsl.test_errors import CASES as ERROR_CASES
from tests.runtime import test_differential as td

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def test_no_example_is_flagged():
    files = sorted(EXAMPLES.glob("*.hyb"))
    assert files
    for f in files:
        assert lint(parse_file(str(f))) == [], f


def test_no_kernel_of_the_test_suites_is_flagged():
    modules = {id(c.kernel.module): c.kernel.module for c in td.CASES}
    for c in GRAD_CASES:
        m = parse_string(c.src)
        modules[id(m)] = m
    assert len(modules) > 50
    for m in modules.values():
        assert lint(m) == [], m.filename


LINTED = ["unknown name", "unknown function", "intrinsic arity", "attribute", "numpy dtype", "numpy function",
          "math function", "numpy without a kernel spelling", "return expression", "numpy cast", "astype",
          "misspelled loop hint", "loop over non-range", "kernel call in an expression"]


@pytest.mark.parametrize("name,src,cls,line,col,words", [c for c in ERROR_CASES if c[0] in LINTED],
                         ids=lambda v: v if isinstance(v, str) and "\n" not in v else "")
def test_the_same_error_as_the_checker(name, src, cls, line, col, words):
    (found,) = lint(parse_string(src, "bad.hyb"))
    assert type(found) is cls
    assert (found.line, found.col) == (line, col) and words in found.message
    with pytest.raises(cls) as checked:
        hyb.compile_source(src, "bad.hyb").k(np.arange(4, dtype=np.float32))
    assert (checked.value.message, checked.value.span) == (found.message, found.span)


def test_errors_of_every_kernel_and_hyb_check_fails(tmp_path):
    f = tmp_path / "typo.hyb"
    f.write_text("def k(a):\n    c = output_tensor(a.shape, a.dtype)\n    for i in range(a.shape[0]):\n"
                 "        c[i] = sqrtt(a[i])\n    return c\n\n"
                 "def j(a):\n    c = output_tensor(a.shape, a.dtype)\n    for i in rnage(a.shape[0]):\n"
                 "        c[i] = a[i]\n    return c\n\n"
                 "def ok(a):\n    c = output_tensor(a.shape, a.dtype)\n    return c\n")
    found = lint(parse_file(str(f)))
    assert [(e.line, e.message) for e in found] == [(4, "unknown function `sqrtt`"), (9, "unknown function `rnage`")]
    assert [e.hint for e in found] == ["did you mean `sqrt`?", "did you mean `range`?"]
    r = subprocess.run([sys.executable, "-m", "hyb.cli", "check", str(f)], capture_output=True, text=True)
    assert r.returncode == 1
    assert f"{f}:4:16: error: unknown function `sqrtt`" in r.stderr and f"{f}:9:14: error: unknown function `rnage`" in r.stderr
    good = tmp_path / "good.hyb"
    good.write_text("def ok(a):\n    c = output_tensor(a.shape, a.dtype)\n    return c\n")
    r = subprocess.run([sys.executable, "-m", "hyb.cli", "check", str(good)], capture_output=True, text=True)
    assert r.returncode == 0 and "checked without a signature: ok" in r.stdout


@pytest.mark.parametrize("signature", [[], ["--args", "a=float32[3]"]])
def test_every_unknown_name_of_a_line(tmp_path, signature):
    f = tmp_path / "names.hyb"
    f.write_text("def k(a):\n    c = output_tensor(a.shape, a.dtype)\n    for i in range(a.shape[0]):\n"
                 "        c[i] = a[i] * scale + offset + a.shap[0]\n        d = sqrtt(bias)\n    return c\n")
    found = lint(parse_file(str(f)))
    assert [(e.line, e.col, e.message) for e in found] == [
        (4, 23, "unknown name `scale`"), (4, 31, "unknown name `offset`"), (4, 40, "tensors have no attribute `shap`"),
        (5, 13, "unknown function `sqrtt`"), (5, 19, "unknown name `bias`")]
    r = subprocess.run([sys.executable, "-m", "hyb.cli", "check", str(f), *signature], capture_output=True, text=True)
    assert r.returncode == 1
    for line, col, message in [(4, 23, "`scale`"), (4, 31, "`offset`"), (4, 40, "`shap`"), (5, 19, "`bias`")]:
        assert f"{f}:{line}:{col}: error: " in r.stderr and message in r.stderr
