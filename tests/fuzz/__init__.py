"""Differential fuzzing of hyb.

* :mod:`.programs` draws random *valid* kernels (tests/kernelgen.py, loop nests of depth 1-4) together
  with random kernel options (tile sizes, the original order, threads on or off, interchange, fusion;
  never fast-math).
* :mod:`.oracle` judges one program: compiled == ``emulate`` (``check_parity``), the derived gradient ==
  central finite differences (``check_grad``), and mutated source text only ever gives a ``HybridError``
  or a kernel (``check_frontend``, with a hang detector).
* :mod:`.compile_time` times every compile the judges make (parse, check, middle end, LLVM; not the
  run): a program that takes longer than the limit (2 s, ``--compile-seconds``) twice, each time
  compiled afresh, is a compile-time failure; a compile that does not end is stopped.
* :mod:`.perf` (the kind ``perf``, asked for by name) times each program in its chosen schedule and in
  ``schedule="original"`` on scaled-up inputs: a chosen schedule more than 1.25x slower, timed twice, is a
  failure.  ``python -m tests.fuzz.perf_bench`` does the same for every benchmark kernel.
* :mod:`.campaign` runs them for a time budget with progress output and writes every failure, shrunk by
  hypothesis, to a directory: ``python -m tests.fuzz --minutes 10``.

tests/fuzz/test_fuzz.py runs a bounded, derandomized campaign in CI and holds the regression tests for the
bugs found.
"""
from __future__ import annotations
