"""Band shaping for a CPU: member order (unit stride innermost, coincident outermost), tiling,
and the sinking of a vectorisable member below reduction bands; :func:`locality` scores how
well a schedule's innermost loops walk memory."""
from __future__ import annotations

import itertools

import islpy as isl

from ..target import CpuTarget
from . import blocking
from .extract import PolyProgram, at_sizes
from .loops import PARALLEL_MARK
from .options import DEFAULT_TILES, PARALLEL_TILES, ScheduleOptions, fit_sizes
from .counting import access_strides, extent, work
from .vector import MAX_INNER
from . import islmem

def locality(p: PolyProgram, smap: isl.UnionMap) -> float:
    """How well the innermost loop of each statement walks memory under schedule ``smap``:
    the access scores of :meth:`Shaper.order` for the statement's innermost loop, weighted
    by its number of instances; statements whose innermost loop is no single iterator score 0."""
    total = 0.0
    for st in p.statements:
        inner = _innermost_iterator(smap, st)
        if inner is None:
            continue
        count = work(p, isl.UnionSet.from_set(st.domain), nominal=True)
        total += count * _access_score(p, st, inner)
    return total


def strided_innermost(p: PolyProgram, smap: isl.UnionMap) -> int:
    """The statement instances whose innermost loop under schedule ``smap`` walks memory mostly
    with long strides (their access score below 0)."""
    total = 0
    for st in p.statements:
        inner = _innermost_iterator(smap, st)
        if inner is not None and _access_score(p, st, inner) < 0:
            total += work(p, isl.UnionSet.from_set(st.domain), nominal=True)
    return total


def _innermost_iterator(smap: isl.UnionMap, st) -> int | None:
    """The iterator of ``st`` that the last non-constant schedule dimension runs over."""
    maps = [m for m in islmem.members(smap) if m.get_tuple_name(isl.dim_type.in_) == st.name
            and m.dim(isl.dim_type.in_) == st.domain.dim(isl.dim_type.set)]
    if len(maps) != 1:
        return None
    m = maps[0].intersect_domain(st.domain)
    try:
        pma = isl.PwMultiAff.from_map(m)
    except isl.Error:
        return None
    for d in reversed(range(m.dim(isl.dim_type.out))):
        pieces = pma.get_pw_aff(d).get_pieces()
        if len(pieces) != 1:
            return None
        aff = pieces[0][1]
        hit = [k for k in range(len(st.iters)) if not aff.get_coefficient_val(isl.dim_type.in_, k).is_zero()]
        if len(hit) == 1:
            return hit[0]
        if hit:
            return None  # skewed
    return None


def _access_score(p: PolyProgram, st, it: int, below=frozenset()) -> float:
    """Unit stride 3, invariant (a register across the loop) 2, long stride -4; writes count twice.
    ``below``: the iterators of the loops inside the one scored (see :func:`access_strides`)."""
    score = 0.0
    for acc, weight in [(w, 2.0) for w in st.writes] + [(r, 1.0) for r in st.reads]:
        if p.kernel.tensors[acc.tensor].kind == "scalar":
            continue  # registers, not memory
        strides = access_strides(acc, len(st.iters), below)
        if strides is not None:
            score += weight * strides.get(it, 2.0)
    return score


