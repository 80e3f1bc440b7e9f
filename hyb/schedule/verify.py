"""Check generated loops against the dependences they must keep.

The loop IR says in which order statement instances run: each instance's *time* is the
vector of (position in the enclosing block, loop counter) pairs on its path from the root.
This module rebuilds that order as an isl map, from the loop IR itself rather than from the
schedule it came from, and checks that every dependence runs source before sink and that no
dependence is carried by a loop marked parallel.  It guards against the AST generator (or
our own passes between the schedule and the loops) emitting an order the schedule did not ask
for.
"""
from __future__ import annotations

import re
from collections import OrderedDict

import islpy as isl

from ..dsl.tir import size_symbols
from . import loops
from .deps import operations
from .extract import params_set, with_params
from . import islmem

_CMP = {"eq": "=", "le": "<=", "lt": "<", "ge": ">=", "gt": ">"}


class _Unsupported(Exception):
    """An expression isl's set syntax cannot state (a select); the nest is not checked."""


def _expr(e) -> str:
    if isinstance(e, loops.LInt):
        return str(e.value)
    if isinstance(e, loops.LVar):
        return e.name
    a = [_expr(x) for x in e.args]
    if e.op in ("add", "sub", "mul"):
        return f"({a[0]} {dict(add='+', sub='-', mul='*')[e.op]} {a[1]})"
    if e.op == "neg":
        return f"(-{a[0]})"
    if e.op in ("min", "max"):
        return f"{e.op}({a[0]}, {a[1]})"
    if e.op in ("fdiv_q", "pdiv_q", "div"):
        return f"floor(({a[0]})/{a[1]})"
    if e.op in ("pdiv_r", "zdiv_r"):
        # zdiv_r only appears compared with 0, where it agrees with mod.
        return f"(({a[0]}) mod {a[1]})"
    if e.op in _CMP:
        return f"({a[0]} {_CMP[e.op]} {a[1]})"
    if e.op in ("and", "or"):
        return f"({a[0]} {e.op} {a[1]})"
    raise _Unsupported(e.op)


def _pieces(nest: loops.LoopNest):
    """Each statement call of ``nest`` as (time vector, loop counters, constraints, stmt, args,
    enclosing parallel loops as (loop, index of its counter in the time vector)), and the time
    vectors before the counters of parallel loops.  Raises _Unsupported for an expression isl cannot parse."""
    pieces = []
    parallel = []  # the time vector before each parallel loop's counter: the loop's place

    def walk(body, time, counters, conds, around=()):
        pos = 0
        for s in body:
            if isinstance(s, loops.StmtCall):
                name = _runs(nest, s.stmt)
                if name is not None:  # (a rewritten statement: the instances of the one it comes from)
                    args = s.args[:len(nest.statements[name].iters)] if name != s.stmt else s.args
                    pieces.append((time + [str(pos)], counters, conds, name, [_expr(a) for a in args], around))
                pos += 1
            elif isinstance(s, loops.For):
                c = s.var
                inner = around
                if s.parallel:
                    parallel.append(time + [str(pos)])
                    inner = around + ((s, len(time) + 1),)
                # A loop that counts down runs its larger counters first.
                walk(s.body, time + [str(pos), c if s.step > 0 else f"-{c}"], counters + [c],
                     conds + _loop_conds(s), inner)
                pos += 1
            elif isinstance(s, loops.If):
                cond = _expr(s.cond)
                walk(s.then, time + [str(pos)], counters, conds + [cond], around)
                walk(s.orelse, time + [str(pos + 1)], counters, conds + [f"not {cond}"], around)
                pos += 2

    walk(nest.body, [], [], [])
    return pieces, parallel


def _runs(nest: loops.LoopNest, stmt: str) -> str | None:
    """The statement whose instances a call of ``stmt`` runs: its own, or for a rewritten one
    (schedule.promote) its origin's; None for one that runs none (it moves register cells)."""
    st = nest.statements.get(stmt)
    if st is not None and not st.runs_instances:
        return None
    return st.origin if st is not None and st.origin else stmt


