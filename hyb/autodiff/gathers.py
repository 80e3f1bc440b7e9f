"""Adjoint loop nests that gather instead of scatter.

Reversing ``y[i + o] ...`` read in a loop nest naively gives ``d_y[i + o] += ...``: a scatter,
whose cell loops carry dependences and do not parallelise.  For a nest of loops around a
single assignment, each read's adjoint is instead written as a nest over the cells it updates,
solving the subscript for a loop variable (``d_y[h] += ...(i = h - o)``):

* reads that are plain shifts of the nest's loops (``shift_of``) are merged into one nest per
  tensor, split into an unconditional interior and guarded edges (``merged_shifts``);
* other affine reads are solved one subscript at a time (``gathered``); a convolution's
  transpose reads a zero-padded copy of the output's adjoint so that it needs no bounds
  conditions (``padded_gather``), and a sliding-window reduction (a convolution's weight
  gradient) is summed into per-position partial sums so its inner loop vectorises
  (``window_partials``).

Where none of this applies, ``gather_nest`` returns None and the plain reverse loops are used.

These are helpers of emission: each takes the emission pass's private writer ``em`` (its
records ``em.nz``, ``em.act``, ``em.plan``, the adjoint names ``em.adj`` and its name
allocator ``em.fresh``) as first argument.
"""
from __future__ import annotations

from ..dsl import ast as syntax
from ..dsl.unparse import Comment
from ..dsl.unparse import expr as unparse_expr
from . import rules
from .affine import aff_add, aff_expr, aff_scale, factors, unit_step
from .rules import add, call, name, num
from .tree import attr, increment, is_read_of, rewrite, subst_expr, walk


def perfect_nest(em, s: syntax.For):
    """(loops, statement) if ``s`` is a rectangular nest of loops around one assignment."""
    loops, node = [], s
    while isinstance(node, syntax.For):
        loops.append(em.nz.loops[node.target.id])
        body = [x for x in node.body if not isinstance(x, (syntax.Pass, Comment))]
        if len(body) != 1:
            return None
        node = body[0]
    if not isinstance(node, syntax.Assign) or id(node) not in em.plan.chains:
        return None
    names = {lp.var for lp in loops}
    for lp in loops:
        if any(isinstance(x, syntax.Name) and x.id in names for x in walk(lp.lo)) \
                or any(isinstance(x, syntax.Name) and x.id in names for x in walk(lp.hi)) or lp.step != 1:
            return None
    if id(node) in em.plan.snap or id(node) in em.store_tape or any(id(lp.node) in em.plan.entry for lp in loops):
        return None
    return loops, node


def gather_nest(em, s: syntax.For):
    """The adjoint of a loop nest around one assignment as one loop nest per read, each
    looping over the cells it writes: a read ``a[i + o]`` becomes the gather
    ``d_a[h] += ...(i = h - o)`` instead of a scatter, so the cell loops carry no
    dependence.  None where the nest does not allow it."""
    found = perfect_nest(em, s)
    if found is None:
        return None
    loops, st = found
    if isinstance(st.target, syntax.Name):
        return None
    acc, pairs = em.plan.chains[id(st)]
    if not acc and not writes_each_cell_once(em, st, loops):
        return None  # later iterations overwrite the cell: only the last one's adjoint is nonzero
    target_adj = em.adj[st.target.value.id]
    for read, _ in pairs:
        if isinstance(read, syntax.Subscript) and em.adj.get(read.value.id) == target_adj:
            return None  # the statement feeds its own target's adjoint
    _, pairs = em.chain(st, em.incoming(st))
    out, plain = [], []
    nest_vars = [lp.var for lp in loops]
    shifts: dict = {}  # (tensor, loop of each subscript) -> [(offsets, inc)]
    for read, coef in pairs:
        if isinstance(read, syntax.Subscript) and read.value.id not in em.act.active_t:
            continue
        inc = syntax.AugAssign(None, em.adjoint_of(read), "+", em.F(coef))
        if not isinstance(read, syntax.Subscript):
            plain.append(increment(inc.target, inc.value))  # a scalar's adjoint: stays in the nest
            continue
        shift = shift_of(em, read, nest_vars)
        if shift is not None:
            shifts.setdefault((read.value.id, shift[0]), []).append((shift[1], inc))
            continue
        nest = gathered(em, loops, read, inc, st.target)
        if nest is None:
            plain.append(increment(inc.target, inc.value))
        else:
            out.extend(nest)
    for (t, order), group in shifts.items():
        if all(not any(off) for off, _ in group):
            plain.extend(increment(inc.target, inc.value) for _, inc in group)  # no scatter
        else:
            out.extend(merged_shifts(em, loops, order, group))
    if not out:
        return None  # nothing to gather: the plain reverse loops do
    if plain:
        out.insert(0, plain_nest(em, loops, plain))
    if not acc and em.clears(st):
        out.append(plain_nest(em, loops, [syntax.Assign(None, em.adjoint_of(st.target), num(0.0))]))
    return out


