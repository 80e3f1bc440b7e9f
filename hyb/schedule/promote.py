"""Register blocks: the cells a reduction loop accumulates into, kept in a small local array.

:mod:`hyb.schedule.blocking` shapes a contraction so that its loops read::

    for (k = ...)                            the reduction
      for (ci = 0; ci <= min(MR - 1, ..); ci++)
        for (cj = 0; cj <= min(NR - 1, ..); cj++)
          S(.., ci, .., cj, .., k)           c[f(ci, cj)] = c[f(ci, cj)] + g(..)

This stage finds that shape in the loops themselves and, where ``S`` writes one cell per
``(ci, cj)`` that does not move with ``k``, and reads ``c`` only at that cell, rewrites it as::

    if (the block is full and the reduction runs)
      for ri < MR: for rj < NR:  S.load(.., ri, rj)     acc[ri, rj] = c[f(..)]
      for (k = ...) for ri < MR: for rj < NR:  S.acc     acc[ri, rj] = acc[ri, rj] + g(..)
      for ri < MR: for rj < NR:  S.store(.., ri, rj)    c[f(..)] = acc[ri, rj]
    else if (the reduction runs)
      the same, with the loops' own bounds for ri and rj (a block at the edge of the iteration space)
    else
      the loops as they were

``acc`` is a tensor of kind ``register``: the back end allocates it on the stack of the function
(and of each thread's outlined function), where LLVM keeps it in vector registers once the
constant-trip loops are unrolled and vectorised (a block at the edge stays in the array, in L1).  The rewrite changes no order of the accesses to
memory that any other statement sees: inside the reduction loop only ``S`` runs, and each of its
cells is read and written by one ``(ri, rj)`` alone.
"""
from __future__ import annotations

from dataclasses import replace

import islpy as isl

from ..dsl import tir
from ..dsl import types
from . import loops
from .blocking import BLOCK_DTYPES
from .vector import MAX_TRIPS, MIN_TRIPS, access_strides


def promote(p, nest: loops.LoopNest) -> tuple:
    """``(the nest with every register block promoted, the decisions)``; ``nest`` is unchanged."""
    state = {"tensors": dict(nest.kernel.tensors), "statements": dict(nest.statements), "decisions": []}

    def body(items):
        return tuple(node(s) for s in items)

    def node(s):
        if isinstance(s, loops.For):
            rewritten = _block(p, nest, s, state)
            return rewritten if rewritten is not None else replace(s, body=body(s.body))
        if isinstance(s, loops.If):
            return replace(s, then=body(s.then), orelse=body(s.orelse))
        return s

    new_body = body(nest.body)
    if not state["decisions"]:
        return nest, ()
    kernel = replace(nest.kernel, tensors=state["tensors"])
    return replace(nest, kernel=kernel, statements=state["statements"], body=new_body), tuple(state["decisions"])


