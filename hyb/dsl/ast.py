"""Syntax tree of the hybrid language, as the parser builds it.

Plain dataclasses, each carrying the :class:`~hyb.errors.Span` of the text it came from.
Nothing here knows about types or shapes: that is the checker's job (``check.py``),
which turns this tree into the typed kernel IR of ``tir.py``.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional, Union

from ..errors import Span


@dataclass(frozen=True)
class Node:
    span: Span = field(repr=False, compare=False)


# ---------------------------------------------------------------- expressions
@dataclass(frozen=True)
class Num(Node):
    value: Union[int, float, bool]


@dataclass(frozen=True)
class Str(Node):
    value: str


@dataclass(frozen=True)
class Formatted(Node):
    """A replacement field of an f-string: ``{value!conversion:spec}``."""

    value: "Expr"
    conversion: str = ""  # "", "r", "s" or "a"
    spec: str = ""


@dataclass(frozen=True)
class FString(Node):
    """An f-string (in ``print`` only): its literal text (Str) and fields (Formatted), in order."""

    parts: list


@dataclass(frozen=True)
class Slice(Node):
    """``lower:upper:step`` as a subscript (of a tuple, a shape or a grid index only); None: left out."""

    lower: Optional["Expr"] = None
    upper: Optional["Expr"] = None
    step: Optional["Expr"] = None


@dataclass(frozen=True)
class Name(Node):
    id: str


@dataclass(frozen=True)
class Attribute(Node):
    value: "Expr"
    attr: str


@dataclass(frozen=True)
class Subscript(Node):
    value: "Expr"
    indices: list
    # n > 0: made from a tuple assignment to n targets (``x, y = a.shape``); the checker says so
    # when the value does not have n items
    unpack: int = field(default=0, compare=False)


@dataclass(frozen=True)
class BinOp(Node):
    op: str
    left: "Expr"
    right: "Expr"


@dataclass(frozen=True)
class UnaryOp(Node):
    op: str  # "-", "+", "not"
    operand: "Expr"


@dataclass(frozen=True)
class Compare(Node):
    ops: list  # e.g. ["<", "<="]
    operands: list  # len(ops) + 1


@dataclass(frozen=True)
class BoolOp(Node):
    op: str  # "and" | "or"
    values: list


@dataclass(frozen=True)
class IfExp(Node):
    cond: "Expr"
    body: "Expr"
    orelse: "Expr"


@dataclass(frozen=True)
class Call(Node):
    func: "Expr"
    args: list
    kwargs: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Tuple(Node):
    elts: list


Expr = Union[Num, Str, Name, Attribute, Subscript, BinOp, UnaryOp, Compare, BoolOp, IfExp, Call, Tuple]


# ---------------------------------------------------------------- statements
@dataclass(frozen=True)
class Assign(Node):
    target: Expr
    value: Expr


@dataclass(frozen=True)
class AugAssign(Node):
    target: Expr
    op: str  # the binary operator, e.g. "+"
    value: Expr


@dataclass(frozen=True)
class For(Node):
    target: Name
    iter: Call
    body: list


@dataclass(frozen=True)
class If(Node):
    cond: Expr
    body: list
    orelse: list


@dataclass(frozen=True)
class Return(Node):
    values: list


@dataclass(frozen=True)
class ExprStmt(Node):
    value: Expr


@dataclass(frozen=True)
class Pass(Node):
    pass


@dataclass(frozen=True)
class Assert(Node):
    test: "Expr"
    msg: Optional["Expr"] = None


Stmt = Union[Assign, AugAssign, For, If, Return, ExprStmt, Pass, Assert]


# ---------------------------------------------------------------- top level
@dataclass(frozen=True)
class Param(Node):
    name: str
    annotation: Optional[Expr] = None


@dataclass(frozen=True)
class KernelDef(Node):
    name: str
    params: list
    body: list
    docstring: Optional[str] = None
    first_line: int = 0  # the `def` line and the last line of the kernel, in the user's file
    last_line: int = 0


@dataclass(frozen=True)
class Module:
    filename: str
    source: str
    kernels: dict  # name -> KernelDef, in file order
    constants: dict  # name -> (value, Span); ints, floats and tuples of them
    lines: list = field(default_factory=list)  # the lines of the user's file
    # names the Python code around a decorated kernel defines (module globals, closure variables),
    # with what each is ("a NumPy array"): an unknown name that is one of them gets a better hint
    outside: dict = field(default_factory=dict)


class NodeVisitor:
    """Calls ``visit_<ClassName>`` for a node, falling back to ``generic_visit``."""

    def visit(self, node):
        method = getattr(self, "visit_" + type(node).__name__, self.generic_visit)
        return method(node)

    def generic_visit(self, node):
        for value in vars(node).values():
            if isinstance(value, Node):
                self.visit(value)
            elif isinstance(value, list):
                for item in value:
                    if isinstance(item, Node):
                        self.visit(item)
