"""Compiling one signature, as a sequence of pure stages.

Each stage is a function from immutable records to a new immutable record::

    typed kernel (dsl.check)
      -> extract       schedule.extract.extract        PolyProgram
      -> dependences   schedule.deps.compute            Dependences (and the one-cell ones)
      -> plan          schedule.plan.plan               Plan: a schedule tree and its decisions
      -> loop nest     loop_nest                        LoopNest, checked against the dependences
                                                        (the original order where it breaks one)
      -> marks         mark_escaping, vector marks,     a new LoopNest each, plus decisions
                       the GPU's grid loops
      -> contraction   schedule.contract.contract       temporaries used within one iteration held in
                                                        scalars (no buffer), checked on the loops
      -> legalise      codegen.legalise.legalise        the LoopNest in primitive operations, which
                                                        every back end renders (MiddleEnd.code)
      -> code          generate_code                    NativeCode (LLVM IR, object code, check sites)

:func:`middle_end` runs the polyhedral stages and returns them all in a :class:`MiddleEnd`;
the compiled kernel keeps that record and ``inspect()`` reads it.
"""
from __future__ import annotations

import os
import sys
import warnings
from dataclasses import dataclass, field

import islpy as isl

from ..codegen import abi, jit
from ..codegen.legalise import legalise
from ..codegen import llvm as llvm_codegen
from ..dsl import sizes as size_expr
from ..dsl import tir, types
from ..errors import HybridFloat64Warning, HybridWarning
from ..schedule import astgen, contract, deps, extract, gpu, islmem, promote, rewrites, vector, verify
from ..schedule import loops
from ..schedule import plan as planning
from ..schedule.options import ScheduleOptions
from .options import KernelOptions
from .timings import Clock, Timings
from ..schedule.parallel import mark_original_parallel, parallel_hint_conflicts


@dataclass(frozen=True)
class MiddleEnd:
    """The records of the polyhedral stages for one signature."""

    poly: extract.PolyProgram
    deps: deps.Dependences
    cell_deps: deps.Dependences | None  # private scalars as the one cell the code keeps (None: no scalars)
    planned: planning.Plan  # as the plan stage made it
    nest: loops.LoopNest  # the loops the code follows, after the marks
    # the plan those loops follow (its tree and blocks), with every decision taken on the way by
    # the plan and the loop stages (inspect("schedule"))
    followed: planning.Plan
    warnings: tuple  # HybridWarnings about the kernel
    code: loops.LoopNest  # ``nest`` legalised: the loops and primitive operations every back end renders
    # outputs and temporaries whose initial zeros are never seen (no zero fill; the CPU's runtime
    # reads it): name -> None, or the isl set of the sizes at which that holds (deps.written_before_read)
    written_first: dict = field(default_factory=dict)
    timings: Timings = field(default_factory=Timings)  # how long each of these stages took (runtime.timings)
    # what each typed-kernel rewrite applied and refused, or why it did not run (inspect("rewrites"))
    rewrites: rewrites.Report = field(default_factory=rewrites.Report)


@dataclass(frozen=True)
class NativeCode:
    """The code stage's record: what the disk cache keeps and the runtime loads."""

    llvm_opt: str  # optimised LLVM IR
    object: bytes  # the object file LLVM made from it (loaded by MCJIT)
    sites: tuple  # run-time bounds-check sites, by error code - 1
    warnings: tuple  # the compile-time warnings, given again when the code is loaded from the cache
    buffers: tuple  # the tensors the function takes, in order (a contracted temporary takes none)
    llvm_ir: str | None = None  # unoptimised IR (not kept in the disk cache)
    tuned: object = None  # the schedule= option schedule="tune" chose (what the user would write)
    unfilled: tuple = ()  # the buffers the runtime allocates without filling them with zeros
    # a shape-generic kernel's run-time sizes (rt[abi.RT_SIZES:], tir.size_symbols); what the runtime tests for
    # each new shape: the size values for which an access leaves its tensor (isl set texts), and for
    # each loop run on threads the statement instances it runs and its launches (isl set texts, the
    # times of parallel_work), weighed against min_parallel_work (0: no loop on threads)
    sizes: tuple = ()
    conditions: tuple = ()
    parallel_work: tuple = ()
    min_parallel_work: int = 0
    unfilled_when: tuple = ()  # (buffer, isl set text of the sizes at which it needs no zeros)
    # the temporaries as the code has them, (name, shape, dtype) each, a size expression in a shape
    # as its text (dsl.sizes): a middle-end stage may have added one (schedule.transpose's tiles)
    # or reshaped one (schedule.privatise's copies) of the checker's typed kernel
    staged: tuple = ()