def writes_each_cell_once(em, st, loops) -> bool:
    """Whether each iteration of ``loops`` stores ``st`` into a cell of its own."""
    return all(any(unit_step(em.affine(i), lp.var) for i in st.target.indices) for lp in loops)


def plain_nest(em, loops, body):
    return _nest(spans(em, loops), body)[0]


def spans(em, loops) -> list:
    """(variable, start, stop) of each loop, for :func:`_nest`."""
    return [(lp.var, em.F(lp.lo), em.F(lp.hi)) for lp in loops]


def shift_of(em, read, nest_vars):
    """(loop of each subscript, offset of each) if every subscript of ``read`` is `v + c` for a
    different loop ``v`` of the nest and every loop is used; else None."""
    order, offs = [], []
    for i in read.indices:
        a = em.affine(i)
        vs = [k for k in (a or {}) if k is not None]
        if a is None or len(vs) != 1 or vs[0] not in nest_vars or a[vs[0]] != 1 or vs[0] in order:
            return None
        order.append(vs[0])
        offs.append(a.get(None, 0))
    if sorted(order) != sorted(nest_vars):
        return None
    return tuple(order), tuple(offs)


def merged_shifts(em, loops, order, group) -> list:
    """Loop nests over the cells of ``d_y`` that shifted reads ``y[i + o]`` write: each read
    becomes ``d_y[h] += c(i = h - o)`` where ``h - o`` is an iteration.  Each dimension is split
    into the cells every read writes (no conditions: the interior, where the loop vectorises)
    and the edges on either side (conditions kept); more than three dimensions stay in one
    nest with conditions."""
    by_var = {lp.var: lp for lp in loops}
    cells = [em.fresh("h") for _ in order]
    stmts = []
    for offs, inc in group:
        values = {v: rules.sub(name(h), num(o)) for v, h, o in zip(order, cells, offs)}
        conds = [syntax.Compare(None, ["<=", "<"], [em.F(by_var[v].lo), values[v], em.F(by_var[v].hi)])
                 for v in order]
        stmt = increment(syntax.Subscript(None, inc.target.value, [name(h) for h in cells]),
                          subst_expr(inc.value, values))
        stmts.append((conds, stmt))

    def bound(k, side):
        v = order[k]
        base = em.F(by_var[v].lo if side in ("lo_min", "lo_max") else by_var[v].hi)
        items = {}
        for offs, _ in group:
            e = add(base, num(offs[k]))
            items[unparse_expr(e)] = e
        es = [e for _, e in sorted(items.items())]
        if len(es) == 1:
            return es[0]
        return call("min" if side in ("lo_min", "hi_min") else "max", *es)

    segments = []
    for k in range(len(order)):
        u_lo, u_hi, i_lo, i_hi = bound(k, "lo_min"), bound(k, "hi_max"), bound(k, "lo_max"), bound(k, "hi_min")
        if len(order) > 3:
            segments.append([(u_lo, u_hi, False)])
        else:
            # Disjoint and covering even where the interior is empty (tiny extents).
            a = call("max", u_lo, call("min", i_lo, u_hi))
            b = call("max", a, call("min", i_hi, u_hi))
            segments.append([(u_lo, a, False), (a, b, True), (b, u_hi, False)])
    out = []

    def product(k, chosen):
        if k == len(order):
            interior = all(c[2] for c in chosen)
            body = [stmt if interior else syntax.If(None, conds[0] if len(conds) == 1 else
                                               syntax.BoolOp(None, "and", conds), [stmt], [])
                    for conds, stmt in stmts]
            out.append(_nest([(h, lo, hi) for h, (lo, hi, _) in zip(cells, chosen)], body)[0])
            return
        for seg in segments[k]:
            product(k + 1, chosen + [seg])

    product(0, [])
    return out


