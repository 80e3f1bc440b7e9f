"""Temporaries computed where they are read: an elementwise producer inlined into its readers.

A residual add feeding an RMSNorm::

    for i in range(n):
        for j in range(d):
            t[i, j] = x[i, j] + r[i, j]
    for i in range(n):
        s = 0.0
        for j in range(d):
            s += t[i, j] * t[i, j]
        inv = 1.0 / sqrt(s / d + eps)
        for j in range(d):
            y[i, j] = t[i, j] * inv * gamma[j]

writes ``t`` through memory and reads it back twice.  isl keeps the producer's nest apart from the
row loop (fused, the producer's second loop would no longer be a parallel member of its band), so
the contraction stage cannot hold ``t`` in a scalar.  Where the producer is cheap, computing
``x[i, j] + r[i, j]`` at each read is one pass over memory instead: the reduction reads ``x`` and
``r``, and the last loop reads the same row again from the L1 cache.  This stage, on the typed
kernel before extraction, does that (as Inductor inlines pointwise producers into reductions).

A temporary ``t`` (an ``allocate`` the kernel does not return) is computed at its reads when all
of this holds:

* one statement writes it: a store ``t[v1, ..., vk] = e`` directly in a perfect nest of ``k``
  loops, in no other loop or branch, of step 1 from 0 to ``t``'s extents, its subscripts the
  loops' variables, each once (every cell written once, and only there);
* ``e`` reads only tensors nothing writes (inputs, parameters), the nest's variables and
  constants; ``t``'s dtype is ``e``'s and not a 16-bit float;
* every read of ``t`` is in a statement after the nest, in a store's value or subscripts or a
  branch's condition, and its subscripts are variables of the loops around it, each once and
  every one of those loops' variables used (each read of a cell happens once per statement);
* the readers are few or ``e`` is cheap: ``e`` computed ``m`` times (once per reading statement)
  loads no more than the memory the buffer cost (``m loads(e) <= loads(e) + 1 + m``) and its
  repeated arithmetic is at most :data:`MAX_EXTRA` operations (a math function counts as
  :data:`CALL_COST`).

The producer's nest and ``t`` are then gone.  Each read computes exactly what was stored (the same
operations in the same dtype), so results are unchanged bit for bit.  ``rewrite(typed)`` returns
the new typed kernel and one decision per temporary.
"""
from __future__ import annotations

from dataclasses import replace

from ..dsl import tir

# repeated arithmetic a temporary may cost, per extra reading statement, and a math call's weight
MAX_EXTRA = 8
CALL_COST = 8


def rewrite(typed: tir.TypedKernel) -> tuple:
    """``(typed kernel, decisions)`` with every temporary of the module doc computed at its reads."""
    decisions = []
    written = _stores_by_tensor(typed.body)
    for name, t in list(typed.tensors.items()):
        if t.kind != "temp" or name in typed.inputs or name in typed.outputs:
            continue
        found = _producer(typed, t, written)
        if found is None:
            continue
        index, store, loop_vars = found
        readers = _readers(typed.body[index + 1:], name)
        if not readers or _readers(typed.body[:index], name) != []:
            continue
        if not _worth(store.value, len(readers)):
            continue
        body = list(typed.body[:index]) + [_substituted(s, name, store, loop_vars) for s in typed.body[index + 1:]]
        tensors = {n: v for n, v in typed.tensors.items() if n != name}
        typed = replace(typed, body=body, tensors=tensors)
        written = _stores_by_tensor(typed.body)
        decisions.append(f"temporary `{t.source_name}` computed where it is read ({len(readers)} statement(s)): "
                         f"its nest (line {_line(store)}) is gone, one pass over memory")
    return typed, tuple(decisions)


def _line(s) -> str:
    return str(s.span.line) if s.span is not None else "?"


def _stores_by_tensor(body: list) -> dict:
    out = {}
    for s in tir.walk_stmts(body):
        if isinstance(s, tir.Store):
            out.setdefault(s.tensor, []).append(s)
    return out


