"""How long each stage of one compile took (``inspect("timings")``, ``hyb compile --time``).

A :class:`Timings` record is the ``(stage, seconds)`` pairs of one compile, in the order the
stages ran.  Like the pipeline's other records it is never changed: it travels with the records
it describes (``MiddleEnd.timings``, ``CompiledKernel.timings``) and records are joined with
``+``.  A :class:`Clock` measures the stages of one compile with :func:`time.perf_counter`::

    clock = Clock()
    with clock.stage("extract"):
        poly = extract(typed)
    clock.record()  # -> Timings((("extract", 0.0012),))

Each compile makes its own clock, so kernels compiled on several threads share nothing.
"""
from __future__ import annotations

import math
import time
from contextlib import contextmanager
from dataclasses import dataclass


@dataclass(frozen=True)
class Timings:
    """The seconds each stage of one compile took, in the order the stages ran."""

    stages: tuple = ()  # (stage name, seconds) pairs
    loaded: bool = False  # the code was loaded from the disk cache: the stages are the load's, not a compile's

    def __add__(self, other: Timings) -> Timings:
        return Timings(self.stages + other.stages, self.loaded or other.loaded)

    @property
    def total(self) -> float:
        return sum(seconds for _, seconds in self.stages)

    def describe(self, title: str) -> str:
        """``title``, then one line per stage and the total, the times aligned."""
        rows = [(name, seconds) for name, seconds in self.stages] + [("total", self.total)]
        width = max(len(name) for name, _ in rows) + 2
        return title + "\n" + "".join(f"  {name:<{width}}{format_seconds(seconds):>10}\n" for name, seconds in rows)


def format_seconds(seconds: float) -> str:
    """A time to 3 significant digits: milliseconds below a second (to a microsecond at most), else seconds."""
    if seconds >= 1.0:
        return f"{seconds:.{max(0, 2 - math.floor(math.log10(seconds)))}f} s"
    ms = seconds * 1e3
    digits = 3 if ms <= 0 else min(3, max(0, 2 - math.floor(math.log10(ms))))
    return f"{ms:.{digits}f} ms"


class Clock:
    """The stages of one compile as they run; :meth:`record` gives them as a :class:`Timings`."""

    def __init__(self):
        self._stages: list = []
        self._loaded = False

    @contextmanager
    def stage(self, name: str):
        """Time the block as the stage ``name`` (a block that raises records nothing)."""
        start = time.perf_counter()
        yield
        self._stages.append((name, time.perf_counter() - start))

    @contextmanager
    def holding(self, lock, name: str):
        """Hold ``lock`` for the block; the time spent waiting for it, where another thread held
        it, is the stage ``name``."""
        if not lock.acquire(blocking=False):
            start = time.perf_counter()
            lock.acquire()
            self._stages.append((name, time.perf_counter() - start))
        try:
            yield
        finally:
            lock.release()

    now = staticmethod(time.perf_counter)

    def add(self, name: str, seconds: float) -> None:
        """A stage timed by the caller (``now()`` before and after it)."""
        self._stages.append((name, max(0.0, seconds)))

    def include(self, timings: Timings) -> None:
        """The stages of another record (a part of this compile timed on its own), as having run now."""
        self._stages.extend(timings.stages)
        self._loaded = self._loaded or timings.loaded

    def record(self, loaded: bool = False) -> Timings:
        """The stages so far (``loaded``: they are the load of code from the disk cache)."""
        return Timings(tuple(self._stages), loaded or self._loaded)
