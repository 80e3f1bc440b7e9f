"""The extract stage alone: typed kernel -> isl statements (domains, accesses, schedule)."""
from __future__ import annotations

import numpy as np
import pytest

import hyb
from hyb.dsl import tir
from hyb.schedule import extract

SRC = '''def tri(a):
    c = output_tensor(a.shape, a.dtype)
    for i in range(a.shape[0]):
        for j in range(i + 1):
            c[i, j] = a[i, j] * 2.0
    return c

def gather(a, idx):
    c = output_tensor(idx.shape, a.dtype)
    for i in range(idx.shape[0]):
        c[i] = a[idx[i]]
    return c
'''


def poly(name, *args):
    module = hyb.compile_source(SRC)
    return extract.extract(module.kernels[name].typed(*args))


def test_a_triangular_domain_and_its_accesses():
    p = poly("tri", np.zeros((4, 4)))
    (st,) = p.statements
    assert st.iters == ["i", "j"] or list(st.iters) == ["i", "j"]
    assert st.domain.count_val().to_python() == 4 + 3 + 2 + 1  # the triangle's 10 points
    assert [a.tensor for a in st.writes] and all(a.exact for a in st.reads + st.writes)
    text = extract.describe(p)
    assert "domain:" in text and "0 <= h_j <= h_i" in text


def test_a_subscript_read_from_a_tensor_is_checked_at_run_time():
    p = poly("gather", np.zeros(5), np.zeros(3, np.int64))
    # a[idx[i]]: not affine, so checked when it runs
    assert any(getattr(e, "checked", False) for st in p.statements for e in tir.walk_expr(st.stmt.value))
    (st,) = p.statements
    assert any(not a.exact for a in st.reads)


def test_an_access_outside_its_tensor_is_a_compile_time_error():
    bad = hyb.compile_source('''def f(a):
    c = output_tensor(a.shape, a.dtype)
    for i in range(a.shape[0]):
        c[i] = a[i + 1]
    return c
''')
    with pytest.raises(hyb.HybridIndexError) as info:
        extract.extract(bad.f.typed(np.zeros(4)))
    assert info.value.line == 4
