"""The legalisation stage alone: a loop nest in, a loop nest of primitive operations out."""
from __future__ import annotations

import numpy as np
import pytest

import hyb
from hyb.codegen import legalise
from hyb.dsl import tir
from hyb.runtime import pipeline
from hyb.target import host_cpu

SRC = '''def ops(a, b, idx):
    q = output_tensor(a.shape, a.dtype)
    r = output_tensor(a.shape, a.dtype)
    m = output_tensor(a.shape, a.dtype)
    p = output_tensor(a.shape, a.dtype)
    for i in range(a.shape[0]):
        q[i] = a[i] // b[i] + min(a[i], b[i])
        r[i] = a[i] % b[i] - max(a[i], b[i], a[idx[i]])
        if a[i] % b[i] > a[i] // 2:
            m[i] = a[i] * b[i] - a[i] / b[i] + (-a[i])
        p[i] = a[i] ** 3 + abs(b[i]) ** 2
    return q, r, m, p

def ints(a, b, idx):
    c = output_tensor(a.shape, a.dtype)
    for i in range(a.shape[0]):
        c[i] = ceil_div(a[i], b[i]) + a[i] ** b[i] + max(a[idx[i]], 0) + a[idx[i]] // 3 - min(b[i], 5)
    return c

def halves(a, b):
    c = output_tensor(a.shape, a.dtype)
    d = output_tensor(a.shape, "bool")
    for i in range(a.shape[0]):
        c[i] = sqrt(a[i]) + rsqrt(b[i]) * sigmoid(a[i]) - sign(a[i]) + exp(b[i]) ** a[i]
        d[i] = isnan(a[i] - b[i]) or a[i] < b[i]
    return c, d
'''
MOD = hyb.compile_source(SRC)

# What legalised IR may do with float16 values: read, write, convert and choose between them.
HALF_ALLOWED = (tir.Load, tir.Const, tir.Var, tir.Cast, tir.Let, tir.Pick, tir.Select)
# With bfloat16 values: read, write, choose between them and reinterpret them as uint16 (its
# constants are reinterpreted uint16 constants, its conversions operations on those bits).
BF16_ALLOWED = (tir.Load, tir.Var, tir.Let, tir.Pick, tir.Select)


def nest_of(name, *args):
    typed = MOD.kernels[name].typed(*args)
    return pipeline.middle_end(typed, {}, host_cpu(1)).nest


def statement_exprs(nest):
    """Every expression node of every statement and guard of ``nest``, parents first."""
    out = []

    def stmt(s):
        if isinstance(s, tir.Store):
            for e in (*s.indices, s.value):
                out.extend(tir.walk_expr(e))
        elif isinstance(s, tir.If):
            out.extend(tir.walk_expr(s.cond))
            for x in s.body + s.orelse:
                stmt(x)
        else:
            out.extend(tir.walk_expr(s.start))
            out.extend(tir.walk_expr(s.stop))
            for x in s.body:
                stmt(x)

    for st in nest.statements.values():
        for g in st.guards:
            out.extend(tir.walk_expr(g))
        stmt(st.stmt)
    return out


def stores(nest):
    return [st.stmt for st in nest.statements.values() if isinstance(st.stmt, tir.Store)]


def not_primitive(e):
    """Why ``e`` is not something the back ends render directly, or None."""
    if isinstance(e, tir.Bin) and e.op in ("//", "%"):
        return f"`{e.op}`"
    if isinstance(e, tir.Bin) and e.op == "**" and e.dtype not in ("float32", "float64"):
        return f"`**` on {e.dtype}"
    if isinstance(e, tir.Intrinsic) and e.name in legalise.LOWERED:
        return e.name
    if not isinstance(e, HALF_ALLOWED):
        dtypes = {e.dtype} | {getattr(e, k).dtype for k in ("a", "b") if hasattr(e, k)} \
            | {a.dtype for a in getattr(e, "args", [])}
        if "float16" in dtypes:
            return f"{type(e).__name__} on float16"
    if not isinstance(e, BF16_ALLOWED):
        dtypes = {e.dtype} | {getattr(e, k).dtype for k in ("a", "b", "cond") if hasattr(e, k)} \
            | {a.dtype for a in getattr(e, "args", [])}
        bitcast = isinstance(e, tir.Prim) and e.name == "bitcast" and {e.dtype, e.args[0].dtype} == {"bfloat16", "uint16"}
        if "bfloat16" in dtypes and not bitcast:
            return f"{type(e).__name__} on bfloat16"
    return None


def nodes_named(exprs, cls):
    return [e for e in exprs if isinstance(e, cls)]


def ops_args(dt, n=7):
    return np.arange(1, n + 1).astype(dt), np.arange(2, n + 2).astype(dt), np.arange(n)[::-1].astype(np.int64)


@pytest.mark.parametrize("name, dt", [("ops", "int8"), ("ops", "uint32"), ("ops", "int64"), ("ops", "float16"),
                                      ("ops", "float32"), ("ops", "float64"), ("ints", "int16"), ("ints", "uint8"),
                                      ("ints", "int64"), ("halves", "float16"), ("ops", "bfloat16"),
                                      ("halves", "bfloat16")])
