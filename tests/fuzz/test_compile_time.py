"""The compile-time oracle (tests/fuzz/compile_time.py): a program that compiles slowly is a failure
naming the program, the seconds and the longest stage; one slow once only is compiled again and
passes; a compile that does not end is stopped, on the main thread or on the thread hyb.dsl.deep
runs it on; the campaign records a compile-time failure; ``--compile-seconds`` is parsed.

Slowness is made by a stage that sleeps (monkeypatched), never by a program that is really slow:
the limits here are tenths of a second, the sleeps several times longer."""
from __future__ import annotations

import signal
import threading
import time

import numpy as np
import pytest

from hyb.dsl import check as checker
from hyb.dsl import deep
from hyb.schedule import extract
from tests import kernelgen as kg
from tests.fuzz import __main__ as cli
from tests.fuzz import campaign, compile_time, oracle

SCALE = '''
def k(x, alpha):
    y = output_tensor(x.shape, x.dtype)
    for i in range(x.shape[0]):
        for j in range(x.shape[1]):
            y[i, j] = alpha * x[i, j] + 1.0
    return y
'''


def program(options=None):
    x = np.arange(6.0).reshape(2, 3)
    return kg.Program(SCALE, [x, 2.0], (), x.shape, False, options or {})


def slow_stage(monkeypatch, module, name, seconds, times=None):
    """``module.name`` sleeping ``seconds`` before it runs (the first ``times`` calls, or every call);
    the threads it ran on are listed in what this returns."""
    original = getattr(module, name)
    ran_on = []

    def slow(*args, **kwargs):
        ran_on.append(threading.current_thread())
        if times is None or len(ran_on) <= times:
            end = time.perf_counter() + seconds
            while time.perf_counter() < end:  # (short sleeps: a stop lands between two of them)
                time.sleep(0.01)
        return original(*args, **kwargs)

    monkeypatch.setattr(module, name, slow)
    return ran_on


def test_a_quick_compile_passes_and_is_counted():
    tally = compile_time.reset_tally()
    with compile_time.limit(2.0):
        assert oracle.check_parity(program()) == "ok"
    assert tally.compiles == 1 and tally.over == tally.retried == 0
    assert 0 < tally.slowest < 2.0
    assert tally.slowest_source == SCALE.rstrip() + "\n# options: {}\n# compiled for: (float64[2, 3], 2.0)\n"


def test_a_slow_compile_is_a_failure_naming_program_seconds_and_stage(monkeypatch):
    slow_stage(monkeypatch, extract, "extract", 0.4)
    tally = compile_time.reset_tally()
    with compile_time.limit(0.2), pytest.raises(oracle.CompileTimeError) as e:
        oracle.check_parity(program())
    err = e.value
    text = str(err)
    assert text.startswith("compile over the limit of 0.2 s twice: ")
    assert len(err.tries) == 2 and all(tr.seconds >= 0.4 for tr in err.tries)
    assert all(tr.longest[0] == "extract" and tr.longest[1] >= 0.4 for tr in err.tries)
    first = text.splitlines()[0]
    assert f"{err.tries[0].seconds:.2f} s (longest stage: extract" in first
    assert f"then {err.tries[1].seconds:.2f} s" in first
    assert "\nshapes: compiled for this shape (the first of its ranks" in text  # (how it chose code for shapes)
    assert text.endswith(SCALE.rstrip() + "\n# options: {}\n# compiled for: (float64[2, 3], 2.0)")  # the program
    assert tally.over == 1


def test_a_compile_slow_only_once_is_compiled_again_and_passes(monkeypatch):
    """Machine noise: over the limit the first time, under it when compiled again (fresh: the stage
    runs again), so no failure."""
    ran = slow_stage(monkeypatch, extract, "extract", 0.4, times=1)
    tally = compile_time.reset_tally()
    with compile_time.limit(0.3):
        assert oracle.check_parity(program()) == "ok"
    assert len(ran) == 2  # compiled twice: the in-memory and disk caches were not used
    assert tally.retried == 1 and tally.over == 0


