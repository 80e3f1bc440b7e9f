"""The GPU's parallel policy: which loops go on the CUDA grid.

On the CPU one band of parallel loops runs on the thread pool; a GPU wants every loop without a
carried dependence on its grid.  The ``schedule=`` option resolved for a GPU
(:meth:`~hyb.schedule.options.ScheduleOptions.resolve`) shapes the schedule for that (no tiling:
the grid's blocks are the tiles; isl's loop order: coincident loops outermost), and
:func:`map_grid_loops` marks more loops than the scheduler's band, each checked on the loops
themselves.  Both are pure: they return new records.
"""
from __future__ import annotations

from . import loops
from . import verify
from .options import ScheduleOptions
from .parallel import serial_order


def _contains_parallel(body) -> bool:
    return any(s.parallel for s in loops.loops(body))


def map_grid_loops(poly, nest: loops.LoopNest, deps, opts: ScheduleOptions) -> tuple:
    """More of the loops on the grid than the scheduler's one parallel band, each checked on the
    loops themselves (:func:`verify.violations`: no dependence carried):

    * a loop beside the parallel one (or at the top level) with no parallel loop inside and no
      scalar local used inside is marked parallel too (its own grid launch);
    * the inner loop of a parallel loop whose body is that one loop is marked too (a 2-D grid).

    Returns ``(the new nest, its decisions)``; ``nest`` is unchanged."""
    if not opts.parallel:
        return nest, ()  # schedule="original" or {"parallel": False}: nothing on the grid
    # `serial` loops stay in order and off the grid, as on the CPU.
    deps = deps.union(serial_order(poly))
    flags: dict = {}
    decisions = []

    def carried_by_none(trial) -> bool:
        broken = verify.violations(loops.with_flags(nest, trial), deps)
        return broken is not None and broken.is_empty()

    def parallel(s) -> bool:
        return flags.get(id(s), {}).get("parallel", s.parallel)

    def contains_parallel(body) -> bool:
        return any(parallel(x) for x in loops.loops(body))

    def visit(block):
        for s in block:
            if isinstance(s, loops.For) and parallel(s):
                if len(s.body) == 1 and isinstance(s.body[0], loops.For):
                    inner = s.body[0]
                    trial = {**flags, id(inner): {"parallel": True}}
                    if carried_by_none(trial):
                        flags[id(inner)] = {"parallel": True}
                        decisions.append(f"GPU: loops `{s.var}` and `{inner.var}` carry no dependence: a 2-D grid")
            elif isinstance(s, loops.For) and contains_parallel(s.body):
                visit(s.body)  # walked by the host: its loops are launched one by one
            elif isinstance(s, loops.If) and (contains_parallel(s.then) or contains_parallel(s.orelse)):
                visit(s.then)
                visit(s.orelse)
            elif isinstance(s, loops.For) and not _uses_scalars(poly, s):
                trial = {**flags, id(s): {"parallel": True}}
                if carried_by_none(trial):
                    flags[id(s)] = {"parallel": True}
                    decisions.append(f"GPU: loop `{s.var}` carries no dependence: a grid of its own")
                    visit([s])

    visit(nest.body)
    if not flags:
        return nest, ()
    return loops.with_flags(nest, flags), tuple(decisions)


def _uses_scalars(poly, s) -> bool:
    names = {c.stmt for c in loops.calls([s])}
    tensors = poly.kernel.tensors
    for st in poly.statements:
        if st.name in names and any(tensors[a.tensor].kind == "scalar" for a in st.writes + st.reads):
            return True
    return False
