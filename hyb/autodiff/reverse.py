"""Reverse mode on the syntax tree: a kernel -> the kernel computing its vector-Jacobian product.

The gradient kernel has three parts:

1. **forward**: the statements of the kernel that compute values the adjoint part needs
   (everything else is dropped), with saves of values that later statements overwrite;
2. **adjoints**: ``d_<x>`` for every differentiable tensor and scalar;
3. **reverse**: the statements in reverse order, loops run backwards.  A statement
   ``x[i] = e`` takes ``t = d_x[i]``, clears ``d_x[i]`` and adds ``t * de/dr`` to the adjoint
   of each read ``r`` of ``e``; an accumulation ``x[i] = x[i] + e`` only adds.

Forward values used by the reverse part are read where they live, so each must equal, when
read, the value the forward statement saw.  Data nobody overwrites later needs no help.
Otherwise:

* a tensor with a cell overwritten after a needed read of it is *restored*: each store to it
  first saves the old value in a tape indexed by the loops around the store (up to the block
  declaring the tensor), and the reverse part writes it back after the store's adjoint;
* a scalar assigned again is saved in another scalar just before, and restored after the
  adjoint of the assignment; a scalar assigned inside a loop but declared outside it is saved
  at the start of each iteration in a tape indexed by that loop only (before an ``if``: in a
  scalar);
* the reverse body of a loop or branch first *replays* the forward statements of that body
  that compute values local to it (scalars, ``allocate`` temporaries), then runs backwards.

A value is *needed* when a derivative coefficient, a condition, a subscript or a loop bound of
the reverse part reads it, or when a needed value is computed from it.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import islpy as isl

from ..dsl import ast as A
from ..dsl import types as ty
from ..dsl.unparse import Comment
from ..dsl.unparse import expr as unparse_expr
from ..errors import HybridUnsupportedError
from . import rules as R
from .rules import add, call, name, num

TENSOR_MAKERS = ("output_tensor", "allocate")


@dataclass
class TensorDecl:
    name: str
    kind: str  # "param" | "output" | "temp"
    block: object = None  # the Block declaring it (the top block for parameters)
    shape: object = None
    dtype: object = None
    int_dtype: bool = False


@dataclass
class ScalarDecl:
    name: str
    block: object
    decl: object  # the declaring A.Assign
    int_typed: bool


@dataclass
class Loop:
    var: str
    lo: object
    hi: object
    step: int
    kind: str
    node: object = None


@dataclass
class Block:
    """A statement list and where it sits."""
    parent: object  # Block or None
    loops: list  # every enclosing Loop, outermost first
    owner: object = None  # the A.For / A.If owning this body
    body: list = field(default_factory=list)

    def inside(self, other) -> bool:
        b = self
        while b is not None:
            if b is other:
                return True
            b = b.parent
        return False


@dataclass
class Info:
    block: Block
    first: int  # program-order number of the statement
    last: int = 0  # last number inside it (compound statements)


@dataclass
class Gradient:
    """A derived gradient kernel."""
    kdef: A.KernelDef
    grads: list  # per forward parameter: True if the gradient kernel returns its gradient
    outputs: list  # the forward outputs, in `return` order
    tapes: list  # (name, shape tuple AST, dtype AST, why)
    params: list  # the gradient kernel's parameters


def walk(e):
    """Every node below ``e`` (``e`` first)."""
    yield e
    for v in vars(e).values():
        if isinstance(v, A.Node):
            yield from walk(v)
        elif isinstance(v, list):
            for x in v:
                if isinstance(x, A.Node):
                    yield from walk(x)


def value_walk(e):
    """The nodes of ``e`` whose values are read at run time: not inside ``x.shape``, ``x.dtype``,
    ``x.ndim`` or ``len(x)``, which are known when the kernel compiles."""
    if isinstance(e, A.Attribute) or (isinstance(e, A.Subscript) and isinstance(e.value, A.Attribute)):
        return
    if isinstance(e, A.Call) and R.call_name(e) == "len":
        return
    yield e
    for v in vars(e).values():
        if isinstance(v, A.Node):
            yield from value_walk(v)
        elif isinstance(v, list):
            for x in v:
                if isinstance(x, A.Node):
                    yield from value_walk(x)
        elif isinstance(v, dict):
            for x in v.values():
                if isinstance(x, A.Node):
                    yield from value_walk(x)


def param_kinds(kernel) -> list:
    """``"tensor"`` or ``"scalar"`` for each parameter of ``kernel`` (anything with ``.kdef`` and
    ``.module``: a Kernel), read from its text: a parameter that is indexed, returned, asked for its
    ``.shape``/``.ndim``/``len``, passed to another kernel or never used is a tensor; one used only
    as a number is a scalar."""
    tensors, values = set(), set()
    kernels = set(kernel.module.kernels)
    for s in kernel.kdef.body:
        for x in walk(s):
            if isinstance(x, A.Subscript) and isinstance(x.value, A.Name):
                tensors.add(x.value.id)
            elif isinstance(x, A.Attribute) and isinstance(x.value, A.Name) and x.attr in ("shape", "ndim"):
                tensors.add(x.value.id)
            elif isinstance(x, A.Call) and R.call_name(x) == "len" and x.args and isinstance(x.args[0], A.Name):
                tensors.add(x.args[0].id)
            elif isinstance(x, A.Call) and R.call_name(x) in kernels:
                tensors.update(a.id for a in x.args if isinstance(a, A.Name))
            elif isinstance(x, A.Return):
                tensors.update(v.id for v in x.values if isinstance(v, A.Name))
        for x in value_walk(s):
            if isinstance(x, A.Name):
                values.add(x.id)
    return ["scalar" if p.name in values and p.name not in tensors else "tensor" for p in kernel.kdef.params]


def rewrite(e, replace):
    """``e`` rebuilt with each node for which ``replace(node)`` gives something other than None
    replaced by that (the outermost match wins; what it returns is not searched again)."""
    if not isinstance(e, A.Node):
        return e
    new = replace(e)
    if new is not None:
        return new
    kw = {}
    for k, v in vars(e).items():
        if isinstance(v, A.Node):
            kw[k] = rewrite(v, replace)
        elif isinstance(v, list):
            kw[k] = [rewrite(x, replace) for x in v]
        elif isinstance(v, dict):
            kw[k] = {a: rewrite(x, replace) for a, x in v.items()}
        else:
            kw[k] = v
    return type(e)(**kw)


def subst(e, names: dict):
    """``e`` with the names in ``names`` replaced."""
    if not names:
        return e
    return rewrite(e, lambda x: A.Name(x.span, names[x.id]) if isinstance(x, A.Name) and x.id in names else None)


def unsupported(what: str, node=None, hint=None):
    return HybridUnsupportedError(f"the gradient of a kernel with {what} is not built yet",
                                  getattr(node, "span", None), hint)


def _int_typed(value) -> bool:
    """Whether a scalar's first value is an integer (then it carries no derivative)."""
    if isinstance(value, A.Num):
        return isinstance(value.value, (int, bool))
    if isinstance(value, A.Call):
        f = R.call_name(value)
        if f in ty.ALL_DTYPES:
            return not R.is_float_cast(f)
        return f in ("len", "ceil_div", "popcount", "isnan", "isinf", "isfinite")
    return isinstance(value, (A.Compare, A.BoolOp))


def _accumulation(s: A.Assign):
    """For ``x = x + f`` / ``x = x - f`` (same target, f not reading it): (sign, f); else None."""
    v = s.value
    if isinstance(v, A.BinOp) and v.op in ("+", "-") and _same(v.left, s.target):
        if not any(_same(x, s.target) or (isinstance(x, A.Name) and isinstance(s.target, A.Subscript)
                                          and x.id == s.target.value.id) for x in walk(v.right)):
            return (1 if v.op == "+" else -1), v.right
    if isinstance(v, A.BinOp) and v.op == "+" and _same(v.right, s.target):
        if not any(_same(x, s.target) for x in walk(v.left)):
            return 1, v.left
    return None


def _same(a, b) -> bool:
    if isinstance(a, A.Name) and isinstance(b, A.Name):
        return a.id == b.id
    if isinstance(a, A.Subscript) and isinstance(b, A.Subscript):
        return unparse_expr(a) == unparse_expr(b)
    return False


def _target_name(t) -> str:
    return t.id if isinstance(t, A.Name) else t.value.id