def _loop_conds(s: loops.For) -> list:
    """The conditions on loop ``s``'s counter as isl texts: where it starts (and its stride), and
    where it stops."""
    c = s.var
    if abs(s.step) == 1:
        start = f"{c} {'>=' if s.step > 0 else '<='} {_expr(s.init)}"
    else:
        start = f"exists (k_{c} : k_{c} >= 0 and {c} = {_expr(s.init)} + {s.step}*k_{c})"
    return [start, _expr(s.cond)]


def _instance_map(counters, conds, stmt, args, vec, params=(), domains: dict | None = None) -> isl.UnionMap:
    """stmt instance -> the vector ``vec`` (texts over the loop counters and the run-time sizes
    ``params``), where ``conds`` hold.  ``domains``: the counters' sets where conditions hold, by
    their texts, read once for the calls of one loop body (the costly part where bounds have
    many cases)."""
    key = (tuple(counters), tuple(conds))
    where = None if domains is None else domains.get(key)
    if where is None:
        cond = " and ".join(f"({c})" for c in conds) or "true"
        where = isl.Set(with_params(params, f"{{ [{', '.join(counters)}] : {cond} }}"))
        if domains is not None:
            domains[key] = where
    m = isl.Map(with_params(params, f"{{ [{', '.join(counters)}] -> [{', '.join(vec)}] }}")).intersect_domain(where)
    call = isl.Map(with_params(params, f"{{ [{', '.join(counters)}] -> {stmt}[{', '.join(args)}] }}"))
    return isl.UnionMap.from_map(call.reverse().apply_range(m))


# The executed orders made last, by the texts they were made from: the stages after the loops are
# made (their check, the marks, contraction, the shape checks) read the order of nests that differ
# only in flags, which do not change it, and it is the costly part of each check.
_ORDERS: OrderedDict = OrderedDict()
ORDERS_KEPT = 8


def executed_order(nest: loops.LoopNest, at: dict | None = None):
    """(statement instance -> time) as an isl union map, and the time vectors before the
    counters of parallel loops (their places: positions and the counters of the loops around); None where the loops use an expression isl cannot parse.
    ``at``: a value for each run-time size, put in the loops' bounds before isl reads them (the
    order at those sizes, far cheaper than for all sizes where bounds have many cases)."""
    try:
        pieces, parallel = _pieces(nest)
    except _Unsupported:
        return None, []
    if not pieces:
        return None, []
    params = tuple(size_symbols(nest.kernel))
    if at:
        pieces = [(_put(t, at), c, _put(w, at), stmt, _put(a, at), around) for t, c, w, stmt, a, around in pieces]
        params = ()
    key = (params, tuple((tuple(t), tuple(c), tuple(w), stmt, tuple(a)) for t, c, w, stmt, a, _ in pieces))
    out = _ORDERS.get(key)
    if out is not None:
        _ORDERS.move_to_end(key)
        return out, parallel
    n = max(len(t) for t, *_ in pieces)
    domains: dict = {}
    for time, counters, conds, stmt, args, _ in pieces:
        # Counters keep their own names; positions and padding are fixed values.
        u = _instance_map(counters, conds, stmt, args, time + ["0"] * (n - len(time)), params, domains)
        out = u if out is None else out.union(u)
    _ORDERS[key] = out
    while len(_ORDERS) > ORDERS_KEPT:
        _ORDERS.popitem(last=False)
    return out, parallel


def _put(texts: list, at: dict) -> list:
    """``texts`` with each size named in ``at`` replaced by its value."""
    names = re.compile(r"\b(" + "|".join(map(re.escape, at)) + r")\b")
    return [names.sub(lambda m: str(at[m.group(1)]), t) for t in texts]


def parallel_runs(nest: loops.LoopNest):
    """For each loop of ``nest`` marked parallel, outermost first: ``(the statements whose instances
    it runs, the counters of the loops around it, the conditions on them as isl texts)``; None where
    a bound is an expression isl cannot read."""
    out = []

    def walk(body, counters, conds):
        for s in body:
            if isinstance(s, loops.For):
                if s.parallel:
                    names = {_runs(nest, c.stmt) for c in loops.calls(s.body)} - {None}
                    out.append((sorted(names), list(counters), list(conds)))
                walk(s.body, counters + [s.var], conds + _loop_conds(s))
            elif isinstance(s, loops.If):
                cond = _expr(s.cond)
                walk(s.then, counters, conds + [cond])
                walk(s.orelse, counters, conds + [f"not {cond}"])

    try:
        walk(nest.body, [], [])
    except _Unsupported:
        return None
    return out


