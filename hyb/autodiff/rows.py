"""Costly values computed once per iteration of a reversed loop.

The reverse body of a loop first replays the forward statements of its body, then runs their
adjoints.  A value such as ``exp(x[i, j] - m)`` that a loop over ``j`` inside that body computes
is then needed again by the adjoints: by the replay of the ``j`` loop's own body, and by the
coefficients of later statements that read what it computed (a softmax's ``out[i, j]``).
Computing it again costs as much as the forward did.  Instead the replay keeps it, one element
per iteration of the ``j`` loop, in a *row* allocated in the reverse body (one row per
iteration of the outer loop, the size of the ``j`` loop), and every later use in that reverse
body, inside a loop over the same range, reads the row.

A row is allocated in the body of the reversed loop, and the scheduler does not yet give each
thread a row of its own: it keeps that loop off threads.  Rows are therefore kept only in
gradients that run on one thread (``enabled``; ``runtime.kernel.GradKernel`` decides).

``Rows`` is the emitter's record of this, one ``Frame`` per reverse body being written.
A call is kept only where its value cannot change between the replay and the uses: the
scalars it reads are not assigned in the reverse body's block after the loop starts, and
nothing stores to the tensors it reads inside that block or restores them from a tape.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..dsl import ast as syntax
from ..dsl.intrinsics import TABLE
from ..dsl.unparse import expr as unparse_expr
from . import rules
from .normalise import walk_stmts
from .rules import call, name
from .tree import rewrite, subscript, subst_expr, target_name, unconditional_calls, value_walk

# Intrinsics whose value costs many instructions (a square root is one)
_CHEAP = {"sqrt", "rsqrt"}
COSTLY = frozenset(n for n, i in TABLE.items() if i.rule in ("float", "power") and n not in _CHEAP)

_HERE = "__row_index__"  # stands for the loop variable in a kept call's key


@dataclass
class Frame:
    """The reverse body of one loop: its forward block, whether its replay is being written
    (``filling``), the rows kept so far (``key -> (row name, loop)``) and their declarations,
    by the loop they belong to."""
    block: object
    filling: bool = True
    kept: dict = field(default_factory=dict)
    decls: dict = field(default_factory=dict)  # id(loop node) -> [Assign]


class Rows:
    """The rows of the reverse bodies being written (innermost last) and the loops being written."""

    def __init__(self, em, enabled: bool = True):
        self.em = em
        self.enabled = enabled
        self.frames: list = []
        self.loops: list = []  # nz Loop records of the loops being written, innermost last; None: none

    def loop_in(self, block):
        """The loop being written that sits directly in ``block``, or None."""
        for lp in reversed(self.loops):
            if lp is None:
                return None
            if self.em.nz.info[id(lp.node)].block is block:
                return lp
        return None

    def key(self, c, lp) -> tuple:
        em = self.em
        return (unparse_expr(subst_expr(c, {lp.var: name(_HERE)})), unparse_expr(em.F(lp.lo)),
                unparse_expr(em.F(lp.hi)), lp.step)

    def keep(self, s) -> list:
        """Statements that fill rows with the costly calls of forward assignment ``s`` while the
        innermost frame's replay is written (``[]`` where none is kept)."""
        if not self.enabled or not self.frames or not self.frames[-1].filling:
            return []
        fr = self.frames[-1]
        lp = self.loop_in(fr.block)
        em = self.em
        if lp is None or em.nz.info[id(s)].block is not em.nz.blocks[id(lp.node)]:
            return []
        out = []
        for c in unconditional_calls(s.value, COSTLY, outermost=True):
            c = em.F(c)
            k = self.key(c, lp)
            if k in fr.kept or not self.constant(c, lp, fr.block):
                continue
            row = em.fresh(f"{rules.call_name(c)}_row")
            first = subst_expr(c, {lp.var: em.F(lp.lo)})
            decl = syntax.Assign(None, name(row), call("allocate", syntax.Tuple(None, [em.trip_bound(lp)]),
                                                         syntax.Attribute(None, first, "dtype")))
            fr.decls.setdefault(id(lp.node), []).append(decl)
            out.append(syntax.Assign(None, subscript(row, [em.iteration(lp)]), c))
            fr.kept[k] = (row, lp)
        return out

    def constant(self, c, lp, block) -> bool:
        """Whether call ``c`` in the body of ``lp`` has the same value at every later point of
        ``block``'s reverse body, for the same iteration of ``lp``."""
        em, nz = self.em, self.em.nz
        start = nz.info[id(lp.node)].first
        inside = [s for s in walk_stmts(block.body)]
        for x in value_walk(c):
            if isinstance(x, syntax.Subscript) and isinstance(x.value, syntax.Name):
                t = x.value.id
                if t not in nz.tensors or t in em.plan.restore or any(
                        isinstance(s, syntax.Assign) and isinstance(s.target, syntax.Subscript)
                        and s.target.value.id == t for s in inside):
                    return False
            elif isinstance(x, syntax.Name) and x.id != lp.var and x.id in nz.scalars:
                if any(isinstance(s, syntax.Assign) and target_name(s.target) == x.id
                       and nz.info[id(s)].first >= start for s in inside):
                    return False
            elif isinstance(x, syntax.Name) and x.id in nz.loops and x.id != lp.var \
                    and nz.loops[x.id] not in nz.info[id(lp.node)].block.loops:
                return False
        return True

    def use(self, e):
        """``e`` with each kept call read from its row, where written inside a loop over the
        same range as the loop that kept it."""
        if not self.frames:
            return e
        for fr in reversed(self.frames):
            if not fr.kept:
                continue
            lp = self.loop_in(fr.block)
            if lp is None:
                continue

            def swap(x, fr=fr, lp=lp):
                if isinstance(x, syntax.Call) and rules.call_name(x) in COSTLY:
                    hit = fr.kept.get(self.key(x, lp))
                    if hit is not None:
                        return subscript(hit[0], [self.em.iteration(lp)])
                return None

            e = rewrite(e, swap)
        return e
