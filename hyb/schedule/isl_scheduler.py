"""isl's scheduler under a time limit: it runs in a forked child so that a schedule search that
takes too long can be stopped, and the kernel falls back to the original order."""
from __future__ import annotations

import os
import select
import signal
import time
import warnings

import islpy as isl

def compute_schedule(sc: isl.ScheduleConstraints, timeout: float):
    """isl's schedule for ``sc``, or (None, why).  isl cannot be interrupted and its operation
    limit does not bound its time, so where the system can fork, the scheduler runs in a child
    process that is killed after ``timeout`` seconds; the schedule comes back as text."""
    if not hasattr(os, "fork") or timeout <= 0:
        try:
            return sc.compute_schedule(), ""
        except isl.Error:
            return None, "gave up (operation limit)"
    r, w = os.pipe()
    with warnings.catch_warnings():
        # Fork with threads (Python's DeprecationWarning; JAX's RuntimeWarning from its at-fork
        # hook): harmless here, the child runs isl and writes to a pipe, nothing else.
        warnings.simplefilter("ignore", DeprecationWarning)
        warnings.filterwarnings("ignore", message=r"os\.fork\(\) was called", category=RuntimeWarning)
        pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        code = 1
        try:
            os.close(r)
            text = sc.compute_schedule().to_str().encode()
            view = memoryview(text)
            while view:
                view = view[os.write(w, view):]
            code = 0
        except BaseException:
            pass
        os._exit(code)
    os.close(w)
    chunks, deadline, timed_out = [], time.monotonic() + timeout, False
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([r], [], [], left)[0]:
                timed_out = True
                break
            chunk = os.read(r, 1 << 16)
            if not chunk:
                break
            chunks.append(chunk)
    finally:
        os.close(r)
        if timed_out:
            os.kill(pid, signal.SIGKILL)
        _, status = os.waitpid(pid, 0)
    if timed_out:
        return None, f"took longer than {timeout:g} s (schedule={{'timeout': ...}} changes the limit)"
    if status != 0 or not chunks:
        return None, "gave up (operation limit)"
    return isl.Schedule.read_from_str(isl.DEFAULT_CONTEXT, b"".join(chunks).decode()), ""
