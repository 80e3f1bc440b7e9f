"""The compiled kernel's records: a kernel restored from the disk cache shows the same stages."""
from __future__ import annotations

import numpy as np

import hyb
from hyb.runtime import cache
from hyb.runtime.compiler import CompiledKernel

SRC = '''def saxpy(a, x, y):
    out = output_tensor(x.shape, x.dtype)
    for i in range(x.shape[0]):
        for j in range(x.shape[1]):
            out[i, j] = a * x[i, j] + y[i, j]
    return out
'''


def test_a_restored_kernel_shows_the_same_stages(tmp_path, monkeypatch):
    monkeypatch.setenv("HYB_CACHE_DIR", str(tmp_path))
    x = np.random.default_rng(0).random((300, 200))
    kernel = hyb.compile_source(SRC).saxpy
    fresh = kernel.compile(2.0, x, x)
    typed = kernel.typed(2.0, x, x)
    key = cache.key("saxpy", kernel.module, list(fresh.specs), kernel.options)
    record = cache.load(key)
    assert record is not None and record.object == fresh.code.object and record.sites == fresh.code.sites
    restored = CompiledKernel.restore(typed, fresh.specs, kernel.options, record)
    assert restored._middle is None  # nothing of the middle end was run to load it
    restored.shape_note = fresh.shape_note  # the Kernel's choice of code for shapes, not the record's
    for stage in ("schedule", "loops", "isl", "llvm-opt"):
        assert restored.inspect(stage) == fresh.inspect(stage), stage
    np.testing.assert_allclose(restored(2.0, x, x), 2.0 * x + x)
