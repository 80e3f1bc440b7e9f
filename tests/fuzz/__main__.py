"""python -m tests.fuzz --minutes N [--kinds parity,oob,grad,frontend,perf] [--seed S] [--out DIR] [--compile-seconds T]"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile


def seconds(text):
    """A positive number of seconds (argparse's type for --compile-seconds)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds, not {text!r}")
    return value


def parser():
    p = argparse.ArgumentParser(prog="python -m tests.fuzz", description=__doc__)
    p.add_argument("--minutes", type=float, default=5.0, help="time budget (default 5)")
    p.add_argument("--kinds", default="parity,oob,grad,frontend",
                   help="comma-separated: parity (compiled vs emulate), oob (run-time index errors), "
                        "grad (gradients vs finite differences), frontend (mutated source text), perf (the chosen "
                        "schedule's run time against the original order's, on scaled-up inputs: over 1.25x "
                        "slower, timed twice, is a failure; not in the default)")
    p.add_argument("--seed", type=int, default=None, help="seed of the campaign (default: random)")
    p.add_argument("--round-size", type=int, default=25, help="hypothesis examples per round")
    p.add_argument("--out", default="fuzz-failures", help="directory for failure reports")
    p.add_argument("--keep-cache", action="store_true", help="use the user's kernel cache (default: a fresh one)")
    p.add_argument("--compile-seconds", type=seconds, default=2.0, metavar="T",
                   help="the most seconds a program may take to compile (parse, check, middle end, LLVM), in "
                        "every kind; one over it twice is a compile-time failure (default 2)")
    return p


def main(argv=None):
    p = parser()
    a = p.parse_args(argv)
    if not a.keep_cache:
        os.environ["HYB_CACHE_DIR"] = tempfile.mkdtemp(prefix="hyb-fuzz-cache-")
    from .campaign import KINDS, Campaign
    kinds = tuple(k.strip() for k in a.kinds.split(",") if k.strip())
    bad = [k for k in kinds if k not in KINDS]
    if bad:
        p.error(f"unknown kind {bad[0]!r}; kinds: {', '.join(KINDS)}")
    c = Campaign(a.out, compile_seconds=a.compile_seconds).run(a.minutes, kinds, a.seed, a.round_size)
    summary = c.summary()
    print(summary)
    if a.out:
        os.makedirs(a.out, exist_ok=True)
        with open(os.path.join(a.out, "summary.txt"), "w") as f:
            f.write(summary + "\n")
        if "perf" in kinds and c.perf.worst_source:
            with open(os.path.join(a.out, "slowest-schedule.txt"), "w") as f:
                f.write(f"# the largest chosen/original run-time ratio of the campaign: {c.perf.worst:.2f}x\n\n"
                        f"{c.perf.worst_source}")
        if c.tally.slowest_source:
            with open(os.path.join(a.out, "slowest-compile.txt"), "w") as f:
                f.write(f"# the slowest compile of the campaign: {c.tally.slowest:.2f} s "
                        f"(limit {a.compile_seconds:g} s)\n\n{c.tally.slowest_source}")
    print(f"done: {sum(n for (_, r), n in c.counts.items() if r != 'FAIL')} cases passed or skipped, "
          f"{len(c.failures)} distinct failures" + (f" in {a.out}/" if c.failures else ""))
    return 1 if c.failures else 0


if __name__ == "__main__":
    sys.exit(main())
