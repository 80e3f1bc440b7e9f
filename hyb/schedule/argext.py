"""Running extrema with their index, as one vector pass or as passes LLVM vectorises.

A user finds the index of a row's maximum with a branch::

    best = x[i, 0]
    k = 0
    for j in range(1, d):
        if x[i, j] > best:
            best = x[i, j]
            k = j

Each iteration's branch depends on the one before, so the loop runs one element at a time.
Where the kernel's sums may be reassociated (the CPU's default), this stage rewrites such a loop
on the typed kernel, before extraction.

Where every load of ``e`` moves along its last axis with ``j`` or not at all, the loop is kept as
written and given the form
:class:`Extremum` (``tir.Loop.form``): extraction makes it one opaque statement and the LLVM back
end runs it as one pass on vector lanes (:mod:`hyb.codegen.llvm_extremum`).  Any other such loop
becomes passes with no branch between iterations (a loop that keeps the first index meeting a
condition, ``if k == -1 and x[i, j] > t: k = j``, gets the form :class:`FirstIndex` instead, a
vector search that stops at the first hit)::

    m = best
    for j in range(1, d):            # a running maximum: a vector reduction
        m = max(m, x[i, j])
    if m == m:                       # no NaN met
        if m > best:                 # some element beat the initial value
            kk = d
            for j in range(1, d):    # the first index holding it: a vector min of indices
                kk = min(kk, j if x[i, j] == m else d)
            best = x[i, kk]
            k = kk
    else:                            # a NaN: the loop as written (a NaN never wins a comparison)
        for j in range(1, d): ...

The result is the written loop's bit for bit: the maximum of the values is the same in any
order (of two equal zeros the index pass takes the first, as the branch does, and ``best`` is
read back from that element); ``>=`` takes the last index (a max of indices, any element equal
to the initial value counting), ``<`` and ``<=`` the first and last index of the minimum.

The loop is rewritten only when all of this holds:

* its step is 1 and its body is one ``if`` with no ``else``, comparing a scalar ``best`` with an
  expression ``e`` (either side) by ``>``, ``<``, ``>=`` or ``<=``;
* the ``if`` body is two stores: ``best = e`` (the same expression, of ``best``'s dtype) and
  ``k = j`` (another scalar; ``j`` the loop variable, cast to ``k``'s dtype or not); or the
  first alone, a running extremum by ``if`` (``if x[i, j] > m: m = x[i, j]``), which gets the same
  passes without ``k``: ``best`` is still read back from the element the index pass finds, which
  keeps the first of two equal zeros as the branch does (``max()`` would take +0.0, and would
  let a NaN through);
* ``e`` is recomputed bit for bit in each pass: a load, or one ``+``, ``-``, ``*`` of loads and
  numbers, reading neither ``best`` nor ``k`` (a math function's vector and scalar versions
  may differ by an ulp);
* ``best`` is a float32, float64 or integer scalar (integers skip the NaN test), ``k`` a signed
  integer one.

A loop that is only a running extremum, ``m = max(m, e)`` (a softmax's row maximum), needs no
index pass; it gets the chunking of the passes alone (see ``_Rewriter.over``): LLVM vectorises
it, but leaves the iterations past its last whole chunk of 64 to a scalar loop (a row of 1023).

``rewrite(typed)`` returns the new typed kernel and one decision per loop rewritten.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from ..dsl import tir, types
from ..dsl.desugar import Names

# the bytes of one vector of a lane pass (an AVX-512 register; LLVM splits it on narrower machines)
VECTOR_BYTES = 64
# the iterations LLVM's vectoriser takes at a time in the passes (16 float32 lanes of AVX-512,
# interleaved 4 times; a multiple of narrower machines' and of float64's)
CHUNK = 64
FLIP = {">": "<", "<": ">", ">=": "<=", "<=": ">="}
_ARITH = ("+", "-", "*")


def rewrite(typed: tir.TypedKernel) -> tuple:
    """``(typed kernel, decisions)``: every running extremum with its index rewritten (see the
    module doc); the kernel itself where there is none."""
    r = _Rewriter(typed)
    body = tir.rewrite_stmts(typed.body, r.loop)
    if not r.decisions:
        return typed, ()
    return replace(typed, body=body, tensors=r.tensors), tuple(r.decisions)


class _Rewriter:
    def __init__(self, typed: tir.TypedKernel):
        self.tensors = dict(typed.tensors)
        self.names = Names(set(typed.tensors) | tir.loop_vars(typed.body))
        self.loops = []  # the loop variables around the statement being rewritten
        self.decisions = []

    def fresh(self, base: str) -> str:
        return self.names.fresh(base)

    def scalar(self, base: str, dtype: str, span) -> str:
        name = self.fresh(base)
        self.tensors[name] = tir.Tensor(name, (), dtype, "scalar", span, name, private_to=tuple(self.loops))
        return name

    def loop(self, s, around: tuple):
        """The statements that replace ``s`` where it is a loop this stage rewrites, or None
        (``around``: the variables of the loops around it)."""
        if not isinstance(s, tir.Loop):
            return None
        self.loops = list(around)
        first = _match_first(s, self.tensors)
        if first is not None:
            name = self.tensors[first.k].source_name or first.k
            self.decisions.append(f"first index `{name}` meeting a condition{_line(s.span)}: one vector "
                                  "pass that stops at the first vector holding it")
            return [replace(s, form=first)]
        found = _match(s, self.tensors)
        if found is not None:
            return self.passes(s, *found)
        running = _running(s, self.tensors)
        if running is not None and _chunked(s):
            out = self.over(s, "r", lambda var, st=running, v=s.var: _substitute(
                st, v, tir.Var("int", var, span=st.span)))
            name = self.tensors[running.tensor].source_name or running.tensor
            self.decisions.append(f"running {running.value.name} of `{name}`{_line(s.span)}: whole "
                                  f"chunks of {CHUNK}, then the last {CHUNK} iterations again (no scalar "
                                  "remainder)")
            return out
        return None

    def over(self, loop: tir.Loop, suffix: str, step) -> list:
        """Loops running ``step(var)`` over the iterations of ``loop``.  Both passes are idempotent
        (a max, a min of indices), so a trip count known now that is no multiple of ``CHUNK`` runs
        as its whole chunks and then the last ``CHUNK`` iterations again, overlapping: every
        iteration on vectors, none in a scalar remainder (a row of 511 took 2.7 times as long as
        one of 512 with one)."""
        lo, hi = loop.start, loop.stop
        spans = [(lo, hi)]
        if _chunked(loop):
            n = hi.value - lo.value
            whole = lo.value + n // CHUNK * CHUNK
            spans = [(lo, tir.Const(hi.dtype, whole, span=hi.span)),
                     (tir.Const(lo.dtype, hi.value - CHUNK, span=lo.span), hi)]
        out = []
        for a, b in spans:
            var = self.fresh(f"{loop.var}_{suffix}")
            out.append(replace(loop, var=var, start=a, stop=b, step=1, body=[step(var)]))
        return out

    def passes(self, loop: tir.Loop, op: str, best: str, e: tir.TExpr, k: str, k_value: tir.TExpr) -> list:
        """The written loop as one lane pass (where the elements are contiguous along the loop),
        or as the two passes of the module doc."""
        span = loop.span
        name = self.tensors[best].source_name or best
        k_name = None if k is None else self.tensors[k].source_name or k
        with_index = "" if k is None else f" with its {'first' if op in ('>', '<') else 'last'} index `{k_name}`"
        if contiguous(e, loop.var) and not short_loop(loop, self.tensors[best].dtype):
            cond = loop.body[0].cond
            form = Extremum(op, best, e_left=not (isinstance(cond.a, tir.Load) and cond.a.tensor == best))
            which = "maximum" if op in (">", ">=") else "minimum"
            order = "first" if op in (">", "<") else "last"
            self.decisions.append(
                f"running {which} of `{name}`{with_index}{_line(span)}: one vector pass, "
                f"each lane keeping its own {which} and {order} index")
            return [replace(loop, form=form)]
        dt = self.tensors[best].dtype
        maximum = op in (">", ">=")
        first = op in (">", "<")
        m = self.scalar(f"{best}_{'max' if maximum else 'min'}", dt, span)
        # the index pass's lanes as narrow as the loop's bounds allow (int32 lanes: twice as many)
        it = "int32" if fits_int32(loop.start) and fits_int32(loop.stop) else "int64"
        kk = self.scalar(f"{k or best}_at", it, span)

        def load(name):
            return tir.Load(self.tensors[name].dtype, name, [], span=span)

        def at(var):  # e and the stored index with the loop variable renamed
            return _substitute(e, loop.var, tir.Var("int", var, span=span))

        start = tir.Cast(it, loop.start, span=span)
        # the first index: a min of indices, `stop` where the element is not the extremum; the last:
        # a max of indices, `start - 1` where it is not
        none = tir.Cast(it, loop.stop, span=span) if first else tir.Bin(it, "-", start, tir.Const(it, 1), span=span)

        def index_step(jk):
            hit = tir.Cmp("bool", "==", at(jk), load(m), span=span)
            index = tir.Select(it, hit, tir.Cast(it, tir.Var("int", jk, span=span), span=span), none, span=span)
            return tir.Store(kk, [], tir.Intrinsic(it, "min" if first else "max", [load(kk), index], span=span),
                             span=span)

        found = tir.Load(it, kk, [], span=span)
        at_found = tir.Cast("int", found, span=span)  # the loop variable's type, for `j - 1` and the like
        # (the extremum alone: still read back from the element the index pass finds, which keeps
        # the sign of the first of equal zeros, as the branch does)
        write_back = [tir.Store(best, [], _substitute(e, loop.var, at_found), span=span)] + (
            [] if k is None else [tir.Store(k, [], _substitute(k_value, loop.var, at_found), span=span)])
        index_pass = [tir.Store(kk, [], none, span=span)] + self.over(loop, "k", index_step)
        floats = types.concrete(dt) in ("float32", "float64")
        if first:  # an element strictly beyond the initial value (never so where that is NaN)
            taken = tir.Cmp("bool", ">" if maximum else "<", load(m), load(best), span=span)
        else:  # any element equal to the extremum, the initial value's equals included
            taken = tir.Cmp("bool", ">=", found, start, span=span)
            if floats:  # a NaN initial value: no comparison takes anything
                taken = tir.Logic("bool", "and", taken, tir.Cmp("bool", "==", load(best), load(best), span=span),
                                  span=span)
        # floats: NaN elements left out, as no comparison takes them (fmax, fmin: LLVM's maxnum, minnum)
        reduce = ("f" if floats else "") + ("max" if maximum else "min")
        extremum = [tir.Store(m, [], load(best), span=span)] + self.over(
            loop, "m", lambda jm: tir.Store(m, [], tir.Intrinsic(dt, reduce, [load(m), at(jm)], span=span), span=span))
        # every pass a loop of its own at this level, so that the polyhedral stages see each one;
        # only the write-back is conditional
        # (the test in a flag of its own: an `if` whose body writes what its condition reads is
        # one opaque statement to the polyhedral stages, whose scalars then tie the rows together)
        flag = self.scalar(f"{best}_taken", "bool", span)
        out = extremum + index_pass + [tir.Store(flag, [], taken, span=span),
                                       tir.If(load(flag), write_back, [], span=span)]
        self.decisions.append(
            f"running {'maximum' if maximum else 'minimum'} of `{name}`{with_index}{_line(span)}: a vector "
            f"{'max' if maximum else 'min'} pass, then a vector pass for the index")
        return out


@dataclass(frozen=True)
class Extremum:
    """The form of a loop ``for j: if e op best: best = e; k = j`` whose extremum and index are
    found in one vector pass (``tir.Loop.form``; the loop's body is kept as written).  ``op`` is
    ``>`` or ``>=`` (a maximum) or ``<`` or ``<=`` (a minimum) with ``e`` on its left; ``e_left``
    says where the written condition has ``e``.  Every load in ``e`` reads either nothing that
    depends on ``j`` or, along its last axis, ``j`` plus something that does not (contiguous
    lanes).

    The code generator runs the loop's comparison in every vector lane on the elements the lane
    meets, in order, each element met once: a lane keeps the extremum and the index where the
    comparison last took an element (a sentinel where it never did).  The lanes' extremum ``M``,
    and the least index among lanes holding ``M`` for a strict comparison (the loop keeps the
    first of equal values) or the greatest for ``>=`` and ``<=`` (it keeps the last), give the
    loop's result; ``best`` and ``k`` are then written by the loop's own ``if`` body with ``j`` at
    that index, and no lane taking anything leaves them as they were.  NaN elements never win a
    comparison, as in the loop as written, and a NaN ``best`` takes nothing."""

    op: str
    best: str
    e_left: bool


@dataclass(frozen=True)
class FirstIndex:
    """The form of a loop that keeps the first index meeting a condition::

        for j in range(start, stop):
            if k == k0 and c:        (either order, either side of the ==)
                k = j

    where ``k0`` is a number outside the loop's range or the loop's ``stop`` itself (so that once
    set, ``k == k0`` fails for good), and ``c`` compares two values of the kind
    :class:`Extremum`'s ``e`` is, neither reading ``k``.  The code generator tests ``c`` a vector
    of iterations at a time and stops at the first vector where it holds; ``k`` is then the
    least such iteration, as the loop as written leaves it (``k`` not equal to ``k0`` at the
    start: the loop changes nothing).  ``test_left``: the ``k == k0`` test is the ``and``'s left
    side."""

    k: str
    test_left: bool


def _match_first(loop: tir.Loop, tensors: dict):
    """The :class:`FirstIndex` form of ``loop``, or None."""
    if loop.step != 1 or len(loop.body) != 1 or not isinstance(loop.body[0], tir.If):
        return None
    branch = loop.body[0]
    cond = branch.cond
    if (branch.orelse or len(branch.body) != 1 or not isinstance(branch.body[0], tir.Store)
            or branch.body[0].indices or not isinstance(cond, tir.Logic) or cond.op != "and"):
        return None
    k = branch.body[0].tensor
    kt = tensors.get(k)
    value = branch.body[0].value
    if kt is None or kt.kind != "scalar" or types.concrete(kt.dtype) not in types.SIGNED:
        return None
    if not (tir.is_var(value, loop.var) or (isinstance(value, tir.Cast) and tir.is_var(value.a, loop.var))):
        return None
    for test_left, (test, c) in ((True, (cond.a, cond.b)), (False, (cond.b, cond.a))):
        if not (isinstance(test, tir.Cmp) and test.op == "=="):
            continue
        for mine, k0 in ((test.a, test.b), (test.b, test.a)):
            if not (_scalar_load(mine, tensors) and mine.tensor == k and _outside(k0, loop)):
                continue
            if (isinstance(c, tir.Cmp) and all(recomputable(x, {k}) for x in (c.a, c.b))
                    and contiguous(c, loop.var) and c.a.dtype == c.b.dtype
                    and types.concrete(c.a.dtype) in ("float32", "float64") + types.SIGNED + types.UNSIGNED
                    and not short_loop(loop, c.a.dtype)):
                return FirstIndex(k, test_left)
    return None


def _outside(k0, loop: tir.Loop) -> bool:
    """Whether ``k0`` is never a value of the loop's variable: a number outside its range, or its
    ``stop`` itself."""
    if k0 == loop.stop:
        return True
    lo, hi = loop.start, loop.stop
    if not (isinstance(k0, tir.Const) and isinstance(k0.value, int)):
        return isinstance(k0, tir.Cast) and k0.a == loop.stop
    return ((isinstance(lo, tir.Const) and k0.value < lo.value)
            or (isinstance(hi, tir.Const) and k0.value >= hi.value))


def lanes_for(dtype: str) -> int:
    """The lanes of a lane pass over elements of ``dtype`` (4 to 16)."""
    return max(4, min(16, VECTOR_BYTES // types.numpy_dtype(dtype).itemsize))


def short_loop(loop: tir.Loop, dtype: str) -> bool:
    """Whether the loop's trip count is known now and below a lane pass's vector (which would
    then run the loop as written every time)."""
    lo, hi = loop.start, loop.stop
    return (isinstance(lo, tir.Const) and isinstance(hi, tir.Const)
            and hi.value - lo.value < lanes_for(dtype))


def contiguous(e, var: str) -> bool:
    """Whether every load in ``e`` has subscripts that load nothing and that depend on ``var``
    only along its last axis, as ``var`` plus or minus a term free of it."""
    for n in tir.walk_expr(e):
        if not isinstance(n, tir.Load):
            continue
        if any(isinstance(x, tir.Load) for i in n.indices for x in tir.walk_expr(i)):
            return False  # (a subscript that loads: its check could fail before another's)
        dep = [tir.reads_var(i, var) for i in n.indices]
        if not any(dep):
            continue
        if any(dep[:-1]) or not _shifted(n.indices[-1], var):
            return False
    return True


def _shifted(e, var: str) -> bool:
    """Whether ``e`` is ``var``, or ``var`` plus or minus a term free of it."""
    if tir.is_var(e, var):
        return True
    if isinstance(e, tir.Bin) and e.op in ("+", "-"):
        if tir.is_var(e.a, var) and not tir.reads_var(e.b, var):
            return True
        return e.op == "+" and tir.is_var(e.b, var) and not tir.reads_var(e.a, var)
    return False


def _match(loop: tir.Loop, tensors: dict):
    """``(op, best, e, k, k's stored value)`` of a running extremum with its index (op as
    ``e op best``; ``k`` and its value None where the ``if`` stores the extremum alone), or None."""
    if loop.step != 1 or len(loop.body) != 1 or not isinstance(loop.body[0], tir.If):
        return None
    branch = loop.body[0]
    cond = branch.cond
    if branch.orelse or len(branch.body) not in (1, 2) or not isinstance(cond, tir.Cmp) or cond.op not in FLIP:
        return None
    if _scalar_load(cond.b, tensors):
        op, e, best = cond.op, cond.a, cond.b.tensor
    elif _scalar_load(cond.a, tensors):
        op, e, best = FLIP[cond.op], cond.b, cond.a.tensor
    else:
        return None
    stores = branch.body
    if not all(isinstance(s, tir.Store) and not s.indices for s in stores):
        return None
    by = {s.tensor: s.value for s in stores}
    if best not in by or len(by) != len(stores):
        return None
    dt = tensors[best].dtype
    if by[best] != e or e.dtype != dt or types.concrete(dt) not in ("float32", "float64") + types.SIGNED + types.UNSIGNED:
        return None
    if len(by) == 1:  # the extremum alone
        return (op, best, e, None, None) if recomputable(e, {best}) else None
    (k,) = [t for t in by if t != best]
    kt = tensors.get(k)
    if kt is None or kt.kind != "scalar":
        return None
    value = by[k]
    if not (tir.is_var(value, loop.var) or (isinstance(value, tir.Cast) and tir.is_var(value.a, loop.var)
                                         and types.concrete(value.dtype) in types.SIGNED)):
        return None
    if not recomputable(e, {best, k}):
        return None
    return op, best, e, k, value


def _line(span) -> str:
    return f" (line {span.line})" if span is not None else ""


def _chunked(loop: tir.Loop) -> bool:
    """Whether the loop's trip count is known now, over ``CHUNK`` and no multiple of it."""
    lo, hi = loop.start, loop.stop
    if not (isinstance(lo, tir.Const) and isinstance(hi, tir.Const) and loop.step == 1):
        return False
    n = hi.value - lo.value
    return n > CHUNK and n % CHUNK != 0


def _running(loop: tir.Loop, tensors: dict):
    """The store of a loop whose body is one running extremum of a float scalar, ``m = max(m, e)``
    (or min, either order) with ``e`` reading neither ``m`` nor anything the loop writes: the
    store, or None.  Running it again for some iterations changes nothing."""
    if loop.step != 1 or len(loop.body) != 1 or not isinstance(loop.body[0], tir.Store):
        return None
    st = loop.body[0]
    v = st.value
    if st.indices or not isinstance(v, tir.Intrinsic) or v.name not in ("max", "min") or len(v.args) != 2:
        return None
    t = tensors.get(st.tensor)
    if t is None or t.kind != "scalar" or types.concrete(t.dtype) not in ("float32", "float64"):
        return None
    mine = [isinstance(a, tir.Load) and a.tensor == st.tensor and not a.indices for a in v.args]
    if sum(mine) != 1:
        return None
    other = v.args[mine.index(False)]
    if not _index_only(other, {st.tensor}):
        return None
    return st


def fits_int32(e) -> bool:
    """A loop bound known now, an int32 with room for one more (``start - 1``, ``stop``)."""
    return isinstance(e, tir.Const) and isinstance(e.value, int) and -(2 ** 31) < e.value < 2 ** 31 - 1


def _scalar_load(e, tensors) -> bool:
    return (isinstance(e, tir.Load) and not e.indices and e.tensor in tensors
            and tensors[e.tensor].kind == "scalar")


def recomputable(e, scalars: set) -> bool:
    """A load, or one +, -, * of loads and numbers, none of them of ``scalars``."""
    def leaf(x):
        if isinstance(x, tir.Const):
            return True
        return (isinstance(x, tir.Load) and x.tensor not in scalars
                and all(_index_only(i, scalars) for i in x.indices))

    if isinstance(e, tir.Bin) and e.op in _ARITH:
        return leaf(e.a) and leaf(e.b)
    return isinstance(e, tir.Load) and leaf(e)


def _index_only(e, scalars: set) -> bool:
    """An expression that reads none of ``scalars``."""
    return not any(isinstance(n, tir.Load) and n.tensor in scalars for n in tir.walk_expr(e))


def _substitute(e, var: str, by: tir.TExpr):
    """``e`` with the loop variable ``var`` read as ``by``."""
    return tir.rewrite(e, lambda n: by if isinstance(n, tir.Var) and n.name == var else None)

