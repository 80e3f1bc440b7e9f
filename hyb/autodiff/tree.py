"""What the reverse-mode passes share: the records they keep about a kernel and small tree helpers.

The records (``TensorDecl``, ``ScalarDecl``, ``Loop``, ``Block``, ``Info``) describe the
normalised kernel: where each name is declared, which loops surround each statement and each
statement's position in program order.  ``Gradient`` is what the whole derivation returns.
The functions walk and rebuild syntax trees (``walk``, ``value_walk``, ``rewrite``, ``subst``),
build small pieces of the gradient kernel (``increment``, ``attr``, ``subscript``, ``copy_loop``)
and read assignments (``accumulation``, ``target_name``, ``int_typed``).  Affine forms are in
``affine.py``.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..dsl import ast as syntax
from ..dsl import types
from ..dsl.desugar import Names  # noqa: F401 - the passes' allocator of fresh names, from here
from ..dsl.unparse import expr as unparse_expr
from ..errors import HybridUnsupportedError
from . import rules
from .rules import call, name

TENSOR_MAKERS = ("output_tensor", "allocate")


@dataclass
class TensorDecl:
    name: str
    kind: str  # "param" | "output" | "temp"
    block: object = None  # the Block declaring it (the top block for parameters)
    shape: object = None
    dtype: object = None
    int_dtype: bool = False


@dataclass
class ScalarDecl:
    name: str
    block: object
    decl: object  # the declaring syntax.Assign
    int_typed: bool
    bool_typed: bool = False  # every value a condition: a bool (int_typed too)


@dataclass
class Loop:
    var: str
    lo: object
    hi: object
    step: int
    kind: str
    node: object = None


@dataclass
class Block:
    """A statement list and where it sits."""
    parent: object  # Block or None
    loops: list  # every enclosing Loop, outermost first
    owner: object = None  # the syntax.For / syntax.If owning this body
    body: list = field(default_factory=list)

    def inside(self, other) -> bool:
        b = self
        while b is not None:
            if b is other:
                return True
            b = b.parent
        return False


@dataclass
class Info:
    block: Block
    first: int  # program-order number of the statement
    last: int = 0  # last number inside it (compound statements)


@dataclass
class Gradient:
    """A derived gradient kernel."""
    kdef: syntax.KernelDef
    grads: list  # per forward parameter: True if the gradient kernel returns its gradient
    outputs: list  # the forward outputs, in `return` order
    tapes: list  # (name, shape tuple AST, dtype AST, why)
    params: list  # the gradient kernel's parameters
    rules: list = field(default_factory=list)  # the idiom rules applied (``idioms``), in words


def walk(e):
    """Every node below ``e`` (``e`` first), keyword arguments' values included."""
    yield e
    for v in vars(e).values():
        if isinstance(v, syntax.Node):
            yield from walk(v)
        elif isinstance(v, (list, dict)):
            for x in (v.values() if isinstance(v, dict) else v):
                if isinstance(x, syntax.Node):
                    yield from walk(x)


def value_walk(e):
    """The nodes of ``e`` whose values are read at run time: not inside ``x.shape``, ``x.dtype``,
    ``x.ndim`` or ``len(x)``, which are known when the kernel compiles."""
    if isinstance(e, syntax.Attribute) or (isinstance(e, syntax.Subscript) and isinstance(e.value, syntax.Attribute)):
        return
    if isinstance(e, syntax.Call) and rules.call_name(e) == "len":
        return
    yield e
    for v in vars(e).values():
        if isinstance(v, syntax.Node):
            yield from value_walk(v)
        elif isinstance(v, list):
            for x in v:
                if isinstance(x, syntax.Node):
                    yield from value_walk(x)
        elif isinstance(v, dict):
            for x in v.values():
                if isinstance(x, syntax.Node):
                    yield from value_walk(x)


def param_kinds(kernel) -> list:
    """``"tensor"`` or ``"scalar"`` for each parameter of ``kernel`` (anything with ``.kdef`` and
    ``.module``: a Kernel), read from its text: a parameter that is indexed, returned, asked for its
    ``.shape``/``.ndim``/``len``, passed to another kernel or never used is a tensor; one used only
    as a number is a scalar."""
    tensors, values = set(), set()
    kernels = set(kernel.module.kernels)
    for s in kernel.kdef.body:
        for x in walk(s):
            if isinstance(x, syntax.Subscript) and isinstance(x.value, syntax.Name):
                tensors.add(x.value.id)
            elif isinstance(x, syntax.Attribute) and isinstance(x.value, syntax.Name) and x.attr in ("shape", "ndim"):
                tensors.add(x.value.id)
            elif isinstance(x, syntax.Call) and rules.call_name(x) == "len" and x.args and isinstance(x.args[0], syntax.Name):
                tensors.add(x.args[0].id)
            elif isinstance(x, syntax.Call) and rules.call_name(x) in kernels:
                tensors.update(a.id for a in x.args if isinstance(a, syntax.Name))
            elif isinstance(x, syntax.Return):
                tensors.update(v.id for v in x.values if isinstance(v, syntax.Name))
        for x in value_walk(s):
            if isinstance(x, syntax.Name):
                values.add(x.id)
    return ["scalar" if p.name in values and p.name not in tensors else "tensor" for p in kernel.kdef.params]


