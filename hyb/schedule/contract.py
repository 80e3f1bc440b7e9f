"""Array contraction: temporaries whose every value lives within one iteration of the loops.

isl fuses a producer's loop nest with its consumer's where they run over the same iterations::

    for (c0 ...) for (c1 ...) {
      S0(c0, c1);   t[i, j] = a[i, j] * b[i, j]
      S1(c0, c1);   out[i, j] = t[i, j] + 1
    }

``t`` (an ``allocate`` that the kernel does not return) is then written and read in the same
iteration: a scalar local holds it as well as the whole array did, and the array need not exist.
This stage finds such temporaries on the loops themselves and rewrites the statements that touch
them to store and load a scalar of the same name (kind ``scalar``, shape ``()``), which the back
ends keep in a register (each thread of a parallel loop has its own copy, as with the kernel's
own scalar locals).  The function then takes no buffer for it and the runtime allocates none.

A temporary ``t`` is contracted when all of this holds, else it keeps its buffer:

* the dependences are exact, and ``t``'s dataflow is too (each read has one source);
* every statement that touches ``t`` is a store (not an opaque loop, a print or an assert), its
  accesses to ``t`` are affine and need no check when they run, and the ones that write ``t``
  run under no condition evaluated at run time (a write in a branch may not happen);
* every read of ``t`` reads a value some write stored before it (none reads the initial zero);
* each flow dependence into a read of ``t`` joins two instances in the same iteration of every
  loop around all the calls of the statements that touch ``t``;
* a parallel loop around any of them is around all of them (a thread's copy never leaves it);
* with ``t`` as one cell, the loops run each read after its source and before any later write
  of ``t``; these one-cell dependences of every contracted temporary, with all the others, pass
  :func:`hyb.schedule.verify.violations` on the rewritten loops (else every buffer is kept).

The stage returns a new nest and its decisions; its input is not changed.
"""
from __future__ import annotations

from dataclasses import replace

import islpy as isl

from ..dsl import tir
from . import deps as dependences
from . import loops, verify
from . import islmem


def contract(poly, d, cells, nest: loops.LoopNest, enabled: bool = True, budget: int = 0) -> tuple:
    """``(the nest with its contractible temporaries held in scalars, the decisions)``.

    ``poly``, ``d``: the program and its dependences; ``cells``: its dependences with private
    scalars as one cell (None: it has none); ``enabled`` False leaves every buffer (the loops are
    still described); ``budget``: isl operations each temporary's dataflow may take (0: no
    limit)."""
    decisions = list(fused_nests(nest))
    if not enabled or not d.exact or (cells is not None and not cells.exact):
        return nest, tuple(decisions)
    candidates = [t for t in nest.kernel.tensors.values()
                  if t.kind == "temp" and t.name not in nest.kernel.inputs and t.name not in nest.kernel.outputs]
    if not candidates:
        return nest, tuple(decisions)
    paths = _paths(nest.body)
    counter_at = _counter_positions(nest.body)
    made_order = []

    def order():
        """The order the loops run (made when a temporary passes the checks that need none)."""
        if not made_order:
            made_order.append(verify.executed_order(nest)[0])
        return made_order[0]

    one_cell = isl.UnionMap.empty(d.all.get_space())
    current, made = nest, []
    for t in candidates:
        found = _contractible(poly, current, t, paths, counter_at, order, budget)
        if isinstance(found, str):
            if found:
                decisions.append(f"temporary `{t.source_name}` kept in memory: {found}")
            continue
        common, cell = found
        current = _rewrite_nest(current, t.name)
        one_cell = one_cell.union(cell)
        where = ("in one iteration of loop(s) " + ", ".join(f"`{s.var}`" for s in common)) if common \
            else "with no loop around its accesses"
        made.append(f"temporary `{t.source_name}` contracted to a scalar (no buffer): each of its values is "
                    f"written and read {where}")
    if not made:
        return nest, tuple(decisions)
    # the rewritten loops, checked against the dependences of the statements that changed and the
    # scalars' one-cell ones (the loops themselves are the ones of ``nest``)
    changed = islmem.union_set((poly.by_name[n].domain for n, st in current.statements.items()
                                if st is not nest.statements.get(n) and n in poly.by_name), d.all.get_space().params())
    checked = d.all.intersect_domain(changed).union(d.all.intersect_range(changed))
    if cells is not None and poly.has_private_scalars:
        one_cell = one_cell.union(cells.all.intersect_domain(changed)).union(cells.all.intersect_range(changed))
    broken = verify.violations(current, checked, one_cell)
    if broken is None or not broken.is_empty():
        return nest, tuple(decisions) + (f"temporaries kept in memory: held in scalars the loops would break "
                                         f"dependences {broken}",)
    return current, tuple(decisions + made)


