"""Python spellings rewritten into the language's core, right after parsing.

Every later stage (the checker, the interpreter, autodiff, the printers) sees only the core forms:

* **Tuple assignment**, with Python's semantics (the right side first, then the targets from
  left to right):

  - ``lo, hi = hi, lo`` and ``a[i], a[j] = a[j], a[i]``: one assignment per target, in order;
    a value that reads something an earlier target assigns is first copied into a fresh
    scalar (``lo_old = lo``), so that every value is the one from before the statement;
  - ``n, m = a.shape``, ``i, j = idx`` (a ``grid`` index), ``p, q = PAIR`` (a tuple constant):
    ``n = a.shape[0]`` and ``m = a.shape[1]``, the subscripts marked with the number of names
    so that the checker can say when the counts differ;
  - ``c, d = other(a)``, a call of another kernel, stays as it is (the checker inlines it).

* **Python's casts** ``int(x)``, ``float(x)`` and ``bool(x)``: the dtype casts ``int64(x)``,
  ``float64(x)`` and ``bool(x)``.

``Names``, the allocator of fresh names this rewrite uses, is also the one the autodiff passes
use for the names they make up.
"""
from __future__ import annotations

import math
from dataclasses import fields, replace

from ..errors import HybridTypeError, HybridUnsupportedError
from . import ast as syntax

# Python's conversion functions and the dtype cast each one is.
PYTHON_CASTS = {"int": "int64", "float": "float64"}
# Modules users reach for out of habit; the numbers they name (`-math.inf`, `np.pi`) are Python
# floats in a kernel (the checker names the rest of them as not available).
FOREIGN_MODULES = ("np", "numpy", "math", "torch", "jnp")
MODULE_NUMBERS = {"inf": math.inf, "nan": math.nan, "pi": math.pi, "e": math.e}


def desugar(module: syntax.Module, kernels_elsewhere=()) -> syntax.Module:
    """``module`` with its kernels' bodies in core forms (a new Module; the input is not changed).
    ``kernels_elsewhere``: names of kernels a call may reach that are not (yet) in the module (the
    kernels a ``@hyb.hybrid`` function captures)."""
    kernels = {}
    for name, k in module.kernels.items():
        rw = _Rewriter(module, k, frozenset(kernels_elsewhere))
        kernels[name] = replace(k, body=rw.block(k.body))
    return replace(module, kernels=kernels)


class Names:
    """The names taken so far in a kernel (and in a kernel derived from it).  A rewrite or pass
    that makes up names owns one, seeded from the names already in use; ``sep`` stands between a
    base and its number (``base_2`` with ``"_"``, ``base2`` with ``""``)."""

    def __init__(self, used=(), sep: str = "_"):
        self.used = set(used)
        self.sep = sep

    def fresh(self, base: str) -> str:
        """A name nothing uses yet: ``base``, else ``base{sep}2``, ``base{sep}3``, ..."""
        n, k = base, 1
        while n in self.used:
            k += 1
            n = f"{base}{self.sep}{k}"
        self.used.add(n)
        return n

    def take(self, n: str):
        self.used.add(n)


def _names(node, out: set):
    """Every name ``node`` mentions."""
    if isinstance(node, syntax.Name):
        out.add(node.id)
    if isinstance(node, list):
        for item in node:
            _names(item, out)
    elif isinstance(node, dict):
        for item in node.values():
            _names(item, out)
    elif isinstance(node, syntax.Node):
        for f in fields(node):
            _names(getattr(node, f.name), out)
    return out