def diagnose(poly: extract.PolyProgram, d: deps.Dependences) -> tuple:
    """The compile-time warnings about a kernel: reads of cells nothing wrote, and ``parallel``
    hints on loops whose iterations depend on each other."""
    return tuple(uninitialized_warnings(poly, d) + parallel_hint_warnings(poly, d)
                 + half_accumulator_warnings(poly.kernel) + float64_warnings(poly.kernel))


def float64_warnings(k: tir.TypedKernel) -> list:
    """One warning for a kernel whose arrays hold float32 (or narrower floats) and no float64, but
    which computes in float64 where values not written as float64 meet (the checker's
    ``float64_sites``): the first place, and how many more."""
    arrays = {types.concrete(t.dtype) for t in k.tensors.values() if t.kind not in ("scalar", "param")}
    narrow = sorted(arrays & {"float32", "float16", "bfloat16"})
    if not k.float64_sites or not narrow or "float64" in arrays:
        return []
    span, why, argument = k.float64_sites[0]
    more = len(k.float64_sites) - 1
    hint = (f"pass `{argument}` as a Python float or a numpy.float32, or cast it: `float32({argument})`"
            if argument is not None else "cast a value to float32 (`float32(x)`) to stay in float32")
    return [HybridFloat64Warning(
        f"this computes in float64 ({why}) beside {' and '.join(narrow)} arrays"
        + (f"; {more} more place{'s' if more > 1 else ''} like it" if more else ""), span,
        hint + "; where float64 is meant, write `float64(...)`, which gives no warning")]


# loops at least this long that add into a float16 or bfloat16 scalar get a warning (float16 stops
# counting at 2048: 2048 + 1 rounds back to 2048; bfloat16 at 256)
HALF_ACCUMULATION_TRIPS = 256


def half_accumulator_warnings(k: tir.TypedKernel) -> list:
    """A float16 or bfloat16 scalar that loops add into (`s += x[i]`) over at least
    HALF_ACCUMULATION_TRIPS iterations in all, or a number not known now: the sum stalls once its
    terms fall below half a unit of its last place."""
    out, seen = [], set()

    def trips(s: tir.Loop):
        if isinstance(s.start, tir.Const) and isinstance(s.stop, tir.Const):
            return len(range(int(s.start.value), int(s.stop.value), s.step))
        return None

    def walk(body, around):
        for s in body:
            if isinstance(s, tir.Loop):
                walk(s.body, around + [s])
            elif isinstance(s, tir.If):
                walk(s.body, around)
                walk(s.orelse, around)
            elif isinstance(s, tir.Store) and not s.indices and s.tensor not in seen:
                t = k.tensors[s.tensor]
                dt = types.concrete(t.dtype)
                if (t.kind != "scalar" or dt not in types.HALVES or not isinstance(s.value, tir.Bin)
                        or s.value.op not in ("+", "-")
                        or not any(isinstance(x, tir.Load) and x.tensor == s.tensor and not x.indices
                                   for x in (s.value.a, s.value.b))):
                    continue
                n = 1  # the iterations the scalar lives through (loops inside its declaration's)
                for loop in around:
                    if loop.var not in t.private_to:
                        m = trips(loop)
                        n = None if n is None or m is None else n * m
                if around and (n is None or n >= HALF_ACCUMULATION_TRIPS):
                    seen.add(s.tensor)
                    how_long = "over loops whose length is not known now" if n is None else f"{n} terms"
                    out.append(HybridWarning(
                        f"`{t.source_name}` adds up {how_long} in {dt}: once it is large, each small term rounds "
                        f"away (a {dt} count stops at {2048 if dt == 'float16' else 256})", s.span,
                        f"accumulate in float32 (`{t.source_name} = float32(0)`) and convert once at the end"))

    walk(k.body, [])
    return out


