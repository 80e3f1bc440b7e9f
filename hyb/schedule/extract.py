"""Polyhedral extraction: typed kernel → isl statements.

One statement per store.  Its domain is the set of iterations of the enclosing loops that
satisfy the affine guards; its accesses are isl maps from that domain to tensor elements;
its original schedule is the usual ``2d+1`` encoding of program order.  Conditions that are
not affine are kept as *guards* on the statement and evaluated when it runs.

A loop whose bounds are not affine (read from a tensor, say) becomes one *opaque*
statement: its whole body runs as written for each iteration of the affine loops around it,
and its accesses are over-approximated by the whole tensors it touches, so no schedule ever
reorders anything across it.  A subscript that is not affine is likewise an access to the
whole tensor.

Every affine access is checked here against its tensor's shape: an access that can leave
the tensor for some iteration is a compile-time error naming such an iteration.  Accesses
that cannot be checked here (not affine, inside an opaque statement, or under a condition
that is not affine) are marked ``checked`` in the statements' typed IR and checked when they run.

In a shape-generic kernel the sizes of the inputs are isl parameters (``hs_<input>_<axis>``,
:func:`hyb.dsl.tir.size_symbols`), every set holds for all their values, and an access that
leaves its tensor only for some of them is not an error here: the parameter values for which it
does are kept in ``PolyProgram.shape_conditions``, which the runtime tests for each new shape
before the code runs.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

import islpy as isl
import numpy as np

from ..dsl import tir
from ..dsl import types
from ..errors import HybridIndexError
from . import islmem


@dataclass(frozen=True)
class Access:
    tensor: str
    relation: isl.Map  # statement domain -> tensor element (restricted to where it happens)
    exact: bool  # False when the indices are not affine (the whole tensor may be touched)
    span: object = None


@dataclass(frozen=True)
class Statement:
    name: str
    stmt: object  # a tir.Store, a tir.Assert, or a tir.Loop / tir.If run as a whole (an opaque statement)
    iters: list  # loop variables, outermost first
    domain: isl.Set
    order: isl.Map  # the original program order (a schedule map)
    guards: list  # non-affine conditions, all must hold
    writes: list  # Access
    reads: list = field(default_factory=list)
    # A statement a loop stage made (hyb.schedule.promote): the program statement whose instances
    # it runs (its first iterators are that statement's), or "" for a statement of the program.
    origin: str = ""
    runs_instances: bool = True  # False: it runs none of origin's instances (it moves register cells)

    @property
    def opaque(self) -> bool:
        return not isinstance(self.stmt, (tir.Store, tir.Assert, tir.Print))

    @property
    def span(self):
        return self.stmt.span

    @property
    def weight(self) -> int:
        """The elementary statements one instance runs: 1, or, for an opaque loop, the product
        of its loops' trip counts where they are constants (1 for a loop whose count is not)."""
        return _weight([self.stmt]) if self.opaque else 1


def _weight(stmts: list) -> int:
    total = 0
    for st in stmts:
        if isinstance(st, tir.Loop):
            trips = 1
            if isinstance(st.start, tir.Const) and isinstance(st.stop, tir.Const):
                trips = len(range(st.start.value, st.stop.value, st.step))
            total += trips * _weight(st.body)
        elif isinstance(st, tir.If):
            total += max(_weight(st.body), _weight(st.orelse))
        else:
            total += 1
    return max(total, 1)


