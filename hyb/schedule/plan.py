"""Scheduling: which order the statement instances run in, and which loops run on threads.

``plan`` asks isl's scheduler for a schedule that respects every dependence (validity),
keeps dependent instances close (proximity) and exposes parallel loops (coincidence), under
an operation limit with a fallback to the original order.  The result is then shaped for a
CPU:

* where isl fused loop nests so that a contraction loses the register block tiling would give
  it (its reduction loop alone innermost) and the nests kept apart (each strongly connected
  component of the dependences in loops of its own) give it one, or so that a statement's
  innermost loop strides through memory and the nests kept apart walk memory better, they are
  kept apart;

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

import time
from dataclasses import dataclass, replace

import islpy as isl

from .deps import MAX_DEPENDENCE_CONSTRAINTS, Dependences, nest_number
from .deps import compute as compute_deps
from .deps import operations
from .extract import PolyProgram
from . import fuse, islmem
from .isl_scheduler import compute_schedule
from .options import ScheduleOptions
from .parallel import leading_parallel_work, mark_parallel_bands, parallel_marks, serial_order
from . import blocking
from .counting import work
from .shaping import Shaper, locality, padded, strided_innermost

# Iterations wanted of a parallel loop's tile loop (threads take contiguous blocks of them).

@dataclass(frozen=True)
class Plan:
    """The plan stage's record: a schedule tree (None: the original program order) and the
    decisions taken on the way, in order, as ``inspect("schedule")`` lists them."""

    tree: object  # isl.Schedule (a schedule tree), or None for the original order
    decisions: tuple = ()
    # the register and cache blocks of contraction bands: ((MR, NR), cache tile sizes) each
    blocks: tuple = ()

    def __post_init__(self):
        object.__setattr__(self, "decisions", tuple(self.decisions))
        object.__setattr__(self, "blocks", tuple(self.blocks))

    def noted(self, decision: str, at: int | None = None) -> "Plan":
        """The same plan with one more decision (at position ``at``; default: last)."""
        items = list(self.decisions)
        items.insert(len(items) if at is None else at, decision)
        return Plan(self.tree, items, self.blocks)

    def describe(self) -> str:
        lines = list(self.decisions)
        if self.tree is not None:
            lines.append("schedule tree:")
            lines.extend("  " + ln for ln in str(self.tree.get_root()).split("\n") if ln.strip())
        return "\n".join(lines) + "\n"


# The largest constant term and coefficient isl may put in a schedule (a shift between fused
# statements, a skew).  Left unbounded, its search also weighs placing a statement after a loop
# as that loop's last iteration (a constant equal to the extent) and interleaving a statement
# with a loop by a coefficient near the extent: shape-specific schedules that made the search 20
# to 60 times slower on kernels of several loop nests (3mm, layernorm, attention), and loops that
# isl's AST generator then misordered (correlation, covariance); on the other kernels it found
# the same schedules.
MAX_SHIFT = 8
# statement instances walking memory with long strides innermost that make the scheduler try the
# loop nests kept apart (as many as a contraction needs for a register block)
MIN_APART_WORK = 1 << 15


def plan(p: PolyProgram, d: Dependences, opts: ScheduleOptions, cell_deps: Dependences | None = None) -> Plan:
    """A schedule for ``p``.  ``d`` are its dependences with private scalars expanded; when the
    schedule found with them would interleave the lifetimes of one scalar cell (the generated
    code keeps one cell per thread), the schedule is computed again without the expansion.
    ``cell_deps``: those one-cell dependences (computed here when needed and not given)."""
    if opts.original or not p.statements:
        return Plan(None, ["original program order (schedule=\"original\")" if opts.original
                           else "no statements"])
    solved = _Solved(opts.timeout)  # isl's answers: a second plan with the same constraints reuses one
    result = _plan(p, d, opts, solved)
    if result.tree is None or not p.has_private_scalars:
        return result
    cell_deps = cell_deps if cell_deps is not None else compute_deps(p, expanded=False)
    if _respects(result.tree, cell_deps.all):
        return result.noted("scalar locals privatised: each loop iteration (and thread) has its own", 1)
    if opts.interchange or opts.tile:
        # Reordering or tiling split a scalar's lifetime; keep isl's loop order instead.
        plain = replace(opts, interchange=False, tile=False)
        result = _plan(p, d, plain, solved)
        if result.tree is not None and _respects(result.tree, cell_deps.all):
            return result.noted("scalar locals privatised; loops neither reordered nor tiled, which "
                                "would interleave their lifetimes", 1)
    # Each scalar's lifetimes kept in order (its one-cell dependences as validity constraints),
    # while parallelism is judged on the expanded dependences: the statements that share a scalar
    # stay in one iteration of its loops (a row's sum and the loop that reads it), and those loops
    # may still run on threads, each with its own cell.
    kept = _plan(p, d, opts, solved, cell_deps)
    if kept.tree is not None and _respects(kept.tree, cell_deps.all):
        return kept.noted("scalar locals privatised, each kept in one iteration of the loops around "
                          "its lifetimes", 1)
    again = _plan(p, cell_deps, opts, solved)
    return again.noted("scalar locals kept as single cells (privatising them would interleave "
                       "their lifetimes)", 1)


def _respects(sched: isl.Schedule, deps: isl.UnionMap) -> bool:
    """Whether every dependence runs source before sink, except those between different
    iterations of the parallel loop (each thread has its own scalar cells).  Judged one
    statement pair at a time, stopping at the first pair that runs out of order: a failing
    check (the common one, for a tiled schedule of private scalars) costs one pair's work."""
    if deps.is_empty():
        return True
    times = {m.get_tuple_name(isl.dim_type.in_): m for m in islmem.members(padded(sched.get_map()))}
    lex_lt = isl.Map.lex_lt(next(iter(times.values())).get_space().range())
    exempt = None  # per parallel mark: instance pairs that run on different threads
    for dep in islmem.members(deps):
        src, dst = times[dep.get_tuple_name(isl.dim_type.in_)], times[dep.get_tuple_name(isl.dim_type.out)]
        late = dep.apply_domain(src).apply_range(dst).subtract(lex_lt)
        if late.is_empty():
            continue
        bad = isl.UnionMap.from_map(dep.intersect(src.apply_range(late).apply_range(dst.reverse())))
        exempt = _other_threads(sched) if exempt is None else exempt
        for pairs_apart in exempt:
            if bad.is_empty():
                break
            bad = bad.subtract(pairs_apart)
        if not bad.is_empty():
            return False
    return True


