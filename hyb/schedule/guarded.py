"""Loops whose iterations do nothing unless one comparison holds: top-k and its kin.

A user keeps the ``K`` largest values of a row, with their indices, by passing each element down
a sorted list, swapping where it is larger::

    for j in range(d):
        v = x[i, j]
        c = j
        for t in range(K):
            if v > vals[i, t]:
                tv = vals[i, t]; vals[i, t] = v; v = tv
                tc = idx[i, t]; idx[i, t] = c; c = tc

or tests each element against the last kept value first (``if x[i, j] > vals[i, K - 1]: ...``).
Either way, an iteration changes nothing but its own scalars unless its element beats a kept
value, which few elements of a long row do (about ``K * ln(d / K)`` of ``d`` in random order).
The loop as written still runs its comparisons one element at a time.

Such a loop gets the form :class:`Guarded` (``tir.Loop.form``; its body is kept as written).  The
LLVM back end (:mod:`hyb.codegen.llvm_extremum`) then searches a vector of elements at a time for
the next one that beats the *threshold* (the least kept value for ``>``, ``>=``; the greatest
for ``<``, ``<=``), runs the loop's body as written for that element alone, computes the
threshold again and goes on after it.  The result is the written loop's, bit for bit.

The loop gets the form when all of this holds (:func:`parts` checks it, for this stage and
again for the back end):

* its step is 1; its body is a prelude of stores to scalars declared inside the loop (dead once
  an iteration ends), then one ``if`` with no ``else`` whose condition is a comparison ``<``,
  ``>``, ``<=`` or ``>=``, or one loop ``for t in range(a, b)`` (numbers, ``a < b``) around
  nothing but such an ``if``;
* one side of the comparison, with the prelude's scalars read as the values stored there, is
  an expression :mod:`~hyb.schedule.argext`'s lane passes compute bit for bit (a load, or one
  ``+``, ``-``, ``*`` of loads and numbers), whose loads move along their last axis with the
  loop or not at all and read nothing the loop writes; it does not read ``t``;
* the other side is a load whose subscripts read no tensor and neither the loop's variable nor
  the prelude's scalars (it may read ``t``), of the same float32, float64 or integer dtype, from
  a tensor or scalar the loop writes: a bound that tightens as the loop goes on, so that fewer
  and fewer values beat it (against a bound that never changes, as in a conditional sum, values
  may pass all along, and LLVM's vectoriser does better with the loop as written);
* the prelude's values load only along their last axis with the loop (so that its ends bound
  every subscript), and compute nothing that could fail (no division).

Then an iteration runs its ``if`` body only where its value beats some ``bound`` of the
``t`` loop in the memory the iteration starts with: until the body first runs, neither side
changes.  NaN values never beat anything, as in the comparison as written, and a NaN bound is
left out of the threshold (``minnum``, ``maxnum``).

``rewrite(typed)`` returns the new typed kernel and one decision per loop given the form.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import NamedTuple

from ..dsl import tir, types
from .argext import FLIP, contiguous, recomputable, short_loop


@dataclass(frozen=True)
class Guarded:
    """The form of a loop that runs its body only where a comparison of the loop's own value with
    a bound in memory holds (see the module doc); the back end finds those iterations a vector at
    a time.  Everything it needs comes from the loop's body (:func:`parts`), which later stages
    may have rewritten; where it no longer qualifies the loop runs as written."""


class Parts(NamedTuple):
    """What the back end needs of a :class:`Guarded` loop."""

    value: tir.TExpr  # the loop's value, the prelude's scalars read as their values (moves with the loop)
    bound: tir.Load  # the other side (may read ``over.var``)
    op: str  # ``value op bound``
    over: tir.Loop | None  # the loop around the ``if``, or None
    checks: tuple  # every expression whose loads must lie inside their tensors at both ends


def rewrite(typed: tir.TypedKernel) -> tuple:
    """``(typed kernel, decisions)``: every loop of this kind given the form :class:`Guarded`."""
    decisions = []

    def visit(node):
        if isinstance(node, tir.Loop) and node.form is None:
            found = parts(node, typed.tensors)
            if found is not None:
                bound = found.bound
                name = typed.tensors[bound.tensor].source_name or bound.tensor
                line = f" (line {node.span.line})" if node.span is not None else ""
                decisions.append(f"loop `{node.var}`{line} acts only where its value is {found.op} a bound in "
                                 f"`{name}`: a vector search for the next such iteration, the body as written "
                                 "for it alone")
                return replace(node, form=Guarded())
        return None

    body = [tir.rewrite(s, visit) for s in typed.body]
    if not decisions:
        return typed, ()
    return replace(typed, body=body), tuple(decisions)


def parts(loop: tir.Loop, tensors: dict) -> Parts | None:
    """The :class:`Parts` of a loop that qualifies for :class:`Guarded`, or None."""
    if loop.step != 1 or not loop.body:
        return None
    *prelude, last = loop.body
    values = {}  # prelude scalar -> its value, earlier prelude scalars read as theirs
    for st in prelude:
        t = tensors.get(getattr(st, "tensor", None))
        if (not isinstance(st, tir.Store) or st.indices or t is None or t.kind != "scalar"
                or loop.var not in t.private_to or not _harmless(st.value)
                or not contiguous(st.value, loop.var)):
            return None
        values[st.tensor] = _read_as(st.value, values)
    over = None
    if isinstance(last, tir.Loop):
        over, last = last, (last.body[0] if len(last.body) == 1 else None)
        if not (over.step == 1 and _number(over.start) and _number(over.stop)
                and over.start.value < over.stop.value and over.form is None):
            return None
    if not (isinstance(last, tir.If) and not last.orelse and isinstance(last.cond, tir.Cmp)
            and last.cond.op in FLIP):
        return None
    cond = last.cond
    written = {s.tensor for s in tir.walk_stmts(loop.body) if isinstance(s, tir.Store)}
    for mine, other, op in ((cond.a, cond.b, cond.op), (cond.b, cond.a, FLIP[cond.op])):
        if (not isinstance(other, tir.Load) or other.tensor not in written
                or not _fixed_bound(other, loop, values, tensors)):
            continue
        if over is not None and tir.reads_var(mine, over.var):
            continue
        value = _read_as(mine, values)
        if (value.dtype != other.dtype
                or types.concrete(value.dtype) not in ("float32", "float64") + types.SIGNED + types.UNSIGNED
                or not recomputable(value, set()) or not contiguous(value, loop.var)
                or any(isinstance(n, tir.Load) and n.tensor in written for n in tir.walk_expr(value))
                or short_loop(loop, value.dtype)):
            continue
        return Parts(value, other, op, over, tuple(st.value for st in prelude) + (value,))
    return None


def _fixed_bound(e: tir.Load, loop: tir.Loop, values: dict, tensors: dict) -> bool:
    """Whether the load ``e`` reads one place for the whole loop (given the inner loop's
    variable): subscripts free of loads and of the loop's variable, not a prelude scalar, and
    not a scalar declared anew in each iteration."""
    t = tensors.get(e.tensor)
    if t is None or e.tensor in values or (t.kind == "scalar" and loop.var in t.private_to):
        return False
    return not any(isinstance(n, tir.Load) or tir.is_var(n, loop.var) for i in e.indices for n in tir.walk_expr(i))


def _read_as(e, values: dict):
    """``e`` with each load of a scalar in ``values`` replaced by its value."""
    return tir.rewrite(e, lambda n: values[n.tensor] if isinstance(n, tir.Load) and n.tensor in values else None)


def _harmless(e) -> bool:
    """Whether ``e`` computes nothing that could fail or depend on anything but its operands:
    loads, numbers, variables, casts, ``+``, ``-``, ``*``, negation."""
    for n in tir.walk_expr(e):
        if isinstance(n, tir.Bin) and n.op not in ("+", "-", "*"):
            return False
        if isinstance(n, tir.Unary) and n.op != "neg":
            return False
        if not isinstance(n, (tir.Const, tir.Var, tir.Size, tir.Load, tir.Cast, tir.Bin, tir.Unary)):
            return False
    return True


def _number(e) -> bool:
    return isinstance(e, tir.Const) and isinstance(e.value, int)
