"""Threads of a call on a busy machine (hyb.runtime.busy, and its C twin in the dispatcher): the
runnable tasks of the system less this process's own decide how many of its threads a call uses."""
from __future__ import annotations

import os

import numpy as np
import pytest

import hyb
from hyb.runtime import busy, fastcall

CPUS = os.cpu_count() or 1


def loadavg(tmp_path, running):
    p = tmp_path / "loadavg"
    p.write_text(f"0.50 0.40 0.30 {running}/412 12345\n")
    return str(p)


@pytest.fixture
def python_check(monkeypatch):
    monkeypatch.setattr(busy, "ENABLED", True)
    monkeypatch.setattr(busy, "_state", {"checked": -1.0, "free": None, "ended": -1.0, "last": 1, "seen": ()})
    return monkeypatch


def test_the_runnable_tasks_are_the_fourth_field(tmp_path):
    assert busy.runnable(loadavg(tmp_path, 7)) == 7
    (tmp_path / "bad").write_text("0.5 0.4\n")
    assert busy.runnable(str(tmp_path / "bad")) is None
    assert busy.runnable(str(tmp_path / "missing")) is None


def test_other_tasks_leave_out_our_own():
    assert busy.others(running=1, mine=1) == 0  # only the caller runs
    assert busy.others(running=2, mine=2) == 0  # the caller and our spinning worker
    assert busy.others(running=3, mine=1) == 2
    assert busy.others(running=0, mine=1) == 0


@pytest.mark.parametrize("running,want", [(1, CPUS), (CPUS + 1, 1), (CPUS + 10, 1)])
def test_python_check(tmp_path, python_check, running, want):
    python_check.setattr(busy, "LOADAVG", loadavg(tmp_path, running))
    assert busy.threads_now(CPUS, now=10.0) == want


@pytest.mark.skipif(CPUS != 2, reason="counts for two CPUs")
def test_python_check_is_kept_between_reads_and_counts_our_spinning_workers(tmp_path, python_check):
    python_check.setattr(busy, "LOADAVG", loadavg(tmp_path, 1))
    assert busy.threads_now(2, now=1.0) == 2  # only the caller runs
    busy.ran(2, now=1.0)
    loadavg(tmp_path, 9)
    assert busy.threads_now(2, now=1.0 + busy.CHECK_SECONDS / 2) == 2  # the answer is kept
    loadavg(tmp_path, 2)
    assert busy.threads_now(2, now=1.0 + busy.CHECK_SECONDS) == 2  # the other task is our worker, spinning
    later = 1.0 + busy.SPIN_SECONDS + busy.CHECK_SECONDS
    # the worker sleeps by now, so another process runs; it has to be seen in READINGS reads in a row
    reads = [busy.threads_now(2, now=later + k * busy.CHECK_SECONDS) for k in range(busy.READINGS)]
    assert reads == [2] * (busy.READINGS - 1) + [1]
    assert busy.threads_now(1, now=later) == 1 and busy.threads_now(0, now=later) == 0


@pytest.mark.skipif(CPUS != 2, reason="counts for two CPUs")
def test_a_task_runnable_for_one_read_does_not_take_threads_away(tmp_path, python_check):
    python_check.setattr(busy, "LOADAVG", loadavg(tmp_path, 1))
    step = busy.CHECK_SECONDS
    assert busy.threads_now(2, now=1.0) == 2
    loadavg(tmp_path, 2)  # a kernel thread or a short command, caught by one read
    assert busy.threads_now(2, now=1.0 + step) == 2
    loadavg(tmp_path, 1)
    assert busy.threads_now(2, now=1.0 + 2 * step) == 2
    loadavg(tmp_path, 2)  # a neighbour that stays
    assert [busy.threads_now(2, now=1.0 + k * step) for k in range(3, 3 + busy.READINGS)] == [2, 2, 1]
    loadavg(tmp_path, 1)  # gone: one read says so
    assert busy.threads_now(2, now=1.0 + 9 * step) == 2


def test_the_check_off_or_unreadable_gives_every_thread(tmp_path, python_check):
    python_check.setattr(busy, "LOADAVG", str(tmp_path / "missing"))
    assert busy.threads_now(8, now=3.0) == 8
    python_check.setattr(busy, "ENABLED", False)
    python_check.setattr(busy, "LOADAVG", loadavg(tmp_path, 1000))
    assert busy.threads_now(8, now=4.0) == 8


native = pytest.mark.skipif(fastcall.native is None, reason="the C dispatcher is not built")


@native
def test_the_c_dispatcher_checks_the_same_way(tmp_path):
    c = fastcall.native
    try:
        c.configure(True, loadavg(tmp_path, 1))
        assert c.threads_now(CPUS) == CPUS
        c.configure(True, loadavg(tmp_path, CPUS + 1))  # the first read decides alone
        assert c.threads_now(CPUS) == 1 and c.threads_now(1) == 1
        c.configure(True, str(tmp_path / "missing"))
        assert c.threads_now(5) == 5
        c.configure(False, loadavg(tmp_path, 1000))
        assert c.threads_now(5) == 5
    finally:
        c.configure(False, busy.LOADAVG)


@native
@pytest.mark.skipif(CPUS != 2, reason="counts for two CPUs")
def test_the_c_dispatcher_takes_the_fewest_other_tasks_of_its_last_reads(tmp_path):
    import time
    c = fastcall.native

    def read_after_a_check(running):
        loadavg(tmp_path, running)
        time.sleep(busy.CHECK_SECONDS * 1.5)
        return c.threads_now(2)

    try:
        c.configure(True, loadavg(tmp_path, 1))
        assert c.threads_now(2) == 2
        assert read_after_a_check(2) == 2  # one read of another task
        assert read_after_a_check(1) == 2
        assert [read_after_a_check(2) for _ in range(busy.READINGS)] == [2, 2, 1]
        assert read_after_a_check(1) == 2
    finally:
        c.configure(False, busy.LOADAVG)


@native
def test_a_parallel_kernel_on_a_busy_machine_runs_on_one_thread_with_the_same_result(tmp_path):
    src = '''def k(a):
    c = output_tensor(a.shape, a.dtype)
    for i in range(a.shape[0]):
        s = 0.0
        for j in range(a.shape[1]):
            s += a[i, j]
        for j in range(a.shape[1]):
            c[i, j] = a[i, j] - s
    return c
'''
    a = np.random.default_rng(0).standard_normal((512, 256))
    k = hyb.compile_source(src, threads=2).k
    want = k(a)
    c = fastcall.native
    try:
        c.configure(True, loadavg(tmp_path, 50))
        assert c.threads_now(2) == 1
        np.testing.assert_array_equal(k(a), want)
    finally:
        c.configure(False, busy.LOADAVG)
