"""A value computed in one loop and again in a later one, stored once in the cell the later loop writes.

A softmax written the way its formula reads::

    for i in range(n):
        ...
        s = 0.0
        for j in range(d):
            s += exp(x[i, j] - m)
        for j in range(d):
            y[i, j] = exp(x[i, j] - m) / s

computes every ``exp`` twice.  The second loop writes ``y[i, j]``, a cell of its own for each
``j``, which nothing reads or writes before it: the first loop can store its ``exp`` there, and the
second read it back::

        for j in range(d):
            e = exp(x[i, j] - m)
            y[i, j] = e
            s += e
        for j in range(d):
            y[i, j] = y[i, j] / s

which is the spelling that stores the exponentials first.  This stage, on the typed kernel before
extraction, makes that change where all of this holds, for two loops ``L1`` and ``L2`` of one
block of statements, ``L1`` first:

* they run over the same range with the same step, as written (no form of their own);
* a statement directly in ``L1``'s body (in no branch or inner loop: it runs at every step)
  computes a math function ``E`` (:data:`COSTLY`) that reads only loop variables, constants and
  tensors that nothing in ``L1``, ``L2`` or the statements between them writes; ``L2``'s
  statements up to a store ``T[idx] = ...`` directly in its body compute the same ``E`` (its loop
  variable renamed);
* ``idx`` reads only ``L2``'s variable, that of a loop around both, and constants, with ``L2``'s
  variable alone as one of the subscripts and in no other (a cell of its own at each step);
* ``T`` is an output or a temporary of ``E``'s dtype (the stored value is the computed one, bit
  for bit), and nothing in ``L1``, between the loops, or in ``L2`` but that store touches it.

``L1`` then computes ``E`` into a scalar of its own before the statement that computed it and
stores it in ``T[idx]``; every ``E`` in that statement and those after it in ``L1`` reads the
scalar, and every ``E`` in ``L2``'s statements up to the store reads ``T[idx]``.  Each value read
is the one the first loop computed, which is the value the second computed before (but for float64 functions from libmvec, whose vector variants may differ
from libm's in the last bit, where the two loops' vector iterations end at different elements).
``rewrite(typed)`` returns the new typed kernel and one decision per value stored.
"""
from __future__ import annotations

from dataclasses import replace

from ..dsl import tir
from ..dsl.intrinsics import FLOAT_MATH

# the math functions worth a store and a load to compute once (sqrt is a few cycles)
COSTLY = frozenset(FLOAT_MATH) - {"sqrt", "rsqrt"}


def rewrite(typed: tir.TypedKernel) -> tuple:
    """``(typed kernel, decisions)`` with every value of the module doc computed once."""
    decisions, tensors = [], dict(typed.tensors)
    body = _block(typed, tensors, typed.body, (), decisions)
    if not decisions:
        return typed, []
    return replace(typed, body=body, tensors=tensors), decisions


def _block(typed, tensors: dict, body: list, around: tuple, decisions: list) -> list:
    """``body`` (inside the loops ``around``) with the pairs of loops in it, and in the blocks
    inside it, rewritten; the scalars the rewrites add go in ``tensors``."""
    out = []
    for s in body:
        if isinstance(s, tir.Loop):
            s = replace(s, body=_block(typed, tensors, s.body, around + (s.var,), decisions))
        elif isinstance(s, tir.If):
            s = replace(s, body=_block(typed, tensors, s.body, around, decisions),
                        orelse=_block(typed, tensors, s.orelse, around, decisions))
        out.append(s)
    for p in range(len(out)):
        for q in range(p + 1, len(out)):
            if not (isinstance(out[p], tir.Loop) and isinstance(out[q], tir.Loop)):
                continue
            found = _pair(typed, tensors, out[p], out[q], out[p + 1:q], around)
            if found is not None:
                out[p], out[q], text = found
                decisions.append(text)
    return out


