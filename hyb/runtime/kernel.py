"""User-facing kernel objects: :class:`Kernel`, :class:`HybModule`, ``hybrid``, ``load``.

A :class:`Kernel` is a parsed (not yet typed) kernel.  Calling it checks and compiles it
for the signature of the call (shapes and dtypes of the arguments), caches the
:class:`~hyb.runtime.compiler.CompiledKernel` in memory, and runs it.
"""
from __future__ import annotations


import difflib
import inspect
import threading
import warnings
from typing import TYPE_CHECKING

import numpy as np

# `import hyb` imports this module: the parser (lark), the checker, the compiler (islpy, llvmlite) and
# autodiff are imported by the functions that use them, so a program loads each when it first
# parses, checks or compiles a kernel.
from ..dsl import ast as syntax
from ..dsl import deep
from ..dsl import types
from ..dsl.signature import NeedsValue, arg_specs
from ..dsl import tir
from ..errors import HybridArgumentError, HybridError, HybridUnsupportedError, HybridWarning
from . import fastcall, variants
from .arguments import check_fits, check_in_place, check_written_are_arrays, prepare_arrays
from .options import TARGETS, KernelOptions
from ..target import thread_count
from .generic import BoundKernel, bind, generic_specs, serves, sizes_of
from .timings import Clock

if TYPE_CHECKING:
    from .compiler import CompiledKernel

# isl operations a shape-generic compile may take between two analyses that keep their own limits
# (sets with sizes as parameters can cost far more than the same sets for one shape); past them the
# kernel is compiled for each shape
GENERIC_OPERATIONS = 1_000_000
_default_target = ["cpu"]  # the back end of kernels made without target=


def _levels(kernel) -> int:
    """How deeply the records a kernel's work recurses through nest: its module's (and its forward
    kernel's, for a gradient), which :func:`hyb.dsl.deep.call` makes room for."""
    return max(deep.depth(k.module) for k in (kernel, getattr(kernel, "forward", None)) if hasattr(k, "module"))


_roomy = deep.method(_levels)  # (a chain of thousands of terms needs a deep stack in every stage)


def set_default_target(target: str) -> None:
    """The back end of kernels made without ``target=``: ``"cpu"`` or ``"cuda"``.  The operator
    layer sets it from ``hyb.set_context(device_target=...)``; the runtime reads no global context."""
    if target not in TARGETS:
        raise HybridArgumentError(f"unknown target {target!r}", None, "use \"cpu\" or \"cuda\"")
    _default_target[0] = target


