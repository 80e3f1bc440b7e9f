"""A one-line progress report on stderr for work that takes more than a second.

    with Progress("compiling matmul") as p:
        ...
        p.step("llvm-opt")

Nothing is written when stderr is not a terminal, nor for work that finishes within
``delay`` seconds; the line is erased when the work ends.
"""
from __future__ import annotations

import sys
import threading
import time


class Progress:
    def __init__(self, what: str, stream=None, delay: float = 1.0, interval: float = 0.1, enabled: bool | None = None):
        self.stream = stream if stream is not None else sys.stderr
        if enabled is None:
            enabled = bool(getattr(self.stream, "isatty", lambda: False)())
        self.enabled = enabled
        self.what = what
        self.detail = ""
        self.delay = delay
        self.interval = interval
        self.shown = False
        self._start = 0.0
        self._stop = threading.Event()
        self._thread = None
        self._lock = threading.Lock()

    def step(self, detail: str):
        """Say what is being done now."""
        self.detail = detail

    def __enter__(self):
        self._start = time.perf_counter()
        if self.enabled:
            self._thread = threading.Thread(target=self._run, name="hyb-progress", daemon=True)
            self._thread.start()
        return self

    def _run(self):
        if self._stop.wait(self.delay):
            return
        while not self._stop.is_set():
            self._draw()
            self._stop.wait(self.interval)

    def _draw(self):
        elapsed = time.perf_counter() - self._start
        text = f"hyb: {self.what}" + (f": {self.detail}" if self.detail else "") + f" ({elapsed:.1f} s)"
        with self._lock:
            self.stream.write("\r\x1b[K" + text)
            self.stream.flush()
            self.shown = True

    def __exit__(self, *exc):
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        with self._lock:
            if self.shown:
                self.stream.write("\r\x1b[K")
                self.stream.flush()
        return False
