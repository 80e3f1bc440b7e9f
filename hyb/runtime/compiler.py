"""The compilation pipeline for one signature, and the compiled kernel it produces.

``compile_kernel`` runs the stages of DESIGN.md §1 in order, each a function from plain
data to plain data; :class:`CompiledKernel` keeps every stage's result so that
``inspect(stage)`` shows exactly what was compiled.
"""
from __future__ import annotations

import ctypes
import os
import warnings

import islpy as isl
import numpy as np

from ..codegen import llvm as cg
from ..dsl import interp
from ..dsl import tir as T
from ..dsl import types as ty
from ..dsl.check import arg_spec
from ..dsl.printer import print_typed
from ..errors import HybridArgumentError, HybridIndexError, HybridTypeError, HybridWarning
from ..schedule import astgen, deps, extract, plan, vector, verify
from ..schedule import loops as L
from . import cache

_RuntimeBlock = ctypes.c_int64 * 4  # error index, axis, error code from threads, thread count

STAGES = ("ast", "isl", "deps", "schedule", "loops", "llvm", "llvm-opt", "asm", "emulate", "grad")


class CompiledKernel:
    """Native code for one kernel and one signature (shapes and dtypes of the arguments).

    Built either by running the whole pipeline, or from a disk-cache entry (then the
    middle-end stages are recomputed only if ``inspect`` asks for them)."""

    def __init__(self, typed: T.TypedKernel, specs: list, options: dict, cached: dict | None = None):
        self.typed = typed
        self.specs = list(specs)
        self.options = dict(options)
        self.name = typed.name
        self._stages: dict = {}
        self._asm = None
        if cached is None:
            found = self.diagnostics()
            gen = cg.generate_ir(self.nest, cg.Options(fastmath=bool(options.get("fastmath"))))
            self._stages["llvm"] = gen.ir
            self.check_sites = gen.sites
            mod = cg.optimize(gen.ir)
            self.llvm_opt = str(mod)
            self._jit = cg.JitFunction(mod, cg.function_name(typed))
            self.cache_entry = {"llvm_opt": self.llvm_opt, "object": self._jit.object_code,
                                "sites": [cache.site_to_json(x) for x in self.check_sites],
                                "warnings": [cache.warning_to_json(w) for w in found]}
        else:
            for w in cached["warnings"]:
                warnings.warn(cache.warning_from_json(w), stacklevel=4)
            self.check_sites = [cache.site_from_json(x) for x in cached["sites"]]
            self.llvm_opt = cached["llvm_opt"]
            self._jit = cg.JitFunction.from_object(self.llvm_opt, cached["object"], cg.function_name(typed))
            self.cache_entry = cached
        self.buffers = cg.buffer_order(typed)
        self._cfunc = ctypes.CFUNCTYPE(ctypes.c_int32, *([ctypes.c_void_p] * len(self.buffers)),
                                       ctypes.POINTER(ctypes.c_int64))(self._jit.address)
        self._written = typed.written
        self.threads = thread_count(options.get("threads"))
        # The argument plan, computed once: what each input is, what to allocate, where outputs are.
        self._kinds = [typed.tensors[n].kind for n in typed.inputs]
        self._in_place = any(n in self._written for n in typed.inputs)
        made = self.buffers[len(typed.inputs):]
        self._made = [(typed.tensors[n].shape, typed.tensors[n].dtype) for n in made]
        self._out_index = [typed.inputs.index(n) if n in typed.inputs else -(made.index(n) + 1)
                           for n in typed.outputs]

    def diagnostics(self) -> list:
        """Emit (and return) the compile-time warnings about the kernel."""
        found = uninitialized_warnings(self.poly, self.deps) + parallel_hint_warnings(self.poly, self.deps)
        for w in found:
            warnings.warn(w, stacklevel=5)
        return found

    # ------------------------------------------------------------ stages, computed on demand
    def _stage(self, name, make):
        if name not in self._stages:
            self._stages[name] = make()
        return self._stages[name]

    @property
    def poly(self) -> extract.PolyProgram:
        return self._stage("poly", lambda: extract.extract(self.typed))

    @property
    def deps(self) -> deps.Dependences:
        return self._stage("deps", lambda: deps.compute(self.poly))

    @property
    def plan(self) -> plan.Plan:
        return self._stage("plan", lambda: plan.plan(self.poly, self.deps, self._schedule_options(),
                                                     lambda: self.cell_deps))

    @property
    def cell_deps(self) -> deps.Dependences:
        """The dependences with each private scalar as the one cell the generated code stores it in."""
        return self._stage("cell_deps", lambda: deps.compute(self.poly, expanded=False))

    @property
    def nest(self) -> L.LoopNest:
        return self._stage("nest", self._make_nest)

    def _make_nest(self) -> L.LoopNest:
        nest = self._checked_nest()
        for loop in verify.unmark_escaping(nest, deps.scalar_flow(self.poly)):
            self.plan.decisions.append(f"loop `{loop.var}` left serial: a scalar written in it is read after it "
                                       "(each thread has its own copy)")
        if self._schedule_options().vectorize:
            marked = vector.mark_vector_loops(self.poly, nest)
            if marked:
                self.plan.decisions.append(
                    "vector loops (LLVM vectorises them before any unrolling): "
                    + ", ".join(f"`{loop.var}`" for loop in marked))
        return nest

    def _checked_nest(self) -> L.LoopNest:
        nest = astgen.generate(self.poly, self.plan.schedule)
        if self.plan.schedule is None:
            plan.mark_original_parallel(self.poly, nest, self.deps.all, self._schedule_options(), self.plan.decisions)
            return nest
        cells = self.cell_deps.all if self.poly.has_private_scalars else None
        broken = verify.violations(nest, self.deps.all, cells)
        if broken is None or broken.is_empty():
            return nest
        # The loops isl generated from the schedule run some dependence the wrong way round
        # (seen with skewed schedules over statements of different depths): use the original order.
        self.plan.decisions.append(f"generated loops broke dependences {broken}; original order used")
        self.plan.schedule = None
        nest = astgen.generate(self.poly, None)
        plan.mark_original_parallel(self.poly, nest, self.deps.all, self._schedule_options(), self.plan.decisions)
        return nest

    def _schedule_options(self) -> plan.ScheduleOptions:
        return plan.parse_options(self.options.get("schedule"))

    @property
    def llvm_ir(self) -> str:
        return self._stage("llvm", lambda: cg.generate_ir(
            self.nest, cg.Options(fastmath=bool(self.options.get("fastmath")))).ir)

    kernel = None  # the Kernel this was compiled for (set by it), for inspect("grad")

    def _grad_text(self) -> str:
        """The gradient kernel's source, headed by the tape it allocates for this signature."""
        if self.kernel is None:
            raise HybridArgumentError("inspect('grad') needs the kernel this was compiled from", None, None)
        args = [np.dtype(s.dtype if s.dtype not in ("int", "float") else
                         ("int64" if s.dtype == "int" else "float64")).type(0) if s.scalar
                else np.zeros(s.shape, dtype=s.dtype) for s in self.specs]
        douts = [np.zeros(self.typed.tensors[n].shape, dtype=self.typed.tensors[n].dtype) for n in self.typed.outputs]
        g = self.kernel.grad()
        derived, _ = g._pick(args + douts)
        tape = g.tape_bytes(*args, *douts)
        lines = [f"# tape: {tape} bytes for this signature"]
        for name, shape, dtype, why in derived.tapes:
            lines.append(f"#   {name}: {why}")
        return "\n".join(lines) + "\n" + derived.source

    def inspect(self, stage: str = "loops") -> str:
        """Text of one pipeline stage: ``"ast"``, ``"isl"``, ``"deps"``, ``"schedule"``, ``"loops"``,
        ``"llvm"``, ``"llvm-opt"``, ``"asm"``, ``"emulate"`` (the interpreter's Python) or ``"grad"``
        (the gradient kernel and the bytes of tape it allocates for this signature)."""
        if stage == "ast":
            return print_typed(self.typed)
        if stage == "isl":
            return extract.describe(self.poly)
        if stage == "deps":
            return self.deps.describe()
        if stage == "schedule":
            self.nest  # noqa: B018 - building the loops may overrule the plan
            return self.plan.describe()
        if stage == "loops":
            return L.fmt_nest(self.nest, self._describe_stmt)
        if stage == "llvm":
            return self.llvm_ir
        if stage == "llvm-opt":
            return self.llvm_opt
        if stage == "asm":
            if self._asm is None:
                self._asm = cg.assembly(cg.llvm.parse_assembly(self.llvm_opt))
            return self._asm
        if stage == "emulate":
            return interp.emulate_source(self.typed)
        if stage == "grad":
            return self._grad_text()
        if stage in ("cuda", "ptx"):  # the same signature compiled for the GPU (needs no GPU)
            from .cuda import CudaCompiledKernel
            return self._stage("cuda-kernel", lambda: CudaCompiledKernel(self.typed, self.specs, self.options)
                               ).inspect(stage)
        raise HybridArgumentError(f"unknown stage {stage!r}", None, "choose one of: " + ", ".join(STAGES))

    def _describe_stmt(self, name: str) -> str:
        st = self.poly.by_name[name]
        span = st.span
        it = ", ".join(st.iters)
        src = span.source_line.strip() if span and span.source_line else ""
        return f"[{it}] {src}  (line {span.line})" if span else f"[{it}]"

    def __repr__(self):
        sig = ", ".join(str(s) for s in self.specs)
        return f"<CompiledKernel {self.name}({sig})>"

    from .html import compiled_kernel_html as _repr_html_  # in a notebook: the stages as tabs

    # ------------------------------------------------------------ running
    def __call__(self, *args):
        arrays = prepare_arrays(self.typed, args)
        specs = [arg_spec(a) for a in arrays]
        if specs != self.specs:
            got = ", ".join(str(s) for s in specs)
            want = ", ".join(str(s) for s in self.specs)
            raise HybridArgumentError(f"kernel `{self.name}` was compiled for ({want}) but called with ({got})",
                                      self.typed.span, "call the Kernel itself: it compiles once per signature")
        return self.run(arrays)

    def run(self, arrays: list):
        """Run on prepared arguments of this kernel's signature."""
        k = self.typed
        written = self._written
        if self._in_place:
            check_in_place(k, arrays, written)
        ptrs = []
        copy_back = []
        for name, kind, a in zip(k.inputs, self._kinds, arrays):
            if kind == "param":
                a = scalar_buffer(k.tensors[name], a)
                self._keep = a
            elif not (a.flags.c_contiguous and a.flags.aligned and a.dtype.isnative):
                work = np.ascontiguousarray(a, dtype=a.dtype.newbyteorder("="))
                if name in written:
                    copy_back.append((a, work))
                a = work
            ptrs.append(a)
        if self._in_place:
            # An array written in place must not be seen through another argument (noalias).
            for i, w in enumerate(k.inputs):
                if w in written:
                    for j, n in enumerate(k.inputs):
                        if j != i and self._kinds[j] != "param" and np.shares_memory(ptrs[j], ptrs[i]):
                            ptrs[j] = ptrs[j].copy()
        try:
            made = [np.zeros(shape, dtype=dtype) for shape, dtype in self._made]
        except (MemoryError, ValueError) as e:
            raise HybridArgumentError(f"kernel `{self.name}`: cannot allocate its outputs and temporaries "
                                      f"({', '.join(f'{d}{list(sh)}' for sh, d in self._made)}): {e}", None,
                                      "use smaller shapes") from None
        err = _RuntimeBlock()
        err[3] = self.threads
        code = self._cfunc(*[b.__array_interface__["data"][0] for b in ptrs],
                           *[b.__array_interface__["data"][0] for b in made], err)
        if code:
            site = self.check_sites[code - 1]
            raise HybridIndexError(
                f"kernel `{self.name}`: index {int(err[0])} is out of bounds for axis {int(err[1])} of "
                f"`{site.tensor}` (shape {site.shape})", site.span,
                "the index was computed at run time; check the values it is read from")
        for orig, work in copy_back:
            orig[...] = work
        outs = [arrays[i] if i >= 0 else made[-i - 1] for i in self._out_index]
        return outs[0] if len(outs) == 1 else tuple(outs)