def _producer(typed: tir.TypedKernel, t: tir.Tensor, written: dict):
    """``(position in the body, the store, the nest's variables)`` of ``t``'s one producer, or None."""
    stores = written.get(t.name, [])
    if len(stores) != 1 or t.dtype in ("float16", "bfloat16"):
        return None
    for index, s in enumerate(typed.body):
        nest, store = _perfect_nest(s)
        if store is not stores[0]:
            continue
        vars_ = [loop.var for loop in nest]
        if len(nest) != len(t.shape) or any(loop.step != 1 or not _is_zero(loop.start) or loop.stop != tir.dim(ext)
                                            for loop, ext in zip(nest, t.shape)):
            return None
        if [i.name if isinstance(i, tir.Var) else None for i in store.indices] != vars_:
            return None
        if store.value.dtype != t.dtype or not _pure(store.value, typed, written, set(vars_)):
            return None
        return index, store, vars_
    return None


def _is_zero(e) -> bool:
    return isinstance(e, tir.Const) and e.value == 0


def _perfect_nest(s):
    """The loops of a perfect nest starting at ``s`` and the store at its bottom (or None)."""
    nest = []
    while isinstance(s, tir.Loop) and len(s.body) == 1:
        nest.append(s)
        s = s.body[0]
    return (nest, s) if nest and isinstance(s, tir.Store) else (nest, None)


def _pure(e, typed: tir.TypedKernel, written: dict, vars_: set) -> bool:
    """Whether ``e`` reads only tensors nothing writes, the variables ``vars_`` and constants."""
    for sub in tir.walk_expr(e):
        if isinstance(sub, tir.Load) and (sub.tensor in written or sub.checked):
            return False
        if isinstance(sub, tir.Var) and sub.name not in vars_:
            return False
        if isinstance(sub, tir.Let):
            return False
    return True


def _loads_of(e, name: str) -> list:
    return [sub for sub in tir.walk_expr(e) if isinstance(sub, tir.Load) and sub.tensor == name]


def _readers(body: list, name: str, around: tuple = ()):
    """The statements of ``body`` that read ``name`` (None where a read is not of the module doc's
    kind: in a loop's bounds, a print or an assertion, or with other subscripts)."""
    found = []
    for s in body:
        if isinstance(s, tir.Loop):
            if _loads_of(s.start, name) or _loads_of(s.stop, name):
                return None
            inner = _readers(s.body, name, around + (s.var,))
            if inner is None:
                return None
            found += inner
        elif isinstance(s, tir.If):
            loads = _loads_of(s.cond, name)
            if not all(_once_per_cell(ld, around) for ld in loads):
                return None
            if loads:
                found.append(s)
            for branch in (s.body, s.orelse):
                inner = _readers(branch, name, around)
                if inner is None:
                    return None
                found += inner
        elif isinstance(s, tir.Store):
            loads = [ld for e in (s.value, *s.indices) for ld in _loads_of(e, name)]
            if not all(_once_per_cell(ld, around) for ld in loads):
                return None
            if loads:
                found.append(s)
        elif any(True for _ in _tensor_reads(s, name)):
            return None
    return found


def _tensor_reads(s, name: str):
    exprs = list(getattr(s, "items", [])) + [getattr(s, "cond", None)]
    for e in exprs:
        if isinstance(e, tir.TExpr):
            yield from _loads_of(e, name)


def _once_per_cell(load: tir.Load, around: tuple) -> bool:
    names = [i.name if isinstance(i, tir.Var) else None for i in load.indices]
    return None not in names and len(set(names)) == len(names) and set(names) == set(around)


def _cost(e) -> tuple:
    """``(loads, arithmetic operations)`` of ``e``, a math call weighing :data:`CALL_COST`."""
    loads = ops = 0
    for sub in tir.walk_expr(e):
        if isinstance(sub, tir.Load):
            loads += 1
        elif isinstance(sub, tir.Intrinsic):
            ops += CALL_COST
        elif isinstance(sub, (tir.Bin, tir.Unary, tir.Cmp, tir.Select, tir.Pick, tir.Logic, tir.Bits, tir.Prim)):
            ops += 1
    return loads, ops


def _worth(e, readers: int) -> bool:
    loads, ops = _cost(e)
    return readers * loads <= loads + 1 + readers and (readers - 1) * ops <= MAX_EXTRA


def _substituted(s, name: str, store: tir.Store, vars_: list):
    """``s`` with every read of ``name`` replaced by the stored expression at its subscripts."""
    def by(node):
        if isinstance(node, tir.Load) and node.tensor == name:
            at = dict(zip(vars_, node.indices))
            return tir.rewrite(store.value, lambda n: at[n.name] if isinstance(n, tir.Var) and n.name in at else None)
        return None
    return tir.rewrite(s, by)
