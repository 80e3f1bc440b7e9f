"""Scalar accumulators moved into the tensor cell they are stored to.

C code, and kernels ported from it, sum a dot product in a local and store it once::

    for i in range(n):
        for o in range(m):
            val = b[o]
            for k in range(d):
                val += a[i, k] * w[o, k]
            out[i, o] = max(val, 0.0)

while the contraction stages (register and cache blocks: :mod:`hyb.schedule.blocking`,
:mod:`hyb.schedule.promote`) find a contraction by a statement that writes a tensor cell which
does not move with the reduction loop.  This stage, on the typed kernel before extraction, gives
both spellings one form, accumulating in the cell itself::

    for i in range(n):
        for o in range(m):
            out[i, o] = b[o]
            for k in range(d):
                out[i, o] += a[i, k] * w[o, k]
            out[i, o] = max(out[i, o], 0.0)

The last store goes where it would store the cell unchanged (``out[i, o] = val``).  A segment of a
block of statements is rewritten when all of this holds:

* it starts with ``v = e0``, ``v`` a scalar local and ``e0`` not reading it;
* it ends with a store ``T[idx] = f(v)`` into a tensor, ``f`` reading ``v`` and not ``T``;
* each statement between them either touches neither ``v`` nor ``T``, or is a loop (at least one)
  in which every statement touching ``v`` is an update ``v = v + e``, ``v = e + v``,
  ``v = v - e``, ``v = max(v, e)`` or ``min`` (either order) with ``e`` not reading ``v``, and
  which neither reads nor writes ``T`` (nor reads ``v`` in a bound or a condition);
* ``idx`` reads no tensor or scalar and no variable but those of the loops around the segment (the
  cell is the same one from ``v = e0`` to the store);
* ``v`` has ``T``'s dtype (every value rounds as before), and the kernel reads ``v`` nowhere but in
  such segments (its value is dead after each store).

Every read of ``v`` in the segment then reads ``T[idx]``, each update stores there, and
``v = e0`` becomes ``T[idx] = e0``: the same operations on the same values in the same order, so
results are unchanged bit for bit.  ``v`` is gone from the kernel where nothing else touches it.

A temporary reduced into and then copied (``t = allocate(...)``, a nest accumulating ``t``, and
``y[...] = t[...]`` over all of it, ``t`` read nowhere else) is accumulated in ``y`` directly
where ``y`` is an output of ``t``'s shape and dtype that nothing touches before the copy: both
start at zero, and the copy's nest is gone.

``rewrite(typed)`` returns the new typed kernel and one decision per segment found: rewritten, or
kept with the reason.
"""
from __future__ import annotations

import bisect
from dataclasses import dataclass, replace

from ..dsl import tir
from ..dsl.printer import fmt
from .argext import contiguous

# what joins a refusal's subject to its reason ("accumulator `val` (line 4) kept: <why>"), which
# schedule.rewrites reads to tell refusals from rewrites
KEPT = " kept: "


@dataclass(frozen=True)
class _Segment:
    """``block[start]`` is ``v = e0``, ``block[end]`` the store ``T[idx] = f(v)``."""

    scalar: str
    start: int
    end: int
    updates: tuple  # the update stores, by identity
    loops: tuple  # the positions of the loops holding them
    op: str  # "+" (sums and differences), "max" or "min"; "" where the updates mix them


def rewrite(typed: tir.TypedKernel) -> tuple:
    """``(typed kernel, decisions)`` with every accumulator of the module doc moved into its cell."""
    finder = _Finder(typed)
    finder.block(typed.body, ())
    typed, decisions = finder.apply() if finder.found else (typed, ())
    typed, copied = _copies(typed)
    return typed, tuple(finder.refused) + decisions + copied