class Kernel:
    """A hybrid kernel, compiled on first call for each signature."""

    def __init__(self, kdef: syntax.KernelDef, module: syntax.Module, **options):
        self.kdef = kdef
        self.module = module
        self.name = kdef.name
        self.options = KernelOptions.parse(options)
        self._cache: dict = {}
        self._fast: dict = {}  # (shape, dtype number) of each argument -> CompiledKernel, for warm calls
        self._plans: dict = {}  # the same keys -> the dispatcher's entry (fastcall.entry of its call_plan())
        self._lock = threading.Lock()
        self._grads: dict = {}
        # shape-generic compiles by generic signature (a CompiledKernel, or why there is none), and
        # the first shape met of each family of signatures (ranks and dtypes)
        self._generic: dict = {}
        self._generic_seen: dict = {}
        # positions of the scalar parameters the kernel is specialised on (used as shapes or steps),
        # learned from the checker the first time one is met
        self._value_params: frozenset = frozenset()
        self.__doc__ = kdef.docstring

    @property
    def params(self) -> list:
        return [p.name for p in self.kdef.params]

    @property
    def source(self) -> str:
        """The kernel's text as the user wrote it."""
        lines = self.module.lines
        return "\n".join(lines[self.kdef.first_line - 1:self.kdef.last_line]) + "\n"

    def __repr__(self):
        return f"<hyb.Kernel {self.name}({', '.join(self.params)})>"

    from .html import kernel_html as _repr_html_  # in a notebook: the source and compiled signatures

    def bind(self, args: tuple, kwargs: dict) -> tuple:
        """The arguments in parameter order, keyword arguments bound by name as in a Python call."""
        if not kwargs:
            return args
        return bind_arguments(self.name, self.params, args, kwargs)

    @_roomy
    def typed(self, *args, **kwargs):
        """The typed kernel IR for the signature of ``args`` (checks without compiling)."""
        arrays = prepare_arrays(self, self.bind(args, kwargs))
        return self._checked(arrays)[0]

    def _checked(self, arrays) -> tuple:
        """``(typed kernel, specs)`` of a call's arguments.  A scalar parameter the kernel needs as a
        compile-time integer (a shape of `output_tensor`, a loop step) is specialised on its value:
        its value joins the signature, so each value compiles once."""
        from ..dsl.check import check_kernel
        while True:
            specs = arg_specs(arrays, self._value_params)
            try:
                return check_kernel(self.kdef, self.module, specs), specs
            except NeedsValue as e:
                k = self.params.index(e.param) if e.param in self.params else None
                if k is None or k in self._value_params:
                    raise
                self._value_params = self._value_params | {k}

    def compile(self, *args, target: str | None = None, **kwargs) -> CompiledKernel:
        """The :class:`CompiledKernel` for the signature of ``args``, compiled if not cached."""
        arrays = prepare_arrays(self, self.bind(args, kwargs))
        return self._compiled(arrays, target)

    @property
    def target(self) -> str:
        """``"cpu"`` or ``"cuda"``: the kernel's ``target=`` option, else the default back end
        (:func:`set_default_target`; ``hyb.set_context(device_target="GPU")`` sets ``"cuda"``)."""
        if self.options.target is not None:
            return self.options.target
        return _default_target[0]

    @_roomy
    def _compiled(self, arrays, target=None) -> CompiledKernel:
        target = target or self.target
        if target not in TARGETS:
            raise HybridArgumentError(f"unknown target {target!r}", None, "use \"cpu\" or \"cuda\"")
        specs = arg_specs(arrays, self._value_params)
        key = (tuple(specs), target)
        ck = self._cache.get(key)
        if ck is not None:
            ck.used = True  # (a warm call's entry marks itself: runtime.variants)
        else:
            with self._lock:
                clock = Clock()
                with clock.stage("check"):
                    typed, specs = self._checked(arrays)
                key = (tuple(specs), target)
                ck = self._cache.get(key)
                if ck is None:
                    started = clock.now()
                    ck = self._for_shape(typed, specs, target, arrays)
                    clock.include(ck.timings)  # (the check ran first)
                    if not isinstance(ck, BoundKernel):  # (shape-generic code shows its compile apart)
                        clock.add("other (set-up, imports)", clock.now() - started - ck.timings.total)
                    ck.timings = clock.record()
                    self._keep(key, ck)
        return ck

    def _keep(self, key, ck):
        """``ck`` kept for signature ``key``, one signature dropped if the kernel then holds more than
        its ``max_variants`` (:func:`hyb.runtime.variants.trim`)."""
        self._cache[key] = ck
        variants.trim(self._cache, self._fast, self._plans, variants.max_variants(self.options.max_variants), key)
        return ck

    def _for_shape(self, typed, specs: list, target: str, arrays):
        """The compiled kernel for a signature met for the first time.  With ``shapes="auto"`` the
        first shape of a rank and dtype signature gets code for that shape; a second shape compiles
        the shape-generic code, which then serves every shape of the signature (bound to each one
        by :func:`hyb.runtime.generic.bind`).  ``shapes="generic"`` starts with it, ``"specialise"``
        never makes it.  A kernel the generic compile refuses is compiled for each shape."""
        from .compiler import CompiledKernel
        mode = self.options.shapes
        if (target == "cpu" and mode != "specialise" and self.options.schedule.mode != "tune"
                and any(not s.scalar and s.shape for s in specs)):
            family = tuple(generic_specs(specs))
            g = next((v for k, v in self._generic.items() if serves(k, specs)), None)
            tried = Clock()  # a shape-generic compile made for this shape
            if g is None and (mode == "generic" or family in self._generic_seen):
                # the first shape-generic compile of a family keeps the small sizes the shapes met so
                # far share; a shape it does not serve makes the family's fully generic code
                made = any(tuple(generic_specs(list(k))) == family for k in self._generic)
                gspecs = list(family) if mode == "generic" or made else \
                    generic_specs(specs, self._generic_seen[family])
                with tried.stage("shape-generic compile, refused"):
                    g = self._generic[tuple(gspecs)] = self._compile_generic(gspecs, arrays)
            self._generic_seen.setdefault(family, specs)
            if isinstance(g, CompiledKernel):
                return _bound(g, arrays, typed, specs)
            ck = self.compile_typed(typed, specs, target, arrays)
            tried.include(ck.timings)
            ck.timings = tried.record()
            ck.shape_note = (f"shapes: compiled for this shape ({g})" if g is not None else
                             "shapes: compiled for this shape (the first of its ranks and dtypes; another "
                             "shape compiles code for all shapes)")
            return ck
        return self.compile_typed(typed, specs, target, arrays)

    @_roomy
    def compile_generic(self, *args, **kwargs):
        """The shape-generic code for shapes like those of ``args``, compiled now as a second shape
        would make it (the sizes of at most ``generic.SMALL_SIZE`` kept constant) and bound to
        ``args``' shape, which calls then run; a HybridUnsupportedError says why a kernel has none."""
        from .compiler import CompiledKernel
        arrays = prepare_arrays(self, self.bind(args, kwargs))
        with self._lock:
            checking = Clock()
            with checking.stage("check"):
                typed, specs = self._checked(arrays)
            gspecs = generic_specs(specs, specs)
            g = self._generic.get(tuple(gspecs))
            if g is None:
                g = self._generic[tuple(gspecs)] = self._compile_generic(gspecs, arrays)
            self._generic_seen.setdefault(tuple(generic_specs(specs)), specs)
            if not isinstance(g, CompiledKernel):
                raise HybridUnsupportedError(f"`{self.name}`: {g}", self.kdef.span, "call it: it compiles each shape")
            ck = self._keep((tuple(specs), "cpu"), _bound(g, arrays, typed, specs, checking))
            key = _fast_key(args, self._value_params)
            self._fast.pop(key, None)
            self._plans.pop(key, None)
        return ck

    def _compile_generic(self, gspecs: list, arrays):
        """The shape-generic CompiledKernel of a generic signature, or the reason it cannot be made
        (``arrays``: the call that compiles it, whose sizes size its register blocks)."""
        import islpy as isl

        from ..dsl.check import check_kernel
        from ..schedule import deps as dependences
        try:
            with warnings.catch_warnings(), dependences.operations(GENERIC_OPERATIONS):
                if self.options.shapes == "auto":
                    warnings.simplefilter("ignore", HybridWarning)  # the first shape's compile gave them
                clock = Clock()
                with clock.stage("check"):
                    typed = check_kernel(self.kdef, self.module, gspecs)
                ck = self.compile_typed(typed, gspecs, "cpu", hint=sizes_of(typed, arrays))
                clock.include(ck.timings)
                ck.timings = clock.record()
                return ck
        except tir.NotGeneric as e:
            return f"no shape-generic code: {e}"
        except isl.Error as e:
            if dependences.QUOTA in str(e):
                return (f"no shape-generic code: a stage's isl analysis for all sizes went past "
                        f"{GENERIC_OPERATIONS:,} operations")
            return f"no shape-generic code: isl failed in a stage ({str(e).splitlines()[0][:80]})"
        except HybridError as e:
            return f"no shape-generic code: {e.message}"
        except Exception as e:  # a stage that cannot take run-time sizes: compile each shape
            return f"no shape-generic code: {type(e).__name__} in a stage that needs constant sizes"

    def compile_typed(self, typed, specs: list, target: str, arrays=None, hint=None) -> CompiledKernel:
        """The compiled kernel of a checked signature for ``target`` (``"cpu"``: through the disk
        cache; ``"cuda"``: CUDA C, made without pycuda or a GPU, which caches its own builds).
        With ``schedule="tune"`` and the call's ``arrays``, schedules are measured on them
        (:mod:`hyb.runtime.tune`) and the fastest is what the disk cache keeps.  ``hint``: for
        shape-generic code, the sizes of the shape that compiles it (the register blocks are sized
        for them; the code serves every size)."""
        from . import cache
        from .compiler import CompiledKernel
        if target == "cuda":
            from . import cuda
            ck = cuda.compile_kernel(typed, specs, self.options)
        else:
            tuning = self.options.schedule.mode == "tune"
            clock = Clock()
            with clock.stage("disk cache lookup"):
                disk_key = cache.key(self.name, self.module, specs, self.options, hint)
                entry = cache.load(disk_key)
            if entry is not None and tuning and entry.tuned is None:
                entry = None  # made without measuring (no arguments to measure on)
            options = self.options if entry is None or entry.tuned is None else \
                self.options.with_schedule(entry.tuned)
            ck = None if entry is None else CompiledKernel.restore(typed, specs, options, entry, hint, clock.record())
            if ck is None:
                if tuning and arrays is not None:
                    from .tune import tune
                    with clock.stage("schedule tuning (every candidate compiled and run)"):
                        ck = tune(typed, specs, self.options, arrays)
                else:
                    ck = CompiledKernel.build(typed, specs, self.options, hint)
                    clock.include(ck.timings)
                with clock.stage("disk cache store"):
                    cache.store(disk_key, ck.code)
                ck.timings = clock.record()
            variants.keep_records(ck)  # (a loaded one too: its optimised IR is compressed in its turn)
        ck.kernel = self
        return ck

    def __call__(self, *args, **kwargs):
        if kwargs:
            args = self.bind(args, kwargs)
        if (self.options.target or _default_target[0]) == "cuda":  # self.target, read without a property
            from . import cuda
            return cuda.call(self, args)
        out = fastcall.call(self._plans, self._value_params, args)  # a signature met before
        if out is not fastcall.MISS:
            return out
        arrays = prepare_arrays(self, args)
        ck = self._compiled(arrays)
        check_written_are_arrays(getattr(ck, "concrete", None) or ck.typed, args)
        key = _fast_key(args, self._value_params)  # the compile may have specialised a scalar
        if key is not None and not any(s.value is not None and not s.scalar for s in ck.specs):
            # (an array compiled for its items is looked up by them: never a warm call's entry)
            self._fast[key] = ck
            plan = getattr(ck, "call_plan", None)
            self._plans[key] = fastcall.entry(plan()) if plan is not None else fastcall.Tracked(ck.run)
        return ck.run(arrays)

    @_roomy
    def emulate(self, *args, **kwargs):
        """Run the kernel in the reference interpreter (NumPy semantics, no compilation)."""
        from ..dsl import interp
        arrays = prepare_arrays(self, self.bind(args, kwargs))
        typed = self._checked(arrays)[0]
        check_written_are_arrays(typed, self.bind(args, kwargs))
        check_fits(typed, arrays)
        check_in_place(typed, arrays)
        by_name = dict(zip(typed.inputs, arrays))
        outs = interp.run(typed, [by_name[n] for n in typed.inputs])
        return None if not outs else outs[0] if len(outs) == 1 else tuple(outs)

    @_roomy
    def grad(self, with_outputs: bool = False) -> GradKernel:
        """The gradient kernel, derived source to source (``.source`` is its ``.hyb`` text).

        It takes this kernel's inputs (then its outputs, with ``with_outputs=True``) and one
        gradient per output, and returns one gradient per input: ``None`` for integer inputs
        and scalar parameters."""
        key = bool(with_outputs)
        g = self._grads.get(key)
        if g is None:
            g = self._grads[key] = GradKernel(self, key)
        return g


