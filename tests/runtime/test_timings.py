"""inspect("timings"): how long each stage of a signature's compile took, in the order the stages
ran, with the total; a load from the disk cache said as such; shape-generic code bound to a shape;
and `hyb compile --time` / `hyb run --time` on the command line."""
from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

import hyb
from hyb.runtime.generic import BoundKernel
from hyb.runtime.timings import Clock, Timings, format_seconds

# a row's sum in a private scalar (one-cell dependences), a matrix product (the plan's register
# blocks), in one module
SRC = '''
def rowsum(x):
    out = output_tensor((x.shape[0],), x.dtype)
    for i in range(x.shape[0]):
        s = 0.0
        for j in range(x.shape[1]):
            s += x[i, j]
        out[i] = s
    return out


def matmul(a, b):
    c = output_tensor((a.shape[0], b.shape[1]), a.dtype)
    for i in range(a.shape[0]):
        for j in range(b.shape[1]):
            for k in range(a.shape[1]):
                c[i, j] += a[i, k] * b[k, j]
    return c
'''

LINE = re.compile(r"^  (\S.*?)\s{2,}(\d+(?:\.\d+)?) (ms|s)$")


def sections(text: str) -> list:
    """``[(title, [(stage, seconds), ...], total)]`` of an inspect("timings") text, each table's
    lines as printed (every indented line must be a stage's; a title may take several lines)."""
    out = []
    for line in text.splitlines():
        m = LINE.match(line)
        if m is None:
            assert not line.startswith("  "), line
            if out and not out[-1][1]:
                out[-1] = (out[-1][0] + "\n" + line, [], None)
            elif not line.startswith("("):  # a note after a table, not a table's title
                out.append((line, [], None))
            continue
        seconds = float(m.group(2)) * (1e-3 if m.group(3) == "ms" else 1.0)
        title, rows, total = out[-1]
        assert total is None, f"a line after the total: {line}"
        if m.group(1) == "total":
            out[-1] = (title, rows, seconds)
        else:
            rows.append((m.group(1), seconds))
    assert out and all(total is not None for _, _, total in out), text
    return out


def check_sums(title, rows, total):
    """Every time non-negative, and the total the sum of the lines to within their rounding (3
    significant digits each, at least a microsecond)."""
    assert rows, title
    assert all(seconds >= 0 for _, seconds in rows), rows
    slack = 0.006 * (sum(s for _, s in rows) + total) + 1e-6 * (len(rows) + 1)
    assert abs(sum(s for _, s in rows) - total) <= slack, (title, rows, total)


def in_order(names: list, wanted: list) -> bool:
    """Whether ``wanted`` appear in ``names`` in this order (others may come between)."""
    it = iter(names)
    return all(any(n == w for n in it) for w in wanted)


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("HYB_CACHE_DIR", str(tmp_path))
    return tmp_path


def test_every_stage_of_a_compile_in_the_order_it_ran(cache_dir):
    x = np.random.default_rng(0).random((64, 48))
    kernel = hyb.compile_source(SRC).rowsum
    started = time.perf_counter()
    ck = kernel.compile(x)
    wall = time.perf_counter() - started
    assert ck.timings.total <= wall  # no time counted twice
    text = ck.inspect("timings")
    ((title, rows, total),) = sections(text)
    assert title == "`rowsum`(float64[64, 48]): compiled, stage by stage", text
    check_sums(title, rows, total)
    names = [n for n, _ in rows]
    assert in_order(names, ["check", "disk cache lookup", "privatise", "extract", "dependences",
                            "one-cell dependences", "plan", "loop nest", "marks", "contraction", "legalise",
                            "LLVM IR", "LLVM optimisation", "machine code", "disk cache store",
                            "other (set-up, imports)"]), names
    assert len(set(names)) == len(names), names  # each stage once
    assert "load object code" not in names and "bind" not in names
    # the record the text is made from: the middle end's own stages inside it, in the order they ran
    stages = [n for n, _ in ck.timings.stages]
    assert stages == names and not ck.timings.loaded
    middle = [n for n, _ in ck.middle.timings.stages]
    start = stages.index(middle[0])
    assert stages[start:start + len(middle)] == middle
    assert ck.timings.total == pytest.approx(sum(s for _, s in ck.timings.stages))


