"""Temporaries allocated inside a ``parallel`` loop get a copy per iteration.

TVM's hybrid script, and hyb, give a tensor allocated inside a loop a fresh, zeroed buffer on
every iteration::

    for i in parallel(n):
        o = allocate((4,), "float32")
        ...                      # o written and read within iteration i

Nothing flows through ``o`` from one iteration to the next, yet one buffer serves them all, so
its reuse (writes of one iteration after reads of the one before) is a dependence that keeps the
loop off the threads (with a warning that the ``parallel`` was not honoured).  This stage, on the
typed kernel before extraction, gives ``o`` a leading dimension per enclosing ``parallel`` loop of
known trip count, indexed by that loop's iteration number: each iteration then has a buffer of its
own and the loop runs on threads.  Each copy is zeroed where the allocation stood, as before, so
results are unchanged.  Only temporaries whose copies together stay within :data:`MAX_BYTES` are
expanded, and ``rewrite(typed)`` returns ``(typed, decisions)``.
"""
from __future__ import annotations

import math
from dataclasses import replace

from ..dsl import tir, types
from ..dsl.folding import is_size_expression

MAX_BYTES = 4 << 20  # the most memory the copies of one temporary may take together


def _trips(loop: tir.Loop):
    """The trip count of ``loop``: a number when its bounds are known now, the run-time size it
    runs to in a shape-generic kernel (``range(n)``), else None."""
    if isinstance(loop.start, tir.Const) and isinstance(loop.stop, tir.Const):
        return len(range(int(loop.start.value), int(loop.stop.value), loop.step))
    if (isinstance(loop.start, tir.Const) and loop.start.value == 0 and loop.step == 1
            and is_size_expression(loop.stop)):
        return loop.stop
    return None


def rewrite(typed: tir.TypedKernel) -> tuple:
    loops = {s.var: s for s in tir.walk_stmts(typed.body) if isinstance(s, tir.Loop)}
    expand = {}  # temporary -> the parallel loops it gets a copy per iteration of (outermost first)
    decisions = []
    for t in typed.tensors.values():
        if t.kind != "temp" or not t.private_to or not all(isinstance(d, int) for d in t.shape):
            continue
        around = [loops[v] for v in t.private_to if v in loops and loops[v].kind == "parallel"]
        trips = [_trips(lp) for lp in around]
        if not around or None in trips:
            continue
        # (a shape-generic kernel's count is the loops' sizes: its copies take what those loops read)
        copies = math.prod(trips) if all(isinstance(n, int) for n in trips) else None
        if copies is not None and copies * max(t.size, 1) * types.numpy_dtype(t.dtype).itemsize > MAX_BYTES:
            continue
        expand[t.name] = (around, trips)
        loops_text = ", ".join(f"`{lp.var}`" for lp in around)
        count = f"{copies} copies" if copies is not None else "as many copies as the loop has iterations"
        decisions.append(f"privatise: `{t.source_name}` (allocated inside the parallel loop{'s' if len(around) > 1 else ''}"
                         f" {loops_text}) has a copy per iteration: {count}")
    if not expand:
        return typed, ()

    def number(lp: tir.Loop) -> tir.TExpr:
        """The iteration number of ``lp`` (0, 1, ...) from its variable."""
        i = tir.Var(types.WEAK_INT, lp.var)
        if lp.start.value:
            i = tir.Bin(types.WEAK_INT, "-", i, tir.Const(types.WEAK_INT, int(lp.start.value)))
        if lp.step != 1:
            i = tir.Bin(types.WEAK_INT, "//", i, tir.Const(types.WEAK_INT, lp.step))
        return i

    def by(node):
        if isinstance(node, (tir.Load, tir.Store)) and node.tensor in expand:
            node = tir.rewrite_children(node, by)
            return replace(node, indices=[number(lp) for lp in expand[node.tensor][0]] + list(node.indices))
        return None

    body = [tir.rewrite(s, by) for s in typed.body]
    tensors = dict(typed.tensors)
    for name, (_, trips) in expand.items():
        t = tensors[name]
        tensors[name] = replace(t, shape=tuple(trips) + tuple(t.shape), code_shape=())
    return replace(typed, tensors=tensors, body=body), tuple(decisions)
