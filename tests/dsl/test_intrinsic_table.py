"""The intrinsic table is the one list of intrinsics: every stage covers exactly its rows."""
from __future__ import annotations

import numpy as np
import pytest

from hyb.autodiff import rules
from hyb.codegen import cuda_expr, legalise, llvm_expr
from hyb.dsl import interp, intrinsics
from hyb.dsl.intrinsics import TABLE, ZERO


def test_the_checker_reads_the_table():
    assert set(intrinsics.INTRINSICS) == set(TABLE)
    assert set(intrinsics.FLOAT_MATH) | set(intrinsics.ROUNDING) | set(intrinsics.PREDICATES) < set(TABLE)
    for row in TABLE.values():
        assert row.rule in intrinsics.RULES, row.name
        low, high = row.arity
        assert low >= 1 and (high is None or high >= low)


def test_the_interpreter_has_a_reference_for_every_row():
    assert set(interp._INTRINSICS) == set(TABLE)
    namespace = {"np": np, **{k: getattr(interp, k) for k in dir(interp) if k.startswith("_")}}
    for row in TABLE.values():
        assert eval(row.reference, namespace) is not None, row.name  # noqa: S307 - the table's own text


def test_autodiff_has_a_derivative_for_every_row():
    assert set(rules.ZERO_GRAD) == {n for n, row in TABLE.items() if row.derivative == ZERO}
    for row in TABLE.values():
        assert row.derivative in (ZERO, "power", "extremum") or callable(row.derivative), row.name
        if callable(row.derivative):
            args = [rules.name(p) for p in row.params.split(", ")]
            adjoints = row.derivative(rules._BUILDERS, args, rules.name("g"))
            assert len(adjoints) == len(args), row.name


@pytest.mark.parametrize("back_end", ["llvm", "cuda"])
def test_each_back_end_emits_every_row(back_end):
    """A back end computes an intrinsic with a math function of its own (its ``_MATH`` table, or
    LLVM's C library calls ``_LIBM``) or an ``i_<name>`` emitter, unless the legalisation pass
    lowers the row to primitives before any back end sees it (``legalise.LOWERED``; that it does is
    tests/codegen/test_legalise.py's business); ``power`` is the ``**`` operator (the checker
    types it as a binary operation)."""
    if back_end == "llvm":
        emitters, functions = llvm_expr.LlvmExpressions, set(llvm_expr._MATH) | set(llvm_expr._LIBM)
    else:
        emitters, functions = cuda_expr.CudaExpressions, set(cuda_expr.CudaExpressions._MATH)
    assert set(legalise.LOWERED) < set(TABLE)
    missing = [name for name, row in TABLE.items()
               if row.rule != "power" and name not in functions and not hasattr(emitters, "i_" + name)
               and name not in legalise.LOWERED]
    assert missing == []