def _other_threads(sched: isl.Schedule) -> list:
    """For each parallel mark of ``sched``: the pairs of its statement instances in one iteration
    of the loops around the mark and different iterations of its parallel loop."""
    out = []
    for mark in parallel_marks(sched):
        band = mark.child(0)
        inner = band.get_domain()
        first = band.band_get_partial_schedule().get_at(0)
        member = isl.UnionMap.from_union_pw_aff(first).intersect_domain(inner)
        prefix = band.get_prefix_schedule_union_map().intersect_domain(inner)
        out.append(prefix.apply_range(prefix.reverse()).subtract(member.apply_range(member.reverse())))
    return out


# the seconds isl's scheduler may take for all the schedules one plan tries, in timeouts
SCHEDULER_TIMEOUTS = 2


class _Solved(dict):
    """isl's answers by (dependences, apart) for the schedules of one plan, and the time its
    scheduler has left: ``SCHEDULER_TIMEOUTS`` timeouts for all of them together, so that a plan
    trying again (private scalars whose lifetimes a schedule interleaves) cannot take a timeout
    for each try."""

    def __init__(self, timeout: float | None):
        super().__init__()
        self.limit = timeout  # (None or 0: none)
        self.deadline = time.monotonic() + SCHEDULER_TIMEOUTS * timeout if timeout else None

    def time_left(self) -> float | None:
        """The limit of the next run: the option's, or less where the plan's time runs short;
        0.0 where it is spent."""
        if self.deadline is None:
            return self.limit
        return max(0.0, min(self.limit, self.deadline - time.monotonic()))


