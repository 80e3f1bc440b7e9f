"""The walk over a kernel's loop IR and its statements' typed IR, written once for every back end.

A back end subclasses :class:`LoopWalker` and supplies the emitters, the hooks listed on the
class: how to open a loop, branch on a condition, bind a statement's loop variables, store a
value, check an index, and combine index terms into an element's address, plus the expression
emitters (``expr``) of its expression module.  The walker decides everything the back ends
share: the order in which loops, guards, statements and subscripts are visited, where a
subscript is checked at run time (a :class:`~hyb.codegen.abi.CheckSite`, numbered from 1 in
the order the walk meets them), and the row-major address of an element with the tensor's
constant strides.

The LLVM back end's hooks build instructions (:mod:`hyb.codegen.llvm`); the CUDA back end's
write C text (:mod:`hyb.codegen.cuda`).
"""
from __future__ import annotations

from ..dsl import sizes as size_expr
from ..dsl import tir
from ..dsl import types
from ..dsl.interp import check_reason
from ..errors import HybridInternalError
from ..schedule import loops
from .abi import AssertSite, CheckSite, PrintSite

# Tensors that live in a named slot (a scalar local, or a scalar parameter) rather than in a buffer.
SLOT_KINDS = ("scalar", "param")


class bound:
    """``env[var] = value`` within a ``with`` block, the old binding (or none) back after it:
    a back end's values of typed-IR variables, bound for part of an expression or a loop."""

    def __init__(self, env: dict, var: str, value):
        self.env, self.var, self.value = env, var, value

    def __enter__(self):
        self.old = self.env.get(self.var, bound)
        self.env[self.var] = self.value

    def __exit__(self, *exc):
        if self.old is bound:
            del self.env[self.var]
        else:
            self.env[self.var] = self.old