def _block(p, nest, k_loop: loops.For, state):
    """The rewritten reduction loops from ``k_loop`` down (an ``If`` node), or None where they hold
    no register block: a chain of loops, each the only thing in the one around it, ending in two
    loops ``ci`` and ``cj`` around one statement call."""
    chain, at = [k_loop], k_loop
    while len(at.body) == 1 and isinstance(at.body[0], loops.For):
        chain.append(at.body[0])
        at = at.body[0]
    if len(chain) < 3 or len(at.body) != 1 or not isinstance(at.body[0], loops.StmtCall):
        return None
    call = at.body[0]
    i_loop, j_loop = chain[-2], chain[-1]
    chain = chain[:-2]
    if i_loop.step != 1 or j_loop.step != 1 or any(s.parallel for s in chain + [i_loop, j_loop]):
        return None
    ci, cj = i_loop.var, j_loop.var
    reduction = [s.var for s in chain]
    for e in (i_loop.init, i_loop.cond, j_loop.init, j_loop.cond):
        if any(loops.uses(e, k) for k in reduction):
            return None
    if loops.uses(j_loop.init, ci) or loops.uses(j_loop.cond, ci):
        return None
    ti, tj = _full_trips(i_loop), _full_trips(j_loop)
    if ti is None or tj is None or ti < 2 or tj < 2:
        return None
    st = nest.statements.get(call.stmt)
    if st is None or st.opaque or st.guards or not isinstance(st.stmt, tir.Store) or len(st.writes) != 1:
        return None
    store = st.stmt
    t = nest.kernel.tensors[store.tensor]
    if t.kind == "scalar" or types.concrete(t.dtype) not in BLOCK_DTYPES:
        return None
    pos = {v: [n for n, a in enumerate(call.args) if loops.uses(a, v)] for v in [ci, cj] + reduction}
    if len(pos[ci]) != 1 or len(pos[cj]) != 1 or pos[ci] == pos[cj]:
        return None
    pi, pj = pos[ci][0], pos[cj][0]
    if any(loops.uses(call.args[pi], v) for v in reduction + [cj]) \
            or any(loops.uses(call.args[pj], v) for v in reduction + [ci]):
        return None
    pk = sorted({n for v in reduction for n in pos[v]})
    strides = access_strides(st.writes[0], len(st.iters))
    if strides is None or any(n in strides for n in pk) or pi not in strides or pj not in strides:
        return None
    if not _one_cell_each(st, pi, pj, pk):
        return None
    loads = list(_loads(store.value, store.tensor))
    if any(ld.indices != store.indices for ld in loads) or id(store) in nest.runtime_checked \
            or any(id(ld) in nest.runtime_checked for ld in loads):
        return None
    # the new statements and their local array
    acc = tir.Tensor(f"{st.name}_acc", (ti, tj), t.dtype, "register", store.span, f"{t.source_name} (register block)")
    r, c = f"{st.name}_r", f"{st.name}_c"
    rv, cv = tir.Var("int", r, span=store.span), tir.Var("int", c, span=store.span)
    cell = tir.Load(t.dtype, acc.name, [rv, cv], span=store.span)
    iters = list(st.iters) + [r, c]
    plain = dict(writes=[], reads=[], guards=[], origin=st.name)
    made = {
        "load": replace(st, name=f"{st.name}.load", iters=iters, runs_instances=False, **plain,
                        stmt=tir.Store(acc.name, [rv, cv], tir.Load(t.dtype, store.tensor, store.indices,
                                                                   span=store.span), store.span)),
        "acc": replace(st, name=f"{st.name}.acc", iters=iters, **plain,
                       stmt=tir.Store(acc.name, [rv, cv], _replace_loads(store.value, store.tensor, cell),
                                      store.span)),
        "store": replace(st, name=f"{st.name}.store", iters=iters, runs_instances=False, **plain,
                         stmt=tir.Store(store.tensor, store.indices, cell, store.span)),
    }
    ri, rj = ci + "_r", cj + "_r"
    at = {ci: loops.LOp("add", (i_loop.init, loops.LVar(ri))), cj: loops.LOp("add", (j_loop.init, loops.LVar(rj)))}
    args = tuple(_subst(a, at) for a in call.args)
    # the first iteration of the reduction loops: where the load and store of the block run, and
    # the condition for the loops to run at all
    first, runs = {}, None
    for s in chain:
        start = _subst(s.init, first)
        ok = _subst(s.cond, {**first, s.var: start})
        runs = ok if runs is None else loops.LOp("and", (runs, ok))
        first[s.var] = start
    vector = MIN_TRIPS <= tj <= MAX_TRIPS

    def nest_of(name, stmt_args, full):
        """The block's loops around a call of ``name``: MR x NR constant trips where ``full``, else
        the original loops' own bounds (a block at the edge, at most MR x NR)."""
        if full:
            i_cond = loops.LOp("lt", (loops.LVar(ri), loops.LInt(ti)))
            j_cond = loops.LOp("lt", (loops.LVar(rj), loops.LInt(tj)))
        else:
            i_cond, j_cond = _subst(i_loop.cond, {ci: at[ci]}), _subst(j_loop.cond, {cj: at[cj]})
        inner = loops.For(rj, loops.LInt(0), j_cond, 1,
                          (loops.StmtCall(name, stmt_args + (loops.LVar(ri), loops.LVar(rj))),),
                          vector=vector and full)
        return loops.For(ri, loops.LInt(0), i_cond, 1, (inner,))

    def promoted(full):
        outside = tuple(_subst(a, first) for a in args)
        reduced = nest_of(made["acc"].name, args, full)
        for s in reversed(chain):
            reduced = replace(s, body=(reduced,))
        return nest_of(made["load"].name, outside, full), reduced, nest_of(made["store"].name, outside, full)

    full = loops.LOp("and", (
        loops.LOp("and", (_subst(i_loop.cond, {ci: loops.LOp("add", (i_loop.init, loops.LInt(ti - 1)))}),
                          _subst(j_loop.cond, {cj: loops.LOp("add", (j_loop.init, loops.LInt(tj - 1)))}))),
        runs))
    state["tensors"][acc.name] = acc
    for s in made.values():
        state["statements"][s.name] = s
    state["decisions"].append(f"register block {ti}x{tj} of {st.name}: `{t.source_name}` accumulated in "
                              f"registers across loop(s) {', '.join(f'`{k}`' for k in reduction)} (a full "
                              "block in vector registers, a block at the edge in a stack array)")
    # (where the reduction loops' first iteration does not run, their other ones may: as written)
    return loops.If(full, promoted(True), (loops.If(runs, promoted(False), (k_loop,)),))