class GradKernel(Kernel):
    """The gradient of a kernel: a kernel whose text hyb derived (``hyb.autodiff``).

    Integer inputs have no gradient; which inputs are integers is known at the call, so the
    kernel is derived once per set of integer inputs (``source`` assumes every tensor input
    is a float tensor).  A kernel with ``grid`` loops is derived per rank of those loops too,
    which the arguments decide: its text is ``source_for(*inputs)``."""

    def __init__(self, forward: Kernel, with_outputs: bool):
        from ..autodiff.normalise import grid_loops
        self.forward = forward
        self.with_outputs = with_outputs
        self._variants: dict = {}
        self._ranks: dict = {}  # (ndim, dtype) of each input -> grid_ranks
        self._grids = grid_loops(forward.kdef, forward.module)
        # the gradient's parameters do not depend on the ranks: a first derivation with each
        # grid loop at the smallest rank its text allows gives them
        ranks = {w: r for w, (r, _) in self._grids.items()} if self._grids else None
        derived, module, _ = self._variant(frozenset(), ranks)
        super().__init__(module.kernels[derived.name], module, **_public_options(forward.options))
        self.derived = derived

    @_roomy
    def _variant(self, inactive: frozenset, ranks=None):
        # Costly values kept in rows (autodiff/rows.py) keep the loop around them off threads: only
        # a gradient that runs on one thread keeps them.
        rows = thread_count(self.forward.options.threads) == 1
        key = (inactive, tuple(sorted(ranks.items())) if ranks else (), rows)
        v = self._variants.get(key)
        if v is None:
            from .. import autodiff
            from ..dsl import parser
            d = autodiff.derive(self.forward.kdef, self.forward.module, inactive, self.with_outputs, ranks, rows)
            filename = f"<gradient of {self.forward.name}>"
            module = parser.parse_string(d.source, filename)
            kernel = Kernel(module.kernels[d.name], module, **_public_options(self.forward.options))
            v = self._variants[key] = (d, module, kernel)
        return v

    @property
    def source(self) -> str:
        """The gradient kernel's ``.hyb`` text (with the module constants it uses)."""
        if self._grids:
            span = self._grids[min(self._grids)][1]
            raise HybridUnsupportedError(
                f"the gradient of `{self.forward.name}` depends on the rank of its `grid` loop", span,
                f"read `{self.forward.name}.grad().source_for(*inputs)` with inputs of the ranks you use "
                "(or run `hyb grad --args ...`)")
        return self.derived.source

    def source_for(self, *inputs) -> str:
        """The gradient kernel's text for forward inputs like ``inputs`` (their ranks decide the
        ``grid`` loops; integer inputs get no gradient)."""
        n = len(self.forward.params)
        if len(inputs) != n:
            raise HybridArgumentError(
                f"source_for() takes the {n} input(s) of `{self.forward.name}` ({', '.join(self.forward.params)}), "
                f"got {len(inputs)}", self.forward.kdef.span, None)
        return self._pick(tuple(inputs))[0].source

    def __repr__(self):
        return f"<hyb.Kernel {self.name}({', '.join(self.params)}) (gradient of {self.forward.name})>"

    def _inactive(self, args) -> frozenset:
        n = len(self.forward.params)
        if len(args) != len(self.params) and len(args) != n:
            raise HybridArgumentError(
                f"`{self.name}` takes {len(self.params)} arguments ({', '.join(self.params)}), got {len(args)}",
                self.kdef.span, "pass the forward inputs, then one gradient per output")
        out = set()
        for p, a in zip(self.forward.params, args[:n]):
            dt = getattr(a, "dtype", None)
            if dt is None or not isinstance(a, np.ndarray) or not types.is_float_dtype(dt):
                out.add(p)
        return frozenset(out)

    def _pick(self, args):
        """``(derived, kernel)`` for a call's arguments (or just the forward inputs)."""
        inactive = self._inactive(args)
        if not (inactive - self._scalar_params()):
            inactive = frozenset()
        ranks = self._grid_ranks(args[:len(self.forward.params)]) if self._grids else None
        d, _, kernel = self._variant(inactive, ranks)
        return d, kernel

    def _grid_ranks(self, inputs) -> dict:
        """The rank of each grid loop for these forward inputs, as the checker finds it (the ranks
        depend on the inputs' ranks and dtypes only, so they are kept by those)."""
        key = tuple((np.ndim(a), str(getattr(a, "dtype", type(a).__name__))) for a in inputs)
        ranks = self._ranks.get(key)
        if ranks is None:
            ranks = self._ranks[key] = self.forward.typed(*inputs).grid_ranks
        return ranks

    def _scalar_params(self) -> set:
        return {p for p, g in zip(self.forward.params, self.derived.grads) if not g}

    def __call__(self, *args, **kwargs):
        args = self.bind(args, kwargs)
        inactive = self._inactive(args)
        if all(p in inactive for p in self.forward.params):
            return None if len(self.forward.params) == 1 else (None,) * len(self.forward.params)
        d, kernel = self._pick(args)
        with warnings.catch_warnings():
            # A tape saving an output's value before its first write reads the zero it starts at.
            warnings.filterwarnings("ignore", category=HybridWarning, message=".*read before anything writes")
            got = kernel(*args)
        got = list(got) if isinstance(got, tuple) else [got]
        out = [got.pop(0) if g else None for g in d.grads]
        return out[0] if len(out) == 1 else tuple(out)

    def emulate(self, *args, **kwargs):
        args = self.bind(args, kwargs)
        d, kernel = self._pick(args)
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", category=HybridWarning, message=".*read before anything writes")
            got = kernel.emulate(*args)
        got = list(got) if isinstance(got, tuple) else [got]
        out = [got.pop(0) if g else None for g in d.grads]
        return out[0] if len(out) == 1 else tuple(out)

    def compile(self, *args, target: str | None = None) -> CompiledKernel:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", category=HybridWarning, message=".*read before anything writes")
            return self._pick(args)[1].compile(*args, target=target)

    def tape_bytes(self, *args) -> int:
        """Bytes of tape buffers the gradient allocates for the signature of ``args``."""
        d, kernel = self._pick(args)
        typed = kernel.typed(*args)
        names = {tp[0] for tp in d.tapes}
        return sum(int(np.prod(t.shape, dtype=np.int64)) * types.numpy_dtype(t.dtype).itemsize
                   for t in typed.tensors.values() if t.kind == "temp" and t.source_name in names)