def uninitialized_warnings(poly, d) -> list:
    out = []
    seen = set()
    for st, access, iteration in deps.uninitialized_reads(poly, d):
        if (st.name, access.tensor) in seen:
            continue
        seen.add((st.name, access.tensor))
        t = poly.kernel.tensors[access.tensor]
        at = ", ".join(f"{k} = {v}" for k, v in iteration.items())
        out.append(HybridWarning(
            f"`{t.source_name}` is read before anything writes it{' (e.g. when ' + at + ')' if at else ''}; "
            "the value read is 0", access.span,
            f"{'output_tensor' if t.kind == 'output' else 'allocate'}(...) starts at zero; write "
            f"`{t.source_name}` first, or read an input instead"))
    return out


def thread_count(option=None) -> int:
    """Threads for parallel loops: the `threads` option, else HYB_NUM_THREADS, else the CPU count."""
    if option is not None:
        return max(1, int(option))
    env = os.environ.get("HYB_NUM_THREADS")
    if env:
        try:
            return max(1, int(env))
        except ValueError:
            warnings.warn(HybridWarning(f"HYB_NUM_THREADS={env!r} is not a number; using the CPU count"))
    return os.cpu_count() or 1


def scalar_buffer(t: T.Tensor, value) -> np.ndarray:
    """A scalar argument as a 0-d array the native code reads through a pointer."""
    try:
        return np.array(value, dtype=ty.concrete(t.dtype))
    except OverflowError:
        raise HybridArgumentError(f"argument `{t.source_name}` = {value!r} does not fit {ty.concrete(t.dtype)}",
                                  t.span, "pass a smaller value, or a NumPy scalar of a wider dtype") from None