def _solve(sc: isl.ScheduleConstraints, opts: ScheduleOptions, apart: bool, timeout: float | None):
    """isl's schedule for ``sc`` under the options' limits and ``timeout`` (the seconds left to
    it), or (None, why); ``apart``: each strongly connected component of the dependence graph in
    loops of its own."""
    if opts.timeout and not timeout:
        return None, (f"took longer than {SCHEDULER_TIMEOUTS * opts.timeout:g} s in all for this kernel's schedules "
                      "(schedule={'timeout': ...} changes the limit)")
    ctx = isl.DEFAULT_CONTEXT
    old = (ctx.get_schedule_serialize_sccs(), ctx.get_schedule_max_constant_term(),
           ctx.get_schedule_max_coefficient())
    ctx.set_schedule_serialize_sccs(1 if apart else 0)
    ctx.set_schedule_max_constant_term(MAX_SHIFT)
    ctx.set_schedule_max_coefficient(MAX_SHIFT)
    ctx.set_schedule_maximize_coincidence(1)
    ctx.set_schedule_outer_coincidence(1)
    try:
        with operations(opts.max_operations):
            sched, why = compute_schedule(sc, timeout)
        steep = _steepest(sched) if sched is not None else 0
        if steep > MAX_COEFFICIENT:
            return None, (f"gave a schedule with a loop coefficient of {steep} (over {MAX_COEFFICIENT}: its loops "
                          "would run mostly empty)")
        return sched, why
    finally:
        ctx.set_schedule_serialize_sccs(old[0])
        ctx.set_schedule_max_constant_term(old[1])
        ctx.set_schedule_max_coefficient(old[2])


# isl's schedules are searched with coefficients of at most MAX_SHIFT (on a strided domain's
# compressed loops: a few times more on the program's own); where a schedule still has a larger
# one (its fallback for dependences a band cannot carry does not bound them), its loops run over
# ranges their statements fill sparsely (a loop of 10^6 steps, one in 700 of them running a
# statement, measured 470x the program's order): such a schedule counts as none
MAX_COEFFICIENT = 64


def _steepest(sched: isl.Schedule) -> int:
    """The largest coefficient of a loop iterator in any statement's time under ``sched``."""
    steep = 0
    for m in islmem.members(sched.get_map()):
        try:
            pma = isl.PwMultiAff.from_map(m)
        except isl.Error:
            continue
        for d in range(pma.dim(isl.dim_type.out)):
            for _, aff in pma.get_pw_aff(d).get_pieces():
                for k in range(aff.dim(isl.dim_type.in_)):
                    c = aff.get_coefficient_val(isl.dim_type.in_, k)
                    if c.is_int():
                        steep = max(steep, abs(islmem.int_value(c)))
    return steep


# statements of one run of consecutive top-level loop nests that isl schedules together, where it
# gives up on the whole kernel (a long chain of nests through one tensor is one problem to it)
GROUP_STATEMENTS = 32


def _nest_groups(p: PolyProgram) -> list:
    """The statements of ``p`` as runs of consecutive top-level loop nests (the first member of
    each statement's original order numbers its nest), each of at most GROUP_STATEMENTS statements
    unless one nest has more; [] where a statement's nest is not a constant."""
    nests: dict = {}
    for st in p.statements:
        nest = nest_number(st.order)
        if nest is None:
            return []
        nests.setdefault(nest, []).append(st)
    groups, current = [], []
    for k in sorted(nests):
        if current and len(current) + len(nests[k]) > GROUP_STATEMENTS:
            groups.append(current)
            current = []
        current = current + nests[k]
    return groups + [current] if current else groups


def _in_groups(p: PolyProgram, sc: isl.ScheduleConstraints, groups: list, opts: ScheduleOptions, solved: _Solved,
               apart: bool):
    """isl's schedule of each group of statements on its own, the groups in sequence (every
    dependence between two groups runs forwards: the program's order); None where isl gives up
    on a group too."""
    dom, validity = sc.get_domain(), sc.get_validity()
    proximity, coincidence = sc.get_proximity(), sc.get_coincidence()
    out = None
    for group in groups:
        f = p.domains(group)
        part = isl.ScheduleConstraints.on_domain(dom.intersect(f))
        part = part.set_validity(validity.intersect_domain(f).intersect_range(f))
        part = part.set_proximity(proximity.intersect_domain(f).intersect_range(f))
        part = part.set_coincidence(coincidence.intersect_domain(f).intersect_range(f))
        sched, _ = _solve(part, opts, apart, solved.time_left())
        if sched is None:
            return None
        out = sched if out is None else out.sequence(sched)
    return out


