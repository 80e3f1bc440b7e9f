"""The parse stage alone: hybrid source text -> syntax tree (hyb.dsl.ast) with spans."""
from __future__ import annotations

import pytest

import hyb
from hyb.dsl import ast as syntax
from hyb.dsl.parser import parse_string

SRC = '''N = 4

def scale(a, s):
    """Multiply by s."""
    b = output_tensor(a.shape, a.dtype)
    for i in range(a.shape[0]):
        b[i] = a[i] * s + 1
    return b
'''


def test_a_module_holds_its_kernels_and_constants():
    module = parse_string(SRC, "k.hyb")
    assert list(module.kernels) == ["scale"]
    value, span = module.constants["N"]
    assert isinstance(value, syntax.Num) and value.value == 4 and (span.filename, span.line) == ("k.hyb", 1)
    kernel = module.kernels["scale"]
    assert [p.name for p in kernel.params] == ["a", "s"]
    assert isinstance(kernel.body[0], syntax.ExprStmt) and kernel.body[0].value.value == "Multiply by s."


def test_statements_and_expressions_have_their_shape_and_place():
    kernel = parse_string(SRC, "k.hyb").kernels["scale"]
    doc, make, loop, ret = kernel.body
    assert isinstance(make, syntax.Assign) and isinstance(make.value, syntax.Call)
    assert isinstance(loop, syntax.For) and loop.target.id == "i" and loop.iter.func.id == "range"
    (store,) = loop.body
    assert isinstance(store.target, syntax.Subscript) and store.target.value.id == "b"
    plus = store.value
    assert isinstance(plus, syntax.BinOp) and plus.op == "+"
    assert isinstance(plus.left, syntax.BinOp) and plus.left.op == "*"  # * binds tighter than +
    assert isinstance(ret, syntax.Return) and [v.id for v in ret.values] == ["b"]
    assert (store.span.line, store.span.col) == (7, 9)
    assert store.span.source_line.strip() == "b[i] = a[i] * s + 1"


@pytest.mark.parametrize("text, line, col", [
    ("def f(a):\n    while a:\n        pass\n", 2, 5),
    ("def f(a):\n    b = (a + \n", 2, 9),
])
def test_a_parse_error_points_at_its_place(text, line, col):
    with pytest.raises(hyb.HybridError) as info:
        parse_string(text, "bad.hyb")
    assert (info.value.filename, info.value.line, info.value.col) == ("bad.hyb", line, col)
