"""Reduction idioms whose adjoint has a closed form.

A running maximum or minimum, in either of the forms users write,

    m = init                         m = init
    for j in range(lo, hi):          for j in range(lo, hi):
        m = max(m, e)                    v = e                  (optional)
                                         if v > m:
                                             m = v
                                             k = j              (values without a gradient)

(one loop or a nest of loops holding only the update; ``max(e, m)``, ``min``, ``<`` alike)
differentiated statement by statement needs the value of ``m`` or the branch taken at every
iteration (a tape) and a reverse loop that is a serial chain of branches.  Its derivative is
simpler: the gradient of the final ``m`` goes to the positions that hold it, ``init`` and the
``e`` of each iteration equal to ``m``.  With ``max``/``min`` it is split evenly among ties
(PyTorch's rule for ``amax``, and JAX's); with a strict comparison the position that won keeps
it all: the first one holding the maximum, ``init`` before any ``e``.  The save plan asks
``extrema`` for such updates; emission writes their adjoint with no tape and no reverse loop.

An update is recognised when the scalar has no other assignment than its declaration before
the nest, nothing in the nest but the update (and its comparison) reads it, the update sits in
loops only (the branch form: in its one branch), ``e`` does not read it, and ``e`` is computed
bit for bit alike wherever it is evaluated (a load, or one sum, difference or product of loads
and numbers: the ties are found by comparing ``e`` with the result again).
"""
from __future__ import annotations

from dataclasses import dataclass

from ..dsl import ast as syntax
from .activity import Activity
from ..dsl.unparse import expr as unparse_expr
from .normalise import Normalised, walk_stmts
from .tree import subst_expr, target_name


@dataclass(frozen=True, eq=False)
class Extremum:
    """A running maximum or minimum: ``stmt`` (``m = max(m, operand)``, or ``m = operand`` under
    ``branch``) inside ``nest``."""
    name: str  # the scalar m
    fn: str  # "max" or "min"
    operand: object  # e, the value compared at each iteration (a local scalar's value written out)
    stmt: object  # the update, a syntax.Assign of the normalised kernel
    nest: object  # the outermost loop around the update inside m's declaring block (a syntax.For)
    decl: object  # m's declaring assignment
    branch: object = None  # the branch form: the syntax.If holding the update (the first winner keeps all)

    @property
    def rule(self) -> str:
        word = "maximum" if self.fn == "max" else "minimum"
        share = ("the first position holding it, where the comparison chose it" if self.branch is not None
                 else f"the positions holding the {word}, split evenly among ties")
        return (f"running {word} `{self.name}` (line {getattr(self.stmt.span, 'line', '?')}): its gradient "
                f"goes to {share}; no tape")


def extrema(nz: Normalised, act: Activity) -> dict:
    """``{id(update): Extremum}`` for the running maxima and minima of active scalars in ``nz``."""
    out = {}
    for s in nz.assigns:
        x = _extremum(nz, act, s)
        if x is not None:
            out[id(s)] = x
    return out


_FLIP = {">": "<", "<": ">"}


def _update(nz: Normalised, s):
    """``(fn, operand, branch)`` where ``s`` has the form of an update of a running extremum."""
    m = s.target.id
    v = s.value
    if isinstance(v, syntax.Call) and isinstance(v.func, syntax.Name) and v.func.id in ("max", "min") \
            and len(v.args) == 2 and not v.kwargs:
        a, b = v.args
        if isinstance(a, syntax.Name) and a.id == m:
            return v.func.id, b, None
        if isinstance(b, syntax.Name) and b.id == m:
            return v.func.id, a, None
        return None
    # the branch form: `if e > m: m = e` (or `m < e`, and `<` for a minimum), the branch holding
    # only assignments of scalars without a gradient besides the update
    owner = nz.info[id(s)].block.owner
    if not isinstance(owner, syntax.If) or owner.orelse or not isinstance(owner.cond, syntax.Compare):
        return None
    c = owner.cond
    if len(c.ops) != 1 or c.ops[0] not in _FLIP:
        return None
    left, right = c.operands
    op = c.ops[0]
    if isinstance(left, syntax.Name) and left.id == m:
        left, right, op = right, left, _FLIP[op]
    if not (isinstance(right, syntax.Name) and right.id == m) or unparse_expr(left) != unparse_expr(v):
        return None
    for x in owner.body:
        if x is s:
            continue
        if not (isinstance(x, syntax.Assign) and isinstance(x.target, syntax.Name)):
            return None
    return ("max" if op == ">" else "min"), v, owner


def _extremum(nz: Normalised, act: Activity, s) -> Extremum | None:
    if not (isinstance(s.target, syntax.Name) and s.target.id in act.active_s):
        return None
    m = s.target.id
    form = _update(nz, s)
    if form is None:
        return None
    fn, operand, branch = form
    if m in nz.reads(operand):
        return None
    if branch is not None and any(x is not s and target_name(x.target) in act.active_s for x in branch.body):
        return None
    decl = nz.scalars[m].decl
    writes = [a for a in nz.assigns if isinstance(a.target, syntax.Name) and a.target.id == m]
    if s is decl or len(writes) != 2 or writes[0] is not decl or writes[1] is not s:
        return None
    # The update sits in loops only, each holding nothing else (the branch form: the innermost
    # may declare the compared value first), up to m's declaring block.
    home = nz.scalars[m].block
    nest, inner = None, (s if branch is None else branch)
    local = None
    for c in nz.enclosing(inner):
        if not isinstance(c, syntax.For):
            return None
        body = [x for x in c.body if not isinstance(x, syntax.Pass)]
        if nest is None and branch is not None and len(body) == 2 and body[1] is inner:
            local = body[0]
            if not (isinstance(local, syntax.Assign) and isinstance(local.target, syntax.Name)
                    and nz.scalars.get(local.target.id) is not None and nz.scalars[local.target.id].decl is local
                    and nz.scalars[local.target.id].block is nz.blocks[id(c)]
                    and sum(1 for a in nz.assigns if target_name(a.target) == local.target.id) == 1):
                return None
        elif len(body) != 1 or body[0] is not inner:
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
    if local is not None:
        if m in nz.reads(local.value):
            return None
        operand = subst_expr(operand, {local.target.id: local.value})
    if not _same_every_time(operand):
        return None
    return Extremum(m, fn, operand, s, nest, decl, branch)


def _leaf(e) -> bool:
    return isinstance(e, (syntax.Name, syntax.Num, syntax.Subscript, syntax.Attribute)) or (
        isinstance(e, syntax.UnaryOp) and e.op == "-" and _leaf(e.operand))


def _same_every_time(e) -> bool:
    """Whether ``e`` computes bit for bit the same value wherever the gradient evaluates it: the
    ties are found by comparing it with the result again.  A load, or one sum, difference or
    product of loads and numbers; a math function (a vector and a scalar version may differ in
    the last place) or a longer expression (which may be contracted into fused multiply-adds in
    one loop and not in another) is not."""
    if _leaf(e):
        return True
    return isinstance(e, syntax.BinOp) and e.op in ("+", "-", "*") and _leaf(e.left) and _leaf(e.right)