def _shape(shaper: Shaper, sched: isl.Schedule) -> isl.Schedule:
    """``sched`` with its bands reordered for the memory walk (and unit-stride loops sunk)."""
    if shaper.opts.tile and shaper.opts.register is not False:
        sched = sched.map_schedule_node_bottom_up(lambda node: blocking.merge_reduction(shaper, node))
    if shaper.opts.interchange:
        sched = sched.map_schedule_node_bottom_up(shaper.reorder)
        if shaper.opts.vectorize:
            sched = shaper.sink(sched.get_root()).get_schedule()
    return sched


def _blocked(p: PolyProgram, opts: ScheduleOptions, deps: isl.UnionMap, sched: isl.Schedule,
             solved: _Solved) -> set:
    """The contraction statements that tiling ``sched`` gives a register block (a trial: the
    tiled schedule and its decisions are dropped).  Its time is not the scheduler's: ``solved``'s
    deadline moves by as much."""
    start = time.monotonic()
    trial = Shaper(p, opts, deps)
    sched.map_schedule_node_bottom_up(trial.tile)
    if solved.deadline is not None:
        solved.deadline += time.monotonic() - start
    return set(trial.blocked)


def _found(p: PolyProgram, opts: ScheduleOptions, deps: isl.UnionMap, sched: isl.Schedule) -> set:
    """The statements that :func:`blocking.find` takes for contractions in a permutable band of
    ``sched`` that holds no other statement (one that does must be ordered before or after the
    reduction loops, which :func:`_blocked` tries)."""
    shaper, found = Shaper(p, opts, deps), set()

    def visit(node):
        if shaper.permutable(node):
            contraction = blocking.find(shaper, node)
            if contraction is not None:
                names = set(contraction["statements"])
                inside = [st.name for st in p.statements_in(node.get_domain())]
                if names >= set(inside):
                    found.update(names)
        return node

    sched.map_schedule_node_bottom_up(visit)
    return found


def _kept_apart(p: PolyProgram, opts: ScheduleOptions, deps: isl.UnionMap, fused: isl.Schedule, apart,
                solved: _Solved):
    """(the schedule with the loop nests kept apart, its Shaper, the decision) where it serves the
    program better than ``fused``, isl's fused schedule as shaped; else None.  ``apart``: isl's
    schedule with each strongly connected component of the dependences in loops of its own, or
    (None, why), computed on demand (a second schedule, worth its time only where one of the
    rules below may hold).

    * Register blocks: where the fused schedule leaves a statement that could be a contraction
      (:func:`blocking.candidates`) without the register block tiling would give it, and the
      nests kept apart give more of the candidates' instances one (a contraction fused with the
      nest that initialises its cells or reads them, whose loops isl then nests around the
      reduction: the reduction loop alone in its band, no block to make);
    * locality: where the fused schedule's statements walk memory with long strides innermost
      (correlation's reduction under the loops of its other statements) and the nests kept
      apart walk it better."""
    built = []

    def other():
        if not built:
            sched, _ = apart()
            if sched is None:
                built.append(None)
            else:
                shaper = Shaper(p, opts, deps)
                built.append((_shape(shaper, sched), shaper))
        return built[0]

    wanted = []
    if opts.tile and opts.register is not False:
        wanted = blocking.candidates(p, 0 if isinstance(opts.register, tuple) else blocking.MIN_BLOCK_WORK)
    # (a band find takes for a contraction is taken to keep its block: the trial tiling, which
    # checks the blocked schedule against the dependences, is made only where one is missing)
    if wanted and not set(wanted) <= _found(p, opts, deps, fused):
        have = _blocked(p, opts, deps, fused, solved)
        if not set(wanted) <= have and other() is not None:
            sched, shaper = other()
            could = _blocked(p, opts, deps, sched, solved)

            def weight(names):
                chosen = [st for st in p.statements if st.name in names]
                return work(p, p.domains(chosen), nominal=True) if chosen else 0

            fused_work, apart_work = weight(have), weight(could)
            if apart_work > fused_work:
                lost = ", ".join(n for n in wanted if n in could and n not in have)
                return sched, shaper, (f"loop nests kept apart: fused, contraction(s) {lost} would have no "
                                       f"register block (blocked instances {apart_work:.3g} apart against "
                                       f"{fused_work:.3g} fused)")
    if strided_innermost(p, fused.get_map()) >= MIN_APART_WORK and other() is not None:
        sched, shaper = other()
        mine, theirs = locality(p, fused.get_map()), locality(p, sched.get_map())
        if theirs > mine:
            return sched, shaper, (f"loop nests kept apart: their innermost loops walk memory better "
                                   f"(locality score {theirs:.3g} against {mine:.3g} fused)")
    return None