def parallel_places(nest: loops.LoopNest) -> list:
    """The places of the parallel loops of ``nest`` (``executed_order``'s second answer), without
    the order itself; [] where the loops cannot be read."""
    try:
        return _pieces(nest)[1]
    except _Unsupported:
        return []


def unmark_escaping(nest: loops.LoopNest, flows: isl.UnionMap) -> list:
    """Unmark parallel loops out of which one of ``flows`` (the dataflow of scalar locals) leaves
    a run of the loop: each thread computes in its own copy of the scalars, so a value written
    inside the loop and read after it, or in a later run, would be lost (a statement fused into
    the loop by the scheduler, or written in one iteration only).  Where the loops cannot be read
    (a bound this check does not model), every parallel loop is left serial.  Returns ``(the new
    nest, the variables of the loops left serial)``; ``nest`` is unchanged."""
    if flows.is_empty():
        return nest, ()
    try:
        pieces, _ = _pieces(nest)
    except _Unsupported:  # loops this check cannot read: none of them stays on threads
        marked = [s for s in loops.loops(nest.body) if s.parallel]
        return loops.with_flags(nest, {id(s): {"parallel": False} for s in marked}), tuple(s.var for s in marked)
    runs: dict = {}  # loop -> instance -> the time prefix naming its run of the loop
    for time, counters, conds, stmt, args, around in pieces:
        for loop, k in around:
            u = _instance_map(counters, conds, stmt, args, time[:k], size_symbols(nest.kernel))
            runs[id(loop)] = (loop, u if id(loop) not in runs else runs[id(loop)][1].union(u))
    unmarked = []
    for loop, run in runs.values():
        out = flows.intersect_domain(run.domain())
        if out.is_empty():
            continue
        same_run = run.apply_range(run.reverse())
        if not out.subtract(same_run).is_empty():
            unmarked.append(loop)
    if not unmarked:
        return nest, ()
    return loops.with_flags(nest, {id(loop): {"parallel": False} for loop in unmarked}), tuple(x.var for x in unmarked)


# isl operations the check of shape-generic loops may take for all sizes at once; past them the
# loops are checked at sample sizes (the lower bounds below, each as small as the sizes allow).
# The checks of the benchmark kernels that pass for all sizes pass within 30,000; one that does
# not pass costs time in proportion to this (conv2d's two checks: 1.9 s at 100,000, 0.9 s here),
# for each second shape of such a kernel.
PARAMETRIC_OPERATIONS = 30_000
SAMPLE_SIZES = (1, 2, 7, 67)


def violations(nest: loops.LoopNest, deps: isl.UnionMap, cells: isl.UnionMap | None = None,
               context: isl.Set | None = None) -> isl.UnionMap | None:
    """The dependences the loops of ``nest`` break (run sink before or with source, or across
    iterations of a parallel loop); an empty map if none, None if the nest could not be read.
    ``cells``: the dependences with each private scalar as one cell, as the generated code
    stores it (one per thread): they must run in order too, except between iterations of a
    parallel loop (different threads, different cells).

    Loops of a shape-generic kernel are checked for all sizes at once; given ``context`` (the
    sizes the code runs at), a check that goes past PARAMETRIC_OPERATIONS is made instead at the
    sizes of SAMPLE_SIZES (isl's sets with the sizes fixed are as cheap as one shape's)."""
    params = size_symbols(nest.kernel)
    if context is None or not params:
        order, parallel = executed_order(nest)
        return None if order is None else _violations(order, parallel, deps, cells)
    try:
        with operations(PARAMETRIC_OPERATIONS):  # (reading the loops' order for all sizes too)
            order, parallel = executed_order(nest)
            return None if order is None else _violations(order, parallel, deps, cells)
    except isl.Error:
        pass  # past the limit (isl's parser reports that as a syntax error; a real one recurs below)
    for k in SAMPLE_SIZES:
        at = context.intersect(params_set(params, " and ".join(f"{p} >= {k}" for p in params)))
        if at.is_empty():
            continue
        point = at.sample_point()
        values = {p: islmem.int_value(point.get_coordinate_val(isl.dim_type.param, i)) for i, p in enumerate(params)}
        order, parallel = executed_order(nest, values)
        if order is None:
            return None
        at = isl.Set.from_point(point)
        broken = _violations(order, parallel, deps.intersect_params(at),
                             None if cells is None else cells.intersect_params(at))
        if broken is None or not broken.is_empty():
            return broken
    return isl.UnionMap.empty(deps.get_space())


