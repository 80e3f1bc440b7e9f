"""Reduction idioms whose adjoint has a closed form.

A running maximum or minimum

    m = init
    for j in range(lo, hi):          (one loop or a nest of loops holding only the update)
        m = max(m, e)                (``max(e, m)``, ``min`` alike)

differentiated statement by statement needs the value of ``m`` at every iteration (a tape) and a
reverse loop that is a serial chain of branches.  Its derivative is simpler: the gradient of the
final ``m`` goes to the positions that hold it, ``init`` and the ``e`` of each iteration equal
to ``m``, split evenly among them when several tie (PyTorch's rule for ``amax``, and JAX's).
The save plan asks ``extrema`` for such updates; emission writes their adjoint as one loop
counting the ties and one sending each tied position its share, both free of any order.

An update is recognised when the scalar has no other assignment than its declaration before
the nest, nothing in the nest but the update reads it, the update sits in loops only (no
branch), and ``e`` does not read it.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..dsl import ast as syntax
from .activity import Activity
from .normalise import Normalised, walk_stmts


@dataclass(frozen=True, eq=False)
class Extremum:
    """A running maximum or minimum: ``stmt`` (``m = max(m, operand)``) inside ``nest``."""
    name: str  # the scalar m
    fn: str  # "max" or "min"
    operand: object  # e, the value compared at each iteration
    stmt: object  # the update, a syntax.Assign of the normalised kernel
    nest: object  # the outermost loop around the update inside m's declaring block (a syntax.For)
    decl: object  # m's declaring assignment

    @property
    def rule(self) -> str:
        word = "maximum" if self.fn == "max" else "minimum"
        return (f"running {word} `{self.name}` (line {getattr(self.stmt.span, 'line', '?')}): its gradient "
                f"goes to the positions holding the {word}, split evenly among ties; no tape")


def extrema(nz: Normalised, act: Activity) -> dict:
    """``{id(update): Extremum}`` for the running maxima and minima of active scalars in ``nz``."""
    out = {}
    for s in nz.assigns:
        x = _extremum(nz, act, s)
        if x is not None:
            out[id(s)] = x
    return out


def _extremum(nz: Normalised, act: Activity, s) -> Extremum | None:
    if not (isinstance(s.target, syntax.Name) and s.target.id in act.active_s):
        return None
    m = s.target.id
    v = s.value
    if not (isinstance(v, syntax.Call) and isinstance(v.func, syntax.Name) and v.func.id in ("max", "min")
            and len(v.args) == 2 and not v.kwargs):
        return None
    a, b = v.args
    if isinstance(a, syntax.Name) and a.id == m:
        operand = b
    elif isinstance(b, syntax.Name) and b.id == m:
        operand = a
    else:
        return None
    if m in nz.reads(operand):
        return None
    decl = nz.scalars[m].decl
    writes = [a for a in nz.assigns if isinstance(a.target, syntax.Name) and a.target.id == m]
    if s is decl or len(writes) != 2 or writes[0] is not decl or writes[1] is not s:
        return None
    # The update sits in loops only, each holding nothing else, up to m's declaring block.
    home = nz.scalars[m].block
    nest, inner = None, s
    for c in nz.enclosing(s):
        if not isinstance(c, syntax.For):
            return None
        body = [x for x in c.body if not isinstance(x, syntax.Pass)]
        if len(body) != 1 or body[0] is not inner:
            return None
        nest = inner = c
        if nz.info[id(c)].block is home:
            break
    else:
        return None
    if nest is None or nz.info[id(nest)].block is not home or nz.info[id(decl)].first > nz.info[id(nest)].first:
        return None
    for c in walk_stmts([nest]):
        if isinstance(c, syntax.For) and m in nz.compound_reads(c):
            return None
    if any(m in nz.reads(x.value) for x in nz.assigns if x is not s and x is not decl
           and nz.info[id(nest)].first <= nz.info[id(x)].first <= nz.info[id(nest)].last):
        return None
    return Extremum(m, v.func.id, operand, s, nest, decl)
