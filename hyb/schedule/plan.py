"""Scheduling: which order the statement instances run in, and which loops run on threads.

``plan`` asks isl's scheduler for a schedule that respects every dependence (validity),
keeps dependent instances close (proximity) and exposes parallel loops (coincidence), under
an operation limit with a fallback to the original order.  The result is then shaped for a
CPU:

* in each permutable band, the member with the most unit-stride accesses goes innermost
  (for LLVM's vectoriser), parallel (coincident) members go outermost;
* permutable bands of two or more members are tiled;
* where the program's own loop order walks memory better innermost (:func:`locality`) and
  isl's order runs no loop on threads or walks memory mostly with long strides, the
  original order is kept;
* in each loop nest of the kernel, the outermost band whose first member is coincident is
  marked ``parallel`` (its loop runs on the thread pool); nothing inside a marked band is.

Every decision can be overridden with the kernel's ``schedule=`` option and is reported in
``Plan.decisions`` (shown by ``inspect("schedule")``).
"""
from __future__ import annotations

import os
import select
import signal
import time
import warnings
from dataclasses import dataclass, field

import islpy as isl

from ..errors import HybridArgumentError
from .deps import Dependences
from .deps import compute as compute_deps
from .extract import PolyProgram
from .vector import MAX_INNER, access_strides

# Iterations wanted of a parallel loop's tile loop (threads take contiguous blocks of them).
PARALLEL_TILES = 8
DEFAULT_TILES = {2: (32, 512), 3: (32, 64, 512)}
OPTION_KEYS = ("tile", "parallel", "interchange", "fuse", "vectorize", "max_operations", "timeout",
               "min_parallel_work")


@dataclass
class ScheduleOptions:
    original: bool = False  # keep the program order (schedule="original")
    tile: object = True  # True: default sizes; False: no tiling; a tuple: sizes, outermost first
    parallel: bool = True
    interchange: bool = True
    fuse: bool = True  # let isl fuse loops (False: keep strongly connected components apart)
    vectorize: bool = True  # mark the loops LLVM's loop vectoriser should get whole (schedule.vector)
    max_operations: int = 300_000
    timeout: float = 0.35  # seconds for isl's scheduler
    min_parallel_work: int = 1 << 15  # statement instances a parallel loop needs to run on threads


def parse_options(schedule) -> ScheduleOptions:
    """The ``schedule=`` option of a kernel: None, "auto", "original" or a dict of ScheduleOptions."""
    if schedule in (None, "auto"):
        return ScheduleOptions()
    if schedule == "original":
        return ScheduleOptions(original=True, tile=False, parallel=False, interchange=False)
    if isinstance(schedule, dict):
        unknown = set(schedule) - set(OPTION_KEYS)
        if unknown:
            raise HybridArgumentError(f"unknown schedule option `{sorted(unknown)[0]}`", None,
                                      "schedule options are: " + ", ".join(OPTION_KEYS))
        opts = ScheduleOptions()
        tile = schedule.get("tile", True)
        if not (isinstance(tile, bool) or (isinstance(tile, (tuple, list)) and tile
                                            and all(isinstance(t, int) and t > 0 for t in tile))):
            raise HybridArgumentError(f"schedule option tile={tile!r} is not valid", None,
                                      "use True, False or a tuple of positive sizes such as (32, 64, 256)")
        opts.tile = tuple(tile) if isinstance(tile, (tuple, list)) else tile
        for key in ("parallel", "interchange", "fuse", "vectorize"):
            if key in schedule:
                if not isinstance(schedule[key], bool):
                    raise HybridArgumentError(f"schedule option {key}={schedule[key]!r} must be True or False",
                                              None, None)
                setattr(opts, key, schedule[key])
        if "max_operations" in schedule:
            opts.max_operations = int(schedule["max_operations"])
        if "min_parallel_work" in schedule:
            w = schedule["min_parallel_work"]
            if isinstance(w, bool) or not isinstance(w, int) or w < 0:
                raise HybridArgumentError(f"schedule option min_parallel_work={w!r} must be a count >= 0", None, None)
            opts.min_parallel_work = w
        if "timeout" in schedule:
            t = schedule["timeout"]
            if isinstance(t, bool) or not isinstance(t, (int, float)) or t < 0:
                raise HybridArgumentError(f"schedule option timeout={t!r} must be a number of seconds", None,
                                          "0 runs isl without a time limit")
            opts.timeout = float(t)
        return opts
    raise HybridArgumentError(f"schedule={schedule!r} is not valid", None,
                              "use schedule=\"auto\", \"original\" or a dict such as "
                              "{\"tile\": (32, 64, 256), \"parallel\": True}")


