"""Calls of other kernels, inlined before a kernel is differentiated.

``t = other(a)`` (or ``p, q = two(a)``, or ``other(a)`` alone) becomes the called kernel's body
with its parameters renamed to the arguments (tensor names), its output tensors to the targets,
and every other name it declares to a fresh one (``other_i``, ``other_s``), so that the
gradient sees one kernel of plain statements.  The checker inlines calls the same way for the
forward kernel; the gradient's source shows the inlined statements.
"""
from __future__ import annotations

from dataclasses import replace

from ..dsl import ast as syntax
from ..dsl.intrinsics import INTRINSICS
from ..dsl.scopes import BUILTIN_NAMES
from .tree import Names, rewrite, subst, unsupported, walk


def inline_calls(kdef: syntax.KernelDef, module: syntax.Module) -> syntax.KernelDef:
    """``kdef`` with every call of another kernel of ``module`` replaced by its body."""
    used = {p.name for p in kdef.params} | set(module.constants) | set(module.kernels)
    for s in kdef.body:
        for e in walk(s):
            if isinstance(e, syntax.Name):
                used.add(e.id)
    names = Names(used)
    body = _Inliner(module, names, [kdef.name]).block(kdef.body)
    return replace(kdef, body=body)


class _Inliner:
    def __init__(self, module: syntax.Module, names: Names, stack: list):
        self.module, self.names, self.stack = module, names, stack

    def call_of(self, e):
        if isinstance(e, syntax.Call) and isinstance(e.func, syntax.Name) and e.func.id in self.module.kernels:
            return self.module.kernels[e.func.id]
        return None

    def block(self, body: list) -> list:
        out = []
        for s in body:
            if isinstance(s, syntax.For):
                out.append(replace(s, body=self.block(s.body)))
            elif isinstance(s, syntax.If):
                out.append(replace(s, body=self.block(s.body), orelse=self.block(s.orelse)))
            elif isinstance(s, syntax.Assign) and self.call_of(s.value) is not None:
                targets = s.target.elts if isinstance(s.target, syntax.Tuple) else [s.target]
                out.extend(self.inline(self.call_of(s.value), s.value, targets))
            elif isinstance(s, syntax.ExprStmt) and self.call_of(s.value) is not None:
                out.extend(self.inline(self.call_of(s.value), s.value, None))
            else:
                for e in walk(s):
                    if self.call_of(e) is not None:
                        raise unsupported("a call of another kernel inside an expression", e,
                                          "assign the call's result to a name first: `t = other(a)`")
                out.append(s)
        return out

    def inline(self, callee: syntax.KernelDef, call: syntax.Call, targets) -> list:
        if callee.name in self.stack:
            raise unsupported("a recursive kernel call", call)
        if len(call.args) != len(callee.params):
            raise unsupported("a kernel call with another number of arguments than the kernel has parameters", call)
        body = callee.body
        # A tensor passed by name is the callee's parameter; a value (a number, an element, an
        # expression), and a name the callee assigns anew, is copied into a scalar of the callee's
        # own first, as Python passes it.
        mapping, prelude, views = {}, [], {}
        for p, a in zip(callee.params, call.args):
            if isinstance(a, syntax.Name) and not _rebinds(body, p.name):
                mapping[p.name] = a.id
            elif _indexes(body, p.name):
                # a row of a tensor (`cams[c]`, `out[n]`) where the callee takes a tensor: a view,
                # its subscripts after the row's (each computed once, at the call)
                if not (isinstance(a, syntax.Subscript) and isinstance(a.value, syntax.Name)) or _rebinds(body, p.name):
                    raise unsupported("a kernel call passing an expression where the kernel takes a tensor", a,
                                      "pass a tensor or a row of one (`t[i]`)")
                prefix = []
                for x in a.indices:
                    if isinstance(x, (syntax.Name, syntax.Num)):
                        prefix.append(x)
                    else:
                        own = self.names.fresh(f"{callee.name}_{p.name}_at")
                        prelude.append(syntax.Assign(x.span, syntax.Name(x.span, own), x))
                        prefix.append(syntax.Name(x.span, own))
                views[p.name] = (a.value.id, prefix)
            else:
                own = self.names.fresh(f"{callee.name}_{p.name}")
                prelude.append(syntax.Assign(a.span, syntax.Name(a.span, own), a))
                mapping[p.name] = own
        ret = body[-1] if body and isinstance(body[-1], syntax.Return) else None
        outputs = [v.id for v in ret.values] if ret is not None else []
        if targets is not None:
            if len(targets) != len(outputs) or not all(isinstance(t, syntax.Name) for t in targets):
                raise unsupported("a kernel call whose results are not assigned to one name each", call)
            for out, t in zip(outputs, targets):
                if out in mapping:
                    raise unsupported("a call of a kernel that returns its input", call,
                                      "return a tensor made by output_tensor(...) in the called kernel")
                mapping[out] = t.id
        declared = set()
        for s in body:
            for e in walk(s):
                if isinstance(e, syntax.Name) and e.id not in mapping and e.id not in views:
                    declared.add(e.id)
        for n in sorted(declared):
            if n in self.module.constants or n in self.module.kernels or _is_builtin(n):
                continue
            mapping[n] = self.names.fresh(f"{callee.name}_{n}")
        renamed = [_viewed(subst(s, mapping), views, call) for s in (body[:-1] if ret is not None else body)]
        self.stack.append(callee.name)
        try:
            return self.block(prelude + renamed)
        finally:
            self.stack.pop()


