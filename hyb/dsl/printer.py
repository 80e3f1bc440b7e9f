"""Printing of the typed kernel IR as hybrid-language text (``inspect("ast")``).

The text is the kernel after checking: names are unique, shapes are numbers (or, in a
shape-generic kernel, expressions of the run-time sizes ``hs_<input>_<axis>``), implicit
conversions are written as casts and every tensor's shape and dtype is declared.
"""
from __future__ import annotations

from . import tir
from . import types

_PREC = {"or": 1, "and": 2, "not": 3, "cmp": 4, "+": 5, "-": 5, "*": 6, "/": 6, "//": 6, "%": 6, "neg": 7, "**": 8}


def fmt(e: tir.TExpr, parent: int = 0) -> str:
    if isinstance(e, tir.Const):
        if types.is_weak(e.dtype) or types.is_bool(e.dtype):
            return repr(e.value)
        return f"{e.dtype}({e.value!r})"
    if isinstance(e, (tir.Var, tir.Size)):
        return e.name
    if isinstance(e, tir.Load):
        if not e.indices:
            return e.tensor
        return f"{e.tensor}[{', '.join(fmt(i) for i in e.indices)}]"
    if isinstance(e, tir.Bin):
        p = _PREC[e.op]
        if e.op == "**":  # right-associative
            s = f"{fmt(e.a, p + 1)} ** {fmt(e.b, p)}"
        else:
            s = f"{fmt(e.a, p)} {e.op} {fmt(e.b, p + 1)}"
    elif isinstance(e, tir.Unary):
        p = _PREC[e.op]
        s = f"not {fmt(e.a, p)}" if e.op == "not" else f"-{fmt(e.a, p)}"
    elif isinstance(e, tir.Cmp):
        p = _PREC["cmp"]
        s = f"{fmt(e.a, p + 1)} {e.op} {fmt(e.b, p + 1)}"
    elif isinstance(e, tir.Logic):
        p = _PREC[e.op]
        s = f"{fmt(e.a, p)} {e.op} {fmt(e.b, p + 1)}"
    elif isinstance(e, tir.Select):
        p = 0
        s = f"{fmt(e.a, 1)} if {fmt(e.cond, 1)} else {fmt(e.b)}"
    elif isinstance(e, tir.Cast):
        return f"{types.concrete(e.dtype) if not types.is_weak(e.dtype) else e.dtype}({fmt(e.a)})"
    elif isinstance(e, tir.Intrinsic):
        return f"{e.name}({', '.join(fmt(a) for a in e.args)})"
    else:
        raise TypeError(type(e).__name__)
    return f"({s})" if p < parent or (parent and p == parent and isinstance(e, tir.Cmp)) else s


def fmt_shape(shape: tuple) -> str:
    """A shape as a tuple's text: ``(4, 5)``, ``(hs_0_0, 5)``."""
    items = [str(d) if isinstance(d, int) else fmt(d) for d in shape]
    return "(" + ", ".join(items) + ("," if len(items) == 1 else "") + ")"


def print_typed(k: tir.TypedKernel) -> str:
    lines = []
    params = ", ".join(f"{n}: {k.tensors[n].dtype}[{fmt_shape(k.tensors[n].shape)[1:-1].rstrip(',')}]"
                       for n in k.inputs)
    lines.append(f"def {k.name}({params}):")
    for t in k.tensors.values():
        if t.kind in ("output", "temp"):
            maker = "output_tensor" if t.kind == "output" else "allocate"
            lines.append(f"    {t.name} = {maker}({fmt_shape(t.shape)}, {t.dtype!r})")
        elif t.kind == "scalar":
            lines.append(f"    # scalar {t.name}: {t.dtype}")

    def block(stmts, depth):
        pad = "    " * depth
        if not stmts:
            lines.append(pad + "pass")
        for s in stmts:
            if isinstance(s, tir.Loop):
                args = [fmt(s.start), fmt(s.stop)] + ([str(s.step)] if s.step != 1 else [])
                kind = "range" if s.kind == "grid" else s.kind
                lines.append(f"{pad}for {s.var} in {kind}({', '.join(args)}):")
                block(s.body, depth + 1)
            elif isinstance(s, tir.If):
                lines.append(f"{pad}if {fmt(s.cond)}:")
                block(s.body, depth + 1)
                if s.orelse:
                    lines.append(f"{pad}else:")
                    block(s.orelse, depth + 1)
            elif isinstance(s, tir.Print):
                items = [repr(x) if isinstance(x, str) else fmt(x) for x in s.items]
                lines.append(f"{pad}print({', '.join(items)})")
            elif isinstance(s, tir.Assert):
                lines.append(f"{pad}assert {fmt(s.cond)}, {s.message!r}")
            else:
                target = s.tensor if not s.indices else f"{s.tensor}[{', '.join(fmt(i) for i in s.indices)}]"
                lines.append(f"{pad}{target} = {fmt(s.value)}")

    block(k.body, 1)
    lines.append(f"    return {', '.join(k.outputs)}")
    return "\n".join(lines) + "\n"