def rewrite(e, replace):
    """``e`` rebuilt with each node for which ``replace(node)`` gives something other than None
    replaced by that (the outermost match wins; what it returns is not searched again)."""
    if not isinstance(e, syntax.Node):
        return e
    new = replace(e)
    if new is not None:
        return new
    kw = {}
    for k, v in vars(e).items():
        if isinstance(v, syntax.Node):
            kw[k] = rewrite(v, replace)
        elif isinstance(v, list):
            kw[k] = [rewrite(x, replace) for x in v]
        elif isinstance(v, dict):
            kw[k] = {a: rewrite(x, replace) for a, x in v.items()}
        else:
            kw[k] = v
    return type(e)(**kw)


def subst(e, names: dict):
    """``e`` with the names in ``names`` replaced."""
    if not names:
        return e
    return rewrite(e, lambda x: syntax.Name(x.span, names[x.id]) if isinstance(x, syntax.Name) and x.id in names else None)


def unsupported(what: str, node=None, hint=None):
    return HybridUnsupportedError(f"the gradient of a kernel with {what} is not built yet",
                                  getattr(node, "span", None), hint)


def int_typed(value) -> bool:
    """Whether a scalar's first value is an integer (then it carries no derivative)."""
    if isinstance(value, syntax.Num):
        return isinstance(value.value, (int, bool))
    if isinstance(value, syntax.Call):
        f = rules.call_name(value)
        if f in types.ALL_DTYPES:
            return not rules.is_float_cast(f)
        return f in ("len", "ceil_div", "popcount", "isnan", "isinf", "isfinite")
    return isinstance(value, (syntax.Compare, syntax.BoolOp))


def bool_valued(value) -> bool:
    """Whether a value is a bool whatever the arguments' dtypes (a comparison, `and`/`or`/`not`,
    True/False, a bool() cast)."""
    if isinstance(value, (syntax.Compare, syntax.BoolOp)):
        return True
    if isinstance(value, syntax.UnaryOp) and value.op == "not":
        return True
    if isinstance(value, syntax.Num):
        return isinstance(value.value, bool)
    return isinstance(value, syntax.Call) and rules.call_name(value) == "bool"


def accumulation(s: syntax.Assign):
    """For ``x = x + f`` / ``x = x - f`` (same target, f not reading it): (sign, f); else None."""
    v = s.value
    if isinstance(v, syntax.BinOp) and v.op in ("+", "-") and _same(v.left, s.target):
        if not any(_same(x, s.target) or (isinstance(x, syntax.Name) and isinstance(s.target, syntax.Subscript)
                                          and x.id == s.target.value.id) for x in walk(v.right)):
            return (1 if v.op == "+" else -1), v.right
    if isinstance(v, syntax.BinOp) and v.op == "+" and _same(v.right, s.target):
        if not any(_same(x, s.target) for x in walk(v.left)):
            return 1, v.left
    return None


def _same(a, b) -> bool:
    if isinstance(a, syntax.Name) and isinstance(b, syntax.Name):
        return a.id == b.id
    if isinstance(a, syntax.Subscript) and isinstance(b, syntax.Subscript):
        return unparse_expr(a) == unparse_expr(b)
    return False


def target_name(t) -> str:
    return t.id if isinstance(t, syntax.Name) else t.value.id


# ---------------------------------------------------------------- pieces of the gradient kernel, affine forms
def is_read_of(e, t: str) -> bool:
    return isinstance(e, syntax.Subscript) and isinstance(e.value, syntax.Name) and e.value.id == t


def subst_expr(e, values: dict):
    """``e`` with loop variables replaced by expressions."""
    return rewrite(e, lambda x: values[x.id] if isinstance(x, syntax.Name) and x.id in values else None)


def increment(target, coef):
    """``target += coef``, under ``if`` for guarded coefficients."""
    if isinstance(coef, rules.Guard):
        return syntax.If(None, coef.cond, [increment(target, coef.body)], [])
    return syntax.AugAssign(None, target, "+", coef)


def unconditional_calls(e, names, outermost: bool = False) -> list:
    """The calls of the built-in functions ``names`` that ``e`` evaluates whatever its conditions
    are (not inside a branch of ``x if c else y`` nor after the first operand of ``and``/``or``):
    inner ones first, or with ``outermost`` only those no other such call holds."""
    out = []

    def visit(x):
        if isinstance(x, syntax.IfExp):
            visit(x.cond)
            return
        if isinstance(x, syntax.BoolOp):
            visit(x.values[0])
            return
        hit = isinstance(x, syntax.Call) and rules.call_name(x) in names
        if hit and outermost:
            out.append(x)
            return
        if isinstance(x, syntax.Node):
            for v in vars(x).values():
                for item in (v if isinstance(v, list) else [v]):
                    visit(item)
        if hit:
            out.append(x)

    visit(e)
    return out


def replace_expr(e, text: str, by):
    """``e`` with every call that reads as ``text`` replaced by ``by``."""
    return rewrite(e, lambda x: by if isinstance(x, syntax.Call) and unparse_expr(x) == text else None)


def replace_reads(e, subs: dict):
    """``e`` with tensor reads (keyed by their text) replaced by expressions."""
    return rewrite(e, lambda x: subs.get(unparse_expr(x)) if isinstance(x, syntax.Subscript) else None)


def attr(n: str, a: str):
    return syntax.Attribute(None, name(n), a)


def subscript(t: str, index: list):
    return syntax.Subscript(None, name(t), list(index) if index else [syntax.Tuple(None, [])])


def copy_loop(dst: str, src: str, idx: str) -> list:
    return [syntax.For(None, name(idx), call("grid", attr(dst, "shape")),
                  [syntax.Assign(None, syntax.Subscript(None, name(dst), [name(idx)]),
                            syntax.Subscript(None, name(src), [name(idx)]))])]