@dataclass
class Plan:
    schedule: object  # isl.Schedule, or None for the original order
    decisions: list = field(default_factory=list)

    def describe(self) -> str:
        lines = list(self.decisions)
        if self.schedule is not None:
            lines.append("schedule tree:")
            lines.extend("  " + ln for ln in str(self.schedule.get_root()).split("\n") if ln.strip())
        return "\n".join(lines) + "\n"


def plan(p: PolyProgram, d: Dependences, opts: ScheduleOptions, cell_deps=None) -> Plan:
    """A schedule for ``p``.  ``d`` are its dependences with private scalars expanded; when the
    schedule found with them would interleave the lifetimes of one scalar cell (the generated
    code keeps one cell per thread), the schedule is computed again without the expansion.
    ``cell_deps``: a function giving those one-cell dependences (computed here if None)."""
    if opts.original or not p.statements:
        return Plan(None, ["original program order (schedule=\"original\")" if opts.original
                           else "no statements"])
    result = _plan(p, d, opts)
    if result.schedule is None or not p.has_private_scalars:
        return result
    cell_deps = cell_deps() if cell_deps is not None else compute_deps(p, expanded=False)
    if _respects(result.schedule, cell_deps.all):
        result.decisions.insert(1, "scalar locals privatised: each loop iteration (and thread) has its own")
        return result
    if opts.interchange or opts.tile:
        # Reordering or tiling split a scalar's lifetime; keep isl's loop order instead.
        plain = ScheduleOptions(**{**opts.__dict__, "interchange": False, "tile": False})
        result = _plan(p, d, plain)
        if result.schedule is not None and _respects(result.schedule, cell_deps.all):
            result.decisions.insert(1, "scalar locals privatised; loops neither reordered nor tiled, which "
                                       "would interleave their lifetimes")
            return result
    again = _plan(p, cell_deps, opts)
    again.decisions.insert(1, "scalar locals kept as single cells (privatising them would interleave "
                              "their lifetimes)")
    return again


def _respects(sched: isl.Schedule, deps: isl.UnionMap) -> bool:
    """Whether every dependence runs source before sink, except those between different
    iterations of the parallel loop (each thread has its own scalar cells)."""
    if deps.is_empty():
        return True
    smap = _padded(sched.get_map())
    bad = deps.intersect(smap.lex_ge_union_map(smap))
    for mark in _parallel_marks(sched):
        if bad.is_empty():
            break
        band = mark.child(0)
        inner = band.get_domain()
        first = band.band_get_partial_schedule().get_at(0)
        member = isl.UnionMap.from_union_pw_aff(first).intersect_domain(inner)
        prefix = band.get_prefix_schedule_union_map().intersect_domain(inner)
        same_prefix = prefix.apply_range(prefix.reverse())
        same_member = member.apply_range(member.reverse())
        bad = bad.subtract(same_prefix.subtract(same_member))
    return bad.is_empty()


