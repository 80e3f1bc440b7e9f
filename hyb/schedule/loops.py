"""Loop IR: the code shape isl's AST generator chose, as frozen records.

Expressions here are integer index arithmetic over loop counters (``LExpr``); the work of
each statement instance stays in the typed IR of its :class:`~hyb.schedule.extract.Statement`,
which a back end evaluates with the statement's loop variables bound to ``StmtCall.args``.
"""
from __future__ import annotations

from dataclasses import dataclass, replace


@dataclass(frozen=True)
class LInt:
    value: int


@dataclass(frozen=True)
class LVar:
    name: str


@dataclass(frozen=True)
class LOp:
    # add sub mul neg min max fdiv_q (floor) pdiv_q pdiv_r zdiv_r div select
    # eq le lt ge gt and or
    op: str
    args: tuple


@dataclass(frozen=True)
class For:
    var: str
    init: object
    cond: object  # evaluated before each iteration
    step: int
    body: tuple
    parallel: bool = False
    vector: bool = False  # for LLVM's loop vectoriser whole: not unrolled first (schedule.vector)
    # (MR, NR): the outermost reduction loop of a register block schedule.blocking made, whose
    # cells schedule.promote keeps in registers (from the plan's mark, see mark_fields)
    block: tuple | None = None
    # the last blocks along I and J where the extents are known now, which schedule.promote then
    # also keeps in registers: (rows: I's extent modulo MR, columns: J's modulo NR, those columns
    # rounded up to whole vectors); 0: none or unknown
    edge: tuple = (0, 0, 0)
    # n > 0: this loop and the one loop in its body copy an n x n square of one statement's
    # elements (a store of a load, no guards), the load moving with unit stride along this loop's
    # variable and the store along the inner one's, each loop's condition a bound its variable
    # stays below: a back end may copy a whole square as n vectors transposed in registers
    # (schedule.promote's transposed panels); anywhere else the loops run as written
    square: int = 0


# The plan's decisions on loops travel as isl marks in its schedule tree; the AST generator
# (schedule.astgen) turns each into fields of the first loop below it.
PARALLEL_MARK = "parallel"  # the loop runs on the thread pool (schedule.parallel)
BLOCK_MARK = "register block"  # the reduction loops of a register block (schedule.blocking)


def block_mark(mr: int, nr: int, edge: tuple = (0, 0, 0)) -> str:
    """The name of the mark above a register block's reduction loops (with ``For.edge``, the last
    blocks along I and J, where they are known)."""
    return f"{BLOCK_MARK} {mr}x{nr}" + (", edge {}x{}/{}".format(*edge) if any(edge) else "")


def mark_fields(name: str) -> dict:
    """The fields a mark of this name gives the first loop below it (none for another mark)."""
    if name == PARALLEL_MARK:
        return {"parallel": True}
    if name.startswith(BLOCK_MARK + " "):
        shape, _, edge = name[len(BLOCK_MARK) + 1:].partition(", edge ")
        mr, nr = shape.split("x")
        rows, _, cols = edge.partition("x")
        cols, _, padded = cols.partition("/")
        return {"block": (int(mr), int(nr)), "edge": (int(rows or 0), int(cols or 0), int(padded or 0))}
    return {}


@dataclass(frozen=True)
class If:
    cond: object
    then: tuple
    orelse: tuple = ()


@dataclass(frozen=True)
class StmtCall:
    stmt: str  # statement name
    args: tuple  # one LExpr per loop variable of the statement


@dataclass(frozen=True)
class LoopNest:
    """A kernel's code shape: the loop IR and what a back end needs to run the statements it calls."""

    kernel: object  # dsl.tir.TypedKernel
    # statement name -> extract.Statement (its typed IR, in which the loads and stores checked when
    # they run are marked `checked`, guards and loop variables)
    statements: dict
    body: tuple

    @classmethod
    def of(cls, poly, body) -> "LoopNest":
        """The nest of a polyhedral program ``poly`` with loop IR ``body``."""
        return cls(poly.kernel, poly.by_name, tuple(body))