def _is_builtin(n: str) -> bool:
    return n in BUILTIN_NAMES or n in INTRINSICS or n in ("True", "False", "print")


def _rebinds(body: list, name: str) -> bool:
    """Whether ``body`` assigns the name itself (``p = ...``, ``p += ...``), not an element of it."""
    for s in body:
        if isinstance(s, (syntax.Assign, syntax.AugAssign)) and isinstance(s.target, syntax.Name) \
                and s.target.id == name:
            return True
        if isinstance(s, syntax.For) and _rebinds(s.body, name):
            return True
        if isinstance(s, syntax.If) and (_rebinds(s.body, name) or _rebinds(s.orelse, name)):
            return True
    return False


def _indexes(body: list, name: str) -> bool:
    """Whether ``body`` uses ``name`` as a tensor: subscripts it, or asks its shape, dtype or length."""
    for s in body:
        for e in walk(s):
            if isinstance(e, syntax.Subscript) and isinstance(e.value, syntax.Name) and e.value.id == name:
                return True
            if isinstance(e, syntax.Attribute) and isinstance(e.value, syntax.Name) and e.value.id == name:
                return True
            if isinstance(e, syntax.Call) and isinstance(e.func, syntax.Name) and e.func.id == "len" and e.args \
                    and isinstance(e.args[0], syntax.Name) and e.args[0].id == name:
                return True
    return False


def _viewed(stmt, views: dict, call):
    """``stmt`` with each parameter bound to a row read through that row: ``p[k]`` is
    ``t[i, k]``, ``p.shape[k]`` is ``t.shape[k + 1]``, ``len(p)`` is ``t.shape[1]``."""
    if not views:
        return stmt

    def shape_of(base, k, span):
        return syntax.Subscript(span, syntax.Attribute(span, syntax.Name(span, base), "shape"), [syntax.Num(span, k)])

    def replace(x):
        if isinstance(x, syntax.Subscript) and isinstance(x.value, syntax.Name) and x.value.id in views:
            base, prefix = views[x.value.id]
            return syntax.Subscript(x.span, syntax.Name(x.value.span, base),
                                    list(prefix) + [rewrite(i, replace) for i in x.indices])
        if (isinstance(x, syntax.Subscript) and isinstance(x.value, syntax.Attribute) and x.value.attr == "shape"
                and isinstance(x.value.value, syntax.Name) and x.value.value.id in views
                and len(x.indices) == 1 and isinstance(x.indices[0], syntax.Num)):
            base, prefix = views[x.value.value.id]
            return shape_of(base, x.indices[0].value + len(prefix), x.span)
        if isinstance(x, syntax.Attribute) and isinstance(x.value, syntax.Name) and x.value.id in views \
                and x.attr == "dtype":
            return syntax.Attribute(x.span, syntax.Name(x.value.span, views[x.value.id][0]), "dtype")
        if isinstance(x, syntax.Call) and isinstance(x.func, syntax.Name) and x.func.id == "len" and x.args \
                and isinstance(x.args[0], syntax.Name) and x.args[0].id in views:
            base, prefix = views[x.args[0].id]
            return shape_of(base, len(prefix), x.span)
        if isinstance(x, syntax.Name) and x.id in views:
            raise unsupported("a row of a tensor passed to a kernel that uses it whole", call,
                              "index the row in the called kernel, or pass the whole tensor and the row's index")
        return None

    return rewrite(stmt, replace)
