"""Typed kernel IR: the checker's output, bound to one call signature.

Every name is resolved to a unique symbol, every expression carries its dtype and every implicit
conversion is an explicit :class:`Cast`.  A shape is a tuple of ints, except in a shape-generic
kernel, whose input sizes are :class:`Size` nodes (values known when it runs) and whose other
shapes may be integer expressions of them.
The interpreter, the polyhedral extractor and the printers all read this form.

:class:`Let`, :class:`Pick`, :class:`Bits` and :class:`Prim` are never made by the checker: they
are the primitives :mod:`hyb.codegen.legalise` lowers NumPy's operators to before a back end
renders a kernel (see that module for their meaning).
"""
from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from typing import Optional

from ..errors import HybridTypeError, Span
from . import types


@dataclass(frozen=True)
class Tensor:
    """A buffer the kernel reads or writes.  Scalar locals are 0-d tensors (kind ``scalar``)."""

    name: str  # unique within the kernel
    shape: tuple
    dtype: str
    kind: str  # "input" | "output" | "temp" | "scalar" | "register" (a register block, hyb.schedule.promote)
    span: Optional[Span] = field(default=None, repr=False)
    source_name: str = ""  # the name the user wrote
    # For a scalar local, or a temporary allocated inside loops: the loops around its declaration.
    # Its value never flows from one iteration of these loops to the next (it is declared anew, a
    # temporary zeroed, in each), so it is private to them.
    private_to: tuple = ()
    # a shape-generic kernel's shape as the back ends compute it (in hyb.codegen.legalise's
    # primitives); empty: ``shape``
    code_shape: tuple = field(default=(), repr=False, compare=False)

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n

    @property
    def generic(self) -> bool:
        """Whether a size of this tensor is known only when the kernel runs."""
        return any(not isinstance(d, int) for d in self.shape)


# ---------------------------------------------------------------- expressions
@dataclass(frozen=True)
class TExpr:
    dtype: str
    span: Optional[Span] = field(default=None, repr=False, compare=False, kw_only=True)


@dataclass(frozen=True)
class Const(TExpr):
    value: object


@dataclass(frozen=True)
class Var(TExpr):
    """A loop variable (dtype is the weak ``int``)."""

    name: str


@dataclass(frozen=True)
class Size(TExpr):
    """Dimension ``axis`` of input ``position`` in a shape-generic kernel: a value known when the
    kernel runs (dtype the weak ``int``).  ``name`` is its isl parameter, ``hs_<position>_<axis>``."""

    name: str

    @property
    def position(self) -> tuple:
        _, k, axis = self.name.split("_")
        return int(k), int(axis)


class NotGeneric(Exception):
    """A kernel, or a stage, that cannot be compiled for run-time sizes: it is compiled for each
    shape instead (the message says why)."""


def size_name(position: int, axis: int) -> str:
    return f"hs_{position}_{axis}"


def dim(d, span=None) -> TExpr:
    """A dimension of a shape as an expression: a constant, or the run-time size it is."""
    return Const("int", d, span=span) if isinstance(d, int) else d


def size_symbols(k: "TypedKernel") -> list:
    """The run-time sizes of a shape-generic kernel's inputs, in the order the native code receives
    them (input by input, axis by axis); empty for a kernel of one signature."""
    out = []
    for n in k.inputs:
        for d in k.tensors[n].shape:
            if isinstance(d, Size):
                out.append(d.name)
    return out


@dataclass(frozen=True)
class Load(TExpr):
    tensor: str
    indices: list
    # the subscripts are bounds-checked when the load runs (the compile-time proof could not cover
    # them: schedule.extract sets it; every rewrite keeps it, being a dataclasses.replace)
    checked: bool = False


@dataclass(frozen=True)
class Bin(TExpr):
    op: str  # + - * / // % **  (operands already have the result dtype)
    a: TExpr
    b: TExpr


@dataclass(frozen=True)
class Unary(TExpr):
    op: str  # "neg" | "not"
    a: TExpr


@dataclass(frozen=True)
class Cmp(TExpr):
    op: str  # < <= > >= == !=   (dtype is bool; operands share one dtype)
    a: TExpr
    b: TExpr


@dataclass(frozen=True)
class Logic(TExpr):
    op: str  # "and" | "or"
    a: TExpr
    b: TExpr


@dataclass(frozen=True)
class Select(TExpr):
    cond: TExpr
    a: TExpr
    b: TExpr


@dataclass(frozen=True)
class Cast(TExpr):
    a: TExpr


