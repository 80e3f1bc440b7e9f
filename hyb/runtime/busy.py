"""Threads a call of a parallel kernel runs on, given what else the machine is running.

A parallel loop splits its iterations among its threads and its call returns when the last block
is done.  Where another process keeps every CPU busy, one of those threads waits for a time slice
of the scheduler (milliseconds), and a call that takes 0.2 ms alone took 7-8 ms in one call out of
twenty.  One thread competing with the neighbour loses far less.  So each call of a kernel whose
code has parallel loops asks :func:`threads_now` how many of its threads to use:

* the number of runnable tasks of the whole system (the fourth field of ``/proc/loadavg``,
  ``runnable/total``) is read at most every :data:`CHECK_SECONDS`, and the answer kept between;
* the tasks that are this process's own are taken out: the calling thread, and the workers of the
  last parallel call where it ended less than :data:`SPIN_SECONDS` ago (libgomp's workers spin for
  a few milliseconds after a parallel region before they sleep);
* the rest run on as many CPUs, counted as the fewest seen in the last :data:`READINGS` reads: a
  task that is runnable for a moment (a kernel thread, a short command, our own worker spinning a
  little past :data:`SPIN_SECONDS`) shows in one read and not the next, where a busy neighbour
  shows in every one, so a passing task does not take a call's threads away for the reads after;
* the call takes the CPUs left, at least one and at most the threads it was given.

On an idle machine every call gets its threads.  ``HYB_ADAPT_THREADS=0`` in the environment (read
when hyb is imported) turns the check off, as does a system without ``/proc/loadavg``.  The C
dispatcher (``hyb/runtime/_fastcall.c``) does the same in C, with state of its own.
"""
from __future__ import annotations

import os
import time

CHECK_SECONDS = 0.002
SPIN_SECONDS = 0.005
READINGS = 3
LOADAVG = "/proc/loadavg"
ENABLED = os.environ.get("HYB_ADAPT_THREADS", "1") != "0"

_state = {"checked": -1.0, "free": None, "ended": -1.0, "last": 1, "seen": ()}


def runnable(path: str) -> int | None:
    """The runnable tasks of the system, or None where it cannot be read."""
    try:
        with open(path, "rb") as f:
            fields = f.read(256).split()
        return int(fields[3].split(b"/")[0])
    except (OSError, IndexError, ValueError):
        return None


def others(running: int, mine: int) -> int:
    """Runnable tasks of other processes: ``running`` in all, ``mine`` of them ours."""
    return max(0, running - mine)


def threads_now(wanted: int, now: float | None = None) -> int:
    """The threads to run a call on that was given ``wanted`` (see the module doc)."""
    if wanted <= 1 or not ENABLED:
        return wanted
    now = time.monotonic() if now is None else now
    if now - _state["checked"] >= CHECK_SECONDS:
        running = runnable(LOADAVG)
        mine = 1 + (_state["last"] - 1 if now - _state["ended"] < SPIN_SECONDS else 0)
        if running is None:
            _state["free"], _state["seen"] = None, ()
        else:
            _state["seen"] = (_state["seen"] + (others(running, mine),))[-READINGS:]
            _state["free"] = (os.cpu_count() or 1) - min(_state["seen"])
        _state["checked"] = now
    free = _state["free"]
    return wanted if free is None else max(1, min(wanted, free))


def ran(threads: int, now: float | None = None):
    """Note that a call has just ended, run on ``threads``."""
    if threads > 1:
        _state["ended"] = time.monotonic() if now is None else now
        _state["last"] = threads