def loop_nest(poly, d: deps.Dependences, cell_deps, planned: planning.Plan, opts: ScheduleOptions,
              check: bool = True) -> tuple:
    """The loops of a plan, checked against the dependences on the loops themselves
    (:func:`verify.violations`).  Returns ``(nest, plan followed)``: where isl's loops run some
    dependence the wrong way round (seen with skewed schedules over statements of different
    depths), or where the check cannot read them, the plan followed is the original order, with
    that decision added.  ``check=False``: the plan's loops unchecked (the caller checks them)."""
    nest = astgen.generate(poly, planned.tree)
    if planned.tree is not None:
        if not check:
            return nest, planned
        broken = _broken(poly, d, cell_deps, nest)
        if broken is not None and broken.is_empty():
            return nest, planned
        why = (f"generated loops broke dependences {broken}" if broken is not None else
               "generated loops could not be checked against the dependences (a bound the check does not model)")
        planned = planning.Plan(None, planned.decisions + (f"{why}; original order used",))
        nest = astgen.generate(poly, None)
    nest, decisions = mark_original_parallel(poly, nest, d.all, opts)
    return nest, planned if not decisions else planning.Plan(None, planned.decisions + decisions)


def _broken(poly, d: deps.Dependences, cell_deps, nest: loops.LoopNest):
    """The dependences of the kernel (its one-cell ones too, where it has private scalars) that the
    loops of ``nest`` break (:func:`verify.violations`, at the sizes the code runs at)."""
    return verify.violations(nest, d.all, cell_deps.all if poly.has_private_scalars else None, poly.context())


def mark_escaping(poly, nest: loops.LoopNest, budget: int = 0, exact: bool = True) -> tuple:
    """Parallel loops out of which a scalar local's value flows are left serial: ``(nest, decisions)``."""
    nest, serial = verify.unmark_escaping(nest, deps.scalar_flow(poly, budget, exact))
    return nest, tuple(f"loop `{var}` left serial: a scalar written in it is read after it "
                       "(each thread has its own copy)" for var in serial)


def mark_vectors(poly, nest: loops.LoopNest, opts: ScheduleOptions) -> tuple:
    """The loops LLVM's vectoriser should get whole: ``(nest, decisions)``."""
    if not opts.vectorize:
        return nest, ()
    nest, marked = vector.mark_vector_loops(poly, nest)
    if not marked:
        return nest, ()
    return nest, ("vector loops (LLVM vectorises them before any unrolling): "
                  + ", ".join(f"`{var}`" for var in marked),)


def promote_blocks(poly, d: deps.Dependences, cell_deps, nest: loops.LoopNest, check: bool = True) -> tuple:
    """The register blocks the plan marked, kept in registers across their reduction loops
    (schedule.promote), checked on the loops again: ``(nest, decisions)``, the nest unchanged
    where the check fails.  ``check=False``: unchecked (the caller checks the loops)."""
    promoted, decisions = promote.promote(poly, nest)
    if not decisions or not check:
        return (promoted if decisions else nest), decisions
    broken = _broken(poly, d, cell_deps, promoted)
    if broken is None or not broken.is_empty():
        why = f"broke dependences {broken}" if broken is not None else "could not be checked"
        return nest, (f"register blocks not kept in registers: the rewritten loops {why}",)
    return promoted, decisions


