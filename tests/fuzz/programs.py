"""Hypothesis strategies for whole fuzzing cases: a kernel from tests/kernelgen.py plus kernel options.

kernelgen writes loop nests as deep as the tensors' rank; rank 4 (four nested loops, each tensor
dimension at most 3) is added here.  The options are drawn independently of the program: the isl
scheduler with its defaults, the original order, or explicit tile sizes (tiny ones, so that tiling
shows on small shapes) with threads, interchange, fusion (with array contraction) and vector math
functions switched on or off, and sometimes
``min_parallel_work=0`` so that small loops really run on threads.  ``fastmath`` is always off:
the comparison with ``emulate`` is exact up to rounding.

The gradient campaign draws from ``grad_cases``: kernelgen's programs restricted to float64
(``GRAD``), ``idiom_programs`` (row reductions, running maxima and minima in idiom form and
not, temporaries, reductions into tensors, recurrences, stencils, in-place updates, in float64
and float32) and ``tie_programs`` (running extrema on tied values, with their reference).
"""
from __future__ import annotations

import itertools
import re
from dataclasses import dataclass, replace

import numpy as np
from hypothesis import strategies as st

from tests import kernelgen as kg

if len(kg.LOOP_NAMES) < 4:  # a fourth loop variable, for rank-4 nests (kernelgen stops at i, j, k)
    kg.LOOP_NAMES = tuple(kg.LOOP_NAMES) + ("l",)

MAX_DIM = {1: 11, 2: 6, 3: 4, 4: 3}
BASE = kg.Config(rank=(1, 2, 3, 4), max_dim=MAX_DIM, schedules=False)

# Parity configurations (name -> kernelgen.Config); a case draws one (shrinking toward the first).
PARITY = {
    "default": BASE,
    "all_dtypes": replace(BASE, dtypes=kg.ALL_DTYPES),
    "deep_nests": replace(BASE, rank=(3, 4), max_stmts=10, expr_depth=2),
    "expressions": replace(BASE, rank=(1,), max_stmts=5, expr_depth=4, dtypes=kg.ALL_DTYPES),
    "affine_only": replace(BASE, data_dependent=False, rank=(2, 3, 4), max_stmts=9, expr_depth=2,
                           transcendental=False),
    # stores through data-dependent subscripts (`y[x[i] % n] = ...`): dependences on whole tensors
    "dd_writes": replace(BASE, dd_writes=True, rank=(1, 2, 3), max_stmts=8),
    # larger shapes, so that tiles are partial and parallel loops have work for every thread
    "larger": replace(BASE, rank=(2, 3), max_dim={2: 20, 3: 9}, min_dim=3, max_stmts=8, expr_depth=2),
}

# Data-dependent subscripts that may leave their tensor: compiled raises HybridIndexError iff emulate does.
OUT_OF_BOUNDS = replace(BASE, out_of_bounds=True)

# Gradients: float64 tensors only (finite differences), no nan/inf inputs, no data-dependent subscripts.
GRAD = replace(BASE, dtypes=("float64",), specials=False, extremes=False, data_dependent=False,
               calls=True, grid=True, max_stmts=6)


@st.composite
def kernel_options(draw):
    """Kernel options: schedule= (auto, original, or explicit switches, tile sizes and register blocks),
    threads= and shapes= (code for the call's shape, or shape-generic code)."""
    threads = draw(st.sampled_from([2, 1, 4]))
    shapes = draw(st.sampled_from(["auto", "generic"]))
    kind = draw(st.sampled_from(["auto", "original", "custom", "custom"]))
    if kind == "original":
        return {"schedule": "original", "threads": threads, "fastmath": False, "shapes": shapes}
    if kind == "auto":
        return {"threads": threads, "fastmath": False, "shapes": shapes}
    sched = {"tile": draw(st.one_of(st.sampled_from([True, False]),
                                    st.lists(st.integers(1, 5), min_size=1, max_size=4).map(tuple)))}
    for key in ("parallel", "interchange", "fuse", "vector_math"):
        sched[key] = draw(st.booleans())
    # register blocks chosen for the machine, none, or tiny ones that fill at the fuzzer's sizes
    sched["register"] = draw(st.sampled_from([True, False, (2, 2), (3, 4)]))
    sched["pack"] = draw(st.booleans())
    if draw(st.booleans()):
        sched["min_parallel_work"] = 0
    return {"schedule": sched, "threads": threads, "fastmath": False, "shapes": shapes}


@st.composite
def cases(draw, configs=None, options=True):
    """(config name, kernelgen.Program with .options set)."""
    configs = configs or PARITY
    name = draw(st.sampled_from(sorted(configs, key=lambda n: list(configs).index(n))))
    prog = kg.Gen(draw, configs[name]).program()
    prog.options = draw(kernel_options()) if options else {}
    return name, prog


