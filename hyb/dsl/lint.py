"""What can be checked in a kernel without knowing its arguments' shapes and dtypes.

``hyb check FILE`` (no ``--args``) runs this over every kernel of a file: unknown names, unknown
and misspelled functions, the number of arguments of built-in functions and of calls of other
kernels, attributes other than ``.shape``/``.dtype``/``.ndim``, loops over something other than
``range``-like hints, NumPy's spellings (``np.exp``), and ``return`` of something other than
names.  Errors are the checker's own (same classes, messages and places); everything that
needs types (dtypes, ranks, bounds) waits for a signature.
"""
from __future__ import annotations

import difflib

from ..errors import HybridError, HybridNameError, HybridTypeError
from . import ast as syntax
from .check_expr import FOREIGN_FUNCTIONS, FOREIGN_MODULES
from .intrinsics import INTRINSICS
from .scopes import BUILTIN_NAMES, CAST_NAMES, LOOP_KINDS, TENSOR_MAKERS
from .types import ALL_DTYPES

_ATTRIBUTES = ("shape", "dtype", "ndim")


def prints(module: syntax.Module) -> list:
    """``(kernel name, span)`` of every ``print(...)`` call of the module's kernels."""
    out = []

    def walk(node, kernel):
        if isinstance(node, syntax.Call) and isinstance(node.func, syntax.Name) and node.func.id == "print":
            out.append((kernel, node.span))
        if isinstance(node, syntax.Node):
            for value in vars(node).values():
                for item in (value if isinstance(value, list) else [value]):
                    walk(item, kernel)

    for k in module.kernels.values():
        for s in k.body:
            walk(s, k.name)
    return out


def lint(module: syntax.Module) -> list:
    """The first error of each kernel of ``module`` (an empty list: nothing found)."""
    found = []
    for k in module.kernels.values():
        try:
            _Linter(module, k).run()
        except HybridError as e:
            found.append(e)
    return found