def _plan(p: PolyProgram, d: Dependences, opts: ScheduleOptions, solved: dict | None = None,
          cells: Dependences | None = None) -> Plan:
    """One schedule of ``p`` for ``d``; ``cells``: one-cell dependences of the private scalars,
    added to the validity constraints only (see :func:`plan`)."""
    decisions = [f"dependences {a} -> {b} over-approximated (every earlier access of an element): the exact "
                 f"ones have more than {MAX_DEPENDENCE_CONSTRAINTS} constraints in a piece" for a, b in d.simplified]
    dom = p.union("domain")
    deps_all = d.all
    serial = serial_order(p)
    if not serial.is_empty():
        deps_all = deps_all.union(serial)
        decisions.append("`serial` loops kept in order and off the threads")
    validity = deps_all if cells is None else deps_all.union(cells.all)
    sc = isl.ScheduleConstraints.on_domain(dom).set_validity(validity).set_proximity(d.all)
    sc = sc.set_coincidence(deps_all)
    solved = _Solved(opts.timeout) if solved is None else solved

    def solve(apart):
        key = (id(d), id(cells), apart)
        if key not in solved:
            solved[key] = _solve(sc, opts, apart, solved.time_left())
        return solved[key]

    sched, why = solve(not opts.fuse)
    if sched is None:
        groups = _nest_groups(p)
        sched = _in_groups(p, sc, groups, opts, solved, not opts.fuse) if len(groups) > 1 else None
        if sched is None:
            return Plan(None, [f"isl scheduler {why}: original order"])
        decisions.append(f"isl scheduler {why} for the whole kernel: its {len(groups)} runs of consecutive loop "
                         f"nests (at most {GROUP_STATEMENTS} statements each) scheduled one by one, in "
                         "their order")
    decisions.append("isl scheduler: validity = flow+anti+output, proximity = all, coincidence = all")
    shaper = Shaper(p, opts, deps_all)
    sched = _shape(shaper, sched)
    decisions += shaper.take()
    if opts.fuse and len(p.statements) > 1:
        kept = _kept_apart(p, opts, deps_all, sched, lambda: solve(True), solved)
        if kept is not None:
            sched, shaper, why = kept
            decisions.append(why)
            decisions += shaper.take()
    if opts.fuse and len(p.statements) > 1:
        keep = set(blocking.candidates(p, 0 if isinstance(opts.register, tuple) else blocking.MIN_BLOCK_WORK)
                   if opts.tile and opts.register is not False else ())
        sched, fused = fuse.fuse(p, deps_all, sched, keep)
        decisions += fused
    offers_threads = opts.parallel and leading_parallel_work(sched, p) >= opts.min_parallel_work
    if opts.parallel:
        sched, marked = mark_parallel_bands(sched, p, opts.min_parallel_work)
        decisions += marked
    # isl's order must pay for itself: where the program's own loops walk memory better
    # innermost (a triangular solve as dot products rather than column sweeps), keep them,
    # unless isl's order has threads to offer and walks memory tolerably (tiled wavefronts of
    # seidel-2d are fast although their innermost loops stride).
    mine, theirs = locality(p, p.union("order")), locality(p, sched.get_map())
    if mine > theirs and (not offers_threads or theirs < 0):
        decisions.append(f"original order kept: its innermost loops walk memory better "
                         f"(locality score {mine:.3g} against {theirs:.3g} for isl's schedule)")
        return Plan(None, decisions)
    if opts.tile:
        sched = sched.map_schedule_node_bottom_up(shaper.tile)
        decisions += shaper.take()
    return Plan(sched, decisions, shaper.blocks)