# ------------------------------------------------------------------ gradient idioms
# Kernels shaped like the code gradients are derived for in practice: row reductions into scalars
# followed by elementwise loops that use them (softmax, log-softmax, logsumexp, layernorm, RMSNorm),
# running maxima and minima (the closed-form idiom and the forms that are not it), elementwise
# chains through `allocate` temporaries, reductions into tensors, recurrences, stencils and
# in-place updates.  Every tensor has x0's dtype (written `x0.dtype`), so one program runs in
# float64 (against finite differences) and in float32 (against its own float64 gradient).

# Set while hyb gave the closed form to a running maximum of exp() and lost its gradient
# (tests/fuzz/test_fuzz.py, test_regression_closed_form_maximum_of_a_transcendental): the operand
# of a running extremum in idiom form then calls no transcendental function.
KNOWN_BUG_CLOSED_FORM_OF_A_TRANSCENDENTAL = False
TRANSCENDENTAL = re.compile(r"\b(?:exp|expm1|log|log1p|tanh|sigmoid|sin|cos|tan|erf|atan|sqrt|rsqrt)\(")


@dataclass
class GradProgram(kg.Program):
    """A drawn gradient program.  family: the segments of the code ("softmax+reduce", ...);
    extremum: its running maxima and minima, each "name=fn:form:init" with form "idiom" or the way
    it departs from the idiom (read_inside, assigned_again, under_if, other_stmt, operand_reads_m);
    closed: the names the gradient kernel gave the closed form (set by the oracle); values:
    "fresh" (oracle.fresh_floats) or "grid" (small integers: ties); ties: the model of an
    exact-tie case (oracle.check_ties), or None."""
    family: str = ""
    extremum: str = ""
    values: str = "fresh"
    ties: object = None
    closed: tuple = ()


class Space:
    """The loops of a program: an optional outer loop `i` over rows (size n), then one or two inner
    loops (`k` over h, `j` over d).  x0 spans all of them."""

    def __init__(self, layout):
        self.layout = layout
        self.outer = layout in ("rows", "batch2d")
        self.two = layout in ("batch2d", "whole2d")
        self.dims = (["n"] if self.outer else []) + (["h"] if self.two else []) + ["d"]
        self.count = "h * d" if self.two else "d"  # elements of one row

    def full(self, k="k", j="j"):
        return ", ".join((["i"] if self.outer else []) + ([k] if self.two else []) + [j])

    def inner(self, k="k", j="j"):
        return f"{k}, {j}" if self.two else j

    def inner_shape(self):
        return "(h, d)" if self.two else "(d,)"

    def at(self, text, k="k", j="j"):
        """An expression written with the placeholders {F} (full index), {R} (row index) and {L} (j)."""
        return text.replace("{F}", self.full(k, j)).replace("{R}", self.inner(k, j)).replace("{L}", j)


def names_of(text):
    return set(re.findall(r"[A-Za-z_][A-Za-z_0-9]*", text))


def nest(loops, body):
    """`for v in range(r):` lines around body, loops outermost first."""
    lines = list(body)
    for v, r in reversed(loops):
        lines = [f"for {v} in range({r}):"] + kg.indent(lines)
    return lines