def test_gradient_and_front_end_compiles_are_timed(monkeypatch):
    """The gradient campaign's compiles (forward and gradient kernels) and the front end's (parse and
    check of a mutant) go through the oracle too."""
    ran = slow_stage(monkeypatch, extract, "extract", 0.25)
    with compile_time.limit(0.1), pytest.raises(oracle.CompileTimeError, match="longest stage: extract"):
        oracle.check_grad(program())
    assert len(ran) == 2
    monkeypatch.undo()
    slow_stage(monkeypatch, checker, "check_kernel", 0.25)
    with compile_time.limit(0.1), pytest.raises(oracle.CompileTimeError, match="longest stage: check") as e:
        oracle.check_frontend(SCALE, program().args)
    assert SCALE.strip() in str(e.value)
    assert oracle.check_frontend(SCALE + "(", program().args, seconds=0.1) == "error"  # (a syntax error: quick)


def chain(terms):
    """A kernel whose body is a chain of ``terms`` additions (as deeply nested)."""
    return SCALE.replace("alpha * x[i, j] + 1.0", " + ".join(["x[i, j]"] * terms))


@pytest.mark.parametrize("where", ["main thread", "deep thread"])
def test_a_compile_that_hangs_is_stopped(monkeypatch, where):
    """A shallow kernel compiles on the main thread; hyb.dsl.deep compiles a deeply nested one on a
    thread of its own, and then the alarm reaches the main thread waiting for it, and the thread
    is stopped.  Either way the stop is a compile-time failure saying where the compile was."""
    source = SCALE
    if where == "deep thread":  # more levels than an ordinary thread has room for
        source = chain(next(n for n in range(1, 10_000) if deep.frames(n) > deep.ORDINARY_LIMIT // 2))
    ran = slow_stage(monkeypatch, extract, "extract", 600.0)
    monkeypatch.setattr(compile_time, "STOP_AT_LEAST", 0.4)  # (stopped after max(5 x 0.05 s, 0.4 s))
    start = time.perf_counter()
    with compile_time.limit(0.05), pytest.raises(oracle.CompileTimeError) as e:
        compile_time.kernel(source, program().args)
    assert time.perf_counter() - start < 8
    assert len(ran) == 2
    assert all((t is threading.main_thread()) == (where == "main thread") for t in ran), ran
    assert not any(compile_time.running(t) for t in ran if t is not threading.main_thread())
    assert not compile_time.runaway()
    first = str(e.value).splitlines()[0]
    assert first.startswith("compile over the limit of 0.05 s twice: stopped after 0.4"), first
    assert " in _middle_end (hyb/runtime/pipeline.py:" in first, first  # where it was: the stage's line


def test_a_thread_stuck_in_a_native_call_is_reported_and_ends_the_campaign(monkeypatch, tmp_path):
    """A stop lands when a native call returns: a compile thread in one long call (a sleep here) is
    still running after the grace period.  It is reported, not compiled again, and the campaign ends."""
    ran = []
    original = extract.extract

    def stuck(*args, **kwargs):
        ran.append(threading.current_thread())
        time.sleep(0.7)  # (one native call)
        return original(*args, **kwargs)

    monkeypatch.setattr(extract, "extract", stuck)
    monkeypatch.setattr(compile_time, "STOP_AT_LEAST", 0.3)
    monkeypatch.setattr(compile_time, "GRACE", 0.1)
    source = chain(next(n for n in range(1, 10_000) if deep.frames(n) > deep.ORDINARY_LIMIT // 2))
    with compile_time.limit(0.05), pytest.raises(oracle.CompileTimeError) as e:
        compile_time.kernel(source, program().args)
    assert len(e.value.tries) == 1 and e.value.runaway == tuple(ran) and compile_time.runaway() == ran
    assert "(not compiled again: its thread would not stop): stopped after 0.3" in str(e.value)
    assert "1 compile thread(s) did not stop within 0.1 s (in a native call)" in str(e.value)
    c = campaign.Campaign(tmp_path, verbose=False)
    c.stop_if_runaway(e.value)
    end = time.monotonic() + 5
    while compile_time.runaway() and time.monotonic() < end:  # the stop lands when the sleep returns
        time.sleep(0.02)
    assert not compile_time.runaway()
    started = time.monotonic()
    assert c.run(1.0).runaway and time.monotonic() - started < 30  # (the loop does not start)
    assert not c.counts and "ended early: a stopped compile's thread is still running" in c.summary()


def test_a_compile_that_hangs_on_the_main_thread_is_stopped_even_if_it_catches_exceptions(monkeypatch):
    def spin():
        end = time.perf_counter() + 600
        while time.perf_counter() < end:
            time.sleep(0.01)

    def make(stages):
        try:
            spin()
        except Exception:  # noqa: BLE001 - like a stage that falls back to another way on any failure
            stages.append(("fallback", 0.0))
        spin()

    monkeypatch.setattr(compile_time, "REPEAT", 0.15)  # (the alarm again 0.15 s after one caught)
    start = time.perf_counter()
    with pytest.raises(oracle.CompileTimeError, match="stopped after 0.3") as e:
        compile_time.measure(make, "the program", 0.1, stop=0.2)
    assert time.perf_counter() - start < 6
    assert [tr.stages for tr in e.value.tries] == [(("fallback", 0.0),)] * 2  # stopped again after the fallback


def test_a_native_call_that_outlasts_the_case_is_a_compile_time_failure():
    """No alarm lands inside a native call: when it returns, the case's limit may be due as well as
    the compile's.  The compile ran past its stop, so it is a compile-time failure, not compiled
    again (the case has no time left for it)."""
    def make(stages):
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM})  # (as in a native call)
        try:
            time.sleep(0.5)
        finally:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGALRM})
        time.sleep(5)  # (not reached)

    with pytest.raises(oracle.CompileTimeError) as e, oracle.time_limit(0.3):
        compile_time.measure(make, "the program", 0.1, stop=0.2)
    assert len(e.value.tries) == 1 and e.value.tries[0].cut
    first = str(e.value).splitlines()[0]
    assert first.startswith("compile over the limit of 0.1 s (not compiled again: the case's time ran out): "
                            "stopped after 0.5"), first
    assert "by the case's limit: one native call outlasted the compile's own" in first