def _padded(smap: isl.UnionMap) -> isl.UnionMap:
    """The schedule map with every statement's time vector padded with zeros to one length,
    in one anonymous space, so that times of different statements can be compared."""
    maps = []
    smap.foreach_map(maps.append)
    n = max(m.dim(isl.dim_type.out) for m in maps)
    out = isl.UnionMap.empty(smap.get_space())
    for m in maps:
        k = m.dim(isl.dim_type.out)
        m = m.add_dims(isl.dim_type.out, n - k)
        for pos in range(k, n):
            m = m.fix_si(isl.dim_type.out, pos, 0)
        out = out.union(isl.UnionMap.from_map(m.reset_tuple_id(isl.dim_type.out)))
    return out


def _parallel_marks(sched: isl.Schedule) -> list:
    """The schedule nodes marked parallel (none is inside another)."""
    found = []

    def visit(node):
        if node.get_type() == isl.schedule_node_type.mark and node.mark_get_id().get_name() == "parallel":
            found.append(node)
            return
        for i in range(node.n_children()):
            visit(node.child(i))

    visit(sched.get_root())
    return found


def serial_order(p: PolyProgram) -> isl.UnionMap:
    """Extra dependences that keep every `serial` loop in order and off the threads: each
    instance inside iteration v of such a loop comes before every instance inside a later one."""
    out = isl.UnionMap.empty(isl.Space.params_alloc(isl.DEFAULT_CONTEXT, 0))
    for var, loop in p.loops.items():
        if loop.kind != "serial":
            continue
        inside = [s for s in p.statements if var in s.iters]
        for a in inside:
            for b in inside:
                k = a.iters.index(var)
                src = [f"x{i}" for i in range(len(a.iters))]
                dst = [f"y{i}" for i in range(len(b.iters))]
                cond = [f"x{i} = y{i}" for i in range(k)]
                cond.append(f"y{k} > x{k}" if loop.step > 0 else f"y{k} < x{k}")
                m = isl.Map(f"{{ {a.name}[{', '.join(src)}] -> {b.name}[{', '.join(dst)}] : {' and '.join(cond)} }}")
                m = m.intersect_domain(a.domain).intersect_range(b.domain)
                out = out.union(isl.UnionMap.from_map(m))
    return out


def parallel_hint_conflicts(p: PolyProgram, deps: isl.UnionMap) -> list:
    """(loop, dependence) for each loop written `parallel` whose iterations depend on each other."""
    out = []
    for var, loop in p.loops.items():
        if loop.kind != "parallel":
            continue
        inside = [s for s in p.statements if var in s.iters]
        carried = isl.UnionMap.empty(deps.get_space())
        for a in inside:
            for b in inside:
                k = a.iters.index(var)
                src = [f"x{i}" for i in range(len(a.iters))]
                dst = [f"y{i}" for i in range(len(b.iters))]
                cond = [f"x{i} = y{i}" for i in range(k)] + [f"y{k} != x{k}"]
                m = isl.Map(f"{{ {a.name}[{', '.join(src)}] -> {b.name}[{', '.join(dst)}] : {' and '.join(cond)} }}")
                carried = carried.union(deps.intersect(isl.UnionMap.from_map(m)))
        if not carried.is_empty():
            out.append((loop, carried))
    return out


