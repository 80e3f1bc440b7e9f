"""Dependences between statement instances, from isl's exact dataflow analysis.

* flow (read after write): for each read, the last write before it of the same element;
* anti (write after read): for each write, the reads of the same element before it; in a kernel
  of more than ``FULL_ANTI_STATEMENTS`` statements only those since the last write of it that surely
  happens (the earlier ones follow by transitivity, through that write);
* output (write after write): for each write, the last sure write of the same element before it
  and the conditional ones since.

Dependences are computed against the original schedule and are what any new schedule must
respect.  They also yield the reads of output/temporary elements that no statement wrote
before (``uninitialized``): those read the initial zero.
"""
from __future__ import annotations

import functools
import threading
from contextlib import contextmanager
from dataclasses import dataclass, replace

import islpy as isl

from ..dsl import tir
from . import islmem
from .extract import PolyProgram, Statement, one_cell, tensor_box, with_params


@dataclass
class Dependences:
    flow: isl.UnionMap
    anti: isl.UnionMap
    output: isl.UnionMap
    uninitialized: isl.UnionMap  # reads (statement -> element) with no earlier write
    exact: bool = True  # False: over-approximated, the exact analysis went past its budget
    # (source, sink) statement pairs whose exact dependences were too intricate for the scheduler
    # and stand as every earlier access of an element instead (:func:`tame`)
    simplified: tuple = ()

    @functools.cached_property
    def all(self) -> isl.UnionMap:
        return self.flow.union(self.anti).union(self.output)

    def describe(self) -> str:
        def fmt(u: isl.UnionMap) -> str:
            maps = []
            u.foreach_map(lambda m: maps.append(str(m)))
            return "\n".join("  " + m for m in sorted(maps)) or "  (none)"

        return (f"flow (read after write):\n{fmt(self.flow)}\n"
                f"anti (write after read):\n{fmt(self.anti)}\n"
                f"output (write after write):\n{fmt(self.output)}\n")


QUOTA = "maximal number of operations exceeded"


# isl's operation limit and count belong to its one context, which every thread shares: a thread
# works under a limit only while it holds this lock, and the compiles' isl work takes it too
# (runtime.pipeline.middle_end), so that no thread counts against another's limit
ISL_LOCK = threading.RLock()


@contextmanager
def operations(limit: int):
    """isl's operation count limited to ``limit`` (0: none) inside the block; inside a block of
    another limit, the smaller of the two (each block counts from zero)."""
    with ISL_LOCK:
        ctx = isl.DEFAULT_CONTEXT
        outer = ctx.get_max_operations()
        ctx.set_max_operations(min(x for x in (limit, outer) if x) if limit or outer else 0)
        ctx.reset_operations()
        try:
            yield
        finally:
            ctx.set_max_operations(outer)
            ctx.reset_operations()


# the statements one budget of ``analysis_operations`` is for: a longer kernel gets one more for
# each as many more, so the budget bounds the cost of a statement, not the length of a kernel
BUDGET_STATEMENTS = 32
# kernels of at most this many statements keep every anti dependence (a longer one: only those
# since the last sure write of the element)
FULL_ANTI_STATEMENTS = BUDGET_STATEMENTS