class _Finder:
    """The segments of a kernel (:meth:`block`), then the kernel with those that qualify rewritten
    (:meth:`apply`)."""

    def __init__(self, typed: tir.TypedKernel):
        self.typed = typed
        self.found = []  # (block, enclosing loop variables, _Segment)
        self.refused = []  # decisions on accumulators that are no segment
        self.indexes = {}  # id(block) -> its index (see index())

    def block(self, body: list, around: tuple) -> None:
        for n, s in enumerate(body):
            if isinstance(s, tir.Loop):
                self.block(s.body, around + (s.var,))
            elif isinstance(s, tir.If):
                self.block(s.body, around)
                self.block(s.orelse, around)
            elif isinstance(s, tir.Store) and not s.indices and self._scalar(s.tensor):
                if not _reads(s.value, s.tensor):
                    seg = self.segment(body, n)
                    if seg is not None:
                        self.found.append((body, around, seg))

    def _scalar(self, name: str) -> bool:
        t = self.typed.tensors.get(name)
        return t is not None and t.kind == "scalar"

    def index(self, body: list) -> dict:
        """For the block ``body``: each tensor -> the positions of the statements touching it."""
        found = self.indexes.get(id(body))
        if found is None:
            found = {}
            for n, s in enumerate(body):
                for name in _touched([s]):
                    found.setdefault(name, []).append(n)
            self.indexes[id(body)] = found
        return found

    def segment(self, body: list, start: int):
        v = body[start].tensor
        updates, loops, ops = [], [], set()
        positions = self.index(body)[v]
        for end in positions[bisect.bisect_right(positions, start):]:
            s = body[end]
            if isinstance(s, tir.Store) and s.indices and _reads(s.value, v):
                if not updates:
                    return None
                return _Segment(v, start, end, tuple(updates), tuple(loops), ops.pop() if len(ops) == 1 else "")
            if not isinstance(s, tir.Loop) or s.form is not None:
                return None
            mine = _updates(s, v)
            if mine is None:
                self.stored_inside(s, body[start])
                return None
            updates += [u for u, _ in mine]
            loops.append(end)
            ops |= {op for _, op in mine}
        return None

    def stored_inside(self, loop: tir.Loop, init: tir.Store) -> None:
        """A decision for an accumulator stored into a tensor inside the loop that updates it (a
        running sum, ``out[i, k] = val``): the stored cell moves with the loop."""
        v = init.tensor
        stmts = list(tir.walk_stmts([loop]))
        if not any(isinstance(s, tir.Store) and s.tensor == v and _update_op(s, v) for s in stmts):
            return
        for s in stmts:
            if isinstance(s, tir.Store) and s.indices and _reads(s.value, v):
                t = self.typed.tensors[s.tensor]
                self.refused.append(f"accumulator `{_name(self.typed.tensors[v])}`{_line(init)}{KEPT}it is stored "
                                    f"into `{_name(t)}` inside the loop that updates it{_line(s)}")
                return

    def apply(self) -> tuple:
        typed = self.typed
        own = {}  # scalar -> its segments' updates and stores
        for body, _, seg in self.found:
            own.setdefault(seg.scalar, set()).update(id(s) for s in (*seg.updates, body[seg.end]))
        elsewhere = {}  # scalar -> the first statement reading it outside its own segments
        for s in tir.walk_stmts(typed.body):
            for e in _exprs(s):
                for sub in tir.walk_expr(e):
                    if isinstance(sub, tir.Load) and not sub.indices and id(s) not in own.get(sub.tensor, ()):
                        elsewhere.setdefault(sub.tensor, s)
        replacements = {}  # id(statement) -> its replacement list
        decisions = []
        gone = set()
        for body, around, seg in self.found:
            v = typed.tensors[seg.scalar]
            store = body[seg.end]
            t = typed.tensors[store.tensor]
            why = self.refusal(body, around, seg, elsewhere.get(seg.scalar))
            if why is None and id(store) in replacements:
                why = f"its store{_line(store)} also ends another accumulator's"
            if why is not None:
                decisions.append(f"accumulator `{_name(v)}`{_line(body[seg.start])}{KEPT}{why}")
                continue
            cell = tir.Load(t.dtype, store.tensor, list(store.indices), span=store.span)
            init = body[seg.start]
            replacements[id(init)] = [tir.Store(store.tensor, list(store.indices), init.value, span=store.span)]
            for u in seg.updates:
                replacements[id(u)] = [replace(_read_as(u, seg.scalar, cell), tensor=store.tensor,
                                               indices=list(store.indices))]
            final = store.value
            replacements[id(store)] = ([] if isinstance(final, tir.Load) and final.tensor == seg.scalar
                                       else [replace(store, value=_read_as(final, seg.scalar, cell))])
            what = {"+": "the sum", "max": "the maximum", "min": "the minimum"}.get(seg.op, "the reduction")
            decisions.append(f"accumulator `{_name(v)}`{_line(init)} replaced by `{self.cell_text(store)}`"
                             f"{_line(store)}: {what} accumulates in the stored tensor")
            gone.add(seg.scalar)
        if not replacements:
            return typed, tuple(decisions)
        body = _replaced(typed.body, replacements)
        left = _touched(body)
        tensors = {n: t for n, t in typed.tensors.items() if n not in gone or n in left}
        return replace(typed, body=body, tensors=tensors), tuple(decisions)

    def refusal(self, body: list, around: tuple, seg: _Segment, read_elsewhere):
        """Why the segment may not be rewritten (``read_elsewhere``: a statement reading its scalar
        outside every segment, or None), or None."""
        typed = self.typed
        v = typed.tensors[seg.scalar]
        store = body[seg.end]
        t = typed.tensors[store.tensor]
        target = f"`{_name(t)}`"
        if v.dtype != t.dtype:
            return f"its dtype {v.dtype} differs from {target}'s {t.dtype}"
        if t.kind not in ("input", "output", "temp"):
            return f"{target} is no tensor of the kernel's"
        if read_elsewhere is not None:
            return f"`{_name(v)}` is read elsewhere too{_line(read_elsewhere)}"
        if not seg.op:
            return "its updates mix sums with maxima or minima"
        if _reads(store.value, store.tensor):
            return f"its store reads {target} too"
        for i in store.indices:
            for sub in tir.walk_expr(i):
                if isinstance(sub, tir.Load):
                    return f"the subscripts of {target} read `{_name(typed.tensors.get(sub.tensor))}`"
                if isinstance(sub, tir.Var) and sub.name not in around:
                    return f"the subscripts of {target} depend on `{typed.var_names.get(sub.name, sub.name)}`"
        for n in self.index(body)[store.tensor]:
            if seg.start < n < seg.end:
                s = body[n]
                where = "the loop" if n in seg.loops else f"a statement before the store{_line(s)}"
                return f"{where} {'writes' if _writes(s, store.tensor) else 'reads'} {target}"
        row = _row_reduction([body[n] for n in seg.loops], seg, store)
        if row is not None:
            what = {"+": "sum", "max": "running maximum", "min": "running minimum"}[seg.op]
            return (f"a {what} along a row{_line(row)}, each row read for this cell alone: it stays in a "
                    "scalar, which the loop's vector code keeps in registers")
        return None

    def cell_text(self, store: tir.Store) -> str:
        names = self.typed.var_names

        def by(n):
            return replace(n, name=names[n.name]) if isinstance(n, tir.Var) and n.name in names else None

        idx = [fmt(tir.rewrite(i, by)) for i in store.indices]
        return f"{_name(self.typed.tensors[store.tensor])}[{', '.join(idx)}]"