def contracted(nest: loops.LoopNest, stmt: str, kernel: tir.TypedKernel) -> list:
    """The source names of the temporaries of ``kernel`` (the typed kernel as the checker made it)
    that statement ``stmt`` of ``nest`` accesses as contracted scalars."""
    st = nest.statements[stmt]
    names = []
    for n in _tensors_of(st):
        was, now = kernel.tensors.get(n), nest.kernel.tensors.get(n)
        if was is not None and now is not None and was.kind == "temp" and now.kind == "scalar":
            names.append(was.source_name)
    return sorted(set(names))


def fused_nests(nest: loops.LoopNest):
    """A line for each outermost loop of ``nest`` that runs statements of several loop nests of the
    program (isl fused them), naming the statements."""
    for s in nest.body:
        if not isinstance(s, loops.For):
            continue
        names = []
        for c in loops.calls([s]):
            if c.stmt not in names:
                names.append(c.stmt)
        sts = [nest.statements[n] for n in names]
        if len({st.iters[0] if st.iters else st.name for st in sts}) < 2:
            continue
        yield ("loop nests fused into loop `" + s.var + "`: "
               + ", ".join(f"{st.name} (line {st.span.line})" if st.span else st.name for st in sts))


# ------------------------------------------------------------------ the checks
def _contractible(poly, nest, t, paths, counter_at, order_of, budget):
    """``(the common loops, the one-cell dependences of t)`` where ``t`` may be contracted, else the
    reason it may not ("" where its accesses are not even in one loop nest: nothing to report).
    ``order_of()``: the executed order of the loops (None where they cannot be read)."""
    by_name = poly.by_name
    touching = [n for n, st in nest.statements.items() if t.name in _tensors_of(st)]
    if not touching:
        return ""
    for n in touching:
        st = nest.statements[n]
        if st.origin or n not in by_name or not isinstance(st.stmt, tir.Store):
            return ""
    calls = [(c, p) for c, p in paths if c.stmt in touching]
    if not calls:
        return ""
    common = _common_loops([p for _, p in calls])
    if not common and any(p for _, p in calls):
        return ""  # in different loop nests
    for _, p in calls:
        if any(isinstance(s, loops.For) and s.parallel and not any(s is x for x in common) for s in p):
            return "a parallel loop runs some of its accesses and not others"
    reads, writes = [], []
    for n in touching:
        st = by_name[n]
        mine_r = [a for a in st.reads if a.tensor == t.name]
        mine_w = [a for a in st.writes if a.tensor == t.name]
        if any(not a.exact for a in mine_r + mine_w):
            return "a subscript of it is not affine"
        if mine_w and st.guards:
            return "it is written under a condition evaluated when the loops run"
        if any(x.checked for x in _accesses_of(st, t.name)):
            return "a subscript of it is checked when it runs"
        reads += mine_r
        writes += mine_w
    if not reads:
        return ""  # written only: nothing to gain from its reads, and nothing is lost keeping it
    sink = islmem.union_map(a.relation for a in reads)
    source = islmem.union_map(a.relation for a in writes)
    flow = _flow(poly, sink, source, budget)
    if flow is None:
        return "its dataflow is not exact"
    flow, no_source = flow
    if not no_source.is_empty():
        return "a read of it sees the zero it starts with"
    order = order_of()
    if order is None:
        return "the loops around its accesses could not be read"
    dim = verify.time_dim(order)
    # the flow joins instances in the same iteration of every common loop
    if common:
        k = counter_at[id(common[-1])]
        same = isl.UnionMap.from_map(isl.Map(
            "{ [" + ", ".join(f"a{q}" for q in range(dim)) + "] -> [" + ", ".join(f"b{q}" for q in range(dim))
            + "] : " + " and ".join(f"a{q} = b{q}" for q in range(k + 1)) + " }"))
        if not flow.apply_domain(order).apply_range(order).is_subset(same):
            return "a value of it is read in another iteration of the loops than the one that wrote it"
    # as one cell in the order the loops run: each read sees the write it saw in the array
    body = common[-1].body if common else nest.body
    if all(len(p) == len(common) for _, p in calls) and len({c.stmt for c, _ in calls}) == len(calls):
        # every call in one body, each running once an iteration: the last write call before a read
        # call must be where all of its values come from
        at = {c.stmt: next(q for q, x in enumerate(body) if x is c) for c, _ in calls}
        wrote = sorted(at[n] for n in at if any(a.tensor == t.name for a in by_name[n].writes))
        for n in at:  # (a statement not called runs no instance)
            if not any(a.tensor == t.name for a in by_name[n].reads):
                continue
            before = [q for q in wrote if q < at[n]]
            into = flow.intersect_range(by_name[n].domain)
            if not before or not into.domain().is_subset(by_name[body[before[-1]].stmt].domain):
                return "another write of it runs between a write and the read of its value"
        return common, flow
    cell = _one_cell(sink), _one_cell(source)
    try:
        with dependences.operations(budget):
            info = isl.UnionAccessInfo.from_sink(cell[0]).set_must_source(cell[1]).set_schedule_map(order)
            f = info.compute_flow()
            same_source = f.get_may_dependence().is_equal(flow) and f.get_may_no_source().is_empty()
    except isl.Error:
        return "its dataflow is not exact"
    if not same_source:
        return "another write of it runs between a write and the read of its value"
    return common, flow


