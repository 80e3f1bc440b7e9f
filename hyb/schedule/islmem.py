"""isl calls that leave no memory behind, for the middle end's most frequent questions.

islpy's generated wrappers (the 2025 and 2026 releases at least) leak on two paths:

* an argument isl takes (``__isl_take``: ``a.union(b)`` takes both, ``UnionMap.from_map(m)``
  takes ``m``) is copied into a C++ wrapper whose contents go to isl; the wrapper itself is never
  deleted, 32 bytes per taken argument and call;
* a string isl gives (``Val.to_str``, and so ``Val.to_python``) is never freed.

Calls that only borrow their arguments (``__isl_keep``: the tests such as ``is_empty`` and
``is_subset``, the ``foreach_*`` walks, ``dim``, ``get_*``) leak nothing.  A compile makes
thousands of isl calls, and a process that compiles many kernels or shapes keeps what they leak,
so the frequent ones go through here: values read without strings, unions split by borrowing, and
unions built with one taking call per member instead of three (``PolyProgram.union`` also keeps
what it built for the program's later stages).
"""
from __future__ import annotations

import islpy as isl

_SI = 1 << 62  # well within a C long: get_num_si reads such a numerator exactly


def int_value(v: isl.Val) -> int:
    """The integer value of ``v`` (``Val.to_python`` without its string)."""
    if not v.is_int():
        raise ValueError("can only convert an integer isl value")
    if v.cmp_si(-_SI) > 0 and v.cmp_si(_SI) < 0:
        return v.get_num_si()
    return v.to_python()


def members(u) -> list:
    """The maps of a union map or the sets of a union set (each space's part), borrowed."""
    out = []
    (u.foreach_map if isinstance(u, isl.UnionMap) else u.foreach_set)(out.append)
    return out


def sets_by_name(u: isl.UnionSet) -> dict:
    """The sets of ``u`` by their tuple name (a statement's domain is one space: one set each)."""
    return {s.get_tuple_name(): s for s in members(u)}


def union_map(maps, space: isl.Space | None = None) -> isl.UnionMap:
    """The union of ``maps`` (isl Maps; ``space``: of the parameters, for an empty union)."""
    u = isl.UnionMap.empty(space if space is not None else isl.Space.params_alloc(isl.DEFAULT_CONTEXT, 0))
    for m in maps:
        u = u.add_map(m)
    return u


def union_set(sets, space: isl.Space | None = None) -> isl.UnionSet:
    """The union of ``sets`` (isl Sets), as :func:`union_map`."""
    u = isl.UnionSet.empty(space if space is not None else isl.Space.params_alloc(isl.DEFAULT_CONTEXT, 0))
    for s in sets:
        u = u.add_set(s)
    return u
