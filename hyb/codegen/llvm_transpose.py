"""A tile's copy out, transposed in registers, for :mod:`hyb.codegen.llvm`.

A loop of the form :class:`~hyb.schedule.transpose.Transposed` copies a tile to a tensor along
the tile's columns.  Where the tile is whole (``side`` iterations of both loops), its element
type is 4 or 8 bytes and its first and last elements lie inside both tensors, it is copied as
square blocks of one vector's lanes (16 float32, 8 float64): the block's rows are loaded along
the tile's rows, transposed by log2(lanes) stages of two-vector shuffles (at stage ``s`` the two
rows ``r`` and ``r + s`` exchange their ``s``-wide blocks across the diagonal), and stored along
the tensor's rows.  Elsewhere the loops run as written.  (Both tensors' subscripts move with the
two loop variables along one axis each, so the first and last elements bound every other.)
"""
from __future__ import annotations

from llvmlite import ir

from ..dsl import tir, types
from ..schedule import loops
from ..schedule.argext import lanes_for
from .llvm_extremum import phi_loop
from .llvm_types import I32, I64, memory_type
from .walker import bound


class TransposedCopies:
    """Mixed into the LLVM function builder, whose ``loop_form`` calls :meth:`transposed_copy`."""

    def transposed_copy(self, s: tir.Loop):
        inner = s.body[0]
        store = inner.body[0]
        load = store.value
        t = self.k.tensors[store.tensor]
        size = types.numpy_dtype(t.dtype).itemsize
        if types.concrete(t.dtype) == "bool" or size not in (4, 8):
            self.written_loop(s)
            return
        lanes = lanes_for(t.dtype)
        side = s.form.side
        b = self.b
        b_lo, b_hi = self.index(s.start), self.index(s.stop)
        a_lo, a_hi = self.index(inner.start), self.index(inner.stop)
        whole = ir.Constant(I64, side)
        ok = b.and_(b.icmp_signed("==", b.sub(b_hi, b_lo), whole), b.icmp_signed("==", b.sub(a_hi, a_lo), whole))
        for at_b, at_a in ((b_lo, a_lo), (b.sub(b_hi, ir.Constant(I64, 1)), b.sub(a_hi, ir.Constant(I64, 1)))):
            with bound(self.env, s.var, at_b), bound(self.env, inner.var, at_a):
                ok = b.and_(ok, b.and_(self.inside(store.tensor, store.indices), self.inside(load.tensor, load.indices)))
        vt = ir.VectorType(memory_type(t.dtype), lanes)
        step = ir.Constant(I64, lanes)

        def blocks():
            def column_block(bb, _):
                def row_block(aa, _):
                    rows = []
                    for r in range(lanes):
                        with bound(self.env, s.var, bb), bound(self.env, inner.var, b.add(aa, ir.Constant(I64, r))):
                            rows.append(b.load(self.address(load.tensor, load.indices, None), typ=vt, align=size))
                    for c, column in enumerate(_transpose(b, rows)):
                        with bound(self.env, s.var, b.add(bb, ir.Constant(I64, c))), bound(self.env, inner.var, aa):
                            b.store(column, self.address(store.tensor, store.indices, None), align=size)
                    return []

                phi_loop(self, a_lo, step, lambda aa, _: b.icmp_signed("<", aa, a_hi), [], row_block)
                return []

            phi_loop(self, b_lo, step, lambda bb, _: b.icmp_signed("<", bb, b_hi), [], column_block)

        self.branch(ok, blocks, lambda: self.written_loop(s))


    def square_copy(self, s: loops.For, plain):
        """``s`` and its inner loop as squares transposed in registers (``loops.For.square``):
        where both loops run all ``side`` iterations from their first, ``side`` vectors loaded along
        ``s`` (one per iteration of the inner loop), transposed, and stored along the inner loop;
        elsewhere ``plain()``, the loops as written."""
        side = s.square
        inner = s.body[0]
        call = inner.body[0]
        st = self.nest.statements[call.stmt]
        store = st.stmt
        load = store.value
        t = self.k.tensors[load.tensor]
        size = types.numpy_dtype(t.dtype).itemsize
        b = self.b
        scope = self.loopvars
        o0 = self.lexpr(s.init)
        last = ir.Constant(I64, side - 1)
        scope[s.var] = b.add(o0, last)
        ok = self.lexpr(s.cond)
        scope[s.var] = o0
        i0 = self.lexpr(inner.init)
        scope[inner.var] = b.add(i0, last)
        ok = b.and_(ok, self.lexpr(inner.cond))
        del scope[s.var], scope[inner.var]
        vt = ir.VectorType(memory_type(t.dtype), side)

        def element(o, i, tensor, indices):
            scope[s.var], scope[inner.var] = o, i
            saved = self.env
            self.bind_statement(st, call, lambda: None)
            address = self.address(tensor, indices, None)
            self.env = saved
            del scope[s.var], scope[inner.var]
            # (a stack array's address is typed by its element)
            return b.bitcast(address, vt.as_pointer()) if getattr(address.type, "pointee", None) is not None else address

        def whole():
            rows = [b.load(element(o0, b.add(i0, ir.Constant(I64, r)), load.tensor, load.indices), typ=vt, align=size)
                    for r in range(side)]
            for c, column in enumerate(_transpose(b, rows)):
                b.store(column, element(b.add(o0, ir.Constant(I64, c)), i0, store.tensor, store.indices), align=size)

        self.branch(ok, whole, plain)


def _transpose(b, rows: list) -> list:
    """The columns of the square of ``rows`` (vectors of as many lanes as there are rows)."""
    n = len(rows)
    rows = list(rows)
    s = n // 2
    while s >= 1:
        for r in range(n):
            if r & s:
                continue
            lo = [c if not c & s else n + c - s for c in range(n)]
            hi = [c + s if not c & s else n + c for c in range(n)]
            x, y = rows[r], rows[r + s]
            rows[r] = b.shuffle_vector(x, y, ir.Constant(ir.VectorType(I32, n), lo))
            rows[r + s] = b.shuffle_vector(x, y, ir.Constant(ir.VectorType(I32, n), hi))
        s //= 2
    return rows