def _plan(p: PolyProgram, d: Dependences, opts: ScheduleOptions) -> Plan:
    decisions = []
    ctx = isl.DEFAULT_CONTEXT
    dom = p.union("domain")
    deps_all = d.all
    serial = serial_order(p)
    if not serial.is_empty():
        deps_all = deps_all.union(serial)
        decisions.append("`serial` loops kept in order and off the threads")
    sc = isl.ScheduleConstraints.on_domain(dom).set_validity(deps_all).set_proximity(d.all)
    sc = sc.set_coincidence(deps_all)
    old_fuse = ctx.get_schedule_serialize_sccs()
    ctx.set_schedule_serialize_sccs(0 if opts.fuse else 1)
    ctx.set_schedule_maximize_coincidence(1)
    ctx.set_schedule_outer_coincidence(1)
    ctx.set_max_operations(opts.max_operations)
    ctx.reset_operations()
    try:
        sched, why = _compute_schedule(sc, opts.timeout)
    finally:
        ctx.set_max_operations(0)
        ctx.reset_operations()
        ctx.set_schedule_serialize_sccs(old_fuse)
    if sched is None:
        return Plan(None, [f"isl scheduler {why}: original order"])
    decisions.append("isl scheduler: validity = flow+anti+output, proximity = all, coincidence = all")
    shaper = _Shaper(p, opts, decisions)
    if opts.interchange:
        sched = sched.map_schedule_node_bottom_up(shaper.reorder)
        if opts.vectorize:
            sched = shaper.sink(sched.get_root()).get_schedule()
    offers_threads = opts.parallel and _leading_parallel_work(sched, p) >= opts.min_parallel_work
    if opts.parallel:
        sched = _mark_parallel(sched, decisions, p, opts.min_parallel_work)
    # isl's order must pay for itself: where the program's own loops walk memory better
    # innermost (a triangular solve as dot products rather than column sweeps), keep them,
    # unless isl's order has threads to offer and walks memory tolerably (tiled wavefronts of
    # seidel-2d are fast although their innermost loops stride).
    mine, theirs = locality(p, p.union("schedule")), locality(p, sched.get_map())
    if mine > theirs and (not offers_threads or theirs < 0):
        decisions.append(f"original order kept: its innermost loops walk memory better "
                         f"(locality score {mine:.3g} against {theirs:.3g} for isl's schedule)")
        return Plan(None, decisions)
    if opts.tile:
        sched = sched.map_schedule_node_bottom_up(shaper.tile)
    return Plan(sched, decisions)


def locality(p: PolyProgram, smap: isl.UnionMap) -> float:
    """How well the innermost loop of each statement walks memory under schedule ``smap``:
    the access scores of :meth:`_Shaper.order` for the statement's innermost loop, weighted
    by its number of instances; statements whose innermost loop is no single iterator score 0."""
    total = 0.0
    for st in p.statements:
        inner = _innermost_iterator(smap, st)
        if inner is None:
            continue
        count = work(p, isl.UnionSet.from_set(st.domain))
        total += count * _access_score(p, st, inner)
    return total


def _innermost_iterator(smap: isl.UnionMap, st) -> int | None:
    """The iterator of ``st`` that the last non-constant schedule dimension runs over."""
    maps = []
    smap.intersect_domain(isl.UnionSet.from_set(st.domain)).foreach_map(maps.append)
    if len(maps) != 1:
        return None
    m = maps[0]
    try:
        pma = isl.PwMultiAff.from_map(m)
    except isl.Error:
        return None
    for d in reversed(range(m.dim(isl.dim_type.out))):
        pieces = pma.get_pw_aff(d).get_pieces()
        if len(pieces) != 1:
            return None
        aff = pieces[0][1]
        hit = [k for k in range(len(st.iters)) if not aff.get_coefficient_val(isl.dim_type.in_, k).is_zero()]
        if len(hit) == 1:
            return hit[0]
        if hit:
            return None  # skewed
    return None


def _access_score(p: PolyProgram, st, it: int) -> float:
    """Unit stride 3, invariant (a register across the loop) 2, long stride -4; writes count twice."""
    score = 0.0
    for acc, weight in [(w, 2.0) for w in st.writes] + [(r, 1.0) for r in st.reads]:
        if p.kernel.tensors[acc.tensor].kind == "scalar":
            continue  # registers, not memory
        strides = access_strides(acc, len(st.iters))
        if strides is not None:
            score += weight * strides.get(it, 2.0)
    return score