def budget_for(p: PolyProgram, operations: int) -> int:
    """The isl operations the analyses of ``p`` may take, given ``operations`` for each
    :data:`BUDGET_STATEMENTS` statements (0: no limit)."""
    return operations * max(1, -(-len(p.statements) // BUDGET_STATEMENTS))


def compute(p: PolyProgram, expanded: bool = True, budget: int = 0, exact: bool = True,
            over_approximate: bool = True) -> Dependences | None:
    """Dependences of ``p``; ``expanded=False`` treats each private scalar as one memory cell.

    The exact analysis takes at most ``budget`` isl operations (0: no limit); past it (a deep nest
    with running values updated under data-dependent conditions can take minutes), and with
    ``exact=False``, every earlier access of an element is a dependence (``exact`` is then False
    in the record): correct, only more constrained.  With ``over_approximate=False`` there is no
    such answer: None where the exact analysis went past the budget."""
    d = _within_budget(lambda: _compute(p, expanded, dataflow), budget) if exact else None
    if d is not None or not over_approximate:
        return d
    return replace(_compute(p, expanded, conservative_flow), exact=False)


def _within_budget(analysis, budget: int):
    """``analysis()`` limited to ``budget`` isl operations (0: none); None when it went past."""
    try:
        with operations(budget):
            return analysis()
    except isl.Error as e:
        if budget and QUOTA in str(e):
            return None
        raise


def _compute(p: PolyProgram, expanded: bool, flow_analysis) -> Dependences:
    schedule = p.union("order")
    reads = p.union("reads", expanded)
    must = p.union("must_writes", expanded)
    may = p.union("may_writes", expanded)

    def flow_of(sink, must_src, may_src):
        return flow_analysis(sink, must_src, may_src, schedule)

    f = flow_of(reads, must, may)
    flow = f.get_may_dependence()
    uninit = f.get_may_no_source()
    both = branch_writes(p, expanded)
    if not both.is_empty():
        # Writes under a condition are may-writes; where the `if` and the `else` both write an
        # element, it is written whatever the condition: those reads are not of the initial zero.
        uninit = flow_of(reads, must.union(both), may).get_may_no_source()
    uninit = same_condition_writes(p, expanded, uninit, must.union(both), may, flow_of)
    # Output: writes depending on earlier writes, each on the writes since the last sure one.
    # Anti: writes depending on the earlier reads since the last sure write of the element; a read
    # before that write is ordered before the write it precedes, and that write before this one by
    # the output dependences, so the rest follow by transitivity, and their number grows with
    # the program's length, not its square.  (The sure writes' own part of the answer is among
    # the output dependences, and left there.)
    output = flow_of(may, must, may).get_may_dependence().coalesce()
    if len(p.statements) <= FULL_ANTI_STATEMENTS:
        # A short kernel keeps every anti dependence: the scheduler's objective weighs the
        # distances of all of them (with only those since the last sure write, doitgen's nests were
        # skewed into one serial loop, 40 times slower), and their number is small here.
        anti = flow_of(may, isl.UnionMap.empty(reads.get_space()), reads).get_may_dependence().coalesce()
    else:
        anti = flow_of(may, must, reads).get_may_dependence().coalesce().subtract(output).coalesce()
    flow, simple_flow = tame(flow.coalesce(), may, reads, schedule)
    anti, simple_anti = tame(anti, reads, may, schedule)
    output, simple_output = tame(output, may, may, schedule)
    simplified = tuple(sorted(set(simple_flow + simple_anti + simple_output)))
    return Dependences(flow, anti, output, uninit.coalesce(), simplified=simplified)


# A dependence relation with a piece of more constraints than this is one isl's scheduler takes
# seconds only to be given (the last write before each instance of a deep nest's reduction, 8
# loops deep and more: each loop's last iteration hands over to the next one's first, a piece
# whose constraints grow with the square of the depth); the kernels of the benchmarks and tests
# have at most 27.
MAX_DEPENDENCE_CONSTRAINTS = 48


def tame(deps: isl.UnionMap, sources: isl.UnionMap, sinks: isl.UnionMap, schedule: isl.UnionMap) -> tuple:
    """``deps`` with each statement pair's relation that has a piece of more than
    :data:`MAX_DEPENDENCE_CONSTRAINTS` constraints replaced by every access of ``sources`` before
    an access of ``sinks`` to the same element (a superset of it, correct for any schedule, and
    with the same transitive order where every instance touches the element; a few pieces of a
    few constraints each).  Returns ``(the relations, the (source, sink) pairs replaced)``."""
    maps = islmem.members(deps)
    intricate = [any(b.n_constraint() > MAX_DEPENDENCE_CONSTRAINTS for b in m.get_basic_maps()) for m in maps]
    if not any(intricate):
        return deps, ()
    out, replaced = isl.UnionMap.empty(deps.get_space()), []
    for m, too_many in zip(maps, intricate):
        if not too_many:
            out = out.add_map(m)
            continue
        a, b = m.get_tuple_name(isl.dim_type.in_), m.get_tuple_name(isl.dim_type.out)
        src = _of_statement(sources, a)
        snk = _of_statement(sinks, b)
        touching = src.apply_range(snk.reverse())
        before = _of_statement(schedule, a).lex_lt_union_map(_of_statement(schedule, b))
        out = out.union(touching.intersect(before).coalesce())
        replaced.append((a, b))
    return out, tuple(replaced)


def _of_statement(u: isl.UnionMap, name: str) -> isl.UnionMap:
    return islmem.union_map((m for m in islmem.members(u) if m.get_tuple_name(isl.dim_type.in_) == name), u.get_space())


def branch_writes(p: PolyProgram, expanded: bool = True) -> isl.UnionMap:
    """The elements that the two sides of a condition evaluated at run time both write, in the
    same iteration: ``if c: t[i] = x`` / ``else: t[i] = y`` writes ``t[i]`` whatever ``c``.

    Each is given as written by the later side's statement instance (a write that is sure once
    both sides are behind), for the dataflow that finds reads of the initial zero only: it is not
    a dependence any schedule follows.  Nested conditions combine outwards, and only writes that
    no condition is left around count."""
    items = []  # (guards, statement name, iterators, write relation)
    for s in p.statements:
        if s.guards:
            for w in s.writes:
                if w.exact:
                    items.append((tuple(s.guards), s.name, tuple(s.iters), w.relation))
    found = []
    paired = set()  # (i, j) of the items already tried as a side and its `else`
    changed = True
    while changed:
        changed = False
        n = len(items)
        for i in range(n):
            for j in range(n):
                if (i, j) in paired:
                    continue
                paired.add((i, j))
                (gx, _, ix, wx), (gy, ny, iy, wy) = items[i], items[j]
                if (ix != iy or len(gx) != len(gy) or not gx or not _complement(gx[-1], gy[-1])
                        or any(a is not b for a, b in zip(gx[:-1], gy[:-1]))
                        or wx.get_tuple_name(isl.dim_type.out) != wy.get_tuple_name(isl.dim_type.out)):
                    continue
                both = wx.set_tuple_name(isl.dim_type.in_, ny).intersect(wy)
                if both.is_empty():
                    continue
                items.append((gx[:-1], ny, ix, both))
                changed = True
                if not gx[:-1]:
                    found.append(both)
    return islmem.union_map(one_cell(p.kernel, m) if not expanded else m for m in found)


def same_condition_writes(p: PolyProgram, expanded: bool, uninit: isl.UnionMap, must, may, flow_of) -> isl.UnionMap:
    """``uninit`` less the reads under a run-time condition of elements that a write under the same
    condition wrote before them, inside the same ``if`` (the same iteration of the loops around
    both): ``if i != axis: out[i] = x`` then ``... out[i]`` reads what was written, whatever the
    condition.  The write counts as sure for the reads it pairs with so, and for no other."""
    if uninit.is_empty():
        return uninit
    satisfied = isl.UnionMap.empty(uninit.get_space())
    for r in p.statements:
        if not r.guards:
            continue
        writers = [w for w in p.statements if w is not r and w.guards and len(w.guards) <= len(r.guards)
                   and all(a is b for a, b in zip(w.guards, r.guards)) and any(x.exact for x in w.writes)]
        sink = uninit.intersect_domain(isl.UnionSet.from_set(r.domain))
        if not writers or sink.is_empty():
            continue
        extra = islmem.union_map((one_cell(p.kernel, x.relation) if not expanded else x.relation
                                  for w in writers for x in w.writes if x.exact), uninit.get_space())
        maps = islmem.members(flow_of(sink, must.union(extra), may).get_full_may_dependence())  # per source statement
        for w in writers:
            shared = 0
            while shared < min(len(w.iters), len(r.iters)) and w.iters[shared] == r.iters[shared]:
                shared += 1
            a = [f"a{k}" for k in range(len(w.iters))]
            b = [f"b{k}" for k in range(len(r.iters))]
            for m in maps:
                if m.get_tuple_name(isl.dim_type.in_) != w.name:
                    continue
                data = m.range().unwrap().get_tuple_name(isl.dim_type.out)
                rank = m.range().unwrap().dim(isl.dim_type.out)
                same = " and ".join(f"a{k} = b{k}" for k in range(shared)) or "1 = 1"
                pair = isl.Map(with_params(p.params, "{ %s[%s] -> [%s[%s] -> %s[%s]] : %s }" % (
                    w.name, ", ".join(a), r.name, ", ".join(b), data, ", ".join(f"c{k}" for k in range(rank)), same)))
                satisfied = satisfied.add_map(m.intersect(pair).range().unwrap())
    return uninit.subtract(satisfied)


def _complement(a, b) -> bool:
    """Whether guard ``b`` is the negation of guard ``a`` (the `else` of the same condition)."""
    return isinstance(b, tir.Unary) and b.op == "not" and b.a is a


def scalar_flow(p: PolyProgram, budget: int = 0, exact: bool = True) -> isl.UnionMap:
    """The flow dependences through scalar locals only (a write of a scalar -> the reads that see
    it), with private scalars expanded as in :func:`compute` (over-approximated past ``budget``
    isl operations, or with ``exact=False``)."""
    flows = _within_budget(lambda: _scalar_flow(p, dataflow), budget) if exact else None
    return flows if flows is not None else _scalar_flow(p, conservative_flow)


def _scalar_flow(p: PolyProgram, flow_analysis) -> isl.UnionMap:
    def scalars(u: isl.UnionMap) -> isl.UnionMap:
        def scalar(m) -> bool:
            t = p.kernel.tensors.get(m.get_tuple_name(isl.dim_type.out))
            return t is not None and t.kind == "scalar"
        return islmem.union_map(filter(scalar, islmem.members(u)), u.get_space())

    reads = scalars(p.union("reads"))
    if reads.is_empty():
        return reads
    return flow_analysis(reads, scalars(p.union("must_writes")), scalars(p.union("may_writes")),
                         p.union("order")).get_may_dependence().coalesce()


class _Flow:
    """A dataflow answer with isl's UnionFlow methods (the ones used here); ``full``: the
    dependences with the element each carries (``get_full_may_dependence``), where known."""

    def __init__(self, dependence: isl.UnionMap, no_source: isl.UnionMap, full: isl.UnionMap | None = None):
        self.dependence, self.no_source, self.full = dependence, no_source, full

    def get_may_dependence(self) -> isl.UnionMap:
        return self.dependence

    def get_may_no_source(self) -> isl.UnionMap:
        return self.no_source

    def get_full_may_dependence(self) -> isl.UnionMap:
        if self.full is None:  # (which element each carries is not known)
            return isl.UnionMap.empty(self.dependence.get_space())
        return self.full


def nest_number(order: isl.Map) -> int | None:
    """The top-level loop nest of a statement, the first member of its original ``order`` (a
    schedule map); None where that is not a constant."""
    first = order.plain_get_val_if_fixed(isl.dim_type.out, 0) if order.dim(isl.dim_type.out) else None
    return islmem.int_value(first) if first is not None and first.is_int() else None


def dataflow(sink: isl.UnionMap, must_src: isl.UnionMap, may_src: isl.UnionMap, schedule: isl.UnionMap):
    """:func:`isl_dataflow`, one top-level loop nest at a time, for a program in original order
    (``schedule``'s first member numbers its top-level nests).  The instances of an earlier nest
    all run before those of a later one, so each read (or write, as a sink) is matched first
    against the sources of its own nest, then against those of the nests before it that touch
    its tensor, latest first, until a sure write has covered every element it reads: the last
    write of an element is found where it is, and the analysis costs about as many small problems
    as there are accesses, where one problem of the whole program grows with its square.  The
    answer is isl's for the whole program.  Falls back to that where a statement's first
    member is not a constant."""
    sched_of, nest_of = {}, {}
    for m in islmem.members(schedule):
        name = m.get_tuple_name(isl.dim_type.in_)
        nest_of[name] = nest_number(m)
        if nest_of[name] is None:
            return isl_dataflow(sink, must_src, may_src, schedule)
        sched_of[name] = m
    sources = {}  # (tensor, nest) -> [must maps, may maps]
    for k, u in enumerate((must_src, may_src)):
        for m in islmem.members(u):
            key = (m.get_tuple_name(isl.dim_type.out), nest_of[m.get_tuple_name(isl.dim_type.in_)])
            sources.setdefault(key, ([], []))[k].append(m)
    nests = {}  # tensor -> the nests with sources of it, latest first
    for tensor, nest in sources:
        nests.setdefault(tensor, []).append(nest)
    for v in nests.values():
        v.sort(reverse=True)
    space = sink.get_space()
    unions = {}  # (tensor, nest) -> its must and may sources and their statements' schedules, as unions

    def unions_of(key):
        if key not in unions:
            must, may = sources[key]
            names = sorted({m.get_tuple_name(isl.dim_type.in_) for m in must + may})
            unions[key] = (islmem.union_map(must, space), islmem.union_map(may, space),
                           islmem.union_map((sched_of[n] for n in names), space))
        return unions[key]

    empty = isl.UnionMap.empty(space)
    dependence, full, no_source = empty, empty, empty
    for m in islmem.members(sink):
        name, tensor = m.get_tuple_name(isl.dim_type.in_), m.get_tuple_name(isl.dim_type.out)
        left = isl.UnionMap.from_map(m)
        for nest in nests.get(tensor, ()):
            if nest > nest_of[name]:
                continue
            must, may, sources_order = unions_of((tensor, nest))
            f = isl_dataflow(left, must, may, sources_order.add_map(sched_of[name]))
            dependence = dependence.union(f.get_may_dependence())
            full = full.union(f.get_full_may_dependence())
            left = f.get_may_no_source()
            if left.is_empty():
                break
        no_source = no_source.union(left)
    return _Flow(dependence, no_source, full)


def isl_dataflow(sink: isl.UnionMap, must_src: isl.UnionMap, may_src: isl.UnionMap, schedule: isl.UnionMap):
    """isl's exact dataflow analysis of ``sink`` against the sources; where isl cannot do it (some
    strided domains make it fail: "affine expression involves some of the domain dimensions"), a
    conservative answer: every source instance before a sink instance touching the same element
    (no write kills another), and as having no source only the sink instances with none at all."""
    try:
        info = isl.UnionAccessInfo.from_sink(sink)
        return info.set_must_source(must_src).set_may_source(may_src).set_schedule_map(schedule).compute_flow()
    except isl.Error as e:
        if QUOTA in str(e):
            raise  # the budget of the analysis, for the caller
        return conservative_flow(sink, must_src, may_src, schedule)


def conservative_flow(sink: isl.UnionMap, must_src: isl.UnionMap, may_src: isl.UnionMap, schedule: isl.UnionMap):
    """Every source instance before a sink instance that touches the same element (no write kills
    another); as having no source, only the sink instances with none at all."""
    sources = must_src.union(may_src)
    touching = sources.apply_range(sink.reverse())  # source instance -> sink instance, same element
    before = schedule.lex_lt_union_map(schedule)
    dependence = touching.intersect(before).coalesce()
    return _Flow(dependence, sink.subtract_domain(dependence.range()).coalesce())


def _is_accumulation(st: Statement, read) -> bool:
    """``c[i] = c[i] + x`` (or ``c[i] += x``, ``-``): summing into a zero start is the usual idiom."""
    if not isinstance(st.stmt, tir.Store):
        return False
    v = st.stmt.value
    while isinstance(v, tir.Cast):
        v = v.a
    if not (isinstance(v, tir.Bin) and v.op in ("+", "-")):
        return False
    left = v.a
    while isinstance(left, tir.Cast):
        left = left.a
    return (isinstance(left, tir.Load) and left.tensor == st.stmt.tensor and left.span is read.span
            and left.indices == st.stmt.indices)


def uninitialized_reads(p: PolyProgram, d: Dependences) -> list:
    """Reads of output/temporary elements that nothing wrote before, other than accumulations.

    Returns ``(statement, access, iteration)`` triples; such reads see the initial zero.  A
    tensor that some statement writes at an element not known before it runs (``out[k] = x``
    with ``k`` a counter) is left out: which of its elements are written is not known here.
    """
    out = []
    unknown = {w.tensor for st in p.statements for w in st.writes if not w.exact}
    for st in p.statements:
        for r in st.reads:
            if not r.exact or p.kernel.tensors[r.tensor].kind not in ("output", "temp") or r.tensor in unknown:
                continue
            bad = d.uninitialized.intersect(isl.UnionMap.from_map(r.relation))
            if bad.is_empty() or _is_accumulation(st, r):
                continue
            point = bad.domain().sample_point()
            it = [islmem.int_value(point.get_coordinate_val(isl.dim_type.set, k)) for k in range(len(st.iters))]
            out.append((st, r, dict(zip(st.iters, it))))
    return out


def written_before_read(p: PolyProgram, d: Dependences) -> dict:
    """The outputs and temporaries whose initial zeros are never seen: nothing reads an element of
    them before it is surely written (an exact access, under no run-time condition), and, for an
    output, every element is written.  Their buffers need not be filled with zeros.  A dict from
    such a tensor to None (always), or, in a shape-generic kernel, to the isl set of the sizes at
    which it holds; empty when the dependences are over-approximated."""
    if not d.exact:
        return {}
    written = p.union("must_writes").range()
    unwritten_reads = d.uninitialized.range()
    valid = p.context()
    found = {}
    for t in p.kernel.tensors.values():
        if t.kind not in ("output", "temp") or t.name in p.kernel.inputs:
            continue
        box = isl.UnionSet.from_set(tensor_box(p.kernel, t.name, p.params))
        seen = box.intersect(unwritten_reads)  # elements read before a write
        if t.kind == "output":
            seen = seen.union(box.subtract(written))  # or never written, which the caller sees
        if seen.is_empty():
            found[t.name] = None
        elif p.params:
            safe = valid.subtract(seen.params()).coalesce()
            if not safe.is_empty():
                found[t.name] = safe
    return found
