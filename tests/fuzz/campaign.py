"""Run the fuzzers for a time budget, with progress output; failures are shrunk by hypothesis and
written to a directory, one file per distinct failure.  Every compile is timed (compile_time): one
over the limit twice is a failure of the kind "compile-time", whichever campaign made the program.
The kind "perf" times each program's chosen schedule against its original order (perf)."""
from __future__ import annotations

import hashlib
import random
import time
import traceback
from collections import Counter
from pathlib import Path

from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import seed as hseed
from hypothesis import strategies as st

from . import compile_time, oracle, perf, programs

KINDS = ("parity", "oob", "grad", "frontend", "perf")
DEFAULT_KINDS = ("parity", "oob", "grad", "frontend")  # perf times runs: asked for by name
COMPILE_TIME = "compile-time"  # the kind of a compile over the limit, found by any of them
# No "explain" phase: it traces every line of the failing case (emulate included) and takes minutes.
CASE_SECONDS = 60  # a case that takes longer (Python-level) is reported as a hang
# A compile-time or perf failure is shrunk for this long at most (each try compiles its program twice,
# for seconds, and a perf try times it too): then the round's other examples pass untried and the
# smallest failure found is recorded
SHRINK_SECONDS = 60
PHASES = [Phase.explicit, Phase.reuse, Phase.generate, Phase.target, Phase.shrink]


def heading(kind, exc):
    """(the first line of a failure, the signature that names its file): the same bug with other
    numbers (sizes, seconds) goes to one file."""
    head = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"[:200]
    same = "".join(c for c in head if not c.isdigit())[:160]
    return head, hashlib.sha1(f"{kind}:{same}".encode()).hexdigest()[:10]