class IdiomGen(kg.Choices):
    """Draws one GradProgram through hypothesis (choices shrink toward the first option)."""

    def __init__(self, draw, shift_only=False):
        self.draw = draw
        self.counter = 0
        self.shift_only = shift_only

    # ------------------------------------------------------------ the program
    def program(self, family=None, template=None):
        self.sp = sp = Space(self.pick(["rows", "rows", "vector", "batch2d", "whole2d"]))
        self.dtype = self.pick(["float64", "float64", "float32"])
        self.inputs = ["x0"]
        self.pool = ["x0"]  # tensors of x0's shape that may be read at {F}
        if self.chance(30):
            self.inputs.append("x1")
            self.pool.append("x1")
        self.lastvecs = []  # tensors of shape (d,), read at {L}
        self.rowvals = []  # tensors of shape (n,), read at i
        if self.chance(60):
            self.inputs.append("w")
            self.lastvecs.append("w")
        if sp.outer and self.chance(40):
            self.inputs.append("v")
            self.rowvals.append("v")
        self.decls, self.outputs, self.extrema, self.families = [], [], [], []
        self.writes_x0 = False
        body = []
        kinds = ["rowblock", "rowblock", "rowblock", "elementwise", "reduce", "recurrence", "stencil"]
        if template:
            body += self.rowblock(True, template)
        else:
            n_seg = 1 + self.draw(st.integers(0, 2))
            for s in range(n_seg):
                last = s == n_seg - 1
                kind = family or self.pick(kinds)
                if s == 0 and not family and self.chance(10):
                    kind = "inplace"
                body += getattr(self, kind)(last)
        lines = [f"{name} = x0.shape[{p}]" for p, name in enumerate(sp.dims)] + self.decls + body
        results = self.outputs + (["x0"] if self.writes_x0 else [])
        lines.append("return " + ", ".join(results))
        source = f"def k({', '.join(self.inputs)}):\n" + "".join(f"    {ln}\n" for ln in lines)
        shape = self.shape()
        args = [self.array(name, shape) for name in self.inputs]
        ext = ",".join(self.extrema)
        return GradProgram(source, args, (0,) if self.writes_x0 else (), tuple(shape), True,
                           family="+".join(self.families), extremum=ext)

    def shape(self):
        sp = self.sp

        def size(small, large):
            return self.draw(st.integers(1, small)) if self.chance(60) else self.draw(st.integers(small + 1, large))

        return {"rows": lambda: [size(3, 5), size(8, 40)], "vector": lambda: [size(8, 64)],
                "batch2d": lambda: [size(2, 3), size(3, 4), size(4, 12)],
                "whole2d": lambda: [size(3, 6), size(6, 20)]}[sp.layout]()

    def array(self, name, shape):
        """Placeholder values (the oracle draws its own): shapes and dtype matter."""
        full = tuple(shape)
        s = {"x0": full, "x1": full, "w": full[-1:], "v": full[:1]}[name]
        return np.full(s, 0.5, dtype=self.dtype)

    def new_full(self, last, base="t"):
        """A new tensor of x0's shape: an output, or (not last) sometimes a temporary."""
        if last or self.chance(35):
            name = f"y{len(self.outputs)}"
            self.outputs.append(name)
            self.decls.append(f"{name} = output_tensor(x0.shape, x0.dtype)")
        else:
            name = self.fresh(base)
            self.decls.append(f"{name} = allocate(x0.shape, x0.dtype)")
        return name

    def new_output(self, shape):
        name = f"y{len(self.outputs)}"
        self.outputs.append(name)
        self.decls.append(f"{name} = output_tensor({shape}, x0.dtype)")
        return name

    def full_loops(self, last_range="d"):
        sp = self.sp
        return ([("i", "n")] if sp.outer else []) + ([("k", "h")] if sp.two else []) + [("j", last_range)]

    def inner_loops(self):
        return ([("k", "h")] if self.sp.two else []) + [("j", "d")]

    # ------------------------------------------------------------ expressions ({F}, {R}, {L} placeholders)
    def leaf(self, scalars=(), row_temps=()):
        opts = [f"{t}[{{F}}]" for t in self.pool] * 3 + [f"{t}[{{L}}]" for t in self.lastvecs]
        opts += [f"{t}[i]" for t in self.rowvals] + [f"{t}[{{R}}]" for t in row_temps] * 2 + list(scalars)
        if self.chance(15):
            return self.pick(["0.5", "2.0", "(-1.5)", "0.25"])
        return self.pick(opts)

    def expr(self, depth, scalars=(), row_temps=()):
        """A smooth expression with bounded values (tanh and sigmoid, no unguarded exp or division)."""
        if depth <= 0 or self.chance(30):
            return self.leaf(scalars, row_temps)
        k = self.pick(["+", "*", "-", "unary", "input_exp"])
        if k == "unary":
            return f"{self.pick(['tanh', 'sigmoid', 'sin'])}({self.expr(depth - 1, scalars, row_temps)})"
        if k == "input_exp":  # exp of an input element (|x| <= 1.5 in the oracle)
            return f"exp({self.pick(self.inputs_full())}[{{F}}] * 0.5)"
        a, b = self.expr(depth - 1, scalars, row_temps), self.expr(depth - 1, scalars, row_temps)
        return f"({a} {k} {b})"

    def inputs_full(self):
        return [t for t in self.inputs if t in ("x0", "x1")]

    def operand(self):
        """The value a running maximum compares: an input element, a product or sum with a weight, ..."""
        x = self.pick(self.pool)
        opts = [f"{x}[{{F}}]", f"{x}[{{F}}]", f"(-{x}[{{F}}])", f"({x}[{{F}}] * {x}[{{F}}])",
                f"tanh({x}[{{F}}])", f"exp({self.pick(self.inputs_full())}[{{F}}])"]
        for w in self.lastvecs:
            opts += [f"({x}[{{F}}] * {w}[{{L}}])", f"({w}[{{L}}] * {x}[{{F}}])", f"({x}[{{F}}] + {w}[{{L}}])"]
        if "x1" in self.pool:
            opts.append("(x0[{F}] * x1[{F}])")
        return self.pick(opts)

    # ------------------------------------------------------------ running maxima and minima
    def extremum_stage(self, operand=None):
        """Lines computing a running maximum or minimum `m` over the inner loops of one row (idiom or not);
        returns (lines, m, operand)."""
        sp = self.sp
        m = self.fresh("m")
        fn = self.pick(["max", "max", "min"])
        forms = ["idiom"] * 5 + ["read_inside", "assigned_again", "under_if", "other_stmt", "operand_reads_m"]
        if self.shift_only:  # m may only shift what it stabilises: no value of m reaches an output
            forms.remove("read_inside")
        form = self.pick(forms)
        e = operand or self.operand()
        # hyb gives the closed form only to an operand computed alike everywhere (no function calls):
        # most idiom-form operands are plain, some call a function (and keep their tape)
        if form == "idiom" and TRANSCENDENTAL.search(e) and (KNOWN_BUG_CLOSED_FORM_OF_A_TRANSCENDENTAL
                                                             or self.chance(75)):
            e = f"{self.pick(self.pool)}[{{F}}]"
        init = self.pick(["first", "const", "last", "dup", "other"])
        loops = self.inner_loops()
        if init in ("first", "dup"):
            start = f"{m} = {sp.at(e, '0', '0')}"
            if not sp.two and init == "first":
                loops = [("j", "1, d")]
        elif init == "last":
            start = f"{m} = {sp.at(e, 'h - 1', 'd - 1')}"
            loops = ([("k", "h - 1, -1, -1")] if sp.two else []) + [("j", "d - 2, -1, -1" if not sp.two else "d - 1, -1, -1")]
        elif init == "const":
            start = f"{m} = x0.dtype({'-' if fn == 'max' else ''}1.0e30)"
            step = self.pick(["d", "d - 1, -1, -1", "0, d, 2"])
            loops = ([("k", "h")] if sp.two else []) + [("j", step)]
        else:
            start = f"{m} = {self.pick([f'{v}[i]' for v in self.rowvals] + ['x0.dtype(0.25)', sp.at('x0[{F}] * 0.5', '0', '0')])}"
        lines_before, inner_extra, outer_extra, after = [], [], [], []
        upd_e = e
        if form == "operand_reads_m":
            upd_e = f"({e} * 0.5 + {m} * 0.25)"
        update = [f"{m} = {fn}({m}, {sp.at(upd_e)})" if self.chance(50) else f"{m} = {fn}({sp.at(upd_e)}, {m})"]
        if form == "under_if":
            conds = ["j % 2 == 0", "j >= 1", sp.at("x0[{F}] < 1.0")] + [f"{w}[j] > 0.0" for w in self.lastvecs]
            update = [f"if {self.pick(conds)}:"] + kg.indent(update)
        elif form == "read_inside":
            c = self.new_full(False, "c")
            inner_extra = [f"{c}[{sp.full()}] = {m}" if self.chance(60) else f"{c}[{sp.full()}] = {m} * {sp.at(self.leaf())}"]
            self.pool.append(c)
        elif form == "other_stmt":
            c = self.new_full(False, "c")
            stmt = f"{c}[{sp.full()}] = {sp.at(self.expr(1))}"
            if sp.two and self.chance(50):  # in the outer loop of the nest, beside the inner loop
                outer_extra = [f"{c}[{sp.full('k', '0')}] = {sp.at(self.expr(1), 'k', '0')}"]
            else:
                inner_extra = [stmt]
            self.pool.append(c)
        elif form == "assigned_again":
            if self.chance(50):
                after = [f"{m} = {m} * 0.5 + {sp.at(self.leaf(), '0', '0')}"]
            else:
                lines_before = [f"{m} = {m} * 2.0"]
        body = update + inner_extra
        if len(loops) == 2:
            inner = nest(loops[1:], body)
            if self.chance(50):
                inner = outer_extra + inner
            else:
                inner = inner + outer_extra
            lines = nest(loops[:1], inner)
        else:
            lines = nest(loops, body)
        self.extrema.append(f"{m}={fn}:{form}:{init}")
        return [start] + lines_before + lines + after, m, e

    # ------------------------------------------------------------ segments
    def rowblock(self, last, template=None):
        """One loop over rows (or none) holding scalar reductions and elementwise loops using them."""
        sp = self.sp
        template = template or self.pick(["softmax", "logsoftmax", "logsumexp", "layernorm", "rmsnorm",
                                          "extremum", "generic"])
        self.families.append(template)
        g = self.pick([f"{self.pick(self.pool)}[{{F}}]", self.expr(1)])
        body, scalars = [], []
        loops = self.inner_loops()
        dest = None
        if template in ("softmax", "logsoftmax", "logsumexp"):
            stab = self.chance(85)
            if stab:
                lines, m, _ = self.extremum_stage(g if self.chance(70) else None)
                body += lines
                shifted = f"{g} - {m}"
            else:
                shifted = g
            s = self.fresh("s")
            body.append(f"{s} = x0.dtype(0.0)")
            if template == "softmax" and self.chance(40):  # store the exponentials, divide afterwards
                dest = self.new_full(last)
                body += nest(loops, [f"{dest}[{sp.full()}] = exp({sp.at(shifted)})", f"{s} += {dest}[{sp.full()}]"])
                body += nest(loops, [f"{dest}[{sp.full()}] = {dest}[{sp.full()}] / {s}"])
            else:
                body += nest(loops, [f"{s} += exp({sp.at(shifted)})"])
                m_text = f" + {m}" if stab else ""
                if template == "logsumexp":
                    out = self.new_output("(n,)" if sp.outer else "()")
                    body.append(f"{out}[{'i' if sp.outer else '()'}] = log({s}){m_text}")
                else:
                    dest = self.new_full(last)
                    if template == "softmax":
                        val = f"exp({sp.at(shifted)}) / {s}"
                    else:
                        ls = self.fresh("ls")
                        body.append(f"{ls} = log({s})")
                        val = f"{sp.at(shifted)} - {ls}"
                    body += nest(loops, [f"{dest}[{sp.full()}] = {val}"])
        elif template in ("layernorm", "rmsnorm"):
            q, r = self.fresh("q"), self.fresh("r")
            if template == "layernorm":
                s, mu = self.fresh("s"), self.fresh("mu")
                body += [f"{s} = x0.dtype(0.0)"] + nest(loops, [f"{s} += {sp.at(g)}"]) + [f"{mu} = {s} / ({sp.count})"]
                centred = f"({sp.at(g)} - {mu})"
            else:
                centred = sp.at(g)
            body += [f"{q} = x0.dtype(0.0)"] + nest(loops, [f"{q} += {centred} * {centred}"])
            body.append(f"{r} = {self.pick(['rsqrt', '1.0 / sqrt'])}({q} / ({sp.count}) + 1e-5)")
            dest = self.new_full(last)
            scale = "".join(f" * {w}[j]" for w in self.lastvecs[:1])
            shift = f" + {self.lastvecs[-1]}[j]" if self.lastvecs and self.chance(50) else ""
            if self.chance(40):  # through a row temporary
                t = self.fresh("u")
                body.append(f"{t} = allocate({sp.inner_shape()}, x0.dtype)")
                body += nest(loops, [f"{t}[{sp.inner()}] = {centred} * {r}"])
                body += nest(loops, [f"{dest}[{sp.full()}] = {t}[{sp.inner()}]{scale}{shift}"])
            else:
                body += nest(loops, [f"{dest}[{sp.full()}] = {centred} * {r}{scale}{shift}"])
        else:  # extremum, generic: scalar stages, then elementwise loops over them
            n_stages = 1 if template == "extremum" else 1 + self.draw(st.integers(0, 2))
            for n in range(n_stages):
                kind = "extremum" if template == "extremum" or n == 0 and self.chance(50) else \
                    self.pick(["extremum", "sum", "sumsq"])
                if kind == "extremum":
                    lines, m, _ = self.extremum_stage()
                    body += lines
                    scalars.append(m)
                else:
                    s = self.fresh("s")
                    term = self.expr(1, scalars)
                    body += [f"{s} = x0.dtype(0.0)"]
                    body += nest(loops, [f"{s} += {sp.at(term)}" if kind == "sum" else
                                         f"{s} += {sp.at(term)} * {sp.at(term)}"])
                    if kind == "sumsq" and self.chance(50):
                        r = self.fresh("r")
                        body.append(f"{r} = rsqrt({s} / ({sp.count}) + 1e-5)")
                        scalars.append(r)
                    else:
                        scalars.append(s)
            if template == "extremum" and self.chance(50):  # the row's extremum is the result
                out = self.new_output("(n,)" if sp.outer else "()")
                use = self.pick(["{m}", "2.0 * {m}", "{m} * {m}"] + [f"{{m}} + {v}[i]" for v in self.rowvals])
                body.append(f"{out}[{'i' if sp.outer else '()'}] = {use.format(m=scalars[0])}")
            else:
                row_temps = []
                if self.chance(30):
                    t = self.fresh("u")
                    body.append(f"{t} = allocate({sp.inner_shape()}, x0.dtype)")
                    body += nest(loops, [f"{t}[{sp.inner()}] = {sp.at(self.expr(2, scalars))}"])
                    row_temps.append(t)
                dest = self.new_full(last)
                val = self.expr(2, scalars, row_temps)
                for n, s in enumerate(x for x in scalars if x not in names_of(val)):
                    val = f"({val}) {'*' if n == 0 else '+'} {s}"
                body += nest(loops, [f"{dest}[{sp.full()}] = {sp.at(val)}"])
        if dest:
            self.pool.append(dest)
        return nest([("i", "n")], body) if sp.outer else body

    def elementwise(self, last):
        self.families.append("elementwise")
        dest = self.new_full(last)
        lines = nest(self.full_loops(), [f"{dest}[{self.sp.full()}] = {self.sp.at(self.expr(2))}"])
        self.pool.append(dest)
        return lines

    def reduce(self, last):
        """acc[...] += e over the whole nest, into a tensor spanning one of the dimensions (or none)."""
        sp = self.sp
        self.families.append("reduce")
        axes = (["i"] if sp.outer else []) + ["j", "all"]
        axis = self.pick(axes)
        shape = {"i": "(n,)", "j": "(d,)", "all": "()"}[axis]
        if last or self.chance(50):
            acc = self.new_output(shape)
        else:
            acc = self.fresh("a")
            self.decls.append(f"{acc} = allocate({shape}, x0.dtype)")
        sub = {"i": "i", "j": "j", "all": "()"}[axis]
        lines = nest(self.full_loops(), [f"{acc}[{sub}] += {sp.at(self.expr(2))}"])
        if axis == "i":
            self.rowvals.append(acc)
        elif axis == "j":
            self.lastvecs.append(acc)
        if not last and self.chance(60):  # used by an elementwise loop right away
            dest = self.new_full(last)
            use = {"i": f"{acc}[i]", "j": f"{acc}[j]", "all": f"{acc}[()]"}[axis]
            lines += nest(self.full_loops(), [f"{dest}[{sp.full()}] = {sp.at(self.leaf())} * {use}"])
            self.pool.append(dest)
        return lines

    def recurrence(self, last):
        """dest along j (or i): each element from the one before it."""
        sp = self.sp
        self.families.append("recurrence")
        dest = self.new_full(last)
        e = self.expr(1)
        along = self.pick(["j", "j_reverse"] + (["i"] if sp.outer else []))
        form = self.pick(["ema", "product", "cummax", "sum"])
        if along == "j":
            prev, cond = sp.full("k", "j - 1"), "j >= 1"
        elif along == "j_reverse":
            prev, cond = sp.full("k", "j + 1"), "j < d - 1"
        else:
            prev, cond = "i - 1, " + sp.full().split(", ", 1)[1], "i >= 1"
        here = sp.full()
        cur = sp.at(e)
        zero = "1.0" if form == "product" else "x0.dtype(0.0)"
        p = f"({dest}[{prev}] if {cond} else {zero})"
        val = {"ema": f"{p} * 0.5 + {cur}", "product": f"{p} * tanh({cur})", "sum": f"{p} + {cur}",
               "cummax": f"(max({dest}[{prev}], {cur}) if {cond} else {cur})"}[form]
        loops = self.full_loops("d - 1, -1, -1" if along == "j_reverse" else "d")
        self.pool.append(dest)
        return nest(loops, [f"{dest}[{here}] = {val}"])

    def stencil(self, last):
        """Three-point stencil along j from a tensor (no carried dependence), or swept in place (carried)."""
        sp = self.sp
        self.families.append("stencil")
        src = self.pick(self.pool)
        dest = self.new_full(last)
        left, right = sp.full("k", "j - 1"), sp.full("k", "j + 1")
        a, b, c = self.pick([("0.25", "0.5", "0.25"), ("(-1.0)", "2.0", "(-1.0)"), ("0.5", "1.0", "0.0")])
        if self.chance(50):
            lines = nest(self.full_loops(), [
                (f"{dest}[{sp.full()}] = {a} * ({src}[{left}] if j >= 1 else 0.0) + {b} * {src}[{sp.full()}]"
                 f" + {c} * ({src}[{right}] if j < d - 1 else 0.0)")])
        else:  # fill, then a Gauss-Seidel sweep of the interior in place
            lines = nest(self.full_loops(), [f"{dest}[{sp.full()}] = {sp.at(self.expr(1))}"])
            lines += nest(self.full_loops("1, d - 1"), [
                f"{dest}[{sp.full()}] = {a} * {dest}[{left}] + {b} * {dest}[{sp.full()}] + {c} * {dest}[{right}]"])
        self.pool.append(dest)
        return lines

    def inplace(self, last):
        """x0 updated in place (returned): elementwise, or a carried scan along j."""
        sp = self.sp
        self.families.append("inplace")
        self.writes_x0 = True
        if self.chance(50):
            src = self.pick(["x0[{F}]"] + [f"{w}[{{L}}]" for w in self.lastvecs])
            lines = nest(self.full_loops(), [f"x0[{sp.full()}] = x0[{sp.full()}] * 0.5 + tanh({sp.at(src)})"])
        else:
            lines = nest(self.full_loops("1, d"), [f"x0[{sp.full()}] += x0[{sp.full('k', 'j - 1')}] * 0.5"])
        if last:
            lines += self.rowblock(last)
        return lines