def _public_options(options: KernelOptions) -> dict:
    return {k: v for k, v in options.items() if v is not None}


def bind_arguments(name: str, params: list, args: tuple, kwargs: dict) -> tuple:
    """``args`` and ``kwargs`` as one tuple in the order of ``params`` (Python's binding rules),
    or a HybridArgumentError saying which argument is wrong."""
    sig = f"{name}({', '.join(params)})"
    if len(args) > len(params):
        raise HybridArgumentError(f"kernel {sig} takes {len(params)} argument(s), got {len(args)} positional",
                                  None, "pass one array or number per parameter")
    bound = dict(zip(params, args))
    for key, value in kwargs.items():
        if key not in params:
            close = difflib.get_close_matches(key, params, 1)
            raise HybridArgumentError(f"kernel {sig} has no parameter `{key}`", None,
                                      f"did you mean `{close[0]}`?" if close else f"its parameters: {', '.join(params)}")
        if key in bound:
            raise HybridArgumentError(f"kernel {sig} got two values for `{key}`", None,
                                      "pass it by position or by name, not both")
        bound[key] = value
    missing = [p for p in params if p not in bound]
    if missing:
        raise HybridArgumentError(f"kernel {sig} is missing {', '.join(f'`{p}`' for p in missing)}", None,
                                  "pass one array or number per parameter")
    return tuple(bound[p] for p in params)