def gathered(em, loops, read, inc, target):
    """The nest of ``inc`` (``d_y[f(i)] += c(i)``) reordered to loop over the cells it writes."""
    by_var = {lp.var: lp for lp in loops}
    target_vars = {x.id for i in target.indices for x in walk(i) if isinstance(x, syntax.Name)}
    cells, subst_map, guards, eliminated = [], {}, [], set()
    new_index = []
    for idx in read.indices:
        aff = em.affine(idx)
        vs = [k for k in (aff or {}) if isinstance(k, str)]
        if aff is None or not vs or any(k not in by_var for k in vs) \
                or any(aff[k] != 1 for k in vs) or any(isinstance(k, tuple) for k in aff):
            return None
        free = [v for v in vs if v not in eliminated]
        if not free:
            return None
        # Solve for a loop that indexes the statement's own target (p in x[p + r] of a
        # convolution writing out[.., p, ..]): the loops left inside are the short ones.
        own = [v for v in free if v in target_vars]
        v = (own or free)[-1]
        eliminated.add(v)
        c = aff.get(None, 0)
        h = v if (c == 0 and len(vs) == 1) else em.fresh("h")
        lo, hi = {None: c}, {None: c + 1 - len(vs)}
        for k in vs:
            lo_k, hi_k = em.affine(by_var[k].lo), em.affine(by_var[k].hi)
            if lo_k is None or hi_k is None:
                return None
            lo, hi = aff_add(lo, lo_k, 1), aff_add(hi, hi_k, 1)
        cells.append((h, em.F(aff_expr(lo)), em.F(aff_expr(hi))))
        rest = [k for k in vs if k != v]
        value = rules.sub(name(h), num(c))
        for k in rest:
            value = rules.sub(value, name(k))
        subst_map[v] = value
        if rest:  # v = h - c - (other loops): keep it inside v's own range
            guards.append((value, by_var[v], [by_var[k] for k in rest]))
        new_index.append(name(h))
    inner = [lp for lp in loops if lp.var not in eliminated]
    if guards:
        padded = padded_gather(em, inc, target, guards, cells, subst_map, new_index, inner)
        if padded is not None:
            return padded
    body_inc = increment(syntax.Subscript(None, inc.target.value, new_index), subst_expr(inc.value, subst_map))
    if not guards and inner:
        split = window_partials(em, inc, body_inc, cells, new_index, inner, target_vars)
        if split is not None:
            return split
    body = [body_inc]
    if guards:
        conds = [syntax.Compare(None, ["<=", "<"], [em.F(lp.lo), val, em.F(lp.hi)]) for val, lp, _ in guards]
        cond = conds[0] if len(conds) == 1 else syntax.BoolOp(None, "and", conds)
        body = [syntax.If(None, cond, body, [])]
    if guards:
        # A convolution's transpose: the last cell loop innermost (unit stride on the gradient
        # written), the reduction loops just outside it and kept there (`serial`: the guards
        # would otherwise let the scheduler move them inside).
        body = _nest(spans(em, inner), _nest(cells[-1:], body), "serial")
        cells = cells[:-1]
    else:
        body = _nest(spans(em, inner), body)
    return _nest(cells, body)


