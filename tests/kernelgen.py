"""Random *valid* hyb kernels, as ``.hyb`` text, for the hypothesis parity tests.

The generator draws every choice through hypothesis (so a failure shrinks to a small kernel)
and keeps its own model of what it writes, independent of the compiler:

* Shapes.  Every tensor spans some of the call's *shape dimensions* ``S[0..r-1]`` (inputs all of
  them, one of them or none, outputs a prefix, temporaries what their loop leaves).  A loop
  variable at nest level ``p`` runs over dimension ``p`` and carries a *window* ``(L, H)``: it
  is known to lie in ``[L, S[p] - 1 - H]``.  Subscripts ``v + s`` with ``-L <= s <= H``, the
  reversal ``S[p] - 1 - v``, ``v // 2`` and the data-dependent ``e % S[p]`` are then in bounds
  for every shape; shifts beyond the window are guarded (``a[i - 2] if i >= 2 else ...``, or an
  ``if`` that tightens the window).  With ``square`` all dimensions are equal, which allows
  transposed subscripts and lower-triangular loops ``range(u + 1)``.
* Values.  Every expression carries its dtype (NEP 50: Python literals, loop variables, shapes
  and Python scalar parameters are weak), an interval for its value and whether it is surely
  finite.  The interval keeps weak constants inside the dtype they meet (``uint8 + (-3)`` is a
  type error, rightly) and weak integer arithmetic small.  Float -> integer conversions are
  defined for every value; some are still guarded with ``(e if -B < e < B else 0)`` for variety.
* Exactness.  Transcendental intrinsics (exp, sin, ...) come from different libraries in NumPy
  and in compiled code and may differ by an ulp or two; a program that uses them is
  ``inexact``: their results (and, conservatively, everything read back from written tensors and
  updated scalars) never reach a condition, an integer conversion, rounding, ``//`` or ``%``,
  and the comparison tolerance is wider.
* Scalars follow the language's rule: a name assigned once to a known number is a weak
  compile-time constant, anything else a scalar of the value's (concrete) dtype.

Knobs in :class:`Config` trade features for examples; ``stable_conditions`` keeps clear of a
known compiler bug (see the regression tests in test_hypothesis.py).
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field, replace

import numpy as np
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from hyb.dsl import types
from hyb.dsl.check import widened_type

WI, WF = "int", "float"  # weak kinds
FLOAT_DT = ("float16", "bfloat16", "float32", "float64")
SIGNED_DT = ("int8", "int16", "int32", "int64")
UNSIGNED_DT = ("uint8", "uint16", "uint32", "uint64")
INT_DT = SIGNED_DT + UNSIGNED_DT
ALL_DTYPES = ("bool",) + INT_DT + FLOAT_DT
CORE_DTYPES = ("float32", "float64", "int32", "int64")
INF = math.inf
WEAK_INT_MAX = 10 ** 6  # weak integer expressions stay far from every integer range
VALUE_BOUND = 100  # |input element| unless extremes are drawn
LOOP_NAMES = ("i", "j", "k")
HINTS = ("range",) * 6 + ("serial", "parallel", "vectorize", "unroll", "reduce", "const_range")
FLOAT_LITS = (0.5, 2.0, -1.5, 0.25, 0.1, 3.0, -0.3, 1e-3, 7.5)
MODULE_CONSTS = {"C1": 3, "C2": -2, "F1": 0.5}
EXACT_MATH = ("abs", "sign", "floor", "ceil", "trunc", "round")
BOUNDED_MATH = ("sin", "cos", "tanh", "sigmoid", "erf", "atan")
UNBOUNDED_MATH = ("exp", "expm1", "log", "log1p", "tan", "rsqrt")


def is_float(dt):
    return dt in FLOAT_DT or dt == WF


def is_int(dt):
    return dt in INT_DT or dt == WI


def is_weak(dt):
    return dt in (WI, WF)


def concrete(dt):
    return {WI: "int64", WF: "float64"}.get(dt, dt)


def dtype_range(dt):
    if dt == "bool":
        return 0, 1
    if dt in INT_DT:
        info = np.iinfo(dt)
        return int(info.min), int(info.max)
    if dt == WI:
        return -WEAK_INT_MAX, WEAK_INT_MAX
    big = float(BFLOAT16_MAX if concrete(dt) == "bfloat16" else np.finfo(concrete(dt)).max)
    return -big, big


# bfloat16 (ml_dtypes) with the other dtypes: the smallest float holding both exactly (NumPy has
# no rule for most of these pairs).
BFLOAT16_MAX = 3.3895313892515355e38
BFLOAT16_WITH = {"bool": "bfloat16", "int8": "bfloat16", "uint8": "bfloat16", "bfloat16": "bfloat16",
                 "int16": "float32", "uint16": "float32", "float16": "float32", "float32": "float32",
                 "int32": "float64", "uint32": "float64", "int64": "float64", "uint64": "float64", "float64": "float64"}


def promote(a, b):
    """NumPy 2 (NEP 50) result dtype with weak Python ints/floats."""
    if a == "bool" and b == "bool":
        return "bool"
    if is_weak(a) and is_weak(b):
        return WF if WF in (a, b) else WI
    if is_weak(a) or is_weak(b):
        weak, strong = (a, b) if is_weak(a) else (b, a)
        if weak == WI:
            return "int64" if strong == "bool" else strong
        return strong if strong in FLOAT_DT else "float64"
    if "bfloat16" in (a, b):
        return BFLOAT16_WITH[b if a == "bfloat16" else a]
    return np.result_type(a, b).name


def float_math_type(dt):
    if is_weak(dt):
        return WF
    if dt in FLOAT_DT:
        return dt
    if dt in ("bool", "int8", "uint8"):
        return "float16"
    if dt in ("int16", "uint16"):
        return "float32"
    return "float64"


@dataclass(frozen=True)
class E:
    """A generated expression (a condition when dtype is "bool")."""

    text: str
    dtype: str
    lo: float = -INF
    hi: float = INF
    finite: bool = True  # floats: never nan/inf
    const: bool = False  # a compile-time constant the checker folds
    inexact: bool = False  # may differ by an ulp between NumPy and compiled code

    @property
    def is_bool(self):
        return self.dtype == "bool"

    @property
    def bound(self):
        return max(abs(self.lo), abs(self.hi))

    @property
    def value(self):
        return self.lo if self.const and self.lo == self.hi else None


def lit(v, dtype=None):
    text = repr(v) if v >= 0 else f"({v!r})"
    return E(text, dtype or (WF if isinstance(v, float) else WI), v, v, True, True)


@dataclass(frozen=True)
class Var:
    name: str
    dim: int
    lo: int  # v >= lo
    hi: int  # v <= S[dim] - 1 - hi


@dataclass(frozen=True)
class Tensor:
    name: str
    dims: tuple  # shape dimensions it spans, in order
    dtype: str
    kind: str  # "in", "inplace", "out", "temp"

    @property
    def writable(self):
        return self.kind != "in"


@dataclass(frozen=True)
class Scalar:
    name: str
    dtype: str
    lo: float
    hi: float
    finite: bool
    mutable: bool
    inexact: bool = False
    const: bool = False


@dataclass(frozen=True)
class Env:
    vars: tuple = ()
    scalars: tuple = ()
    tensors: tuple = ()
    frozen: frozenset = frozenset()  # names that must not be written here (Config.stable_conditions)
    grid: str = ""  # the tuple index of an enclosing grid loop

    def with_(self, **kw):
        return replace(self, **kw)

    def writable(self):
        return [t for t in self.tensors if t.writable and t.name not in self.frozen]

    def mutable(self):
        return [s for s in self.scalars if s.mutable and s.name not in self.frozen]


@dataclass(frozen=True)
class Config:
    rank: tuple = (1, 2, 3)
    max_dim: dict = field(default_factory=lambda: {1: 11, 2: 6, 3: 4})
    min_dim: int = 1  # (0 is drawn separately)
    dtypes: tuple = CORE_DTYPES
    max_stmts: int = 7  # statements in the whole kernel body (roughly)
    expr_depth: int = 3
    inputs: int = 3  # tensor inputs, at most
    outputs: int = 2  # at most
    specials: bool = True  # float inputs may hold nan / inf / -0.0
    extremes: bool = True  # integer inputs may hold their dtype's min / max
    intrinsics: bool = True
    transcendental: bool = True  # exp, sin, ... (inexact)
    data_dependent: bool = True  # subscripts and loop bounds read from tensors
    params: bool = True  # scalar kernel parameters
    calls: bool = True  # a helper kernel, inlined
    grid: bool = True
    schedules: bool = True  # random schedule= and threads= options
    # No parallel loops in kernels with scalar locals inside loops (once needed for the bugs of
    # test_regression_parallel_*; fixed, so off).
    avoid_parallel_bug: bool = False
    # Stores through data-dependent subscripts (`y[x[i] % n] = ...`): off, as they lead the
    # dependence analysis to crash or the scheduled code to break an output dependence
    # (test_regression_compute_flow_crash, test_regression_scheduled_code_breaks_output_dependence).
    dd_writes: bool = False
    # Data-dependent subscripts that may leave their tensor by one (`(e) % (S + 2) - 1`): both
    # compiled code and emulate must then raise HybridIndexError.
    out_of_bounds: bool = False
    # Inside an `if`, write nothing its condition reads (once needed for the bug of
    # test_regression_if_condition_*; fixed, so off).
    stable_conditions: bool = False


@dataclass
class Program:
    source: str
    args: list  # arrays and scalars, in parameter order
    inplace: tuple  # positions of inputs written in place
    shape: tuple
    inexact: bool
    options: dict = field(default_factory=dict)  # kernel options (schedule=...)

    def describe(self):
        specs = ", ".join(f"{a.dtype}{list(a.shape)}" if isinstance(a, np.ndarray) else repr(a) for a in self.args)
        lines = []
        for n, a in enumerate(self.args):
            if isinstance(a, np.ndarray):
                dt = "ml_dtypes.bfloat16" if a.dtype.name == "bfloat16" else f"np.{a.dtype}"
                lines.append(f"arg{n} = np.array({a.astype(float).tolist() if dt[0] == 'm' else a.tolist()!r}, "
                             f"dtype={dt})")
            else:
                lines.append(f"arg{n} = {a!r}")
        return f"{self.source}\nargs: {specs}\noptions: {self.options!r}\n" + "\n".join(lines)


class Choices:
    """Choices drawn through hypothesis (they shrink toward the first option, and toward False)
    and fresh names; the generators build on it."""

    def pick(self, options):
        options = list(options)
        return options[self.draw(st.integers(0, len(options) - 1))]

    def chance(self, pct):
        return self.draw(st.integers(0, 99)) >= 100 - pct

    def fresh(self, base):
        self.counter += 1
        return f"{base}{self.counter}"


class Gen(Choices):
    def __init__(self, draw, cfg: Config):
        self.draw = draw
        self.cfg = cfg
        self.counter = 0
        self.inputs, self.consts, self.stmts_left = [], {}, 0
        self.dd = 0  # nesting of data-dependent subscripts
        self.scalar_in_loop = False
        self.in_guard = 0  # generating the condition of an `if` / `elif`

    # ------------------------------------------------------------ program
    def program(self):
        cfg = self.cfg
        r = self.pick(cfg.rank)
        self.rank = r
        self.max_n = max(cfg.max_dim.values())  # bound of every size and loop variable
        self.square = r > 1 and self.chance(30)
        self.specials = cfg.specials and self.chance(25)
        self.extremes = cfg.extremes and self.chance(20)
        self.tainted = cfg.transcendental and cfg.intrinsics and self.chance(25)
        self.module_consts = cfg.calls and self.chance(20)
        n_in = 1 + self.draw(st.integers(0, cfg.inputs - 1))
        inputs = []
        for n in range(n_in):
            dims = tuple(range(r))
            if n > 0 and self.chance(20):  # a vector broadcast along one dimension, or a 0-d tensor
                dims = self.pick([(p,) for p in range(r)] + [()])
            inputs.append(Tensor(f"x{n}", dims, self.pick(cfg.dtypes), "in"))
        params = []
        if cfg.params and self.chance(25):
            for n in range(1 + self.draw(st.integers(0, 1))):
                params.append(self.param(f"p{n}"))
        order = [t.name for t in inputs] + [p.name for p, _ in params]
        if params and self.chance(50):
            order = order[-1:] + order[:-1]
        helper = ""
        calls = []
        if cfg.calls and self.chance(15):
            helper, out_dtype = self.helper(inputs[0].dtype)
            calls.append(out_dtype)
        inplace = self.chance(20)
        if inplace:
            inputs[0] = replace(inputs[0], kind="inplace")
        src = self.kernel("k", inputs, [p for p, _ in params], order, inplace, calls)
        header = "".join(f"{k} = {v!r}\n" for k, v in MODULE_CONSTS.items()) + "\n" if self.module_consts else ""
        source = header + helper + src
        shape = self.draw_shape()
        values = {t.name: self.draw_array(tuple(shape[d] for d in t.dims), t.dtype) for t in inputs}
        values.update({p.name: v for p, v in params})
        return Program(source, [values[n] for n in order], (order.index("x0"),) if inplace else (), tuple(shape),
                       self.tainted, self.schedule_options())

    def schedule_options(self):
        """The kernel's schedule= option: the default (isl scheduler, tiles, threads), the original
        order, or tiny tiles and random switches so that tiling shows on small shapes."""
        if not self.cfg.schedules:
            return {}
        threads = self.pick([2, 1, 3])
        k = self.pick(["default", "default", "original", "custom"])
        if k == "original":
            return {"schedule": "original"}
        opts = {}
        if k == "custom":
            opts["tile"] = self.pick([True, False, (2, 3, 2), (1, 2, 3), (3, 1, 2), (2, 2, 2)])
            for key in ("parallel", "interchange", "fuse"):
                if self.chance(30):
                    opts[key] = False
        if self.cfg.avoid_parallel_bug and self.scalar_in_loop:
            opts["parallel"] = False
        return {"schedule": opts, "threads": threads} if opts else {"threads": threads}

    def param(self, name):
        kind = self.pick(["int", "float", "np", "bool"])
        if kind == "int":
            v = self.draw(st.integers(-20, 20))
            return Scalar(name, WI, v, v, True, False), v
        if kind == "float":
            v = self.pick([0.5, -2.0, 1.25, 0.1, 3.0])
            return Scalar(name, WF, v, v, True, False), v
        if kind == "bool":
            v = self.chance(50)
            return Scalar(name, "bool", int(v), int(v), True, False), v
        dt = self.pick([d for d in self.cfg.dtypes if d != "bool"] or ["float64"])
        v = types.numpy_dtype(dt).type(self.draw(st.integers(0, 20)))
        return Scalar(name, dt, float(v), float(v), True, False), v

    def helper(self, dtype):
        """`def h(x0)`: a small kernel over x0's shape (one output of that shape), called (inlined) by k."""
        saved = (self.inputs, self.consts, self.stmts_left)
        x0 = Tensor("x0", tuple(range(self.rank)), dtype, "in")
        out_dtype = self.pick(self.cfg.dtypes)
        self.inputs, self.consts, self.stmts_left = [x0], {}, 2
        y = Tensor("y0", x0.dims, out_dtype, "out")
        lines = [f"y0 = output_tensor({self.shape_text(x0.dims)}, {self.dtype_text(out_dtype)})"]
        lines += self.block(Env(tensors=(x0, y)), 0, top=True)
        lines.append("return y0")
        self.inputs, self.consts, self.stmts_left = saved
        return "def h(x0):\n" + "".join("    " + ln + "\n" for ln in lines) + "\n\n", out_dtype

    def kernel(self, name, inputs, params, order, inplace, calls):
        cfg = self.cfg
        r = self.rank
        self.inputs = inputs
        self.stmts_left = cfg.max_stmts
        lines = []
        self.consts = {}
        for p in range(r):
            if self.chance(20):
                lines.append(f"n{p} = x0.shape[{p}]")
                self.consts[p] = f"n{p}"
        tensors = list(inputs)
        for n, dtype in enumerate(calls):
            tensors.append(Tensor(f"u{n}", tuple(range(r)), dtype, "temp"))
            lines.append(f"u{n} = h(x0)")
        outputs = []
        n_out = (0 if inplace and self.chance(30) else 1) + self.draw(st.integers(0, cfg.outputs - 1))
        for n in range(n_out):
            k = r if self.chance(70) else self.draw(st.integers(0, r))
            dims = tuple(range(k))
            dtype = self.pick(cfg.dtypes)
            outputs.append(Tensor(f"y{n}", dims, dtype, "out"))
            lines.append(f"y{n} = output_tensor({self.shape_text(dims)}, {self.dtype_text(dtype)})")
        tensors += outputs
        if self.chance(20):
            dtype = self.pick(cfg.dtypes)
            tensors.append(Tensor("t0", tuple(range(r)), dtype, "temp"))
            lines.append(f"t0 = allocate({self.shape_text(tuple(range(r)))}, {self.dtype_text(dtype)})")
        env = Env(tensors=tuple(tensors), scalars=tuple(params))
        lines += self.block(env, 0, top=True)
        results = [t.name for t in outputs] + (["x0"] if inplace else [])
        if len(results) > 1 and self.chance(30):
            results = results[::-1]
        lines.append("return " + ", ".join(results))
        return f"def {name}(" + ", ".join(order) + "):\n" + "".join("    " + ln + "\n" for ln in lines)

    def draw_shape(self):
        hi = self.cfg.max_dim[self.rank]

        def dim():
            if self.chance(8):
                return 0
            return self.draw(st.integers(self.cfg.min_dim, hi))  # often 1: hypothesis shrinks toward it

        if self.square:
            return [dim()] * self.rank
        return [dim() for _ in range(self.rank)]

    def draw_array(self, shape, dtype):
        if dtype == "bool":
            elems = st.booleans()
        elif is_int(dtype):
            lo, hi = dtype_range(dtype)
            elems = st.integers(max(lo, -VALUE_BOUND), min(hi, VALUE_BOUND))
            if self.extremes:
                elems = st.one_of(elems, st.sampled_from([lo, hi, lo + 1, hi - 1]))
        else:
            width = {"float16": 16, "bfloat16": 32, "float32": 32, "float64": 64}[dtype]
            elems = st.floats(-VALUE_BOUND, VALUE_BOUND, width=width)
            if self.specials:
                elems = st.one_of(elems, st.sampled_from([math.nan, math.inf, -math.inf, -0.0]))
            if dtype == "bfloat16":  # (hypothesis knows NumPy's own dtypes only) float32 values rounded
                return self.draw(hnp.arrays("float32", shape, elements=elems)).astype(types.bfloat16())
        return self.draw(hnp.arrays(dtype, shape, elements=elems))

    def size_text(self, p):
        opts = [f"x0.shape[{p}]"]
        if p in self.consts:
            opts.append(self.consts[p])
        if p == 0:
            opts.append("len(x0)")
        return self.pick(opts)

    def shape_text(self, dims):
        if not dims:
            return "()"
        if dims == tuple(range(self.rank)) and self.chance(50):
            return "x0.shape"
        return "(" + ", ".join(self.size_text(p) for p in dims) + ("," if len(dims) == 1 else "") + ")"

    def dtype_text(self, dtype):
        same = [t.name for t in self.inputs if t.dtype == dtype]
        if same and self.chance(40):
            return f"{self.pick(same)}.dtype"
        return f'"{dtype}"'

    # ------------------------------------------------------------ statements
    def block(self, env: Env, level: int, top=False, need_store=True):
        """Statements of a block whose enclosing loops are env.vars (level = len(env.vars))."""
        lines = []
        stored = False
        made_loop = False
        for _ in range(1 + self.draw(st.integers(0, 2))):
            if self.stmts_left <= 0:
                break
            kinds = ["store"]
            if level < self.rank:
                kinds += ["loop", "loop"]
            kinds += ["aug", "scalar", "if", "accum"]
            if 0 < level < self.rank:
                kinds.append("alloc")
            if env.mutable():
                kinds.append("update")
            kind = self.pick(kinds)
            if top and not made_loop and kind != "loop" and self.chance(60):
                kind = "loop"
            self.stmts_left -= 1
            new, env, did_store = self.statement(kind, env, level)
            made_loop |= kind in ("loop", "accum")
            stored |= did_store
            lines += new
        if top and not made_loop:
            new, env, did_store = self.statement("loop", env, level)
            lines += new
            stored |= did_store
        if need_store and not stored:
            lines += self.store(env, aug=False) or []
        return lines or ["pass"]

    def statement(self, kind, env, level):
        """(lines, env after the statement, whether a tensor was stored)."""
        if kind in ("store", "aug"):
            new = self.store(env, aug=(kind == "aug"))
            return (new or []), env, bool(new)
        if kind == "loop":
            if level == 0 and self.cfg.grid and self.rank > 0 and self.chance(12):
                return self.grid_loop(env), env, True
            return self.loop(env, level), env, True
        if kind == "scalar":
            return self.scalar_decl(env, mutable=self.chance(40))
        if kind == "update":
            return self.scalar_update(env), env, False
        if kind == "if":
            return self.if_stmt(env, level), env, True
        if kind == "accum":
            return self.accumulate(env, level)
        if kind == "alloc":
            return self.allocate(env, level)
        return [], env, False

    def loop(self, env: Env, level: int, body_fn=None):
        p = level
        name = LOOP_NAMES[p]
        n = self.size_text(p)
        hint = self.pick(HINTS)
        outer = list(env.vars)
        forms = ["full", "window", "step", "reverse"]
        if outer:
            forms += ["from_outer", "after_outer", "down_to_outer"] * 2
            if self.square:
                forms += ["upto_outer"] * 4
        if self.cfg.data_dependent and self.dd == 0:
            forms += ["data_stop", "data_start"]
        form = self.pick(forms)
        lo, hi = 0, 0
        if form == "full":
            rng = f"{n}"
        elif form in ("window", "step", "reverse"):
            lo, hi = self.draw(st.integers(0, 2)), self.draw(st.integers(0, 2))
            if form == "window":
                rng = f"{lo}, {minus(n, hi)}"
            elif form == "step":
                rng = f"{lo}, {minus(n, hi)}, {self.pick([2, 3, 1])}"
            else:
                rng = f"{minus(n, 1 + hi)}, {lo - 1}, {-self.pick([1, 2, 3])}"
        elif form in ("data_stop", "data_start"):
            # e % S is in [0, S - 1] (0 when S == 0): a bound read from the data
            e = self.index_value(env)
            if form == "data_stop":
                hi = 1
                rng = f"{e} % {n}"
            else:
                rng = f"{e} % {n}, {n}"
        else:
            u = self.pick(outer)
            if form == "from_outer":  # range(u, n[, 2])
                lo = u.lo
                rng = f"{u.name}, {n}" + (", 2" if self.chance(30) else "")
            elif form == "after_outer":  # range(u + 1, n)
                lo = u.lo + 1
                rng = f"{u.name} + 1, {n}"
            elif form == "down_to_outer":  # range(n - 1, u - 1, -1)
                lo = u.lo
                rng = f"{minus(n, 1)}, {u.name} - 1, -1"
            else:  # range(u + 1): v <= u <= S - 1 - u.hi (all sizes equal)
                hi = u.hi
                rng = f"{u.name} + 1"
        var = Var(name, p, lo, hi)
        inner = env.with_(vars=env.vars + (var,))
        body = body_fn(inner) if body_fn else self.block(inner, level + 1)
        return [f"for {name} in {hint}({rng}):"] + indent(body)

    def grid_loop(self, env: Env):
        g = self.fresh("g")
        shape = "x0.shape" if self.chance(50) else self.shape_text(tuple(range(self.rank)))
        vars_ = tuple(Var(f"{g}[{p}]", p, 0, 0) for p in range(self.rank))
        body = self.block(env.with_(vars=vars_, grid=g), self.rank)
        return [f"for {g} in grid({shape}):"] + indent(body)

    def index_value(self, env):
        """Text of an integer expression (data-dependent when tensors are around), for `e % S`."""
        self.dd += 1
        e = self.int_expr(env, 1, exact=True)
        self.dd -= 1
        if not is_weak(e.dtype) and dtype_range(e.dtype)[1] < self.max_n:
            return f"int64({e.text})"  # the size it is taken modulo must fit its dtype
        return e.text

    def scalar_decl(self, env, mutable, weak_ok=False):
        name = self.fresh("s")
        self.scalar_in_loop |= bool(env.vars)
        init = self.typed_init(env, weak_ok) if mutable else self.expr(env, self.cfg.expr_depth - 1, allow_bool=True)
        if mutable:
            dt = concrete(init.dtype)
            lo, hi = dtype_range(dt)
            sc = Scalar(name, dt, lo, hi, not is_float(dt), True, self.tainted and is_float(dt))
        elif init.const and is_weak(init.dtype):  # a weak compile-time constant
            sc = Scalar(name, init.dtype, init.lo, init.hi, init.finite, False, init.inexact, True)
        else:
            sc = Scalar(name, concrete(init.dtype), init.lo, init.hi, init.finite, False, init.inexact)
        return [f"{name} = {init.text}"], env.with_(scalars=env.scalars + (sc,)), False

    def typed_init(self, env, weak_ok):
        """The first value of a scalar; a bare literal only when it is surely assigned again
        (weak_ok), as a literal assigned once would make a weak constant."""
        k = self.pick(["lit", "cast", "expr"] if weak_ok else ["cast", "expr"])
        if k == "lit":
            return self.pick([lit(0.0), lit(0), lit(1.0)])
        if k == "cast":
            dt = self.pick(self.cfg.dtypes)
            v = self.pick([0, 1, 2])
            return E(f"{dt}({v})", dt, v, v, True, True)
        e = self.expr(env, 1, allow_bool=True)
        return e if not e.const else E(f"{concrete(e.dtype)}({e.text})", concrete(e.dtype), e.lo, e.hi, e.finite)

    def scalar_update(self, env):
        sc = self.pick(env.mutable())
        if sc.dtype == "bool":
            c = self.cond(env, 1)
            k = self.pick(["=", "not", "and", "or"])
            if k == "=":
                return [f"{sc.name} = {c.text}"]
            if k == "not":
                return [f"{sc.name} = not {sc.name}"]
            return [f"{sc.name} = ({sc.name} {k} {c.text})"]
        target = self.scalar_value(sc)
        return [f"{sc.name} {self.assign(target, env, scalar=True)}"]

    def assign(self, target: E, env, scalar=False):
        """`op value` for an assignment to something holding `target` (a tensor element or a scalar).

        A scalar local takes the promoted type of every value assigned to it: where a value would
        widen the scalar, it is cast to the scalar's type explicitly, which converts it as the
        assignment to a narrower type does."""
        exact = not is_float(target.dtype)
        for _ in range(3):
            val = self.expr(env, self.cfg.expr_depth - 1, exact=exact)
            ops = ["="]
            if target.dtype != "bool":
                ops += ["+=", "-=", "*="]
                if is_float(target.dtype):
                    ops += ["/="]
                if not val.inexact and not target.inexact:
                    ops += ["//=", "%="]
                if is_int(target.dtype) and is_int(val.dtype):
                    ops += ["**="]
            op = self.pick(ops)
            if op == "=":
                val = self.fit(val, target.dtype)
                if scalar and widened_type(target.dtype, concrete(val.dtype)) != target.dtype:
                    return f"= {target.dtype}({val.text})"
                return f"= {val.text}"
            if op == "**=":
                val = self.exponent(env, target)
            res = self.binop(op[:-1], target, val)
            if res is not None and self.meets(res, target.dtype):
                if scalar and widened_type(target.dtype, concrete(res.dtype)) != target.dtype:
                    return f"= {target.dtype}({target.text} {op[:-1]} ({val.text}))"
                return f"{op} {val.text}"
        return f"= {self.fit(lit(1), target.dtype).text}"

    def store(self, env, aug):
        targets = [t for t in env.writable() if self.subscript_ok(t, env)]
        if not targets:
            return None
        t = self.pick(targets)
        idx = self.subscript(t, env, write=True)
        if aug:
            return [f"{t.name}[{idx}] {self.assign(self.tensor_value(t, t.name), env)}"]
        val = self.expr(env, self.cfg.expr_depth, allow_bool=True, exact=not is_float(t.dtype))
        return [f"{t.name}[{idx}] = {self.fit(val, t.dtype).text}"]

    def if_stmt(self, env, level):
        self.in_guard += 1
        c, body_env = self.guard(env)
        k = self.pick(["if", "else", "elif"])
        c2, env2 = self.guard(env) if k == "elif" else (None, None)
        self.in_guard -= 1
        if self.cfg.stable_conditions:
            frozen = names_in(c.text) | (names_in(c2.text) if c2 else set())
            body_env = body_env.with_(frozen=env.frozen | frozen)
            env2 = env2.with_(frozen=env.frozen | frozen) if env2 else None
            env = env.with_(frozen=env.frozen | frozen)
        lines = [f"if {c.text}:"] + indent(self.block(body_env, level))
        if k == "elif":
            lines += [f"elif {c2.text}:"] + indent(self.block(env2, level))
        if k in ("else", "elif"):
            lines += ["else:"] + indent(self.block(env, level))
        return lines

    def guard(self, env):
        """A condition, and the environment inside its `if` (affine guards tighten windows)."""
        if env.vars and self.chance(50):
            v = self.pick(env.vars)
            s = self.draw(st.integers(1, 3))
            k = self.pick(["lo", "hi", "mod", "cmp"])
            if k == "lo":
                inner = replace(v, lo=max(v.lo, s))
                return E(f"{v.name} >= {s}", "bool"), self.swap(env, v, inner)
            if k == "hi":
                inner = replace(v, hi=max(v.hi, s))
                n = self.size_text(v.dim)
                txt = self.pick([f"{v.name} < {minus(n, s)}", f"{v.name} + {s} < {n}", f"{minus(n, s)} > {v.name}"])
                return E(txt, "bool"), self.swap(env, v, inner)
            if k == "mod":
                m = self.pick([2, 3])
                return E(f"({v.name} + {s}) % {m} == {self.draw(st.integers(0, m - 1))}", "bool"), env
            w = self.pick(env.vars)
            return E(f"{v.name} {self.pick(['<', '<=', '!=', '=='])} {w.name}", "bool"), env
        return self.cond(env, 2), env

    @staticmethod
    def swap(env, v, inner):
        return env.with_(vars=tuple(inner if x is v else x for x in env.vars))

    def accumulate(self, env, level):
        """s = init; for ...: s op= e; then a store that uses s."""
        decl, env2, _ = self.scalar_decl(env, mutable=True, weak_ok=True)
        sc = env2.scalars[-1]

        def body(inner):
            upd = self.scalar_update(inner.with_(frozen=inner.frozen - {sc.name}))
            rest = self.block(inner, len(inner.vars)) if self.chance(60) else []
            return upd + [ln for ln in rest if ln != "pass"]

        if level < self.rank:
            lines = decl + self.loop(env2, level, body)
        else:
            lines = decl + self.scalar_update(env2)
        targets = [t for t in env2.writable() if self.subscript_ok(t, env2)]
        if targets:
            t = self.pick(targets)
            use = self.scalar_value(sc)
            if use.is_bool and self.chance(50):
                use = self.cast_to_number(use)
            if self.chance(40) and not use.is_bool:
                use = self.binop(self.pick(["+", "*"]), use, self.expr(env2, 1)) or use
            if use.inexact and not is_float(t.dtype):
                use = lit(1)
            lines.append(f"{t.name}[{self.subscript(t, env2, write=True)}] = {self.fit(use, t.dtype).text}")
        return lines, env2, bool(targets)

    def allocate(self, env, level):
        name = self.fresh("t")
        dims = tuple(range(level, self.rank))
        dtype = self.pick(self.cfg.dtypes)
        t = Tensor(name, dims, dtype, "temp")
        line = f"{name} = allocate({self.shape_text(dims)}, {self.dtype_text(dtype)})"
        return [line], env.with_(tensors=env.tensors + (t,)), False

    # ------------------------------------------------------------ subscripts
    def candidates(self, p, env):
        return [v for v in env.vars if v.dim == p or self.square]

    def subscript_ok(self, t, env):
        return all(self.candidates(p, env) for p in t.dims)

    def subscript(self, t, env, write=False):
        if not t.dims:
            return "()"
        if env.grid and t.dims == tuple(range(self.rank)) and self.chance(40):
            return env.grid
        return ", ".join(self.subscript_parts(t, env, write))

    def subscript_parts(self, t, env, write=False):
        parts = []
        for p in t.dims:
            v = self.pick(self.candidates(p, env))
            forms = ["plain", "shift", "shift", "reverse", "half"]
            if self.cfg.data_dependent and self.dd == 0 and (self.cfg.dd_writes or not write):
                forms.append("data")
            form = self.pick(forms)
            if form == "plain":
                parts.append(v.name)
            elif form == "shift":
                parts.append(plus(v.name, self.draw(st.integers(-v.lo, v.hi))))
            elif form == "reverse":
                s = self.draw(st.integers(-v.hi, v.lo))
                parts.append(plus(f"{self.size_text(p)} - 1 - {v.name}", s))
            elif form == "half":
                parts.append(f"{v.name} // 2")
            else:  # v's loop runs, so S[p] >= 1 and e % S[p] is in bounds
                e = self.index_value(env)
                # not in if/elif conditions: nested ones are evaluated eagerly (test_regression_nested_condition_*)
                if self.cfg.out_of_bounds and "[" in e and not self.in_guard and self.chance(40):
                    parts.append(f"({e}) % ({self.size_text(p)} + 2) - 1")
                else:
                    parts.append(f"({e}) % {self.size_text(p)}")
        return parts

    # ------------------------------------------------------------ expressions
    def load(self, env, t):
        return self.tensor_value(t, f"{t.name}[{self.subscript(t, env)}]")

    def tensor_value(self, t, text):
        lo, hi = dtype_range(t.dtype)
        if t.kind == "in":
            if t.dtype == "bool":
                return E(text, "bool", 0, 1)
            if is_float(t.dtype):
                if self.specials:
                    return E(text, t.dtype, -INF, INF, False)
                return E(text, t.dtype, -VALUE_BOUND, VALUE_BOUND)
            if not self.extremes:
                lo, hi = max(lo, -VALUE_BOUND), min(hi, VALUE_BOUND)
            return E(text, t.dtype, lo, hi)
        if is_float(t.dtype):
            return E(text, t.dtype, -INF, INF, False, inexact=self.tainted)
        return E(text, t.dtype, lo, hi)

    def scalar_value(self, sc):
        return E(sc.name, sc.dtype, sc.lo, sc.hi, sc.finite, sc.const, sc.inexact)

    def guarded_load(self, env, t):
        """`t[.., v - s, ..] if v >= s else fallback` with s outside v's window (or the `+` side)."""
        pos = self.draw(st.integers(0, len(t.dims) - 1))
        p = t.dims[pos]
        v = self.pick(self.candidates(p, env))
        parts = self.subscript_parts(t, env)
        if self.chance(50):
            s = v.lo + self.draw(st.integers(1, 2))
            parts[pos] = plus(v.name, -s)
            cond = f"{v.name} >= {s}"
        else:
            s = v.hi + self.draw(st.integers(1, 2))
            parts[pos] = plus(v.name, s)
            cond = f"{v.name} < {minus(self.size_text(p), s)}"
        val = self.tensor_value(t, f"{t.name}[{', '.join(parts)}]")
        if val.is_bool:
            val = self.cast_to_number(val)
        return self.select(E(cond, "bool"), val, lit(self.draw(st.integers(0, 3))))

    def leaf(self, env, exact=False):
        loadable = [t for t in env.tensors if self.subscript_ok(t, env)]
        if exact and self.tainted:
            loadable = [t for t in loadable if t.kind == "in" or not is_float(t.dtype)]
        scalars = [s for s in env.scalars if not (exact and s.inexact)]
        inputs = [t for t in loadable if t.kind in ("in", "inplace")]
        opts = ["int_lit", "float_lit"]
        if inputs:
            opts += ["input"] * 5
        if loadable:
            opts += ["tensor"]
        guardable = [t for t in loadable if t.dims and env.vars]
        if guardable:
            opts += ["guarded"]
        if env.vars:
            opts += ["var", "var"]
        if scalars:
            opts += ["scalar", "scalar"]
        opts += ["typed_lit", "shape"]
        if self.module_consts:
            opts += ["module"]
        k = self.pick(opts)
        if k == "int_lit":
            return lit(self.draw(st.integers(-5, 5)))
        if k == "float_lit":
            return lit(self.pick(FLOAT_LITS))
        if k == "module":
            name = self.pick(list(MODULE_CONSTS))
            return replace(lit(MODULE_CONSTS[name]), text=name)
        if k == "typed_lit":
            dt = self.pick(self.cfg.dtypes)
            v = self.pick([1, 3, 0, 2])
            if dt == "bool":
                return E(f"bool({v})", "bool", int(bool(v)), int(bool(v)), True, True)
            if is_float(dt) and self.chance(30):
                v = 0.5
            return E(f"{dt}({v})", dt, v, v, True, True)
        if k == "shape":
            p = self.draw(st.integers(0, self.rank - 1))
            k2 = self.pick(["size", "ndim", "len"])
            if k2 == "ndim":
                return E(f"{self.pick([t.name for t in self.inputs])}.ndim", WI, 0, 3, True, True)
            if k2 == "len":
                full = [t.name for t in self.inputs if t.dims and t.dims[0] == 0]
                return E(f"len({self.pick(full)})", WI, 0, self.max_n, True, True)
            return E(self.size_text(p), WI, 0, self.max_n, True, True)
        if k == "var":
            return E(self.pick(env.vars).name, WI, 0, self.max_n)
        if k == "scalar":
            return self.scalar_value(self.pick(scalars))
        if k == "input":
            return self.load(env, self.pick(inputs))
        if k == "guarded":
            return self.guarded_load(env, self.pick(guardable))
        return self.load(env, self.pick(loadable))

    def expr(self, env, depth, allow_bool=False, exact=False) -> E:
        """A numeric expression (or a condition, when allow_bool); exact: no ulp-level differences."""
        for _ in range(4):
            e = self._expr(env, depth, allow_bool, exact)
            if e is not None and not (exact and e.inexact):
                if e.is_bool and not allow_bool:
                    e = self.cast_to_number(e)
                return e
        return lit(self.draw(st.integers(0, 3)))

    def _expr(self, env, depth, allow_bool, exact):
        if depth <= 0 or self.chance(25):
            return self.leaf(env, exact)
        kinds = ["bin", "bin", "bin", "neg", "cast", "select", "divmod", "truediv", "pow"]
        if self.cfg.intrinsics:
            kinds += ["intrinsic", "intrinsic"]
        if allow_bool:
            kinds += ["cond"]
        k = self.pick(kinds)
        sub = depth - 1
        if k == "cond":
            return self.cond(env, sub)
        if k == "neg":
            a = self.expr(env, sub, exact=exact)
            if a.dtype == WI and a.const and -a.hi < -WEAK_INT_MAX:
                return None
            return self.wrap(f"(-{a.text})", a.dtype, -a.hi, -a.lo, a.finite, a.const, a.inexact)
        if k == "cast":
            if self.chance(30):
                return self.cast_to_number(self.cond(env, sub))
            dt = self.pick(self.cfg.dtypes)
            return self.cast(self.expr(env, sub, exact=exact or not is_float(dt)), dt)
        if k == "select":
            c = self.cond(env, sub)
            return self.select(c, self.expr(env, sub, exact=exact), self.expr(env, sub, exact=exact))
        if k == "divmod":
            a, b = self.expr(env, sub, exact=True), self.expr(env, sub, exact=True)
            return self.binop(self.pick(["//", "%"]), a, b)
        if k == "truediv":
            return self.binop("/", self.expr(env, sub, exact=exact), self.expr(env, sub, exact=exact))
        if k == "pow":
            base = self.expr(env, sub, exact=exact)
            return self.binop("**", base, self.exponent(env, base, exact))
        if k == "intrinsic":
            return self.intrinsic(env, sub, exact)
        a, b = self.expr(env, sub, exact=exact), self.expr(env, sub, exact=exact)
        return self.binop(self.pick(["+", "-", "*"]), a, b)

    def exponent(self, env, base, exact=True):
        """An exponent for `base ** e`.  Integer bases: small constants or any integer at run time
        (a negative one gives 1, -1 or 0).  Float bases: 0, 1, 2, -1.0, 2.0 are exact; other
        exponents go through pow(), which NumPy and libm may round differently (inexact)."""
        if is_int(base.dtype):
            if self.chance(30):
                return self.int_expr(env, 0, exact=True)
            return lit(self.pick([2, 0, 1, 3]))
        if self.tainted and not exact and self.chance(40):
            if self.chance(50):
                return self.int_expr(env, 0, exact=True)
            return lit(self.pick([3, 0.5, 1.5, -2]))
        return lit(self.pick([2, 0, 1, -1.0, 2.0]))

    def int_expr(self, env, depth, exact=True):
        for _ in range(3):
            e = self.expr(env, depth, exact=exact)
            if is_int(e.dtype):
                return e
        if is_float(e.dtype):
            return self.cast(e, self.pick([d for d in self.cfg.dtypes if is_int(d)] or ["int64"]))
        return lit(self.draw(st.integers(1, 4)))

    def intrinsic(self, env, depth, exact):
        names = ["abs", "sign", "floor", "ceil", "trunc", "round", "isnan", "isinf", "isfinite",
                 "max", "min", "ceil_div", "popcount", "sqrt", "power"]
        if self.tainted and not exact:
            names += list(BOUNDED_MATH) + list(UNBOUNDED_MATH) + ["atan2", "power"]
        name = self.pick(names)
        if name in ("max", "min"):
            args = [self.expr(env, depth, exact=exact) for _ in range(2 + self.draw(st.integers(0, 1)))]
            acc = args[0]
            for b in args[1:]:
                t = promote(acc.dtype, b.dtype)
                if not (self.meets(acc, t) and self.meets(b, t)):
                    return None
                acc = E("", t, min(acc.lo, b.lo), max(acc.hi, b.hi), acc.finite and b.finite,
                        acc.const and b.const, acc.inexact or b.inexact)
            return self.wrap(f"{name}({', '.join(a.text for a in args)})", acc.dtype, acc.lo, acc.hi,
                             acc.finite, acc.const, acc.inexact)
        if name in ("ceil_div", "popcount"):
            a = self.int_expr(env, depth)
            if name == "popcount":
                return E(f"popcount({a.text})", WI if is_weak(a.dtype) else "uint8", 0, 64, True, a.const)
            b = self.int_expr(env, depth)
            t = promote(a.dtype, b.dtype)
            if not is_int(t) or not (self.meets(a, t) and self.meets(b, t)):
                return None
            return self.wrap(f"ceil_div({a.text}, {b.text})", t, -a.bound - 1, a.bound + 1, True, a.const and b.const)
        a = self.expr(env, depth, exact=exact or name in EXACT_MATH)
        if name in ("isnan", "isinf", "isfinite"):
            return E(f"{name}({a.text})", "bool", 0, 1)
        if name in EXACT_MATH:
            if name == "abs":
                lo, hi = (0, a.bound) if not (is_int(a.dtype) and a.lo <= dtype_range(a.dtype)[0]) else (a.lo, a.hi)
            elif name == "sign":
                lo, hi = -1, 1
            else:
                lo, hi = a.lo - 1, a.hi + 1
            folded = a.const and not (name in ("floor", "ceil", "trunc", "round") and a.dtype == WF)
            return self.wrap(f"{name}({a.text})", a.dtype, lo, hi, a.finite, folded)
        if name == "power":
            return self.binop("**", a, self.exponent(env, a, exact), text="power({a}, {b})")
        t = float_math_type(a.dtype)
        if name == "atan2":
            b = self.expr(env, depth)
            t = float_math_type(promote(a.dtype, b.dtype))
            return E(f"atan2({a.text}, {b.text})", t, -4, 4, a.finite and b.finite, inexact=True)
        if name == "sqrt":
            return E(f"sqrt({a.text})", t, -INF, INF, False, inexact=a.inexact)
        if name in BOUNDED_MATH:
            return E(f"{name}({a.text})", t, -2, 2, a.finite, inexact=True)
        return E(f"{name}({a.text})", t, -INF, INF, False, inexact=True)

    def meets(self, e, t):
        """Whether e can be converted to dtype t by the checker (weak constants must fit)."""
        if not (e.const and is_weak(e.dtype)) or is_weak(t) or t == "bool" or is_float(t):
            return True
        lo, hi = dtype_range(t)
        return lo <= e.lo and e.hi <= hi

    def wrap(self, text, t, lo, hi, finite=True, const=False, inexact=False):
        """E with the value interval (lo, hi) as dtype t holds it (wrapped, overflowed), or None."""
        if math.isnan(lo) or math.isnan(hi):
            lo, hi = -INF, INF
        if t == WI:
            if max(abs(lo), abs(hi)) > WEAK_INT_MAX:
                return None
        elif is_int(t):
            rlo, rhi = dtype_range(t)
            if lo < rlo or hi > rhi:
                lo, hi = rlo, rhi
            finite = True
        elif t == "bool":
            lo, hi, finite = 0, 1, True
        else:
            rlo, rhi = dtype_range(t)
            if not finite or lo < rlo or hi > rhi:
                lo, hi, finite = -INF, INF, False
        return E(text, t, lo, hi, finite, const, inexact)

    def binop(self, op, a, b, text=None):
        if a is None or b is None or a.is_bool or b.is_bool:
            return None
        t = promote(a.dtype, b.dtype)
        if op == "/":
            t = WF if t == WI else (t if is_float(t) else "float64")
        elif not (self.meets(a, t) and self.meets(b, t)):
            return None
        if op in ("//", "%") and (a.inexact or b.inexact):
            return None
        if op == "**":
            if is_int(t) and b.const and b.lo < 0:
                return None  # integers to negative constant powers are type errors
            if t == WI and not (b.const and 0 <= b.lo <= 3):
                return None
        const = a.const and b.const and is_weak(t)
        nonzero = b.lo > 0 or b.hi < 0
        finite = a.finite and b.finite
        inexact = a.inexact or b.inexact
        if op in ("+", "-", "*"):
            lo, hi = interval(op, a, b)
        elif op == "/":
            lo, hi = interval(op, a, b) if nonzero else (-INF, INF)
            finite = finite and nonzero
        elif op == "//":
            lo, hi = -a.bound - 1, a.bound + 1
            finite = finite and (nonzero or is_int(t))
        elif op == "%":
            lo, hi = -b.bound, b.bound
            finite = finite and (nonzero or is_int(t))
        else:  # **
            if b.const and b.lo == b.hi and float(b.lo).is_integer() and 0 <= b.lo <= 3 and a.bound < 1e30:
                k = int(b.lo)
                lo, hi = (-a.bound ** k, a.bound ** k) if k % 2 else (0, a.bound ** k)
            else:
                lo, hi, finite = -INF, INF, False
            if is_float(t) and not (b.const and b.lo == b.hi and b.lo in (0, 1, 2, -1)):
                inexact = True
        fmt = text or "({a} " + op + " {b})"
        return self.wrap(fmt.format(a=a.text, b=b.text), t, lo, hi, finite, const, inexact)

    def select(self, c, a, b):
        if a.is_bool:
            a = self.cast_to_number(a)
        if b.is_bool:
            b = self.cast_to_number(b)
        t = promote(a.dtype, b.dtype)
        if not (self.meets(a, t) and self.meets(b, t)):
            return a
        return self.wrap(f"({a.text} if {c.text} else {b.text})", t, min(a.lo, b.lo), max(a.hi, b.hi),
                         a.finite and b.finite, False, a.inexact or b.inexact)

    def cast(self, e, dt):
        if e.is_bool:
            return E(f"{dt}({e.text})", dt, 0, 1, True)
        if not self.meets(e, dt) or (e.const and is_weak(e.dtype) and dt == "bool"):
            e = lit(1)
        if is_int(dt) or dt == "bool":
            e = self.fit(e, dt)
        return self.wrap(f"{dt}({e.text})", dt, e.lo, e.hi, e.finite, e.const and dt != "bool", e.inexact)

    def cast_to_number(self, c):
        dt = self.pick([d for d in self.cfg.dtypes if d != "bool"] or ["int32"])
        return E(f"{dt}({c.text})", dt, 0, 1, True)

    def fit(self, e, dt):
        """e, to be converted to dtype dt; sometimes guarded into [-B, B] when it may not fit."""
        if not self.meets(e, dt):
            return lit(1)
        if not (is_int(dt) and is_float(e.dtype)):
            return e
        if e.finite and e.bound < 1e9:
            return e
        if self.chance(50):
            return e  # float -> int of any value is defined (INT_MIN where out of range, as NumPy on x86)
        b = self.pick([100, 1000, 1e9])
        return E(f"({e.text} if {-b!r} < {e.text} < {b!r} else 0)", e.dtype, -b, b, True, False, e.inexact)

    def cond(self, env, depth) -> E:
        for _ in range(3):
            c = self._cond(env, depth)
            if c is not None:
                return c
        return E("(0 < 1)", "bool")

    def _cond(self, env, depth):
        kinds = ["cmp", "cmp", "cmp", "chain", "and", "or", "not", "bool"]
        bools = [s for s in env.scalars if s.dtype == "bool"]
        if bools:
            kinds.append("bool_scalar")
        bool_tensors = [t for t in env.tensors if t.dtype == "bool" and self.subscript_ok(t, env)]
        if bool_tensors:
            kinds.append("bool_tensor")
        if self.cfg.intrinsics:
            kinds.append("predicate")
        k = self.pick(kinds)
        if depth <= 0 and k in ("and", "or", "not"):
            k = "cmp"
        if k == "bool_scalar":
            return E(self.pick(bools).name, "bool")
        if k == "bool_tensor":
            return self.load(env, self.pick(bool_tensors))
        if k in ("and", "or"):
            a, b = self.cond(env, depth - 1), self.cond(env, depth - 1)
            return E(f"({a.text} {k} {b.text})", "bool")
        if k == "not":
            return E(f"(not {self.cond(env, depth - 1).text})", "bool")
        sub = max(depth - 1, 0)
        if k == "bool":
            a = self.expr(env, sub, exact=True)
            return E(f"bool({a.text})", "bool") if self.meets(a, "bool") else None
        if k == "predicate":
            a = self.expr(env, sub, exact=True)
            return E(f"{self.pick(['isnan', 'isinf', 'isfinite'])}({a.text})", "bool")
        ops = ["<", "<=", ">", ">=", "==", "!="]
        operands = [self.expr(env, sub, exact=True), self.expr(env, sub, exact=True)]
        if k == "chain":
            operands.append(self.expr(env, 0, exact=True))
        text = operands[0].text
        for a, b in zip(operands, operands[1:]):
            t = promote(a.dtype, b.dtype)
            if not (self.meets(a, t) and self.meets(b, t)):
                return None
            text += f" {self.pick(ops)} {b.text}"
        return E(f"({text})", "bool")


def interval(op, a, b):
    if op == "+":
        return a.lo + b.lo, a.hi + b.hi
    if op == "-":
        return a.lo - b.hi, a.hi - b.lo
    with np.errstate(all="ignore"):
        if op == "*":
            corners = [x * y for x in (a.lo, a.hi) for y in (b.lo, b.hi)]
        else:
            corners = [x / y for x in (a.lo, a.hi) for y in (b.lo, b.hi)]
    corners = [c for c in corners if not math.isnan(c)]
    if len(corners) < 4:
        return -INF, INF
    return min(corners), max(corners)


def names_in(text):
    return set(re.findall(r"[A-Za-z_][A-Za-z_0-9]*", text))


def minus(n, k):
    return n if k == 0 else f"{n} - {k}"


def plus(v, s):
    return v if s == 0 else (f"{v} + {s}" if s > 0 else f"{v} - {-s}")


def indent(lines):
    return ["    " + ln for ln in lines]


@st.composite
def programs(draw, cfg: Config = Config()):
    return Gen(draw, cfg).program()