def _row_reduction(loops: list, seg: _Segment, cell: tir.Store):
    """The loop of a segment whose reduction is one update reading along a contiguous row, each
    row read for one cell, ``s += x[i, j]`` or ``m = max(m, x[i, j])`` in ``for j`` stored in
    ``y[i]``, or None.  Such a loop gains nothing from the cell (no register block: no value is
    read for two cells; the loop is already the unit-stride innermost one), and a running maximum
    or minimum in a scalar is run in vector chunks (:mod:`hyb.schedule.argext`).  A row read for
    several cells (``a[i, k] * w[o, k]`` stored in ``out[i, o]``) is a contraction's, which
    register blocks serve; a column (``x[i, j]`` in ``for i``) is better walked with ``j``
    innermost, which the cell's form allows."""
    if len(loops) != 1 or len(seg.updates) != 1:
        return None
    loop = loops[0]
    if loop.step != 1 or loop.body != [seg.updates[0]]:
        return None
    e = seg.updates[0].value
    operand = [a for a in (e.args if isinstance(e, tir.Intrinsic) else (e.a, e.b)) if not _is_scalar(a, seg.scalar)]
    if len(operand) != 1 or not contiguous(operand[0], loop.var):
        return None
    rows = [n for n in tir.walk_expr(operand[0]) if isinstance(n, tir.Load) and tir.reads_var(n, loop.var)]
    cell_vars = {n.name for i in cell.indices for n in tir.walk_expr(i) if isinstance(n, tir.Var)}
    if not rows or any(not all(tir.reads_var(row, v) for v in cell_vars) for row in rows):
        return None
    return loop


