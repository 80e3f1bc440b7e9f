"""Float powers with a small whole exponent (`x ** 3`) are multiplications, not `pow` calls:
float32 computed in float64 and rounded once (within an ulp), float64 `x ** 3` and `x ** 4`
within 2 ulp; special values as NumPy's."""
import re

import numpy as np
import pytest

import hyb

SRC = '''
def powers(x):
    out = output_tensor((7, x.shape[0]), x.dtype)
    for i in range(x.shape[0]):
        v = x[i]
        out[0, i] = v ** 3
        out[1, i] = v ** 4
        out[2, i] = v ** 5
        out[3, i] = v ** 8
        out[4, i] = v ** -3
        out[5, i] = v ** -8
        out[6, i] = v ** 3.0
    return out
'''
EXPONENTS = [3, 4, 5, 8, -3, -8, 3]
KERNEL = hyb.compile_source(SRC).powers


def inputs(dtype):
    rng = np.random.default_rng(3)
    top = 30 if dtype == "float32" else 250
    special = [0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -1.0]
    with np.errstate(over="ignore"):
        return np.concatenate([rng.uniform(-10, 10, 2001), rng.standard_normal(500) * 1e-6,
                               np.exp(rng.uniform(-top, top, 500)) * rng.choice([-1, 1], 500),
                               special, [np.finfo(dtype).tiny, np.finfo(dtype).max, -np.finfo(dtype).max],
                               ]).astype(dtype)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_small_whole_powers_against_a_wider_reference(dtype):
    x = inputs(dtype)
    wide = np.float64 if dtype == "float32" else np.longdouble
    with np.errstate(all="ignore"):
        got = KERNEL(x)
        for row, k in enumerate(EXPONENTS):
            want = (x.astype(wide) ** k).astype(dtype)
            g = got[row]
            np.testing.assert_array_equal(np.isnan(g), np.isnan(want), err_msg=f"x ** {k}: NaN")
            inf = np.isinf(want)
            np.testing.assert_array_equal(g[inf], want[inf], err_msg=f"x ** {k}: infinities")
            zero = want == 0
            np.testing.assert_array_equal(np.signbit(g[zero]), np.signbit(want[zero]), err_msg=f"x ** {k}: zeros")
            finite = np.isfinite(want) & ~zero
            ulps = np.abs(g[finite].astype(wide) - want[finite].astype(wide)) / np.spacing(np.abs(want[finite]))
            bound = 1 if dtype == "float32" or k not in (3, 4) else 2
            assert ulps.max(initial=0) <= bound, f"x ** {k} in {dtype}: {ulps.max()} ulp"


def test_whole_powers_call_no_pow_in_the_default_mode():
    x = inputs("float32")
    ir = KERNEL.compile(x).inspect("llvm-opt")
    assert not re.search(r"call [^\n]*pow", ir)
