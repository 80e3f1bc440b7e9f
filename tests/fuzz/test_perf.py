"""The performance oracle (tests/fuzz/perf.py): a chosen schedule slower than the original order by
more than the limit, timed twice, is a failure naming the program and both times; one slow in the
first timing only passes; a fast one passes.  The times here come from a fake clock or a fake
timing, never from hyb's real speed."""
from __future__ import annotations

import re

import numpy as np
import pytest

from tests import kernelgen as kg
from tests.fuzz import campaign, perf, programs

SCALE = '''
def k(x):
    y = output_tensor(x.shape, x.dtype)
    for i in range(x.shape[0]):
        for j in range(x.shape[1]):
            y[i, j] = 2.0 * x[i, j] + 1.0
    return y
'''


class FakeClock:
    """A clock that moves only when a fake kernel runs: each run of a kernel advances it by that
    kernel's next time."""

    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now

    def kernel(self, seconds):
        times = iter(seconds)

        def run():
            self.now += next(times)
        return run


def timed(chosen, original):
    clock = FakeClock()
    return perf.judge({"chosen": clock.kernel(chosen), "original": clock.kernel(original)}, clock=clock), clock


def test_a_slow_schedule_fails_and_a_good_one_passes():
    (first, merged), _ = timed([0.003] * 20, [0.002] * 20)  # 1.5x, both timings
    assert first.ratio() == pytest.approx(1.5) and merged.ratio() == pytest.approx(1.5)
    assert perf.verdict(first, merged)
    (first, merged), _ = timed([0.0021] * 20, [0.002] * 20)  # 1.05x: not timed again
    assert merged is None and not perf.verdict(first, merged)
    (first, merged), _ = timed([0.001] * 20, [0.002] * 20)  # faster
    assert not perf.verdict(first, merged)


def test_noise_in_the_first_timing_is_timed_again_and_passes():
    # the chosen kernel's first five runs were slowed by a neighbour; its later ones are not
    (first, merged), _ = timed([0.005] * perf.ROUNDS + [0.002] * 20, [0.002] * 20)
    assert first.ratio() == pytest.approx(2.5)
    assert merged is not None and merged.ratio() == pytest.approx(1.0)
    assert not perf.verdict(first, merged)


def test_the_least_time_counts_and_the_runs_interleave():
    clock = FakeClock()
    order = []

    def kernel(name, seconds):
        run = clock.kernel(seconds)
        return lambda: (order.append(name), run())

    t = perf.time_pair({"chosen": kernel("c", [0.004, 0.002, 0.009, 0.003, 0.002]),
                        "original": kernel("o", [0.003, 0.001, 0.002, 0.008, 0.004])}, rounds=5, clock=clock)
    assert t.best == pytest.approx({"chosen": 0.002, "original": 0.001})
    assert order == ["c", "o", "o", "c", "c", "o", "o", "c", "c", "o"]


def test_a_slow_kernel_gets_fewer_runs():
    (first, _), _ = timed([3.0] * 20, [0.002] * 20)
    assert first.runs["chosen"] == 2 and first.runs["original"] == perf.ROUNDS


def failing_timing(calls, resets):
    """A fake timing: the chosen kernel 2x slower, both times."""
    for name in calls:  # the kernels and their resets run for real, once each
        resets[name]()
        calls[name]()
    t = perf.Timing({"chosen": 0.004, "original": 0.002}, {"chosen": 5, "original": 5})
    return t, t


def test_the_failure_names_the_program_the_options_and_both_times():
    x = np.arange(12.0).reshape(3, 4)
    prog = kg.Program(SCALE, [x], (), x.shape, False, {"fastmath": False, "shapes": "auto"})
    perf.reset_tally()
    with pytest.raises(perf.PerfError) as e:
        perf.check_perf(prog, timings=failing_timing)
    text = str(e.value)
    assert text.splitlines()[0].endswith(": 2.00x")
    assert "chosen 4.000 ms, original 2.000 ms (2.00x" in text
    assert "'threads': 1, 'schedule': 'original'}" in text
    assert text.endswith(SCALE.strip())
    rows, cols = map(int, re.search(r"run on: \(float64\[(\d+), (\d+)\]\)", text).groups())
    assert cols == rows + 1 and rows > 3  # (each dimension v as N + v)
    assert perf.TALLY.failures == 1 and perf.TALLY.worst == pytest.approx(2.0)


def test_a_good_schedule_passes_end_to_end():
    x = np.arange(12.0).reshape(3, 4)
    prog = kg.Program(SCALE, [x], (), x.shape, False, {"fastmath": False})
    t = perf.Timing({"chosen": 0.002, "original": 0.002}, {"chosen": 5, "original": 5})
    assert perf.check_perf(prog, timings=lambda calls, resets: (t, None)) == "ok, within the limit"
    prog.options = {"schedule": "original"}
    assert perf.check_perf(prog) == "skipped: original order drawn"


def test_scaled_arguments_keep_the_programs_shapes():
    a = np.arange(6, dtype=np.int32).reshape(2, 3)
    b = perf.grow(a, 10)
    assert b.shape == (12, 13) and b.dtype == np.int32 and list(b.reshape(-1)[:8]) == [0, 1, 2, 3, 4, 5, 0, 1]
    assert perf.grow(np.zeros((0, 3)), 10).shape == (10, 13)
    assert perf.grow(np.float32(2.0), 10) == 2.0 and perf.grow(3, 10) == 3


def test_the_campaign_records_a_perf_failure(tmp_path, monkeypatch):
    def slow(prog, *args, **kwargs):
        raise perf.PerfError("chosen schedule slower than the original order by over 1.25x (test): 2.00x")

    monkeypatch.setattr(perf, "check_perf", slow)
    c = campaign.Campaign(tmp_path, verbose=False)
    monkeypatch.setattr(campaign, "SHRINK_SECONDS", 0.5)
    c.kinds = ("perf",)
    c._round("perf", 2, 1)
    files = list(tmp_path.glob("perf-*.txt"))
    assert len(files) == 1 and c.counts[("perf", "FAIL")] >= 1
    assert "PerfError: chosen schedule slower" in files[0].read_text()
    assert "perf:" in c.summary()


def test_perf_options_are_the_compilers_choice():
    from hypothesis import given, settings

    seen = []

    @settings(max_examples=30, database=None, deadline=None)
    @given(programs.perf_options())
    def draw(opts):
        seen.append(opts)
        sched = opts.get("schedule", "auto")
        assert sched == "auto" or all(v is False for v in sched.values())
        assert opts["fastmath"] is False and "vector_math" not in (sched if isinstance(sched, dict) else {})

    draw()
    assert seen
