"""The warning about reads of elements nothing wrote: no false alarm when every side of a condition
decided at run time writes the element, and still a warning where one side does not."""
from __future__ import annotations

import subprocess
import sys
import warnings

import numpy as np
import pytest

import hyb

HEAD = "def k(a):\n    c = output_tensor(a.shape, a.dtype)\n    t = allocate(a.shape, a.dtype)\n"
LOOP = HEAD + "    for i in range(a.shape[0]):\n"
TAIL = "        c[i] = t[i] * 2\n    return c\n"

SILENT = {
    "if else": LOOP + "        if a[i] > 0:\n            t[i] = a[i]\n        else:\n            t[i] = -a[i]\n" + TAIL,
    "if elif else": LOOP + "        if a[i] > 1:\n            t[i] = a[i]\n        elif a[i] > 0:\n"
                    "            t[i] = 1.0\n        else:\n            t[i] = 0.0\n" + TAIL,
    "nested in a written branch": LOOP + "        if a[i] > 0:\n            if a[i] > 2:\n                t[i] = 2.0\n"
                                  "            else:\n                t[i] = 1.0\n        else:\n            t[i] = 0.0\n" + TAIL,
    "one cell": HEAD.replace("allocate(a.shape", "allocate((1,)") + "    for i in range(a.shape[0]):\n"
                "        if a[i] > 0:\n            t[0] = a[i]\n        else:\n            t[0] = 0.0\n"
                "        c[i] = t[0]\n    return c\n",
    "read inside the same if": LOOP + "        if a[i] > 0:\n            t[i] = a[i]\n            c[i] = t[i] * 2\n"
                               "    return c\n",
    "read in a loop inside the same if": LOOP + "        if a[i] > 0:\n            t[i] = a[i]\n"
                                         "            for j in range(2):\n                c[i] += t[i]\n    return c\n",
}

WARNED = {
    "same if, another iteration": LOOP + "        if a[i] > 0:\n            t[a.shape[0] - 1 - i] = a[i]\n"
                                  "            c[i] = t[i] * 2\n    return c\n",
    "if without else": LOOP + "        if a[i] > 0:\n            t[i] = a[i]\n" + TAIL,
    "elif without else": LOOP + "        if a[i] > 1:\n            t[i] = a[i]\n        elif a[i] > 0:\n"
                         "            t[i] = 1.0\n" + TAIL,
    "else reads before it writes": LOOP + "        if a[i] > 0:\n            t[i] = a[i]\n        else:\n"
                                   "            c[i] = t[i]\n            t[i] = 0.0\n        c[i] += t[i]\n    return c\n",
    "different cells": LOOP + "        if a[i] > 0:\n            t[i] = a[i]\n        else:\n"
                       "            t[a.shape[0] - 1 - i] = 0.0\n" + TAIL,
}


def run(src):
    a = np.array([2.0, -1.0, 0.5, 3.0])
    k = hyb.compile_source(src, "w.hyb").k
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = k(a)
    np.testing.assert_array_equal(got, k.emulate(a))
    return [w for w in caught if issubclass(w.category, hyb.HybridWarning)]


@pytest.mark.parametrize("name", SILENT)
def test_every_side_writes_no_warning(name):
    assert run(SILENT[name]) == []


@pytest.mark.parametrize("name", WARNED)
def test_a_side_that_does_not_write_still_warns(name):
    found = run(WARNED[name])
    assert found and "`t` is read before anything writes it" in str(found[0].message)


def test_hyb_check_werror_passes(tmp_path):
    f = tmp_path / "branches.hyb"
    f.write_text(SILENT["if else"])
    r = subprocess.run([sys.executable, "-m", "hyb.cli", "check", str(f), "--args", "a=float32[8]", "--werror"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "warning" not in r.stderr