def _compute_schedule(sc: isl.ScheduleConstraints, timeout: float):
    """isl's schedule for ``sc``, or (None, why).  isl cannot be interrupted and its operation
    limit does not bound its time, so where the system can fork, the scheduler runs in a child
    process that is killed after ``timeout`` seconds; the schedule comes back as text."""
    if not hasattr(os, "fork") or timeout <= 0:
        try:
            return sc.compute_schedule(), ""
        except isl.Error:
            return None, "gave up (operation limit)"
    r, w = os.pipe()
    with warnings.catch_warnings():
        # Fork with threads (Python's DeprecationWarning; JAX's RuntimeWarning from its at-fork
        # hook): harmless here, the child runs isl and writes to a pipe, nothing else.
        warnings.simplefilter("ignore", DeprecationWarning)
        warnings.filterwarnings("ignore", message=r"os\.fork\(\) was called", category=RuntimeWarning)
        pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        code = 1
        try:
            os.close(r)
            text = sc.compute_schedule().to_str().encode()
            view = memoryview(text)
            while view:
                view = view[os.write(w, view):]
            code = 0
        except BaseException:
            pass
        os._exit(code)
    os.close(w)
    chunks, deadline, timed_out = [], time.monotonic() + timeout, False
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([r], [], [], left)[0]:
                timed_out = True
                break
            chunk = os.read(r, 1 << 16)
            if not chunk:
                break
            chunks.append(chunk)
    finally:
        os.close(r)
        if timed_out:
            os.kill(pid, signal.SIGKILL)
        _, status = os.waitpid(pid, 0)
    if timed_out:
        return None, f"took longer than {timeout:g} s (schedule={{'timeout': ...}} changes the limit)"
    if status != 0 or not chunks:
        return None, "gave up (operation limit)"
    return isl.Schedule.read_from_str(isl.DEFAULT_CONTEXT, b"".join(chunks).decode()), ""


