"""Loop nests fused along the outer loop they share, where isl left them apart.

A user computes a statistic of every row in one loop nest and uses it in the next::

    for i in range(n):                  # the scale of every row first
        q = 0.0
        for j in range(d):
            q += x[i, j] * x[i, j]
        r[i] = 1.0 / sqrt(q / d + eps)
    for i in range(n):                  # then the output, in a nest of its own
        for j in range(d):
            out[i, j] = x[i, j] * r[i] * gamma[j]

Both nests run over the rows, and each row of ``x`` is read by both.  isl's scheduler keeps them
apart: fused, the second nest's band would have one loop that runs in parallel (``i``) where on
its own it has two (``i`` and ``j``), and isl does not merge clusters that lose a parallel member.
Apart, the whole of ``x`` is read twice from memory; fused, the second reading of each row finds
it in L1, and ``r`` shrinks to one value per row (array contraction then makes it a scalar).

:func:`fuse` makes one loop of the outermost loops of consecutive top-level nests where:

* each nest's outermost schedule member runs in parallel (coincident);
* every dependence between the nests joins instances of the same value of that member, so the
  fused loop still runs in parallel and every instance still follows those it depends on;
* the nests touch a common tensor element at the same value of it (the reuse fusing buys);
* neither nest holds a contraction that could get a register block (fusing would take its rows
  loop out of its band).

Each nest keeps the rest of its schedule under the fused loop, in the order of the nests.
"""
from __future__ import annotations

import islpy as isl

from .extract import PolyProgram

LEAF = isl.schedule_node_type.leaf
BAND = isl.schedule_node_type.band
SEQUENCE = isl.schedule_node_type.sequence
SET = isl.schedule_node_type.set
FILTER = isl.schedule_node_type.filter
MARK = isl.schedule_node_type.mark


def fuse(p: PolyProgram, deps: isl.UnionMap, sched: isl.Schedule, keep_apart: set) -> tuple:
    """``(schedule, decisions)``: ``sched`` with the runs of top-level loop nests that share their
    outermost loop (see the module's description) fused into one loop each; ``keep_apart``: names
    of statements whose nests stay as they are (contractions)."""
    top = sched.get_root().child(0)
    if top.get_type() != SEQUENCE:
        return sched, []
    groups: list = []  # runs of nests to fuse: [nest, ...], or [None, k] for child k left as it is
    for k in range(top.n_children()):
        nest = _nest(p, top.child(k), keep_apart)
        if nest is None:
            groups.append([None, k])
        elif groups and groups[-1][0] is not None and _joins(deps, groups[-1], nest):
            groups[-1].append(nest)
        else:
            groups.append([nest])
    if all(g[0] is None or len(g) == 1 for g in groups):
        return sched, []
    parts, decisions = [], []
    for g in groups:
        if g[0] is None:
            parts.append(_rebuild(top.child(g[1]).child(0)))
        elif len(g) == 1:
            parts.append(_rebuild(g[0]["band"]))
        else:
            parts.append(_fused(g))
            names = ", ".join(_named(st) for nest in g for st in nest["statements"])
            decisions.append(f"loop nests fused along their outer loop (isl kept them apart): {names}; "
                             "what they share is read once per iteration")
    if any(part is None for part in parts):
        return sched, []
    out = parts[0]
    for part in parts[1:]:
        out = out.sequence(part)
    return out, decisions


def _named(st) -> str:
    span = getattr(st.stmt, "span", None)
    return f"{st.name} (line {span.line})" if span is not None else st.name