def _pair(typed, tensors: dict, l1: tir.Loop, l2: tir.Loop, between: list, around: tuple):
    """``(L1, L2, decision)`` rewritten as the module doc says, or None."""
    if (l1.form is not None or l2.form is not None or l1.step != l2.step
            or l1.start != l2.start or l1.stop != l2.stop):
        return None
    written = {s.tensor for s in tir.walk_stmts([l1, *between, l2]) if isinstance(s, tir.Store)}
    touched_before = _tensors([l1, *between])
    for n2, store in enumerate(l2.body):
        if not isinstance(store, tir.Store):
            continue
        t = typed.tensors[store.tensor]
        if t.kind not in ("output", "temp") or store.tensor in typed.inputs or store.tensor in touched_before:
            continue
        if not _own_cell(store.indices, l2.var) or store.tensor in _tensors(l2.body[:n2] + l2.body[n2 + 1:]) \
                or any(isinstance(e, tir.Load) and e.tensor == store.tensor
                       for x in store.indices + [store.value] for e in tir.walk_expr(x)):
            continue
        idx1 = [_renamed(i, l2.var, l1.var) for i in store.indices]
        for n1, st in enumerate(l1.body):
            if not isinstance(st, tir.Store):
                continue
            for e in _costly(st, written, t.dtype):
                e2 = _renamed(e, l1.var, l2.var)
                if not any(x == e2 for s in l2.body[:n2 + 1] for top in _exprs(s) for x in tir.walk_expr(top)):
                    continue
                # (the value in a scalar of the first loop's own, stored in the cell and used
                # from the scalar: the spelling that stores the value first)
                name = _fresh(tensors, f"{store.tensor}_once")
                tensors[name] = tir.Tensor(name, (), t.dtype, "scalar", e.span, name, private_to=around + (l1.var,))
                value = tir.Load(t.dtype, name, [], span=e.span)
                cell2 = tir.Load(t.dtype, store.tensor, list(store.indices), span=e2.span)
                new1 = (l1.body[:n1] + [tir.Store(name, [], e, span=st.span),
                                        tir.Store(store.tensor, idx1, value, span=st.span)]
                        + [_replaced(s, e, value) for s in l1.body[n1:]])
                new2 = [_replaced(s, e2, cell2) for s in l2.body[:n2 + 1]] + l2.body[n2 + 1:]
                line = e.span.line if e.span is not None else "?"
                text = (f"`{e.name}(...)` (line {line}) computed once: stored in `{t.source_name or t.name}` by the "
                        f"first loop, read back by the loop that writes it")
                return replace(l1, body=new1), replace(l2, body=new2), text
    return None


def _fresh(tensors: dict, base: str) -> str:
    name, k = base, 1
    while name in tensors:
        name, k = f"{base}{k}", k + 1
    return name


def _costly(st: tir.Store, written: set, dtype: str) -> list:
    """The math calls of ``st``, a statement directly in the first loop's body, worth computing
    once: of ``dtype``, reading no tensor in ``written`` (the only variables they can read are
    the first loop's and those of the loops around both, fixed across both loops)."""
    out = []
    for e in _always(st.value):
        if (isinstance(e, tir.Intrinsic) and e.name in COSTLY and e.dtype == dtype
                and not any(isinstance(x, tir.Load) and (x.tensor in written or x.checked) for x in tir.walk_expr(e))):
            out.append(e)
    return out


def _always(e):
    """``e`` and its sub-expressions evaluated whenever ``e`` is, parents first: not an arm of a
    conditional (``a if c else b``) or the right side of ``and``/``or``, which may guard a read
    that is only in bounds where they run."""
    stack = [e]
    while stack:
        e = stack.pop()
        yield e
        if isinstance(e, tir.Select):
            stack.append(e.cond)
        elif isinstance(e, tir.Logic):
            stack.append(e.a)
        else:
            stack.extend(reversed(_children(e)))


def _children(e) -> list:
    """The expressions directly in ``e``."""
    out = []
    for v in vars(e).values():
        if isinstance(v, tir.TExpr):
            out.append(v)
        elif isinstance(v, list):
            out += [x for x in v if isinstance(x, tir.TExpr)]
    return out


def _own_cell(indices: list, var: str) -> bool:
    """Whether the subscripts give each value of ``var`` a cell of its own: one of them is ``var``
    alone, no other reads it, and none reads a tensor."""
    alone = [i for i in indices if tir.is_var(i, var)]
    if len(alone) != 1:
        return False
    for i in indices:
        if any(isinstance(x, tir.Load) for x in tir.walk_expr(i)):
            return False
        if i is not alone[0] and tir.reads_var(i, var):
            return False
    return True


def _tensors(stmts: list) -> set:
    """The tensors the statements read or write."""
    out = set()
    for s in tir.walk_stmts(stmts):
        if isinstance(s, tir.Store):
            out.add(s.tensor)
        for e in _exprs(s):
            out |= {x.tensor for x in tir.walk_expr(e) if isinstance(x, tir.Load)}
    return out


def _exprs(s) -> list:
    """The expressions directly in statement ``s`` (not those of the statements inside it)."""
    if isinstance(s, tir.Store):
        return list(s.indices) + [s.value]
    if isinstance(s, tir.If):
        return [s.cond]
    if isinstance(s, tir.Loop):
        return [s.start, s.stop]
    return _children(s)


def _renamed(e, old: str, new: str):
    return tir.rewrite(e, lambda n: replace(n, name=new) if isinstance(n, tir.Var) and n.name == old else None)


def _replaced(s, old, by):
    """Statement ``s`` with every expression equal to ``old`` replaced by ``by``."""
    return tir.rewrite(s, lambda n: by if isinstance(n, tir.TExpr) and n == old else None)