def _name(t) -> str:
    return "?" if t is None else (t.source_name or t.name)


def _line(s) -> str:
    span = getattr(s, "span", None)
    return f" (line {span.line})" if span is not None else ""


def _exprs(s) -> list:
    """The expressions directly in the statement ``s`` (not in the statements inside it)."""
    if isinstance(s, tir.Loop):
        return [s.start, s.stop]
    if isinstance(s, tir.Store):
        return [*s.indices, s.value]
    if isinstance(s, (tir.If, tir.Assert)):
        return [s.cond]
    if isinstance(s, tir.Print):
        return [x for x in s.items if isinstance(x, tir.TExpr)]
    return []


def _reads(e, name: str) -> bool:
    return any(isinstance(n, tir.Load) and n.tensor == name for n in tir.walk_expr(e))


def _writes(s, name: str) -> bool:
    return any(isinstance(x, tir.Store) and x.tensor == name for x in tir.walk_stmts([s]))


def _update_op(st: tir.Store, v: str):
    """The reduction of an update ``v = v + e`` (and the other forms of the module doc), or None."""
    e = st.value
    if isinstance(e, tir.Bin) and e.op in ("+", "-"):
        a, b = e.a, e.b
        own = _is_scalar(a, v) and not _reads(b, v)
        if e.op == "+" and not own:
            own = _is_scalar(b, v) and not _reads(a, v)
        return "+" if own else None
    if isinstance(e, tir.Intrinsic) and e.name in ("max", "min") and len(e.args) == 2:
        a, b = e.args
        if (_is_scalar(a, v) and not _reads(b, v)) or (_is_scalar(b, v) and not _reads(a, v)):
            return e.name
    return None


def _is_scalar(e, v: str) -> bool:
    return isinstance(e, tir.Load) and e.tensor == v and not e.indices


def _updates(loop: tir.Loop, v: str):
    """``[(store, op)]`` of the updates of ``v`` in ``loop``, or None where it touches ``v``
    otherwise (a read in a bound, a condition or another statement; a store of another form)."""
    out = []
    for s in tir.walk_stmts([loop]):
        if isinstance(s, tir.Store) and s.tensor == v:
            op = _update_op(s, v) if not s.indices else None
            if op is None or any(_reads(i, v) for i in s.indices):
                return None
            out.append((s, op))
        elif any(_reads(e, v) for e in _exprs(s)):
            return None
    return out


def _read_as(node, v: str, cell: tir.Load):
    return tir.rewrite(node, lambda n: cell if _is_scalar(n, v) else None)


