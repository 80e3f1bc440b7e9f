"""Affine forms: what the reverse-mode passes know about a subscript or a loop bound.

An affine form is a dict mapping a loop variable (a ``str``) to its coefficient, a symbol
``("sym", text)`` (an expression fixed while the kernel runs, such as ``a.shape[0]``) to its
coefficient, ``("ast", text)`` to that symbol's syntax tree (so it can be written back), and
``None`` to the constant.  ``affine_form`` reads one from an expression; ``aff_add``,
``aff_scale`` and ``aff_expr`` do arithmetic on forms and turn them back into expressions.
``factors`` splits a product into the factors that make it zero.
"""
from __future__ import annotations

from ..dsl import ast as syntax
from ..dsl.unparse import expr as unparse_expr
from . import rules
from .rules import add, name, num
from .tree import value_walk, walk


def affine_form(e, loop_vars, known_only_at_run_time):
    """``e`` as {loop var: coef, ("sym", text): coef, ("ast", text): ast, None: const}, or None where it is
    not affine.  ``loop_vars`` holds the loop variables; ``known_only_at_run_time(n)`` says whether a
    name other than a loop variable has a value the compiler cannot treat as a fixed symbol."""
    if rules.is_num(e) and isinstance(e.value, int):
        return {None: e.value}
    if isinstance(e, syntax.Name) and e.id in loop_vars:
        return {e.id: 1}
    if not any(isinstance(x, syntax.Name) and x.id in loop_vars for x in walk(e)):
        if any(isinstance(x, syntax.Subscript) and not isinstance(x.value, syntax.Attribute) for x in walk(e)):
            return None
        if any(isinstance(x, syntax.Name) and known_only_at_run_time(x.id) for x in value_walk(e)):
            return None  # known only when the kernel runs
        return {("sym", unparse_expr(e)): 1, ("ast", unparse_expr(e)): e}
    if isinstance(e, syntax.BinOp) and e.op in ("+", "-"):
        a = affine_form(e.left, loop_vars, known_only_at_run_time)
        b = affine_form(e.right, loop_vars, known_only_at_run_time)
        if a is None or b is None:
            return None
        return aff_add(a, b, 1 if e.op == "+" else -1)
    if isinstance(e, syntax.BinOp) and e.op == "*":
        a = affine_form(e.left, loop_vars, known_only_at_run_time)
        b = affine_form(e.right, loop_vars, known_only_at_run_time)
        if a is None or b is None:
            return None
        if set(a) <= {None}:
            return aff_scale(b, a.get(None, 0))
        if set(b) <= {None}:
            return aff_scale(a, b.get(None, 0))
        return None
    if isinstance(e, syntax.UnaryOp) and e.op == "-":
        a = affine_form(e.operand, loop_vars, known_only_at_run_time)
        return None if a is None else aff_scale(a, -1)
    return None


def aff_add(a: dict, b: dict, sign: int) -> dict:
    out = dict(a)
    for k, v in b.items():
        if isinstance(k, tuple) and k[0] == "ast":
            out[k] = v
            continue
        out[k] = out.get(k, 0) + sign * v
    return out


def aff_scale(a: dict, c: int) -> dict:
    return {k: (v if isinstance(k, tuple) and k[0] == "ast" else v * c) for k, v in a.items()}


def aff_expr(aff: dict):
    e = None
    for k, v in aff.items():
        if v != 0 and (isinstance(k, str) or (isinstance(k, tuple) and k[0] == "sym")):
            term = rules.mul(num(abs(v)), name(k) if isinstance(k, str) else aff[("ast", k[1])])
            if e is None:
                e = term if v > 0 else rules.neg(term)
            else:
                e = add(e, term) if v > 0 else rules.sub(e, term)
    c = aff.get(None, 0)
    if e is None:
        return num(c)
    return add(e, num(c)) if c > 0 else (rules.sub(e, num(-c)) if c < 0 else e)


def unit_step(aff, var) -> bool:
    """Whether affine form ``aff`` (None: not affine) is ``var`` plus a constant."""
    return aff is not None and set(k for k in aff if k is not None) == {var} and aff[var] == 1


def factors(e) -> list:
    """The factors of a product (``a * b / c`` -> a, b): each is zero only if the whole is."""
    if isinstance(e, syntax.BinOp) and e.op == "*":
        return factors(e.left) + factors(e.right)
    if isinstance(e, syntax.BinOp) and e.op == "/":
        return factors(e.left)
    if isinstance(e, syntax.UnaryOp) and e.op == "-":
        return factors(e.operand)
    return [e]
