"""Counting for the middle end's choices: how many statement instances a set of domains holds
(:func:`work`, an upper bound from bounding boxes; :func:`box_size` and :func:`extent` for one
set), and how each access moves through memory along each iterator (:func:`access_strides`).

For: the parallel marks and the plan (whether a loop has work enough for threads), band shaping
and register blocking (which order walks memory better, whether a band repays its blocks), the
vector marks and ``schedule.promote`` (unit strides), and ``runtime.generic``, which sizes a
shape-generic kernel's sets for each shape.
"""
from __future__ import annotations

import islpy as isl

from . import islmem
from .extract import PolyProgram, at_sizes

# The value a run-time size (a shape-generic kernel's) is taken to have where statements are
# weighed against each other by their instances (which schedule walks memory better)
NOMINAL_SIZE = 512


def work(p: PolyProgram, domain: isl.UnionSet, nominal: bool = False) -> int:
    """An upper bound on the statement instances in ``domain`` (bounding boxes; an opaque loop's
    instance counts its iterations, :attr:`Statement.weight`); ``nominal``: with
    each run-time size taken as NOMINAL_SIZE (else an extent that depends on one is unknown: large)."""
    total = 0
    parts = islmem.sets_by_name(domain)
    for st in p.statements:
        s = parts.get(st.name)
        if s is None or s.dim(isl.dim_type.set) != st.domain.dim(isl.dim_type.set) or s.is_empty():
            continue  # (a set of another space with the statement's name meets none of its instances)
        if not s.is_subset(st.domain):
            s = s.intersect(st.domain)
            if s.is_empty():
                continue
        if st.domain.is_subset(s):  # all of it (the usual question): its box is the program's
            box = p.derived(("box", st.name, nominal), lambda: _box(st.domain, nominal))
        else:
            box = _box(s, nominal)
        if box is None:
            return 1 << 62
        total += box * st.weight
    return total


def _box(s: isl.Set, nominal: bool) -> int | None:
    return box_size(at_sizes(s, lambda name: NOMINAL_SIZE) if nominal else s)


def box_size(s: isl.Set) -> int | None:
    """The points of the bounding box of ``s``, or None where an extent is unknown."""
    box = 1
    for i in range(s.dim(isl.dim_type.set)):
        n = extent(s, i)
        if n is None:
            return None
        box *= n
    return box


def extent(s: isl.Set, i: int):
    """How many values dimension ``i`` of ``s`` spans (max - min + 1, at least 0), or None if unknown."""
    try:
        lo = [a for _, a in s.dim_min(i).get_pieces()]
        hi = [a for _, a in s.dim_max(i).get_pieces()]
        if not lo or not hi or not all(a.is_cst() for a in lo + hi):
            return None
        lo_v = min(islmem.int_value(a.get_constant_val()) for a in lo)
        hi_v = max(islmem.int_value(a.get_constant_val()) for a in hi)
    except isl.Error:
        return None
    return max(0, int(hi_v - lo_v + 1))


def access_strides(acc, ndim: int, below=frozenset()):
    """Score per iterator for one access: 3 for unit stride (last subscript), -4 for a long stride.
    ``below``: iterators of loops that run inside the ones scored; the subscripts only they move
    (a row walked by an inner loop) do not count, so that the loop moving the subscript before
    them scores as the unit stride of the walk from one row to the next."""
    if not acc.exact:
        return None
    try:
        pma = isl.PwMultiAff.from_map(acc.relation)
    except isl.Error:
        return None
    nout = acc.relation.dim(isl.dim_type.out)
    if nout == 0:
        return {}
    out = {}
    affs = []
    for j in range(nout):
        pieces = pma.get_pw_aff(j).get_pieces()
        if len(pieces) != 1:
            return None
        affs.append(pieces[0][1])
    last = nout - 1
    while last > 0 and below:
        moved = {k for k in range(ndim) if not affs[last].get_coefficient_val(isl.dim_type.in_, k).is_zero()}
        if not moved or not moved <= below:
            break
        last -= 1
    for j, aff in enumerate(affs):
        for k in range(ndim):
            c = aff.get_coefficient_val(isl.dim_type.in_, k)
            if _in_a_floor(aff, k):  # (`a[i // 2]`: the subscript moves with i, but not by one)
                out[k] = -4.0
                continue
            if c.is_zero():
                continue
            # (a rational coefficient, from a floor or a modulo around the iterator, is no unit stride)
            if j == last and c.is_int() and abs(islmem.int_value(c)) == 1 and k not in out:
                out[k] = 3.0
            else:
                out[k] = -4.0
    return out


def _in_a_floor(aff, k: int) -> bool:
    """Whether iterator ``k`` enters the quasi-affine ``aff`` through an integer division (whose
    coefficient on ``k`` is not one of ``aff``'s own)."""
    for d in range(aff.dim(isl.dim_type.div)):
        if not aff.get_coefficient_val(isl.dim_type.div, d).is_zero() \
                and aff.get_div(d).involves_dims(isl.dim_type.in_, k, 1):
            return True
    return False
