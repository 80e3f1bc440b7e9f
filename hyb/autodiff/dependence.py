"""Whether a store may overwrite a value after a statement reads it: the question behind every
save and restore of the gradient kernel.

Each question is a function of the ``Normalised`` and ``Activity`` records (``nz``, ``act``),
asked by the save plan and by emission.  Subscripts and loop bounds are turned into affine forms
(``affine``: ``affine.affine_form`` with the scalars fixed while the kernel runs, those that are
``constant_like``, as symbols).  A quick syntactic check answers first (``may_follow_syntax``);
where it cannot rule the overwrite out for a tensor, isl decides exactly over the iteration
domains of the loops (``isl_follows``).  ``cells_may_meet`` asks isl the related question for
replays: whether a store can hit the cell a statement reads within one iteration of the loops
around both.  Both isl questions share the
set of instance pairs (loop domains, equal cells) built by ``instance_pairs``; where loops or
subscripts are not affine, the answers err on the safe side.
"""
from __future__ import annotations

import islpy as isl

from ..dsl import ast as syntax
from .activity import Activity
from .affine import affine_form, unit_step
from .normalise import Normalised
from .tree import target_name, value_walk


def may_follow(nz: Normalised, act: Activity, w, s, sub, n) -> bool:
    """Whether assignment ``w`` may overwrite what statement ``s`` reads of ``n`` (the cell
    ``sub``, for a tensor) after ``s`` reads it.  Syntax answers first; where it says yes for
    a tensor, isl decides exactly over the loops' iteration domains (if they are affine)."""
    quick = may_follow_syntax(nz, act, w, s, sub, n)
    if not quick or sub is None:
        return quick
    exact = isl_follows(nz, act, w, s, sub, n)
    return quick if exact is None else exact


def may_follow_syntax(nz: Normalised, act: Activity, w, s, sub, n) -> bool:
    iw, is_ = nz.info[id(w)], nz.info[id(s)]
    if w is s or (iw.first > is_.first and not exclusive(iw.block, is_.block)):
        return True
    decl = nz.tensors[n].block if n in nz.tensors else nz.scalars[n].block
    depth = len(decl.loops)
    shared = []
    for a, b in zip(iw.block.loops[depth:], is_.block.loops[depth:]):
        if a is not b:
            break
        shared.append(a)
    if not shared:
        return False
    # Both inside the same loops: later iterations of them run w again, after s, unless w writes
    # exactly the cell s reads, a different one in every iteration.
    if sub is None or len(w.target.indices) != len(sub.indices):
        return True
    # Later iterations of the shared loops write other cells if, for each shared loop, some
    # subscript position is `v + c` with the same c in both.
    for lp in shared:
        for wi, ri in zip(w.target.indices, sub.indices):
            a, b = affine(nz, act, wi), affine(nz, act, ri)
            if a == b and unit_step(a, lp.var):
                break
        else:
            return True
    return False


def exclusive(a, b) -> bool:
    """Whether blocks ``a`` and ``b`` lie in different branches of one ``if``: no run of that
    ``if`` runs both (a later run, in a later iteration of a loop around it, is the loops' to
    judge)."""
    above_a = []
    x = a
    while x is not None:
        above_a.append(x)
        x = x.parent
    below, x = None, b
    while x is not None and not any(x is y for y in above_a):
        below, x = x, x.parent
    if x is None or below is None:
        return False
    k = next(k for k, y in enumerate(above_a) if y is x)
    other = above_a[k - 1] if k else None
    return other is not None and other is not below and other.owner is below.owner \
        and isinstance(below.owner, syntax.If)


def isl_follows(nz: Normalised, act: Activity, w, s, sub, n):
    """True/False: whether some later instance of store ``w`` writes the cell ``sub`` that an
    instance of ``s`` reads; None where the loops or subscripts are not affine."""
    iw, is_ = nz.info[id(w)], nz.info[id(s)]
    if len(w.target.indices) != len(sub.indices):
        return None
    depth = len(nz.tensors[n].block.loops)
    found = instance_pairs(nz, act, s, sub, w, depth, "s")
    if found is None:
        return None
    pairs, rs, rw = found
    shared = []
    for a, b in zip(iw.block.loops[depth:], is_.block.loops[depth:]):
        if a is not b:
            break
        shared.append(a)
    # w's instance runs after s's: a shared loop is further on (the loops outside it equal),
    # or, where w comes later in the loop body (or is s itself), all shared loops are equal.
    later = []
    for k, lp in enumerate(shared):
        eq = [f"{rw[q.var]} = {rs[q.var]}" for q in shared[:k]]
        eq.append(f"{rw[lp.var]} {'>' if lp.step > 0 else '<'} {rs[lp.var]}")
        later.append("(" + " and ".join(eq) + ")")
    if w is s or iw.first > is_.first:
        later.append("(" + " and ".join([f"{rw[q.var]} = {rs[q.var]}" for q in shared] or ["true"]) + ")")
    if not later:
        return False
    try:
        return not isl.Set(pairs.set_text(" or ".join(later))).is_empty()
    except isl.Error:
        return None