def _replaced(body: list, replacements: dict) -> list:
    """``body`` with each statement in ``replacements`` (by identity) replaced by its list."""
    return tir.rewrite_stmts(body, lambda s, around: replacements.get(id(s)))


def _touched(body: list) -> set:
    """Every tensor a statement of ``body`` reads or writes."""
    out = set()
    for s in tir.walk_stmts(body):
        if isinstance(s, tir.Store):
            out.add(s.tensor)
        elif isinstance(s, tir.Print):
            out.add(s.stdout)
        for e in _exprs(s):
            out |= {n.tensor for n in tir.walk_expr(e) if isinstance(n, tir.Load)}
    return out


# ------------------------------------------------------------------ a temporary copied out
def _copies(typed: tir.TypedKernel) -> tuple:
    decisions = []
    n = 0
    while n < len(typed.body):
        s = typed.body[n]
        found = _copy_nest(typed, s)
        if found is None:
            n += 1
            continue
        src, dst = found
        ts, td = typed.tensors[src], typed.tensors[dst]
        why = _copy_refusal(typed, n, src, dst)
        if why is not None:
            decisions.append(f"temporary `{_name(ts)}`{KEPT}{why}")
            n += 1
            continue

        def by(node, src=src, dst=dst):
            if isinstance(node, (tir.Load, tir.Store)) and node.tensor == src:
                return replace(tir.rewrite_children(node, by), tensor=dst)
            return None

        body = [tir.rewrite(x, by) for x in typed.body[:n]] + list(typed.body[n + 1:])
        tensors = {k: t for k, t in typed.tensors.items() if k != src}
        typed = replace(typed, body=body, tensors=tensors)
        decisions.append(f"temporary `{_name(ts)}` computed in `{_name(td)}` directly: its copy{_line(_bottom(s))} "
                         "is gone")
    return typed, tuple(decisions)


def _bottom(s):
    while isinstance(s, tir.Loop) and len(s.body) == 1:
        s = s.body[0]
    return s


def _copy_nest(typed: tir.TypedKernel, s):
    """``(temporary, output)`` of a top-level perfect nest ``y[v...] = t[v...]`` over all of a
    temporary ``t`` (loops of step 1 from 0 to its extents), or None."""
    nest = []
    while isinstance(s, tir.Loop) and len(s.body) == 1:
        nest.append(s)
        s = s.body[0]
    if not nest or not isinstance(s, tir.Store) or not isinstance(s.value, tir.Load):
        return None
    src = typed.tensors.get(s.value.tensor)
    if src is None or src.kind != "temp" or len(src.shape) != len(nest):
        return None
    vars_ = [lp.var for lp in nest]
    for ix in (s.indices, s.value.indices):
        if [i.name if isinstance(i, tir.Var) else None for i in ix] != vars_:
            return None
    for lp, ext in zip(nest, src.shape):
        if lp.step != 1 or not (isinstance(lp.start, tir.Const) and lp.start.value == 0) or lp.stop != tir.dim(ext):
            return None
    return src.name, s.tensor


def _copy_refusal(typed: tir.TypedKernel, n: int, src: str, dst: str):
    ts, td = typed.tensors[src], typed.tensors[dst]
    if td.kind != "output" or dst in typed.inputs:
        return f"`{_name(td)}` is no output the kernel makes (it does not start at zero)"
    if ts.private_to:
        return "it is allocated inside loops (zeroed in each iteration)"
    if ts.dtype != td.dtype:
        return f"its dtype {ts.dtype} differs from `{_name(td)}`'s {td.dtype}"
    if tuple(ts.shape) != tuple(td.shape):
        return f"its shape differs from `{_name(td)}`'s"
    if src in typed.outputs:
        return "the kernel returns it"
    if dst in _touched(typed.body[:n]):
        return f"`{_name(td)}` is used before the copy"
    if src in _touched(typed.body[n + 1:]):
        return "it is read after the copy"
    return None
