"""Vector marks: the loops that LLVM's loop vectoriser should get whole.

LLVM fully unrolls a loop of a few dozen constant iterations before its loop vectoriser runs
(kernels are compiled for one signature, so most trip counts are constants).  Where that loop is
the one whose accesses walk memory with unit stride, the unrolled copies leave the vectoriser
only the loop around them, which strides: a weight gradient's `partial[.., q] += x[.., q + s] *
dout[.., q]` over 32 values of `q` became gathers along the reduction loop outside it, ten times
slower than the forward convolution.

A loop is marked ``vector`` when

* it is not a parallel loop (those run on threads) and runs a constant number of iterations
  between :data:`MIN_TRIPS` (shorter loops are better unrolled) and :data:`MAX_TRIPS` (LLVM
  does not unroll longer ones whole),
* everything inside it is straight-line code after LLVM fully unrolls the short constant loops
  in it (at most :data:`MAX_INNER` statement instances per iteration),
* every statement in it writes a different cell in each iteration (no reduction into one cell
  or scalar, whose chain of additions LLVM spreads over several accumulators only where it may
  interleave the loop, which the hint below forbids), and
* a statement in it reads or writes a tensor with unit stride along it.

The LLVM back end asks for such a loop not to be unrolled before vectorisation (the vectorised
loop is unrolled as usual afterwards; its trips are few, so it is unrolled whole).
``schedule={"vectorize": False}`` leaves every loop unmarked.
"""
from __future__ import annotations

from . import loops
from .counting import access_strides
from .extract import PolyProgram

MIN_TRIPS = 16
MAX_TRIPS = 64
MAX_INNER = 16


def mark_vector_loops(p: PolyProgram, nest: loops.LoopNest) -> tuple:
    """Marks the vector loops of ``nest`` (``For.vector``): returns ``(the new nest, the marked
    loops' variables)``; ``nest`` is unchanged."""
    marked = []

    def visit(body):
        for s in body:
            if isinstance(s, loops.For):
                if _candidate(p, s):
                    marked.append(s)
                else:
                    visit(s.body)
            elif isinstance(s, loops.If):
                visit(s.then)
                visit(s.orelse)

    visit(nest.body)
    if not marked:
        return nest, ()
    return loops.with_flags(nest, {id(s): {"vector": True} for s in marked}), tuple(s.var for s in marked)


def _candidate(p: PolyProgram, s: loops.For) -> bool:
    trips = loops.constant_trips(s)
    if s.parallel or trips is None or not MIN_TRIPS <= trips <= MAX_TRIPS:
        return False
    inner = _instances(s.body)
    if inner is None or inner > MAX_INNER:
        return False
    calls = list(loops.calls(s.body))
    moving = [_moving(call, s.var) for call in calls]
    if any(k is None or not _writes_move(p, call, k) for call, k in zip(calls, moving)):
        return False
    return any(_unit_stride(p, call, k) for call, k in zip(calls, moving))


def _instances(body) -> int | None:
    """Statement instances run by ``body`` if every loop in it has a constant trip count, else None."""
    total = 0
    for s in body:
        if isinstance(s, loops.StmtCall):
            total += 1
        elif isinstance(s, loops.If):
            a, b = _instances(s.then), _instances(s.orelse)
            if a is None or b is None:
                return None
            total += max(a, b)
        else:
            trips, inner = loops.constant_trips(s), _instances(s.body)
            if trips is None or inner is None:
                return None
            total += trips * inner
    return total


def _moving(call: loops.StmtCall, var: str) -> int | None:
    """The one iterator of the statement that the loop counter ``var`` advances by one, or None."""
    moving = [k for k, a in enumerate(call.args) if loops.uses(a, var)]
    if len(moving) != 1 or abs(_coefficient(call.args[moving[0]], var) or 0) != 1:
        return None
    return moving[0]


def _writes_move(p: PolyProgram, call: loops.StmtCall, k: int) -> bool:
    """Whether every write of the statement moves with its iterator ``k`` (a new cell each iteration)."""
    st = p.by_name[call.stmt]
    for acc in st.writes:
        if p.kernel.tensors[acc.tensor].kind == "scalar":
            return False
        strides = access_strides(acc, len(st.iters))
        if strides is None or k not in strides:
            return False
    return True


def _unit_stride(p: PolyProgram, call: loops.StmtCall, k: int) -> bool:
    """Whether the statement touches some tensor with unit stride along its iterator ``k``."""
    st = p.by_name[call.stmt]
    for acc in list(st.writes) + list(st.reads):
        if p.kernel.tensors[acc.tensor].kind == "scalar":
            continue
        strides = access_strides(acc, len(st.iters))
        if strides is not None and strides.get(k) == 3.0:
            return True
    return False


def _coefficient(e, var: str):
    """The coefficient of ``var`` in the affine loop expression ``e`` (None if not affine in it)."""
    if isinstance(e, loops.LInt):
        return 0
    if isinstance(e, loops.LVar):
        return 1 if e.name == var else 0
    if not loops.uses(e, var):
        return 0
    if e.op in ("add", "sub"):
        a, b = (_coefficient(x, var) for x in e.args)
        if a is None or b is None:
            return None
        return a + b if e.op == "add" else a - b
    if e.op == "neg":
        a = _coefficient(e.args[0], var)
        return None if a is None else -a
    if e.op == "mul":
        x, y = e.args
        if isinstance(x, loops.LInt):
            a = _coefficient(y, var)
            return None if a is None else x.value * a
        if isinstance(y, loops.LInt):
            a = _coefficient(x, var)
            return None if a is None else y.value * a
    return None