@dataclass(frozen=True)
class PolyProgram:
    kernel: tir.TypedKernel
    statements: list  # Statement; a load or store checked at run time has `checked` set in their typed IR
    depth: int  # the deepest loop nest
    loops: dict = field(default_factory=dict)  # loop variable -> tir.Loop, for the affine loops
    # a shape-generic kernel's run-time sizes (isl parameters), and the parameter values for which an
    # access leaves its tensor (isl sets, each with the span of the access)
    params: tuple = ()
    shape_conditions: tuple = ()
    # sizes (parameter -> value) the register blocks of a shape-generic kernel are sized for: the
    # shape that compiles it
    hint: dict = field(default_factory=dict)
    # what :meth:`derived` made, by key
    _derived: dict = field(default_factory=dict, init=False, repr=False, compare=False)

    def context(self) -> isl.Set:
        """What is known of the parameters: every size is at least 0, and no access leaves its
        tensor (the sizes of ``shape_conditions`` never run the code)."""
        return valid_sizes(self.params, self.shape_conditions)

    def statements_in(self, domain) -> list:
        """The statements some of whose instances lie in ``domain`` (an isl union set: the
        instances a schedule node reaches)."""
        return [st for st in self.statements if not domain.intersect(isl.UnionSet.from_set(st.domain)).is_empty()]

    @property
    def by_name(self) -> dict:
        return {s.name: s for s in self.statements}

    @property
    def has_private_scalars(self) -> bool:
        return any(t.kind == "scalar" and t.private_to for t in self.kernel.tensors.values())

    def domains(self, statements=None) -> isl.UnionSet:
        """The union of the domains of ``statements`` (Statement records; default: all)."""
        if statements is None:
            return self.union("domain")
        return islmem.union_set(s.domain for s in statements)

    def union(self, what: str, expanded: bool = True) -> isl.UnionMap | isl.UnionSet:
        """Domains, the schedule or accesses of all statements.  With ``expanded=False`` a
        scalar private to loops is one memory cell again (as the generated code stores it)."""
        return self.derived(("union", what, expanded), lambda: self._build_union(what, expanded))

    def derived(self, key, make):
        """``make()``, a value that depends on the program alone, made once per program for all the
        stages that ask (isl objects are immutable, so they can share it; each isl build costs
        memory that islpy never frees, ``islmem``)."""
        if key not in self._derived:
            self._derived[key] = make()
        return self._derived[key]

    def _build_union(self, what: str, expanded: bool):
        if what == "domain":
            return islmem.union_set(s.domain for s in self.statements)
        maps = []
        for s in self.statements:
            if what == "order":
                maps.append(s.order)
            elif what == "must_writes":
                maps += [w.relation for w in s.writes if w.exact and not s.guards]
            elif what == "may_writes":
                maps += [w.relation for w in s.writes]
            elif what == "reads":
                maps += [r.relation for r in s.reads]
            else:
                raise ValueError(what)
        return islmem.union_map(m if expanded else one_cell(self.kernel, m) for m in maps)


def one_cell(k: tir.TypedKernel, m: isl.Map) -> isl.Map:
    """An access to a private scalar (expanded along its loops) as an access to the one cell the
    generated code keeps it in, which keeps the scalar's name: each scalar is a cell of its own."""
    name = m.get_tuple_name(isl.dim_type.out)
    if m.dim(isl.dim_type.out) and k.tensors[name].kind == "scalar":
        m = m.project_out(isl.dim_type.out, 0, m.dim(isl.dim_type.out)).set_tuple_name(isl.dim_type.out, name)
    return m


def with_params(params, text: str) -> str:
    """isl text ``text`` (a set or a map) declaring the run-time sizes ``params`` it may name."""
    return f"[{', '.join(params)}] -> {text}" if params else text


def params_set(params, cond: str = "") -> isl.Set:
    return isl.Set(with_params(params, f"{{ : {cond} }}" if cond else "{ : }"))


def valid_sizes(params, shape_conditions) -> isl.Set:
    """The sizes a shape-generic kernel's code runs at: each at least 0, none of the
    ``shape_conditions`` (``(isl set, span)``: sizes at which an access would leave its tensor)."""
    valid = params_set(params, " and ".join(f"{p} >= 0" for p in params))
    for cond, _ in shape_conditions:
        valid = valid.subtract(cond)
    return valid.coalesce()


def at_sizes(s: isl.Set, values) -> isl.Set:
    """``s`` with each parameter named in ``values`` (a dict, or a function of the name giving a
    value or None) fixed to its value; the parameters projected out once all are fixed."""
    get = values.get if isinstance(values, dict) else values
    n = s.dim(isl.dim_type.param)
    fixed = 0
    for k in range(n):
        v = get(s.get_dim_name(isl.dim_type.param, k))
        if v is not None:
            s = s.fix_val(isl.dim_type.param, k, isl.Val.int_from_si(s.get_ctx(), v))
            fixed += 1
    return s.project_out(isl.dim_type.param, 0, n) if n and fixed == n else s


