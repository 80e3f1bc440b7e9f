"""Running extrema with their first index, on vector lanes, for :mod:`hyb.codegen.llvm`.

A loop that :mod:`hyb.schedule.argext` gave the form :class:`~hyb.schedule.argext.Extremum`,
``for j: if e > best: best = e; k = j`` (or ``<``), runs as one pass over its elements::

    lanes: the extremum each lane met and the index where the loop's comparison last took it
           (a sentinel where it never did), BLOCKS independent sets of them
    for each whole block of BLOCKS vectors:   compare, select the value and the index
    for each whole vector left:               the same, on the first set
    the last vector of the loop:              the same, for its lanes no vector took before
    M = the lanes' extremum; c = the least (`>`, `<`) or greatest (`>=`, `<=`) index among
        the lanes holding M
    if c is no sentinel: the loop's own `if` body with j = c  (best = e at c, k = c)

which is the loop's result (see the form's doc).  The loop as
written runs instead where it has fewer iterations than a vector's lanes, or where a subscript
of ``e`` would leave its tensor at the first or the last iteration: its checks then report the
first bad subscript exactly as the loop as written does.  (Every load of ``e`` moves along its
last axis with ``j`` or not at all, so the two ends bound every iteration.)
"""
from __future__ import annotations

from dataclasses import replace

from llvmlite import ir

from ..dsl import tir, types
from ..errors import HybridInternalError
from ..schedule.argext import fits_int32, lanes_for
from ..schedule.guarded import parts
from .llvm_types import I1, I32, I64, is_unsigned, value_type
from .walker import SLOT_KINDS, bound

# independent sets of lanes in the main loop: a compare and a select each wait for the one before
BLOCKS = 4
SCAN_VECTORS = 4  # vectors a guarded loop's search tests at once (_Lanes.scan)
# a guarded loop shorter than this many vectors runs as written: the values early in a loop beat
# the bounds often (the first k of a top-k all do), and there a vector search costs more than it saves
GUARDED_VECTORS = 8
# the most bounds of a guarded loop's threshold loaded one by one and reduced as a tree
UNROLL_BOUNDS = 64


