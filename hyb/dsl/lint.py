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
from . import deep
from .check_expr import (TENSOR_ATTRIBUTES, astype_error, attribute_error, foreign_error,
                         intrinsic_arity_error, is_foreign, kernel_arity_error, kernel_in_expression_error,
                         loop_iterable_error, outside_error, unknown_function_error)
from .intrinsics import INTRINSICS
from .scopes import BUILTIN_NAMES, CAST_NAMES, LOOP_KINDS, TENSOR_MAKERS


def prints(module: syntax.Module) -> list:
    """``(kernel name, span)`` of every ``print(...)`` call of the module's kernels."""
    return deep.call(deep.depth(module), _prints, module)


def _prints(module: syntax.Module) -> list:
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


def lint(module: syntax.Module, names=None) -> list:
    """The errors of the kernels of ``module`` (of those named ``names``), in the order of the
    text: every unknown name of a line, not only the first (an empty list: nothing found)."""
    return deep.call(deep.depth(module), _lint, module, names)


def _lint(module: syntax.Module, names) -> list:
    found = []
    for k in module.kernels.values():
        if names is None or k.name in names:
            linter = _Linter(module, k)
            linter.run()
            found.extend(sorted(linter.found, key=lambda e: (e.line or 0, e.col or 0)))
    return found


class _Linter:
    def __init__(self, module: syntax.Module, k: syntax.KernelDef):
        self.module = module
        self.k = k
        # Names a kernel may read: its parameters, anything it assigns or loops over (the block
        # rules that decide where each is visible are the checker's, with a signature), module
        # constants, other kernels and the built-ins.
        self.known = {p.name for p in k.params} | set(module.constants) | set(module.kernels)
        self.found: list = []  # the errors met; each stops only the statement or expression it is in
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
            try:
                self.stmt(s)
            except HybridError as e:
                self.found.append(e)

    def stmt(self, s):
        if isinstance(s, syntax.For):
            it = s.iter
            if not (isinstance(it, syntax.Call) and isinstance(it.func, syntax.Name)
                    and (it.func.id in LOOP_KINDS or it.func.id in ("grid", "bind"))):
                raise loop_iterable_error(it, lambda n: n in self.known)
            for a in it.args[1:] if it.func.id == "bind" else it.args:  # (bind's first: a GPU index's name)
                self.expr(a)
            self.block(s.body)
        elif isinstance(s, syntax.If):
            self.expr(s.cond)
            self.block(s.body)
            self.block(s.orelse)
        elif isinstance(s, syntax.Assign):
            self.value(s.value)
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
            self.value(s.value)

    def value(self, e):
        """A statement's value: a call of another kernel may stand here (nowhere deeper)."""
        if (isinstance(e, syntax.Call) and isinstance(e.func, syntax.Name) and e.func.id in self.module.kernels):
            err = kernel_arity_error(self.module.kernels[e.func.id], e)
            if err is not None:
                raise err
            for a in list(e.args) + list(e.kwargs.values()):
                self.expr(a)
            return
        self.expr(e)

    # ------------------------------------------------------------ expressions
    def expr(self, e):
        try:
            self.subexpr(e)
        except HybridError as err:
            self.found.append(err)

    def subexpr(self, e):
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
        err = outside_error(self.module, e)
        if err is not None:
            raise err
        close = difflib.get_close_matches(e.id, sorted(self.known) + list(BUILTIN_NAMES), 1)
        raise HybridNameError(f"unknown name `{e.id}`", e.span, f"did you mean `{close[0]}`?" if close else None)

    def lookup(self, n: str):
        return n if n in self.known else None

    def attribute(self, e: syntax.Attribute, call: bool = False):
        if is_foreign(e, self.lookup):
            raise foreign_error(e, call)
        self.expr(e.value)
        if e.attr not in TENSOR_ATTRIBUTES:
            raise attribute_error(e)

    def call(self, e: syntax.Call):
        for a in list(e.args) + list(e.kwargs.values()):
            self.expr(a)
        f = e.func
        if isinstance(f, syntax.Attribute):
            if f.attr == "dtype" and not is_foreign(f, self.lookup):  # x.dtype(v): a cast
                self.expr(f.value)
                return
            if f.attr == "astype" and not is_foreign(f, self.lookup):
                raise astype_error(e)
            self.attribute(f, call=True)
            return
        if not isinstance(f, syntax.Name):
            raise HybridTypeError("only built-in functions can be called", f.span, None)
        name = f.id
        if name in self.module.kernels:
            raise kernel_in_expression_error(e)
        if name in INTRINSICS:
            err = intrinsic_arity_error(name, e)
            if err is not None:
                raise err
            return
        if name in CAST_NAMES or name in TENSOR_MAKERS or name in ("len", "print", "max_num_threads", "likely") \
                or name in self.known:
            return
        if name in LOOP_KINDS or name in ("grid", "bind"):
            raise HybridTypeError(f"{name}(...) is only allowed as the iterable of a `for` loop", e.span, None)
        raise unknown_function_error(name, f.span, list(INTRINSICS) + list(BUILTIN_NAMES))
