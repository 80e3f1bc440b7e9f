"""Size expressions: the one form they are kept in outside the checker, and their one evaluator.

A size expression (:func:`hyb.dsl.folding.is_size_expression`) is an integer computed from a
shape-generic kernel's run-time sizes (``hs_<input>_<axis>``, :class:`~hyb.dsl.tir.Size`) and
integer constants with ``+ - * // %``, unary ``-``, ``max``, ``min``, ``ceil_div`` and integer
casts.  Where it must outlive the typed IR (a :class:`~hyb.codegen.abi.CheckSite`'s shape, which
the disk cache stores) it is kept as the text :func:`hyb.dsl.printer.fmt` writes (:func:`text`);
:func:`value` reads that text with the small parser below (it is never run as Python) and
evaluates it for the sizes of one call.

Arithmetic is the constant folder's (:func:`hyb.dsl.folding.fold`,
:func:`~hyb.dsl.folding.fold_intrinsic`), NumPy's on integers: ``//`` floors, ``%`` takes the
divisor's sign, and ``//``, ``%`` and ``ceil_div`` by zero give 0, as NumPy's integer loops and
the compiled code (:mod:`hyb.codegen.legalise`) do.  A cast leaves the value as it is (sizes
and the expressions of them stay far inside every integer dtype).
"""
from __future__ import annotations

import functools
import re

from ..errors import HybridInternalError
from . import types
from .folding import fold, fold_intrinsic
from .printer import fmt

_CASTS = frozenset((types.WEAK_INT, *types.SIGNED, *types.UNSIGNED))
_CALLS = frozenset(("max", "min", "ceil_div")) | _CASTS
_TOKEN = re.compile(r"\s*(?:(\d+)|([A-Za-z_]\w*)|(//|[-+*%(),]))")


def text(d):
    """A shape's entry in its kept form: an int as it is, a size expression as its text."""
    return d if isinstance(d, int) else fmt(d)


def value(d, sizes: dict) -> int:
    """The value of a shape's entry (an int, a size expression, or its :func:`text`) at ``sizes``
    (size name -> value)."""
    if isinstance(d, int):
        return d
    return _evaluate(parse(d if isinstance(d, str) else fmt(d)), sizes)


@functools.lru_cache(maxsize=1024)
def parse(source: str):
    """The tree of a size expression's text: an int, ``("size", name)``, ``("neg", a)``,
    ``(op, a, b)`` for ``+ - * // %``, or ``("call", name, args)`` for an intrinsic or a cast."""
    tokens, pos = [], 0
    while pos < len(source):
        m = _TOKEN.match(source, pos)
        if m is None or m.end() == pos:
            if source[pos:].strip():
                raise HybridInternalError(f"size expression {source!r}: unexpected {source[pos:]!r}", "runtime")
            break
        tokens.append(int(m.group(1)) if m.group(1) else ("name", m.group(2)) if m.group(2) else m.group(3))
        pos = m.end()
    tree, at = _Parser(source, tokens).expr(0)
    if at != len(tokens):
        raise HybridInternalError(f"size expression {source!r}: text after the expression", "runtime")
    return tree


class _Parser:
    """Recursive descent over the tokens, with Python's precedence (as ``fmt`` parenthesises)."""

    def __init__(self, source: str, tokens: list):
        self.source = source
        self.tokens = tokens

    def fail(self):
        raise HybridInternalError(f"size expression {self.source!r} is not one hyb writes", "runtime")

    def peek(self, at: int):
        return self.tokens[at] if at < len(self.tokens) else None

    def expect(self, at: int, token: str) -> int:
        if self.peek(at) != token:
            self.fail()
        return at + 1

    def expr(self, at: int):
        tree, at = self.term(at)
        while self.peek(at) in ("+", "-"):
            op = self.tokens[at]
            right, at = self.term(at + 1)
            tree = (op, tree, right)
        return tree, at

    def term(self, at: int):
        tree, at = self.unary(at)
        while self.peek(at) in ("*", "//", "%"):
            op = self.tokens[at]
            right, at = self.unary(at + 1)
            tree = (op, tree, right)
        return tree, at

    def unary(self, at: int):
        if self.peek(at) == "-":
            tree, at = self.unary(at + 1)
            return ("neg", tree), at
        return self.atom(at)

    def atom(self, at: int):
        tok = self.peek(at)
        if isinstance(tok, int):
            return tok, at + 1
        if tok == "(":
            tree, at = self.expr(at + 1)
            return tree, self.expect(at, ")")
        if not isinstance(tok, tuple):
            self.fail()
        name = tok[1]
        if self.peek(at + 1) != "(":
            return ("size", name), at + 1
        if name not in _CALLS:
            self.fail()
        args, at = [], at + 2
        while True:
            arg, at = self.expr(at)
            args.append(arg)
            if self.peek(at) != ",":
                break
            at += 1
        return ("call", name, tuple(args)), self.expect(at, ")")


def _evaluate(tree, sizes: dict) -> int:
    if isinstance(tree, int):
        return tree
    head = tree[0]
    if head == "size":
        if tree[1] not in sizes:
            raise HybridInternalError(f"size expression: no value for `{tree[1]}`", "runtime")
        return int(sizes[tree[1]])
    if head == "neg":
        return -_evaluate(tree[1], sizes)
    if head == "call":
        args = [_evaluate(a, sizes) for a in tree[2]]
        if tree[1] in _CASTS:
            return args[0]
        return functools.reduce(lambda x, y: fold_intrinsic(tree[1], [x, y]), args)
    return fold(head, _evaluate(tree[1], sizes), _evaluate(tree[2], sizes))