def _flow(poly, sink, source, budget):
    """``(flow, reads with no source)`` of ``sink`` from the must-writes ``source`` in program
    order, by isl's exact analysis within ``budget`` operations; None where it fails."""
    schedule = poly.union("order")
    try:
        with dependences.operations(budget):
            info = isl.UnionAccessInfo.from_sink(sink).set_must_source(source).set_schedule_map(schedule)
            f = info.compute_flow()
            return f.get_may_dependence().coalesce(), f.get_may_no_source().coalesce()
    except isl.Error:
        return None


def _one_cell(u: isl.UnionMap) -> isl.UnionMap:
    """Accesses to a tensor as accesses to one cell of the same name."""
    return islmem.union_map(m.project_out(isl.dim_type.out, 0, m.dim(isl.dim_type.out))
                            .set_tuple_name(isl.dim_type.out, m.get_tuple_name(isl.dim_type.out))
                            for m in islmem.members(u))


def _paths(body, around=()):
    """Each statement call with the loops and conditions around it, outermost first."""
    out = []
    for s in body:
        if isinstance(s, loops.StmtCall):
            out.append((s, around))
        elif isinstance(s, loops.For):
            out += _paths(s.body, around + (s,))
        elif isinstance(s, loops.If):
            out += _paths(s.then, around + (s,)) + _paths(s.orelse, around + (s,))
    return out


def _counter_positions(body, at: int = 0, out=None) -> dict:
    """id of each loop -> the index of its counter in the time vectors of
    :func:`verify.executed_order` (a position before each loop's counter; one before each branch)."""
    out = {} if out is None else out
    for s in body:
        if isinstance(s, loops.For):
            out[id(s)] = at + 1
            _counter_positions(s.body, at + 2, out)
        elif isinstance(s, loops.If):
            _counter_positions(s.then, at + 1, out)
            _counter_positions(s.orelse, at + 1, out)
    return out


def _common_loops(paths) -> list:
    """The loops around every path, outermost first, down to where the paths part (a condition
    around some calls ends the run too: its iterations are not all of the loops')."""
    first = paths[0]
    common = []
    for q, s in enumerate(first):
        if not all(len(p) > q and p[q] is s for p in paths) or not isinstance(s, loops.For):
            break
        common.append(s)
    return common


# ------------------------------------------------------------------ the rewrite
def _tensors_of(st) -> set:
    """The tensors a statement's typed IR (its store and its guards) loads or stores."""
    found = set()
    exprs = list(st.guards)
    s = st.stmt
    if isinstance(s, tir.Store):
        found.add(s.tensor)
        exprs += list(s.indices) + [s.value]
    elif isinstance(s, tir.Assert):
        exprs.append(s.cond)
    elif isinstance(s, tir.Print):
        exprs += [x for x in s.items if isinstance(x, tir.TExpr)]
        found.add(s.stdout)
    else:
        return {a.tensor for a in st.reads + st.writes}
    for e in exprs:
        found |= {x.tensor for x in tir.walk_expr(e) if isinstance(x, tir.Load)}
    return found


def _accesses_of(st, tensor: str) -> list:
    """The store and the loads of ``tensor`` in a statement (a store's typed IR and its guards)."""
    s = st.stmt
    out = [s] if s.tensor == tensor else []
    for e in list(st.guards) + list(s.indices) + [s.value]:
        out += [x for x in tir.walk_expr(e) if isinstance(x, tir.Load) and x.tensor == tensor]
    return out


def _rewrite_nest(nest: loops.LoopNest, name: str) -> loops.LoopNest:
    """``nest`` with tensor ``name`` a scalar local: every statement that touches it stores and
    loads the scalar, and drops its accesses to the array."""
    t = nest.kernel.tensors[name]
    tensors = dict(nest.kernel.tensors)
    tensors[name] = replace(t, shape=(), kind="scalar")

    def scalar(n):  # a load or store of `name` as a scalar access (a store's value rewritten too)
        if isinstance(n, (tir.Load, tir.Store)) and n.tensor == name:
            return replace(tir.rewrite_children(n, scalar), indices=[])
        return None

    statements = dict(nest.statements)
    for n, st in nest.statements.items():
        if name not in _tensors_of(st):
            continue
        statements[n] = replace(st, stmt=tir.rewrite(st.stmt, scalar), guards=[tir.rewrite(g, scalar) for g in st.guards],
                                reads=[a for a in st.reads if a.tensor != name],
                                writes=[a for a in st.writes if a.tensor != name])
    return replace(nest, kernel=replace(nest.kernel, tensors=tensors), statements=statements)