def with_flags(nest: LoopNest, flags: dict) -> LoopNest:
    """A new nest in which each loop ``s`` of ``nest`` with ``id(s)`` in ``flags`` has the fields
    given there (e.g. ``{"parallel": True}``); ``nest`` itself is unchanged.  Marking stages
    decide on the loops of their input nest and build their output with this."""

    def body(items):
        return tuple(node(s) for s in items)

    def node(s):
        if isinstance(s, For):
            return replace(s, body=body(s.body), **flags.get(id(s), {}))
        if isinstance(s, If):
            return replace(s, then=body(s.then), orelse=body(s.orelse))
        return s

    return replace(nest, body=body(nest.body))


def loops(body):
    """The loops in ``body``, at any depth, outermost first."""
    for s in body:
        if isinstance(s, For):
            yield s
            yield from loops(s.body)
        elif isinstance(s, If):
            yield from loops(s.then)
            yield from loops(s.orelse)


def upper_bound(s: For):
    """(op, bound) when the loop's condition is ``var <= bound`` or ``var < bound``."""
    c = s.cond
    if (isinstance(c, LOp) and c.op in ("le", "lt") and isinstance(c.args[0], LVar)
            and c.args[0].name == s.var and s.step > 0 and not uses(c.args[1], s.var)):
        return c.op, c.args[1]
    return None


def constant_trips(s: For):
    """The iteration count of ``s`` when its bounds are constants, else None."""
    bound = upper_bound(s)
    if bound is None or not isinstance(s.init, LInt) or not isinstance(bound[1], LInt):
        return None
    last = bound[1].value - (1 if bound[0] == "lt" else 0)
    return max(0, (last - s.init.value) // s.step + 1)


def calls(body):
    """The statement calls in ``body``, at any depth, in program order."""
    for s in body:
        if isinstance(s, StmtCall):
            yield s
        elif isinstance(s, If):
            yield from calls(s.then)
            yield from calls(s.orelse)
        else:
            yield from calls(s.body)


def uses(e, var: str) -> bool:
    if isinstance(e, LVar):
        return e.name == var
    if isinstance(e, LOp):
        return any(uses(a, var) for a in e.args)
    return False


_INFIX = {"add": "+", "sub": "-", "mul": "*", "eq": "==", "le": "<=", "lt": "<", "ge": ">=", "gt": ">",
          "and": "&&", "or": "||"}


def fmt_expr(e) -> str:
    if isinstance(e, LInt):
        return str(e.value)
    if isinstance(e, LVar):
        return e.name
    if e.op in _INFIX:
        return f"({fmt_expr(e.args[0])} {_INFIX[e.op]} {fmt_expr(e.args[1])})"
    if e.op == "neg":
        return f"-{fmt_expr(e.args[0])}"
    if e.op == "select":
        return f"({fmt_expr(e.args[0])} ? {fmt_expr(e.args[1])} : {fmt_expr(e.args[2])})"
    return f"{e.op}({', '.join(fmt_expr(a) for a in e.args)})"


def fmt_nest(nest: LoopNest, describe_stmt=None) -> str:
    """C-like text of the loop IR, for ``inspect("loops")``."""
    out = []

    def walk(stmts, depth):
        pad = "  " * depth
        for s in stmts:
            if isinstance(s, For):
                mark = ("parallel " if s.parallel else "vector " if s.vector else
                        f"transposed {s.square}x{s.square} " if s.square else "")
                out.append(f"{pad}{mark}for ({s.var} = {fmt_expr(s.init)}; {fmt_expr(s.cond)}; "
                           f"{s.var} += {s.step}) {{")
                walk(s.body, depth + 1)
                out.append(pad + "}")
            elif isinstance(s, If):
                out.append(f"{pad}if {fmt_expr(s.cond)} {{")
                walk(s.then, depth + 1)
                if s.orelse:
                    out.append(pad + "} else {")
                    walk(s.orelse, depth + 1)
                out.append(pad + "}")
            else:
                args = ", ".join(fmt_expr(a) for a in s.args)
                line = f"{pad}{s.stmt}({args});"
                if describe_stmt is not None:
                    line += "  // " + describe_stmt(s.stmt)
                out.append(line)

    walk(nest.body, 0)
    return "\n".join(out) + "\n"