_fast_key = fastcall.fast_key


def _bound(g: CompiledKernel, arrays, typed, specs: list, clock: Clock | None = None) -> BoundKernel:
    """Shape-generic code ``g`` bound to the shape of ``arrays`` (checked as ``typed``), with the
    time the binding took (after what ``clock`` holds) as its timings (``inspect("timings")`` shows
    ``g``'s compile too)."""
    clock = clock or Clock()
    with clock.stage("bind"):
        binding = bind(g, arrays, typed)
    bound = BoundKernel(g, binding, specs, typed)
    bound.timings = clock.record()
    return bound


class HybModule:
    """The kernels of one ``.hyb`` file or source string: ``mod.name`` or ``mod.kernels["name"]``."""

    def __init__(self, module: syntax.Module, **options):
        self.module = module
        self.filename = module.filename
        self.kernels = {name: Kernel(kdef, module, **options) for name, kdef in module.kernels.items()}

    def __getattr__(self, name):
        kernels = self.__dict__.get("kernels", {})
        if name in kernels:
            return kernels[name]
        raise AttributeError(f"{self.__dict__.get('filename', 'module')} has no kernel `{name}`; "
                             f"it defines: {', '.join(kernels) or 'nothing'}")

    def __dir__(self):
        return list(self.kernels) + ["kernels", "filename"]

    def __repr__(self):
        return f"<hyb module {self.filename}: {', '.join(self.kernels)}>"