class Reverser:
    def __init__(self, kdef: A.KernelDef, module: A.Module, inactive=frozenset(), with_outputs=False):
        self.kdef = kdef
        self.module = module
        self.inactive = set(inactive)
        self.with_outputs = with_outputs
        self.used = set(module.constants) | set(module.kernels) | {p.name for p in kdef.params}
        for s in kdef.body:
            for e in walk(s):
                if isinstance(e, A.Name):
                    self.used.add(e.id)
        self.tensors: dict = {}
        self.scalars: dict = {}
        self.loops: dict = {}
        self.info: dict = {}  # id(stmt) -> Info
        self.blocks: dict = {}  # id(For) -> Block; id(If) -> (Block, Block)
        self.assigns: list = []  # every scalar assignment and tensor store, program order
        self.counter = 0
        self.declared: set = set()

    # ================================================================ helpers
    def fresh(self, base: str) -> str:
        n, k = base, 1
        while n in self.used:
            k += 1
            n = f"{base}_{k}"
        self.used.add(n)
        return n

    def line_comment(self, s) -> Comment:
        line = getattr(s.span, "line", None)
        text = ""
        if line and self.module.lines and 0 < line <= len(self.module.lines):
            text = self.module.lines[line - 1].strip()
        return Comment(None, f"line {line}: {text}" if line else "generated")

    # ================================================================ pass 1: normalise
    def prepare(self):
        params = [p.name for p in self.kdef.params]
        self.top = Block(None, [])
        self.declared = set(params)
        self.top.body = self.norm_block(self.kdef.body, self.top, [{p: p for p in params}])
        body = self.top.body
        if not body or not isinstance(body[-1], A.Return):
            raise unsupported("no `return` at its end", self.kdef)
        self.outputs = [v.id for v in body[-1].values]
        self.params = params
        # A parameter used as a number is a scalar parameter; one never used counts as a tensor
        # (its gradient is zero; passed a scalar, it gets None at the call).
        self.tensor_params = [p for p, kind in zip(params, param_kinds(self)) if kind == "tensor"]
        self.scalar_params = set(params) - set(self.tensor_params)
        for p in self.tensor_params:
            self.tensors[p] = TensorDecl(p, "param", self.top)

    def walk_stmts(self, body):
        for s in body:
            yield s
            if isinstance(s, A.For):
                yield from self.walk_stmts(s.body)
            elif isinstance(s, A.If):
                yield from self.walk_stmts(s.body)
                yield from self.walk_stmts(s.orelse)

    @staticmethod
    def stmt_exprs(s):
        if isinstance(s, A.Assign):
            return [s.target, s.value]
        if isinstance(s, A.For):
            return [s.iter]
        if isinstance(s, A.If):
            return [s.cond]
        if isinstance(s, A.Return):
            return list(s.values)
        return []

    def lookup(self, scope, n):
        for d in reversed(scope):
            if n in d:
                return d[n]
        return None

    def resolve(self, e, scope):
        mapping = {}
        for x in walk(e):
            if isinstance(x, A.Call) and isinstance(x.func, A.Name) and x.func.id in self.module.kernels:
                raise unsupported("a call of another kernel", x, "write the called kernel's loops inline")
            if isinstance(x, A.Name):
                u = self.lookup(scope, x.id)
                if u is not None and u != x.id:
                    mapping[x.id] = u
        return subst(e, mapping)

    def declare(self, scope, n) -> str:
        u = n if n not in self.declared else self.fresh(n)
        self.declared.add(u)
        self.used.add(u)
        scope[-1][n] = u
        return u

    def number(self, s, block) -> Info:
        self.counter += 1
        info = Info(block, self.counter, self.counter)
        self.info[id(s)] = info
        return info

    def norm_block(self, body, block, scope) -> list:
        out = []
        for s in body:
            out.extend(self.norm_stmt(s, block, scope))
        return out

    def norm_stmt(self, s, block, scope) -> list:
        if isinstance(s, A.Pass):
            return []
        if isinstance(s, A.ExprStmt):
            if isinstance(s.value, A.Str):
                return []
            raise unsupported("an expression statement", s)
        if isinstance(s, A.Return):
            if block.parent is not None:
                raise unsupported("a `return` inside a loop or branch", s)
            vals = [self.resolve(v, scope) for v in s.values]
            if not all(isinstance(v, A.Name) for v in vals):
                raise unsupported("a `return` of an expression", s, "return tensor names")
            r = A.Return(s.span, vals)
            self.number(r, block)
            return [r]
        if isinstance(s, A.AugAssign):
            tgt = self.resolve(s.target, scope)
            if not isinstance(tgt, (A.Name, A.Subscript)):
                raise unsupported("this assignment", s)
            value = A.BinOp(s.value.span, s.op, tgt, self.resolve(s.value, scope))
            return self.norm_assign(A.Assign(s.span, tgt, value), block, scope, resolved=True)
        if isinstance(s, A.Assign):
            return self.norm_assign(s, block, scope)
        if isinstance(s, A.For):
            return [self.norm_for(s, block, scope)]
        if isinstance(s, A.If):
            node = A.If(s.span, self.resolve(s.cond, scope), [], [])
            info = self.number(node, block)
            then, orelse = Block(block, block.loops, node), Block(block, block.loops, node)
            node.body = then.body = self.norm_block(s.body, then, scope + [{}])
            node.orelse = orelse.body = self.norm_block(s.orelse, orelse, scope + [{}])
            self.blocks[id(node)] = (then, orelse)
            info.last = self.counter
            return [node]
        raise unsupported(f"a `{type(s).__name__}` statement", s)

    def norm_for(self, s: A.For, block, scope):
        it = s.iter
        if not (isinstance(it, A.Call) and isinstance(it.func, A.Name)):
            raise unsupported("this loop", s)
        kind = it.func.id
        if kind == "grid":
            raise unsupported("a `grid` loop", s, "write one `range` loop per dimension")
        args = [self.resolve(a, scope) for a in it.args]
        for a in args:
            if any(isinstance(x, A.Subscript) for x in value_walk(a)):
                raise unsupported("a loop whose bounds are read from a tensor", a)
        if len(args) == 1:
            lo, hi, step = num(0), args[0], 1
        elif len(args) == 2:
            (lo, hi), step = args, 1
        else:
            lo, hi, st = args
            if R.is_num(st):
                step = st.value
            elif isinstance(st, A.UnaryOp) and st.op == "-" and R.is_num(st.operand):
                step = -st.operand.value
            else:
                raise unsupported("a loop step that is not a number", st)
        inner_scope = scope + [{}]
        var = self.declare(inner_scope, s.target.id)
        loop = Loop(var, lo, hi, step, kind)
        node = A.For(s.span, A.Name(s.target.span, var), A.Call(it.span, A.Name(None, kind), args), [])
        loop.node = node
        self.loops[var] = loop
        info = self.number(node, block)
        inner = Block(block, block.loops + [loop], node)
        node.body = inner.body = self.norm_block(s.body, inner, inner_scope)
        self.blocks[id(node)] = inner
        info.last = self.counter
        return node

    def norm_assign(self, s: A.Assign, block, scope, resolved=False) -> list:
        tgt = s.target
        if isinstance(tgt, A.Tuple):
            raise unsupported("a tuple assignment", s)
        if isinstance(tgt, A.Name) and isinstance(s.value, A.Call) and R.call_name(s.value) in TENSOR_MAKERS:
            maker = R.call_name(s.value)
            args = [self.resolve(a, scope) for a in s.value.args]
            kw = {k: self.resolve(v, scope) for k, v in s.value.kwargs.items()}
            shape = args[0] if args else kw.get("shape")
            dtype = args[1] if len(args) > 1 else kw.get("dtype", A.Str(None, "float32"))
            u = self.declare(scope, tgt.id)
            int_dtype = isinstance(dtype, A.Str) and not ty.is_float(ty.normalize(dtype.value) or "float64")
            self.tensors[u] = TensorDecl(u, "output" if maker == "output_tensor" else "temp", block, shape, dtype,
                                         int_dtype)
            node = A.Assign(s.span, A.Name(tgt.span, u), A.Call(s.value.span, A.Name(None, maker), [shape, dtype]))
            self.number(node, block)
            return [node]
        value = s.value if resolved else self.resolve(s.value, scope)
        if isinstance(tgt, A.Name):
            u = tgt.id if resolved else self.lookup(scope, tgt.id)
            if u is None:
                u = self.declare(scope, tgt.id)
            if u in self.tensors or u in self.kdef_param_names():
                raise unsupported(f"an assignment to `{tgt.id}`", s)
            node = A.Assign(s.span, A.Name(tgt.span, u), value)
            if u not in self.scalars:
                self.scalars[u] = ScalarDecl(u, block, node, _int_typed(value) or self.int_expr(value))
        elif isinstance(tgt, A.Subscript):
            node = A.Assign(s.span, tgt if resolved else self.resolve(tgt, scope), value)
        else:
            raise unsupported("this assignment", s)
        self.number(node, block)
        self.assigns.append(node)
        return [node]

    def int_expr(self, e) -> bool:
        """Whether ``e`` is integer-valued whatever the arguments' dtypes: integer literals, loop
        variables, shapes and integer scalars combined without `/` (the language's types follow
        NumPy: such a first value makes the scalar an integer)."""
        for x in value_walk(e):
            if isinstance(x, A.Num) and not isinstance(x.value, (int, bool)):
                return False
            if isinstance(x, (A.Subscript, A.Call, A.IfExp, A.Compare, A.BoolOp)):
                return False
            if isinstance(x, A.BinOp) and x.op in ("/", "**"):
                return False
            if isinstance(x, A.Name) and not (x.id in self.loops or (x.id in self.scalars and self.scalars[x.id].int_typed)
                                              or x.id in self.module.constants and isinstance(
                                                  self.module.constants[x.id][0], A.Num)
                                              and isinstance(self.module.constants[x.id][0].value, int)):
                return False
        return True

    def kdef_param_names(self):
        return {p.name for p in self.kdef.params}

    # ================================================================ pass 2: activity
    def activity(self):
        self.active_t = {p for p in self.tensor_params if p not in self.inactive}
        self.active_s = set()
        changed = True
        while changed:
            changed = False
            for s in self.assigns:
                if not self.is_active(s.value):
                    continue
                n = _target_name(s.target)
                if isinstance(s.target, A.Subscript):
                    t = self.tensors.get(n)
                    if t is None:
                        raise unsupported(f"a store to `{n}`, which is not a tensor", s)
                    if not t.int_dtype and n not in self.active_t:
                        self.active_t.add(n)
                        changed = True
                elif not self.scalars[n].int_typed and n not in self.active_s:
                    self.active_s.add(n)
                    changed = True

    def usefulness(self):
        """Drop from the active names those whose value reaches no output: their adjoint is zero
        (and a derivative such as sqrt'(0) = inf must not turn it into nan)."""
        useful = set(self.outputs)
        changed = True
        while changed:
            changed = False
            for s in self.assigns:
                if _target_name(s.target) in useful:
                    for n in self.reads(s.value):
                        if n not in useful:
                            useful.add(n)
                            changed = True
        params = set(self.tensor_params)
        self.active_t = {n for n in self.active_t if n in useful or n in params}
        self.active_s = {n for n in self.active_s if n in useful}

    def is_active(self, e) -> bool:
        return R.active(e, lambda n: n in self.active_s, lambda n: n in self.active_t)

    # ================================================================ pass 3: what the reverse part reads
    def chain(self, s: A.Assign, g):
        """(accumulation?, [(read, coefficient)]) for the assignment ``s`` with result adjoint ``g``."""
        acc = _accumulation(s)
        c = R.Chain(self.is_active)
        if acc is not None:
            sign, f = acc
            c.run(f, g if sign > 0 else R.neg(g))
        else:
            c.run(s.value, g)
        out = c.out
        subs = self.recompute.get(id(s))
        if subs:
            out = [(r, _replace_reads(coef, subs)) for r, coef in out]
        if isinstance(s.target, A.Name) and acc is None and isinstance(s.value, A.Call) \
                and s is self.scalars[s.target.id].decl:
            # exp(u), sigmoid(u), ... reappear in their own derivative: use the value computed.
            out = [(r, _replace_expr(coef, unparse_expr(s.value), s.target)) for r, coef in out]
        return acc is not None, out

    # ------------------------------------------------------------ recomputation instead of tapes
    def plan_recompute(self):
        """Reads of overwritten cells whose value the statement that wrote it can recompute from
        intact inputs: the coefficients use that expression instead (no tape, no forward part)."""
        self.recompute: dict = {}  # id(stmt) -> {unparsed read: expression}
        stores = {}
        for w in self.assigns:
            if isinstance(w.target, A.Subscript):
                stores.setdefault(w.target.value.id, []).append(w)
        for p in self.assigns:
            if not self.is_active(p.value):
                continue
            for r in value_walk(p.value):
                if not (isinstance(r, A.Subscript) and isinstance(r.value, A.Name) and r.value.id in stores):
                    continue
                ws = stores[r.value.id]
                if not any(self.may_follow(w, p, r, r.value.id) for w in ws):
                    continue  # intact: read where it lives
                expr = self.reaching_value(p, r, ws)
                if expr is not None:
                    self.recompute.setdefault(id(p), {})[unparse_expr(r)] = expr

    def reaching_value(self, p, r, ws):
        """The expression that computed cell ``r`` read by ``p``, in ``p``'s loop variables, or None."""
        before = [w for w in ws if w is not p and self.info[id(w)].first < self.info[id(p)].first]
        others = [w for w in ws if w is not p and w not in before]
        if len(before) != 1 or others:
            return None
        if any(w is p for w in ws) and unparse_expr(p.target) != unparse_expr(r):
            return None
        w0 = before[0]
        b = self.info[id(w0)].block
        while not self.info[id(p)].block.inside(b):
            if isinstance(b.owner, A.If):
                return None  # w0 may not run: another store (or none) may have written the cell
            b = b.parent
        lw, lp_ = self.info[id(w0)].block.loops, self.info[id(p)].block.loops
        depth = 0
        while depth < min(len(lw), len(lp_)) and lw[depth] is lp_[depth]:
            depth += 1
        own = {lp.var: lp for lp in lw[depth:]}
        by_p = {lp.var: lp for lp in lp_}
        mapping = {}
        for wi, ri in zip(w0.target.indices, r.indices):
            a = self.affine(wi)
            if a is None:
                return None
            vs = [k for k in a if isinstance(k, str) and k in own]
            if not vs:
                if self.affine(ri) != a:
                    return None
                continue
            if len(vs) != 1 or a[vs[0]] != 1 or not isinstance(ri, A.Name) or ri.id not in by_p:
                return None
            v = vs[0]
            if set(k for k in a if k is not None) != {v} or a.get(None, 0) != 0:
                return None
            q = by_p[ri.id]
            if unparse_expr(own[v].lo) != unparse_expr(q.lo) or unparse_expr(own[v].hi) != unparse_expr(q.hi) \
                    or own[v].step != q.step:
                return None
            mapping[v] = name(q.var)
        if set(mapping) != set(own):
            return None
        value = self.inline_locals(w0.value, w0, set(own))
        if value is None:
            return None
        return _subst_expr(value, mapping)

    def inline_locals(self, e, w0, own_vars, depth=0):
        """``e`` (read at ``w0``) with scalars local to ``w0``'s own loops replaced by their single
        definition; None if it reads something that may have changed after ``w0``."""
        if depth > 8:
            return None
        subs = {}
        for x in value_walk(e):
            if isinstance(x, A.Subscript) and isinstance(x.value, A.Name):
                if any(isinstance(a.target, A.Subscript) and a.target.value.id == x.value.id for a in self.assigns):
                    return None  # only tensors nobody writes
            elif isinstance(x, A.Name) and x.id in self.scalars:
                sc = self.scalars[x.id]
                assigns = [a for a in self.assigns if isinstance(a.target, A.Name) and a.target.id == x.id]
                local = sc.block.loops and sc.block.loops[-1].var in own_vars
                if local:
                    if len(assigns) != 1 or self.info[id(assigns[0])].first > self.info[id(w0)].first:
                        return None
                    inner = self.inline_locals(assigns[0].value, w0, own_vars, depth + 1)
                    if inner is None:
                        return None
                    subs[x.id] = inner
                else:
                    for a in assigns:
                        shared = [lp for lp in self.info[id(a)].block.loops[len(sc.block.loops):]
                                  if lp in self.info[id(w0)].block.loops]
                        if self.info[id(a)].first > self.info[id(w0)].first or shared:
                            return None
        return _subst_expr(e, subs) if subs else e

    def reads(self, e) -> set:
        """Names of scalars and tensors whose values ``e`` reads."""
        out = set()
        for x in value_walk(e):
            if isinstance(x, A.Name) and (x.id in self.scalars or x.id in self.tensors):
                out.add(x.id)
        return out

    def index_reads(self, e) -> set:
        out = set()
        for x in value_walk(e):
            if isinstance(x, A.Subscript):
                for i in x.indices:
                    out |= self.reads(i)
        return out

    def enclosing(self, s):
        """The For / If statements around ``s``, innermost first."""
        b = self.info[id(s)].block
        while b is not None and b.owner is not None:
            yield b.owner
            b = b.parent

    def analyse(self):
        self.need_at: dict = {}  # id(stmt) -> names read at reverse time
        g = name("__g")
        self.chains = {}
        for s in self.assigns:
            n = _target_name(s.target)
            active = (n in self.active_t) if isinstance(s.target, A.Subscript) else (n in self.active_s)
            if not active:
                continue
            acc, pairs = self.chain(s, g) if self.is_active(s.value) else (False, [])
            if self.is_active(s.value):
                self.chains[id(s)] = (acc, pairs)
            need = self.index_reads(s.target) if isinstance(s.target, A.Subscript) else set()
            for read, coef in pairs:
                need |= self.reads(coef) | self.index_reads(read)
                if isinstance(read, A.Subscript):
                    need |= self.index_reads(A.Tuple(None, [read]))
            need.discard("__g")
            self.need_at[id(s)] = need
            for c in self.enclosing(s):
                self.need_at.setdefault(id(c), set()).update(self.compound_reads(c))
        self.needed = set()
        for v in self.need_at.values():
            self.needed |= v
        for n in self.active_s:
            # The adjoint of an active scalar takes its dtype from the scalar's first value.
            self.needed |= self.reads(self.scalars[n].decl.value)
        # Close over the statements computing needed values.
        work = list(self.needed)
        while work:
            n = work.pop()
            for s in self.assigns:
                if _target_name(s.target) != n:
                    continue
                more = self.reads(s.value) | (self.index_reads(s.target) if isinstance(s.target, A.Subscript) else set())
                for c in self.enclosing(s):
                    more |= self.compound_reads(c)
                for m in more - self.needed:
                    self.needed.add(m)
                    work.append(m)

    def compound_reads(self, c) -> set:
        if isinstance(c, A.For):
            lp = self.loops[c.target.id]
            return self.reads(lp.lo) | self.reads(lp.hi)
        return self.reads(c.cond)

    # ================================================================ pass 4: saves
    def plan_saves(self):
        # Where the reverse part reads forward values: (statement, name, subscript).
        positions = []
        self.replay_scalar_reads = []
        self.value_tape = {}  # id(store) -> tape of the values it computed
        g = name("__g")

        def add_reads(stmt, e):
            for x in value_walk(e):
                if isinstance(x, A.Subscript) and isinstance(x.value, A.Name) and x.value.id in self.tensors:
                    positions.append((stmt, x.value.id, x))
                elif isinstance(x, A.Name) and x.id in self.scalars:
                    positions.append((stmt, x.id, None))

        for s in self.assigns:
            if id(s) in self.chains:
                _, pairs = self.chain(s, g)
                for read, coef in pairs:
                    add_reads(s, coef)
                    if isinstance(read, A.Subscript):
                        for i in read.indices:
                            add_reads(s, i)
                if isinstance(s.target, A.Subscript):
                    for i in s.target.indices:
                        add_reads(s, i)
            n = _target_name(s.target)
            if n in self.needed and self.decl_block(n).parent is not None:
                # Replayed at the start of reversed iterations: what it reads from outside must be
                # as it was at the start of the iteration.
                conflict = [x for x in value_walk(s.value) if isinstance(x, A.Subscript)
                            and isinstance(x.value, A.Name) and self.replay_conflict(s, x)]
                if conflict:
                    t = self.tensors.get(n)
                    if t is not None and any(isinstance(x, A.Name) and x.id in self.scalars for x in walk(t.dtype)):
                        raise unsupported(f"a value computed from `{conflict[0].value.id}` before the same loop body "
                                          f"overwrites `{conflict[0].value.id}`", s,
                                          "compute the value into a temporary tensor first")
                    # Recomputing it would read overwritten cells: save it when first computed.
                    self.value_tape[id(s)] = self.fresh(f"{n}_saved")
                else:
                    self.replay_scalar_reads.append((s, self.reads(s.value) | (
                        self.index_reads(s.target) if isinstance(s.target, A.Subscript) else set())))
        for c in self.walk_stmts(self.top.body):
            if isinstance(c, A.If) and id(c) in self.need_at:
                add_reads(c, c.cond)
        writers = {}
        for s in self.assigns:
            writers.setdefault(_target_name(s.target), []).append(s)
        # Stores whose old value a later-reversed read needs: saved on a tape, restored.
        self.store_tape = {}
        self.snap = {}  # id(assign) -> snapshot scalar name
        taped, snapped = set(), set()
        for p, n, sub in positions:
            for w in writers.get(n, []):
                if id(w) in taped or id(w) in snapped:
                    continue
                if self.may_follow(w, p, sub, n):
                    if isinstance(w.target, A.Subscript):
                        taped.add(id(w))
                    elif w is not self.scalars[n].decl:
                        snapped.add(id(w))
        self.taped = taped
        self.restore = {w.target.value.id for w in self.assigns if id(w) in taped}
        for c in self.walk_stmts(self.top.body):
            if isinstance(c, A.For) and id(c) in self.need_at:
                lp = self.loops[c.target.id]
                for n in self.reads(lp.lo) | self.reads(lp.hi):
                    if n in self.tensors or any(_target_name(a.target) == n and a is not self.scalars[n].decl
                                                for a in self.assigns):
                        raise unsupported("a loop bound that the kernel changes while it runs", c)
        # Scalars: saved before an assignment whose old value is read later in reverse, and on entry
        # to each loop / branch (inside their declaring block) around such an assignment.
        self.entry = {}  # id(For/If) -> {scalar: tape or snapshot name}
        self.cond_snap = {}  # id(If) -> bool scalar holding its condition
        for s in self.assigns:
            if id(s) not in snapped:
                continue
            n = s.target.id
            self.snap[id(s)] = self.fresh(f"{n}_old")
            decl_block = self.scalars[n].block
            for c in self.enclosing(s):
                if self.info[id(c)].block.inside(decl_block):
                    names = self.entry.setdefault(id(c), {})
                    if n not in names:
                        names[n] = self.fresh(f"{n}_at_{c.target.id}" if isinstance(c, A.For) else f"{n}_before_if")
        assigned_in = {}
        for a in self.assigns:
            if isinstance(a.target, A.Name):
                for c in self.enclosing(a):
                    assigned_in.setdefault(id(c), set()).add(a.target.id)
        for s, names in self.replay_scalar_reads:
            b = self.decl_block(_target_name(s.target))
            for u in names:
                if u not in self.scalars:
                    continue
                d = self.scalars[u].block
                blk = b
                while blk is not None and blk is not d and blk.owner is not None and blk.inside(d):
                    c = blk.owner
                    if u in assigned_in.get(id(c), set()):
                        names_c = self.entry.setdefault(id(c), {})
                        if u not in names_c:
                            names_c[u] = self.fresh(f"{u}_at_{c.target.id}" if isinstance(c, A.For)
                                                    else f"{u}_before_if")
                    blk = blk.parent
        for c in self.walk_stmts(self.top.body):
            if isinstance(c, A.If) and (id(c) in self.need_at or self.reads(c.cond) & self.needed):
                changed = set()
                for s in self.walk_stmts(c.body + c.orelse):
                    if isinstance(s, A.Assign):
                        changed.add(_target_name(s.target))
                if self.reads(c.cond) & changed:
                    self.cond_snap[id(c)] = self.fresh("cond")
        # A condition saved inside a loop or branch goes to a tape at the top, filled by the forward part.
        self.cond_tape = {id(c): self.info[id(c)].block.loops for c in self.walk_stmts(self.top.body)
                          if id(c) in self.cond_snap and self.info[id(c)].block.parent is not None}

    def replay_conflict(self, s, sub) -> bool:
        """A replay recomputes ``s`` at the start of a reversed loop iteration (or branch): whether a
        tensor it reads may be overwritten later inside that same iteration."""
        t = sub.value.id
        if t not in self.tensors:
            return False
        b = self.decl_block(_target_name(s.target))
        while b is not None and b.parent is not None:
            if not self.tensors[t].block.inside(b):
                for w in self.assigns:
                    if not (isinstance(w.target, A.Subscript) and w.target.value.id == t
                            and self.info[id(w)].block.inside(b)):
                        continue
                    shared = [lp for lp in self.info[id(w)].block.loops[len(b.loops):]
                              if lp in self.info[id(s)].block.loops]
                    if (self.info[id(w)].first >= self.info[id(s)].first or shared) \
                            and self.cells_may_meet(s, sub, w, len(b.loops)):
                        return True
            b = b.parent
        return False

    def cells_may_meet(self, s, sub, w, depth: int) -> bool:
        """Whether store ``w`` can write the cell ``sub`` that ``s`` reads, in the same iteration of
        the ``depth`` outermost loops around both (asked of isl; True where it cannot tell)."""
        params: dict = {}
        names: list = []
        cons: list = []

        def text(aff, ren):
            parts = []
            for k, v in aff.items():
                if k is None:
                    parts.append(str(v))
                elif isinstance(k, str):
                    parts.append(f"{v}*{ren.get(k, k)}")
                elif k[0] == "sym":
                    p = params.setdefault(k[1], f"p{len(params)}")
                    parts.append(f"{v}*{p}")
            return " + ".join(parts) or "0"

        def loops_of(stmt, tag):
            ren = {}
            for i, lp in enumerate(self.info[id(stmt)].block.loops):
                ren[lp.var] = lp.var if i < depth else f"{lp.var}_{tag}"
            for i, lp in enumerate(self.info[id(stmt)].block.loops):
                if i < depth and tag == "w":
                    continue
                lo, hi = self.affine(lp.lo), self.affine(lp.hi)
                if lo is None or hi is None:
                    return None
                v = ren[lp.var]
                names.append(v)
                if lp.step > 0:
                    cons.append(f"{text(lo, ren)} <= {v} < {text(hi, ren)}")
                else:
                    cons.append(f"{text(hi, ren)} < {v} <= {text(lo, ren)}")
            return ren

        rr, rw = loops_of(s, "r"), loops_of(w, "w")
        if rr is None or rw is None:
            return True
        for a, b in zip(sub.indices, w.target.indices):
            fa, fb = self.affine(a), self.affine(b)
            if fa is None or fb is None:
                return True
            cons.append(f"{text(fa, rr)} = {text(fb, rw)}")
        src = f"[{', '.join(params.values())}] -> {{ [{', '.join(names)}] : {' and '.join(cons) or 'true'} }}"
        try:
            return not isl.Set(src).is_empty()
        except isl.Error:
            return True

    def may_follow(self, w, s, sub, n) -> bool:
        """Whether assignment ``w`` may overwrite what statement ``s`` reads of ``n`` (the cell
        ``sub``, for a tensor) after ``s`` reads it.  Syntax answers first; where it says yes for
        a tensor, isl decides exactly over the loops' iteration domains (if they are affine)."""
        quick = self.may_follow_syntax(w, s, sub, n)
        if not quick or sub is None:
            return quick
        exact = self.isl_follows(w, s, sub, n)
        return quick if exact is None else exact

    def isl_follows(self, w, s, sub, n):
        """True/False: whether some later instance of store ``w`` writes the cell ``sub`` that an
        instance of ``s`` reads; None where the loops or subscripts are not affine."""
        iw, is_ = self.info[id(w)], self.info[id(s)]
        if len(w.target.indices) != len(sub.indices):
            return None
        depth = len(self.tensors[n].block.loops)
        params: dict = {}
        names, cons = [], []

        def text(aff, ren):
            parts = []
            for k, v in aff.items():
                if k is None:
                    parts.append(str(v))
                elif isinstance(k, str):
                    parts.append(f"{v}*{ren.get(k, k)}")
                elif k[0] == "sym":
                    parts.append(f"{v}*{params.setdefault(k[1], f'p{len(params)}')}")
            return " + ".join(parts) or "0"

        def domain(loops, tag):
            ren = {lp.var: (lp.var if i < depth else f"{lp.var}_{tag}") for i, lp in enumerate(loops)}
            for i, lp in enumerate(loops):
                if i < depth and tag == "w":
                    continue
                lo, hi = self.affine(lp.lo), self.affine(lp.hi)
                if lo is None or hi is None:
                    return None
                v = ren[lp.var]
                names.append(v)
                cons.append(f"{text(lo, ren)} <= {v} < {text(hi, ren)}" if lp.step > 0
                            else f"{text(hi, ren)} < {v} <= {text(lo, ren)}")
            return ren

        rs, rw = domain(is_.block.loops, "s"), domain(iw.block.loops, "w")
        if rs is None or rw is None:
            return None
        for a, b in zip(sub.indices, w.target.indices):
            fa, fb = self.affine(a), self.affine(b)
            if fa is None or fb is None:
                return None
            cons.append(f"{text(fa, rs)} = {text(fb, rw)}")
        shared = []
        for a, b in zip(iw.block.loops[depth:], is_.block.loops[depth:]):
            if a is not b:
                break
            shared.append(a)
        later = []
        for k, lp in enumerate(shared):
            eq = [f"{rw[q.var]} = {rs[q.var]}" for q in shared[:k]]
            eq.append(f"{rw[lp.var]} {'>' if lp.step > 0 else '<'} {rs[lp.var]}")
            later.append("(" + " and ".join(eq) + ")")
        if w is s or iw.first > is_.first:
            later.append("(" + " and ".join([f"{rw[q.var]} = {rs[q.var]}" for q in shared] or ["true"]) + ")")
        if not later:
            return False
        src = (f"[{', '.join(params.values())}] -> {{ [{', '.join(names)}] : "
               f"{' and '.join(cons) or 'true'} and ({' or '.join(later)}) }}")
        try:
            return not isl.Set(src).is_empty()
        except isl.Error:
            return None

    def may_follow_syntax(self, w, s, sub, n) -> bool:
        iw, is_ = self.info[id(w)], self.info[id(s)]
        if w is s or iw.first > is_.first:
            return True
        decl = self.tensors[n].block if n in self.tensors else self.scalars[n].block
        depth = len(decl.loops)
        shared = []
        for a, b in zip(iw.block.loops[depth:], is_.block.loops[depth:]):
            if a is not b:
                break
            shared.append(a)
        if not shared:
            return False
        # Both inside the same loops: later iterations of them run w again, after s, unless w writes
        # exactly the cell s reads, a different one in every iteration.
        if sub is None or len(w.target.indices) != len(sub.indices):
            return True
        # Later iterations of the shared loops write other cells if, for each shared loop, some
        # subscript position is `v + c` with the same c in both.
        for lp in shared:
            for wi, ri in zip(w.target.indices, sub.indices):
                a, b = self.affine(wi), self.affine(ri)
                if a is not None and a == b and set(k for k in a if k is not None) == {lp.var} and a[lp.var] == 1:
                    break
            else:
                return True
        return False

    # ================================================================ affine bounds for tapes
    def affine(self, e):
        """``e`` as {loop var: coef, (symbol text, ast): coef, None: const}, or None."""
        if R.is_num(e) and isinstance(e.value, int):
            return {None: e.value}
        if isinstance(e, A.Name) and e.id in self.loops:
            return {e.id: 1}
        if not any(isinstance(x, A.Name) and x.id in self.loops for x in walk(e)):
            if any(isinstance(x, A.Subscript) and not isinstance(x.value, A.Attribute) for x in walk(e)):
                return None
            if any(isinstance(x, A.Name) and (x.id in self.scalar_params or
                                              (x.id in self.scalars and not self.constant_like(x.id)))
                   for x in value_walk(e)):
                return None  # known only when the kernel runs
            return {("sym", unparse_expr(e)): 1, ("ast", unparse_expr(e)): e}
        if isinstance(e, A.BinOp) and e.op in ("+", "-"):
            a, b = self.affine(e.left), self.affine(e.right)
            if a is None or b is None:
                return None
            return _aff_add(a, b, 1 if e.op == "+" else -1)
        if isinstance(e, A.BinOp) and e.op == "*":
            a, b = self.affine(e.left), self.affine(e.right)
            if a is None or b is None:
                return None
            if set(a) <= {None}:
                return _aff_scale(b, a.get(None, 0))
            if set(b) <= {None}:
                return _aff_scale(a, b.get(None, 0))
            return None
        if isinstance(e, A.UnaryOp) and e.op == "-":
            a = self.affine(e.operand)
            return None if a is None else _aff_scale(a, -1)
        return None

    def max_over_loops(self, aff, loops):
        """Upper bound of affine ``aff`` over the iterations of ``loops`` (innermost eliminated first)."""
        for lp in reversed(loops):
            c = aff.get(lp.var, 0)
            if c == 0:
                continue
            if (c > 0) == (lp.step > 0):
                bound = self.affine(lp.hi)
                if bound is None:
                    raise unsupported("a loop with bounds that are not affine", lp.node)
                bound = _aff_add(bound, {None: -1 if lp.step > 0 else 1}, 1)
            else:
                bound = self.affine(lp.lo)
                if bound is None:
                    raise unsupported("a loop with bounds that are not affine", lp.node)
            rest = dict(aff)
            del rest[lp.var]
            aff = _aff_add(rest, _aff_scale(bound, c), 1)
        if any(isinstance(k, str) for k in aff):
            raise unsupported("loop bounds the tape size cannot be bounded for")
        return aff

    def trip_bound(self, lp: Loop):
        """An expression bounding the iteration count of ``lp`` for every iteration around it."""
        lo, hi = self.affine(lp.lo), self.affine(lp.hi)
        if lo is None or hi is None:
            raise unsupported("a loop with bounds that are not affine", lp.node)
        span = _aff_add(hi, lo, -1) if lp.step > 0 else _aff_add(lo, hi, -1)
        outer = self.loops_around(lp)
        m = _aff_expr(self.max_over_loops(span, outer))
        k = abs(lp.step)
        if k != 1:
            m = A.BinOp(None, "//", add(m, num(k - 1)), num(k))
        return call("max", num(0), m)

    def loops_around(self, lp: Loop) -> list:
        return self.info[id(lp.node)].block.loops

    def iteration(self, lp: Loop):
        v = name(lp.var)
        if lp.step > 0:
            d = R.sub(v, lp.lo)
            return d if lp.step == 1 else A.BinOp(None, "//", d, num(lp.step))
        d = R.sub(lp.lo, v)
        return d if lp.step == -1 else A.BinOp(None, "//", d, num(-lp.step))

    # ================================================================ pass 5: emission
    def run(self) -> Gradient:
        self.prepare()
        self.activity()
        self.usefulness()
        if not self.active_t:
            raise HybridUnsupportedError(f"no input of `{self.kdef.name}` has a gradient (no float tensor input)",
                                         self.kdef.span, None)
        self.recompute = {}
        self.plan_recompute()
        self.analyse()
        self.plan_saves()
        return self.emit()

    def emit(self) -> Gradient:
        self.tapes = []
        self.fwd_names = {}  # forward name -> name in the gradient kernel
        self.adj = {}  # tensor or scalar -> its adjoint's name
        self.pending_tapes = {}  # id(block) -> [(stmt whose subtree needs it, Assign)]
        params = list(self.params)
        out_params = {}
        if self.with_outputs:
            for o in self.outputs:
                out_params[o] = self.fresh(f"{o}_out")
                params.append(out_params[o])
        single = len(self.outputs) == 1
        douts = {}
        for o in self.outputs:
            douts[o] = self.fresh("dout" if single else f"dout_{o}")
            params.append(douts[o])
        body = []
        # In-place inputs: the forward part works on a copy.
        for o in self.outputs:
            if o in self.tensor_params and o in self.needed:
                copy = self.fresh(f"{o}_fwd")
                self.fwd_names[o] = copy
                body.append(A.Assign(None, name(copy), call("allocate", _attr(o, "shape"), _attr(o, "dtype"))))
                body.extend(_copy_loop(copy, o, self.fresh("idx")))
        self.passed = set()
        for o in self.outputs:
            if self.with_outputs and o not in self.restore and o not in self.tensor_params \
                    and self.reads_see_final(o):
                self.fwd_names[o] = out_params[o]
                self.passed.add(o)
        self.plan_tapes()
        body.extend(self.forward(self.top, replay=False))
        # Adjoints of the top block.
        body.append(Comment(None, "adjoints"))
        for p in self.tensor_params:
            if p in self.active_t:
                a = self.adj[p] = self.fresh(f"d_{p}")
                body.append(A.Assign(None, name(a), call("output_tensor", _attr(p, "shape"), _attr(p, "dtype"))))
                if p in self.outputs:
                    body.extend(_copy_loop(a, douts[p], self.fresh("idx")))
        for o in self.outputs:
            if o in self.tensor_params or o not in self.active_t:
                continue
            if self.adjoint_written(o):
                a = self.adj[o] = self.fresh(f"d_{o}")
                t = self.tensors[o]
                body.append(A.Assign(None, name(a), call("allocate", subst(t.shape, self.fwd_names),
                                                         subst(t.dtype, self.fwd_names))))
                body.extend(_copy_loop(a, douts[o], self.fresh("idx")))
            else:
                self.adj[o] = douts[o]
        body.extend(self.adjoint_decls(self.top, skip=set(self.outputs)))
        body.append(Comment(None, "reverse"))
        body.extend(self.reverse(self.top))
        grads = [p in self.active_t for p in self.params]
        body.append(A.Return(None, [name(self.adj[p]) for p in self.params if p in self.active_t]))
        kdef = A.KernelDef(self.kdef.span, f"{self.kdef.name}_grad", [A.Param(None, p) for p in params], body,
                           f"Gradient of `{self.kdef.name}` (derived by hyb): takes its inputs"
                           f"{', its outputs' if self.with_outputs else ''} and one gradient per output, "
                           "returns one gradient per differentiable input.")
        return Gradient(kdef, grads, list(self.outputs), self.tapes, params)

    def reads_see_final(self, t) -> bool:
        """Whether every read of tensor ``t`` sees its final value (no store to the cell after it)."""
        stores = [w for w in self.assigns if isinstance(w.target, A.Subscript) and w.target.value.id == t]
        for s in self.assigns:
            exprs = [s.value] + (list(s.target.indices) if isinstance(s.target, A.Subscript) else [])
            for e in exprs:
                for x in value_walk(e):
                    if isinstance(x, A.Subscript) and isinstance(x.value, A.Name) and x.value.id == t \
                            and any(self.may_follow(w, s, x, t) for w in stores):
                        return False
        return True

    def adjoint_written(self, t) -> bool:
        """Whether the adjoint of tensor ``t`` is ever written (a read of ``t`` adds to it, or a store
        to ``t`` clears it): if not, the incoming gradient can serve as the adjoint."""
        for s in self.assigns:
            if isinstance(s.target, A.Subscript) and s.target.value.id == t and self.clears(s):
                return True
            if id(s) not in self.chains:
                continue
            acc, pairs = self.chains[id(s)]
            for read, _ in pairs:
                if isinstance(read, A.Subscript) and read.value.id == t:
                    return True
        return False

    def read_anywhere(self, t) -> bool:
        for s in self.assigns:
            acc = _accumulation(s) if id(s) in self.chains and self.chains[id(s)][0] else None
            for x in value_walk(s.value if acc is None else acc[1]):
                if isinstance(x, A.Subscript) and x.value.id == t:
                    return True
            for x in value_walk(s.target):
                if isinstance(x, A.Subscript) and x is not s.target and x.value.id == t:
                    return True
        for c in self.walk_stmts(self.top.body):
            for e in self.stmt_exprs(c) if isinstance(c, (A.For, A.If)) else []:
                if t in self.reads(e):
                    return True
        return False

    def clears(self, s) -> bool:
        """Whether the adjoint of the target of store ``s`` must be cleared after its adjoint."""
        acc = self.chains.get(id(s), (False, []))[0]
        if acc:
            return False
        if isinstance(s.target, A.Name):
            return s is not self.scalars[s.target.id].decl
        t = s.target.value.id
        if self.read_anywhere(t) or t in self.tensor_params:
            return True  # (an input written in place: its adjoint is the input's gradient)
        # Nothing reads the tensor: its adjoint matters only to other stores of the same cell.
        stores = [w for w in self.assigns if isinstance(w.target, A.Subscript) and w.target.value.id == t]
        if len(stores) > 1:
            return True
        depth = len(self.tensors[t].block.loops)
        for lp in self.info[id(s)].block.loops[depth:]:
            if not any(self.affine(i) is not None and set(k for k in self.affine(i) if k is not None) == {lp.var}
                       and self.affine(i)[lp.var] == 1 for i in s.target.indices):
                return True  # the loop writes one cell more than once
        return False

    # ------------------------------------------------------------ tapes
    def plan_tapes(self):
        self.store_tape = {}  # id(store) -> (tape name, index tuple)
        for s in self.assigns:
            if id(s) not in self.taped:
                continue
            t = self.tensors[s.target.value.id]
            loops = self.info[id(s)].block.loops[len(t.block.loops):]
            tape = self.fresh(f"{t.name}_tape")
            shape = A.Tuple(None, [self.trip_bound(lp) for lp in loops])
            index = [self.iteration(lp) for lp in loops]
            decl = A.Assign(None, name(tape), call("allocate", shape, _attr(self.fwd(t.name), "dtype")))
            self.tapes.append((tape, shape, _attr(self.fwd(t.name), "dtype"), f"old values of `{t.name}`"))
            self.store_tape[id(s)] = (tape, index)
            self.add_pending(t.block, s, decl)
        for c in self.walk_stmts(self.top.body):
            if id(c) in self.cond_tape:
                shape = A.Tuple(None, [self.trip_bound(lp) for lp in self.cond_tape[id(c)]])
                tape = self.cond_snap[id(c)]
                self.tapes.append((tape, shape, A.Str(None, "bool"), "a condition at each iteration"))
                self.add_pending(self.top, c, A.Assign(None, name(tape), call("allocate", shape, A.Str(None, "bool"))))
        for st in self.assigns:
            if id(st) in self.value_tape:
                loops = self.info[id(st)].block.loops
                shape = A.Tuple(None, [self.trip_bound(lp) for lp in loops])
                tape = self.value_tape[id(st)]
                n = _target_name(st.target)
                if n in self.tensors:
                    dtype = self.F(self.tensors[n].dtype)
                else:  # a scalar: kept in float64 (or int64), exact for every float (or integer) dtype
                    dtype = A.Str(None, "int64" if self.scalars[n].int_typed else "float64")
                self.tapes.append((tape, shape, dtype, f"values of `{n}` computed on line "
                                                       f"{getattr(st.span, 'line', '?')}"))
                self.add_pending(self.top, st, A.Assign(None, name(tape), call("allocate", shape, dtype)))
        self.scalar_tape = {}  # (id(For), scalar) -> tape name
        for cid, names in self.entry.items():
            c = self.find(cid)
            if not isinstance(c, A.For):
                continue
            lp = self.loops[c.target.id]
            for n, tape in names.items():
                shape = A.Tuple(None, [self.trip_bound(lp)])
                decl = A.Assign(None, name(tape), call("allocate", shape, _attr(n, "dtype")))
                self.tapes.append((tape, shape, _attr(n, "dtype"), f"`{n}` at each iteration of `{lp.var}`"))
                self.add_pending(self.info[cid].block, c, decl, needs=n)

    def cond_ref(self, s):
        return _sub(self.cond_snap[id(s)], [self.iteration(lp) for lp in self.cond_tape[id(s)]])

    def find(self, cid):
        for c in self.walk_stmts(self.top.body):
            if id(c) == cid:
                return c
        raise KeyError(cid)

    def add_pending(self, block, stmt, decl, needs=None):
        """Declare ``decl`` in ``block`` just before the statement of ``block`` containing ``stmt``
        (a scalar's tape only where that scalar is computed: ``needs``)."""
        self.pending_tapes.setdefault(id(block), []).append((stmt, decl, needs))

    def fwd(self, n: str) -> str:
        return self.fwd_names.get(n, n)

    def F(self, e):
        """A forward expression as the gradient kernel writes it."""
        return subst(e, self.fwd_names)

    # ------------------------------------------------------------ forward part / replay
    def decl_block(self, n) -> Block:
        return self.tensors[n].block if n in self.tensors else self.scalars[n].block

    def keep_names(self, block: Block, extra=()) -> set:
        """The names whose assignments the forward part of ``block`` (or its replay) runs: the
        needed values declared in ``block``, ``extra``, and what computing them reads inside it."""
        keep = {n for n in self.needed if (n in self.tensors or n in self.scalars)
                and self.decl_block(n) is block} | set(extra)
        if block.parent is None:
            for c in self.walk_stmts(block.body):
                if id(c) in self.cond_tape:
                    keep |= {m for m in self.reads(c.cond)}
                if id(c) in self.value_tape:
                    keep.add(_target_name(c.target))
        typed = {n for n, sc in self.scalars.items() if sc.block is block and n in self.active_s}
        for n, sc in self.scalars.items():
            # Constants such as `m = a.shape[1]`: shapes, bounds and tapes may use them.
            if sc.block is block and self.constant_like(n):
                keep.add(n)
        work = list(keep | typed)
        seen = set(work)
        while work:
            n = work.pop()
            for a in self.assigns:
                if _target_name(a.target) != n or not self.info[id(a)].block.inside(block):
                    continue
                if n not in keep and a is not self.scalars[n].decl:
                    continue  # kept for its dtype only
                more = self.reads(a.value) | (self.index_reads(a.target) if isinstance(a.target, A.Subscript)
                                              else set())
                for c in self.enclosing(a):
                    if not self.info[id(c)].block.inside(block):
                        break
                    more |= self.compound_reads(c)
                for m in more:
                    if m not in seen and self.decl_block(m).inside(block):
                        seen.add(m)
                        keep.add(m)
                        work.append(m)
        self._typed_only = typed - keep
        return keep

    def constant_like(self, n, depth=0) -> bool:
        """A scalar assigned once from numbers, shapes, parameters and other such scalars."""
        sc = self.scalars.get(n)
        if sc is None or n in self.active_s or depth > 20:
            return False
        if sum(1 for a in self.assigns if _target_name(a.target) == n) != 1:
            return False
        for x in value_walk(sc.decl.value):
            if isinstance(x, A.Subscript):
                return False
            if isinstance(x, A.Name) and x.id in self.scalars and not self.constant_like(x.id, depth + 1):
                return False
        return True

    def forward(self, block: Block, replay: bool, extra=()) -> list:
        keep = self.keep_names(block, extra)
        typed_only = set(self._typed_only)
        return self.forward_block(block, keep, typed_only, replay)

    def forward_block(self, block, keep, typed_only, replay) -> list:
        out = []
        declared = set()
        for s in block.body:
            if isinstance(s, A.Return):
                continue
            if isinstance(s, A.Assign) and isinstance(s.target, A.Name) and s.target.id in self.tensors:
                t = self.tensors[s.target.id]
                made = []
                if t.name in keep and t.name not in self.passed:
                    made = [A.Assign(s.span, name(t.name), call("allocate", self.F(t.shape), self.F(t.dtype)))]
            elif isinstance(s, A.Assign):
                made = self.forward_assign(s, keep, typed_only, replay)
            elif isinstance(s, A.For):
                made = self.forward_for(s, keep, typed_only, replay)
            else:
                made = self.forward_if(s, keep, typed_only, replay)
            if not made:
                continue
            for stmt, decl, needs in self.pending_tapes.get(id(block), []):
                if needs is not None and needs not in keep:
                    continue
                i, j = self.info[id(s)], self.info[id(stmt)]
                if i.first <= j.first <= i.last and id(decl) not in declared:
                    declared.add(id(decl))
                    out.append(decl)
            out.extend(made)
        return out

    def forward_assign(self, s: A.Assign, keep, typed_only, replay=False) -> list:
        if id(s) in self.value_tape and _target_name(s.target) in keep:
            saved = _sub(self.value_tape[id(s)], [self.iteration(lp) for lp in self.info[id(s)].block.loops])
            if isinstance(s.target, A.Name):
                # The assignment runs as written (it fixes the scalar's dtype), then takes the saved value.
                plain = self.forward_assign_plain(s, keep, typed_only)
                if replay:
                    return plain + [A.Assign(None, name(s.target.id), saved)]
                return plain + [A.Assign(None, saved, name(s.target.id))]
            if replay:
                return [A.Assign(s.span, self.F(s.target), saved)]
            return [A.Assign(s.span, self.F(s.target), self.F(s.value)), A.Assign(None, saved, self.F(s.target))]
        return self.forward_assign_plain(s, keep, typed_only)

    def forward_assign_plain(self, s: A.Assign, keep, typed_only) -> list:
        n = _target_name(s.target)
        if n in typed_only and s is self.scalars[n].decl:
            return [A.Assign(s.span, name(n), self.F(s.value))]
        if n not in keep or n in self.passed:
            return []
        out = []
        if id(s) in self.snap:
            out.append(A.Assign(None, name(self.snap[id(s)]), name(n)))
        tgt = self.F(s.target)
        if id(s) in self.store_tape:
            tape, index = self.store_tape[id(s)]
            out.append(A.Assign(None, _sub(tape, index), tgt))
        out.append(A.Assign(s.span, tgt, self.F(s.value)))
        return out

    def forward_for(self, s: A.For, keep, typed_only, replay) -> list:
        lp = self.loops[s.target.id]
        inner = self.blocks[id(s)]
        rest = self.forward_block(inner, keep, typed_only, replay)
        if not any(not isinstance(x, Comment) for x in rest):
            return []
        body = [A.Assign(None, _sub(tape, [self.iteration(lp)]), name(n))
                for n, tape in self.entry.get(id(s), {}).items() if n in keep]
        return [A.For(s.span, s.target, self.F(s.iter), body + rest)]

    def forward_if(self, s: A.If, keep, typed_only, replay) -> list:
        then, orelse = self.blocks[id(s)]
        a = self.forward_block(then, keep, typed_only, replay)
        b = self.forward_block(orelse, keep, typed_only, replay)
        taped = id(s) in self.cond_tape
        if not a and not b and not (taped and not replay):
            return []
        out = []
        cond = self.F(s.cond)
        if taped:
            ref = self.cond_ref(s)
            if not replay:
                out.append(A.Assign(None, ref, cond))
            cond = ref
        elif id(s) in self.cond_snap:
            out.append(A.Assign(None, name(self.cond_snap[id(s)]), cond))
            cond = name(self.cond_snap[id(s)])
        for n, snap in self.entry.get(id(s), {}).items():
            if n in keep:
                out.append(A.Assign(None, name(snap), name(n)))
        out.append(A.If(s.span, cond, a or [A.Pass(None)], b))
        return out

    # ------------------------------------------------------------ adjoint declarations
    def adjoint_decls(self, block: Block, skip=()) -> list:
        out = []
        for t in self.tensors.values():
            if t.block is block and t.kind != "param" and t.name in self.active_t and t.name not in skip:
                a = self.adj[t.name] = self.fresh(f"d_{t.name}")
                out.append(A.Assign(None, name(a), call("allocate", self.F(t.shape), self.F(t.dtype))))
        for sc in self.scalars.values():
            if sc.block is block and sc.name in self.active_s:
                a = self.adj[sc.name] = self.fresh(f"d_{sc.name}")
                out.append(A.Assign(None, name(a), A.Call(None, _attr(sc.name, "dtype"), [num(0)])))
        return out

    # ------------------------------------------------------------ reverse part
    def has_reverse(self, s) -> bool:
        for x in self.walk_stmts([s]):
            if isinstance(x, A.Assign) and (id(x) in self.chains or id(x) in self.snap or id(x) in self.store_tape
                                            or (x in self.assigns and self.target_active(x) and self.clears(x))):
                return True
        return False

    def reverse(self, block: Block) -> list:
        out = []
        for s in reversed(block.body):
            if isinstance(s, A.Assign):
                if not (id(s) in self.chains or id(s) in self.snap or id(s) in self.store_tape
                        or (s in self.assigns and self.target_active(s) and self.clears(s))):
                    continue
                out.append(self.line_comment(s))
                out.extend(self.reverse_assign(s))
            elif isinstance(s, A.For) and self.has_reverse(s):
                out.append(self.line_comment(s))
                out.extend(self.reverse_for(s))
            elif isinstance(s, A.If) and self.has_reverse(s):
                out.append(self.line_comment(s))
                out.extend(self.reverse_if(s))
        return out

    def reverse_assign(self, s: A.Assign) -> list:
        # First undo the assignment (its coefficients read the values it saw), then its adjoint.
        out = []
        if id(s) in self.store_tape:
            tape, index = self.store_tape[id(s)]
            out.append(A.Assign(None, self.F(s.target), _sub(tape, index)))
        if id(s) in self.snap:
            out.append(A.Assign(None, name(s.target.id), name(self.snap[id(s)])))
        if id(s) not in self.chains:
            if self.target_active(s) and self.clears(s):
                out.append(A.Assign(None, self.adjoint_of(s.target), num(0.0)))
            return out
        acc, pairs = self.chains[id(s)]
        tgt_adj = self.adjoint_of(s.target)
        if acc:
            g = tgt_adj
            if isinstance(s.target, A.Subscript) and len(pairs) > 1:
                tmp = self.fresh("g")
                out.append(A.Assign(None, name(tmp), tgt_adj))
                g = name(tmp)
        else:
            tmp = self.fresh("g")
            out.append(A.Assign(None, name(tmp), tgt_adj))
            if self.clears(s):
                out.append(A.Assign(None, tgt_adj, num(0.0)))
            g = name(tmp)
        _, pairs = self.chain(s, g)
        for read, coef in pairs:
            if isinstance(read, A.Subscript) and read.value.id not in self.active_t:
                continue
            out.append(_increment(self.adjoint_of(read), self.F(coef)))
        return out

    def target_active(self, s) -> bool:
        n = _target_name(s.target)
        return n in self.active_t if isinstance(s.target, A.Subscript) else n in self.active_s

    def adjoint_of(self, ref):
        if isinstance(ref, A.Name):
            return name(self.adj[ref.id])
        return A.Subscript(None, name(self.adj[ref.value.id]), [self.F(i) for i in ref.indices])

    # ------------------------------------------------------------ scatters turned into gathers
    def perfect_nest(self, s: A.For):
        """(loops, statement) if ``s`` is a rectangular nest of loops around one assignment."""
        loops, node = [], s
        while isinstance(node, A.For):
            loops.append(self.loops[node.target.id])
            body = [x for x in node.body if not isinstance(x, (A.Pass, Comment))]
            if len(body) != 1:
                return None
            node = body[0]
        if not isinstance(node, A.Assign) or id(node) not in self.chains:
            return None
        names = {lp.var for lp in loops}
        for lp in loops:
            if any(isinstance(x, A.Name) and x.id in names for x in walk(lp.lo)) \
                    or any(isinstance(x, A.Name) and x.id in names for x in walk(lp.hi)) or lp.step != 1:
                return None
        if id(node) in self.snap or id(node) in self.store_tape or any(id(lp.node) in self.entry for lp in loops):
            return None
        return loops, node

    def gather_nest(self, s: A.For):
        """The adjoint of a loop nest around one assignment as one loop nest per read, each
        looping over the cells it writes: a read ``a[i + o]`` becomes the gather
        ``d_a[h] += ...(i = h - o)`` instead of a scatter, so the cell loops carry no
        dependence.  None where the nest does not allow it."""
        found = self.perfect_nest(s)
        if found is None:
            return None
        loops, st = found
        if isinstance(st.target, A.Name):
            return None
        acc, pairs = self.chains[id(st)]
        if not acc and not self.writes_each_cell_once(st, loops):
            return None  # later iterations overwrite the cell: only the last one's adjoint is nonzero
        target_adj = self.adj[st.target.value.id]
        for read, _ in pairs:
            if isinstance(read, A.Subscript) and self.adj.get(read.value.id) == target_adj:
                return None  # the statement feeds its own target's adjoint
        g = self.adjoint_of(st.target)
        _, pairs = self.chain(st, g)
        out, plain = [], []
        nest_vars = [lp.var for lp in loops]
        shifts: dict = {}  # (tensor, loop of each subscript) -> [(offsets, inc)]
        for read, coef in pairs:
            if isinstance(read, A.Subscript) and read.value.id not in self.active_t:
                continue
            inc = A.AugAssign(None, self.adjoint_of(read), "+", self.F(coef))
            if not isinstance(read, A.Subscript):
                plain.append(_increment(inc.target, inc.value))  # a scalar's adjoint: stays in the nest
                continue
            shift = self.shift_of(read, nest_vars)
            if shift is not None:
                shifts.setdefault((read.value.id, shift[0]), []).append((shift[1], inc))
                continue
            nest = self.gathered(loops, read, inc, st.target)
            if nest is None:
                plain.append(_increment(inc.target, inc.value))
            else:
                out.extend(nest)
        for (t, order), group in shifts.items():
            if all(not any(off) for off, _ in group):
                plain.extend(_increment(inc.target, inc.value) for _, inc in group)  # no scatter
            else:
                out.extend(self.merged_shifts(loops, order, group))
        if not out:
            return None  # nothing to gather: the plain reverse loops do
        if plain:
            out.insert(0, self.plain_nest(loops, plain))
        if not acc and self.clears(st):
            out.append(self.plain_nest(loops, [A.Assign(None, self.adjoint_of(st.target), num(0.0))]))
        return out

    def writes_each_cell_once(self, st, loops) -> bool:
        """Whether each iteration of ``loops`` stores ``st`` into a cell of its own."""
        for lp in loops:
            if not any((a := self.affine(i)) is not None and set(k for k in a if k is not None) == {lp.var}
                       and a[lp.var] == 1 for i in st.target.indices):
                return False
        return True

    def plain_nest(self, loops, body):
        for lp in reversed(loops):
            body = [A.For(None, name(lp.var), call("range", self.F(lp.lo), self.F(lp.hi)), body)]
        return body[0]

    def shift_of(self, read, nest_vars):
        """(loop of each subscript, offset of each) if every subscript of ``read`` is `v + c` for a
        different loop ``v`` of the nest and every loop is used; else None."""
        order, offs = [], []
        for i in read.indices:
            a = self.affine(i)
            vs = [k for k in (a or {}) if k is not None]
            if a is None or len(vs) != 1 or vs[0] not in nest_vars or a[vs[0]] != 1 or vs[0] in order:
                return None
            order.append(vs[0])
            offs.append(a.get(None, 0))
        if sorted(order) != sorted(nest_vars):
            return None
        return tuple(order), tuple(offs)

    def merged_shifts(self, loops, order, group) -> list:
        """Loop nests over the cells of ``d_y`` that shifted reads ``y[i + o]`` write: each read
        becomes ``d_y[h] += c(i = h - o)`` where ``h - o`` is an iteration.  Each dimension is split
        into the cells every read writes (no conditions: the interior, where the loop vectorises)
        and the edges on either side (conditions kept); more than three dimensions stay in one
        nest with conditions."""
        by_var = {lp.var: lp for lp in loops}
        cells = [self.fresh("h") for _ in order]
        stmts = []
        for offs, inc in group:
            values = {v: R.sub(name(h), num(o)) for v, h, o in zip(order, cells, offs)}
            conds = [A.Compare(None, ["<=", "<"], [self.F(by_var[v].lo), values[v], self.F(by_var[v].hi)])
                     for v in order]
            stmt = _increment(A.Subscript(None, inc.target.value, [name(h) for h in cells]),
                              _subst_expr(inc.value, values))
            stmts.append((conds, stmt))

        def bound(k, side):
            v = order[k]
            base = self.F(by_var[v].lo if side in ("lo_min", "lo_max") else by_var[v].hi)
            items = {}
            for offs, _ in group:
                e = add(base, num(offs[k]))
                items[unparse_expr(e)] = e
            es = [e for _, e in sorted(items.items())]
            if len(es) == 1:
                return es[0]
            return call("min" if side in ("lo_min", "hi_min") else "max", *es)

        segments = []
        for k in range(len(order)):
            u_lo, u_hi, i_lo, i_hi = bound(k, "lo_min"), bound(k, "hi_max"), bound(k, "lo_max"), bound(k, "hi_min")
            if len(order) > 3:
                segments.append([(u_lo, u_hi, False)])
            else:
                # Disjoint and covering even where the interior is empty (tiny extents).
                a = call("max", u_lo, call("min", i_lo, u_hi))
                b = call("max", a, call("min", i_hi, u_hi))
                segments.append([(u_lo, a, False), (a, b, True), (b, u_hi, False)])
        out = []

        def product(k, chosen):
            if k == len(order):
                interior = all(c[2] for c in chosen)
                body = [stmt if interior else A.If(None, conds[0] if len(conds) == 1 else
                                                   A.BoolOp(None, "and", conds), [stmt], [])
                        for conds, stmt in stmts]
                for kk in reversed(range(len(order))):
                    lo, hi, _ = chosen[kk]
                    body = [A.For(None, name(cells[kk]), call("range", lo, hi), body)]
                out.append(body[0])
                return
            for seg in segments[k]:
                product(k + 1, chosen + [seg])

        product(0, [])
        return out

    def gathered(self, loops, read, inc, target):
        """The nest of ``inc`` (``d_y[f(i)] += c(i)``) reordered to loop over the cells it writes."""
        by_var = {lp.var: lp for lp in loops}
        target_vars = {x.id for i in target.indices for x in walk(i) if isinstance(x, A.Name)}
        cells, subst_map, guards, eliminated = [], {}, [], set()
        new_index = []
        for idx in read.indices:
            aff = self.affine(idx)
            vs = [k for k in (aff or {}) if isinstance(k, str)]
            if aff is None or not vs or any(k not in by_var for k in vs) \
                    or any(aff[k] != 1 for k in vs) or any(isinstance(k, tuple) for k in aff):
                return None
            free = [v for v in vs if v not in eliminated]
            if not free:
                return None
            # Solve for a loop that indexes the statement's own target (p in x[p + r] of a
            # convolution writing out[.., p, ..]): the loops left inside are the short ones.
            own = [v for v in free if v in target_vars]
            v = (own or free)[-1]
            eliminated.add(v)
            c = aff.get(None, 0)
            h = v if (c == 0 and len(vs) == 1) else self.fresh("h")
            lo, hi = {None: c}, {None: c + 1 - len(vs)}
            for k in vs:
                lo_k, hi_k = self.affine(by_var[k].lo), self.affine(by_var[k].hi)
                if lo_k is None or hi_k is None:
                    return None
                lo, hi = _aff_add(lo, lo_k, 1), _aff_add(hi, hi_k, 1)
            cells.append((h, self.F(_aff_expr(lo)), self.F(_aff_expr(hi))))
            rest = [k for k in vs if k != v]
            value = R.sub(name(h), num(c))
            for k in rest:
                value = R.sub(value, name(k))
            subst_map[v] = value
            if rest:  # v = h - c - (other loops): keep it inside v's own range
                guards.append((value, by_var[v], [by_var[k] for k in rest]))
            new_index.append(name(h))
        inner = [lp for lp in loops if lp.var not in eliminated]
        if guards:
            padded = self.padded_gather(inc, target, guards, cells, subst_map, new_index, inner)
            if padded is not None:
                return padded
        body_inc = _increment(A.Subscript(None, inc.target.value, new_index), _subst_expr(inc.value, subst_map))
        if not guards and inner:
            split = self.window_partials(inc, body_inc, cells, new_index, inner, target_vars)
            if split is not None:
                return split
        body = [body_inc]
        if guards:
            conds = [A.Compare(None, ["<=", "<"], [self.F(lp.lo), val, self.F(lp.hi)]) for val, lp, _ in guards]
            cond = conds[0] if len(conds) == 1 else A.BoolOp(None, "and", conds)
            body = [A.If(None, cond, body, [])]
        if guards:
            # A convolution's transpose: the last cell loop innermost (unit stride on the gradient
            # written), the reduction loops just outside it and kept there (`serial`: the guards
            # would otherwise let the scheduler move them inside).
            h, lo, hi = cells[-1]
            body = [A.For(None, name(h), call("range", lo, hi), body)]
            for lp in reversed(inner):
                body = [A.For(None, name(lp.var), call("serial", self.F(lp.lo), self.F(lp.hi)), body)]
            cells = cells[:-1]
        else:
            for lp in reversed(inner):
                body = [A.For(None, name(lp.var), call("range", self.F(lp.lo), self.F(lp.hi)), body)]
        for h, lo, hi in reversed(cells):
            body = [A.For(None, name(h), call("range", lo, hi), body)]
        return body

    def padded_gather(self, inc, target, guards, cells, subst_map, new_index, inner):
        """A convolution's transpose without conditions: where the solved loops (``p`` in
        ``h - r``) index only the output's adjoint ``d_out[.., p, ..]`` and it is a factor of the
        coefficient, that adjoint is copied into a zero-padded temporary wide enough for every
        ``h - r``, and the gather reads it unguarded.  None where that does not hold."""
        g = self.adj[target.value.id]
        value = inc.value
        if isinstance(value, R.Guard) or not any(_is_read_of(f, g) for f in _factors(value)):
            return None
        reads = [x for x in walk(value) if _is_read_of(x, g)]
        if len({unparse_expr(x) for x in reads}) != 1:
            return None
        read = reads[0]
        solved = {lp.var: (lp, rest) for _, lp, rest in guards}
        dims = {i.id: d for d, i in enumerate(read.indices) if isinstance(i, A.Name) and i.id in solved}
        if set(dims) != set(solved) or len(set(dims.values())) != len(dims):
            return None
        elsewhere = rewrite(value, lambda x: num(0) if _is_read_of(x, g) else None)
        if any(isinstance(x, A.Name) and x.id in solved for x in walk(elsewhere)):
            return None
        pad = self.fresh(f"{g}_pad")
        shape, shift, copy_loops = [], {}, []
        src, dst = [], []
        for d, idx in enumerate(read.indices):
            var = next((v for v, k in dims.items() if k == d), None)
            i = self.fresh("i")
            src.append(name(i))
            if var is None:
                shape.append(A.Subscript(None, _attr(g, "shape"), [num(d)]))
                copy_loops.append((i, num(0), shape[-1]))
                dst.append(name(i))
                continue
            lp, rest = solved[var]
            lo, hi = self.affine(lp.lo), self.affine(lp.hi)
            if lo is None or hi is None:
                return None
            reach = {None: 0}  # how far h - r reaches past v's range on either side
            for k in rest:
                lo_k, hi_k = self.affine(k.lo), self.affine(k.hi)
                if lo_k is None or hi_k is None:
                    return None
                reach = _aff_add(reach, _aff_add(_aff_add(hi_k, lo_k, -1), {None: 1}, -1), 1)
            shift[var] = self.F(_aff_expr(_aff_add(reach, lo, -1)))  # cell v sits at v + shift
            shape.append(self.F(_aff_expr(_aff_add(_aff_add(hi, lo, -1), _aff_scale(reach, 2), 1))))
            copy_loops.append((i, self.F(lp.lo), self.F(lp.hi)))
            dst.append(add(name(i), shift[var]))
        copy = [A.Assign(None, A.Subscript(None, name(pad), dst), A.Subscript(None, name(g), src))]
        zero = [A.Assign(None, A.Subscript(None, name(pad), [name(i) for i, _, _ in copy_loops]), num(0.0))]
        for (i, lo, hi), extent in reversed(list(zip(copy_loops, shape))):
            copy = [A.For(None, name(i), call("range", lo, hi), copy)]
            zero = [A.For(None, name(i), call("range", num(0), extent), zero)]
        padded_read = A.Subscript(None, name(pad), [add(i, shift[i.id]) if isinstance(i, A.Name) and i.id in shift
                                                     else i for i in read.indices])
        value = rewrite(value, lambda x: padded_read if _is_read_of(x, g) else None)
        body = [_increment(A.Subscript(None, inc.target.value, new_index), _subst_expr(value, subst_map))]
        for lp in reversed(inner):
            body = [A.For(None, name(lp.var), call("range", self.F(lp.lo), self.F(lp.hi)), body)]
        for h, lo, hi in reversed(cells):
            body = [A.For(None, name(h), call("range", lo, hi), body)]
        decl = A.Assign(None, name(pad), call("allocate", A.Tuple(None, shape), _attr(g, "dtype")))
        return [Comment(None, f"{g} with zeros around it: the gather below reads it without bounds conditions"),
                decl, zero[0], copy[0], body[0]]

    def window_partials(self, inc, body_inc, cells, new_index, inner, target_vars):
        """A reduction over a sliding window (``d_w[.., s] += x[.., q + s] * g[.., q]`` summed over
        ``q``, the weight gradient of a convolution): its innermost reduction loop ``q`` walks
        memory with unit stride but runs serially.  Summed instead into partial sums with one cell
        per ``q`` (that loop vectorises, each lane its own sum), which are then added up.  None
        where the innermost reduction loop is not such a window over the forward statement's
        output positions (``q`` indexes ``out``; a short filter loop is left as it is)."""
        u = inner[-1]
        cell_names = {h for h, _, _ in cells}
        if not isinstance(body_inc, A.AugAssign) or u.var not in target_vars:
            return None

        def window(idx):
            a = self.affine(idx)
            return a is not None and a.get(u.var) == 1 and any(a.get(h) for h in cell_names)
        if not any(isinstance(x, A.Subscript) and x.indices and window(x.indices[-1]) for x in walk(body_inc.value)):
            return None
        part = self.fresh("partial")
        d = inc.target.value.id
        index = [R.sub(name(h), lo) for h, lo, _ in cells] + [R.sub(name(u.var), self.F(u.lo))]
        shape = [R.sub(hi, lo) for _, lo, hi in cells] + [R.sub(self.F(u.hi), self.F(u.lo))]
        body = [A.AugAssign(None, A.Subscript(None, name(part), index), "+", body_inc.value)]
        for lp in reversed(inner):
            body = [A.For(None, name(lp.var), call("range", self.F(lp.lo), self.F(lp.hi)), body)]
        total = [A.For(None, name(u.var), call("range", self.F(u.lo), self.F(u.hi)),
                       [_increment(A.Subscript(None, inc.target.value, new_index),
                                   A.Subscript(None, name(part), list(index)))])]
        for h, lo, hi in reversed(cells):
            body = [A.For(None, name(h), call("range", lo, hi), body)]
            total = [A.For(None, name(h), call("range", lo, hi), total)]
        decl = A.Assign(None, name(part), call("allocate", A.Tuple(None, shape), _attr(d, "dtype")))
        return [Comment(None, f"partial sums of {d}, one per `{u.var}`: the `{u.var}` loop vectorises"),
                decl, body[0], total[0]]

    def reverse_for(self, s: A.For) -> list:
        gathered = self.gather_nest(s)
        if gathered is not None:
            return gathered
        lp = self.loops[s.target.id]
        inner = self.blocks[id(s)]
        body = []
        for n, tape in self.entry.get(id(s), {}).items():
            body.append(A.Assign(None, name(n), _sub(tape, [self.iteration(lp)])))
        body.extend(self.forward(inner, True, self.entry.get(id(s), {})))
        body.extend(self.adjoint_decls(inner))
        body.extend(self.reverse(inner))
        lo, hi, st = self.F(lp.lo), self.F(lp.hi), lp.step
        if st > 0:
            start = R.sub(hi, num(1)) if st == 1 else add(lo, R.mul(A.BinOp(None, "//", R.sub(R.sub(hi, lo), num(1)),
                                                                             num(st)), num(st)))
            it = call("serial" if lp.kind == "serial" else "range", start, R.sub(lo, num(1)), num(-st))
        else:
            k = -st
            start = add(hi, num(1)) if k == 1 else R.sub(lo, R.mul(A.BinOp(None, "//", R.sub(R.sub(lo, hi), num(1)),
                                                                            num(k)), num(k)))
            it = call("serial" if lp.kind == "serial" else "range", start, add(lo, num(1)), num(k))
        return [A.For(s.span, name(lp.var), it, body)]

    def reverse_if(self, s: A.If) -> list:
        then, orelse = self.blocks[id(s)]
        branches = []
        for blk in (then, orelse):
            body = []
            for n, snap in self.entry.get(id(s), {}).items():
                body.append(A.Assign(None, name(n), name(snap)))
            body.extend(self.forward(blk, True, self.entry.get(id(s), {})))
            body.extend(self.adjoint_decls(blk))
            body.extend(self.reverse(blk))
            branches.append(body)
        if id(s) in self.cond_tape:
            cond = self.cond_ref(s)
        else:
            cond = name(self.cond_snap[id(s)]) if id(s) in self.cond_snap else self.F(s.cond)
        return [A.If(s.span, cond, branches[0], branches[1] if any(not isinstance(x, Comment) for x in branches[1])
                     else [])]