def padded_gather(em, inc, target, guards, cells, subst_map, new_index, inner):
    """A convolution's transpose without conditions: where the solved loops (``p`` in
    ``h - r``) index only the output's adjoint ``d_out[.., p, ..]`` and it is a factor of the
    coefficient, that adjoint is copied into a zero-padded temporary wide enough for every
    ``h - r``, and the gather reads it unguarded.  None where that does not hold."""
    g = em.adj[target.value.id]
    value = inc.value
    if isinstance(value, rules.Guard) or not any(is_read_of(f, g) for f in factors(value)):
        return None
    reads = [x for x in walk(value) if is_read_of(x, g)]
    if len({unparse_expr(x) for x in reads}) != 1:
        return None
    read = reads[0]
    solved = {lp.var: (lp, rest) for _, lp, rest in guards}
    dims = {i.id: d for d, i in enumerate(read.indices) if isinstance(i, syntax.Name) and i.id in solved}
    if set(dims) != set(solved) or len(set(dims.values())) != len(dims):
        return None
    elsewhere = rewrite(value, lambda x: num(0) if is_read_of(x, g) else None)
    if any(isinstance(x, syntax.Name) and x.id in solved for x in walk(elsewhere)):
        return None
    pad = em.fresh(f"{g}_pad")
    shape, shift, copy_loops = [], {}, []
    src, dst = [], []
    for d, idx in enumerate(read.indices):
        var = next((v for v, k in dims.items() if k == d), None)
        i = em.fresh("i")
        src.append(name(i))
        if var is None:
            shape.append(syntax.Subscript(None, attr(g, "shape"), [num(d)]))
            copy_loops.append((i, num(0), shape[-1]))
            dst.append(name(i))
            continue
        lp, rest = solved[var]
        lo, hi = em.affine(lp.lo), em.affine(lp.hi)
        if lo is None or hi is None:
            return None
        reach = {None: 0}  # how far h - r reaches past v's range on either side
        for k in rest:
            lo_k, hi_k = em.affine(k.lo), em.affine(k.hi)
            if lo_k is None or hi_k is None:
                return None
            reach = aff_add(reach, aff_add(aff_add(hi_k, lo_k, -1), {None: 1}, -1), 1)
        shift[var] = em.F(aff_expr(aff_add(reach, lo, -1)))  # cell v sits at v + shift
        shape.append(_count(em.F(aff_expr(aff_add(aff_add(hi, lo, -1), aff_scale(reach, 2), 1)))))
        copy_loops.append((i, em.F(lp.lo), em.F(lp.hi)))
        dst.append(add(name(i), shift[var]))
    copy = [syntax.Assign(None, syntax.Subscript(None, name(pad), dst), syntax.Subscript(None, name(g), src))]
    zero = [syntax.Assign(None, syntax.Subscript(None, name(pad), [name(i) for i, _, _ in copy_loops]), num(0.0))]
    copy = _nest(copy_loops, copy)
    zero = _nest([(i, num(0), extent) for (i, _, _), extent in zip(copy_loops, shape)], zero)
    padded_read = syntax.Subscript(None, name(pad), [add(i, shift[i.id]) if isinstance(i, syntax.Name) and i.id in shift
                                                 else i for i in read.indices])
    value = rewrite(value, lambda x: padded_read if is_read_of(x, g) else None)
    body = _nest(cells + spans(em, inner),
                 [increment(syntax.Subscript(None, inc.target.value, new_index), subst_expr(value, subst_map))])
    decl = syntax.Assign(None, name(pad), call("allocate", syntax.Tuple(None, shape), attr(g, "dtype")))
    return [Comment(None, f"{g} with zeros around it: the gather below reads it without bounds conditions"),
            decl, zero[0], copy[0], body[0]]


def window_partials(em, inc, body_inc, cells, new_index, inner, target_vars):
    """A reduction over a sliding window (``d_w[.., s] += x[.., q + s] * g[.., q]`` summed over
    ``q``, the weight gradient of a convolution): its innermost reduction loop ``q`` walks
    memory with unit stride but runs serially.  Summed instead into partial sums with one cell
    per ``q`` (that loop vectorises, each lane its own sum), which are then added up.  None
    where the innermost reduction loop is not such a window over the forward statement's
    output positions (``q`` indexes ``out``; a short filter loop is left as it is)."""
    u = inner[-1]
    cell_names = {h for h, _, _ in cells}
    if not isinstance(body_inc, syntax.AugAssign) or u.var not in target_vars:
        return None

    def window(idx):
        a = em.affine(idx)
        return a is not None and a.get(u.var) == 1 and any(a.get(h) for h in cell_names)
    if not any(isinstance(x, syntax.Subscript) and x.indices and window(x.indices[-1]) for x in walk(body_inc.value)):
        return None
    part = em.fresh("partial")
    d = inc.target.value.id
    index = [rules.sub(name(h), lo) for h, lo, _ in cells] + [rules.sub(name(u.var), em.F(u.lo))]
    shape = [_count(rules.sub(hi, lo)) for _, lo, hi in cells] + [_count(rules.sub(em.F(u.hi), em.F(u.lo)))]
    body = _nest(cells + spans(em, inner),
                 [syntax.AugAssign(None, syntax.Subscript(None, name(part), index), "+", body_inc.value)])
    total = _nest(cells + spans(em, [u]), [increment(syntax.Subscript(None, inc.target.value, new_index),
                                                       syntax.Subscript(None, name(part), list(index)))])
    decl = syntax.Assign(None, name(part), call("allocate", syntax.Tuple(None, shape), attr(d, "dtype")))
    return [Comment(None, f"partial sums of {d}, one per `{u.var}`: the `{u.var}` loop vectorises"),
            decl, body[0], total[0]]


def _nest(ranges, body: list, kind: str = "range") -> list:
    """``body`` inside one loop per (variable, start, stop) of ``ranges``, the first outermost."""
    for v, lo, hi in reversed(ranges):
        body = [syntax.For(None, name(v), call(kind, lo, hi), body)]
    return body


def _count(e):
    """An extent for ``allocate``: ``e``, or 0 where ``e`` is negative (a loop that runs no iteration)."""
    if rules.is_num(e):
        return num(max(0, e.value))
    if isinstance(e, syntax.Subscript) and isinstance(e.value, syntax.Attribute) and e.value.attr == "shape":
        return e
    return call("max", num(0), e)
