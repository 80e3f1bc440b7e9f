"""Nests that read along one dimension and write along another, staged through a tile.

A bias and activation stored transposed::

    for i in range(n):
        for j in range(d):
            t = x[i, j] + b[j]
            y[j, i] = t / (1.0 + exp(-t))

reads ``x`` along ``j`` and writes ``y`` along ``i``.  Whichever loop runs innermost, one of the
two walks memory with a stride of a whole row; with rows a power of two apart, every line it
touches falls in the same set of the L1 cache, which holds eight, and the nest ran 16 times
slower than a copy.  This stage, on the typed kernel before extraction (CPU), runs such a nest in
``T``×``T`` tiles, each in two passes:

    for i0 in range(0, n, T):
        for j0 in range(0, d, T):
            for i in range(i0, min(i0 + T, n)):      # along x's rows: vector loads
                for j in range(j0, min(j0 + T, d)):
                    t = x[i, j] + b[j]
                    y_tile[i, j - j0] = t / (1.0 + exp(-t))
            for j in range(j0, min(j0 + T, d)):      # along y's rows: vector stores
                for i in range(i0, min(i0 + T, n)):
                    y[j, i] = y_tile[i, j - j0]

The copy out has the form :class:`Transposed`: whole tiles are copied as blocks transposed in
registers.  ``y_tile`` (an ``allocate`` of ``n``×``T``) holds one row of tiles; each ``i0`` has rows of its
own, so the ``i0`` loop stays free to run on threads.  The strided side of each pass stays within
one tile, in L1.

A nest is staged when all of this holds:

* two loops, one directly in the other, both of step 1, with bounds known now (so that the tile
  is sized for them) and more than ``T`` iterations each; other loops may be around them (NCHW
  to NHWC: the tile then serves each of their iterations in turn);
* the inner body is stores only: to scalars declared in it, and one store to a tensor ``y`` of
  rank 2 or more whose last subscript is the outer loop's variable and another one the inner
  loop's, its other subscripts neither;
* the body reads no tensor it writes, and at least one of its loads has the inner loop's
  variable as its last subscript (so the reads do run along the inner loop);
* ``y`` is an output or a temporary.

Every iteration of such a nest writes its own cell of ``y`` and nothing else outside itself, so
the iterations may run in any order.  ``rewrite(typed)`` returns the new typed kernel and one
decision per nest staged.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from ..dsl import tir
from ..dsl.desugar import Names

# the tile's side: a float32 tile of 16 KiB stays in L1; on 2048x1024 float32 the bias-SiLU nest of
# the module doc took 4.2 ms with tiles of 16, 2.6 with 32, 0.58 with 64 and 0.74 with 128
T = 64


def rewrite(typed: tir.TypedKernel) -> tuple:
    """``(typed kernel, decisions)`` with every nest of the module doc staged through a tile."""
    r = _Stager(typed)
    body = tir.rewrite_stmts(typed.body, r.nest)
    if not r.decisions:
        return typed, ()
    return replace(typed, body=body, tensors=r.tensors), tuple(r.decisions)


class _Stager:
    def __init__(self, typed: tir.TypedKernel):
        self.tensors = dict(typed.tensors)
        self.names = Names(set(typed.tensors) | tir.loop_vars(typed.body))
        self.decisions = []

    def fresh(self, base: str) -> str:
        return self.names.fresh(base)

    def nest(self, s, around: tuple):
        """The statements that replace ``s`` where it is a nest this stage stages, or None."""
        store = _match(s, self.tensors) if isinstance(s, tir.Loop) else None
        return None if store is None else self.stage(s, store)

    def stage(self, outer: tir.Loop, store: tir.Store) -> list:
        """The nest ``outer`` in tiles through a tile buffer, ``store`` to it and then out of it."""
        inner = outer.body[0]
        span = store.span
        a, b = outer.var, inner.var
        y = self.tensors[store.tensor]
        lo_a, hi_a, lo_b, hi_b = outer.start.value, outer.stop.value, inner.start.value, inner.stop.value
        tile = self.fresh(f"{y.source_name or y.name}_tile")
        self.tensors[tile] = tir.Tensor(tile, (hi_a - lo_a, T), y.dtype, "temp", span, tile)
        a0, b0 = self.fresh(f"{a}_tile"), self.fresh(f"{b}_tile")
        a2, b2 = self.fresh(f"{a}_out"), self.fresh(f"{b}_out")

        def var(name):
            return tir.Var("int", name, span=span)

        def num(v):
            return tir.Const("int", v, span=span)

        def upto(v0, hi):  # min(v0 + T, hi)
            return tir.Intrinsic("int", "min", [tir.Bin("int", "+", var(v0), num(T), span=span), num(hi)], span=span)

        def cell(av, bv):  # y_tile[a - lo_a, b - b0]
            return [tir.Bin("int", "-", var(av), num(lo_a), span=span), tir.Bin("int", "-", var(bv), var(b0), span=span)]

        body = [tir.Store(tile, cell(a, b), s.value, span=s.span) if s is store else s for s in inner.body]
        compute = replace(outer, start=var(a0), stop=upto(a0, hi_a),
                          body=[replace(inner, start=var(b0), stop=upto(b0, hi_b), body=body)])
        out_index = [var(b2) if tir.is_var(i, b) else var(a2) if tir.is_var(i, a) else i for i in store.indices]
        copy = replace(inner, var=b2, start=var(b0), stop=upto(b0, hi_b), form=Transposed(T), body=[replace(
            outer, var=a2, start=var(a0), stop=upto(a0, hi_a), body=[tir.Store(
                store.tensor, out_index, tir.Load(y.dtype, tile, cell(a2, b2), span=span), span=span)])])
        tiles = replace(outer, var=a0, start=num(lo_a), stop=num(hi_a), step=T, body=[
            replace(inner, var=b0, start=num(lo_b), stop=num(hi_b), step=T, body=[compute, copy])])
        line = f" (line {outer.span.line})" if outer.span is not None else ""
        self.decisions.append(f"nest{line} reads along `{b}` and writes `{y.source_name or y.name}` along `{a}`: "
                              f"run in {T}x{T} tiles, each computed into `{tile}` and then copied out along `{a}`")
        return [tiles]


@dataclass(frozen=True)
class Transposed:
    """The form of a tile's copy out (``tir.Loop.form``, on its outer loop)::

        for b in range(b0, min(b0 + side, hi_b)):
            for a in range(a0, min(a0 + side, hi_a)):
                y[..., b, ..., a] = y_tile[a - lo_a, b - b0]

    which reads the tile down its columns.  A back end may copy a whole tile as square blocks of
    one vector's lanes, each read along the tile's rows, transposed in registers and stored
    along ``y``'s rows (:mod:`hyb.codegen.llvm_transpose`); a tile cut short at an edge of the
    nest is copied as written."""

    side: int


def _match(outer: tir.Loop, tensors: dict):
    """The one store to a tensor of a nest the module doc describes, or None."""
    if outer.step != 1 or len(outer.body) != 1 or not isinstance(outer.body[0], tir.Loop):
        return None
    inner = outer.body[0]
    if inner.step != 1 or not all(isinstance(e, tir.Const) and isinstance(e.value, int)
                                  for e in (outer.start, outer.stop, inner.start, inner.stop)):
        return None
    if outer.stop.value - outer.start.value <= T or inner.stop.value - inner.start.value <= T:
        return None
    a, b = outer.var, inner.var
    if not all(isinstance(s, tir.Store) for s in inner.body):
        return None
    arrays = [s for s in inner.body if tensors[s.tensor].kind != "scalar"]
    scalars = [s for s in inner.body if tensors[s.tensor].kind == "scalar"]
    if len(arrays) != 1 or any(tensors[s.tensor].private_to[-2:] != (a, b) for s in scalars):
        return None
    (store,) = arrays
    y = tensors[store.tensor]
    idx = store.indices
    if (y.kind not in ("output", "temp") or len(idx) < 2 or not tir.is_var(idx[-1], a)
            or sum(tir.is_var(i, b) for i in idx) != 1
            or any(_reads_var(i, {a, b}) for i in idx if not (tir.is_var(i, a) or tir.is_var(i, b)))):
        return None
    written = {s.tensor for s in inner.body}
    loads = [n for s in inner.body for e in s.indices + [s.value] for n in tir.walk_expr(e)
             if isinstance(n, tir.Load)]
    if any(ld.tensor in written and tensors[ld.tensor].kind != "scalar" for ld in loads):
        return None
    if not any(ld.indices and tir.is_var(ld.indices[-1], b) for ld in loads):
        return None
    return store


def _reads_var(e, names: set) -> bool:
    return any(isinstance(n, tir.Var) and n.name in names for n in tir.walk_expr(e))
