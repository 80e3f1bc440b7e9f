"""The typed-kernel rewrites, one record each, run in a declared order by one driver.

Each rewrite of the typed kernel that runs before extraction (:data:`REWRITES`) is a
:class:`Rewrite`: its name, the clock stage it is timed under, its gate (the targets and
``schedule=`` options it runs for: :class:`Gate`), ``match`` (what it finds in a kernel: a
:class:`Match`, holding each decision, applied or refused with the reason) and ``apply`` (the
kernel with what was found rewritten).  :func:`run` runs them in order on a kernel for one
target and resolved :class:`~hyb.schedule.options.ScheduleOptions`, and returns the rewritten
kernel with a :class:`Report`: for each rewrite, whether its gate let it run (and why not) and
its decisions.  ``Report.decisions()`` are the texts ``inspect("schedule")`` shows, in the order
the rewrites took them; ``Report.describe()`` is ``inspect("rewrites")``.
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Callable

from ..dsl import tir
from . import accumulate, argext, guarded, privatise, recompute, reuse, transpose


@dataclass(frozen=True)
class Applied:
    """A decision that rewrote part of the kernel; ``text`` is the decision as the schedule shows it."""

    text: str


@dataclass(frozen=True)
class Refused:
    """A candidate the rewrite left as written: ``what`` it is and the ``reason``; ``text`` is the
    decision as the schedule shows it."""

    what: str
    reason: str
    text: str


class _Decided:
    """Reading ``decisions`` (Applied and Refused records) by kind."""

    decisions: tuple

    @property
    def applied(self) -> tuple:
        return tuple(d for d in self.decisions if isinstance(d, Applied))

    @property
    def refused(self) -> tuple:
        return tuple(d for d in self.decisions if isinstance(d, Refused))


@dataclass(frozen=True)
class Match(_Decided):
    """What a rewrite found in a kernel: the kernel with it rewritten (``typed``) and the
    decisions (:class:`Applied`, :class:`Refused`) in the order the rewrite took them."""

    typed: tir.TypedKernel
    decisions: tuple = ()


@dataclass(frozen=True)
class Condition:
    """One test of a gate: ``holds(target, opts)``, and what is said where it does not."""

    holds: Callable
    otherwise: str


@dataclass(frozen=True)
class Gate:
    """The targets and options a rewrite runs for: every condition holds (none: always)."""

    conditions: tuple = ()

    def why_not(self, target, opts) -> str | None:
        """The first condition that does not hold, in words, or None where the rewrite runs."""
        for c in self.conditions:
            if not c.holds(target, opts):
                return c.otherwise
        return None


def _taken(m: Match) -> tir.TypedKernel:
    return m.typed


@dataclass(frozen=True)
class Rewrite:
    """A typed-kernel rewrite: ``name``; ``stage``, the clock stage it is timed under
    (``inspect("timings")``); ``gate``; ``match(typed) -> Match``; ``apply(match) -> typed``."""

    name: str
    stage: str
    gate: Gate
    match: Callable
    apply: Callable = _taken

    def applies_when(self, target, opts) -> bool:
        """Whether the rewrite runs for ``target`` under the resolved ``opts``."""
        return self.gate.why_not(target, opts) is None


def _every_decision_applied(rewrite: Callable) -> Callable:
    """``match`` of a pass ``rewrite(typed) -> (typed, decisions)`` each of whose decisions is a
    rewrite it made."""
    def match(typed: tir.TypedKernel) -> Match:
        typed, decisions = rewrite(typed)
        return Match(typed, tuple(Applied(d) for d in decisions))
    return match


def _accumulate(typed: tir.TypedKernel) -> Match:
    """accumulate's decisions: ``<what> kept: <why>`` are refusals (:data:`accumulate.KEPT`), the
    others rewrites."""
    typed, decisions = accumulate.rewrite(typed)
    out = []
    for d in decisions:
        what, kept, why = d.partition(accumulate.KEPT)
        out.append(Refused(what, why, d) if kept else Applied(d))
    return Match(typed, tuple(out))


# the gates' conditions
CPU = Condition(lambda target, opts: target.kind == "cpu", "the target is not the CPU")
NOT_ORIGINAL = Condition(lambda target, opts: not opts.original, 'schedule="original"')


def _on(option: str, otherwise: str) -> Condition:
    return Condition(lambda target, opts: bool(getattr(opts, option)), otherwise)


# the rewrites, in the order they run
REWRITES = (
    # temporaries allocated in `parallel` loops get a copy per iteration (on every target and
    # schedule: nothing else keeps such a loop parallel)
    Rewrite("privatise", "privatise", Gate(), _every_decision_applied(privatise.rewrite)),
    # scalar accumulators summed in the cell they are stored to
    Rewrite("accumulate", "accumulate", Gate((CPU, NOT_ORIGINAL)), _accumulate),
    # cheap elementwise temporaries computed at their reads
    Rewrite("recompute", "recompute",
            Gate((CPU, NOT_ORIGINAL, _on("fuse", "fuse is off"), _on("recompute", "recompute is off"))),
            _every_decision_applied(recompute.rewrite)),
    # a math function computed in one loop and again in a later one stored in the later one's cell
    Rewrite("reuse", "reuse", Gate((CPU, NOT_ORIGINAL)), _every_decision_applied(reuse.rewrite)),
    # running extrema with their index, as vector passes
    Rewrite("argext", "argext", Gate((CPU, NOT_ORIGINAL, _on("reassociate", "sums are not reassociated"))),
            _every_decision_applied(argext.rewrite)),
    # loops acting only where a comparison holds: vector searches
    Rewrite("guarded", "guarded", Gate((CPU, NOT_ORIGINAL, _on("vectorize", "vectorize is off"))),
            _every_decision_applied(guarded.rewrite)),
    # nests reading and writing along different dimensions, through a tile
    Rewrite("transpose", "transpose",
            Gate((CPU, NOT_ORIGINAL, Condition(lambda target, opts: opts.tile is not False, "tile is False"))),
            _every_decision_applied(transpose.rewrite)),
)


@dataclass(frozen=True)
class Outcome(_Decided):
    """One rewrite on one kernel: ``not_run`` (why its gate kept it from running; "" where it ran)
    and its decisions."""

    name: str
    not_run: str = ""
    decisions: tuple = ()


@dataclass(frozen=True)
class Report:
    """What the rewrites did to one kernel, one :class:`Outcome` each, in the order they ran."""

    outcomes: tuple = field(default_factory=tuple)

    def decisions(self) -> tuple:
        """Every decision's text, in the order taken (``inspect("schedule")``)."""
        return tuple(d.text for o in self.outcomes for d in o.decisions)

    def describe(self) -> str:
        """``inspect("rewrites")``: each rewrite, what it applied and what it refused and why, or
        why it did not run."""
        lines = []
        for o in self.outcomes:
            if o.not_run:
                lines.append(f"{o.name}: not run: {o.not_run}")
                continue
            if not o.decisions:
                lines.append(f"{o.name}: nothing found")
                continue
            lines.append(f"{o.name}:")
            for d in o.decisions:
                lines.append(f"  applied: {d.text}" if isinstance(d, Applied) else f"  refused: {d.what}: {d.reason}")
        return "\n".join(lines) + "\n"


def run(typed: tir.TypedKernel, target, opts, timed: Callable | None = None,
        rewrites: tuple = REWRITES) -> tuple:
    """``(typed kernel, Report)``: ``rewrites`` run in order on ``typed`` for ``target`` (its
    ``kind``) under the resolved schedule options ``opts``, each whose gate holds; ``timed(stage)``
    is a context manager each runs under (the compile's clock)."""
    timed = timed or (lambda stage: contextlib.nullcontext())
    outcomes = []
    for rw in rewrites:
        why = rw.gate.why_not(target, opts)
        if why is not None:
            outcomes.append(Outcome(rw.name, not_run=why))
            continue
        with timed(rw.stage):
            found = rw.match(typed)
            typed = rw.apply(found)
        outcomes.append(Outcome(rw.name, decisions=found.decisions))
    return typed, Report(tuple(outcomes))