def test_time_limits_nest():
    with pytest.raises(oracle.Hang) as e, oracle.time_limit(0.3) as outer:
        with oracle.time_limit(5.0):
            pass
        time.sleep(3)  # the outer limit holds after the inner block ended
    assert e.value.limit is outer
    with pytest.raises(oracle.Hang) as e, oracle.time_limit(5.0), oracle.time_limit(0.2) as inner:
        time.sleep(3)
    assert e.value.limit is inner


def test_the_campaign_records_a_compile_time_failure(monkeypatch, tmp_path):
    """Written to the failures folder as a failure of its own kind.  Shrinking it stops after
    SHRINK_SECONDS (each try compiles twice, slowly): then the first failure found is recorded."""
    monkeypatch.setattr(campaign, "SHRINK_SECONDS", 0)
    slow_stage(monkeypatch, extract, "extract", 0.2)
    c = campaign.Campaign(tmp_path, verbose=False, compile_seconds=0.1)
    with compile_time.limit(c.compile_seconds):
        c._round("parity", 1, 3)
    [path] = c.failures.values()
    text = path.read_text()
    assert path.name.startswith("compile-time-")
    assert text.startswith("# kind: compile-time, config: ") and "(parity campaign)" in text.splitlines()[0]
    assert "# CompileTimeError: compile over the limit of 0.1 s twice: " in text
    assert "\n# shrunk for 0 s at most\n" in text
    assert "\ndef k(" in text and "longest stage: extract" in text
    assert c.counts[("compile-time", "FAIL")] >= 1
    assert "over it twice (failures): " in c.summary()


def test_the_compile_seconds_option():
    assert cli.parser().parse_args([]).compile_seconds == 2.0
    assert cli.parser().parse_args(["--compile-seconds", "0.5"]).compile_seconds == 0.5
    for bad in ("0", "-1", "soon", "inf"):
        with pytest.raises(SystemExit):
            cli.parser().parse_args(["--compile-seconds", bad])
    with pytest.raises(ValueError, match="positive"), compile_time.limit(0):
        pass

