"""Register blocks: the cells a reduction loop accumulates into, kept in a small local array.

:mod:`hyb.schedule.blocking` shapes a contraction so that its loops read::

    for (k = ...)                            the reduction
      for (ci = 0; ci <= min(MR - 1, ..); ci++)
        for (cj = 0; cj <= min(NR - 1, ..); cj++)
          S(.., ci, .., cj, .., k)           c[f(ci, cj)] = c[f(ci, cj)] + g(..)

and marks the reduction loop with the block's shape (``For.block``, from the plan's mark).  This
stage reads that shape in the loops so marked and, where ``S`` writes one cell per
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
import numpy as np

from ..dsl import tir
from ..dsl import types
from . import loops
from .argext import lanes_for
from .blocking import BLOCK_DTYPES, MIN_PANEL_ROWS
from .counting import access_strides
from .vector import MAX_TRIPS, MIN_TRIPS


def promote(p, nest: loops.LoopNest) -> tuple:
    """``(the nest with every register block promoted, the decisions)``; ``nest`` is unchanged.
    The blocks are those schedule.blocking made: the loops whose ``block`` field its mark set."""
    state = {"tensors": dict(nest.kernel.tensors), "statements": dict(nest.statements), "decisions": [],
             "packs": {}}  # id of a loop -> the packing loops to run first in its body

    def body(items, around):
        return tuple(node(s, around) for s in items)

    def node(s, around):
        if isinstance(s, loops.For):
            rewritten = _block(p, nest, s, state, around) if s.block is not None else None
            if rewritten is not None:
                return rewritten
            inner = body(s.body, around + (s,))
            return replace(s, body=tuple(state["packs"].pop(id(s), ())) + inner)
        if isinstance(s, loops.If):
            return replace(s, then=body(s.then, around + (s,)), orelse=body(s.orelse, around + (s,)))
        return s

    new_body = body(nest.body, ())
    if not state["decisions"]:
        return nest, ()
    kernel = replace(nest.kernel, tensors=state["tensors"])
    return replace(nest, kernel=kernel, statements=state["statements"], body=new_body), tuple(state["decisions"])


def _block(p, nest, k_loop: loops.For, state, around: tuple = ()):
    """The rewritten reduction loops from ``k_loop`` down (an ``If`` node), or None where they hold
    no register block: a chain of loops, each the only thing in the one around it, ending in two
    loops ``ci`` and ``cj`` around one statement call.  ``around``: the loops and conditions around
    ``k_loop``, outermost first (where a packed panel of an operand can be made, :func:`_pack`)."""
    chain, at = [k_loop], k_loop
    while len(at.body) == 1 and isinstance(at.body[0], loops.For):
        chain.append(at.body[0])
        at = at.body[0]
    if len(chain) < 2 or len(at.body) != 1 or not isinstance(at.body[0], loops.StmtCall):
        return None
    if len(chain) >= 3:
        made = _block_of(p, nest, chain[:-2], chain[-2], chain[-1], at.body[0], state, around)
        if made is not None:
            return made
    # a block of one row: no loop the written cell moves with but the vector's, one reduction loop
    # (as schedule.blocking makes them)
    if len(chain) != 2:
        return None
    return _block_of(p, nest, chain[:-1], None, chain[-1], at.body[0], state, around)


def _block_of(p, nest, chain: list, i_loop, j_loop: loops.For, call: loops.StmtCall, state, around: tuple):
    """:func:`_block` for the reduction loops ``chain`` around the row loop ``i_loop`` (None: a
    block of one row) around the column loop ``j_loop`` around ``call``."""
    k_loop = chain[0]
    if j_loop.step != 1 or any(s.parallel for s in chain + [j_loop]) \
            or (i_loop is not None and (i_loop.step != 1 or i_loop.parallel)):
        return None
    ci, cj = (i_loop.var if i_loop is not None else None), j_loop.var
    reduction = [s.var for s in chain]
    bounds = (j_loop.init, j_loop.cond) + ((i_loop.init, i_loop.cond) if i_loop is not None else ())
    for e in bounds:
        if any(loops.uses(e, k) for k in reduction):
            return None
    # where the columns' bounds move with the row (a triangle: ``j > i``), a full block is one whose
    # rows all start at the bound that does not (see _column_start) and all reach NR columns
    j_start = _column_start(j_loop, ci) if ci is not None else j_loop.init
    if j_start is None or (ci is not None and not _affine_in(j_loop.cond, cj, ci)):
        return None
    ti = _full_trips(i_loop) if i_loop is not None else 1
    tj = _full_trips(replace(j_loop, init=j_start))
    if ti is None or tj is None or (i_loop is not None and ti < 2) or tj < 2:
        return None
    st = nest.statements.get(call.stmt)
    if st is None or st.opaque or st.guards or not isinstance(st.stmt, tir.Store) or len(st.writes) != 1:
        return None
    store = st.stmt
    t = nest.kernel.tensors[store.tensor]
    if t.kind == "scalar" or types.concrete(t.dtype) not in BLOCK_DTYPES:
        return None
    if i_loop is None and k_loop.block != (1, tj):
        return None
    rows = [ci] if ci is not None else []
    pos = {v: [n for n, a in enumerate(call.args) if loops.uses(a, v)] for v in rows + [cj] + reduction}
    if any(len(pos[v]) != 1 for v in rows + [cj]) or (rows and pos[ci] == pos[cj]):
        return None
    pi, pj = (pos[ci][0] if rows else None), pos[cj][0]
    if (rows and any(loops.uses(call.args[pi], v) for v in reduction + [cj])) \
            or any(loops.uses(call.args[pj], v) for v in reduction + rows):
        return None
    pk = sorted({n for v in reduction for n in pos[v]})
    strides = access_strides(st.writes[0], len(st.iters))
    if strides is None or any(n in strides for n in pk) or (rows and pi not in strides) or pj not in strides:
        return None
    if not _one_cell_each(st, pi, pj, pk):
        return None
    loads = list(_loads(store.value, store.tensor))
    if any(ld.indices != store.indices for ld in loads) or store.checked or any(ld.checked for ld in loads):
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
    ri, rj = (ci if ci is not None else st.name + "_i") + "_r", cj + "_r"
    # a block at the edge: each row from its own start; a full one: every row from j_start
    if ci is not None:
        row = loops.LOp("add", (i_loop.init, loops.LVar(ri)))
        at = {ci: row, cj: loops.LOp("add", (_subst(j_loop.init, {ci: row}), loops.LVar(rj)))}
        at_full = {ci: row, cj: loops.LOp("add", (j_start, loops.LVar(rj)))}
    else:
        at = at_full = {cj: loops.LOp("add", (j_start, loops.LVar(rj)))}
    args = tuple(_subst(a, at) for a in call.args)
    full_args = tuple(_subst(a, at_full) for a in call.args)
    # the first iteration of the reduction loops: where the load and store of the block run, and
    # the condition for the loops to run at all
    first, runs = {}, None
    for s in chain:
        start = _subst(s.init, first)
        ok = _subst(s.cond, {**first, s.var: start})
        runs = ok if runs is None else loops.LOp("and", (runs, ok))
        first[s.var] = start
    vector = MIN_TRIPS <= tj <= MAX_TRIPS

    def nest_of(name, stmt_args, full, rows=ti, cols=tj):
        """The block's loops around a call of ``name`` (its last arguments ``ri`` and ``rj``): rows
        (MR) x cols (NR) constant trips where ``full``, else the original loops' own bounds (a
        block at the edge, at most MR x NR)."""
        if full or ci is None:
            i_cond = loops.LOp("lt", (loops.LVar(ri), loops.LInt(rows)))
        else:
            i_cond = _subst(i_loop.cond, {ci: at[ci]})
        if full:
            j_cond = loops.LOp("lt", (loops.LVar(rj), loops.LInt(cols)))
        else:
            j_cond = _subst(j_loop.cond, at)
        inner = loops.For(rj, loops.LInt(0), j_cond, 1,
                          (loops.StmtCall(name, stmt_args + (loops.LVar(ri), loops.LVar(rj))),),
                          vector=full and MIN_TRIPS <= cols <= MAX_TRIPS)
        return loops.For(ri, loops.LInt(0), i_cond, 1, (inner,))

    def promoted(full):
        own = full_args if full else args
        outside = tuple(_subst(a, first) for a in own)
        reduced = nest_of(fast_acc[0], own + fast_acc[1], full) if full else nest_of(made["acc"].name, own, full)
        for s in reversed(chain):
            reduced = replace(s, body=(reduced,))
        return ((nest_of(made["load"].name, outside, full),) + (preamble if full else ())
                + (reduced, nest_of(made["store"].name, outside, full)))

    def edge_block(rows, cols=tj, padded=None):
        """A block of ``rows`` x ``cols`` (the last along I or J, of sizes known now) in
        registers, reading the operands as written (the packed panel and the rows' values serve
        whole blocks).  ``padded``: the columns' count rounded up to whole vectors, the block's
        cells and update computed on all of them (the loads past ``cols`` not made), so that its
        loops are whole vectors; only ``cols`` columns are stored."""
        outside = tuple(_subst(a, first) for a in full_args)
        load, acc_name = made["load"].name, made["acc"].name
        if padded:
            load, acc_name = made["pload"].name, made["pacc_edge"].name
        reduced = nest_of(acc_name, full_args, True, rows, padded or cols)
        for s in reversed(chain):
            reduced = replace(s, body=(reduced,))
        return (nest_of(load, outside, True, rows, padded or cols), reduced,
                nest_of(made["store"].name, outside, True, rows, cols))

    last_col = loops.LOp("add", (j_start, loops.LInt(tj - 1)))
    # every row of the block reaches NR columns from j_start; where the bounds move with the row,
    # at its first and last row (they are affine in it: a start that is a maximum of affine terms
    # is convex, an end that is a minimum is concave, so both rows hold for the rows between)
    j_full = _subst(j_loop.cond, {cj: last_col})
    if ci is not None:
        last_row = loops.LOp("add", (i_loop.init, loops.LInt(ti - 1)))
    if ci is not None and (loops.uses(j_loop.init, ci) or loops.uses(j_loop.cond, ci)):
        terms = [_subst(j_loop.cond, {cj: last_col, ci: r}) for r in (i_loop.init, last_row)]
        terms += [loops.LOp("le", (_subst(g, {ci: r}), j_start))
                  for g in _max_terms(j_loop.init) if loops.uses(g, ci) for r in (i_loop.init, last_row)]
        j_full = terms[0]
        for c in terms[1:]:
            j_full = loops.LOp("and", (j_full, c))
    full = loops.LOp("and", (j_full if ci is None else loops.LOp("and", (_subst(i_loop.cond, {ci: last_row}), j_full)),
                             runs))
    single = _single_reduction(chain, call)
    # (a panel of the vector operand serves the rows of blocks: none without rows)
    packed = None if ci is None else _pack(nest, st, call, single, cj, j_start, tj, pj, around, state,
                                           loops.LOp("and", (j_full, runs)), made["acc"].stmt, ci)
    if packed is not None:  # the full block reads the packed panel
        pacc, extra = packed
        made["pacc"] = pacc
        fast_acc = (pacc.name, extra)
    else:
        fast_acc = (made["acc"].name, ())
    hoisted = _hoist(nest, st, single, ri, pj, ti, full_args,
                     made["pacc"] if packed is not None else made["acc"], state)
    preamble = ()
    if hoisted is not None:  # the full block reads the rows' values computed before its reduction
        hacc, preamble = hoisted
        made["hacc"] = hacc
        fast_acc = (hacc.name, (loops.LOp("sub", (loops.LVar(chain[0].var), chain[0].init)),))
    state["tensors"][acc.name] = acc
    for s in made.values():
        state["statements"][s.name] = s
    er, ec, ep = k_loop.edge
    steady = ci is not None and not (loops.uses(j_loop.init, ci) or loops.uses(j_loop.cond, ci))
    last_rows, last_cols = steady and 0 < er < ti, steady and 0 < ec < tj and ec <= ep <= tj
    if last_cols and ep > ec:  # the padded columns' statements: loads of the operands only where a column is
        here = tir.Cmp("bool", "<", cv, tir.Const("int", ec, span=store.span), span=store.span)
        col = st.iters[pj]

        def only_here(e):
            return tir.rewrite(e, lambda n: tir.Select(n.dtype, here, n, tir.Const(n.dtype, 0, span=n.span),
                                                       span=n.span)
                               if isinstance(n, tir.Load) and n.tensor != acc.name
                               and any(tir.reads_var(i, col) for i in n.indices) else None)

        made["pload"] = replace(made["load"], name=f"{st.name}.pload", stmt=replace(
            made["load"].stmt, value=only_here(made["load"].stmt.value)))
        made["pacc_edge"] = replace(made["acc"], name=f"{st.name}.pacc_edge", stmt=replace(
            made["acc"].stmt, value=only_here(made["acc"].stmt.value)))
        state["statements"].update({made[n].name: made[n] for n in ("pload", "pacc_edge")})
    edges = ((f"the last {er} row{'s' * (er > 1)} of I" if last_rows else "")
             + (" and " if last_rows and last_cols else "")
             + (f"the last {ec} column{'s' * (ec > 1)} of J (on {ep})" if last_cols else ""))
    state["decisions"].append(f"register block {ti}x{tj} of {st.name}: `{t.source_name}` accumulated in "
                              f"registers across loop(s) {', '.join(f'`{k}`' for k in reduction)} (a full "
                              "block in vector registers, " + (f"{edges} in blocks of their own there too, " if edges else "")
                              + "a block at the edge in a stack array)")
    # Where the reduction loops' first iteration does not run, a single loop runs no iteration at
    # all; of nested ones, the inner may run in other iterations of the outer: as written.
    edge = loops.If(runs, promoted(False), () if len(chain) == 1 else (k_loop,))

    def row_runs(r):
        return _subst(i_loop.cond, {ci: loops.LOp("add", (i_loop.init, loops.LInt(r)))})

    def col_runs(c):
        return _subst(j_loop.cond, {cj: loops.LOp("add", (j_start, loops.LInt(c)))})

    def exactly(runs_at, n, other_full, block):
        """``block`` where the loop runs exactly ``n`` times and the other way is full, else
        ``edge``."""
        ok = loops.LOp("and", (loops.LOp("and", (runs_at(n - 1), other_full)), runs))
        return loops.If(runs_at(n), (edge,), (loops.If(ok, block, (edge,)),))

    # the last block of I (of J), of the rows (columns) known now, the other way full: in
    # registers too (in the stack array, the 4 rows and 12 columns at the edges of a float32 gemm
    # 1000 x 1100 x 900 took 13 % of its time)
    if last_rows:
        edge = exactly(row_runs, er, j_full, edge_block(er))
    if last_cols:
        edge = exactly(col_runs, ec, row_runs(ti - 1), edge_block(ti, ec, ep if ep > ec else None))
    return loops.If(full, promoted(True), (edge,))


# A transposed operand's panel is copied in runs of this many reduction steps: each of the panel's
# NR rows is read along one cache line, and the run's lines of the panel stay in L1 while all the
# rows are written into them.  (Measured on this project's Xeon machine, float32 linear 512x1024 @
# (1024x1024)^T, one thread: the panel copied a step at a time across its NR rows, gathering from NR
# rows of the operand at once, 14.7 ms; in runs of 8, 16 or 32 steps, 9.5 ms; W stored (in, out)
# and read in place, 8.2 ms.)
PACK_STEPS = 16
MAX_PANEL_BYTES = 256 * 1024  # a packed panel lives on the stack of the function (or thread)


def _single_reduction(chain: list, call: loops.StmtCall):
    """``(the loop, the position of its statement iterator, its full trip count)`` where the block's
    reduction is one loop of step 1 that moves one iterator and has a constant full trip count
    (packing and the rows' values need these), else None."""
    if len(chain) != 1 or chain[0].step != 1:
        return None
    pos = [n for n, a in enumerate(call.args) if loops.uses(a, chain[0].var)]
    trips = _full_trips(chain[0])
    return None if len(pos) != 1 or trips is None else (chain[0], pos[0], trips)


def _pack(nest, st, call, single, cj: str, j_start, tj: int, pj: int, around: tuple, state, ready, acc_stmt,
          ci: str):
    """Packing of the block's vector operand, where it pays and is legal: ``(the statement the full
    block runs instead of S.acc, the extra argument it takes)``, after asking ``state`` to run the
    packing loops first in the body of the loop around the block where they belong; or None.

    The operand is a read of S that moves with the reduction loop ``k`` and with ``cj`` and with no
    loop between them and the place of the packing: the outermost place where every value its panel
    needs is known, which must be outside at least one loop around the block (the register tiles of
    ``i``, which then reuse the panel).  The panel ``pack[kk, rj] = b[.., k0 + kk, .., j0 + rj]``
    (KC x NR, contiguous) is made there when the ``cj`` block, from ``j_start``, is full and the
    reduction runs (``ready``; not where that depends on the block's row ``ci``), by the statement
    S.pack; nothing in that loop writes ``b``."""
    if single is None or single[2] < MIN_PANEL_ROWS or loops.uses(ready, ci):
        return None
    k_loop, pk, kt = single
    k = k_loop.var
    it_k, it_j = st.iters[pk], st.iters[pj]
    store = st.stmt
    for ld in _outer_loads(store.value, store.tensor):
        used = _vars(ld.indices)
        if it_k not in used or it_j not in used or ld.checked:
            continue
        t = nest.kernel.tensors[ld.tensor]
        if tj * kt * np.dtype(types.concrete(t.dtype)).itemsize > MAX_PANEL_BYTES:
            continue
        kk, rj = f"{st.name}_kk", f"{st.name}_pc"
        at = {k: loops.LOp("add", (k_loop.init, loops.LVar(kk))),
              cj: loops.LOp("add", (j_start, loops.LVar(rj)))}
        pack_args = tuple(_subst(a, at) if st.iters[n] in used else loops.LInt(0) for n, a in enumerate(call.args))
        needed = set()
        for e in pack_args + (_subst(k_loop.cond, at), ready):
            needed |= _loop_vars(e)
        needed -= {kk, rj}
        place = max((n for n, a in enumerate(around) if isinstance(a, loops.For) and a.var in needed), default=None)
        if place is None or not any(isinstance(a, loops.For) for a in around[place + 1:]) \
                or any(isinstance(a, loops.If) for a in around[place + 1:]):
            continue
        home = around[place]
        if any(w.tensor == ld.tensor for c in loops.calls(home.body) for w in nest.statements[c.stmt].writes):
            continue
        # the panel, the statement that fills it, and S reading it in the full block
        panel = tir.Tensor(f"{st.name}_panel", (kt, tj), t.dtype, "register", ld.span,
                           f"{t.source_name} (packed panel)")
        kv, cv = tir.Var("int", kk, span=ld.span), tir.Var("int", rj, span=ld.span)
        common = dict(writes=[], reads=[], guards=[], origin=st.name)
        filler = replace(st, name=f"{st.name}.pack", iters=list(st.iters) + [kk, rj], runs_instances=False,
                         stmt=tir.Store(panel.name, [kv, cv], ld, ld.span), **common)
        r, c = f"{st.name}_r", f"{st.name}_c"
        read = tir.Load(ld.dtype, panel.name, [kv, tir.Var("int", c, span=ld.span)], span=ld.span)
        pacc = replace(st, name=f"{st.name}.pacc", iters=list(st.iters) + [kk, r, c], **common,
                       stmt=replace(acc_stmt, value=_replace_node(acc_stmt.value, ld, read)))
        call_fill = loops.StmtCall(filler.name, pack_args + (loops.LVar(kk), loops.LVar(rj)))
        cols = loops.LOp("lt", (loops.LVar(rj), loops.LInt(tj)))
        side = _square_side(ld, it_k, t.dtype)
        if side:
            # transposed, one step of the reduction a step of the operand's rows: squares of one
            # vector's lanes, each loaded along the rows and transposed in registers (loops.For.square)
            kb, rb = f"{st.name}_kb", f"{st.name}_rb"
            steps = loops.LOp("and", (loops.LOp("lt", (loops.LVar(kk), loops.LOp("add", (loops.LVar(kb), loops.LInt(side))))),
                                      _subst(k_loop.cond, at)))
            across = loops.LOp("and", (loops.LOp("lt", (loops.LVar(rj), loops.LOp("add", (loops.LVar(rb), loops.LInt(side))))),
                                       cols))
            fill = loops.For(rb, loops.LInt(0), loops.LOp("lt", (loops.LVar(rb), loops.LInt(tj))), side, (
                loops.For(kb, loops.LInt(0), _subst(k_loop.cond, {k: loops.LOp("add", (k_loop.init, loops.LVar(kb)))}),
                          side, (loops.For(kk, loops.LVar(kb), steps, 1, (
                              loops.For(rj, loops.LVar(rb), across, 1, (call_fill,)),), square=side),)),))
        elif it_k in _vars(ld.indices[-1:]) and it_j not in _vars(ld.indices[-1:]):
            # transposed (the reduction's steps are the operand's unit stride): in runs of steps
            kb = f"{st.name}_kb"
            run_end = loops.LOp("add", (loops.LVar(kb), loops.LInt(PACK_STEPS)))
            steps = loops.LOp("and", (loops.LOp("lt", (loops.LVar(kk), run_end)), _subst(k_loop.cond, at)))
            fill = loops.For(kb, loops.LInt(0), _subst(k_loop.cond, {k: loops.LOp("add", (k_loop.init, loops.LVar(kb)))}),
                             PACK_STEPS, (loops.For(rj, loops.LInt(0), cols, 1, (
                                 loops.For(kk, loops.LVar(kb), steps, 1, (call_fill,)),)),))
        else:
            fill = loops.For(kk, loops.LInt(0), _subst(k_loop.cond, at), 1, (
                loops.For(rj, loops.LInt(0), cols, 1, (call_fill,), vector=MIN_TRIPS <= tj <= MAX_TRIPS),))
        state["packs"].setdefault(id(home), []).append(loops.If(ready, (fill,)))
        state["tensors"][panel.name] = panel
        state["statements"][filler.name] = filler
        state["decisions"].append(f"panel of `{t.source_name}` packed for the register block of {st.name}: "
                                  f"{kt}x{tj} contiguous, made in loop `{home.var}` and read by the full blocks")
        return pacc, (loops.LOp("sub", (loops.LVar(k), k_loop.init)),)
    return None


def _square_side(ld, it_k: str, dtype: str) -> int:
    """The side of the squares a transposed operand's panel is copied in (one vector's lanes), where
    ``ld`` moves with the reduction's iterator ``it_k`` in its last subscript alone, by one element
    a step, and its elements are 4 or 8 bytes; else 0."""
    if types.concrete(dtype) == "bool" or np.dtype(types.concrete(dtype)).itemsize not in (4, 8):
        return 0
    last = ld.indices[-1]
    if isinstance(last, tir.Bin) and last.op in ("+", "-") and isinstance(last.b, tir.Const):
        last = last.a
    elif isinstance(last, tir.Bin) and last.op == "+" and isinstance(last.a, tir.Const):
        last = last.b
    if not (isinstance(last, tir.Var) and last.name == it_k) or it_k in _vars(ld.indices[:-1]):
        return 0
    return lanes_for(dtype)


def _hoist(nest, st, single, ri: str, pj: int, ti: int, args: tuple, fast, state):
    """The part of the full block's update that moves with the reduction loop and the block's rows
    but not with its columns (``alpha * a[i, k]`` in ``c[i, j] += alpha * a[i, k] * b[k, j]``),
    computed once per row and step before the reduction, in a MR x KC array (filled along the
    steps, which vectorises where the operands are unit-stride along them), where it holds some
    arithmetic (a load alone is as good where it is): ``(the statement the full block runs
    instead, the loops that compute the array)``, or None.  The values are computed by the same
    operations on the same operands as before, so the results do not change."""
    if single is None or single[2] * ti * 8 > MAX_PANEL_BYTES:
        return None
    k_loop, pk, kt = single
    k = k_loop.var
    it_k, it_j = st.iters[pk], st.iters[pj]
    kk, r, c = f"{st.name}_kk", f"{st.name}_r", f"{st.name}_c"
    part = _row_part(fast.stmt.value, it_k, {it_j, c, kk})
    if part is None or types.concrete(part.dtype) not in BLOCK_DTYPES:
        return None
    rows = tir.Tensor(f"{st.name}_rows", (ti, kt), types.concrete(part.dtype), "register", st.span,
                      "values of the block's rows")
    kv, rv = tir.Var("int", kk, span=st.span), tir.Var("int", r, span=st.span)
    common = dict(writes=[], reads=[], guards=[], origin=st.name)
    filler = replace(st, name=f"{st.name}.rows", iters=list(st.iters) + [kk, r], runs_instances=False,
                     stmt=tir.Store(rows.name, [rv, kv], part, st.span), **common)
    value = _replace_node(fast.stmt.value, part, tir.Load(rows.dtype, rows.name, [rv, kv], span=st.span))
    hacc = replace(fast, name=f"{st.name}.hacc", iters=list(st.iters) + [kk, r, c],
                   stmt=replace(fast.stmt, value=value))
    at = {k: loops.LOp("add", (k_loop.init, loops.LVar(kk)))}
    # (the array's rows run over the block's own row counter ``ri``, in a loop of their own)
    fill_args = tuple(loops.LInt(0) if n == pj else _subst(a, at) for n, a in enumerate(args))
    fill = loops.For(ri, loops.LInt(0), loops.LOp("lt", (loops.LVar(ri), loops.LInt(ti))), 1, (
        loops.For(kk, loops.LInt(0), _subst(k_loop.cond, at), 1,
                  (loops.StmtCall(filler.name, fill_args + (loops.LVar(kk), loops.LVar(ri))),)),))
    state["tensors"][rows.name] = rows
    state["statements"][filler.name] = filler
    state["decisions"].append(f"register block of {st.name}: the part of its update that moves only with the rows "
                              f"and `{k}` computed before the reduction ({kt}x{ti} values)")
    return hacc, (fill,)


def _row_part(e, it_k: str, forbid: set):
    """The largest operation in ``e`` whose operands read ``it_k`` and none of ``forbid``."""
    if isinstance(e, (tir.Load, tir.Var, tir.Const)):
        return None
    used = _vars([e])
    if it_k in used and not used & forbid:
        return e
    for f in getattr(e, "__dataclass_fields__", {}):
        v = getattr(e, f)
        for x in (v if isinstance(v, list) else [v]):
            if isinstance(x, tir.TExpr):
                found = _row_part(x, it_k, forbid)
                if found is not None:
                    return found
    return None


def _outer_loads(e, tensor: str) -> list:
    """The loads in ``e`` of tensors other than ``tensor`` that no other load's subscripts hold."""
    inner = {id(x) for ld in tir.walk_expr(e) if isinstance(ld, tir.Load)
             for i in ld.indices for x in tir.walk_expr(i)}
    return [x for x in tir.walk_expr(e) if isinstance(x, tir.Load) and x.tensor != tensor and id(x) not in inner]


def _loop_vars(e) -> set:
    if isinstance(e, loops.LVar):
        return {e.name}
    if isinstance(e, loops.LOp):
        return set().union(*(_loop_vars(a) for a in e.args))
    return set()


def _max_terms(e) -> list:
    """The terms of ``e`` as a (nested) maximum."""
    if isinstance(e, loops.LOp) and e.op == "max":
        return [t for a in e.args for t in _max_terms(a)]
    return [e]


def _column_start(j_loop: loops.For, ci: str):
    """Where a full block's columns start: the loop's own start where it does not move with the row
    ``ci``; where it is a maximum of terms, some affine in ``ci`` and some free of it (a triangle's
    ``max(j0, i + 1)``), the maximum of the free ones (a block is full only where the others stay
    below it in every row); else None."""
    if not loops.uses(j_loop.init, ci):
        return j_loop.init
    terms = _max_terms(j_loop.init)
    fixed = [t for t in terms if not loops.uses(t, ci)]
    if not fixed or any(_linear(t) is None for t in terms if loops.uses(t, ci)):
        return None
    start = fixed[0]
    for t in fixed[1:]:
        start = loops.LOp("max", (start, t))
    return start


def _affine_in(cond, var: str, ci: str) -> bool:
    """Whether ``cond`` does not use ``ci``, or bounds ``var`` from above only by minimums of terms
    affine in ``ci`` (then it holds for every row between two rows where it holds)."""
    if not loops.uses(cond, ci):
        return True
    bounds = _upper_bounds(cond, var)
    return bounds is not None and all(_linear(b) is not None for _, b in bounds if loops.uses(b, ci))


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


def _one_cell_each(st, pi, pj: int, pk: list) -> bool:
    """Whether two instances of ``st`` that agree on every iterator but ``pi``, ``pj`` and ``pk``
    write the same cell only when they also agree on ``pi`` and ``pj`` (``pi`` None: a block of
    one row, ``pj`` alone)."""
    rel = st.writes[0].relation
    same_cell = rel.apply_range(rel.reverse())
    n = len(st.iters)
    xs = [f"x{q}" for q in range(n)]
    ys = [f"y{q}" for q in range(n)]
    eq = [f"x{q} = y{q}" for q in range(n) if q not in (pi, pj, *pk)]
    name = st.domain.get_tuple_name()
    text = (f"{{ {name}[{', '.join(xs)}] -> {name}[{', '.join(ys)}] : "
            + " and ".join(eq + [f"(x{pj} != y{pj})" if pi is None else f"(x{pi} != y{pi} or x{pj} != y{pj})"])
            + " }")
    return same_cell.intersect(isl.Map(text)).is_empty()


def _loads(e, tensor: str) -> list:
    """The loads of ``tensor`` in the typed-IR expression ``e``, parents first."""
    return [x for x in tir.walk_expr(e) if isinstance(x, tir.Load) and x.tensor == tensor]


def _vars(exprs) -> set:
    """The typed-IR variables ``exprs`` read."""
    return {x.name for e in exprs for x in tir.walk_expr(e) if isinstance(x, tir.Var)}


def _replace_loads(e, tensor: str, by):
    """``e`` with every load of ``tensor`` replaced by ``by``."""
    return tir.rewrite(e, lambda n: by if isinstance(n, tir.Load) and n.tensor == tensor else None)


def _replace_node(e, old, by):
    """``e`` with the node ``old`` (by identity) replaced by ``by``."""
    return tir.rewrite(e, lambda n: by if n is old else None)
