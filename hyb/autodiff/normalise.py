"""Pass 1 of reverse mode: the kernel rewritten into a form the later passes can reason about.

``normalise(kdef, module)`` copies the kernel's body, dropping ``pass``, ``assert`` and docstrings, turning
``x += e`` into ``x = x + e`` and renaming every name declared a second time (a loop variable
reused by another loop, a scalar declared again in another block) so that each name has one
declaration.  On the way it records each tensor, scalar and loop, numbers the statements in
program order and notes the block (statement list with its enclosing loops) each one sits in.
A ``grid`` loop becomes one ``range`` loop per dimension, for the rank the checker found for
the signature being differentiated.  Kernels the gradient cannot handle yet (a ``return``
inside a loop, an expression statement, ...) are refused here with a clear message; whether a
loop bound read from a tensor stays the same in reverse is the save plan's question.

It returns a ``Normalised`` record; its methods (``reads``, ``enclosing``, ``decl_block``, ...)
answer questions about the normalised kernel that every later pass asks.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from types import MappingProxyType

from ..dsl import ast as syntax
from ..dsl import types
from ..dsl.check import is_print
from . import rules
from .inline import inline_calls
from .rules import num
from .tree import (TENSOR_MAKERS, Block, Info, Loop, Names, ScalarDecl, TensorDecl, bool_valued, int_typed, param_kinds,
                   rewrite, subst, unsupported, value_walk, walk)
from ..dsl.unparse import expr as unparse_expr
from ..errors import HybridUnsupportedError


@dataclass(frozen=True, eq=False)
class Normalised:
    """The normalised kernel (pass 1's record).  Statements are keyed by ``id()`` in ``info`` and
    ``blocks``; the body they belong to is ``top.body``, kept alive by this record."""
    kdef: syntax.KernelDef  # the kernel as written
    module: syntax.Module
    top: Block  # the normalised body
    tensors: MappingProxyType  # name -> TensorDecl (parameters, outputs, temporaries)
    scalars: MappingProxyType  # name -> ScalarDecl
    loops: MappingProxyType  # loop variable -> Loop
    info: MappingProxyType  # id(stmt) -> Info
    blocks: MappingProxyType  # id(For) -> Block; id(If) -> (Block, Block)
    assigns: tuple  # every scalar assignment and tensor store, program order
    outputs: tuple  # the returned tensors, in order
    params: tuple  # the kernel's parameter names
    tensor_params: tuple  # those used as tensors
    scalar_params: frozenset  # those used as numbers
    used: frozenset  # every name the kernel (and its module) uses, after renaming

    # ------------------------------------------------------------ queries
    def reads(self, e) -> set:
        """Names of scalars and tensors whose values ``e`` reads."""
        out = set()
        for x in value_walk(e):
            if isinstance(x, syntax.Name) and (x.id in self.scalars or x.id in self.tensors):
                out.add(x.id)
        return out

    def index_reads(self, e) -> set:
        """Names read by the subscripts inside ``e``."""
        out = set()
        for x in value_walk(e):
            if isinstance(x, syntax.Subscript):
                for i in x.indices:
                    out |= self.reads(i)
        return out

    def enclosing(self, s):
        """The For / If statements around ``s``, innermost first."""
        b = self.info[id(s)].block
        while b is not None and b.owner is not None:
            yield b.owner
            b = b.parent

    def compound_reads(self, c) -> set:
        """What a loop's bounds or a branch's condition read."""
        if isinstance(c, syntax.For):
            lp = self.loops[c.target.id]
            return self.reads(lp.lo) | self.reads(lp.hi)
        return self.reads(c.cond)

    def decl_block(self, n) -> Block:
        """The block declaring tensor or scalar ``n``."""
        return self.tensors[n].block if n in self.tensors else self.scalars[n].block


def normalise(kdef: syntax.KernelDef, module: syntax.Module, grid_ranks=None) -> Normalised:
    """Pass 1: the normalised kernel and the records of its declarations, loops and statements
    (calls of other kernels inlined first).  ``grid_ranks`` maps the (line, col) of each ``grid``
    loop to its rank for the signature being differentiated (``TypedKernel.grid_ranks``); a
    kernel with ``grid`` loops needs it."""
    return _Normaliser(inline_calls(kdef, module), module, grid_ranks).run()


def _component(x: syntax.Subscript):
    """``k`` for ``idx[k]`` or ``idx[-k]`` with a literal ``k``, else None."""
    if len(x.indices) != 1:
        return None
    i = x.indices[0]
    if isinstance(i, syntax.UnaryOp) and i.op == "-" and rules.is_num(i.operand) and type(i.operand.value) is int:
        return -i.operand.value
    return i.value if rules.is_num(i) and type(i.value) is int else None


def shape_component(shape, k: int, span):
    """Dimension ``k`` of a shape expression: an item of a tuple (None past its end), else
    ``shape[k]``."""
    if isinstance(shape, syntax.Tuple):
        return shape.elts[k] if -len(shape.elts) <= k < len(shape.elts) else None
    return syntax.Subscript(span, shape, [num(k)])


def grid_loops(kdef: syntax.KernelDef, module: syntax.Module) -> dict:
    """``(line, col) -> (rank, span)`` for each ``grid`` loop of ``kdef`` and the kernels it calls;
    the rank is the smallest the loop's text allows (one more than its highest ``idx[k]``)."""
    out = {}
    for x in (x for st in inline_calls(kdef, module).body for x in walk(st)):
        if (isinstance(x, syntax.For) and isinstance(x.iter, syntax.Call) and isinstance(x.iter.func, syntax.Name)
                and x.iter.func.id == "grid" and x.span is not None):
            rank = max([1] + [k + 1 if k >= 0 else -k for k in grid_components(x.body, x.target.id)])
            out[(x.span.line, x.span.col)] = (rank, x.span)
    return out


def grid_components(body, idx: str):
    """The literal components ``k`` of ``idx[k]`` in ``body`` (negative ones count from the end)."""
    return [k for s in body for x in walk(s) if isinstance(x, syntax.Subscript) and isinstance(x.value, syntax.Name)
            and x.value.id == idx and (k := _component(x)) is not None]


def walk_stmts(body):
    """Every statement in ``body``, nested ones after the loop or branch holding them."""
    for s in body:
        yield s
        if isinstance(s, syntax.For):
            yield from walk_stmts(s.body)
        elif isinstance(s, syntax.If):
            yield from walk_stmts(s.body)
            yield from walk_stmts(s.orelse)


def stmt_exprs(s):
    """The expressions a statement evaluates itself (not those of the statements inside it)."""
    if isinstance(s, syntax.Assign):
        return [s.target, s.value]
    if isinstance(s, syntax.For):
        return [s.iter]
    if isinstance(s, syntax.If):
        return [s.cond]
    if isinstance(s, syntax.Return):
        return list(s.values)
    return []


class _Normaliser:
    """Builds one ``Normalised`` record; used once, by ``normalise``."""

    def __init__(self, kdef: syntax.KernelDef, module: syntax.Module, grid_ranks=None):
        self.kdef = kdef
        self.module = module
        self.grid_ranks = grid_ranks
        used = set(module.constants) | set(module.kernels) | {p.name for p in kdef.params}
        for s in kdef.body:
            for e in walk(s):
                if isinstance(e, syntax.Name):
                    used.add(e.id)
        self.names = Names(used)
        self.tensors: dict = {}
        self.scalars: dict = {}
        self.loops: dict = {}
        self.info: dict = {}
        self.blocks: dict = {}
        self.assigns: list = []
        self.counter = 0
        self.declared: set = set()

    def run(self) -> Normalised:
        """Normalise the kernel's body and record its parameters, outputs and declarations."""
        params = [p.name for p in self.kdef.params]
        self.top = Block(None, [])
        self.declared = set(params)
        source = self.kdef.body
        if not source or not isinstance(source[-1], syntax.Return):
            source = self.returning(source)
        self.top.body = self.norm_block(source, self.top, [{p: p for p in params}])
        body = self.top.body
        if not body or not isinstance(body[-1], syntax.Return):
            raise unsupported("no `return` at its end", self.kdef)
        self.outputs = [v.id for v in body[-1].values]
        self.settle_int_types()
        self.widen_scalar_blocks()
        self.params = params
        # A parameter used as a number is a scalar parameter; one never used counts as a tensor
        # (its gradient is zero; passed a scalar, it gets None at the call).
        self.tensor_params = [p for p, kind in zip(params, param_kinds(self)) if kind == "tensor"]
        self.scalar_params = set(params) - set(self.tensor_params)
        for p in self.tensor_params:
            self.tensors[p] = TensorDecl(p, "param", self.top)
        return Normalised(self.kdef, self.module, self.top, MappingProxyType(self.tensors),
                          MappingProxyType(self.scalars), MappingProxyType(self.loops), MappingProxyType(self.info),
                          MappingProxyType(self.blocks), tuple(self.assigns), tuple(self.outputs), tuple(params),
                          tuple(self.tensor_params), frozenset(self.scalar_params), frozenset(self.names.used))

    def returning(self, body: list) -> list:
        """A kernel that writes its results into arguments and returns nothing (C's
        ``layernorm_forward(out, mean, rstd, inp, weight, bias)``) as the function it computes:
        each argument it writes is copied into a tensor of its own first, the body works on the
        copies, and they are returned, in the order of the parameters.  Its gradient then takes
        one gradient per written argument and gives one for every argument's value on entry."""
        ranks: dict = {}
        for st in walk_stmts(body):
            if isinstance(st, (syntax.Assign, syntax.AugAssign)) and isinstance(st.target, syntax.Subscript) \
                    and isinstance(st.target.value, syntax.Name):
                n = st.target.value.id
                ranks[n] = max(ranks.get(n, 0), len(st.target.indices))
        written = [p.name for p in self.kdef.params if p.name in ranks]
        if not written:
            raise unsupported("no `return` at its end", self.kdef)
        span = self.kdef.span
        mapping, prelude = {}, []
        for n in written:
            own = mapping[n] = self.names.fresh(f"{n}_new")
            shape, dtype = syntax.Attribute(span, syntax.Name(span, n), "shape"), syntax.Attribute(
                span, syntax.Name(span, n), "dtype")
            prelude.append(syntax.Assign(span, syntax.Name(span, own), syntax.Call(
                span, syntax.Name(span, "output_tensor"), [shape, dtype])))
            idx = [self.names.fresh(f"{n}_i{k}") for k in range(ranks[n])]
            copy = [syntax.Assign(span, syntax.Subscript(span, syntax.Name(span, own), [syntax.Name(span, v) for v in idx]),
                                  syntax.Subscript(span, syntax.Name(span, n), [syntax.Name(span, v) for v in idx]))]
            for k in reversed(range(ranks[n])):
                size = syntax.Subscript(span, syntax.Attribute(span, syntax.Name(span, n), "shape"), [syntax.Num(span, k)])
                copy = [syntax.For(span, syntax.Name(span, idx[k]), syntax.Call(span, syntax.Name(span, "range"), [size]),
                                   copy)]
            prelude += copy
        return prelude + [subst(st, mapping) for st in body] + [
            syntax.Return(span, [syntax.Name(span, mapping[n]) for n in written])]

    def widen_scalar_blocks(self):
        """A scalar first assigned in a branch of an ``if`` and used after it (assigned in both
        branches, as the language allows) belongs to the block around the ``if``: its value, and
        so its adjoint, lives on after the branch.  Each scalar's block becomes the innermost
        block that holds every statement assigning or reading it."""
        used: dict = {}
        for st in walk_stmts(self.top.body):
            info = self.info.get(id(st))
            if info is None:
                continue
            parts = [st.target, st.value] if isinstance(st, syntax.Assign) else \
                [st.cond] if isinstance(st, syntax.If) else [st.iter] if isinstance(st, syntax.For) else \
                list(getattr(st, "values", []))
            for part in parts:
                for x in walk(part):
                    if isinstance(x, syntax.Name) and x.id in self.scalars:
                        used.setdefault(x.id, []).append(info.block)
        for u, blocks in used.items():
            home = self.scalars[u].block
            while home.parent is not None and not all(b.inside(home) for b in blocks):
                home = home.parent
            if home is not self.scalars[u].block:
                self.scalars[u] = replace(self.scalars[u], block=home)

    def settle_int_types(self):
        """A scalar is an integer (and carries no derivative) only if every value assigned to it
        is: a scalar local takes the promoted type of all its values.  Whether a value is an
        integer can depend on other scalars, so this repeats until nothing changes."""
        values: dict = {}
        for a in self.assigns:
            if isinstance(a.target, syntax.Name) and a.target.id in self.scalars:
                values.setdefault(a.target.id, []).append(a.value)
        changed = True
        while changed:
            changed = False
            for u, decl in self.scalars.items():
                if decl.int_typed and not all(int_typed(v) or self.int_expr(v) for v in values.get(u, ())):
                    self.scalars[u] = replace(decl, int_typed=False)
                    changed = True
        for u, decl in self.scalars.items():
            if decl.int_typed and values.get(u) and all(bool_valued(v) for v in values[u]):
                self.scalars[u] = replace(decl, bool_typed=True)

    def lookup(self, scope, n):
        for d in reversed(scope):
            if n in d:
                return d[n]
        return None

    def resolve(self, e, scope):
        mapping = {}
        for x in walk(e):
            if isinstance(x, syntax.Call) and isinstance(x.func, syntax.Name) and x.func.id in self.module.kernels:
                raise unsupported("a call of another kernel", x, "write the called kernel's loops inline")
            if isinstance(x, syntax.Name):
                u = self.lookup(scope, x.id)
                if u is not None and u != x.id:
                    mapping[x.id] = u
        return self.declared_shapes(subst(e, mapping))

    def declared_shapes(self, e):
        """``e`` with the shape, dtype and rank of each tensor the kernel makes read from its
        declaration (``c.shape[0]`` with ``c = output_tensor(a.shape, ...)`` is ``a.shape[0]``), so
        that the gradient, which may not declare ``c``, never asks ``c`` for them."""
        def made(x):
            return (isinstance(x, syntax.Name) and x.id in self.tensors and self.tensors[x.id].kind != "param"
                    and self.tensors[x.id].shape is not None)

        def replace_query(x):
            if isinstance(x, syntax.Subscript) and isinstance(x.value, syntax.Attribute) and x.value.attr == "shape" \
                    and made(x.value.value) and len(x.indices) == 1 and rules.is_num(x.indices[0]) \
                    and isinstance(x.indices[0].value, int):
                return shape_component(self.tensors[x.value.value.id].shape, x.indices[0].value, x.span)
            if isinstance(x, syntax.Attribute) and made(x.value):
                decl = self.tensors[x.value.id]
                if x.attr == "shape":
                    return decl.shape
                if x.attr == "dtype" and decl.dtype is not None:
                    return decl.dtype
                if x.attr == "ndim" and isinstance(decl.shape, syntax.Tuple):
                    return num(len(decl.shape.elts))
                if x.attr == "ndim" and isinstance(decl.shape, syntax.Attribute) and decl.shape.attr == "shape":
                    return syntax.Attribute(x.span, decl.shape.value, "ndim")
            if isinstance(x, syntax.Call) and rules.call_name(x) == "len" and len(x.args) == 1 and made(x.args[0]):
                return shape_component(self.tensors[x.args[0].id].shape, 0, x.span)
            return None
        return rewrite(e, replace_query)

    def declare(self, scope, n) -> str:
        u = n if n not in self.declared else self.names.fresh(n)
        self.declared.add(u)
        self.names.take(u)
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
        if isinstance(s, (syntax.Pass, syntax.Assert)):
            return []  # an assert changes no value: the forward kernel checks it, the gradient leaves it out
        if isinstance(s, syntax.ExprStmt):
            if isinstance(s.value, syntax.Str) or is_print(s.value):
                return []  # a docstring; a print(), which the forward kernel does and the gradient leaves out
            raise unsupported("an expression statement", s)
        if isinstance(s, syntax.Return):
            if block.parent is not None:
                raise unsupported("a `return` inside a loop or branch", s)
            vals = [self.resolve(v, scope) for v in s.values]
            if not all(isinstance(v, syntax.Name) for v in vals):
                raise unsupported("a `return` of an expression", s, "return tensor names")
            r = syntax.Return(s.span, vals)
            self.number(r, block)
            return [r]
        if isinstance(s, syntax.AugAssign):
            tgt = self.resolve(s.target, scope)
            if not isinstance(tgt, (syntax.Name, syntax.Subscript)):
                raise unsupported("this assignment", s)
            value = syntax.BinOp(s.value.span, s.op, tgt, self.resolve(s.value, scope))
            return self.norm_assign(syntax.Assign(s.span, tgt, value), block, scope, resolved=True)
        if isinstance(s, syntax.Assign):
            return self.norm_assign(s, block, scope)
        if isinstance(s, syntax.For):
            return [self.norm_for(s, block, scope)]
        if isinstance(s, syntax.If):
            node = syntax.If(s.span, self.resolve(s.cond, scope), [], [])
            info = self.number(node, block)
            then, orelse = Block(block, block.loops, node), Block(block, block.loops, node)
            # (the node is numbered before its body exists: its lists are filled, not replaced)
            # (a branch is no scope of its own, as in Python: a name either branch assigns is the
            # one the other branch and the statements after the `if` read)
            node.body.extend(self.norm_block(s.body, then, scope))
            then.body = node.body
            node.orelse.extend(self.norm_block(s.orelse, orelse, scope))
            orelse.body = node.orelse
            self.blocks[id(node)] = (then, orelse)
            info.last = self.counter
            return [node]
        raise unsupported(f"a `{type(s).__name__}` statement", s)

    def norm_for(self, s: syntax.For, block, scope):
        it = s.iter
        if not (isinstance(it, syntax.Call) and isinstance(it.func, syntax.Name)):
            raise unsupported("this loop", s)
        kind = it.func.id
        if kind == "grid":
            return self.norm_for(self.expand_grid(s), block, scope)
        args = [self.resolve(a, scope) for a in it.args]
        for a in args:
            for x in value_walk(a):
                if isinstance(x, syntax.Subscript) and not isinstance(x.value, syntax.Name):
                    raise unsupported("a loop bound read through this expression", a)
        if len(args) == 1:
            lo, hi, step = num(0), args[0], 1
        elif len(args) == 2:
            (lo, hi), step = args, 1
        else:
            lo, hi, st = args
            if rules.is_num(st):
                step = st.value
            elif isinstance(st, syntax.UnaryOp) and st.op == "-" and rules.is_num(st.operand):
                step = -st.operand.value
            else:
                raise unsupported("a loop step that is not a number", st)
        inner_scope = scope + [{}]
        var = self.declare(inner_scope, s.target.id)
        loop = Loop(var, lo, hi, step, kind)
        node = syntax.For(s.span, syntax.Name(s.target.span, var), syntax.Call(it.span, syntax.Name(None, kind), args), [])
        loop.node = node
        self.loops[var] = loop
        info = self.number(node, block)
        inner = Block(block, block.loops + [loop], node)
        node.body.extend(self.norm_block(s.body, inner, inner_scope))
        inner.body = node.body
        self.blocks[id(node)] = inner
        info.last = self.counter
        return node

    def expand_grid(self, s: syntax.For) -> syntax.For:
        """``for idx in grid(shape)`` as one ``range`` loop per dimension, for the rank the
        checker found for this signature: ``t[idx]`` becomes ``t[idx_0, idx_1]`` and ``idx[k]``
        becomes ``idx_k``."""
        if self.grid_ranks is None:
            raise HybridUnsupportedError("the gradient of a kernel with a `grid` loop is derived for the ranks of its "
                                         "arguments, and none were given", s.span,
                                         "derive it for a signature: call the gradient, or read "
                                         "`kernel.grad().source_for(*inputs)`")
        rank = self.grid_ranks.get((s.span.line, s.span.col)) if s.span is not None else None
        if rank is None:
            raise unsupported("a `grid` loop whose rank differs between two calls of its kernel", s,
                              "write one `range` loop per dimension")
        if rank == 0:
            raise unsupported("a `grid` loop over a 0-d shape", s, "index the 0-d tensor without a loop")
        shape = s.iter.args[0]
        idx = s.target.id
        names = [self.names.fresh(f"{idx}_{k}") for k in range(rank)]

        def component(x):
            if not (isinstance(x, syntax.Subscript) and isinstance(x.value, syntax.Name) and x.value.id == idx):
                return None
            k = _component(x)
            if k is not None and -rank <= k < rank:
                return syntax.Name(x.span, names[k])
            raise unsupported("this use of a `grid` index", x, f"index it with a number from 0 to {rank - 1}")

        def replace_idx(x):
            got = component(x)
            if got is not None:
                return got
            if isinstance(x, syntax.Subscript) and any(isinstance(i, syntax.Name) and i.id == idx for i in x.indices):
                if len(x.indices) != 1:
                    raise unsupported("a `grid` index beside other subscripts", x, f"write `{unparse_expr(x.value)}[{idx}]`")
                return syntax.Subscript(x.span, rewrite(x.value, replace_idx), [syntax.Name(x.indices[0].span, n) for n in names])
            if isinstance(x, syntax.Name) and x.id == idx:
                raise unsupported("this use of a `grid` index", x, f"index a tensor with it (`t[{idx}]`) or take a "
                                  f"component (`{idx}[0]`)")
            return None

        body = [rewrite(b, replace_idx) for b in s.body]
        for k in reversed(range(rank)):
            rng = syntax.Call(s.iter.span, syntax.Name(s.iter.func.span, "range"), [shape_component(shape, k, shape.span)])
            body = [syntax.For(s.span, syntax.Name(s.target.span, names[k]), rng, body)]
        return body[0]

    def norm_assign(self, s: syntax.Assign, block, scope, resolved=False) -> list:
        tgt = s.target
        if isinstance(tgt, syntax.Tuple):
            raise unsupported("a tuple assignment", s)
        if isinstance(tgt, syntax.Name) and isinstance(s.value, syntax.Call) and rules.call_name(s.value) in TENSOR_MAKERS:
            maker = rules.call_name(s.value)
            args = [self.resolve(a, scope) for a in s.value.args]
            kw = {k: self.resolve(v, scope) for k, v in s.value.kwargs.items()}
            shape = args[0] if args else kw.get("shape")
            dtype = args[1] if len(args) > 1 else kw.get("dtype", syntax.Str(None, "float32"))
            u = self.declare(scope, tgt.id)
            int_dtype = isinstance(dtype, syntax.Str) and not types.is_float(types.normalize(dtype.value) or "float64")
            self.tensors[u] = TensorDecl(u, "output" if maker == "output_tensor" else "temp", block, shape, dtype,
                                         int_dtype)
            node = syntax.Assign(s.span, syntax.Name(tgt.span, u), syntax.Call(s.value.span, syntax.Name(None, maker), [shape, dtype]))
            self.number(node, block)
            return [node]
        value = s.value if resolved else self.resolve(s.value, scope)
        if isinstance(tgt, syntax.Name):
            u = tgt.id if resolved else self.lookup(scope, tgt.id)
            if u is None:
                u = self.declare(scope, tgt.id)
            if u in self.tensors or u in self.kdef_param_names():
                raise unsupported(f"an assignment to `{tgt.id}`", s)
            node = syntax.Assign(s.span, syntax.Name(tgt.span, u), value)
            if u not in self.scalars:
                self.scalars[u] = ScalarDecl(u, block, node, int_typed(value) or self.int_expr(value))
        elif isinstance(tgt, syntax.Subscript):
            node = syntax.Assign(s.span, tgt if resolved else self.resolve(tgt, scope), value)
        else:
            raise unsupported("this assignment", s)
        self.number(node, block)
        self.assigns.append(node)
        return [node]

    def int_expr(self, e) -> bool:
        """Whether ``e`` is integer-valued whatever the arguments' dtypes: integer literals, loop
        variables, shapes and integer scalars combined without `/` (the language's types follow
        NumPy: a scalar all of whose values are such is an integer)."""
        for x in value_walk(e):
            if isinstance(x, syntax.Num) and not isinstance(x.value, (int, bool)):
                return False
            if isinstance(x, (syntax.Subscript, syntax.Call, syntax.IfExp, syntax.Compare, syntax.BoolOp)):
                return False
            if isinstance(x, syntax.BinOp) and x.op in ("/", "**"):
                return False
            if isinstance(x, syntax.Name) and not (x.id in self.loops or (x.id in self.scalars and self.scalars[x.id].int_typed)
                                              or x.id in self.module.constants and isinstance(
                                                  self.module.constants[x.id][0], syntax.Num)
                                              and isinstance(self.module.constants[x.id][0].value, int)):
                return False
        return True

    def kdef_param_names(self):
        return {p.name for p in self.kdef.params}