# ---------------------------------------------------------------- small helpers
def _is_read_of(e, t: str) -> bool:
    return isinstance(e, A.Subscript) and isinstance(e.value, A.Name) and e.value.id == t


def _factors(e) -> list:
    """The factors of a product (``a * b / c`` -> a, b): each is zero only if the whole is."""
    if isinstance(e, A.BinOp) and e.op == "*":
        return _factors(e.left) + _factors(e.right)
    if isinstance(e, A.BinOp) and e.op == "/":
        return _factors(e.left)
    if isinstance(e, A.UnaryOp) and e.op == "-":
        return _factors(e.operand)
    return [e]


def _subst_expr(e, values: dict):
    """``e`` with loop variables replaced by expressions."""
    return rewrite(e, lambda x: values[x.id] if isinstance(x, A.Name) and x.id in values else None)


def _increment(target, coef):
    """``target += coef``, under ``if`` for guarded coefficients."""
    if isinstance(coef, R.Guard):
        return A.If(None, coef.cond, [_increment(target, coef.body)], [])
    return A.AugAssign(None, target, "+", coef)


def _replace_expr(e, text: str, by):
    """``e`` with every call that reads as ``text`` replaced by ``by``."""
    return rewrite(e, lambda x: by if isinstance(x, A.Call) and unparse_expr(x) == text else None)