@st.composite
def idiom_programs(draw, family=None):
    return IdiomGen(draw).program(family)


# ------------------------------------------------------------------ exact ties of a running extremum
@dataclass(frozen=True)
class TieModel:
    """m = fn over `operand` at each position the loops over the `reduce` axes of x0 visit (after
    `init`), one m per cell of the other axes, and the output `use` of m.  On a grid of small
    integers the operand ties; ``gradient`` gives the gradient the idiom's rule defines: the
    gradient of m split evenly among the candidates (init and one per visited position) that
    equal it, each passing its share on through its own derivative."""
    shape: tuple
    reduce: tuple
    fn: str
    operand: str  # x, xw, wx, x+w, -x, 2x, xx1, sq
    init: str  # first (the first position, not visited again), dup (visited again), const, other
    loops: tuple  # per reduced axis: fwd, rev, step2
    use: str  # m, cm, mm, m+v, m*v
    inputs: tuple

    def outer(self):
        return tuple(p for p in range(len(self.shape)) if p not in self.reduce)

    def order(self, p, skip_first=False):
        """The indices the loop over axis p visits, in order."""
        n = self.shape[p]
        idx = {"fwd": range(n), "rev": range(n - 1, -1, -1), "step2": range(0, n, 2)}[self.loops[self.reduce.index(p)]]
        return list(idx)[1:] if skip_first else list(idx)

    def skips_first(self):
        return self.init == "first" and len(self.reduce) == 1

    def value(self, a, pos):
        """(value, [(input, index, derivative)]) of the operand at x0's index pos."""
        x, last = float(a["x0"][pos]), pos[-1]
        w = float(a["w"][last]) if "w" in a else None
        op = self.operand
        if op == "x":
            return x, [("x0", pos, 1.0)]
        if op in ("xw", "wx"):
            return x * w, [("x0", pos, w), ("w", (last,), x)]
        if op == "x+w":
            return x + w, [("x0", pos, 1.0), ("w", (last,), 1.0)]
        if op == "-x":
            return -x, [("x0", pos, -1.0)]
        if op == "2x":
            return 2.0 * x, [("x0", pos, 2.0)]
        if op == "sq":
            return x * x, [("x0", pos, 2.0 * x)]
        x1 = float(a["x1"][pos])
        return x * x1, [("x0", pos, x1), ("x1", pos, x)]

    def gradient(self, args, dout):
        a = {name: np.asarray(v, np.float64) for name, v in zip(self.inputs, args)}
        dout = np.asarray(dout, np.float64)
        grads = {name: np.zeros(v.shape) for name, v in a.items()}
        outer = self.outer()
        for o in np.ndindex(*[self.shape[p] for p in outer]):
            def position(red, o=o):
                pos = [0] * len(self.shape)
                for p, v in zip(outer, o):
                    pos[p] = v
                for p, v in zip(self.reduce, red):
                    pos[p] = v
                return tuple(pos)

            first = position([self.order(p)[0] for p in self.reduce])
            if self.init in ("first", "dup"):
                cands = [self.value(a, first)]
            elif self.init == "const":
                cands = [(-1.0e30 if self.fn == "max" else 1.0e30, [])]
            else:
                cands = [(float(a["v"][o]), [("v", o, 1.0)])] if "v" in a else [(0.0, [])]
            orders = [self.order(p, self.skips_first()) for p in self.reduce]
            for red in itertools.product(*orders):
                cands.append(self.value(a, position(red)))
            m = (max if self.fn == "max" else min)(c[0] for c in cands)
            g = float(dout[o])
            use = self.use
            dm = {"m": g, "cm": 3.0 * g, "mm": 2.0 * m * g, "m+v": g, "m*v": g * (float(a["v"][o]) if "v" in a else 0)}[use]
            if use == "m+v":
                grads["v"][o] += g
            elif use == "m*v":
                grads["v"][o] += g * m
            ties = [c for c in cands if c[0] == m]
            for _, parts in ties:
                for name, idx, der in parts:
                    grads[name][idx] += dm / len(ties) * der
        return [grads[name] for name in self.inputs]