def test_stages_that_did_not_run_are_left_out(cache_dir):
    a = np.ones((64, 32))
    names = [n for n, _ in hyb.compile_source(SRC, schedule="original").matmul.compile(a, a.T.copy()).timings.stages]
    assert "plan" in names and "extract" in names
    # schedule="original": none of the CPU's rewrites of the typed kernel; no private scalar here
    for absent in ("recompute", "argext", "guarded", "transpose", "one-cell dependences",
                   "shape checks", "bind"):
        assert absent not in names, (absent, names)
    names = [n for n, _ in hyb.compile_source(SRC).matmul.compile(a, a.T.copy()).timings.stages]
    assert in_order(names, ["transpose", "extract", "plan", "register blocks", "legalise"]), names


def test_a_disk_cache_hit_says_the_code_was_loaded(cache_dir):
    x = np.ones((40, 30), np.float32)
    hyb.compile_source(SRC).rowsum.compile(x)
    loaded = hyb.compile_source(SRC).rowsum.compile(x)  # a new Kernel: its code from the disk
    text = loaded.inspect("timings")
    ((title, rows, total),) = sections(text)
    assert "loaded from the disk cache (not compiled)" in title, text
    assert [n for n, _ in rows] == ["check", "disk cache lookup", "load object code", "other (set-up, imports)"], text
    check_sums(title, rows, total)
    assert loaded.timings.loaded and "not compile time" not in text
    # inspect() of a middle-end stage makes those records again: said, and not as compile stages
    assert "for (" in loaded.inspect("loops")
    text = loaded.inspect("timings")
    assert "were made again from the typed kernel in " in text and "not compile time" in text, text
    ((_, rows, _),) = sections(text)
    assert [n for n, _ in rows] == ["check", "disk cache lookup", "load object code", "other (set-up, imports)"], text


def test_shape_generic_code_bound_to_a_shape(cache_dir):
    k = hyb.compile_source(SRC).rowsum
    k.compile(np.ones((8, 33)))  # the first shape: code for it
    bound = k.compile(np.ones((9, 34)))  # a second: the shape-generic code, bound to it
    assert isinstance(bound, BoundKernel)
    text = bound.inspect("timings")
    assert text.startswith("shape-generic code, compiled once for every shape of its ranks and dtypes:\n"), text
    (generic, generic_rows, generic_total), (own, own_rows, own_total) = sections(text)
    assert "compiled, stage by stage" in generic, text
    assert in_order([n for n, _ in generic_rows], ["check", "extract", "dependences", "plan", "LLVM optimisation",
                                                   "shape checks"]), text
    assert own == "this shape (float64[9, 34]): the shape-generic code above, bound to it", text
    assert [n for n, _ in own_rows] == ["check", "bind"], text  # (the Kernel's set-up: outside both)
    check_sums(generic, generic_rows, generic_total)
    check_sums(own, own_rows, own_total)
    # a third shape binds the same code: its compile is the one above, its binding its own
    third = k.compile(np.ones((10, 35))).inspect("timings")
    assert third.split("this shape")[0] == text.split("this shape")[0]
    assert "this shape (float64[10, 35])" in third
    # compile_generic: the same two parts
    direct = hyb.compile_source(SRC).rowsum.compile_generic(np.ones((20, 30)))
    (_, generic_rows, _), (own, own_rows, own_total) = sections(direct.inspect("timings"))
    assert "extract" in [n for n, _ in generic_rows] and [n for n, _ in own_rows] == ["check", "bind"]
    check_sums(own, own_rows, own_total)


def test_a_shape_the_generic_compile_refuses_shows_that_attempt(cache_dir):
    table = '''
def table(a):
    c = output_tensor((a.shape[0] * a.shape[0],), a.dtype)
    for i in range(a.shape[0]):
        for j in range(a.shape[0]):
            c[i * a.shape[0] + j] = a[i] * a[j]
    return c
'''
    k = hyb.compile_source(table).table
    k.compile(np.ones(20))
    ck = k.compile(np.ones(21))  # the shape-generic compile is tried, refused, and this shape compiled
    assert not isinstance(ck, BoundKernel)
    names = [n for n, _ in ck.timings.stages]
    assert names[:2] == ["check", "shape-generic compile, refused"] and names.count("extract") == 1, names
    ((title, rows, total),) = sections(ck.inspect("timings"))
    check_sums(title, rows, total)


def test_unknown_stage_names_still_give_the_error():
    ck = hyb.compile_source(SRC).rowsum.compile(np.ones((4, 4)))
    with pytest.raises(hyb.HybridArgumentError) as e:
        ck.inspect("timing")
    assert "unknown stage 'timing'" in str(e.value) and "timings" in e.value.hint


