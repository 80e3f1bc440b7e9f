"""Shape-generic kernels: one compiled function for every shape of a rank and dtype signature.

The checker gives a shape-generic signature's input sizes as :class:`~hyb.dsl.tir.Size` nodes
(``ArgSpec`` sizes ``None``), the middle end keeps them as isl parameters, and the LLVM back end
reads them from the runtime block (``rt[RT_SIZES:]``, :mod:`hyb.codegen.abi`).  What a compile
for one shape decides with the sizes in hand is done here for each new shape, before the native
code first runs on it (:func:`bind`):

* the checker's errors and compile-time assertions, by checking the kernel for that shape;
* the bounds proofs: an access that leaves its tensor for some sizes
  (``PolyProgram.shape_conditions``) raises, for a shape among those, the error a compile for
  that shape raises, with the same text and place;
* the shapes of the outputs and temporaries, evaluated from their size expressions;
* whether the kernel's parallel loops are worth threads (the statement instances each runs per
  start against ``min_parallel_work``).

The result, a :class:`Binding`, holds those per-shape values; the native code is shared.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..dsl import sizes as size_expr
from ..dsl import tir
from ..dsl.signature import ArgSpec
from ..errors import HybridInternalError
from . import aligned

# `import hyb` reads this module (the kernel's options and signatures); islpy and the isl stages are
# imported by the functions that bind compiled code to a shape.
if TYPE_CHECKING:
    import islpy as isl

# the kernel option `shapes=`: when a kernel is compiled for run-time sizes
SHAPE_MODES = ("auto", "generic", "specialise")


# A size at most this, the same in the shapes met so far (a 3x3 filter, 3 colour channels), stays a
# constant in the first shape-generic code of a kernel: loops that short run best unrolled whole.
SMALL_SIZE = 16


def generic_specs(specs: list, first: list | None = None) -> list:
    """The shape-generic signature of concrete ArgSpecs: every size of an array unknown, except,
    given ``first`` (the specs of another shape), the sizes of at most SMALL_SIZE both share."""
    out = []
    for k, s in enumerate(specs):
        if s.scalar or s.value is not None:  # (an array compiled for its items keeps its shape)
            out.append(s)
            continue
        keep = first[k].shape if first is not None else (None,) * len(s.shape)
        out.append(ArgSpec(tuple(d if d is not None and d == e and d <= SMALL_SIZE else None
                                 for d, e in zip(s.shape, keep)),
                           s.dtype))
    return out


def serves(gspecs: tuple, specs: list) -> bool:
    """Whether code for the generic signature ``gspecs`` runs the concrete signature ``specs``."""
    if len(gspecs) != len(specs):
        return False
    for g, s in zip(gspecs, specs):
        if g.scalar or s.scalar or g.value is not None or s.value is not None:
            if g != s:
                return False
        elif g.dtype != s.dtype or len(g.shape) != len(s.shape) or \
                any(d is not None and d != e for d, e in zip(g.shape, s.shape)):
            return False
    return True


def sizes_of(typed: tir.TypedKernel, arrays: list) -> dict:
    """Each run-time size of a shape-generic kernel, read off the call's arrays."""
    out = {}
    for pos, name in enumerate(typed.inputs):
        for axis, d in enumerate(typed.tensors[name].shape):
            if isinstance(d, tir.Size):
                out[d.name] = int(arrays[pos].shape[axis])
    return out


def _at(params: tuple, sizes: dict) -> isl.Set:
    from ..schedule import extract
    return extract.params_set(params, " and ".join(f"{p} = {sizes[p]}" for p in params))


def _instances(text: str, sizes: dict) -> int:
    """An upper bound on the points of the isl (union) set ``text`` at these sizes (the bounding
    box of each of its sets)."""
    import islpy as isl

    from ..schedule import extract, islmem
    from ..schedule.counting import box_size
    sets = islmem.members(isl.UnionSet(text))
    boxes = [box_size(extract.at_sizes(s, sizes)) for s in sets]
    return 1 << 62 if None in boxes else sum(boxes)


@dataclass(frozen=True)
class Binding:
    """A shape-generic kernel's values for one shape: its sizes (in the order the code reads them),
    the shapes of the buffers the runtime makes, the threads to run on, and the check sites with
    their tensors' shapes at these sizes."""

    sizes: tuple
    made_shapes: tuple
    threads: int
    sites: tuple
    allocators: tuple  # np.empty or np.zeros (or their aligned versions, runtime.aligned) for each made buffer