@st.composite
def tie_programs(draw):
    """A running maximum or minimum in idiom form whose reference gradient at exact ties is known
    (TieModel); half of the time instead a softmax, log-softmax or logsumexp row block, which does
    not depend on the value of its stabilising maximum, so that finite differences still judge it on
    tied values."""
    g = IdiomGen(draw, shift_only=True)
    if g.chance(35):
        prog = g.program(family="rowblock", template=g.pick(["softmax", "logsoftmax", "logsumexp"]))
        prog.values = "grid"
        return prog
    rank = g.pick([2, 1, 3])
    reduce = g.pick({1: [(0,)], 2: [(1,), (0,), (0, 1)], 3: [(1, 2), (2,), (0, 1, 2)]}[rank])
    shape = tuple(g.draw(st.integers(1, 9 if p == rank - 1 else 4)) for p in range(rank))
    fn = g.pick(["max", "min"])
    # (no exp(): the closed form, which the tie check needs, is not given to a transcendental operand)
    operand = g.pick(["x", "xw", "x+w", "wx", "-x", "2x", "sq", "xx1"])
    init = g.pick(["first", "const", "dup", "other"])
    loops = tuple(g.pick(["fwd", "rev", "step2"]) for _ in reduce)
    outer = [p for p in range(rank) if p not in reduce]
    use = g.pick(["m", "cm", "mm"] + (["m+v", "m*v"] if outer else []))
    inputs = ["x0"] + (["x1"] if operand == "xx1" else []) + (["w"] if operand in ("xw", "wx", "x+w") else []) \
        + (["v"] if outer and (use in ("m+v", "m*v") or init == "other") else [])
    model = TieModel(shape, reduce, fn, operand, init, loops, use, tuple(inputs))
    names = {1: ["j"], 2: ["i", "j"], 3: ["i", "k", "j"]}[rank]
    var = {p: names[p] for p in range(rank)}

    def x_at(pos):
        return ", ".join(pos[p] for p in range(rank))

    def operand_at(pos):
        x = f"x0[{x_at(pos)}]"
        w = f"w[{pos[rank - 1]}]"
        return {"x": x, "xw": f"{x} * {w}", "wx": f"{w} * {x}", "x+w": f"({x} + {w})", "-x": f"(-{x})",
                "2x": f"2.0 * {x}", "sq": f"{x} * {x}", "xx1": f"{x} * x1[{x_at(pos)}]"}[operand]

    def loop_range(p, skip):
        n, kind = f"n{p}", loops[reduce.index(p)]
        return {("fwd", False): f"{n}", ("fwd", True): f"1, {n}", ("rev", False): f"{n} - 1, -1, -1",
                ("rev", True): f"{n} - 2, -1, -1", ("step2", False): f"0, {n}, 2", ("step2", True): f"2, {n}, 2"}[kind, skip]

    firsts = {p: {"fwd": "0", "rev": f"n{p} - 1", "step2": "0"}[loops[reduce.index(p)]] for p in reduce}
    o_idx = ", ".join(var[p] for p in outer) if outer else "()"
    m = "m"
    if init in ("first", "dup"):
        start = operand_at({**var, **firsts})
    elif init == "const":
        start = f"x0.dtype({'-' if fn == 'max' else ''}1.0e30)"
    else:
        start = f"v[{o_idx}]" if "v" in inputs else "x0.dtype(0.0)"
    e = operand_at(var)
    update = f"{m} = {fn}({m}, {e})" if g.chance(50) else f"{m} = {fn}({e}, {m})"
    red = nest([(var[p], loop_range(p, model.skips_first())) for p in reduce], [update])
    out_val = {"m": "m", "cm": "3.0 * m", "mm": "m * m", "m+v": f"m + v[{o_idx}]", "m*v": f"m * v[{o_idx}]"}[use]
    body = nest([(var[p], f"n{p}") for p in outer], [f"{m} = {start}"] + red + [f"y0[{o_idx}] = {out_val}"])
    out_shape = "(" + "".join(f"n{p}, " for p in outer).rstrip(" ") + ")" if outer else "()"
    lines = [f"n{p} = x0.shape[{p}]" for p in range(rank)] + [f"y0 = output_tensor({out_shape}, x0.dtype)"] + body
    source = f"def k({', '.join(inputs)}):\n" + "".join(f"    {ln}\n" for ln in lines) + "    return y0\n"
    dtype = g.pick(["float64", "float32"])
    full = tuple(shape)
    out_cells = tuple(shape[p] for p in outer)
    args = [np.zeros({"x0": full, "x1": full, "w": full[-1:], "v": out_cells}[n], dtype) for n in inputs]
    return GradProgram(source, args, (), full, True, family="ties", extremum=f"m={fn}:idiom:{init}",
                       values="grid", ties=model)