def _nest(p: PolyProgram, filt: isl.ScheduleNode, keep_apart: set) -> dict | None:
    """The top-level nest under the filter node ``filt`` where its schedule starts with a band
    whose first member runs in parallel: ``{"band", "outer" (that member as a map from
    the nest's instances), "statements", "domain", "touched" (the member's value -> tensor
    element, every access)}``; else None."""
    band = filt.child(0)
    if band.get_type() != BAND or not band.band_member_get_coincident(0):
        return None
    domain = band.get_domain()
    statements = p.statements_in(domain)
    if not statements or any(st.name in keep_apart for st in statements):
        return None
    outer = isl.UnionMap.from_union_pw_aff(band.band_get_partial_schedule().get_union_pw_aff(0))
    outer = outer.intersect_domain(domain)
    touched = None
    for st in statements:
        for a in st.writes + st.reads:
            if not a.exact:
                return None
            m = outer.reverse().apply_range(isl.UnionMap.from_map(a.relation))
            touched = m if touched is None else touched.union(m)
    return {"band": band, "outer": outer, "statements": statements, "domain": domain, "touched": touched}


def _joins(deps: isl.UnionMap, group: list, nest: dict) -> bool:
    """Whether ``nest`` may run in the same loop as the nests of ``group`` (module description)."""
    before = group[0]["outer"]
    domain = group[0]["domain"]
    for g in group[1:]:
        before, domain = before.union(g["outer"]), domain.union(g["domain"])
    across = deps.intersect_domain(domain).intersect_range(nest["domain"])
    if not across.is_empty():
        apart = across.apply_domain(before).apply_range(nest["outer"]).deltas()
        if not apart.is_subset(isl.UnionSet("{ [0] }")):
            return False
        backwards = deps.intersect_domain(nest["domain"]).intersect_range(domain)
        if not backwards.is_empty():
            return False
    return any(not g["touched"].intersect(nest["touched"]).is_empty() for g in group)


def _fused(group: list) -> isl.Schedule | None:
    """One loop over the group's shared outer member, each nest's remaining schedule under it."""
    rests = []
    for nest in group:
        band = nest["band"]
        if band.band_n_member() > 1:
            rest = _rebuild(band.band_split(1).child(0))
        else:
            rest = _rebuild(band.child(0))
        if rest is None:
            return None
        rests.append(rest)
    inner = rests[0]
    for r in rests[1:]:
        inner = inner.sequence(r)
    member = group[0]["band"].band_get_partial_schedule().get_union_pw_aff(0)
    for nest in group[1:]:
        member = member.union_add(nest["band"].band_get_partial_schedule().get_union_pw_aff(0))
    domain = group[0]["domain"]
    for nest in group[1:]:
        domain = domain.union(nest["domain"])
    member = member.intersect_domain(domain)
    out = inner.insert_partial_schedule(isl.MultiUnionPwAff.from_union_pw_aff(member))
    band = out.get_root().child(0).band_set_permutable(1).band_member_set_coincident(0, 1)
    return band.get_schedule()


def _rebuild(node: isl.ScheduleNode) -> isl.Schedule | None:
    """The subtree at ``node`` as a schedule of its own (bands with their flags, sequences, sets,
    filters and marks); None where it holds a node of another kind."""
    t = node.get_type()
    if t == LEAF:
        return isl.Schedule.from_domain(node.get_domain())
    if t == FILTER:
        return _rebuild(node.child(0))
    if t in (SEQUENCE, SET):
        parts = [_rebuild(node.child(k)) for k in range(node.n_children())]
        if any(x is None for x in parts):
            return None
        out = parts[0]
        for x in parts[1:]:
            out = out.sequence(x) if t == SEQUENCE else out.set(x)
        return out
    below = _rebuild(node.child(0))
    if below is None:
        return None
    if t == MARK:
        return below.get_root().child(0).insert_mark(node.mark_get_id()).get_schedule()
    if t == BAND:
        out = below.insert_partial_schedule(node.band_get_partial_schedule())
        band = out.get_root().child(0).band_set_permutable(node.band_get_permutable())
        for m in range(node.band_n_member()):
            band = band.band_member_set_coincident(m, node.band_member_get_coincident(m))
        return band.get_schedule()
    return None