def parallel_hint_warnings(poly, d) -> list:
    out = []
    by_name = poly.by_name
    for loop, carried in plan.parallel_hint_conflicts(poly, d.all):
        pair = carried.sample()  # one pair of dependent instances
        src, dst = by_name[pair.get_tuple_name(isl.dim_type.in_)], by_name[pair.get_tuple_name(isl.dim_type.out)]
        point = pair.wrap().sample_point()
        coords = [point.get_coordinate_val(isl.dim_type.set, k).to_python()
                  for k in range(len(src.iters) + len(dst.iters))]
        k = src.iters.index(loop.var)
        a, b = coords[k], coords[len(src.iters) + dst.iters.index(loop.var)]
        out.append(HybridWarning(
            f"loop `{loop.var}` is written `parallel` but its iterations depend on each other: iteration "
            f"{b} needs iteration {a} (line {src.span.line} before line {dst.span.line})", loop.span,
            "it runs in an order that respects the dependence; write `range` to silence this"))
    return out


def check_in_place(k: T.TypedKernel, arrays: list, written=None):
    """Arrays written in place must be writeable and must not share memory with each other."""
    written = k.written if written is None else written
    by_name = dict(zip(k.inputs, arrays))
    names = [n for n in k.inputs if n in written]
    for n in names:
        if not by_name[n].flags.writeable:
            t = k.tensors[n]
            raise HybridArgumentError(f"argument `{t.source_name}` is written in place but is read-only",
                                      t.span, "pass a writeable array, e.g. x.copy()")
    for i, n in enumerate(names):
        for m in names[i + 1:]:
            if np.shares_memory(by_name[n], by_name[m]):
                a, b = k.tensors[n].source_name, k.tensors[m].source_name
                raise HybridArgumentError(f"arguments `{a}` and `{b}` are both written in place and share memory",
                                          k.span, "pass separate arrays, e.g. x and x.copy()")