def test_kernels_compiled_on_two_threads_each_time_only_their_own_stages(cache_dir):
    mod = hyb.compile_source(SRC)
    got, errors = {}, []

    def compile_one(name, *args):
        try:
            got[name] = getattr(mod, name).compile(*args)
        except Exception as e:  # noqa: BLE001 - reported by the assertion below
            errors.append(e)

    a = np.ones((48, 48))
    threads = [threading.Thread(target=compile_one, args=("rowsum", a)),
               threading.Thread(target=compile_one, args=("matmul", a, a))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    for name, ck in got.items():
        names = [n for n, _ in ck.timings.stages]
        assert names.count("extract") == 1 and names.count("LLVM IR") == 1, (name, names)
        ((title, rows, total),) = sections(ck.inspect("timings"))
        check_sums(title, rows, total)
    assert "one-cell dependences" in [n for n, _ in got["rowsum"].timings.stages]
    assert "one-cell dependences" not in [n for n, _ in got["matmul"].timings.stages]


def test_the_record_and_its_clock():
    assert [format_seconds(s) for s in (0.0, 4e-7, 0.000123, 0.0123, 0.123, 1.234, 12.34, 123.4)] == [
        "0.000 ms", "0.000 ms", "0.123 ms", "12.3 ms", "123 ms", "1.23 s", "12.3 s", "123 s"]
    a, b = Timings((("x", 0.5),)), Timings((("y", 0.25),), loaded=True)
    assert (a + b).stages == (("x", 0.5), ("y", 0.25)) and (a + b).loaded and (a + b).total == 0.75
    clock = Clock()
    with clock.stage("first"):
        pass
    with pytest.raises(ValueError), clock.stage("raises"):
        raise ValueError("no record of a stage that failed")
    clock.include(a)
    record = clock.record()
    assert [n for n, _ in record.stages] == ["first", "x"] and not record.loaded
    assert record.stages[0][1] >= 0

    class Held:  # a lock another thread holds: the non-blocking try fails, the wait succeeds
        def acquire(self, blocking=True):
            return blocking

        def release(self):
            pass

    clock = Clock()
    with clock.holding(Held(), "waiting"):
        pass
    with clock.holding(threading.RLock(), "not waiting"):
        pass
    assert [n for n, _ in clock.record().stages] == ["waiting"]


# ------------------------------------------------------------------ the command line

def hyb_cmd(*args, env):
    return subprocess.run([sys.executable, "-m", "hyb.cli", *map(str, args)], capture_output=True, text=True,
                          env=env, timeout=120, check=False)


def test_hyb_compile_time_prints_the_table_on_stderr(tmp_path):
    path = tmp_path / "k.hyb"
    path.write_text(SRC)
    env = dict(os.environ, HYB_CACHE_DIR=str(tmp_path / "cache"))
    r = hyb_cmd("compile", path, "--kernel", "rowsum", "--args", "x=float32[32,16]", "--time", env=env)
    assert r.returncode == 0, r.stderr
    assert "for (" in r.stdout and "stage by stage" not in r.stdout  # the loops on stdout, as without --time
    ((title, rows, total),) = sections(r.stderr)
    assert title == "`rowsum`(float32[32, 16]): compiled, stage by stage", r.stderr
    assert in_order([n for n, _ in rows], ["check", "extract", "dependences", "plan", "LLVM IR",
                                           "LLVM optimisation", "machine code"]), r.stderr
    check_sums(title, rows, total)
    # again: the disk cache has it
    r = hyb_cmd("compile", path, "-k", "rowsum", "-a", "x=float32[32,16]", "--time", "--emit", "timings", env=env)
    assert r.returncode == 0, r.stderr
    assert "loaded from the disk cache" in r.stderr and "loaded from the disk cache" in r.stdout
    without = hyb_cmd("compile", path, "-k", "rowsum", "-a", "x=float32[32,16]", env=env)
    assert without.returncode == 0 and "stage by stage" not in without.stderr + without.stdout
    assert "disk cache" not in without.stderr


def test_hyb_run_time_prints_the_stages_too(tmp_path, capsys, monkeypatch):
    from hyb.cli import main

    monkeypatch.setenv("HYB_CACHE_DIR", str(tmp_path))
    path = tmp_path / "k.hyb"
    path.write_text(SRC)
    assert main(["run", str(path), "-k", "matmul", "--random", "--args", "a=float32[8,4] b=float32[4,8]",
                 "--time"]) == 0
    err = capsys.readouterr().err
    assert "matmul: compiled in " in err and "ran in " in err, err
    ((title, rows, total),) = sections(err.split("\n", 1)[1])
    assert "compiled, stage by stage" in title and "extract" in [n for n, _ in rows], err
    check_sums(title, rows, total)
