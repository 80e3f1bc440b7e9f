"""The check stage alone: syntax tree + signature -> typed kernel IR (hyb.dsl.tir)."""
from __future__ import annotations

import numpy as np
import pytest

from hyb.dsl import tir
from hyb.dsl.check import arg_specs, check_kernel
from hyb.dsl.intrinsics import TABLE
from hyb.dsl.parser import parse_string
from hyb.dsl.printer import print_typed


def typed(src: str, *args) -> tir.TypedKernel:
    module = parse_string(src, "k.hyb")
    (kernel,) = module.kernels.values()
    return check_kernel(kernel, module, arg_specs(list(args)))


ADD = '''def add(a, b):
    c = output_tensor(a.shape, a.dtype)
    for i in range(a.shape[0]):
        c[i] = a[i] + b[i]
    return c
'''


def test_shapes_and_dtypes_are_bound_to_the_signature():
    k = typed(ADD, np.zeros(5, np.float32), np.zeros(5, np.float32))
    c = next(t for t in k.tensors.values() if t.source_name == "c")
    assert tuple(c.shape) == (5,) and c.dtype == "float32" and c.kind == "output"
    text = print_typed(k)
    assert "float32" in text and "for i in range(5)" in text.replace("range(0, 5)", "range(5)")


def test_numpy_promotion_of_mixed_dtypes():
    k = typed(ADD, np.zeros(3, np.float32), np.zeros(3, np.float64))
    (loop,) = [s for s in k.body if isinstance(s, tir.Loop)]
    (store,) = loop.body
    assert isinstance(store.value, tir.Cast) and store.value.dtype == "float32"  # stored in c's dtype ...
    assert store.value.a.dtype == "float64"  # ... of a sum computed in float64


@pytest.mark.parametrize("name, dtype, want", [
    ("sqrt", "int32", "float64"), ("sqrt", "float32", "float32"), ("floor", "int16", "int16"),
    ("isnan", "float32", "bool"), ("abs", "int8", "int8"),
])
def test_intrinsic_results_follow_the_table_rule(name, dtype, want):
    src = f'''def f(a):
    c = output_tensor(a.shape, "float64")
    for i in range(a.shape[0]):
        c[i] = {name}(a[i])
    return c
'''
    k = typed(src, np.zeros(2, dtype))
    (loop,) = [s for s in k.body if isinstance(s, tir.Loop)]
    value = loop.body[0].value
    inner = value.a if isinstance(value, tir.Cast) else value  # the store's cast to float64
    assert TABLE[name].rule in ("float", "rounding", "predicate", "same")
    assert inner.dtype == want


def test_constants_fold_with_numpy_semantics():
    src = '''def f(a):
    c = output_tensor(a.shape, a.dtype)
    for i in range(a.shape[0]):
        c[i] = a[i] + (-7 // 2) + max(3, 5) + ceil_div(7, 2)
    return c
'''
    text = print_typed(typed(src, np.zeros(2, np.int64)))
    assert "(-4)" in text or "- 4" in text or "+ -4" in text
    assert "max(" not in text and "ceil_div(" not in text