def tensor_box(k: tir.TypedKernel, tensor: str, params=None, dims=None) -> isl.Set:
    """The elements of ``tensor``: ``0 <= e_k < shape[k]`` (a run-time size as its parameter, every
    size at least 0, as in the statements' domains)."""
    t = k.tensors[tensor]
    params = tir.size_symbols(k) if params is None else params
    dims = dims or [f"e{j}" for j in range(t.ndim)]
    try:
        conds = [f"0 <= {v} < {affine(tir.dim(n))}" for v, n in zip(dims, t.shape)] + [f"{p} >= 0" for p in params]
    except _NotAffine:
        raise tir.NotGeneric(f"the shape of `{t.source_name}` is not affine in the sizes") from None
    return isl.Set(with_params(params, "{ %s[%s] : %s }" % (tensor, ", ".join(dims), " and ".join(conds) or "1 = 1")))


def iname(var: str) -> str:
    """The isl name of a loop variable (prefixed so that it never clashes with isl keywords)."""
    return "h_" + var


class _NotAffine(Exception):
    pass


def const_int(e: tir.TExpr) -> int | None:
    """The value of an integer expression made of constants only, else None."""
    if isinstance(e, tir.Const):
        return e.value if isinstance(e.value, int) and not isinstance(e.value, bool) else None
    if isinstance(e, tir.Cast) and types.is_int(e.dtype) and types.is_int(e.a.dtype):
        return const_int(e.a)
    if isinstance(e, tir.Unary) and e.op == "neg":
        v = const_int(e.a)
        return None if v is None else -v
    if isinstance(e, tir.Bin) and types.is_int(e.dtype) and e.op in ("+", "-", "*"):
        a, b = const_int(e.a), const_int(e.b)
        if a is None or b is None:
            return None
        return a + b if e.op == "+" else a - b if e.op == "-" else a * b
    return None


def affine(e: tir.TExpr) -> str:
    """isl text of an integer expression that is affine in loop variables, else raise _NotAffine."""
    if isinstance(e, tir.Const):
        if isinstance(e.value, bool) or not isinstance(e.value, int):
            raise _NotAffine
        return f"({e.value})"
    if isinstance(e, tir.Var):
        return iname(e.name)
    if isinstance(e, tir.Size):
        return e.name
    if isinstance(e, tir.Cast) and types.is_int(e.dtype) and types.is_int(e.a.dtype):
        if _wide(e.dtype) or _holds(e.dtype, e.a):
            return affine(e.a)
        raise _NotAffine  # the cast may wrap
    # isl's integers never wrap: arithmetic in a narrower (or unsigned) type, which may, is not affine
    if isinstance(e, tir.Unary) and e.op == "neg" and _wide(e.dtype):
        return f"(-{affine(e.a)})"
    if isinstance(e, tir.Bin) and types.is_int(e.dtype) and _wide(e.dtype):
        if e.op in ("+", "-"):
            return f"({affine(e.a)} {e.op} {affine(e.b)})"
        if e.op == "*":
            ca, cb = const_int(e.a), const_int(e.b)
            if ca is not None:
                return f"({ca} * {affine(e.b)})"
            if cb is not None:
                return f"({cb} * {affine(e.a)})"
            raise _NotAffine
        if e.op in ("//", "%") and isinstance(e.b, tir.Const) and isinstance(e.b.value, int) and e.b.value > 0:
            if e.op == "//":
                return f"floor({affine(e.a)} / {e.b.value})"
            return f"({affine(e.a)} mod {e.b.value})"
    raise _NotAffine


def _wide(dt: str) -> bool:
    """Integer arithmetic that isl's exact integers model: int64 (whose wrapping needs values no
    shape reaches) and the weak integers of literals, loop variables and shapes."""
    return dt in ("int64", types.WEAK_INT)