def bind(ck, arrays: list, concrete: tir.TypedKernel) -> Binding:
    """The Binding of shape-generic compiled kernel ``ck`` for the call ``arrays``, whose kernel the
    checker passed for their shapes (``concrete``); raises the errors a compile for these shapes would."""
    from ..schedule import deps as dependences
    with dependences.ISL_LOCK:
        return _bind(ck, arrays, concrete)


def _bind(ck, arrays: list, concrete: tir.TypedKernel) -> Binding:
    import islpy as isl

    from ..schedule import extract
    typed, code = ck.typed, ck.code
    sizes = sizes_of(typed, arrays)
    params = tuple(code.sizes)
    point = _at(params, sizes)
    if code.conditions:
        for text in code.conditions:
            if not isl.Set(text).intersect(point).is_empty():
                extract.extract(concrete)  # raises the error of a compile for these shapes
                raise HybridInternalError("a bounds condition of the shape-generic code holds, but the bounds "
                                          "proof for this shape passes", "runtime")
    made = tuple(tuple(size_expr.value(d, sizes) for d in shape) for shape, _, _ in ck._made)
    unfilled = {n for n, text in code.unfilled_when if not isl.Set(text).intersect(point).is_empty()}
    allocators = tuple(aligned.allocator(n not in unfilled and aligned.zeroes(allocate), shape, dtype)
                       for n, shape, (_, dtype, allocate) in zip(ck.buffers[len(typed.inputs):], made, ck._made))
    threads = ck.threads
    if threads > 1 and code.min_parallel_work and not any(
            _instances(inside, sizes) >= code.min_parallel_work * (max(1, _instances(starts, sizes)) if starts else 1)
            for inside, starts in code.parallel_work):
        threads = 1  # no loop on threads has the work per start to repay them at this shape
    sites = tuple(s.at_sizes(sizes) if hasattr(s, "at_sizes") else s for s in code.sites)
    return Binding(tuple(sizes[p] for p in params), made, threads, sites, allocators)


class BoundKernel:
    """A shape-generic CompiledKernel with the Binding of one shape: what a Kernel keeps for that
    shape.  It runs the shared code with the shape's sizes and reads everything else (``inspect``,
    the records) from the generic kernel."""

    def __init__(self, ck, binding: Binding, specs: list, concrete: tir.TypedKernel):
        self.ck = ck
        self.binding = binding
        self.specs = list(specs)
        self.concrete = concrete  # the kernel checked for this shape (the GPU compiles it)
        self._stages: dict = {}
        self.used = False  # (its own mark, not the shared code's: runtime.variants)

    def run(self, arrays: list):
        return self.ck.run(arrays, self.binding)

    def call_plan(self):
        return self.ck.call_plan(self.binding)

    def __call__(self, *args):
        return self.ck.call_checked(args, self.specs, self.binding)

    def inspect(self, stage: str = "loops") -> str:
        if stage in ("cuda", "ptx") and self.ck.kernel is not None:  # CUDA code is made for one shape
            if "cuda-kernel" not in self._stages:
                self._stages["cuda-kernel"] = self.ck.kernel.compile_typed(self.concrete, self.specs, "cuda")
            return self._stages["cuda-kernel"].inspect(stage)
        if stage == "grad":  # the tape of this shape
            return self.ck.grad_text(self.specs, self.concrete)
        text = self.ck.inspect(stage)
        if stage == "timings":  # the shared code's compile (perhaps for another shape), then this shape's
            own = vars(self).get("timings")  # (the Kernel that bound it measured the binding)
            sig = ", ".join(str(s) for s in self.specs)
            head = f"this shape ({sig}): the shape-generic code above, bound to it"
            text = "shape-generic code, compiled once for every shape of its ranks and dtypes:\n" + text
            text += own.describe(head) if own is not None else head + " (not timed)\n"
        if stage == "schedule":
            sizes = ", ".join(f"{p} = {v}" for p, v in zip(self.ck.code.sizes, self.binding.sizes))
            typed = self.ck.typed
            kept = [f"{typed.tensors[n].source_name}.shape[{axis}] = {d}" for n in typed.inputs
                    for axis, d in enumerate(typed.tensors[n].shape) if isinstance(d, int)]
            text += ("shapes: shape-generic code (one compile for every shape of its ranks and dtypes"
                     + (f"; small sizes kept constant: {', '.join(kept)}" if kept else "")
                     + f"), run here with {sizes}\n")
        return text

    def __getattr__(self, name):
        return getattr(self.ck, name)

    def __repr__(self):
        return f"<CompiledKernel {self.ck.name}({', '.join(str(s) for s in self.specs)}), shape-generic code>"
