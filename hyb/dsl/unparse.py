"""The syntax tree (``ast.py``) written back as hybrid-language text.

Unlike ``printer.py``, which prints the typed IR of one signature, this prints the tree as
the user could have written it: shapes stay ``a.shape[0]``, dtypes stay ``a.dtype``.  The
gradient kernels of :mod:`hyb.autodiff` are built as trees and printed with it.  Statements
may carry a comment (:class:`Comment`), printed on its own line.
"""
from __future__ import annotations

from dataclasses import dataclass

from . import ast as syntax

# Python's precedences, loosest first.
_PREC = {"ifexp": 1, "or": 2, "and": 3, "not": 4, "cmp": 5, "+": 6, "-": 6, "*": 7, "/": 7, "//": 7, "%": 7,
         "unary": 8, "**": 9, "atom": 10}


@dataclass(frozen=True)
class Comment(syntax.Node):
    """A comment line in generated code (not produced by the parser)."""

    text: str = ""


def expr(e, parent: int = 0) -> str:
    if isinstance(e, syntax.Num):
        if isinstance(e.value, float):
            r = repr(e.value)
            if r in ("inf", "-inf", "nan"):
                return f'float("{r}")'  # (a Python float; the front end reads it back as this number)
            return r if not r.startswith("-") or parent < _PREC["unary"] else f"({r})"
        return repr(e.value) if e.value >= 0 or parent < _PREC["unary"] else f"({e.value!r})"
    if isinstance(e, syntax.Str):
        return repr(e.value)
    if isinstance(e, syntax.FString):
        text = "".join(p.value.replace("{", "{{").replace("}", "}}") if isinstance(p, syntax.Str) else
                       "{" + expr(p.value) + (f"!{p.conversion}" if p.conversion else "")
                       + (f":{p.spec}" if p.spec else "") + "}" for p in e.parts)
        return "f" + repr(text)
    if isinstance(e, syntax.Name):
        return e.id
    if isinstance(e, syntax.Attribute):
        return f"{expr(e.value, _PREC['atom'])}.{e.attr}"
    if isinstance(e, syntax.Subscript):
        if len(e.indices) == 1 and isinstance(e.indices[0], syntax.Tuple) and not e.indices[0].elts:
            return f"{expr(e.value, _PREC['atom'])}[()]"
        return f"{expr(e.value, _PREC['atom'])}[{', '.join(expr(i) for i in e.indices)}]"
    if isinstance(e, syntax.Call):
        args = [expr(a) for a in e.args] + [f"{k}={expr(v)}" for k, v in e.kwargs.items()]
        return f"{expr(e.func, _PREC['atom'])}({', '.join(args)})"
    if isinstance(e, syntax.Tuple):
        if len(e.elts) == 1:
            return f"({expr(e.elts[0])},)"
        return f"({', '.join(expr(x) for x in e.elts)})"
    if isinstance(e, syntax.BinOp):
        p = _PREC[e.op]
        if e.op == "**":  # right-associative, and binds tighter than a unary minus on its left
            s = f"{expr(e.left, p + 1)} ** {expr(e.right, _PREC['unary'])}"
        else:
            s = f"{expr(e.left, p)} {e.op} {expr(e.right, p + 1)}"
    elif isinstance(e, syntax.UnaryOp):
        if e.op == "not":
            p = _PREC["not"]
            s = f"not {expr(e.operand, p)}"
        else:
            p = _PREC["unary"]
            s = f"{e.op}{expr(e.operand, p)}"
    elif isinstance(e, syntax.Compare):
        p = _PREC["cmp"]
        parts = [expr(e.operands[0], p + 1)]
        for op, x in zip(e.ops, e.operands[1:]):
            parts.append(f"{op} {expr(x, p + 1)}")
        s = " ".join(parts)
    elif isinstance(e, syntax.BoolOp):
        p = _PREC[e.op]
        s = f" {e.op} ".join(expr(x, p + 1) for x in e.values)
    elif isinstance(e, syntax.IfExp):
        p = _PREC["ifexp"]
        s = f"{expr(e.body, p + 1)} if {expr(e.cond, p + 1)} else {expr(e.orelse, p)}"
    else:
        raise TypeError(f"cannot print {type(e).__name__}")
    return f"({s})" if p < parent or (p == parent and p == _PREC["cmp"]) else s


def stmts(body: list, indent: int) -> list:
    pad = "    " * indent
    out = []
    for s in body:
        if isinstance(s, Comment):
            out.append(f"{pad}# {s.text}")
        elif isinstance(s, syntax.Assign):
            out.append(f"{pad}{expr(s.target)} = {expr(s.value)}")
        elif isinstance(s, syntax.AugAssign):
            out.append(f"{pad}{expr(s.target)} {s.op}= {expr(s.value)}")
        elif isinstance(s, syntax.For):
            out.append(f"{pad}for {s.target.id} in {expr(s.iter)}:")
            out.extend(_block(s.body, indent + 1))
        elif isinstance(s, syntax.If):
            out.append(f"{pad}if {expr(s.cond)}:")
            out.extend(_block(s.body, indent + 1))
            orelse = s.orelse
            while len(orelse) == 1 and isinstance(orelse[0], syntax.If):
                out.append(f"{pad}elif {expr(orelse[0].cond)}:")
                out.extend(_block(orelse[0].body, indent + 1))
                orelse = orelse[0].orelse
            if orelse:
                out.append(f"{pad}else:")
                out.extend(_block(orelse, indent + 1))
        elif isinstance(s, syntax.Return):
            out.append(f"{pad}return {', '.join(expr(v) for v in s.values)}".rstrip())
        elif isinstance(s, syntax.ExprStmt):
            out.append(f"{pad}{expr(s.value)}")
        elif isinstance(s, syntax.Pass):
            out.append(f"{pad}pass")
        elif isinstance(s, syntax.Assert):
            out.append(f"{pad}assert {expr(s.test)}" + (f", {expr(s.msg)}" if s.msg is not None else ""))
        else:
            raise TypeError(f"cannot print {type(s).__name__}")
    return out


def _block(body: list, indent: int) -> list:
    lines = stmts(body, indent)
    if not any(not ln.lstrip().startswith("#") for ln in lines):
        lines.append("    " * indent + "pass")
    return lines


def kernel(k: syntax.KernelDef) -> str:
    lines = [f"def {k.name}({', '.join(p.name for p in k.params)}):"]
    if k.docstring:
        lines.append(f'    """{k.docstring}"""')
    lines.extend(_block(k.body, 1))
    return "\n".join(lines) + "\n"