class _Linter:
    def __init__(self, module: syntax.Module, k: syntax.KernelDef):
        self.module = module
        self.k = k
        # Names a kernel may read: its parameters, anything it assigns or loops over (the block
        # rules that decide where each is visible are the checker's, with a signature), module
        # constants, other kernels and the built-ins.
        self.known = {p.name for p in k.params} | set(module.constants) | set(module.kernels)
        self._assigned(k.body)

    def _assigned(self, body):
        for s in body:
            if isinstance(s, syntax.Assign):
                for t in (s.target.elts if isinstance(s.target, syntax.Tuple) else [s.target]):
                    if isinstance(t, syntax.Name):
                        self.known.add(t.id)
            elif isinstance(s, syntax.For):
                self.known.add(s.target.id)
                self._assigned(s.body)
            elif isinstance(s, syntax.If):
                self._assigned(s.body)
                self._assigned(s.orelse)

    def run(self):
        self.block(self.k.body)

    # ------------------------------------------------------------ statements
    def block(self, body):
        for s in body:
            self.stmt(s)

    def stmt(self, s):
        if isinstance(s, syntax.For):
            it = s.iter
            if not (isinstance(it, syntax.Call) and isinstance(it.func, syntax.Name)
                    and (it.func.id in LOOP_KINDS or it.func.id == "grid")):
                if isinstance(it, syntax.Call) and isinstance(it.func, syntax.Name) and it.func.id not in self.known:
                    close = difflib.get_close_matches(it.func.id, list(LOOP_KINDS) + ["grid"], 1)
                    raise HybridNameError(f"unknown function `{it.func.id}`", it.func.span,
                                          f"did you mean `{close[0]}`?" if close else None)
                raise HybridTypeError("a `for` loop must iterate over range(...)", it.span,
                                      "write `for i in range(n):` (or serial/parallel/vectorize/unroll/reduce)")
            for a in it.args:
                self.expr(a)
            self.block(s.body)
        elif isinstance(s, syntax.If):
            self.expr(s.cond)
            self.block(s.body)
            self.block(s.orelse)
        elif isinstance(s, syntax.Assign):
            self.expr(s.value)
            targets = s.target.elts if isinstance(s.target, syntax.Tuple) else [s.target]
            for t in targets:
                if isinstance(t, syntax.Subscript):
                    self.expr(t)
        elif isinstance(s, syntax.AugAssign):
            self.expr(s.target)
            self.expr(s.value)
        elif isinstance(s, syntax.Return):
            for v in s.values:
                if not isinstance(v, syntax.Name):
                    raise HybridTypeError("a kernel returns tensors by name", v.span,
                                          "store the value into a tensor made by output_tensor(...) and return it")
                self.expr(v)
        elif isinstance(s, syntax.Assert):
            self.expr(s.test)
        elif isinstance(s, syntax.ExprStmt):
            self.expr(s.value)

    # ------------------------------------------------------------ expressions
    def expr(self, e):
        if isinstance(e, syntax.Name):
            self.name(e)
        elif isinstance(e, syntax.Call):
            self.call(e)
        elif isinstance(e, syntax.Attribute):
            self.attribute(e)
        elif isinstance(e, syntax.Node):
            for value in vars(e).values():
                for item in (value if isinstance(value, list) else [value]):
                    if isinstance(item, syntax.Node):
                        self.expr(item)

    def name(self, e: syntax.Name):
        if e.id in self.known or e.id in BUILTIN_NAMES or e.id in INTRINSICS or e.id in ("True", "False"):
            return
        if e.id in FOREIGN_MODULES:
            raise HybridNameError(f"`{e.id}` is not available inside kernels", e.span,
                                  "kernels use their own built-in functions (exp, sqrt, max, ...) and loops; "
                                  "see the README's list")
        outside = self.module.outside.get(e.id)
        if outside is not None:
            raise HybridNameError(f"unknown name `{e.id}`", e.span,
                                  f"`{e.id}` is {outside} outside the kernel, which kernels cannot read: "
                                  "pass it as an argument")
        close = difflib.get_close_matches(e.id, sorted(self.known) + list(BUILTIN_NAMES), 1)
        raise HybridNameError(f"unknown name `{e.id}`", e.span, f"did you mean `{close[0]}`?" if close else None)

    def attribute(self, e: syntax.Attribute):
        if isinstance(e.value, syntax.Name) and e.value.id in FOREIGN_MODULES and e.value.id not in self.known:
            attr = e.attr
            if attr in ALL_DTYPES:
                raise HybridNameError(f"`{e.value.id}.{attr}` is NumPy's name of a dtype; kernels write dtypes "
                                      "as strings", e.span, f'write "{attr}"')
            name = FOREIGN_FUNCTIONS.get(attr, attr)
            if name in INTRINSICS:
                raise HybridNameError(f"`{e.value.id}.{attr}` is not available inside kernels", e.span,
                                      f"write `{name}(...)`: the built-in `{name}` computes what NumPy's does")
            raise HybridNameError(f"`{e.value.id}` is not available inside kernels", e.value.span,
                                  "kernels use their own built-in functions (exp, sqrt, max, ...) and loops; "
                                  "see the README's list")
        self.expr(e.value)
        if e.attr not in _ATTRIBUTES:
            close = difflib.get_close_matches(e.attr, list(_ATTRIBUTES), 1)
            raise HybridTypeError(f"tensors have no attribute `{e.attr}`", e.span,
                                  f"did you mean `.{close[0]}`?" if close else "tensors have .shape, .dtype and .ndim")

    def call(self, e: syntax.Call):
        for a in list(e.args) + list(e.kwargs.values()):
            self.expr(a)
        f = e.func
        if isinstance(f, syntax.Attribute):
            if f.attr == "dtype":  # x.dtype(v): a cast
                self.expr(f.value)
                return
            self.attribute(f)
            return
        if not isinstance(f, syntax.Name):
            raise HybridTypeError("only built-in functions can be called", f.span, None)
        name = f.id
        if name in self.module.kernels:
            callee = self.module.kernels[name]
            if len(e.args) != len(callee.params):
                raise HybridTypeError(f"kernel `{name}` takes {len(callee.params)} argument(s), got {len(e.args)}",
                                      e.span, f"{name}({', '.join(p.name for p in callee.params)})")
            return
        if name in INTRINSICS:
            params = INTRINSICS[name]
            n = len(params.split(", "))
            if (len(e.args) < 2) if params.endswith("...") else (len(e.args) != n):
                need = "at least 2 arguments" if params.endswith("...") else f"{n} argument{'s' if n != 1 else ''}"
                raise HybridTypeError(f"{name}() takes {need}, got {len(e.args)}", e.span, f"{name}({params})")
            return
        if name in CAST_NAMES or name in TENSOR_MAKERS or name in ("len", "print") or name in self.known:
            return
        if name in LOOP_KINDS or name == "grid":
            raise HybridTypeError(f"{name}(...) is only allowed as the iterable of a `for` loop", e.span, None)
        close = difflib.get_close_matches(name, list(INTRINSICS) + list(BUILTIN_NAMES), 1)
        raise HybridNameError(f"unknown function `{name}`", f.span, f"did you mean `{close[0]}`?" if close else None)