def load(path, **options) -> HybModule:
    """Parse a ``.hyb`` file."""
    from ..dsl import parser
    return HybModule(parser.parse_file(str(path)), **options)


def compile_source(text: str, filename: str = "<string>", **options) -> HybModule:
    """Parse kernels from a string."""
    from ..dsl import parser
    return HybModule(parser.parse_string(text, filename), **options)


def _constant_node(value, span):
    """Syntax-tree form of a captured Python value, or None if it is not a constant of the language."""
    if isinstance(value, (bool, int, float)) and not isinstance(value, complex):
        return syntax.Num(span, value)
    if isinstance(value, str):
        return syntax.Str(span, value)
    if isinstance(value, (tuple, list)):  # (nested ones too; a list is a constant like a tuple)
        items = [_constant_node(v, span) for v in value]
        if all(isinstance(i, (syntax.Num, syntax.Tuple)) for i in items):
            return syntax.Tuple(span, items)
    return None


def _captured_kernels(fn) -> tuple:
    """The names under which a function refers to ``@hyb.hybrid`` kernels."""
    try:
        cv = inspect.getclosurevars(fn)
    except (TypeError, ValueError):
        return ()
    return tuple(n for n, v in {**cv.globals, **cv.nonlocals}.items() if isinstance(v, Kernel))