def _holds(dt: str, e: tir.TExpr) -> bool:
    """Whether every value of ``e`` fits integer type ``dt`` (a constant in range, or a narrower type)."""
    info = np.iinfo(dt)
    if isinstance(e, tir.Const) and isinstance(e.value, int) and not isinstance(e.value, bool):
        return info.min <= e.value <= info.max
    if e.dtype in types.SIGNED or e.dtype in types.UNSIGNED:
        src = np.iinfo(e.dtype)
        return info.min <= src.min and src.max <= info.max
    return False


def bound_terms(e: tir.TExpr, split: str) -> list:
    """isl texts of a loop bound: the arguments of a ``min`` (``split="min"``, an upper bound)
    or ``max`` (a lower bound) each bound the loop; any other bound is one affine term."""
    if isinstance(e, tir.Intrinsic) and e.name == split and types.is_int(e.dtype):
        return [t for a in e.args for t in bound_terms(a, split)]
    return [affine(e)]


def range_cond(st: tir.Loop) -> str:
    """isl text of the values a loop's variable takes, else raise _NotAffine."""
    v = iname(st.var)
    up = st.step > 0
    # range(max(a, b), min(c, d)): every term bounds the loop (reversed when it counts down)
    los, his = bound_terms(st.start, "max" if up else "min"), bound_terms(st.stop, "min" if up else "max")
    if abs(st.step) != 1 and len(los) != 1:
        raise _NotAffine  # the stride is counted from one start
    if up:
        cond = " and ".join([f"{v} >= {lo}" for lo in los] + [f"{v} < {hi}" for hi in his])
        if st.step != 1:
            cond += f" and ({v} - {los[0]}) mod {st.step} = 0"
    else:
        cond = " and ".join([f"{v} <= {lo}" for lo in los] + [f"{v} > {hi}" for hi in his])
        if st.step != -1:
            cond += f" and ({los[0]} - {v}) mod {-st.step} = 0"
    return cond