def _replace_reads(e, subs: dict):
    """``e`` with tensor reads (keyed by their text) replaced by expressions."""
    return rewrite(e, lambda x: subs.get(unparse_expr(x)) if isinstance(x, A.Subscript) else None)


def _attr(n: str, a: str):
    return A.Attribute(None, name(n), a)


def _sub(t: str, index: list):
    return A.Subscript(None, name(t), list(index) if index else [A.Tuple(None, [])])


def _copy_loop(dst: str, src: str, idx: str) -> list:
    return [A.For(None, name(idx), call("grid", _attr(dst, "shape")),
                  [A.Assign(None, A.Subscript(None, name(dst), [name(idx)]),
                            A.Subscript(None, name(src), [name(idx)]))])]


def _aff_add(a: dict, b: dict, sign: int) -> dict:
    out = dict(a)
    for k, v in b.items():
        if isinstance(k, tuple) and k[0] == "ast":
            out[k] = v
            continue
        out[k] = out.get(k, 0) + sign * v
    return out


def _aff_scale(a: dict, c: int) -> dict:
    return {k: (v if isinstance(k, tuple) and k[0] == "ast" else v * c) for k, v in a.items()}


def _aff_expr(aff: dict):
    e = None
    for k, v in aff.items():
        if v != 0 and (isinstance(k, str) or (isinstance(k, tuple) and k[0] == "sym")):
            term = R.mul(num(abs(v)), name(k) if isinstance(k, str) else aff[("ast", k[1])])
            if e is None:
                e = term if v > 0 else R.neg(term)
            else:
                e = add(e, term) if v > 0 else R.sub(e, term)
    c = aff.get(None, 0)
    if e is None:
        return num(c)
    return add(e, num(c)) if c > 0 else (R.sub(e, num(-c)) if c < 0 else e)