def middle_end(typed: tir.TypedKernel, options: KernelOptions, target, size_hint: dict | None = None) -> MiddleEnd:
    """Every polyhedral stage of one signature, from the typed kernel to the marked loop nest, and
    that nest legalised for the back ends (``code``); one thread at a time (isl's context is shared:
    :data:`~hyb.schedule.deps.ISL_LOCK`).  ``size_hint``: for shape-generic code, the sizes of the
    shape that compiles it (its register blocks are sized for them).  ``MiddleEnd.timings``: how
    long each stage took (and the wait for another thread's compile, if there was one)."""
    clock = Clock()
    with clock.holding(deps.ISL_LOCK, "waiting for another compile (isl)"):
        return _middle_end(typed, KernelOptions.of(options), target, size_hint, clock)


def _middle_end(typed: tir.TypedKernel, options: KernelOptions, target, size_hint, clock: Clock) -> MiddleEnd:
    # the plan follows the target's policy; the loop stages after it read the CPU's reading of the
    # option on both targets
    plan_opts = options.schedule_for(target)
    loop_opts = options.schedule.for_loop_stages(target, options.fastmath)
    cpu = target.kind == "cpu"
    # the typed-kernel rewrites (schedule.rewrites.REWRITES, in their order), each under its gate
    typed, report = rewrites.run(typed, target, plan_opts, clock.stage)
    rewritten = report.decisions()
    with clock.stage("extract"):
        poly = extract.extract(typed, size_hint)
    # code for every size is worth making only with exact dependences: over-approximated ones keep
    # the original order, which code for each shape, whose analysis is cheaper, may not need; and
    # it is worth only a share of the analysis a shape's code may take (isl's sets over sizes cost
    # more per operation, and a compile for each shape is the way out)
    generic = bool(tir.size_symbols(typed))
    budget = deps.budget_for(poly, plan_opts.analysis_operations)
    if generic and budget:
        budget = max(1, budget // GENERIC_ANALYSIS_SHARE)
    with clock.stage("dependences"):
        d = _dependences(poly, budget, generic)
    cells = None
    if poly.has_private_scalars:
        with clock.stage("one-cell dependences"):
            cells = _dependences(poly, budget, generic, expanded=False, exact=d.exact)
    if d.exact and (cells is None or cells.exact):
        with clock.stage("plan"):
            planned = planning.plan(poly, d, plan_opts, cells)
    else:
        planned = planning.Plan(None, ((f"dependence analysis stopped at its budget of {budget:,} isl operations "
                                        "(schedule={'analysis_operations': ...} changes it): dependences "
                                        "over-approximated, original order"),))
    nest, followed, more = loops_and_rewrites(poly, d, cells, planned, loop_opts, budget, cpu, clock)
    decisions = rewritten + more
    if target.kind == "cuda":
        with clock.stage("GPU grid loops"):
            nest, more = gpu.map_grid_loops(poly, nest, d.all, plan_opts)
        decisions += more
        with clock.stage("contraction"):
            nest, more = contract.contract(poly, d, cells, nest, loop_opts.fuse, budget)
        decisions += more
    with clock.stage("warnings"):
        found = diagnose(poly, d)
    with clock.stage("legalise"):
        code = legalise(nest, options.fastmath and cpu, plan_opts.reassociate)
    written_first = {}
    if cpu:
        with clock.stage("zero fills"):
            written_first = deps.written_before_read(poly, d)
    return MiddleEnd(poly, d, cells, planned, nest, planning.Plan(followed.tree, decisions, followed.blocks), found,
                     code, written_first, clock.record(), report)


def loops_and_rewrites(poly, d: deps.Dependences, cells, planned: planning.Plan, opts: ScheduleOptions,
                       budget: int, cpu: bool, clock: Clock) -> tuple:
    """The loops of a plan with their marks and, on the CPU, their rewrites (temporaries contracted,
    register blocks): ``(nest, plan followed, decisions)``.  Where the plan has register blocks, the
    loops are checked against the dependences once, as finally rewritten (the marks and rewrites
    keep the order of the loops they are given, or check what they change); only where that check
    fails are they made again with a check after each stage that may break one (the plan's loops,
    then the register blocks), which then decides what is kept."""
    once = cpu and planned.tree is not None and bool(planned.blocks) and opts.register is not False
    made = _rewritten(poly, d, cells, planned, opts, budget, cpu, clock, check=not once)
    if not once:
        return made
    with clock.stage("loop checks"):
        broken = _broken(poly, d, cells, made[0])
    if broken is not None and broken.is_empty():
        return made
    return _rewritten(poly, d, cells, planned, opts, budget, cpu, clock, check=True)


def _rewritten(poly, d, cells, planned, opts, budget, cpu, clock, check: bool) -> tuple:
    with clock.stage("loop nest"):
        nest, followed = loop_nest(poly, d, cells, planned, opts, check)
    decisions = tuple(followed.decisions)
    with clock.stage("marks"):
        nest, more = mark_escaping(poly, nest, budget, d.exact)
        decisions += more
        nest, more = mark_vectors(poly, nest, opts)
        decisions += more
    if cpu:  # temporaries held in scalars (on the GPU: once its grid loops are marked)
        with clock.stage("contraction"):
            nest, more = contract.contract(poly, d, cells, nest, opts.fuse, budget)
        decisions += more
    if cpu and opts.register is not False:
        with clock.stage("register blocks"):
            nest, more = promote_blocks(poly, d, cells, nest, check)
        decisions += more
    return nest, followed, decisions


# the share of the analysis budget (``analysis_operations``) a shape-generic compile gets: 1 / this
GENERIC_ANALYSIS_SHARE = 4


def _dependences(poly, budget: int, generic: bool, **how) -> deps.Dependences:
    """:func:`deps.compute` of ``poly``; for shape-generic code (``generic``) exact ones only,
    the compile refused (``tir.NotGeneric``) where their analysis goes past ``budget``."""
    d = deps.compute(poly, budget=budget, over_approximate=not generic, **how)
    if d is None:
        raise tir.NotGeneric(f"the dependence analysis for all sizes went past its budget of {budget:,} isl "
                             "operations (code for each shape is analysed at its sizes)")
    return d


def llvm_options(options: KernelOptions, target) -> llvm_codegen.Options:
    """The LLVM back end's options for a kernel's options: fast-math, and the code-generation
    parts of ``schedule=`` resolved for the target (vector math functions, reassociated sums)."""
    opts = options.schedule_for(target)
    return llvm_codegen.Options(fastmath=options.fastmath, target=target,
                                vector_math=opts.vector_math, reassociate=opts.reassociate)


def generate_code(nest: loops.LoopNest, options: KernelOptions, target) -> tuple:
    """LLVM IR of a legalised nest (``MiddleEnd.code``), optimised and compiled:
    ``(NativeCode, the loaded JitFunction, Timings of these three steps)``."""
    clock = Clock()
    with clock.stage("LLVM IR"):
        generated = llvm_codegen.generate_ir(nest, llvm_options(KernelOptions.of(options), target))
    with jit.private_context() as scratch:
        with clock.stage("LLVM optimisation"):
            module = jit.optimize(generated.ir, scratch)
            llvm_opt = str(module)
        with clock.stage("machine code"):  # (the object file, loaded as a disk cache entry would be)
            obj = jit.object_code(module)
            loaded = jit.JitFunction(obj, abi.function_name(nest.kernel))
    buffers = tuple(abi.buffer_order(nest.kernel))
    staged = tuple((n, tuple(size_expr.text(d) for d in nest.kernel.tensors[n].shape), nest.kernel.tensors[n].dtype)
                   for n in buffers if nest.kernel.tensors[n].kind == "temp")
    return NativeCode(llvm_opt, obj, tuple(generated.sites), (), buffers,
                      generated.ir, sizes=tuple(tir.size_symbols(nest.kernel)), staged=staged), loaded, clock.record()


def shape_checks(middle: MiddleEnd, options: KernelOptions, target) -> dict:
    """A shape-generic kernel's ``NativeCode`` fields the runtime reads for each new shape: the
    conditions of its bounds proofs and what decides whether its parallel loops get threads."""
    poly = middle.poly
    if not poly.params:
        return {}
    with deps.ISL_LOCK:
        work = parallel_work(middle.nest, poly)
    loop_opts = options.schedule.for_loop_stages(target, options.fastmath)
    return {"conditions": tuple(str(c) for c, _ in poly.shape_conditions), "parallel_work": work,
            "min_parallel_work": loop_opts.min_parallel_work if work else 0,
            "unfilled_when": tuple((n, str(s)) for n, s in middle.written_first.items() if s is not None)}


def parallel_work(nest: loops.LoopNest, poly) -> tuple:
    """For each loop of ``nest`` run on threads, ``(the statement instances it runs, the runs of the
    loop)`` as isl set texts over the sizes: the domains of the statements it calls, and the
    iterations of the loops around it ("" where there are none: it runs once).  Both are bounds
    (a statement may have instances in other loops too); the whole domain, run once, where the
    loops cannot be read."""
    if not any(s.parallel for s in loops.loops(nest.body)):
        return ()
    runs = verify.parallel_runs(nest)
    if runs is None:
        return ((str(poly.union("domain")), ""),)
    out = []
    by_name = poly.by_name
    for names, counters, conds in runs:
        inside = poly.domains(by_name[n] for n in names if n in by_name)
        starts = "" if not counters else str(isl.Set(extract.with_params(poly.params, "{ [%s] : %s }" % (
            ", ".join(counters), " and ".join(f"({c})" for c in conds) or "true"))).coalesce())
        out.append((str(inside), starts))
    return tuple(out)


_HYB_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep


def emit_warnings(found) -> None:
    """Give the warnings ``found``, each from the first caller outside hyb (the user's call)."""
    level, frame = 1, sys._getframe(1)
    while frame is not None and frame.f_code.co_filename.startswith(_HYB_DIR):
        frame, level = frame.f_back, level + 1
    for w in found:
        warnings.warn(w, stacklevel=level + 1)


def uninitialized_warnings(poly, d) -> list:
    out = []
    seen = set()
    for st, access, iteration in deps.uninitialized_reads(poly, d):
        if (st.name, access.tensor) in seen:
            continue
        seen.add((st.name, access.tensor))
        t = poly.kernel.tensors[access.tensor]
        names = poly.kernel.var_names
        at = ", ".join(f"{names.get(k, k)} = {v}" for k, v in iteration.items())
        out.append(HybridWarning(
            f"`{t.source_name}` is read before anything writes it{' (e.g. when ' + at + ')' if at else ''}; "
            "the value read is 0", access.span,
            f"{'output_tensor' if t.kind == 'output' else 'allocate'}(...) starts at zero; write "
            f"`{t.source_name}` first, or read an input instead"))
    return out


def parallel_hint_warnings(poly, d) -> list:
    out = []
    by_name = poly.by_name
    for loop, carried in parallel_hint_conflicts(poly, d.all):
        pair = carried.sample()  # one pair of dependent instances
        src, dst = by_name[pair.get_tuple_name(isl.dim_type.in_)], by_name[pair.get_tuple_name(isl.dim_type.out)]
        point = pair.wrap().sample_point()
        coords = [islmem.int_value(point.get_coordinate_val(isl.dim_type.set, k))
                  for k in range(len(src.iters) + len(dst.iters))]
        k = src.iters.index(loop.var)
        a, b = coords[k], coords[len(src.iters) + dst.iters.index(loop.var)]
        out.append(HybridWarning(
            f"loop `{poly.kernel.var_names.get(loop.var, loop.var)}` is written `parallel` but its iterations "
            "depend on each other: iteration "
            f"{b} needs iteration {a} (line {src.span.line} before line {dst.span.line})", loop.span,
            "it runs in an order that respects the dependence; write `range` to silence this"))
    return out