def affine_cond(e: tir.TExpr, negate: bool = False) -> str:
    """isl text of a condition built from affine comparisons, else raise _NotAffine."""
    if isinstance(e, tir.Const) and types.is_bool(e.dtype):
        return "1 = 1" if bool(e.value) != negate else "1 = 0"
    if isinstance(e, tir.Unary) and e.op == "not":
        return affine_cond(e.a, not negate)
    if isinstance(e, tir.Logic):
        op = e.op
        if negate:
            op = "or" if op == "and" else "and"
        # the right side first: a long chain `a and b and ...` (left-deep) that is not affine
        # fails at its last operand, without going down the rest of the chain each time
        right = affine_cond(e.b, negate)
        return f"(({affine_cond(e.a, negate)}) {op} ({right}))"
    if isinstance(e, tir.Cmp) and types.is_int(e.a.dtype):
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
    def __init__(self, k: tir.TypedKernel):
        self.k = k
        self.statements: list = []
        self.depth = 0
        self.checked: set = set()
        self.loops: dict = {}
        self.params = tuple(tir.size_symbols(k))
        self.shape_conditions: list = []

    def isl_text(self, text: str) -> str:
        return with_params(self.params, text)

    def run(self) -> PolyProgram:
        self.block(self.k.body, _Ctx([], [], [], [0], []))
        # the code never runs at sizes for which an access would leave its tensor (the runtime
        # refuses such shapes first): every later analysis may take that as known
        valid = valid_sizes(self.params, self.shape_conditions) if self.shape_conditions else None
        statements = [self._finish(s, self.depth, valid) for s in self.statements]
        return PolyProgram(self.k, statements, self.depth, self.loops, self.params, tuple(self.shape_conditions))

    def _finish(self, s: Statement, D: int, valid) -> Statement:
        """The statement's record: its schedule in a nest of depth ``D``, its sets restricted to the
        ``valid`` sizes, and the loads and stores whose subscripts are checked when they run marked
        so in its typed IR (``checked``; the kernel's own nodes are not changed)."""
        def mark(n):
            if id(n) in self.checked:  # nodes of the kernel this extraction walked
                return replace(tir.rewrite_children(n, mark), checked=True)
            return None

        def within(a: Access) -> Access:
            return a if valid is None else replace(a, relation=a.relation.intersect_params(valid))

        return replace(s, stmt=tir.rewrite(s.stmt, mark), guards=[tir.rewrite(g, mark) for g in s.guards],
                       domain=s.domain if valid is None else s.domain.intersect_params(valid),
                       writes=[within(a) for a in s.writes], reads=[within(a) for a in s.reads],
                       order=self._schedule(s, D))

    def _schedule(self, s: Statement, D: int) -> isl.Map:
        pos, signs = s.order  # stashed (positions, signs) until the depth is known
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
        return isl.Map(self.isl_text(f"{{ {s.name}[{dom}] -> [{', '.join(out)}] }}")).intersect_domain(s.domain)

    def block(self, body: list, ctx: _Ctx):
        for st in body:
            if isinstance(st, tir.Loop) and st.form is not None:
                # a loop the code generator runs in a form of its own: one statement
                self.opaque(st, ctx)
                ctx.position[-1] += 1
            elif isinstance(st, tir.Loop):
                self.depth = max(self.depth, len(ctx.iters) + 1)
                try:
                    cond = range_cond(st)
                except _NotAffine:
                    self.opaque(st, ctx)
                    ctx.position[-1] += 1
                    continue
                self.loops[st.var] = st
                inner = _Ctx(ctx.iters + [st.var], ctx.conds + [cond], list(ctx.guards),
                             ctx.position + [0], ctx.signs + [1 if st.step > 0 else -1])
                self.block(st.body, inner)
                ctx.position[-1] += 1
            elif isinstance(st, tir.If):
                try:
                    then_c = affine_cond(st.cond)
                    else_c = affine_cond(st.cond, negate=True)
                    then_ctx = _Ctx(ctx.iters, ctx.conds + [then_c], ctx.guards, ctx.position, ctx.signs)
                    else_ctx = _Ctx(ctx.iters, ctx.conds + [else_c], ctx.guards, ctx.position, ctx.signs)
                except _NotAffine:
                    if _reads(st.cond) & _writes(st.body + st.orelse):
                        # The branches change what the condition reads: it must be evaluated once,
                        # before them, so the whole `if` runs as written.
                        self.opaque(st, ctx)
                        ctx.position[-1] += 1
                        continue
                    neg = tir.Unary("bool", "not", st.cond, span=st.cond.span)
                    then_ctx = _Ctx(ctx.iters, ctx.conds, ctx.guards + [st.cond], ctx.position, ctx.signs)
                    else_ctx = _Ctx(ctx.iters, ctx.conds, ctx.guards + [neg], ctx.position, ctx.signs)
                self.block(st.body, then_ctx)
                self.block(st.orelse, else_ctx)
            elif isinstance(st, (tir.Store, tir.Assert, tir.Print)):
                self.statement(st, ctx)
                ctx.position[-1] += 1
            else:
                raise TypeError(type(st).__name__)

    def space(self, name, iters):
        return f"{name}[{', '.join(iname(v) for v in iters)}]"

    def _domain(self, name, ctx: _Ctx) -> isl.Set:
        sp = self.space(name, ctx.iters)
        conds = " and ".join([f"({c})" for c in ctx.conds] + [f"{p} >= 0" for p in self.params])
        # Equalities hidden in strides (`(i - 1) mod 3 = 0` with 0 <= i <= 1) made explicit:
        # isl's dataflow analysis fails on some such sets.
        return isl.Set(self.isl_text(f"{{ {sp} : {conds} }}" if conds else f"{{ {sp} }}")).detect_equalities().coalesce()

    def statement(self, st, ctx: _Ctx):
        """A store, or an assertion (a statement that only reads)."""
        name = f"S{len(self.statements)}"
        domain = self._domain(name, ctx)
        guarded = bool(ctx.guards)
        reads = []
        if isinstance(st, tir.Assert):
            writes = []
            self.reads(name, ctx.iters, domain, st.cond, reads, guarded)
        elif isinstance(st, tir.Print):
            # writes the stand-in for the output stream: prints stay in order, never on threads
            writes = [self.whole(name, ctx.iters, domain, st.stdout, st.span)]
            for item in st.items:
                if isinstance(item, tir.TExpr):
                    self.reads(name, ctx.iters, domain, item, reads, guarded)
        else:
            writes = [self.access(name, ctx.iters, domain, st, guarded)]
            for i in st.indices:
                self.reads(name, ctx.iters, domain, i, reads, guarded)
            self.reads(name, ctx.iters, domain, st.value, reads, guarded)
        for g in ctx.guards:
            self.reads(name, ctx.iters, domain, g, reads, False)
        # (the schedule is (positions, signs) until the depth of every nest is known: see run)
        self.statements.append(Statement(name, st, list(ctx.iters), domain, (list(ctx.position), list(ctx.signs)),
                                         list(ctx.guards), writes, reads))

    def opaque(self, loop, ctx: _Ctx):
        """A loop with non-affine bounds (or an `if` that changes its own condition, or a loop
        with a form): one statement, checked at run time.  Each access touches the whole tensor,
        a scalar declared inside the statement only this instance's copies, and in a loop with a
        form a private scalar's access touches its own copy (:meth:`whole`); there, where the loops
        around an access inside the statement and its subscripts are affine, it touches the
        elements those loops reach from this instance (all of them, for a store under no
        condition inside the statement)."""
        name = f"S{len(self.statements)}"
        domain = self._domain(name, ctx)
        writes, reads = [], []
        for g in ctx.guards:
            self.reads(name, ctx.iters, domain, g, reads, False)
        summed = isinstance(loop, tir.Loop) and loop.form is not None

        def touched(node, tensor, indices, inner, surely=False):
            if summed and inner is not None and indices:
                try:
                    return self.reached(name, ctx.iters, domain, tensor, indices, inner, node.span, surely)
                except _NotAffine:
                    pass
            return self.whole(name, ctx.iters, domain, tensor, node.span, private=summed)

        def expr(e, inner):
            for sub in tir.walk_expr(e):
                if isinstance(sub, tir.Load):
                    reads.append(touched(sub, sub.tensor, sub.indices, inner))
                    if sub.indices:
                        self.checked.add(id(sub))

        def walk(stmts, inner, branched=False):
            for st in stmts:
                if isinstance(st, tir.Loop):
                    expr(st.start, inner)
                    expr(st.stop, inner)
                    try:
                        deeper = None if inner is None else inner + [(st.var, range_cond(st))]
                    except _NotAffine:
                        deeper = None
                    walk(st.body, deeper, branched)
                elif isinstance(st, tir.If):
                    expr(st.cond, inner)
                    walk(st.body, inner, True)
                    walk(st.orelse, inner, True)
                elif isinstance(st, tir.Assert):
                    expr(st.cond, inner)
                elif isinstance(st, tir.Print):
                    for item in st.items:
                        if isinstance(item, tir.TExpr):
                            expr(item, inner)
                    writes.append(self.whole(name, ctx.iters, domain, st.stdout, st.span))
                else:
                    for i in st.indices:
                        expr(i, inner)
                    expr(st.value, inner)
                    writes.append(touched(st, st.tensor, st.indices, inner, surely=not branched))
                    if st.indices:
                        self.checked.add(id(st))

        walk([loop], [])
        self.statements.append(Statement(name, loop, list(ctx.iters), domain,
                                         (list(ctx.position), list(ctx.signs)), list(ctx.guards), writes, reads))

    def reads(self, name, iters, domain: isl.Set, e: tir.TExpr, out: list, guarded: bool):
        """Collect the reads of ``e``; reads under a condition are restricted to where it holds."""
        if isinstance(e, tir.Load):
            for i in e.indices:
                self.reads(name, iters, domain, i, out, guarded)
            out.append(self.access(name, iters, domain, e, guarded))
            return
        if isinstance(e, tir.Select):
            self.reads(name, iters, domain, e.cond, out, guarded)
            try:
                then_d = domain.intersect(self._cond_set(name, iters, e.cond, False))
                else_d = domain.intersect(self._cond_set(name, iters, e.cond, True))
                sub_guarded = guarded
            except _NotAffine:
                then_d = else_d = domain
                sub_guarded = True
            self.reads(name, iters, then_d, e.a, out, sub_guarded)
            self.reads(name, iters, else_d, e.b, out, sub_guarded)
            return
        if isinstance(e, tir.Logic):
            self.reads(name, iters, domain, e.a, out, guarded)
            try:
                # `a and b` evaluates b only where a holds; `a or b` only where a fails.
                rest = domain.intersect(self._cond_set(name, iters, e.a, e.op == "or"))
                sub_guarded = guarded
            except _NotAffine:
                rest = domain
                sub_guarded = True
            self.reads(name, iters, rest, e.b, out, sub_guarded)
            return
        for sub in _children(e):
            self.reads(name, iters, domain, sub, out, guarded)

    def _cond_set(self, name, iters, cond, negate) -> isl.Set:
        return isl.Set(self.isl_text(f"{{ {self.space(name, iters)} : {affine_cond(cond, negate)} }}"))

    def box(self, tensor: str) -> isl.Set:
        t = self.k.tensors[tensor]
        if t.kind == "scalar":
            return isl.Set("{ %s[%s] }" % (tensor, ", ".join(f"e{k}" for k in range(len(t.private_to)))))
        return tensor_box(self.k, tensor, self.params)

    def whole(self, name, iters, domain: isl.Set, tensor: str, span, private: bool = False) -> Access:
        """An access that may touch any element of ``tensor``.  Of a scalar private to loops, from
        inside an opaque statement: where it is declared inside the statement (private to a loop
        of it), only the copies this instance makes, which no other instance sees; where
        ``private`` (a loop with a form), the copy of this iteration of the loops around it, as
        :meth:`access` models it; else all of them."""
        t = self.k.tensors.get(tensor)
        if t is not None and t.kind == "scalar" and t.private_to and (private or not set(t.private_to) <= set(iters)):
            idx = ", ".join(iname(v) if v in iters else f"any{k}" for k, v in enumerate(t.private_to))
            rel = isl.Map(self.isl_text(f"{{ {self.space(name, iters)} -> {tensor}[{idx}] }}"))
            return Access(tensor, rel.intersect_domain(domain), False, span)
        rel = isl.Map.from_domain_and_range(domain, self.box(tensor))
        return Access(tensor, rel, False, span)

    def partial(self, name, iters, domain: isl.Set, tensor: str, indices: list, span) -> Access:
        """An access some of whose subscripts are not affine (``t[b, m - j]`` with ``m`` a scalar):
        the affine ones as they are, the others any index in range (all of them: :meth:`whole`)."""
        conds = []
        for k, i in enumerate(indices):
            try:
                conds.append(f"o{k} = {affine(i)}")
            except _NotAffine:
                pass
        if not conds:
            return self.whole(name, iters, domain, tensor, span)
        outs = ", ".join(f"o{k}" for k in range(len(indices)))
        rel = isl.Map(self.isl_text(f"{{ {self.space(name, iters)} -> {tensor}[{outs}] : {' and '.join(conds)} }}"))
        return Access(tensor, rel.intersect_domain(domain).intersect_range(self.box(tensor)).coalesce(), False, span)

    def reached(self, name, iters, domain: isl.Set, tensor: str, indices: list, inner: list, span,
                surely: bool = False) -> Access:
        """The elements ``tensor[indices]`` may be from one instance, over the loops ``inner``
        (variable, isl condition) around the access inside the statement; ``surely``: each of
        them is (a store under no condition inside the statement).  Raises _NotAffine."""
        idx = [affine(i) for i in indices]
        outs = [f"o{k}" for k in range(len(idx))]
        conds = [c for _, c in inner] + [f"{o} = {i}" for o, i in zip(outs, idx)]
        local = ", ".join(iname(v) for v, _ in inner)
        where = f"exists ({local} : {' and '.join(conds)})" if inner else " and ".join(conds)
        rel = isl.Map(self.isl_text(f"{{ {self.space(name, iters)} -> {tensor}[{', '.join(outs)}] : {where} }}"))
        return Access(tensor, rel.intersect_domain(domain).intersect_range(self.box(tensor)).coalesce(), surely, span)

    def access(self, name, iters, domain: isl.Set, node, guarded: bool) -> Access:
        """The access of a Load or Store node; affine ones are bounds-checked now."""
        tensor, indices, span = node.tensor, node.indices, node.span
        t = self.k.tensors[tensor]
        sp = self.space(name, iters)
        if t.kind == "scalar":
            # A private scalar is modelled as expanded along the loops it is private to.
            idx = ", ".join(iname(v) for v in t.private_to)
            return Access(tensor, isl.Map(self.isl_text(f"{{ {sp} -> {tensor}[{idx}] }}")).intersect_domain(domain),
                          True, span)
        try:
            idx = [affine(i) for i in indices]
        except _NotAffine:
            self.checked.add(id(node))
            return self.partial(name, iters, domain, tensor, indices, span)
        rel = isl.Map(self.isl_text(f"{{ {sp} -> {tensor}[{', '.join(idx)}] }}")).intersect_domain(domain)
        rel = rel.detect_equalities().coalesce()
        outside = rel.subtract_range(self.box(tensor))
        if not outside.is_empty() and guarded:
            # A condition that is not affine may keep these iterations from running: check then.
            self.checked.add(id(node))
        elif not outside.is_empty() and self.params:
            # out of bounds for some sizes only: the runtime tests each new shape against these
            self.shape_conditions.append((outside.params(), span))
        elif not outside.is_empty():
            point = outside.domain().sample_point()
            vals = [islmem.int_value(point.get_coordinate_val(isl.dim_type.set, k)) for k in range(len(iters))]
            at = ", ".join(f"{v} = {val}" for v, val in zip(iters, vals))
            elem = outside.intersect_domain(isl.Set.from_point(point)).range().sample_point()
            eidx = [islmem.int_value(elem.get_coordinate_val(isl.dim_type.set, k)) for k in range(t.ndim)]
            where = f" when {at}" if at else ""
            raise HybridIndexError(
                f"`{t.source_name}` (shape {t.shape}) is indexed out of bounds{where}: element {tuple(eidx)}",
                span, "tighten the loop bounds or guard the access with an `if`")
        return Access(tensor, rel, True, span)