# The gradient campaign's mix: kernelgen's float64 programs, the idioms above, and exact ties.
GRAD_MIX = ("idioms", "grad", "idioms", "ties")


@st.composite
def grad_cases(draw, mix=GRAD_MIX):
    """(name, program with .options set): name "grad" (kernelgen, programs.GRAD), "idioms"
    (idiom_programs) or "ties" (tie_programs)."""
    name = draw(st.sampled_from(mix))
    if name == "grad":
        prog = kg.Gen(draw, GRAD).program()
    elif name == "idioms":
        prog = draw(idiom_programs())
    else:
        prog = draw(tie_programs())
    prog.options = draw(kernel_options())
    return name, prog


# ------------------------------------------------------------------ the performance campaign
@st.composite
def perf_options(draw):
    """Kernel options whose schedule is hyb's own choice: ``schedule="auto"``, or hyb's choice with
    some of its schedule switches turned off (no explicit tile sizes or register blocks: those are
    the user's choice, not the compiler's; and not ``vector_math``, which the original order keeps
    and which changes the code of a math call, not the schedule).  The oracle runs them on one
    thread."""
    shapes = draw(st.sampled_from(["auto", "generic"]))
    if draw(st.integers(0, 2)) < 2:
        return {"fastmath": False, "shapes": shapes}
    sched = {key: False for key in ("interchange", "fuse", "register", "pack", "tile", "recompute")
             if draw(st.integers(0, 3)) == 0}
    return {"schedule": sched or "auto", "fastmath": False, "shapes": shapes}


# The performance campaign's programs: kernelgen's (its parity configurations but the one with
# every dtype, whose float16 and bfloat16 arithmetic is emulated) and the gradient idioms (row
# reductions, running extrema, temporaries), whose loops are those of ML kernels.
PERF = {name: cfg for name, cfg in PARITY.items() if name != "all_dtypes"}


@st.composite
def perf_cases(draw):
    """(name, program with .options from perf_options): name a PARITY configuration, or "idioms"."""
    name = draw(st.sampled_from(["idioms"] + list(PERF)))
    prog = draw(idiom_programs()) if name == "idioms" else kg.Gen(draw, PERF[name]).program()
    prog.options = draw(perf_options())
    return name, prog