class LoopWalker:
    """Walks ``nest`` (loop IR, guards, typed-IR statements, addresses with their check sites).

    Hooks a back end supplies:

    * loop IR: ``for_loop(s)`` (the back end calls :meth:`block` on the body), ``loop_int(v)``,
      ``loop_var(name)``, ``loop_op(op, args)`` for a :class:`~hyb.schedule.loops.LOp`;
    * control: ``branch(cond, then, orelse)``, with ``then`` and ``orelse`` (or None) functions
      emitting each side;
    * statements: ``bind_statement(st, call, body)`` binds the statement's loop variables in
      ``self.env`` while ``body()`` emits it; ``tir_loop_emit(s, start, stop, body)`` runs a
      typed-IR loop from ``start`` while below ``stop`` (above, for a negative step) with its
      variable bound in ``self.env``; ``memory_value(tensor, value)`` (a value as the tensor
      holds it in memory: a bool as a byte), ``store_value(address, value)``;
    * addresses: ``scalar_ref(tensor)`` for a scalar, ``to_index(value, dtype)`` (an index of the
      address type), ``check_index(v, dim, axis, site)`` (leave with the site's code unless
      ``0 <= v < dim``; returns the value to use), ``fail_unless(cond, site)`` (leave with the
      site's code unless ``cond``: an ``assert``), ``emit_print(site, values, dtypes)`` (a ``print``),
      ``scale_index(v, stride)`` (``stride`` a constant or, in a shape-generic kernel, a value),
      ``add_index(flat, term)``, ``element(tensor, flat)`` (``flat`` None: the first element);
    * expressions: an ``e_<Node>`` method for each node of the typed IR (``e_Load``, ``e_Bin``, ...,
      and the primitives of :mod:`hyb.codegen.legalise`), which :meth:`expr` dispatches to.
    """

    def __init__(self, nest: loops.LoopNest):
        self.nest = nest
        self.k: tir.TypedKernel = nest.kernel
        self.sites: list = []  # CheckSite, numbered from 1
        self.env: dict = {}  # typed-IR loop variable -> the back end's value for it

    # ------------------------------------------------------------------ loop IR
    def block(self, stmts):
        for s in stmts:
            if isinstance(s, loops.For):
                self.for_loop(s)
            elif isinstance(s, loops.If):
                self.branch(self.lexpr(s.cond), lambda s=s: self.block(s.then),
                            (lambda s=s: self.block(s.orelse)) if s.orelse else None)
            elif isinstance(s, loops.StmtCall):
                self.stmt_call(s)
            else:
                raise HybridInternalError(f"loop IR node {type(s).__name__}", "codegen")

    def lexpr(self, e):
        """A loop-IR expression (isl's AST: integers, counters, affine arithmetic, comparisons)."""
        if isinstance(e, loops.LInt):
            return self.loop_int(e.value)
        if isinstance(e, loops.LVar):
            return self.loop_var(e.name)
        return self.loop_op(e.op, [self.lexpr(a) for a in e.args])

    # ------------------------------------------------------------------ statements
    def stmt_call(self, call: loops.StmtCall):
        st = self.nest.statements[call.stmt]
        self.bind_statement(st, call, lambda: self.guarded(st.guards, [st.stmt]))

    def guarded(self, guards: list, stmts: list):
        """``stmts`` under conditions evaluated outermost first, each only where the previous held."""
        if not guards:
            self.tir_block(stmts)
            return
        self.branch(self.expr(guards[0]), lambda: self.guarded(guards[1:], stmts), None)

    def tir_block(self, stmts: list):
        """Typed-IR statements run as written (a store, or an opaque statement's loops and branches)."""
        for s in stmts:
            if isinstance(s, tir.Store):
                self.store(s)
            elif isinstance(s, tir.If):
                self.branch(self.expr(s.cond), lambda s=s: self.tir_block(s.body),
                            (lambda s=s: self.tir_block(s.orelse)) if s.orelse else None)
            elif isinstance(s, tir.Loop):
                self.tir_loop(s)
            elif isinstance(s, tir.Assert):
                self.assertion(s)
            elif isinstance(s, tir.Print):
                self.print_call(s)
            else:
                raise HybridInternalError(f"typed IR statement {type(s).__name__}", "codegen")

    def tir_loop(self, s: tir.Loop):
        if s.form is not None:
            self.loop_form(s)
            return
        self.written_loop(s)

    def written_loop(self, s: tir.Loop):
        start, stop = self.index(s.start), self.index(s.stop)
        self.tir_loop_emit(s, start, stop, lambda: self.tir_block(s.body))

    def loop_form(self, s: tir.Loop):
        """A loop a schedule stage gave a form of its own (``tir.Loop.form``): a back end with
        code for that form overrides this; the loop as written is always correct."""
        self.written_loop(s)

    def assertion(self, s: tir.Assert):
        """Leave with a new site's code where the condition does not hold."""
        cond = self.expr(s.cond)
        self.sites.append(AssertSite(s.message, s.span))
        self.fail_unless(cond, len(self.sites))

    def print_call(self, s: tir.Print):
        """``hyb_print`` with the values of a new print site."""
        values = [self.expr(x) for x in s.items if not isinstance(x, str)]
        site = PrintSite(tuple(("text", sep + x, "", "", "") if isinstance(x, str) else
                               ("value", types.concrete(x.dtype), sep, conv, spec)
                               for x, sep, conv, spec in s.parts()), s.span)
        self.sites.append(site)
        self.emit_print(len(self.sites), values, site.values())

    def store(self, s: tir.Store):
        value = self.memory_value(self.k.tensors[s.tensor], self.expr(s.value))
        self.store_value(self.address(s.tensor, s.indices, s), value)

    # ------------------------------------------------------------------ addresses
    def check_site(self, t: tir.Tensor, node) -> int:
        """The number of a new check site for ``node``'s subscripts, or 0 where they need no check."""
        if node is None or not node.checked:
            return 0
        shape = tuple(size_expr.text(d) for d in t.shape)
        self.sites.append(CheckSite(t.source_name, shape, node.span, check_reason(node.indices)))
        return len(self.sites)

    def address(self, tensor: str, indices: list, node=None):
        """The element ``tensor[indices]`` (row-major, constant strides), each subscript checked
        first where ``node`` (the load or store) is one the bounds proof left to run time."""
        t = self.k.tensors[tensor]
        if t.kind in SLOT_KINDS:
            return self.scalar_ref(tensor)
        site = self.check_site(t, node)
        flat = None
        stride = 1  # a constant, or (once a run-time size is met) the back end's value
        axis = t.ndim
        for dim, idx in reversed(list(zip(t.code_shape or t.shape, indices))):
            axis -= 1
            v = self.index(idx)
            size = dim if isinstance(dim, int) else self.index(dim)
            if site:
                v = self.check_index(v, size, axis, site)
            term = v if isinstance(stride, int) and stride == 1 else self.scale_index(v, stride)
            flat = term if flat is None else self.add_index(flat, term)
            if isinstance(stride, int) and isinstance(size, int):
                stride *= size
            elif isinstance(size, int):  # a run-time stride times a constant size
                stride = self.scale_index(stride, size)
            else:  # a run-time size times the stride so far
                stride = self.scale_index(size, stride)
        return self.element(tensor, flat)

    def expr(self, e: tir.TExpr):
        """A typed-IR expression, by the back end's emitter for its node."""
        return getattr(self, "e_" + type(e).__name__)(e)

    def index(self, e: tir.TExpr):
        return self.to_index(self.expr(e), e.dtype)

    @staticmethod
    def is_bool(t: tir.Tensor) -> bool:
        return types.concrete(t.dtype) == "bool"