def _reads(e: tir.TExpr) -> set:
    return {x.tensor for x in tir.walk_expr(e) if isinstance(x, tir.Load)}


def _writes(stmts: list) -> set:
    out = set()
    for st in stmts:
        if isinstance(st, tir.Store):
            out.add(st.tensor)
        elif isinstance(st, tir.Print):
            out.add(st.stdout)
        elif isinstance(st, tir.Loop):
            out |= _writes(st.body)
        elif isinstance(st, tir.If):
            out |= _writes(st.body) | _writes(st.orelse)
    return out


def _children(e: tir.TExpr):
    if isinstance(e, (tir.Bin, tir.Cmp, tir.Logic)):
        return [e.a, e.b]
    if isinstance(e, (tir.Unary, tir.Cast)):
        return [e.a]
    if isinstance(e, tir.Select):
        return [e.cond, e.a, e.b]
    if isinstance(e, tir.Intrinsic):
        return list(e.args)
    if isinstance(e, tir.Load):
        return list(e.indices)
    return []


def extract(k: tir.TypedKernel, hint: dict | None = None) -> PolyProgram:
    """The polyhedral program of a typed kernel; ``hint``: for shape-generic code, the sizes
    (parameter -> value) of the shape that compiles it, which its register blocks are sized for."""
    return replace(_Extractor(k).run(), hint=dict(hint or {}))


def describe(p: PolyProgram) -> str:
    """Text for ``inspect("isl")``."""
    lines = []
    for s in p.statements:
        kind = "  (opaque: runs as written)" if s.opaque else ""
        lines.append(f"{s.name}:  # {s.span.source_line.strip() if s.span else ''}{kind}")
        lines.append(f"  domain:   {s.domain}")
        lines.append(f"  schedule: {s.order}")
        for w in s.writes:
            lines.append(f"  {'write' if w.exact else 'may write'}:    {w.relation}")
        for r in s.reads:
            lines.append(f"  {'read' if r.exact else 'may read'}:     {r.relation}")
        for g in s.guards:
            lines.append(f"  guard:    {g}")
    return "\n".join(lines) + "\n"