class ParallelCheck:
    """The check of nests that differ from ``nest`` only in which loops are parallel, against
    ``deps`` (no one-cell dependences): the executed order, the dependences' times and those that
    run backwards are made once, and each nest checked adds only its parallel loops."""

    def __init__(self, nest: loops.LoopNest, deps: isl.UnionMap):
        self.order, _ = executed_order(nest)
        self.deps = deps
        self.times = None
        if self.order is not None and not deps.is_empty():
            self.times = _times(deps, self.order, _lex_lt(time_dim(self.order)))

    def violations(self, flagged: loops.LoopNest) -> isl.UnionMap | None:
        """:func:`violations` of ``flagged`` (``nest`` with other loops marked parallel)."""
        if self.order is None:
            return None
        return _violations(self.order, parallel_places(flagged), self.deps, None, self.times)


def _lex_lt(dim: int) -> isl.UnionMap:
    return isl.UnionMap.from_map(isl.Map.lex_lt(isl.Space.set_alloc(isl.DEFAULT_CONTEXT, 0, dim)))


def _times(deps: isl.UnionMap, order: isl.UnionMap, lex_lt: isl.UnionMap) -> tuple:
    """``(the dependences' times under order, source -> sink; those that do not run forwards)``."""
    times = deps.coalesce().apply_domain(order).apply_range(order)
    return times, times.subtract(lex_lt)


def _violations(order: isl.UnionMap, parallel: list, deps: isl.UnionMap, cells, times=None) -> isl.UnionMap:
    """``times``: :func:`_times` of ``deps`` under ``order``, if made already (:class:`ParallelCheck`)."""
    if deps.is_empty() and (cells is None or cells.is_empty()):
        return deps
    dim = time_dim(order)
    lex_lt = _lex_lt(dim)
    a = ", ".join(f"a{i}" for i in range(dim))
    b = ", ".join(f"b{i}" for i in range(dim))
    # two instances in different iterations of one run of a parallel loop: the same place before
    # its counter (the loop's own positions, the same counters of the loops around), other counters
    across = [isl.UnionMap.from_map(isl.Map(
        f"{{ [{a}] -> [{b}] : "
        + " and ".join([f"a{i} = b{i}" + (f" and a{i} = {t}" if t.isdigit() else "") for i, t in enumerate(place)]
                       + [f"a{len(place)} != b{len(place)}"])
        + " }")) for place in parallel]
    wrong = []
    if not deps.is_empty():
        times, late = times or _times(deps, order, lex_lt)
        if not late.is_empty():
            wrong.append(late)
        wrong.extend(c for c in (times.intersect(x) for x in across) if not c.is_empty())
    if cells is not None and not cells.is_empty():
        late = cells.coalesce().apply_domain(order).apply_range(order).subtract(lex_lt)
        for x in across:
            late = late.subtract(x)
        if not late.is_empty():
            wrong.append(late)
    everything = deps if cells is None else deps.union(cells)
    if not wrong:
        return isl.UnionMap.empty(everything.get_space())
    # Which dependences those are, for the message.
    out = isl.UnionMap.empty(everything.get_space())
    for w in wrong:
        out = out.union(everything.intersect(order.apply_range(w).apply_range(order.reverse())))
    return out


def time_dim(order: isl.UnionMap) -> int:
    """The length of the time vectors of an executed order (:func:`executed_order`)."""
    return islmem.members(order)[0].dim(isl.dim_type.out)