def test_only_primitives_remain(name, dt):
    args = ops_args(dt)[:2] if name == "halves" else ops_args(dt)
    nest = nest_of(name, *args)
    before = [e for e in statement_exprs(nest) if not_primitive(e)]
    assert before  # the kernel does hold what the pass lowers
    after = legalise.legalise(nest)
    assert [not_primitive(e) for e in statement_exprs(after) if not_primitive(e)] == []
    # the names a Let binds are fresh: never a kernel name, a loop variable, or bound twice
    lets = [e.name for e in statement_exprs(after) if isinstance(e, tir.Let)]
    assert len(lets) == len(set(lets))
    taken = set(nest.kernel.tensors) | {v for st in nest.statements.values() for v in st.iters}
    assert not set(lets) & taken


def test_every_lowered_row_is_lowered():
    nest = nest_of("ints", *ops_args("int32"))
    names = {e.name for e in statement_exprs(nest) if isinstance(e, tir.Intrinsic)}
    assert set(legalise.LOWERED) <= names
    after = {e.name for e in statement_exprs(legalise.legalise(nest)) if isinstance(e, tir.Intrinsic)}
    assert not after & set(legalise.LOWERED)


def test_the_middle_end_hands_the_back_ends_the_legalised_nest():
    typed = MOD.kernels["ops"].typed(*ops_args("int32"))
    middle = pipeline.middle_end(typed, {}, host_cpu(1))
    assert any(not_primitive(e) for e in statement_exprs(middle.nest))
    assert not any(not_primitive(e) for e in statement_exprs(middle.code))
    assert middle.code.body == middle.nest.body and middle.code.kernel is middle.nest.kernel


@pytest.mark.parametrize("name, dt", [("ops", "int32"), ("ops", "float16"), ("ops", "bfloat16"), ("ints", "int64")])
def test_a_checked_load_stays_checked_and_is_read_once(name, dt):
    nest = nest_of(name, *ops_args(dt))
    checked = [e for e in statement_exprs(nest) if getattr(e, "checked", False)]
    assert checked and all(isinstance(e, tir.Load) and e.tensor == "a" for e in checked)
    after = legalise.legalise(nest)
    exprs = statement_exprs(after)
    now = [e for e in exprs if getattr(e, "checked", False)]
    # the same checked reads, each once, though max() and // read their operands more than once
    assert [(e.tensor, repr(e.indices)) for e in now] == [(e.tensor, repr(e.indices)) for e in checked]
    indirect = [e for e in nodes_named(exprs, tir.Load) if e.tensor == "a" and isinstance(e.indices[0], tir.Load)]
    assert len(indirect) == len(checked)
    # stores stay checked the same way (none of these kernels checks one)
    assert [s.checked for s in stores(after)] == [s.checked for s in stores(nest)]


def test_the_pass_is_pure():
    nest = nest_of("ops", *ops_args("float16"))
    statements = dict(nest.statements)
    text = {k: (repr(st.stmt), repr(st.guards)) for k, st in statements.items()}
    nodes = {id(e): e for e in statement_exprs(nest)}
    after = legalise.legalise(nest)
    assert after is not nest
    assert nest.statements == statements
    assert {k: (repr(st.stmt), repr(st.guards)) for k, st in nest.statements.items()} == text
    assert all(nodes[i] is e for i, e in ((id(e), e) for e in statement_exprs(nest)))
    assert all(after.statements[k] is not st for k, st in nest.statements.items())
    # no node of the output is a node of the input (so no id can be mistaken for a checked one)
    assert not {id(e) for e in statement_exprs(after)} & set(nodes)


def test_guards_are_legalised():
    nest = nest_of("ops", *ops_args("int32"))
    guarded = [st for st in nest.statements.values() if st.guards]
    assert guarded and any(not_primitive(e) for st in guarded for g in st.guards for e in tir.walk_expr(g))
    after = legalise.legalise(nest)
    assert not any(not_primitive(e) for st in after.statements.values() for g in st.guards
                   for e in tir.walk_expr(g))


@pytest.mark.parametrize("dt", ["int8", "int64", "uint16", "float16", "bfloat16", "float64"])
def test_the_legalised_kernel_computes_numpys_values(dt):
    a = np.array([7, -7, 0, 5, -128, 3, -1], dtype=np.int64)
    b = np.array([2, 2, 3, 0, -1, -3, -1], dtype=np.int64)
    if dt.startswith("uint"):
        a, b = np.abs(a), np.abs(b)
    a, b = a.astype(dt), b.astype(dt)
    if "float" in dt:
        a[2], b[1] = np.nan, -0.0
    idx = np.arange(7)[::-1].astype(np.int64)
    k = MOD.kernels["ops"]
    with np.errstate(all="ignore"):
        got = k(a, b, idx)
        want = k.emulate(a, b, idx)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype
        if dt == "bfloat16":  # (NumPy's testing sees NaN only in its own float types)
            g, w = g.astype(np.float32), w.astype(np.float32)
        np.testing.assert_array_equal(g, w)
