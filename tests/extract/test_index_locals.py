"""A local assigned once an integer expression of loop variables and constants (`ih = p * 2 + dr - 1`)
stands for that expression: extraction, bounds proofs and the scheduler see the subscripts it
appears in as affine, exactly as if the expression were written out."""
from __future__ import annotations

import numpy as np
import pytest

import hyb

SRC = '''
STRIDE = 2
PAD = 1

def conv_local(x, w):
    c = output_tensor((x.shape[0], w.shape[0], (x.shape[2] + 2 * PAD - w.shape[2]) // STRIDE + 1,
                       (x.shape[3] + 2 * PAD - w.shape[3]) // STRIDE + 1), x.dtype)
    for b in range(x.shape[0]):
        for o in range(w.shape[0]):
            for p in range(c.shape[2]):
                for q in range(c.shape[3]):
                    for ci in range(x.shape[1]):
                        for dr in range(w.shape[2]):
                            for ds in range(w.shape[3]):
                                ih = p * STRIDE + dr - PAD
                                iw = q * STRIDE + ds - PAD
                                if 0 <= ih < x.shape[2] and 0 <= iw < x.shape[3]:
                                    c[b, o, p, q] += x[b, ci, ih, iw] * w[o, ci, dr, ds]
    return c

def conv_inline(x, w):
    c = output_tensor((x.shape[0], w.shape[0], (x.shape[2] + 2 * PAD - w.shape[2]) // STRIDE + 1,
                       (x.shape[3] + 2 * PAD - w.shape[3]) // STRIDE + 1), x.dtype)
    for b in range(x.shape[0]):
        for o in range(w.shape[0]):
            for p in range(c.shape[2]):
                for q in range(c.shape[3]):
                    for ci in range(x.shape[1]):
                        for dr in range(w.shape[2]):
                            for ds in range(w.shape[3]):
                                if 0 <= p * STRIDE + dr - PAD < x.shape[2] and 0 <= q * STRIDE + ds - PAD < x.shape[3]:
                                    c[b, o, p, q] += x[b, ci, p * STRIDE + dr - PAD, q * STRIDE + ds - PAD] * w[o, ci, dr, ds]
    return c

def shifted(a):
    c = output_tensor(a.shape, "int8")
    for i in range(a.shape[0]):
        big = i * 100 + 27
        c[i] = a[i] + big
    return c

def bound(a):
    c = output_tensor(a.shape, a.dtype)
    for i in range(a.shape[0]):
        last = a.shape[0] - 1 - i
        for j in range(last + 1):
            c[i] += a[j]
    return c
'''


@pytest.fixture(scope="module")
def mod():
    return hyb.compile_source(SRC, "locals.hyb")


def conv_ref(x, w):
    n, ci, h, wd = x.shape
    o, _, kh, kw = w.shape
    xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    oh, ow = (h + 2 - kh) // 2 + 1, (wd + 2 - kw) // 2 + 1
    out = np.zeros((n, o, oh, ow), x.dtype)
    for p in range(oh):
        for q in range(ow):
            patch = xp[:, :, 2 * p:2 * p + kh, 2 * q:2 * q + kw]
            out[:, :, p, q] = np.einsum("bchw,ochw->bo", patch, w)
    return out


@pytest.mark.parametrize("shape", [(1, 1, 1, 1), (2, 3, 5, 7), (1, 2, 8, 8)])
def test_both_spellings_compute_the_same(mod, shape):
    rng = np.random.default_rng(0)
    x = rng.standard_normal(shape)
    w = rng.standard_normal((3, shape[1], 3, 3))
    want = conv_ref(x, w)
    for k in (mod.conv_local, mod.conv_inline):
        np.testing.assert_allclose(k(x, w), want, rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(k.emulate(x, w), want, rtol=1e-10, atol=1e-12)


def test_both_spellings_give_the_same_schedule(mod):
    x, w = np.zeros((2, 4, 16, 16), np.float32), np.zeros((4, 4, 3, 3), np.float32)
    local, inline = mod.conv_local.compile(x, w), mod.conv_inline.compile(x, w)
    assert local.inspect("schedule") == inline.inspect("schedule")
    isl_text = local.inspect("isl")
    assert "may read" not in isl_text  # every access is exact: affine
    assert "(opaque" not in isl_text


def test_the_local_keeps_the_type_a_scalar_would_have(mod):
    # `big` is an int64 (a Python-int expression), so `a[i] + big` is computed in int64 and the
    # store into the int8 output wraps, as NumPy's astype does.
    a = np.array([1, 2, 3, 4], dtype=np.int8)
    want = (a.astype(np.int64) + np.arange(4) * 100 + 27).astype(np.int8)
    np.testing.assert_array_equal(mod.shifted(a), want)
    np.testing.assert_array_equal(mod.shifted.emulate(a), want)


def test_a_local_as_a_loop_bound_is_affine(mod):
    a = np.arange(1.0, 6.0)
    want = np.array([a[:5 - i].sum() for i in range(5)])
    np.testing.assert_array_equal(mod.bound(a), want)
    assert "(opaque" not in mod.bound.compile(a).inspect("isl")


def test_out_of_its_block_it_is_not_visible():
    src = ("def k(a):\n    c = output_tensor(a.shape, a.dtype)\n    for i in range(a.shape[0]):\n"
           "        j = i + 1\n    c[0] = a[j]\n    return c\n")
    with pytest.raises(hyb.HybridNameError) as info:
        hyb.compile_source(src, "v.hyb").k(np.zeros(3))
    assert info.value.message == "`j` is not visible here"
    assert (info.value.line, info.value.col) == (5, 14)