class ExtremumLoops:
    """The vector form of a running extremum with its first index.  Mixed into the LLVM function
    builder, whose ``loop_form`` calls :meth:`extremum_loop` for a loop of this form."""

    def extremum_loop(self, s: tir.Loop):
        form = s.form
        branch = s.body[0]
        e = branch.cond.a if form.e_left else branch.cond.b
        dt = types.concrete(self.k.tensors[form.best].dtype)
        lanes = lanes_for(dt)
        it = I32 if fits_int32(s.start) and fits_int32(s.stop) else I64
        start, stop, ok = self.lane_bounds(s, e, lanes)
        lanes_of = _Lanes(self, s.var, e, dt, value_type(dt), lanes, it, form.op)
        self.branch(ok, lambda: lanes_of.run(start, stop, form.best, branch.body), lambda: self.written_loop(s))

    def first_index_loop(self, s: tir.Loop):
        """A loop of the form :class:`~hyb.schedule.argext.FirstIndex`: the condition tested a
        vector of iterations at a time, stopping at the first vector where it holds; the last
        vector of the loop overlaps the one before (none of whose iterations met it)."""
        form = s.form
        branch = s.body[0]
        test, c = (branch.cond.a, branch.cond.b) if form.test_left else (branch.cond.b, branch.cond.a)
        dt = types.concrete(c.a.dtype)
        lanes = lanes_for(dt)
        start, stop, ok = self.lane_bounds(s, c, lanes)
        ok = self.b.and_(ok, self.expr(test))  # (k == k0: else the loop changes nothing)
        lanes_of = _Lanes(self, s.var, c, dt, value_type(dt), lanes, I64, c.op)
        self.branch(ok, lambda: lanes_of.search(start, stop, branch.body), lambda: self.written_loop(s))

    def guarded_loop(self, s: tir.Loop):
        """A loop of the form :class:`~hyb.schedule.guarded.Guarded`: a vector search for the
        next iteration whose value beats the threshold, its body as written, the threshold again,
        and on after it.  The loop as written where it is shorter than a vector, where a load of
        its prelude would leave its tensor at either end, or where a bound's subscript would."""
        p = parts(s, self.k.tensors)
        if p is None:
            self.written_loop(s)
            return
        dt = types.concrete(p.value.dtype)
        lanes = lanes_for(dt)
        start, stop, ok = self.lane_bounds(s, p.checks, lanes, GUARDED_VECTORS * lanes)
        if p.over is None:
            ok = self.b.and_(ok, self.inside(p.bound.tensor, p.bound.indices))
        else:
            def every(t, st):
                with bound(self.env, p.over.var, t):
                    return [self.b.and_(st[0], self.inside(p.bound.tensor, p.bound.indices))]

            _, (inside,) = phi_loop(self, self.index(p.over.start), ir.Constant(I64, 1),
                                    lambda t, _: self.b.icmp_signed("<", t, self.index(p.over.stop)),
                                    [ir.Constant(I1, 1)], every)
            ok = self.b.and_(ok, inside)
        lanes_of = _Lanes(self, s.var, p.value, dt, value_type(dt), lanes, I64, p.op)
        self.branch(ok, lambda: lanes_of.scan(start, stop, p, s), lambda: self.written_loop(s))

    def lane_bounds(self, s: tir.Loop, e, lanes: int, least: int = 0) -> tuple:
        """``(start, stop, ok)`` of the loop ``s``: ``ok`` where it has at least ``lanes``
        (or ``least``) iterations and every load of ``e`` (an expression or several) lies inside
        its tensor at the first and the last."""
        b = self.b
        start, stop = self.index(s.start), self.index(s.stop)
        enough = b.icmp_signed(">=", b.sub(stop, start), ir.Constant(I64, max(lanes, least)))
        last = b.sub(stop, ir.Constant(I64, 1))
        return start, stop, b.and_(enough, b.and_(self.within(e, s.var, start), self.within(e, s.var, last)))

    def within(self, e, var: str, at):
        """i1: every subscript of every load in ``e`` (an expression or several), with ``var`` at
        ``at``, inside its tensor (nothing is loaded: the subscripts read no tensor)."""
        ok = ir.Constant(I1, 1)
        with bound(self.env, var, at):
            for x in (e if isinstance(e, tuple) else (e,)):
                for n in tir.walk_expr(x):
                    if isinstance(n, tir.Load):
                        ok = self.b.and_(ok, self.inside(n.tensor, n.indices))
        return ok

    def inside(self, tensor: str, indices: list):
        """i1: ``tensor[indices]`` (subscripts that load nothing) is an element of the tensor."""
        t = self.k.tensors[tensor]
        ok = ir.Constant(I1, 1)
        if t.kind in SLOT_KINDS:
            return ok
        for dim, idx in zip(t.code_shape or t.shape, indices):
            size = ir.Constant(I64, dim) if isinstance(dim, int) else self.index(dim)
            ok = self.b.and_(ok, self.b.icmp_unsigned("<", self.index(idx), size))
        return ok