def _full_trips(s: loops.For) -> int | None:
    """The trip count of a full block of ``s``: the smallest upper bound that is the loop's start plus
    a constant (its condition a conjunction of ``var <= bound`` / ``var < bound`` terms, bounds
    possibly ``min``s), or None."""
    bounds = _upper_bounds(s.cond, s.var)
    if bounds is None:
        return None
    start = _linear(s.init)
    best = None
    for op, b in bounds:
        lb = _linear(b)
        if lb is None or start is None:
            continue
        diff = {v: lb.get(v, 0) - start.get(v, 0) for v in set(lb) | set(start)}
        if any(c for v, c in diff.items() if v != 1):
            continue
        n = diff.get(1, 0) + (1 if op == "le" else 0)
        best = n if best is None else min(best, n)
    return best


def _upper_bounds(cond, var: str):
    if isinstance(cond, loops.LOp) and cond.op == "and":
        a, b = (_upper_bounds(x, var) for x in cond.args)
        return None if a is None or b is None else a + b
    if (isinstance(cond, loops.LOp) and cond.op in ("le", "lt") and cond.args[0] == loops.LVar(var)
            and not loops.uses(cond.args[1], var)):
        out, todo = [], [cond.args[1]]
        while todo:
            b = todo.pop()
            if isinstance(b, loops.LOp) and b.op == "min":
                todo.extend(b.args)
            else:
                out.append((cond.op, b))
        return out
    return None


def _linear(e) -> dict | None:
    """``e`` as {variable: coefficient, 1: constant}, or None where it is not linear."""
    if isinstance(e, loops.LInt):
        return {1: e.value}
    if isinstance(e, loops.LVar):
        return {e.name: 1}
    if e.op in ("add", "sub"):
        a, b = _linear(e.args[0]), _linear(e.args[1])
        if a is None or b is None:
            return None
        sign = 1 if e.op == "add" else -1
        return {v: a.get(v, 0) + sign * b.get(v, 0) for v in set(a) | set(b)}
    if e.op == "neg":
        a = _linear(e.args[0])
        return None if a is None else {v: -c for v, c in a.items()}
    if e.op == "mul":
        a, b = _linear(e.args[0]), _linear(e.args[1])
        if a is None or b is None:
            return None
        if set(a) == {1}:
            return {v: a[1] * c for v, c in b.items()}
        if set(b) == {1}:
            return {v: b[1] * c for v, c in a.items()}
    return None


def _subst(e, at: dict):
    if isinstance(e, loops.LVar):
        return at.get(e.name, e)
    if isinstance(e, loops.LOp):
        return loops.LOp(e.op, tuple(_subst(a, at) for a in e.args))
    return e


def _one_cell_each(st, pi: int, pj: int, pk: list) -> bool:
    """Whether two instances of ``st`` that agree on every iterator but ``pi``, ``pj`` and ``pk``
    write the same cell only when they also agree on ``pi`` and ``pj``."""
    rel = st.writes[0].relation
    same_cell = rel.apply_range(rel.reverse())
    n = len(st.iters)
    xs = [f"x{q}" for q in range(n)]
    ys = [f"y{q}" for q in range(n)]
    eq = [f"x{q} = y{q}" for q in range(n) if q not in (pi, pj, *pk)]
    name = st.domain.get_tuple_name()
    text = (f"{{ {name}[{', '.join(xs)}] -> {name}[{', '.join(ys)}] : "
            + " and ".join(eq + [f"(x{pi} != y{pi} or x{pj} != y{pj})"]) + " }")
    return same_cell.intersect(isl.Map(text)).is_empty()


def _loads(e, tensor: str):
    """The loads of ``tensor`` in the typed-IR expression ``e``."""
    if isinstance(e, tir.Load):
        if e.tensor == tensor:
            yield e
        for x in e.indices:
            yield from _loads(x, tensor)
        return
    for f in getattr(e, "__dataclass_fields__", {}):
        v = getattr(e, f)
        if isinstance(v, tir.TExpr):
            yield from _loads(v, tensor)
        elif isinstance(v, list):
            for x in v:
                if isinstance(x, tir.TExpr):
                    yield from _loads(x, tensor)


def _replace_loads(e, tensor: str, by):
    """``e`` with every load of ``tensor`` replaced by ``by`` (other nodes shared, not copied)."""
    if isinstance(e, tir.Load):
        return by if e.tensor == tensor else e
    changes = {}
    for f in getattr(e, "__dataclass_fields__", {}):
        v = getattr(e, f)
        if isinstance(v, tir.TExpr):
            nv = _replace_loads(v, tensor, by)
            if nv is not v:
                changes[f] = nv
        elif isinstance(v, list) and any(isinstance(x, tir.TExpr) for x in v):
            nv = [_replace_loads(x, tensor, by) if isinstance(x, tir.TExpr) else x for x in v]
            if any(a is not b for a, b in zip(nv, v)):
                changes[f] = nv
    return replace(e, **changes) if changes else e