class _Shaper:
    """Reorders and tiles permutable bands, bottom-up."""

    def __init__(self, p: PolyProgram, opts: ScheduleOptions, decisions: list):
        self.p, self.opts, self.decisions = p, opts, decisions

    def reorder(self, node: isl.ScheduleNode) -> isl.ScheduleNode:
        if not self._permutable(node):
            return node
        n = node.band_n_member()
        coincident = [bool(node.band_member_get_coincident(i)) for i in range(n)]
        order = self.order(node, coincident)
        if order != list(range(n)):
            node = _permute(node, order, coincident)
            self.decisions.append(f"band of {n}: members reordered {order} (innermost: best unit stride; "
                                  f"parallel members outermost)")
        return node

    def tile(self, node: isl.ScheduleNode) -> isl.ScheduleNode:
        if not self._permutable(node):
            return node
        n = node.band_n_member()
        sizes = self.opts.tile if isinstance(self.opts.tile, tuple) else DEFAULT_TILES.get(n)
        if sizes is None:
            sizes = (32,) * (n - 1) + (512,)
        sizes = tuple(sizes[-n:]) if len(sizes) >= n else (sizes[0],) * (n - len(sizes)) + tuple(sizes)
        extents = self.extents(node)
        parent = node.parent() if node.has_parent() else None
        if (not isinstance(self.opts.tile, tuple) and parent is not None and parent.get_type() == isl.schedule_node_type.mark
                and parent.mark_get_id().get_name() == "parallel" and extents[0] is not None
                and -(-extents[0] // sizes[0]) < PARALLEL_TILES // 2):
            # The first member's tile loop runs on the threads: where it would have only a few
            # iterations, smaller tiles give it PARALLEL_TILES, so that every thread has work.
            sizes = (max(1, -(-extents[0] // PARALLEL_TILES)),) + sizes[1:]
        if any(e is None or e > s for e, s in zip(extents, sizes)):
            mv = isl.MultiVal.zero(node.band_get_space())
            for i, s in enumerate(sizes):
                mv = mv.set_val(i, isl.Val.int_from_si(isl.DEFAULT_CONTEXT, s))
            node = node.band_tile(mv)
            self.decisions.append(f"band of {n} tiled {sizes}")
        return node

    def sink(self, node: isl.ScheduleNode) -> isl.ScheduleNode:
        """Moves a band's innermost member below the one-statement chain of bands under it where
        that member walks memory with unit stride, the chain does not, and the chain runs more
        than a few iterations: isl puts a reduction loop (`pp` of a weight gradient's partial sums
        `partial[.., q] += x[.., p + r, q + s] * dout[.., p, q]`) in a band of its own below the
        parallel loops, and LLVM vectorises only innermost loops.  Legal because the member is
        coincident (it carries no dependence left to the bands below); a parallel member stays
        in the band for the threads.  Returns the node at the same position."""
        if self._permutable(node):
            n = node.band_n_member()
            chain, below = [], node.child(0)
            while below.get_type() == isl.schedule_node_type.band:
                chain.append(below)
                below = below.child(0)
            coincident = [bool(node.band_member_get_coincident(i)) for i in range(n)]
            if (chain and below.get_type() == isl.schedule_node_type.leaf and coincident[-1]
                    and any(coincident[:-1]) and self._chain_long(chain)):
                mine = self.scores(node)
                theirs = [self.scores(c) for c in chain]
                if (mine is not None and mine[-1] > 0 and all(t is not None for t in theirs)
                        and mine[-1] > max(max(t) for t in theirs)):
                    node = node.band_split(n - 1)
                    moved = node.child(0)
                    member = moved.band_get_partial_schedule()
                    at = moved.delete()  # the first band of the chain
                    for _ in chain:
                        at = at.child(0)
                    at = at.insert_partial_schedule(member).band_member_set_coincident(0, 1)
                    node = at.ancestor(len(chain) + 1)
                    self.decisions.append(f"band of {n}: innermost member moved below {len(chain)} "
                                          "reduction band(s) (unit stride innermost for the vectoriser)")
        for i in range(node.n_children()):
            node = self.sink(node.child(i)).parent()
        return node

    def _chain_long(self, chain: list) -> bool:
        """Whether the bands of ``chain`` run more than MAX_INNER iterations together (LLVM unrolls
        shorter ones whole, leaving the loop above them innermost)."""
        total = 1
        for band in chain:
            for e in self.extents(band):
                if e is None:
                    return True
                total *= e
        return total > MAX_INNER

    @staticmethod
    def _permutable(node: isl.ScheduleNode) -> bool:
        return (node.get_type() == isl.schedule_node_type.band and node.band_n_member() >= 2
                and bool(node.band_get_permutable()))

    def extents(self, node) -> list:
        """Number of values each band member takes (None if unknown)."""
        umap = node.band_get_partial_schedule_union_map().intersect_domain(node.get_domain())
        rng = umap.range()
        sets = []
        rng.foreach_set(sets.append)
        if len(sets) != 1:
            return [None] * node.band_n_member()
        return [_extent(sets[0], i) for i in range(sets[0].dim(isl.dim_type.set))]

    def scores(self, node) -> list | None:
        """The access score of each band member (summed over the statements under the band), or
        None where a member is no plain loop of some statement (a skewed band)."""
        n = node.band_n_member()
        scores = [0.0] * n
        mupa = node.band_get_partial_schedule()
        for st in self.p.statements:
            if node.get_domain().intersect(isl.UnionSet.from_set(st.domain)).is_empty():
                continue
            space = st.domain.get_space()
            members = [_single_iterator(mupa.get_at(m), space, len(st.iters)) for m in range(n)]
            if any(it is None for it in members):
                if len(st.iters) >= n:
                    return None
                continue  # a statement outside some of the band's loops (an initialisation) does not vote
            for m, it in enumerate(members):
                scores[m] += _access_score(self.p, st, it)
        return scores

    def order(self, node, coincident: list) -> list:
        n = len(coincident)
        scores = self.scores(node)
        if scores is None:
            return list(range(n))  # not a plain permutation of loops (skewed): keep isl's order
        inner = max(range(n), key=lambda m: (scores[m], m))
        if scores[inner] <= scores[n - 1]:
            inner = n - 1
        rest = [m for m in range(n) if m != inner]
        rest.sort(key=lambda m: (not coincident[m], m))
        return rest + [inner]


def _single_iterator(upa: isl.UnionPwAff, space, ndim: int):
    """The iterator a band member is for a statement, if it is exactly ±one iterator (+ constant)."""
    try:
        pa = upa.extract_pw_aff(_member_space(space))
        pieces = pa.get_pieces()
    except isl.Error:
        return None
    if len(pieces) != 1:
        return None
    aff = pieces[0][1]
    hit = [k for k in range(ndim) if not aff.get_coefficient_val(isl.dim_type.in_, k).is_zero()]
    return hit[0] if len(hit) == 1 else None


def _member_space(set_space: isl.Space) -> isl.Space:
    """The space of a one-dimensional function on a statement's domain."""
    return isl.Space.map_from_domain_and_range(set_space, isl.Space.set_alloc(isl.DEFAULT_CONTEXT, 0, 1))


def _permute(node: isl.ScheduleNode, order: list, coincident: list) -> isl.ScheduleNode:
    mupa = node.band_get_partial_schedule()
    upas = [mupa.get_at(i) for i in order]
    lst = isl.UnionPwAffList.alloc(isl.DEFAULT_CONTEXT, len(upas))
    for u in upas:
        lst = lst.add(u)
    space = mupa.get_space()
    new = isl.MultiUnionPwAff.from_union_pw_aff_list(space, lst)
    node = node.delete()
    node = node.insert_partial_schedule(new)
    node = node.band_set_permutable(1)
    for i, m in enumerate(order):
        node = node.band_member_set_coincident(i, 1 if coincident[m] else 0)
    return node


def _constant_first_member(band: isl.ScheduleNode) -> bool:
    """Whether the band's first member takes one value for each iteration of the loops around it:
    isl then generates no loop for it, and the first loop below would be a different member."""
    dom = band.get_domain()
    member = isl.UnionMap.from_union_pw_aff(band.band_get_partial_schedule().get_at(0)).intersect_domain(dom)
    prefix = band.get_prefix_schedule_union_map().intersect_domain(dom)
    return prefix.reverse().apply_range(member).is_single_valued()


def work(p: PolyProgram, domain: isl.UnionSet) -> int:
    """An upper bound on the statement instances in ``domain`` (bounding boxes)."""
    total = 0
    for st in p.statements:
        d = domain.intersect(isl.UnionSet.from_set(st.domain))
        if d.is_empty():
            continue
        box = 1
        s = isl.Set.from_union_set(d) if d.n_set() == 1 else st.domain
        for i in range(s.dim(isl.dim_type.set)):
            n = _extent(s, i)
            if n is None:
                return 1 << 62
            box *= n
        total += box
    return total


def _extent(s: isl.Set, i: int):
    """How many values dimension ``i`` of ``s`` spans (max - min + 1, at least 0), or None if unknown."""
    try:
        lo = [a for _, a in s.dim_min(i).get_pieces()]
        hi = [a for _, a in s.dim_max(i).get_pieces()]
        if not lo or not hi or not all(a.is_cst() for a in lo + hi):
            return None
        lo_v = min(a.get_constant_val().to_python() for a in lo)
        hi_v = max(a.get_constant_val().to_python() for a in hi)
    except isl.Error:
        return None
    return max(0, int(hi_v - lo_v + 1))


def _launches(band: isl.ScheduleNode) -> int:
    """How many times the loops around ``band`` start it (the bounding box of its prefix schedule)."""
    prefix = band.get_prefix_schedule_union_map().intersect_domain(band.get_domain())
    sets = []
    prefix.range().foreach_set(sets.append)
    total = 1
    for st in sets[:1]:
        for i in range(st.dim(isl.dim_type.set)):
            total *= max(1, _extent(st, i) or 1)
    return max(1, total)


def _parallel_candidate(node: isl.ScheduleNode) -> bool:
    """A band whose first member carries no dependence and makes a loop of its own."""
    return (node.get_type() == isl.schedule_node_type.band and bool(node.band_member_get_coincident(0))
            and not _constant_first_member(node))


def _leading_parallel_work(sched: isl.Schedule, p: PolyProgram) -> int:
    """All the statement instances under the first band (in program order) whose first member is
    parallel: how much isl's order has to put on threads, for the choice between isl's order and
    the original one (0 if there is no such band)."""
    def visit(node):
        if _parallel_candidate(node):
            return work(p, node.get_domain())
        for i in range(node.n_children()):
            found = visit(node.child(i))
            if found is not None:
                return found
        return None

    return visit(sched.get_root()) or 0


def _mark_parallel(sched: isl.Schedule, decisions: list, p: PolyProgram, min_work: int) -> isl.Schedule:
    """In each loop nest, mark the outermost band whose first member is coincident; nothing
    below a marked band is marked.  Nests are the subtrees under the top-level sequence or set."""
    counts = {"marked": 0, "serial": 0}
    too_little = []

    def visit(node):
        if _parallel_candidate(node):
            amount = work(p, node.get_domain()) // _launches(node)  # per run of the parallel loop
            if amount < min_work:
                counts["serial"] += 1
                too_little.append(amount)
                return node
            counts["marked"] += 1
            return node.insert_mark(isl.Id("parallel"))
        for i in range(node.n_children()):
            node = visit(node.child(i)).parent()
        return node

    root = visit(sched.get_root())
    for amount in too_little:
        decisions.append(f"parallel loop left serial: about {amount} instances are too little work for threads")
    if counts["marked"]:
        nests = "" if counts["marked"] == 1 else f" in each of {counts['marked']} loop nests"
        decisions.append(f"outermost parallel loop{nests}: marked `parallel` (runs on the thread pool)")
        return root.get_schedule()
    if not counts["serial"]:
        decisions.append("no parallel loop found")
    return sched


def mark_original_parallel(p: PolyProgram, nest, deps: isl.UnionMap, opts: ScheduleOptions,
                           decisions: list) -> int:
    """Loops of the original order (``nest``, generated without a schedule) that may run on threads:
    in each loop nest, the outermost loop that carries none of ``deps`` (checked on the loops
    themselves, :func:`verify.violations`) and holds enough work is marked ``parallel``.
    Returns how many were marked."""
    from . import loops as L
    from . import verify

    if not opts.parallel or opts.original:
        return 0
    deps = deps.union(serial_order(p))
    marked = 0

    def inside(s) -> isl.UnionSet:
        out = isl.UnionSet.empty(isl.Space.params_alloc(isl.DEFAULT_CONTEXT, 0))
        for n in {c.stmt for c in L.calls(s.body)}:
            out = out.union(isl.UnionSet.from_set(p.by_name[n].domain))
        return out

    def visit(body, launches):
        nonlocal marked
        for s in body:
            if isinstance(s, L.If):
                visit(s.then, launches)
                visit(s.orelse, launches)
            if not isinstance(s, L.For):
                continue
            once = isinstance(s.cond, L.LOp) and s.cond.op == "le" and s.cond.args[0] == L.LVar(s.var) \
                and s.cond.args[1] == s.init
            if not once and work(p, inside(s)) // launches >= opts.min_parallel_work:
                s.parallel = True
                broken = verify.violations(nest, deps)
                if broken is not None and broken.is_empty():
                    marked += 1
                    continue
                s.parallel = False
            visit(s.body, launches * max(1, L.constant_trips(s) or 1))

    visit(nest.body, 1)
    if marked:
        decisions.append(f"original order: {marked} loop{'s' if marked > 1 else ''} whose iterations are "
                         "independent marked `parallel` (runs on the thread pool)")
    return marked