@dataclass(frozen=True)
class Intrinsic(TExpr):
    """sqrt, max, popcount, ...: arguments already cast to the dtype the function computes in."""

    name: str
    args: list


# ------------------------------------------- primitives (only after hyb.codegen.legalise)
@dataclass(frozen=True)
class Let(TExpr):
    """``body`` with ``value`` evaluated once and bound to ``name`` (read by :class:`Var` nodes)."""

    name: str
    value: TExpr
    body: TExpr


@dataclass(frozen=True)
class Pick(TExpr):
    """``a if cond else b`` with both sides evaluated (a select; :class:`Select` branches)."""

    cond: TExpr
    a: TExpr
    b: TExpr


@dataclass(frozen=True)
class Bits(TExpr):
    """Bitwise ``&``, ``|`` or ``^`` of two values of one dtype (on bool: eager and, or, xor), or a
    logical shift ``<<``/``>>`` of an unsigned integer."""

    op: str
    a: TExpr
    b: TExpr


@dataclass(frozen=True)
class Prim(TExpr):
    """A primitive operation of :mod:`hyb.codegen.legalise`'s set: ``div``, ``rem``, ``copysign``, ``ipow``, ``odd``,
    ``bitcast``."""

    name: str
    args: list


# ---------------------------------------------------------------- statements
@dataclass(frozen=True)
class Loop:
    var: str
    start: TExpr
    stop: TExpr
    step: int
    body: list
    kind: str = "range"  # the loop hint the user wrote: range, serial, parallel, ...
    span: Optional[Span] = field(default=None, repr=False, compare=False)
    # A schedule stage's instruction to the code generators for this loop, which then runs as one
    # opaque statement (schedule.argext.Extremum); None: the loop as written.  A back end that
    # has no form for it runs the loop as written, which is always correct.
    form: Optional[object] = None


@dataclass(frozen=True)
class Store:
    tensor: str
    indices: list
    value: TExpr
    span: Optional[Span] = field(default=None, repr=False, compare=False)
    checked: bool = False  # the subscripts are bounds-checked when it runs (see Load.checked)


@dataclass(frozen=True)
class If:
    cond: TExpr
    body: list
    orelse: list
    span: Optional[Span] = field(default=None, repr=False, compare=False)


@dataclass(frozen=True)
class Print:
    """``print(...)``: each item a string literal or a scalar value, printed as Python prints them.
    ``stdout`` names the kernel's 0-d stand-in for the output stream: every print writes it, so
    that no schedule reorders two prints or runs them on threads at once."""

    items: list
    stdout: str
    span: Optional[Span] = field(default=None, repr=False, compare=False)
    # per item, (the separator before it, an f-string field's conversion, its format spec); empty:
    # a space between items, no formatting
    layout: tuple = ()

    def parts(self) -> list:
        """``(item, separator before it, conversion, format spec)`` of each item."""
        layout = self.layout or [(" " if k else "", "", "") for k in range(len(self.items))]
        return [(x, *f) for x, f in zip(self.items, layout)]


def format_value(value, conversion: str = "", spec: str = "") -> str:
    """A printed value as Python's print and f-strings write it (a NumPy scalar, or a Python number).
    A conversion (``!r``, ``!s``, ``!a``) makes the number its text, the same for every scalar type."""
    if conversion:
        value = str(value)
    return format(value, spec) if spec else str(value)


def check_format(dtype: str, spec: str, span) -> None:
    """A format spec a value of ``dtype`` takes, as Python's format() would check it when printing."""
    try:
        format(types.numpy_dtype(dtype).type(0), spec)
    except (ValueError, TypeError) as e:
        raise HybridTypeError(f"format spec `{spec}` does not fit a {dtype} value: {e}", span,
                              "Python's format specs: `{x:.3f}`, `{i:4d}`, `{x:e}`") from None


@dataclass(frozen=True)
class Assert:
    """``assert cond, "message"`` checked when it runs (one decided at compile time is gone)."""

    cond: TExpr
    message: str
    span: Optional[Span] = field(default=None, repr=False, compare=False)