class Campaign:
    def __init__(self, out_dir="fuzz-failures", verbose=True, compile_seconds=compile_time.DEFAULT_SECONDS):
        self.out = Path(out_dir)
        self.compile_seconds = compile_seconds
        self.tally = compile_time.reset_tally()
        self.perf = perf.reset_tally()
        self.kinds = ()
        self.runaway = ""  # why the campaign ended early: a compile thread that would not stop
        self.verbose = verbose
        self.counts = Counter()  # (kind, outcome) -> n; for grad, outcome is "<case source> <outcome>"
        self.forms = Counter()  # (case source, fn:form:init of a running extremum, given the closed form) -> n
        self.failures = {}  # signature -> path
        self.last_failing = None
        self.started = time.time()
        self.current = None
        if out_dir:
            self.out.mkdir(parents=True, exist_ok=True)
            self.current = self.out / "current-case.txt"

    # -------------------------------------------------------------- one round of hypothesis examples
    def _round(self, kind, n, seed_value):
        strategy = {"parity": programs.cases(), "oob": programs.cases({"oob": programs.OUT_OF_BOUNDS}),
                    "grad": st.tuples(programs.grad_cases(), st.integers(0, 2 ** 31)),
                    "perf": programs.perf_cases()}[kind]

        shrink_until = []  # when a compile-time failure has been shrunk long enough

        @hseed(seed_value)
        @settings(max_examples=n, deadline=None, database=None, derandomize=False, print_blob=False,
                  suppress_health_check=list(HealthCheck), report_multiple_bugs=False,
                  phases=PHASES)
        @given(strategy)
        def run(case):
            if self.runaway or (shrink_until and time.time() > shrink_until[0]):
                return  # (the round ends quickly)
            if kind == "grad":
                (name, prog), s = case
            else:
                name, prog = case
            if self.current:  # what is running now, for a native hang or a crash
                self.current.write_text(f"# kind: {kind}, config: {name}\n{prog.describe()}\n")
            try:
                with oracle.time_limit(self.case_seconds()):
                    if kind == "grad":
                        res = oracle.check_gradient_case(name, prog, s)
                    elif kind == "perf":
                        res = perf.check_perf(prog)
                    else:
                        res = oracle.check_parity(prog, allow_index_errors=(kind == "oob"))
            except Exception as e:
                seed_note = f"oracle seed: {s} (values drawn from it)" if kind == "grad" else ""
                if isinstance(e, oracle.CompileTimeError):
                    shrink_until[:] = shrink_until or [time.time() + SHRINK_SECONDS]
                    note = f"shrunk for {SHRINK_SECONDS} s at most" + (f"; {seed_note}" if seed_note else "")
                    self.last_failing = (COMPILE_TIME, f"{name} ({kind} campaign)", prog, e,
                                         traceback.format_exc(), note)
                    self.stop_if_runaway(e)
                elif isinstance(e, perf.PerfError):
                    shrink_until[:] = shrink_until or [time.time() + SHRINK_SECONDS]
                    self.last_failing = (kind, name, prog, e, traceback.format_exc(),
                                         f"shrunk for {SHRINK_SECONDS} s at most; the program ran on its "
                                         "arguments scaled up (the message's sizes), not on those below")
                else:
                    self.last_failing = (kind, name, prog, e, traceback.format_exc(), seed_note)
                raise
            self.counts[(kind, f"{name} {res}" if kind == "grad" else res)] += 1
            if kind == "grad" and getattr(prog, "extremum", ""):
                for ext in prog.extremum.split(","):
                    m, form = ext.split("=")
                    self.forms[(name, form, m in getattr(prog, "closed", ()))] += 1

        try:
            run()
        except Exception:  # noqa: BLE001 - what run() raised is recorded (hypothesis may raise its own about it)
            self.record(*self.last_failing)

    def record(self, kind, config, prog, exc, tb, note=""):
        head, sig = heading(kind, exc)
        self.counts[(kind, "FAIL")] += 1
        if sig in self.failures:
            return
        self.out.mkdir(parents=True, exist_ok=True)
        path = self.out / f"{kind}-{sig}.txt"
        path.write_text(f"# kind: {kind}, config: {config}\n# {head}\n" + (f"# {note}\n" if note else "")
                        + f"\n{prog.describe()}\n\n{tb}")
        self.failures[sig] = path
        print(f"\n!! {kind} failure ({head}) -> {path}", flush=True)

    # -------------------------------------------------------------- front end
    def _frontend(self, n, rng):
        seeds = self._frontend_seeds(rng)
        for _ in range(n):
            if self.runaway:
                return
            src, args = rng.choice(seeds)
            text = oracle.mutate(src, rng)
            try:
                res = oracle.check_frontend(text, args, run=rng.random() < 0.1)
            except oracle.CompileTimeError as e:
                self.record_text(COMPILE_TIME, text, e, traceback.format_exc(), "a front-end mutant")
                self.stop_if_runaway(e)
                continue
            except Exception as e:  # noqa: BLE001 - anything but a HybridError is a bug
                self.record_text("frontend", text, e, traceback.format_exc())
                continue
            self.counts[("frontend", res)] += 1

    def _frontend_seeds(self, rng):
        """Eight generated programs (new ones each round) and the hand-written corpus."""
        from . import corpus
        seeds = []

        @hseed(rng.randrange(2 ** 32))
        @settings(max_examples=8, database=None, derandomize=False, phases=[Phase.generate],
                  suppress_health_check=list(HealthCheck))
        @given(programs.cases(options=False))
        def collect(case):
            seeds.append((case[1].source, case[1].args))

        collect()
        return seeds + corpus.cases()

    def record_text(self, kind, text, exc, tb, what=""):
        head, sig = heading(kind, exc)
        self.counts[(kind, "FAIL")] += 1
        if sig in self.failures:
            return
        self.out.mkdir(parents=True, exist_ok=True)
        path = self.out / f"{kind}-{sig}.txt"
        path.write_text(f"# kind: {kind}" + (f", {what}" if what else "") + f"\n# {head}\n\n{text}\n\n{tb}")
        self.failures[sig] = path
        print(f"\n!! {kind} failure ({head}) -> {path}", flush=True)

    # -------------------------------------------------------------- compile time
    def case_seconds(self):
        """The limit of one case: room for two stopped compiles besides its runs."""
        return max(CASE_SECONDS, 3 * compile_time.stop_after(self.compile_seconds))

    def stop_if_runaway(self, exc):
        if exc.runaway and not self.runaway:
            self.runaway = (f"a stopped compile's thread is still running (in a native call); it may hold locks "
                            f"every compile needs, so the campaign ends here: {exc.tries[-1].describe()}")
            print(f"\n!! {self.runaway}", flush=True)

    # -------------------------------------------------------------- the loop
    def run(self, minutes, kinds=DEFAULT_KINDS, seed=None, round_size=25):
        rng = random.Random(seed)
        self.kinds = tuple(kinds)
        r = 0
        compile_time.warm_up()
        deadline = time.time() + 60 * minutes  # (from after the warm-up: every kind gets one round at least)
        with compile_time.limit(self.compile_seconds):
            while (r < len(kinds) or time.time() < deadline) and not self.runaway:
                kind = kinds[r % len(kinds)]
                r += 1
                if kind == "frontend":
                    self._frontend(round_size * 20, rng)
                else:
                    self._round(kind, round_size, rng.randrange(2 ** 32))
                if self.verbose:
                    self.progress(deadline)
        return self

    def summary(self):
        """Outcomes by kind (and, for grad, by case source), then the running extrema drawn, then the
        compile times (how many, the slowest, those over the limit)."""
        lines = [f"{kind}: {res}: {n}" for (kind, res), n in sorted(self.counts.items())]
        for (name, form, closed), n in sorted(self.forms.items()):
            lines.append(f"running extremum ({name}) {form}{' [closed form]' if closed else ''}: {n}")
        lines.append(self.tally.describe(self.compile_seconds))
        if "perf" in self.kinds:
            lines.append(self.perf.describe())
        if self.runaway:
            lines.append(f"ended early: {self.runaway}")
        return "\n".join(lines)

    def progress(self, deadline):
        by_kind = {}
        for (kind, res), n in sorted(self.counts.items()):
            by_kind.setdefault(kind, []).append(f"{res}={n}")
        left = max(0, deadline - time.time())
        print(f"[{time.time() - self.started:6.0f}s, {left:5.0f}s left] "
              + "; ".join(f"{k}: {', '.join(v)}" for k, v in by_kind.items())
              + f"; slowest compile: {self.tally.slowest:.2f} s"
              + (f"; worst chosen/original: {self.perf.worst:.2f}x" if "perf" in self.kinds else "")
              + f"; distinct failures: {len(self.failures)}", flush=True)
