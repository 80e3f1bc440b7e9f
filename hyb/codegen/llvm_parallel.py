"""Parallel loops of the LLVM back end: each is outlined into ``hyb_<name>.par<k>(ptr %ctx)`` and run
by libgomp; every thread takes a block of the iterations with private copies of the scalar locals."""
from __future__ import annotations

from llvmlite import ir

from ..schedule import loops
from .abi import RT_CODE, RT_THREADS
from .llvm_types import I8, I32, I64, PTR, memory_type

class ParallelOutlining:
    """Loops marked parallel, outlined into functions that libgomp's ``GOMP_parallel`` runs on threads.

    Mixed into the LLVM function builder."""

    def parallel_loop(self, s: loops.For):
        """Outline the loop into a function run by every thread of a GOMP_parallel region.

        ``<fn>.par<k>(ptr ctx)`` unpacks the captured values from ``ctx`` and calls
        ``<fn>.par<k>.body`` with its thread's number and the number of threads; the body's
        tensor pointers are ``noalias`` arguments again.  With one thread the body is called
        directly as thread 0 of 1: constants that LLVM folds into the loop's bounds once the
        body is inlined there.
        """
        b = self.b
        tensors = list(self.ptrs.items())
        shared = [(n, v) for n, v in self.slots.items() if n not in self.ptrs]
        counters = list(self.loopvars.items())
        values = [v for _, v in tensors] + [self.err] + [v for _, v in shared] + [v for _, v in counters]
        kinds = [PTR] * (len(tensors) + 1 + len(shared)) + [I64] * len(counters)
        name = f"{self.fn.name}.par{self.n_parallel}"
        self.n_parallel += 1
        body_fn = ir.Function(self.module, ir.FunctionType(ir.VoidType(), kinds + [I64, I64]), name + ".body")
        for a, (n, _) in zip(body_fn.args, tensors):
            a.add_attribute("noalias")
        tramp = ir.Function(self.module, ir.FunctionType(ir.VoidType(), [PTR]), name)
        # the context: one 8-byte slot per captured value
        raw = self.allocas.alloca(ir.ArrayType(I64, max(1, len(values))), name="par.ctx")
        ctx = b.inttoptr(b.ptrtoint(raw, I64), PTR)
        for i, v in enumerate(values):
            b.store(v, b.gep(ctx, [ir.Constant(I64, 8 * i)], source_etype=I8))
        tb = ir.IRBuilder(tramp.append_basic_block("entry"))
        args = [tb.load(tb.gep(tramp.args[0], [ir.Constant(I64, 8 * i)], source_etype=I8), typ=t)
                for i, t in enumerate(kinds)]
        tid = tb.sext(tb.call(self.declare("omp_get_thread_num", I32, []), []), I64)
        nth = tb.sext(tb.call(self.declare("omp_get_num_threads", I32, []), []), I64)
        tb.call(body_fn, args + [tid, nth])
        tb.ret_void()
        # the body, built with this builder's state pointed at the new function
        saved = (self.fn, self.b, self.ptrs, self.err, self.slots, self.loopvars, self.outlined, self.blocks)
        self.fn, self.b, self.outlined = body_fn, ir.IRBuilder(body_fn.append_basic_block("entry")), True
        self.blocks = {}
        self.make_blocks()  # each thread its own register blocks
        fargs = list(body_fn.args)
        self.ptrs = {n: a for (n, _), a in zip(tensors, fargs)}
        self.err = fargs[len(tensors)]
        self.slots = {}
        for n, _ in saved[4].items():
            if n in self.ptrs:
                self.slots[n] = self.ptrs[n]
        for (n, _), a in zip(shared, fargs[len(tensors) + 1:]):
            t = self.k.tensors[n]
            private = self.b.alloca(memory_type(t.dtype), name="s_" + n)  # each thread its own copy
            self.b.store(self.b.load(a, typ=memory_type(t.dtype)), private)
            self.slots[n] = private
        self.loopvars = {n: a for (n, _), a in zip(counters, fargs[len(tensors) + 1 + len(shared):-2])}
        self.thread_loop(s, fargs[-2], fargs[-1])
        self.b.ret_void()
        self.fn, self.b, self.ptrs, self.err, self.slots, self.loopvars, self.outlined, self.blocks = saved
        b = self.b
        nthreads = b.trunc(b.load(self.rt_slot(RT_THREADS), typ=I64), I32)
        gomp = self.declare("GOMP_parallel", ir.VoidType(), [PTR, PTR, I32, I32])
        # With one thread, call the body directly as thread 0 of 1: it takes every iteration.
        one = b.icmp_signed("<=", nthreads, ir.Constant(I32, 1))
        direct_bb = self.fn.append_basic_block("par.direct")
        gomp_bb = self.fn.append_basic_block("par.gomp")
        joined_bb = self.fn.append_basic_block("par.joined")
        b.cbranch(one, direct_bb, gomp_bb)
        b.position_at_end(direct_bb)
        b.call(body_fn, values + [ir.Constant(I64, 0), ir.Constant(I64, 1)])
        b.branch(joined_bb)
        b.position_at_end(gomp_bb)
        b.call(gomp, [tramp, ctx, nthreads, ir.Constant(I32, 0)])
        b.branch(joined_bb)
        b.position_at_end(joined_bb)
        code = b.load(self.rt_slot(RT_CODE), typ=I64)
        failed = b.icmp_signed("!=", code, ir.Constant(I64, 0))
        fail_bb = self.fn.append_basic_block("par.failed")
        cont_bb = self.fn.append_basic_block("par.done")
        b.cbranch(failed, fail_bb, cont_bb)
        b.position_at_end(fail_bb)
        b.ret(b.trunc(code, I32))
        b.position_at_end(cont_bb)

    def thread_loop(self, s: loops.For, tid, nth):
        """The share of the iterations of ``s`` of thread ``tid`` of ``nth``."""
        b = self.b
        init = self.lexpr(s.init)
        step = ir.Constant(I64, s.step)
        bound = loops.upper_bound(s)
        if bound is not None:
            # Contiguous blocks: iterations [tid*chunk, (tid+1)*chunk) of the trip count.
            op, ub_expr = bound
            ub = self.lexpr(ub_expr)
            last = ub if op == "le" else b.sub(ub, ir.Constant(I64, 1))
            span = b.sub(last, init)  # (negative: no iteration; sdiv would round -1 // 2 up to 0)
            trips = b.add(b.sdiv(span, step), ir.Constant(I64, 1))
            trips = b.select(b.icmp_signed("<", span, ir.Constant(I64, 0)), ir.Constant(I64, 0), trips)
            chunk = b.sdiv(b.add(trips, b.sub(nth, ir.Constant(I64, 1))), nth)
            first = b.mul(tid, chunk)
            end = b.add(first, chunk)
            end = b.select(b.icmp_signed("<", end, trips), end, trips)
            start = b.add(init, b.mul(first, step))
            stop = b.add(init, b.mul(end, step))
            self.counted_loop(s, start, stop, step)
        else:
            # Every nth iteration, starting at this thread's number.
            start = b.add(init, b.mul(tid, step))
            self.counted_loop(s, start, None, b.mul(nth, step))
