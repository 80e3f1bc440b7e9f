"""A bug in hyb is a HybridInternalError: not a user's HybridError, and it says what to report."""
from __future__ import annotations

import numpy as np
import pytest

import hyb
from hyb.schedule import astgen

SRC = '''def add(a, b):
    c = output_tensor(a.shape, a.dtype)
    for i in range(a.shape[0]):
        c[i] = a[i] + b[i]
    return c
'''


def test_an_internal_error_is_not_a_user_error():
    assert not issubclass(hyb.HybridInternalError, hyb.HybridError)
    e = hyb.HybridInternalError("loop IR node Foo", "codegen")
    assert "internal compiler error (stage: codegen): loop IR node Foo" in str(e)
    assert "bug in hyb" in str(e) and "report" in str(e)


def test_a_compiler_bug_surfaces_as_an_internal_error(monkeypatch):
    monkeypatch.setattr(astgen, "_OPS", {})  # as if isl produced an operation hyb does not know
    monkeypatch.setenv("HYB_CACHE", "0")
    a = np.zeros(4)
    with pytest.raises(hyb.HybridInternalError) as info:
        hyb.compile_source(SRC).add(a, a)
    assert info.value.stage == "loops" and "isl AST operation" in info.value.message
    try:
        hyb.compile_source(SRC).add(a, a)
    except hyb.HybridError:  # a user's handler of their own mistakes does not swallow it
        pytest.fail("a compiler bug was caught as a HybridError")
    except hyb.HybridInternalError:
        pass