def cells_may_meet(nz: Normalised, act: Activity, s, sub, w, depth: int) -> bool:
    """Whether store ``w`` can write the cell ``sub`` that ``s`` reads, in the same iteration of
    the ``depth`` outermost loops around both (asked of isl; True where it cannot tell)."""
    found = instance_pairs(nz, act, s, sub, w, depth, "r")
    if found is None:
        return True
    pairs, _, _ = found
    try:
        return not isl.Set(pairs.set_text()).is_empty()
    except isl.Error:
        return True


def instance_pairs(nz: Normalised, act: Activity, s, sub, w, depth: int, tag: str):
    """The pairs of instances of statement ``s`` and store ``w`` in which ``w`` writes the cell
    ``sub`` that ``s`` reads, for isl: each loop around a statement within its bounds and each
    subscript of ``sub`` equal to the one of ``w``'s target.  The ``depth`` outermost loops
    are shared (one variable for both); the inner loops of ``s`` are renamed ``<var>_<tag>``
    and those of ``w`` ``<var>_w``.  Returns (the set, the renaming of ``s``'s loops, that of
    ``w``'s loops), or None where a bound or a subscript is not affine."""
    pairs = _IslSet()

    def domain(loops, tag):
        ren = {lp.var: (lp.var if i < depth else f"{lp.var}_{tag}") for i, lp in enumerate(loops)}
        for i, lp in enumerate(loops):
            if i < depth and tag == "w":
                continue  # the shared loops are already there, from s
            lo, hi = affine(nz, act, lp.lo), affine(nz, act, lp.hi)
            if lo is None or hi is None:
                return None
            v = ren[lp.var]
            pairs.names.append(v)
            pairs.cons.append(f"{pairs.term(lo, ren)} <= {v} < {pairs.term(hi, ren)}" if lp.step > 0
                              else f"{pairs.term(hi, ren)} < {v} <= {pairs.term(lo, ren)}")
        return ren

    rs, rw = domain(nz.info[id(s)].block.loops, tag), domain(nz.info[id(w)].block.loops, "w")
    if rs is None or rw is None:
        return None
    for a, b in zip(sub.indices, w.target.indices):
        fa, fb = affine(nz, act, a), affine(nz, act, b)
        if fa is None or fb is None:
            return None
        pairs.cons.append(f"{pairs.term(fa, rs)} = {pairs.term(fb, rw)}")
    return pairs, rs, rw


def affine(nz: Normalised, act: Activity, e):
    """``e`` as an affine form of the loop variables (``affine.affine_form``), or None.  Scalars
    that are not constant-like are known only when the kernel runs; a scalar parameter is fixed for
    the whole call, a symbol like a shape (a gradient whose tape it sizes is compiled for its value)."""
    return affine_form(e, nz.loops, lambda n: n in nz.scalars and not constant_like(nz, act, n))


def constant_like(nz: Normalised, act: Activity, n, depth=0) -> bool:
    """A scalar assigned once from numbers, shapes, parameters and other such scalars."""
    sc = nz.scalars.get(n)
    if sc is None or n in act.active_s or depth > 20:
        return False
    if sum(1 for a in nz.assigns if target_name(a.target) == n) != 1:
        return False
    for x in value_walk(sc.decl.value):
        if isinstance(x, syntax.Subscript):
            return False
        if isinstance(x, syntax.Name) and x.id in nz.scalars and not constant_like(nz, act, x.id, depth + 1):
            return False
    return True


class _IslSet:
    """The text of a parametric isl set, built up condition by condition."""

    def __init__(self):
        self.params: dict = {}  # symbol text -> isl parameter name
        self.names: list = []  # the set's dimensions
        self.cons: list = []  # conditions, all of which hold

    def term(self, aff, ren) -> str:
        """Affine form ``aff`` as isl text, loop variables renamed by ``ren``, symbols as parameters."""
        parts = []
        for k, v in aff.items():
            if k is None:
                parts.append(str(v))
            elif isinstance(k, str):
                parts.append(f"{v}*{ren.get(k, k)}")
            elif k[0] == "sym":
                parts.append(f"{v}*{self.params.setdefault(k[1], f'p{len(self.params)}')}")
        return " + ".join(parts) or "0"

    def set_text(self, extra=None) -> str:
        """The set, with ``extra`` (a disjunction, say) as one more condition."""
        cond = " and ".join(self.cons) or "true"
        if extra is not None:
            cond = f"{cond} and ({extra})"
        return f"[{', '.join(self.params.values())}] -> {{ [{', '.join(self.names)}] : {cond} }}"