@dataclass(frozen=True)
class TypedKernel:
    name: str
    tensors: dict  # name -> Tensor, in order of declaration
    inputs: list  # tensor names of the parameters, in order
    outputs: list  # tensor names returned, in order
    body: list
    filename: str = "<string>"
    span: Optional[Span] = field(default=None, repr=False)
    # the rank of each `grid` loop, by the (line, col) of its `for`; None where two inlined
    # calls of one kernel gave it different ranks
    grid_ranks: dict = field(default_factory=dict, repr=False, compare=False)
    # (input, dtype, span): a Python integer argument used as a narrower integer dtype, whose value
    # must fit it (NumPy raises OverflowError where it does not): checked at every call
    fits: tuple = field(default=(), compare=False)
    # each loop variable's unique name -> the name the user wrote (`idx[0]` for a grid index's)
    var_names: dict = field(default_factory=dict, repr=False, compare=False)
    # (span, why, argument or None): where a float64 value arises from operands not written as
    # float64 (a promotion of narrower types, a float64 scalar argument), for the compile's warning
    float64_sites: tuple = field(default=(), repr=False, compare=False)

    @property
    def written(self) -> set:
        return {s.tensor for s in walk_stmts(self.body) if isinstance(s, Store)}


def is_var(e, name: str) -> bool:
    """Whether ``e`` reads the variable ``name`` and nothing else."""
    return isinstance(e, Var) and e.name == name


def reads_var(e, name: str) -> bool:
    """Whether the variable ``name`` occurs anywhere in the expression ``e``."""
    return any(is_var(n, name) for n in walk_expr(e))


def walk_stmts(body: list):
    """Yield every statement in ``body``, a loop or branch before the statements inside it."""
    for s in body:
        yield s
        if isinstance(s, Loop):
            yield from walk_stmts(s.body)
        elif isinstance(s, If):
            yield from walk_stmts(s.body)
            yield from walk_stmts(s.orelse)


def loop_vars(body: list) -> set:
    """The variables of every loop in ``body``, at any depth."""
    return {s.var for s in walk_stmts(body) if isinstance(s, Loop)}


def rewrite(node, by):
    """``node`` (an expression or a statement) with each node ``n`` for which ``by(n)`` is not None
    replaced by that, outermost first (``by`` may call :func:`rewrite_children` to go on below);
    nodes nothing changed are shared, not copied, and every rebuilt node keeps its other fields
    (``Load.checked`` among them)."""
    new = by(node)
    return rewrite_children(node, by) if new is None else new


def rewrite_stmts(body: list, by, around: tuple = ()) -> list:
    """``body`` with each statement ``s`` for which ``by(s, around)`` is not None replaced by the
    statements it returns (a list; the statement is not looked into), and the bodies of the
    others' loops and branches rewritten the same way (each loop and ``if`` rebuilt; other
    statements kept).  ``around``: the variables of the loops around ``body``, outermost first."""
    out = []
    for s in body:
        new = by(s, around)
        if new is not None:
            out += new
        elif isinstance(s, Loop):
            out.append(replace(s, body=rewrite_stmts(s.body, by, around + (s.var,))))
        elif isinstance(s, If):
            out.append(replace(s, body=rewrite_stmts(s.body, by, around), orelse=rewrite_stmts(s.orelse, by, around)))
        else:
            out.append(s)
    return out


def rewrite_children(node, by):
    """``node`` with :func:`rewrite` applied to each expression and statement directly in it."""
    changes = {}
    for f in fields(node):
        v = getattr(node, f.name)
        if isinstance(v, _NODES):
            nv = rewrite(v, by)
            if nv is not v:
                changes[f.name] = nv
        elif isinstance(v, list) and any(isinstance(x, _NODES) for x in v):
            nv = [rewrite(x, by) if isinstance(x, _NODES) else x for x in v]
            if any(a is not b for a, b in zip(nv, v)):
                changes[f.name] = nv
    return replace(node, **changes) if changes else node


def walk_expr(e: TExpr):
    """Yield ``e`` and every sub-expression, parents first (children in order; walked with a stack
    of its own, so that a chain of thousands of terms takes time in proportion to its length)."""
    stack = [e]
    while stack:
        e = stack.pop()
        yield e
        if isinstance(e, Load):
            stack.extend(reversed(e.indices))
        elif isinstance(e, (Bin, Cmp, Logic, Bits)):
            stack += (e.b, e.a)
        elif isinstance(e, (Unary, Cast)):
            stack.append(e.a)
        elif isinstance(e, (Select, Pick)):
            stack += (e.b, e.a, e.cond)
        elif isinstance(e, (Intrinsic, Prim)):
            stack.extend(reversed(e.args))
        elif isinstance(e, Let):
            stack += (e.body, e.value)


_NODES = (TExpr, Loop, Store, If, Print, Assert)  # what rewrite() descends into
