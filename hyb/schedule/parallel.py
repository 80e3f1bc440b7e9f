"""Which loops run on threads: the outermost coincident band of each loop nest of a schedule,
and, in the original order, the outermost loop that carries no dependence and holds enough
work.  :func:`serial_order` keeps ``serial`` loops in order and off the threads."""
from __future__ import annotations

import islpy as isl

from . import islmem
from .counting import extent, work
from .extract import PolyProgram
from .loops import PARALLEL_MARK
from .options import ScheduleOptions

def parallel_marks(sched: isl.Schedule) -> list:
    """The schedule nodes marked parallel (none is inside another)."""
    found = []

    def visit(node):
        if node.get_type() == isl.schedule_node_type.mark and node.mark_get_id().get_name() == PARALLEL_MARK:
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
                out = out.add_map(m)
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


def _launches(band: isl.ScheduleNode) -> int:
    """How many times the loops around ``band`` start it (the bounding box of its prefix schedule)."""
    prefix = band.get_prefix_schedule_union_map().intersect_domain(band.get_domain())
    sets = islmem.members(prefix.range())
    total = 1
    for st in sets[:1]:
        for i in range(st.dim(isl.dim_type.set)):
            total *= max(1, extent(st, i) or 1)
    return max(1, total)


def _parallel_candidate(node: isl.ScheduleNode) -> bool:
    """A band whose first member carries no dependence and makes a loop of its own."""
    return (node.get_type() == isl.schedule_node_type.band and bool(node.band_member_get_coincident(0))
            and not _constant_first_member(node))


def leading_parallel_work(sched: isl.Schedule, p: PolyProgram) -> int:
    """All the statement instances under the first band (in program order) whose first member is
    parallel: how much isl's order has to put on threads, for the choice between isl's order and
    the original one (0 if there is no such band); a run-time size taken as NOMINAL_SIZE."""
    def visit(node):
        if _parallel_candidate(node):
            return work(p, node.get_domain(), nominal=True)
        for i in range(node.n_children()):
            found = visit(node.child(i))
            if found is not None:
                return found
        return None

    return visit(sched.get_root()) or 0


def mark_parallel_bands(sched: isl.Schedule, p: PolyProgram, min_work: int) -> tuple:
    """In each loop nest, mark the outermost band whose first member is coincident; nothing
    below a marked band is marked.  Nests are the subtrees under the top-level sequence or set.
    Returns ``(the schedule, its decisions)``."""
    counts = {"marked": 0, "serial": 0}
    decisions = []
    too_little = []

    def visit(node):
        if _parallel_candidate(node):
            amount = work(p, node.get_domain()) // _launches(node)  # per run of the parallel loop
            if amount < min_work:
                counts["serial"] += 1
                too_little.append(amount)
                return node
            counts["marked"] += 1
            return node.insert_mark(isl.Id(PARALLEL_MARK))
        for i in range(node.n_children()):
            node = visit(node.child(i)).parent()
        return node

    root = visit(sched.get_root())
    for amount in too_little:
        decisions.append(f"parallel loop left serial: about {amount} instances are too little work for threads")
    if counts["marked"]:
        nests = "" if counts["marked"] == 1 else f" in each of {counts['marked']} loop nests"
        decisions.append(f"outermost parallel loop{nests}: marked `parallel` (runs on the thread pool)")
        return root.get_schedule(), tuple(decisions)
    if not counts["serial"]:
        decisions.append("no parallel loop found")
    return sched, tuple(decisions)


def mark_original_parallel(p: PolyProgram, nest, deps: isl.UnionMap, opts: ScheduleOptions) -> tuple:
    """Loops of the original order (``nest``, generated without a schedule) that may run on threads:
    in each loop nest, the outermost loop that carries none of ``deps`` (checked on the loops
    themselves, :func:`verify.violations`) and holds enough work is marked ``parallel``.
    Returns ``(the new nest, its decisions)``; ``nest`` is unchanged."""
    from . import loops
    from . import verify

    if not opts.parallel or opts.original:
        return nest, ()
    deps = deps.union(serial_order(p))
    flags = {}
    check = verify.ParallelCheck(nest, deps)  # (the order and the dependences' times made once)

    def inside(s) -> isl.UnionSet:
        return p.domains(p.by_name[n] for n in {c.stmt for c in loops.calls(s.body)})

    def visit(body, launches):
        for s in body:
            if isinstance(s, loops.If):
                visit(s.then, launches)
                visit(s.orelse, launches)
            if not isinstance(s, loops.For):
                continue
            once = isinstance(s.cond, loops.LOp) and s.cond.op == "le" and s.cond.args[0] == loops.LVar(s.var) \
                and s.cond.args[1] == s.init
            if not once and work(p, inside(s)) // launches >= opts.min_parallel_work:
                trial = {**flags, id(s): {"parallel": True}}
                broken = check.violations(loops.with_flags(nest, trial))
                if broken is not None and broken.is_empty():
                    flags[id(s)] = {"parallel": True}
                    continue
            visit(s.body, launches * max(1, loops.constant_trips(s) or 1))

    visit(nest.body, 1)
    marked = len(flags)
    if not marked:
        return nest, ()
    return loops.with_flags(nest, flags), (f"original order: {marked} loop{'s' if marked > 1 else ''} whose iterations "
                                       "are independent marked `parallel` (runs on the thread pool)",)

def _constant_first_member(band: isl.ScheduleNode) -> bool:
    """Whether the band's first member takes one value for each iteration of the loops around it:
    isl then generates no loop for it, and the first loop below would be a different member."""
    dom = band.get_domain()
    member = isl.UnionMap.from_union_pw_aff(band.band_get_partial_schedule().get_at(0)).intersect_domain(dom)
    prefix = band.get_prefix_schedule_union_map().intersect_domain(dom)
    return prefix.reverse().apply_range(member).is_single_valued()