def prepare_arrays(k_or_params, args) -> list:
    """NumPy arrays (and Python/NumPy scalars) for the call's arguments; a clear error for anything else."""
    out = []
    for pos, a in enumerate(args):
        if isinstance(a, np.ndarray):
            arr = a
        elif isinstance(a, (bool, int, float, np.generic)):
            if isinstance(a, np.generic) and ty.normalize(a.dtype) is None:
                raise HybridArgumentError(f"argument {pos} is a {a.dtype} scalar, which kernels do not support",
                                          None, "pass an int, a float or a NumPy scalar of a real dtype")
            out.append(a)
            continue
        elif isinstance(a, complex):
            raise HybridArgumentError(f"argument {pos} is a complex number, which kernels do not support", None,
                                      "pass an int or a float")
        elif hasattr(a, "__array__") or isinstance(a, (list, tuple)):
            arr = np.asarray(a)
        elif hasattr(a, "asnumpy"):
            arr = a.asnumpy()
        else:
            raise HybridTypeError(f"argument {pos} is a {type(a).__name__}, not an array", None,
                                  "pass NumPy arrays")
        if ty.normalize(arr.dtype) is None:
            raise HybridArgumentError(f"argument {pos} has dtype {arr.dtype}, which kernels do not support", None,
                                      "supported: " + ", ".join(ty.ALL_DTYPES))
        out.append(arr)
    return out
