"""The isl calls that leave no memory behind (hyb.schedule.islmem): the same answers as islpy's
own calls, and nothing kept per call where islpy's own would keep a block each time."""
from __future__ import annotations

import dataclasses
import gc

import islpy as isl
import numpy as np
import pytest

import hyb
from hyb.schedule import counting, extract, islmem
from tests.runtime.test_memory import malloc_in_use


@pytest.mark.parametrize("text", ["0", "7", "-7", str(2**62 - 1), str(-(2**62) + 1), str(2**62), str(-(2**62)),
                                  str(2**63), "123456789012345678901234567890", "-98765432109876543210"])
def test_int_value_reads_every_integer(text):
    assert islmem.int_value(isl.Val(text)) == int(text)


def test_int_value_refuses_a_fraction():
    with pytest.raises(ValueError, match="integer"):
        islmem.int_value(isl.Val("3/2"))


MAPS = ["[n] -> { S[i] -> A[i] : 0 <= i < n }", "[n] -> { S[i] -> A[i + 1] : 0 <= i < 5 }",
        "{ T[i, j] -> A[j] : 0 <= i < 3 and 0 <= j < 4 }", "[m] -> { U[] -> B[m] }"]


def test_unions_equal_islpys():
    maps = [isl.Map(t) for t in MAPS]
    old = isl.UnionMap.empty(isl.Space.params_alloc(isl.DEFAULT_CONTEXT, 0))
    for m in maps:
        old = old.union(isl.UnionMap.from_map(m))
    new = islmem.union_map(maps)
    assert new.is_equal(old) and str(new) == str(old)
    sets = [m.domain() for m in maps]
    assert islmem.union_set(sets).is_equal(isl.UnionSet.from_set(sets[0]).union(
        isl.UnionSet.from_set(sets[1])).union(isl.UnionSet.from_set(sets[2])).union(isl.UnionSet.from_set(sets[3])))
    space = isl.Space.create_from_names(isl.DEFAULT_CONTEXT, set=[], params=["n"])
    empty = islmem.union_map([], space)
    assert empty.is_empty() and empty.get_space().get_dim_name(isl.dim_type.param, 0) == "n"
    assert islmem.union_set([]).is_empty()


def test_members_and_sets_by_name():
    u = isl.UnionMap("{ S[i] -> A[i] : 0 <= i < 4; T[i] -> B[i] : 0 <= i < 2 }")
    assert sorted(m.get_tuple_name(isl.dim_type.in_) for m in islmem.members(u)) == ["S", "T"]
    parts = islmem.sets_by_name(u.domain())
    assert sorted(parts) == ["S", "T"] and parts["S"].is_equal(isl.Set("{ S[i] : 0 <= i < 4 }"))
    assert islmem.members(isl.UnionSet("{ }")) == []


def test_the_helpers_keep_nothing_per_call():
    # islpy keeps 32 bytes per taken argument and every string it returns: `Val.to_python()` alone
    # grows the process by a block a call, 640 KB over these 20,000 calls
    v, u = isl.Val("123456"), isl.UnionSet("{ S[i] : 0 <= i < 4; T[i] : 0 <= i < 2 }")
    for _ in range(100):
        islmem.int_value(v), islmem.sets_by_name(u)
    gc.collect()
    before = malloc_in_use()
    for _ in range(20_000):
        islmem.int_value(v), islmem.sets_by_name(u)
    gc.collect()
    assert malloc_in_use() - before < 40_000


TWO = """
def k(a):
    b = output_tensor(a.shape, a.dtype)
    c = output_tensor(a.shape, a.dtype)
    for i in range(a.shape[0]):
        b[i] = a[i] * 2.0
    for i in range(a.shape[0]):
        for j in range(3):
            c[i] += b[i] + a[i]
    return b, c
"""


def test_a_program_makes_each_union_once_and_a_changed_copy_makes_its_own():
    p = extract.extract(hyb.compile_source(TWO).k.typed(np.ones(5)))
    reads = p.union("reads")
    assert p.union("reads") is reads and p.union("domain") is p.domains()
    assert p.union("reads", expanded=False) is not reads
    fewer = dataclasses.replace(p, statements=p.statements[:1])
    assert fewer.union("reads") is not reads and not fewer.union("reads").is_equal(reads)
    assert fewer.domains().is_equal(islmem.union_set([p.statements[0].domain]))


def test_work_counts_whole_and_partial_domains():
    p = extract.extract(hyb.compile_source(TWO).k.typed(np.ones(5)))
    s0, s1 = p.statements
    assert counting.work(p, p.domains()) == 5 + 15
    assert counting.work(p, p.domains([s1])) == 15
    part = isl.UnionSet.from_set(s1.domain.intersect(isl.Set(f"{{ {s1.name}[i, j] : i < 2 }}")))
    assert counting.work(p, part) == 6  # a part of a domain: its own box, not the statement's
    other = isl.UnionSet(f"{{ {s0.name}[i, j] : 0 <= i < 9 and 0 <= j < 9 }}")
    assert counting.work(p, other) == 0  # the statement's name in another space meets none of it
    assert counting.work(p, p.domains()) == 20  # (the whole domains' boxes kept from the first call)