class _Lanes:
    """The vector pass of one loop: its values, its lanes' state and the reduction at its end."""

    def __init__(self, fb, var: str, e, dt: str, scalar_t, lanes: int, it, op: str):
        self.fb, self.b, self.var, self.e = fb, fb.b, var, e
        self.dt, self.lanes, self.it, self.op = dt, lanes, it, op
        self.float = types.is_float(dt)
        self.vt = ir.VectorType(scalar_t, lanes)
        self.kt = ir.VectorType(it, lanes)
        # the first index: the least among the lanes holding the extremum (none: the largest index);
        # the last (`>=`, `<=`): the greatest (none: the smallest)
        self.first = op in (">", "<")
        self.sentinel = ir.Constant(it, (1 << (it.width - 1)) - 1 if self.first else -(1 << (it.width - 1)))
        self.iota = ir.Constant(self.kt, [ir.Constant(it, i) for i in range(lanes)])
        self.fixed = {}  # id(sub-expression free of the loop variable) -> its lanes

    # ------------------------------------------------------------------ the pass
    def run(self, start, stop, best: str, body: list):
        fb, b, n = self.fb, self.b, self.lanes
        self.fix(self.e)
        b0 = self.splat(fb.expr(tir.Load(self.dt, best, [])))
        state = [b0, self.splat(self.sentinel)] * BLOCKS
        whole = ir.Constant(I64, n * BLOCKS)

        def blocks(j, st):
            out = []
            for u in range(BLOCKS):
                out += self.step(b.add(j, ir.Constant(I64, u * n)), st[2 * u], st[2 * u + 1])
            return out

        j, state = self.loop(start, whole, lambda j, _: b.icmp_signed("<=", b.add(j, whole), stop), state, blocks)
        one = ir.Constant(I64, n)
        j, first = self.loop(j, one, lambda j, _: b.icmp_signed("<=", b.add(j, one), stop), state[:2],
                             lambda j, st: self.step(j, *st))
        first = self.step(b.sub(stop, one), *first, after=j)  # the last vector: the lanes not yet taken
        state = first + state[2:]
        values, indices = state[0::2], state[1::2]
        top = values[0]
        for v in values[1:]:
            top = b.select(self.beats(v, top), v, top)
        most = self.op in (">", ">=")
        m = self.splat(self.reduce("fmax" if most else "fmin", top) if self.float else
                       self.reduce(("u" if is_unsigned(self.dt) else "s") + ("max" if most else "min"), top))
        least = self.splat(self.sentinel)
        for v, k in zip(values, indices):
            equal = b.fcmp_ordered("==", v, m) if self.float else b.icmp_signed("==", v, m)
            pick = b.select(equal, k, self.splat(self.sentinel))
            least = b.select(b.icmp_signed("<" if self.first else ">", pick, least), pick, least)
        found = self.reduce("smin" if self.first else "smax", least)
        self.take(found, self.sentinel, b.sext(found, I64) if self.it is I32 else found, body)

    def search(self, start, stop, body: list):
        """The least iteration whose comparison (``self.e``, a comparison of two values) holds,
        then ``body`` with the loop variable at it; nothing where there is none."""
        fb, b, n = self.fb, self.b, self.lanes
        cmp = self.e
        self.fix(cmp.a)
        self.fix(cmp.b)
        none = ir.Constant(I64, -1)
        one = ir.Constant(I64, n)
        mask_t = ir.IntType(n)
        cttz = fb.declare(f"llvm.cttz.i{n}", mask_t, [mask_t, I1])

        def hit(j):
            with bound(fb.env, self.var, j):
                x, y = self.lanes_of(cmp.a), self.lanes_of(cmp.b)
            if self.float:
                holds = (b.fcmp_unordered("!=", x, y) if cmp.op == "!=" else b.fcmp_ordered(cmp.op, x, y))
            else:
                holds = (b.icmp_unsigned if is_unsigned(self.dt) else b.icmp_signed)(cmp.op, x, y)
            bits = b.bitcast(holds, mask_t)
            at = b.add(j, b.zext(b.call(cttz, [bits, ir.Constant(I1, 0)]), I64))
            return b.select(b.icmp_unsigned("!=", bits, ir.Constant(mask_t, 0)), at, none)

        def more(j, st):  # a whole vector left, and nothing found yet
            return b.and_(b.icmp_signed("<=", b.add(j, one), stop), b.icmp_signed("==", st[0], none))

        _, (found,) = self.loop(start, one, more, [none], lambda j, st: [hit(j)])
        # the last vector, overlapping the ones before (where none held)
        found = b.select(b.icmp_signed("==", found, none), hit(b.sub(stop, one)), found)
        self.take(found, none, found, body)

    def scan(self, start, stop, p, loop: tir.Loop):
        """The loop of :meth:`ExtremumLoops.guarded_loop` from ``start`` to ``stop`` (at least a
        vector apart), a vector of iterations at a time: the lanes whose value beats the
        threshold are the vector's candidates (in the last vector of the loop, which overlaps the
        one before, only the lanes not met before).  A vector without any is passed over; in one
        with some, the iterations from the first candidate to the vector's end run as written
        (each testing its own condition: where values beat the bounds often, as at the start of
        a top-k, that costs less than a threshold per candidate), and the threshold is computed
        again for the next vector."""
        fb, b, n = self.fb, self.b, self.lanes
        fn = fb.fn
        self.fix(self.e)
        one = ir.Constant(I64, n)
        mask_t = ir.IntType(n)
        nothing = ir.Constant(mask_t, 0)
        cttz = fb.declare(f"llvm.cttz.i{n}", mask_t, [mask_t, I1])
        lane = self.iota_of(I32)
        first = self.threshold(p)
        pre = b.block
        head = fn.append_basic_block("scan.vectors")
        b.branch(head)
        b.position_at_end(head)
        j = b.phi(I64)
        j.add_incoming(start, pre)
        limit = b.phi(first.type)
        limit.add_incoming(first, pre)

        def candidates(at, after=None):
            """The lanes of the vector at ``at`` whose value beats the threshold, of those from
            lane ``after`` (an i32) on."""
            with bound(fb.env, self.var, at):
                holds = self.beats(self.lanes_of(self.e), self.splat(limit))
            if after is not None:
                holds = b.and_(holds, b.icmp_signed(">=", lane, self.splat(after)))
            return b.bitcast(holds, mask_t)

        def more(jj, st):
            return b.and_(b.icmp_signed("<=", b.add(jj, one), stop), b.icmp_unsigned("==", st[0], nothing))

        # SCAN_VECTORS vectors a step, their candidates tested once, while none has any (a vector at
        # a time, each test a branch, the loop's compare-and-branch chain is its limit); then from
        # the first of the vectors that stopped it (or from where the block left off), a vector at
        # a time up to the first candidate
        block = ir.Constant(I64, n * SCAN_VECTORS)

        def any_of(jj, st):
            hits = candidates(jj)
            for u in range(1, SCAN_VECTORS):
                hits = b.or_(hits, candidates(b.add(jj, ir.Constant(I64, u * n))))
            return [hits]

        jb, (hit,) = self.loop(j, block, lambda jj, st: b.and_(b.icmp_signed("<=", b.add(jj, block), stop),
                                                               b.icmp_unsigned("==", st[0], nothing)),
                               [nothing], any_of)
        resume = b.select(b.icmp_unsigned("!=", hit, nothing), b.sub(jb, block), jb)
        jj, (bits,) = self.loop(resume, one, more, [nothing], lambda jj, st: [candidates(jj)])
        # none in the whole vectors: the last vector, its lanes from jj on
        whole = b.icmp_unsigned("!=", bits, nothing)
        last = b.sub(stop, one)
        base = b.select(whole, b.sub(jj, one), last)
        bits = b.select(whole, bits, candidates(last, b.trunc(b.sub(jj, last), I32)))
        act = fn.append_basic_block("scan.act")
        done = fn.append_basic_block("scan.end")
        b.cbranch(b.icmp_unsigned("!=", bits, nothing), act, done)
        b.position_at_end(act)
        after = b.add(base, one)
        fb.tir_loop_emit(loop, b.add(base, b.zext(b.call(cttz, [bits, ir.Constant(I1, 0)]), I64)), after,
                         lambda: fb.tir_block(loop.body))
        again = self.threshold(p)
        j.add_incoming(after, b.block)
        limit.add_incoming(again, b.block)
        b.branch(head)
        b.position_at_end(done)

    def threshold(self, p):
        """The least (``>``, ``>=``) or greatest (``<``, ``<=``) of the bounds ``p.bound`` over
        ``p.over``, NaN bounds left out (all NaN: NaN, which nothing beats)."""
        fb, b = self.fb, self.b
        least = self.op in (">", ">=")
        if self.float:
            pick = fb.declare(f"llvm.{'minnum' if least else 'maxnum'}.{'f32' if self.dt == 'float32' else 'f64'}",
                              self.vt.element, [self.vt.element] * 2)

            def better(x, y):
                return b.call(pick, [x, y])
        else:
            cmp = b.icmp_unsigned if is_unsigned(self.dt) else b.icmp_signed

            def better(x, y):
                return b.select(cmp("<" if least else ">", y, x), y, x)
        bound_at = _unchecked(p.bound)
        if p.over is None:
            return fb.expr(bound_at)
        lo, hi = p.over.start.value, p.over.stop.value
        if hi - lo <= UNROLL_BOUNDS:  # every bound loaded, then a tree (a chain would be a round's latency)
            values = []
            for t in range(lo, hi):
                with bound(fb.env, p.over.var, ir.Constant(I64, t)):
                    values.append(fb.expr(bound_at))
            while len(values) > 1:
                values = [better(x, y) for x, y in zip(values[0::2], values[1::2])] + values[len(values) // 2 * 2:]
            return values[0]
        with bound(fb.env, p.over.var, ir.Constant(I64, lo)):
            first = fb.expr(bound_at)

        def step(t, st):
            with bound(fb.env, p.over.var, t):
                return [better(st[0], fb.expr(bound_at))]

        _, (value,) = self.loop(ir.Constant(I64, lo + 1), ir.Constant(I64, 1),
                                lambda t, _: b.icmp_signed("<", t, ir.Constant(I64, hi)), [first], step)
        return value

    def iota_of(self, it):
        return ir.Constant(ir.VectorType(it, self.lanes), [ir.Constant(it, i) for i in range(self.lanes)])

    def take(self, found, none, at, body: list):
        """Unless ``found`` is ``none``: ``body`` (the loop's own ``if`` body) with the loop
        variable at ``at``, the index found as an i64."""
        def write_back():
            with bound(self.fb.env, self.var, at):
                self.fb.tir_block(body)

        self.fb.branch(self.b.icmp_signed("!=", found, none), write_back)

    def step(self, j, best, index, after=None) -> list:
        """One vector of elements from ``j`` taken into the lanes ``(best, index)``; ``after``:
        only the elements from that index on."""
        b = self.b
        with bound(self.fb.env, self.var, j):
            v = self.lanes_of(self.e)
        win = self.beats(v, best)
        narrow = (lambda x: b.trunc(x, self.it)) if self.it is I32 else (lambda x: x)
        at = b.add(self.splat(narrow(j)), self.iota)
        if after is not None:
            win = b.and_(win, b.icmp_signed(">=", at, self.splat(narrow(after))))
        return [b.select(win, v, best), b.select(win, at, index)]

    def beats(self, v, best):
        """Lanes where ``v op best`` (ordered: a NaN never beats, nor is beaten)."""
        if self.float:
            return self.b.fcmp_ordered(self.op, v, best)
        cmp = self.b.icmp_unsigned if is_unsigned(self.dt) else self.b.icmp_signed
        return cmp(self.op, v, best)

    # ------------------------------------------------------------------ values on lanes
    def fix(self, e):
        """The parts of ``e`` that do not move with the loop, computed once before it."""
        if not tir.reads_var(e, self.var):
            self.fixed[id(e)] = self.splat(self.fb.expr(_unchecked(e)))
        elif isinstance(e, tir.Bin):
            self.fix(e.a)
            self.fix(e.b)

    def lanes_of(self, e):
        if id(e) in self.fixed:
            return self.fixed[id(e)]
        b, fb = self.b, self.fb
        if isinstance(e, tir.Load):  # moves with the loop along its last axis: one vector load
            address = fb.address(e.tensor, e.indices, None)
            return b.load(address, typ=self.vt, align=types.numpy_dtype(self.dt).itemsize)
        if isinstance(e, tir.Bin) and e.op in ("+", "-", "*"):
            x, y = self.lanes_of(e.a), self.lanes_of(e.b)
            if self.float:
                return fb.farith(e.op, x, y)
            return {"+": b.add, "-": b.sub, "*": b.mul}[e.op](x, y)
        raise HybridInternalError(f"{type(e).__name__} on the lanes of a running extremum", "llvm")

    def splat(self, v):
        vt = ir.VectorType(v.type, self.lanes)
        if isinstance(v, ir.Constant):
            return ir.Constant(vt, [v] * self.lanes)
        one = self.b.insert_element(ir.Constant(vt, ir.Undefined), v, ir.Constant(I32, 0))
        return self.b.shuffle_vector(one, ir.Constant(vt, ir.Undefined),
                                     ir.Constant(ir.VectorType(I32, self.lanes), [0] * self.lanes))

    def reduce(self, kind: str, v):
        """``llvm.vector.reduce.<kind>`` of the lanes of ``v``."""
        el = v.type.element
        suffix = f"v{self.lanes}" + (f"i{el.width}" if isinstance(el, ir.IntType) else
                                      ("f32" if isinstance(el, ir.FloatType) else "f64"))
        return self.b.call(self.fb.declare(f"llvm.vector.reduce.{kind}.{suffix}", el, [v.type]), [v])

    def loop(self, start, stride, cond, state: list, body):
        return phi_loop(self.fb, start, stride, cond, state, body)


def phi_loop(fb, start, stride, cond, state: list, body):
    """A loop from ``start`` by ``stride`` while ``cond(counter, state)``, carrying ``state``
    (values that ``body(counter, state)`` replaces): ``(the counter at the exit, the state there)``."""
    b, fn = fb.b, fb.fn
    pre = b.block
    header = fn.append_basic_block("lanes.for")
    body_bb = fn.append_basic_block("lanes.body")
    exit_ = fn.append_basic_block("lanes.end")
    b.branch(header)
    b.position_at_end(header)
    j = b.phi(I64)
    j.add_incoming(start, pre)
    phis = []
    for v in state:
        p = b.phi(v.type)
        p.add_incoming(v, pre)
        phis.append(p)
    b.cbranch(cond(j, phis), body_bb, exit_)
    b.position_at_end(body_bb)
    new = body(j, phis)
    latch = b.block
    j.add_incoming(b.add(j, stride, flags=("nsw",)), latch)
    for p, v in zip(phis, new):
        p.add_incoming(v, latch)
    b.branch(header)
    b.position_at_end(exit_)
    return j, phis


def _unchecked(e):
    """``e`` with its loads' run-time checks left out (the pass runs only where they hold)."""
    def drop(n):
        if isinstance(n, tir.Load) and n.checked:
            return replace(tir.rewrite_children(n, drop), checked=False)
        return None

    return tir.rewrite(e, drop)

