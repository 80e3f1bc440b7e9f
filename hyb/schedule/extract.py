"""Polyhedral extraction: typed kernel → isl statements.

One statement per store.  Its domain is the set of iterations of the enclosing loops that
satisfy the affine guards; its accesses are isl maps from that domain to tensor elements;
its original schedule is the usual ``2d+1`` encoding of program order.  Conditions that are
not affine are kept as *guards* on the statement and evaluated when it runs.

Every affine access is checked here against its tensor's shape: an access that can leave
the tensor for some iteration is a compile-time error naming such an iteration.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import islpy as isl

from ..dsl import tir as T
from ..dsl import types as ty
from ..errors import HybridIndexError, HybridUnsupportedError


@dataclass
class Access:
    tensor: str
    relation: isl.Map  # statement domain -> tensor element (restricted to where it happens)
    exact: bool  # False when the indices are not affine (the whole tensor may be touched)
    span: object = None


@dataclass
class Statement:
    name: str
    store: T.Store
    iters: list  # loop variables, outermost first
    domain: isl.Set
    schedule: isl.Map  # original program order
    guards: list  # non-affine conditions, all must hold
    write: Access
    reads: list = field(default_factory=list)


@dataclass
class PolyProgram:
    kernel: T.TypedKernel
    statements: list
    depth: int  # the deepest loop nest

    @property
    def by_name(self) -> dict:
        return {s.name: s for s in self.statements}

    def union(self, what: str) -> isl.UnionMap | isl.UnionSet:
        if what == "domain":
            u = isl.UnionSet.empty(isl.Space.params_alloc(isl.DEFAULT_CONTEXT, 0))
            for s in self.statements:
                u = u.union(isl.UnionSet.from_set(s.domain))
            return u
        u = isl.UnionMap.empty(isl.Space.params_alloc(isl.DEFAULT_CONTEXT, 0))
        for s in self.statements:
            if what == "schedule":
                maps = [s.schedule]
            elif what == "must_writes":
                maps = [s.write.relation] if s.write.exact and not s.guards else []
            elif what == "may_writes":
                maps = [s.write.relation]
            elif what == "reads":
                maps = [r.relation for r in s.reads]
            else:
                raise ValueError(what)
            for m in maps:
                u = u.union(isl.UnionMap.from_map(m))
        return u


def iname(var: str) -> str:
    """The isl name of a loop variable (prefixed so that it never clashes with isl keywords)."""
    return "h_" + var


class _NotAffine(Exception):
    pass


def const_int(e: T.TExpr) -> int | None:
    """The value of an integer expression made of constants only, else None."""
    if isinstance(e, T.Const):
        return e.value if isinstance(e.value, int) and not isinstance(e.value, bool) else None
    if isinstance(e, T.Cast) and ty.is_int(e.dtype) and ty.is_int(e.a.dtype):
        return const_int(e.a)
    if isinstance(e, T.Unary) and e.op == "neg":
        v = const_int(e.a)
        return None if v is None else -v
    if isinstance(e, T.Bin) and ty.is_int(e.dtype) and e.op in ("+", "-", "*"):
        a, b = const_int(e.a), const_int(e.b)
        if a is None or b is None:
            return None
        return a + b if e.op == "+" else a - b if e.op == "-" else a * b
    return None


def affine(e: T.TExpr) -> str:
    """isl text of an integer expression that is affine in loop variables, else raise _NotAffine."""
    if isinstance(e, T.Const):
        if isinstance(e.value, bool) or not isinstance(e.value, int):
            raise _NotAffine
        return f"({e.value})"
    if isinstance(e, T.Var):
        return iname(e.name)
    if isinstance(e, T.Cast) and ty.is_int(e.dtype) and ty.is_int(e.a.dtype):
        return affine(e.a)
    if isinstance(e, T.Unary) and e.op == "neg":
        return f"(-{affine(e.a)})"
    if isinstance(e, T.Bin) and ty.is_int(e.dtype):
        if e.op in ("+", "-"):
            return f"({affine(e.a)} {e.op} {affine(e.b)})"
        if e.op == "*":
            ca, cb = const_int(e.a), const_int(e.b)
            if ca is not None:
                return f"({ca} * {affine(e.b)})"
            if cb is not None:
                return f"({cb} * {affine(e.a)})"
            raise _NotAffine
        if e.op in ("//", "%") and isinstance(e.b, T.Const) and isinstance(e.b.value, int) and e.b.value > 0:
            if e.op == "//":
                return f"floor({affine(e.a)} / {e.b.value})"
            return f"({affine(e.a)} mod {e.b.value})"
    raise _NotAffine


def affine_cond(e: T.TExpr, negate: bool = False) -> str:
    """isl text of a condition built from affine comparisons, else raise _NotAffine."""
    if isinstance(e, T.Const) and ty.is_bool(e.dtype):
        return "1 = 1" if bool(e.value) != negate else "1 = 0"
    if isinstance(e, T.Unary) and e.op == "not":
        return affine_cond(e.a, not negate)
    if isinstance(e, T.Logic):
        op = e.op
        if negate:
            op = "or" if op == "and" else "and"
        return f"(({affine_cond(e.a, negate)}) {op} ({affine_cond(e.b, negate)}))"
    if isinstance(e, T.Cmp) and ty.is_int(e.a.dtype):
        op = e.op
        if negate:
            op = {"<": ">=", "<=": ">", ">": "<=", ">=": "<", "==": "!=", "!=": "=="}[op]
        a, b = affine(e.a), affine(e.b)
        if op == "==":
            return f"{a} = {b}"
        if op == "!=":
            return f"({a} < {b} or {a} > {b})"
        return f"{a} {op} {b}"
    raise _NotAffine


@dataclass
class _Ctx:
    iters: list
    conds: list  # isl condition texts
    guards: list  # non-affine TExprs
    position: list  # schedule positions (one more than iters)
    signs: list  # +1 / -1 per loop (negative steps run backwards)


class _Extractor:
    def __init__(self, k: T.TypedKernel):
        self.k = k
        self.statements: list = []
        self.depth = 0

    def run(self) -> PolyProgram:
        self.block(self.k.body, _Ctx([], [], [], [0], []))
        D = self.depth
        for s in self.statements:
            s.schedule = self._schedule(s, D)
        return PolyProgram(self.k, self.statements, D)

    def _schedule(self, s: Statement, D: int) -> isl.Map:
        pos, signs = s.schedule  # stashed (positions, signs) until the depth is known
        out = []
        for lvl in range(D + 1):
            out.append(str(pos[lvl]) if lvl < len(pos) else "0")
            if lvl < D:
                if lvl < len(s.iters):
                    v = iname(s.iters[lvl])
                    out.append(v if signs[lvl] > 0 else f"-{v}")
                else:
                    out.append("0")
        dom = ", ".join(iname(v) for v in s.iters)
        return isl.Map(f"{{ {s.name}[{dom}] -> [{', '.join(out)}] }}").intersect_domain(s.domain)

    def block(self, body: list, ctx: _Ctx):
        for st in body:
            if isinstance(st, T.Loop):
                self.depth = max(self.depth, len(ctx.iters) + 1)
                v = iname(st.var)
                try:
                    lo, hi = affine(st.start), affine(st.stop)
                except _NotAffine:
                    raise HybridUnsupportedError(
                        "loop bounds that are not affine (data-dependent or products of loop variables) "
                        "are not supported yet", st.span,
                        "use bounds built from constants, shapes and enclosing loop variables with + - and "
                        "multiplication by constants") from None
                if st.step > 0:
                    cond = f"{lo} <= {v} < {hi}"
                    if st.step != 1:
                        cond += f" and ({v} - {lo}) mod {st.step} = 0"
                else:
                    cond = f"{hi} < {v} <= {lo}"
                    if st.step != -1:
                        cond += f" and ({lo} - {v}) mod {-st.step} = 0"
                inner = _Ctx(ctx.iters + [st.var], ctx.conds + [cond], list(ctx.guards),
                             ctx.position + [0], ctx.signs + [1 if st.step > 0 else -1])
                self.block(st.body, inner)
                ctx.position[-1] += 1
            elif isinstance(st, T.If):
                try:
                    then_c = affine_cond(st.cond)
                    else_c = affine_cond(st.cond, negate=True)
                    then_ctx = _Ctx(ctx.iters, ctx.conds + [then_c], ctx.guards, ctx.position, ctx.signs)
                    else_ctx = _Ctx(ctx.iters, ctx.conds + [else_c], ctx.guards, ctx.position, ctx.signs)
                except _NotAffine:
                    neg = T.Unary("bool", "not", st.cond, span=st.cond.span)
                    then_ctx = _Ctx(ctx.iters, ctx.conds, ctx.guards + [st.cond], ctx.position, ctx.signs)
                    else_ctx = _Ctx(ctx.iters, ctx.conds, ctx.guards + [neg], ctx.position, ctx.signs)
                self.block(st.body, then_ctx)
                self.block(st.orelse, else_ctx)
            elif isinstance(st, T.Store):
                self.statement(st, ctx)
                ctx.position[-1] += 1
            else:
                raise TypeError(type(st).__name__)

    def space(self, name, iters):
        return f"{name}[{', '.join(iname(v) for v in iters)}]"

    def statement(self, st: T.Store, ctx: _Ctx):
        name = f"S{len(self.statements)}"
        sp = self.space(name, ctx.iters)
        conds = " and ".join(f"({c})" for c in ctx.conds)
        domain = isl.Set(f"{{ {sp} : {conds} }}" if conds else f"{{ {sp} }}")
        write = self.access(name, ctx.iters, domain, st.tensor, st.indices, st.span)
        reads = []
        for i in st.indices:
            self.reads(name, ctx.iters, domain, i, reads)
        self.reads(name, ctx.iters, domain, st.value, reads)
        for g in ctx.guards:
            self.reads(name, ctx.iters, domain, g, reads)
        s = Statement(name, st, list(ctx.iters), domain, None, list(ctx.guards), write, reads)
        s.schedule = (list(ctx.position), list(ctx.signs))
        self.statements.append(s)

    def reads(self, name, iters, domain: isl.Set, e: T.TExpr, out: list):
        """Collect the reads of ``e``; reads under a condition are restricted to where it holds."""
        if isinstance(e, T.Load):
            for i in e.indices:
                self.reads(name, iters, domain, i, out)
            out.append(self.access(name, iters, domain, e.tensor, e.indices, e.span))
            return
        if isinstance(e, T.Select):
            self.reads(name, iters, domain, e.cond, out)
            try:
                then_d = domain.intersect(self._cond_set(name, iters, e.cond, False))
                else_d = domain.intersect(self._cond_set(name, iters, e.cond, True))
            except _NotAffine:
                then_d = else_d = domain
            self.reads(name, iters, then_d, e.a, out)
            self.reads(name, iters, else_d, e.b, out)
            return
        if isinstance(e, T.Logic):
            self.reads(name, iters, domain, e.a, out)
            try:
                # `a and b` evaluates b only where a holds; `a or b` only where a fails.
                rest = domain.intersect(self._cond_set(name, iters, e.a, e.op == "or"))
            except _NotAffine:
                rest = domain
            self.reads(name, iters, rest, e.b, out)
            return
        for sub in _children(e):
            self.reads(name, iters, domain, sub, out)

    def _cond_set(self, name, iters, cond, negate) -> isl.Set:
        return isl.Set(f"{{ {self.space(name, iters)} : {affine_cond(cond, negate)} }}")

    def access(self, name, iters, domain: isl.Set, tensor: str, indices: list, span) -> Access:
        t = self.k.tensors[tensor]
        sp = self.space(name, iters)
        try:
            idx = [affine(i) for i in indices]
        except _NotAffine:
            raise HybridUnsupportedError(
                "subscripts that are not affine (data-dependent, or products of loop variables) are not "
                "supported yet", span,
                "index with constants, shapes and loop variables combined by + - and multiplication by "
                "constants") from None
        rel = isl.Map(f"{{ {sp} -> {tensor}[{', '.join(idx)}] }}").intersect_domain(domain)
        box = isl.Set("{ %s[%s] : %s }" % (tensor, ", ".join(f"e{k}" for k in range(t.ndim)),
                                          " and ".join(f"0 <= e{k} < {n}" for k, n in enumerate(t.shape)) or "1 = 1"))
        outside = rel.subtract_range(box)
        if not outside.is_empty():
            point = outside.domain().sample_point()
            vals = [point.get_coordinate_val(isl.dim_type.set, k).to_python() for k in range(len(iters))]
            at = ", ".join(f"{v} = {val}" for v, val in zip(iters, vals))
            elem = outside.intersect_domain(isl.Set.from_point(point)).range().sample_point()
            eidx = [elem.get_coordinate_val(isl.dim_type.set, k).to_python() for k in range(t.ndim)]
            where = f" when {at}" if at else ""
            raise HybridIndexError(
                f"`{t.source_name}` (shape {t.shape}) is indexed out of bounds{where}: element {tuple(eidx)}",
                span, "tighten the loop bounds or guard the access with an `if`")
        return Access(tensor, rel, True, span)


def _children(e: T.TExpr):
    if isinstance(e, (T.Bin, T.Cmp, T.Logic)):
        return [e.a, e.b]
    if isinstance(e, (T.Unary, T.Cast)):
        return [e.a]
    if isinstance(e, T.Select):
        return [e.cond, e.a, e.b]
    if isinstance(e, T.Intrinsic):
        return list(e.args)
    if isinstance(e, T.Load):
        return list(e.indices)
    return []


def extract(k: T.TypedKernel) -> PolyProgram:
    return _Extractor(k).run()


def describe(p: PolyProgram) -> str:
    """Text for ``inspect("isl")``."""
    lines = []
    for s in p.statements:
        lines.append(f"{s.name}:  # {s.store.span.source_line.strip() if s.store.span else ''}")
        lines.append(f"  domain:   {s.domain}")
        lines.append(f"  schedule: {s.schedule}")
        lines.append(f"  write:    {s.write.relation}")
        for r in s.reads:
            lines.append(f"  read:     {r.relation}")
        for g in s.guards:
            lines.append(f"  guard:    {g}")
    return "\n".join(lines) + "\n"