class _Rewriter:
    def __init__(self, module: syntax.Module, k: syntax.KernelDef, elsewhere=frozenset()):
        self.module = module
        self.elsewhere = elsewhere
        self.names = Names(_names(k.body, set(module.constants) | set(module.kernels) | {p.name for p in k.params}),
                           sep="")
        # the kernel's own names (parameters, assigned names, loop variables): `math.inf` is a
        # number only where `math` is none of them
        self.bound = {p.name for p in k.params} | set(module.constants) | _targets(k.body, set())

    # ------------------------------------------------------------ statements
    def block(self, stmts: list) -> list:
        out = []
        for s in stmts:
            out.extend(self.stmt(s))
        return out

    def stmt(self, s) -> list:
        if isinstance(s, syntax.For):
            return [replace(s, iter=self.expr(s.iter), body=self.block(s.body))]
        if isinstance(s, syntax.If):
            return [replace(s, cond=self.expr(s.cond), body=self.block(s.body), orelse=self.block(s.orelse))]
        if isinstance(s, syntax.Assign):
            if isinstance(s.target, syntax.Tuple) and not self.kernel_call(s.value):
                return self.unpack(s)
            return [replace(s, target=self.expr(s.target), value=self.expr(s.value))]
        if isinstance(s, syntax.AugAssign):
            return [replace(s, target=self.expr(s.target), value=self.expr(s.value))]
        if isinstance(s, syntax.Return):
            return [replace(s, values=[self.expr(v) for v in s.values])]
        if isinstance(s, syntax.ExprStmt):
            return [replace(s, value=self.expr(s.value))]
        if isinstance(s, syntax.Assert):
            return [replace(s, test=self.expr(s.test))]
        return [s]

    def kernel_call(self, e) -> bool:
        return (isinstance(e, syntax.Call) and isinstance(e.func, syntax.Name)
                and (e.func.id in self.module.kernels or e.func.id in self.elsewhere))

    def unpack(self, s: syntax.Assign) -> list:
        targets = [self.expr(t) for t in s.target.elts]
        for t in targets:
            if isinstance(t, syntax.Tuple):
                raise HybridUnsupportedError("nested tuple targets are not supported", t.span,
                                             "unpack one level per statement")
            if not isinstance(t, (syntax.Name, syntax.Subscript)):
                raise HybridTypeError("cannot assign to this expression", t.span,
                                      "assign to names (`x, y = ...`) or tensor elements (`a[i], a[j] = ...`)")
        if not isinstance(s.value, syntax.Tuple):
            # a shape, a tuple constant or a grid index: element by element
            value = self.expr(s.value)
            n = len(targets)
            return [syntax.Assign(s.span, t, syntax.Subscript(value.span, value, [syntax.Num(t.span, k)], unpack=n))
                    for k, t in enumerate(targets)]
        values = [self.expr(v) for v in s.value.elts]
        if len(values) != len(targets):
            raise HybridTypeError(f"{len(values)} value{'s' if len(values) != 1 else ''} assigned to "
                                  f"{len(targets)} target{'s' if len(targets) != 1 else ''}", s.value.span,
                                  "write as many targets on the left as values on the right")
        copies, assigns = [], []
        assigned: set = set()  # names the targets before this one assign (a tensor, for an element)
        for t, v in zip(targets, values):
            if _names(v, set()) & assigned:
                temp = self.names.fresh(_temp_base(v))
                copies.append(syntax.Assign(s.span, syntax.Name(v.span, temp), v))
                v = syntax.Name(v.span, temp)
            assigns.append(syntax.Assign(s.span, t, v))
            assigned.add(t.id if isinstance(t, syntax.Name) else _base_name(t))
        return copies + assigns

    # ------------------------------------------------------------ expressions
    def number(self, e):
        """A Python float the expression spells (``float("-inf")``, ``math.inf``, ``np.pi``) as a
        literal, or None."""
        if (isinstance(e, syntax.Attribute) and isinstance(e.value, syntax.Name) and e.attr in MODULE_NUMBERS
                and e.value.id in FOREIGN_MODULES and e.value.id not in self.bound):
            return syntax.Num(e.span, MODULE_NUMBERS[e.attr])
        if (isinstance(e, syntax.Call) and isinstance(e.func, syntax.Name) and e.func.id == "float"
                and "float" not in self.bound and len(e.args) == 1 and not e.kwargs
                and isinstance(e.args[0], syntax.Str)):
            try:
                return syntax.Num(e.span, float(e.args[0].value))
            except ValueError:
                raise HybridTypeError(f"float() of {e.args[0].value!r}, which is not a number", e.args[0].span,
                                      'write a number, or "inf", "-inf" or "nan"') from None
        return None

    def expr(self, e):
        number = self.number(e)
        if number is not None:
            return number
        if isinstance(e, syntax.Call) and isinstance(e.func, syntax.Name) and e.func.id in PYTHON_CASTS \
                and e.func.id not in self.module.constants:
            e = replace(e, func=syntax.Name(e.func.span, PYTHON_CASTS[e.func.id]))
        if isinstance(e, syntax.Node):
            changes = {}
            for f in fields(e):
                v = getattr(e, f.name)
                if isinstance(v, syntax.Node):
                    changes[f.name] = self.expr(v)
                elif isinstance(v, list) and any(isinstance(x, syntax.Node) for x in v):
                    changes[f.name] = [self.expr(x) if isinstance(x, syntax.Node) else x for x in v]
                elif isinstance(v, dict) and any(isinstance(x, syntax.Node) for x in v.values()):
                    changes[f.name] = {k: self.expr(x) if isinstance(x, syntax.Node) else x for k, x in v.items()}
            if changes:
                e = replace(e, **changes)
        return e


def _targets(node, out: set) -> set:
    """The names ``node``'s statements assign or loop over."""
    if isinstance(node, list):
        for item in node:
            _targets(item, out)
    elif isinstance(node, (syntax.Assign, syntax.AugAssign, syntax.For)):
        _names(node.target, out)
        if isinstance(node, syntax.For):
            _targets(node.body, out)
    elif isinstance(node, syntax.If):
        _targets(node.body, out)
        _targets(node.orelse, out)
    return out


def _base_name(e) -> str | None:
    while isinstance(e, (syntax.Subscript, syntax.Attribute)):
        e = e.value
    return e.id if isinstance(e, syntax.Name) else None


def _temp_base(v) -> str:
    """A readable name for the copy of ``v``: ``x_old`` for a name, ``a_elt`` for an element."""
    if isinstance(v, syntax.Name):
        return v.id + "_old"
    base = _base_name(v)
    return (base + "_elt") if base else "value"