def _capture(fn, module: syntax.Module):
    """Add the int/float/tuple constants and the @hybrid kernels a function refers to."""
    try:
        cv = inspect.getclosurevars(fn)
    except (TypeError, ValueError):
        return
    span = module.kernels[fn.__name__].span
    for name, value in {**cv.globals, **cv.nonlocals}.items():
        if name in module.kernels or name in module.constants:
            continue
        if isinstance(value, Kernel):
            module.kernels[name] = value.kdef
            for cname, c in value.module.constants.items():
                module.constants.setdefault(cname, c)
            continue
        node = _constant_node(value, span)
        if node is not None:
            module.constants[name] = (node, span)


def hybrid(fn=None, **options):
    """Decorator: ``@hyb.hybrid`` or ``@hyb.hybrid(target=None, fastmath=False, schedule=None, threads=None,
    shapes="auto", max_variants=None)`` (``target``: ``"cpu"``, ``"cuda"``, or None for the context's
    ``device_target``)."""
    def wrap(f):
        from ..dsl import parser
        module = parser.parse_function(f, _captured_kernels(f))
        if f.__name__ not in module.kernels:
            raise HybridUnsupportedError(f"could not find the source of `{f.__name__}`", None, None)
        _capture(f, module)
        k = Kernel(module.kernels[f.__name__], module, **options)
        k.__wrapped__ = f
        k.__doc__ = f.__doc__
        return k

    if fn is None:
        return wrap
    if callable(fn):
        return wrap(fn)
    raise HybridArgumentError("use @hyb.hybrid or @hyb.hybrid(option=...)", None, None)