class Shaper:
    """Reorders and tiles permutable bands, bottom-up."""

    def __init__(self, p: PolyProgram, opts: ScheduleOptions, deps=None):
        self.p, self.opts = p, opts
        self.decisions = []  # its decisions not yet taken by the plan (take)
        self.deps = deps  # the validity dependences: a reshaped band is kept only where it respects them
        self.machine = opts.machine if opts.machine is not None else CpuTarget()
        self.blocks = []  # ((MR, NR), cache tile sizes) of each contraction band blocked
        self.blocked = []  # the names of the contraction statements given a register block

    def take(self) -> tuple:
        """The decisions made since the last call, in order (the plan collects them after each step)."""
        out, self.decisions = tuple(self.decisions), []
        return out

    def reorder(self, node: isl.ScheduleNode) -> isl.ScheduleNode:
        if not self.permutable(node):
            return node
        n = node.band_n_member()
        coincident = [bool(node.band_member_get_coincident(i)) for i in range(n)]
        order = self.order(node, coincident)
        if order != list(range(n)):
            node = permute(node, order, coincident)
            self.decisions.append(f"band of {n}: members reordered {order} (innermost: best unit stride; "
                                  f"parallel members outermost)")
        return node

    def tile(self, node: isl.ScheduleNode) -> isl.ScheduleNode:
        if not self.permutable(node):
            return node
        n = node.band_n_member()
        if self.opts.register is not False and self.deps is not None:
            contraction = blocking.find(self, node)
            if contraction is not None:
                blocked = blocking.block(self, node, contraction,
                                         self.opts.register if isinstance(self.opts.register, tuple) else None,
                                         self.opts.cache_tile)
                if blocked is not None:
                    return blocked
        given = self.opts.tile if self.opts.tile is not True else None  # sizes the user gave
        sizes = (given,) if isinstance(given, int) else given or DEFAULT_TILES.get(n)
        sizes = fit_sizes(sizes or (32,) * (n - 1) + (512,), n)
        extents = self.extents(node)
        if (given is None and self.under_parallel_mark(node) and extents[0] is not None
                and -(-extents[0] // sizes[0]) < PARALLEL_TILES // 2):
            # The first member's tile loop runs on the threads: where it would have only a few
            # iterations, smaller tiles give it PARALLEL_TILES, so that every thread has work.
            sizes = (max(1, -(-extents[0] // PARALLEL_TILES)),) + sizes[1:]
        if any(e is None or e > s for e, s in zip(extents, sizes)):
            if given is None and not self.outer_reuse(node):
                self.decisions.append(f"band of {n} not tiled: no access reuses data across its outer "
                                      "members (tiles would only cut its loops short)")
                return node
            node = node.band_tile(blocking.multi_val(node, sizes))
            self.decisions.append(f"band of {n} tiled {sizes}")
        return node

    def sink(self, node: isl.ScheduleNode) -> isl.ScheduleNode:
        """Moves a band's innermost member below the one-statement chain of bands under it where
        that member walks memory with unit stride, the chain does not, and the chain runs more
        than a few iterations: isl puts a reduction loop (`pp` of a weight gradient's partial sums
        `partial[.., q] += x[.., p + r, q + s] * dout[.., p, q]`) in a band of its own below the
        parallel loops, and LLVM vectorises only innermost loops.  Legal because the member is
        coincident (it carries no dependence left to the bands below); a parallel member stays
        in the band for the threads.  Returns the node at the same position."""
        if self.permutable(node):
            n = node.band_n_member()
            chain, below = [], node.child(0)
            while below.get_type() == isl.schedule_node_type.band:
                chain.append(below)
                below = below.child(0)
            coincident = [bool(node.band_member_get_coincident(i)) for i in range(n)]
            if (chain and below.get_type() == isl.schedule_node_type.leaf and coincident[-1]
                    and any(coincident[:-1]) and self._chain_long(chain)):
                mine = self.scores(node)
                theirs = [self.scores(c) for c in chain]
                if (mine is not None and mine[-1] > 0 and all(t is not None for t in theirs)
                        and mine[-1] > max(max(t) for t in theirs)):
                    node = node.band_split(n - 1)
                    moved = node.child(0)
                    member = moved.band_get_partial_schedule()
                    at = moved.delete()  # the first band of the chain
                    for _ in chain:
                        at = at.child(0)
                    at = at.insert_partial_schedule(member).band_member_set_coincident(0, 1)
                    node = at.ancestor(len(chain) + 1)
                    self.decisions.append(f"band of {n}: innermost member moved below {len(chain)} "
                                          "reduction band(s) (unit stride innermost for the vectoriser)")
        for i in range(node.n_children()):
            node = self.sink(node.child(i)).parent()
        return node

    def outer_reuse(self, node: isl.ScheduleNode) -> bool:
        """Whether some access under the band reuses data across one of its members other than
        the innermost, which is what tiling the band keeps in cache: an element read again at
        the next value of that member (the access does not move with it, but moves with a loop
        inside it), the next element of a cache line (unit stride along it, where the loops
        inside it stride), or another access's element of the same tensor (subscripts that
        differ by a constant along it).  Without such reuse, tiles only cut the loops short
        (a reduction's accumulator is reloaded at every tile of its loop).  Anything this test
        cannot read (a skewed band, a subscript that is not affine) counts as reuse."""
        n = node.band_n_member()
        mupa = node.band_get_partial_schedule()
        prefix = node.get_prefix_schedule_multi_union_pw_aff()
        seen = {}  # tensor -> the band-time -> element relation of the accesses of other statements
        for st in self.p.statements_in(node.get_domain()):
            its = [self.member_iterator(mupa.get_at(m), st) for m in range(n)]
            if any(it is None for it in its):
                if len(st.iters) >= n:
                    return True
                continue  # a statement outside some of the band's loops (an initialisation)
            above = self.above(prefix, st)
            accesses = [a for a in st.writes + st.reads if self.p.kernel.tensors[a.tensor].kind != "scalar"]
            for acc in accesses:
                strides = access_strides(acc, len(st.iters))
                if strides is None:
                    return True
                for m in range(n - 1):
                    inner = set(range(len(st.iters))) - above - set(its[:m + 1])
                    if not inner & set(strides):
                        continue  # fixed inside member m: a register across its inner loops
                    if its[m] not in strides:
                        return True  # read again at the next value of member m
                    if strides[its[m]] > 0 and not any(strides.get(q, 0) > 0 for q in inner):
                        return True  # the next element of the line, at the next value of member m
            if _group_reuse(st, accesses, its[:-1], above):
                return True
            times = isl.UnionMap.from_multi_union_pw_aff(mupa).intersect_domain(
                isl.UnionSet.from_set(st.domain))
            mine = [(acc.tensor, times.reverse().apply_range(isl.UnionMap.from_map(acc.relation)))
                    for acc in accesses]
            if any(not other.is_equal(where) for tensor, where in mine for other in seen.get(tensor, ())):
                return True
            for tensor, where in mine:
                seen.setdefault(tensor, []).append(where)
        return False

    def _chain_long(self, chain: list) -> bool:
        """Whether the bands of ``chain`` run more than MAX_INNER iterations together (LLVM unrolls
        shorter ones whole, leaving the loop above them innermost)."""
        total = 1
        for band in chain:
            for e in self.extents(band):
                if e is None:
                    return True
                total *= e
        return total > MAX_INNER

    @staticmethod
    def under_parallel_mark(node: isl.ScheduleNode) -> bool:
        """Whether the band's first member runs on the threads (a `parallel` mark right above it)."""
        parent = node.parent() if node.has_parent() else None
        return (parent is not None and parent.get_type() == isl.schedule_node_type.mark
                and parent.mark_get_id().get_name() == PARALLEL_MARK)

    def respects(self, sched: isl.Schedule, within: isl.UnionSet | None = None) -> bool:
        """Whether ``sched`` runs every validity dependence source before sink; ``within``: only
        those between instances of that set (a reshaped subtree: the order of its instances against
        any other is decided above it, unchanged)."""
        deps = self.deps
        if deps is None or deps.is_empty():
            return True
        smap = sched.get_map()
        if within is not None:
            deps = deps.intersect_domain(within).intersect_range(within)
            if deps.is_empty():
                return True
            smap = smap.intersect_domain(within)
        return not runs_late(deps, padded(smap))

    @staticmethod
    def permute(node: isl.ScheduleNode, order: list, coincident: list) -> isl.ScheduleNode:
        return permute(node, order, coincident)

    def above(self, prefix: isl.MultiUnionPwAff, st) -> set:
        """The iterators of ``st`` that the loops of the schedule ``prefix`` (a node's prefix
        schedule) run over; None among them where one of those loops is no single iterator."""
        return {self.member_iterator(prefix.get_at(d), st) for d in range(prefix.dim(isl.dim_type.set))}

    def member_iterator(self, upa: isl.UnionPwAff, st) -> int | None:
        """The iterator of statement ``st`` a band member runs over (exactly one, coefficient ±1)."""
        return _single_iterator(upa, st.domain.get_space(), len(st.iters))

    @staticmethod
    def permutable(node: isl.ScheduleNode) -> bool:
        """Whether ``node`` is a permutable band of two or more members (one that is reordered
        and tiled)."""
        return (node.get_type() == isl.schedule_node_type.band and node.band_n_member() >= 2
                and bool(node.band_get_permutable()))

    def extents(self, node, hinted: bool = False) -> list:
        """Number of values each band member takes (None if unknown); ``hinted``: at the sizes of
        ``PolyProgram.hint`` where they are run-time sizes."""
        umap = node.band_get_partial_schedule_union_map().intersect_domain(node.get_domain())
        sets = islmem.members(umap.range())
        if len(sets) != 1:
            return [None] * node.band_n_member()
        s = at_sizes(sets[0], self.p.hint) if hinted else sets[0]
        return [extent(s, i) for i in range(s.dim(isl.dim_type.set))]

    def scores(self, node, rows: bool = False) -> list | None:
        """The access score of each band member (summed over the statements under the band), or
        None where a member is no plain loop of some statement (a skewed band).  ``rows``: a
        statement with loops of its own below the band scores the members for the walk from
        one of those loops' rows to the next (the subscripts only they move do not count)."""
        n = node.band_n_member()
        scores = [0.0] * n
        mupa = node.band_get_partial_schedule()
        prefix = node.get_prefix_schedule_multi_union_pw_aff() if rows else None
        for st in self.p.statements_in(node.get_domain()):
            space = st.domain.get_space()
            members = [_single_iterator(mupa.get_at(m), space, len(st.iters)) for m in range(n)]
            if any(it is None for it in members):
                if len(st.iters) >= n:
                    return None
                continue  # a statement outside some of the band's loops (an initialisation) does not vote
            below = frozenset()
            if rows:
                above = self.above(prefix, st)
                if None not in above:  # (a skewed loop above may fix what seems free below)
                    below = frozenset(set(range(len(st.iters))) - above - set(members))
            for m, it in enumerate(members):
                scores[m] += _access_score(self.p, st, it, below)
        return scores

    def order(self, node, coincident: list) -> list:
        n = len(coincident)
        scores = self.scores(node, rows=True)
        if scores is None:
            return list(range(n))  # not a plain permutation of loops (skewed): keep isl's order
        inner = max(range(n), key=lambda m: (scores[m], m))
        if scores[inner] <= scores[n - 1]:
            inner = n - 1
        rest = [m for m in range(n) if m != inner]
        rest.sort(key=lambda m: (not coincident[m], m))
        return rest + [inner]


def _group_reuse(st, accesses: list, outer: list, above: set) -> bool:
    """Whether two accesses of ``st`` to one tensor touch elements a constant apart along a
    subscript that moves with one of the band members ``outer`` (a stencil's rows): the element
    one reads is read by the other at another value of that member.  Subscripts that differ by
    more than a constant count as such reuse."""
    subs = {}
    for acc in accesses:
        try:
            pma = isl.PwMultiAff.from_map(acc.relation)
        except isl.Error:
            return True
        subs.setdefault(acc.tensor, []).append(pma)
    for pmas in subs.values():
        for a, b in itertools.combinations(pmas, 2):
            for d in range(a.dim(isl.dim_type.out)):
                pa, pb = a.get_pw_aff(d), b.get_pw_aff(d)
                diff = pa.sub(pb).get_pieces()  # (where both accesses happen)
                if all(aff.is_cst() and aff.get_constant_val().is_zero() for _, aff in diff):
                    continue
                if len(diff) != 1 or not diff[0][1].is_cst():
                    return True
                pieces = pa.get_pieces()
                if len(pieces) != 1:
                    return True
                aff = pieces[0][1]
                moving = {k for k in range(len(st.iters))
                          if not aff.get_coefficient_val(isl.dim_type.in_, k).is_zero()}
                if moving & (set(outer) - above):
                    return True
    return False


def _single_iterator(upa: isl.UnionPwAff, space, ndim: int):
    """The iterator a band member is for a statement, if it is exactly ±one iterator (+ constant)."""
    try:
        pa = upa.extract_pw_aff(_member_space(space))
        pieces = pa.get_pieces()
    except isl.Error:
        return None
    if len(pieces) != 1:
        return None
    aff = pieces[0][1]
    hit = [k for k in range(ndim) if not aff.get_coefficient_val(isl.dim_type.in_, k).is_zero()]
    return hit[0] if len(hit) == 1 else None


def _member_space(set_space: isl.Space) -> isl.Space:
    """The space of a one-dimensional function on a statement's domain."""
    # (with the domain's parameters: a shape-generic kernel's sizes)
    return isl.Space.map_from_domain_and_range(set_space, set_space.params().add_dims(isl.dim_type.set, 1))


def runs_late(deps: isl.UnionMap, times: isl.UnionMap) -> bool:
    """Whether some dependence of ``deps`` has its sink at a time not after its source's, under
    ``times`` (a :func:`padded` schedule map).  Each dependence is carried to the pair of times of
    its instances, which are compared in the one time space: the cost of the dependences, not of
    the order of every pair of instances."""
    pairs = islmem.members(deps.apply_domain(times).apply_range(times))
    return any(not m.intersect(isl.Map.lex_ge(m.get_space().range())).is_empty() for m in pairs)


def padded(smap: isl.UnionMap) -> isl.UnionMap:
    """The schedule map with every statement's time vector padded with zeros to one length,
    in one anonymous space, so that times of different statements can be compared."""
    maps = islmem.members(smap)
    n = max(m.dim(isl.dim_type.out) for m in maps)
    out = isl.UnionMap.empty(smap.get_space())
    for m in maps:
        k = m.dim(isl.dim_type.out)
        m = m.add_dims(isl.dim_type.out, n - k)
        for pos in range(k, n):
            m = m.fix_si(isl.dim_type.out, pos, 0)
        out = out.add_map(m.reset_tuple_id(isl.dim_type.out))
    return out


def permute(node: isl.ScheduleNode, order: list, coincident: list) -> isl.ScheduleNode:
    """The band at ``node`` with its members in ``order`` (``coincident``: the flags by old position)."""
    mupa = node.band_get_partial_schedule()
    upas = [mupa.get_at(i) for i in order]
    lst = isl.UnionPwAffList.alloc(isl.DEFAULT_CONTEXT, len(upas))
    for u in upas:
        lst = lst.add(u)
    space = mupa.get_space()
    new = isl.MultiUnionPwAff.from_union_pw_aff_list(space, lst)
    node = node.delete()
    node = node.insert_partial_schedule(new)
    node = node.band_set_permutable(1)
    for i, m in enumerate(order):
        node = node.band_member_set_coincident(i, 1 if coincident[m] else 0)
    return node
