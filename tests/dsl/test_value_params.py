"""Scalar parameters that size things: a scalar used where a compile-time integer is needed (a shape of
`output_tensor`/`allocate`, a loop step) specialises the kernel on its value; every other scalar
still compiles once per type."""
from __future__ import annotations

import numpy as np
import pytest

import hyb

SRC = '''
def one_hot(labels, depth):
    c = output_tensor((labels.shape[0], depth), "float32")
    for i in range(labels.shape[0]):
        if 0 <= labels[i] < depth:
            c[i, labels[i]] = 1.0
    return c

def strided(a, step):
    c = output_tensor(a.shape, a.dtype)
    for i in range(0, a.shape[0], step):
        c[i] = a[i] * step
    return c

def padded(a, pad, alpha):
    c = output_tensor((a.shape[0] + 2 * pad,), a.dtype)
    t = allocate((pad + 1,), a.dtype)
    for i in range(a.shape[0]):
        c[i + pad] = a[i] * alpha
    t[pad] = alpha
    c[0] = t[pad]
    return c

def scaled(a, alpha):
    c = output_tensor(a.shape, a.dtype)
    for i in range(a.shape[0]):
        c[i] = a[i] * alpha
    return c
'''


@pytest.fixture()
def mod(tmp_path, monkeypatch):
    monkeypatch.setenv("HYB_CACHE_DIR", str(tmp_path))  # the disk cache must keep values apart too
    return hyb.compile_source(SRC)


def one_hot_ref(labels, depth):
    c = np.zeros((labels.shape[0], depth), np.float32)
    for i, v in enumerate(labels):
        if 0 <= v < depth:
            c[i, v] = 1
    return c


@pytest.mark.parametrize("depth", [0, 1, 3, 7])
@pytest.mark.parametrize("n", [0, 1, 5])
def test_one_hot_compiled_emulated_numpy(mod, depth, n):
    labels = np.random.default_rng(n).integers(-1, 8, n)
    want = one_hot_ref(labels, depth)
    np.testing.assert_array_equal(mod.one_hot(labels, depth), want)
    np.testing.assert_array_equal(mod.one_hot.emulate(labels, depth), want)


def test_one_compile_per_value_and_one_per_type_for_the_others(mod):
    labels = np.array([0, 2, 1])
    for depth in (3, 4, 3, 5, 4, 3):
        assert mod.one_hot(labels, depth).shape == (3, depth)
    assert len(mod.one_hot._cache) == 3
    for alpha in (1.0, 2.0, 3.0, 2.5):
        mod.scaled(np.ones(4), alpha)
    assert len(mod.scaled._cache) == 1


def test_a_loop_step_from_a_scalar(mod):
    a = np.arange(9.0)
    for step in (1, 2, 3, 4, 2):
        want = np.zeros(9)
        want[::step] = a[::step] * step
        np.testing.assert_array_equal(mod.strided(a, step), want)
        np.testing.assert_array_equal(mod.strided.emulate(a, step), want)
    assert len(mod.strided._cache) == 4


def test_shapes_computed_from_a_scalar_and_another_scalar_kept_generic(mod):
    a = np.arange(3.0)
    for pad, alpha in ((0, 2.0), (2, 2.0), (2, 3.0), (1, 1.5)):
        got = mod.padded(a, pad, alpha)
        want = np.zeros(3 + 2 * pad)
        want[pad:pad + 3] = a * alpha
        want[0] = alpha
        np.testing.assert_array_equal(got, want)
    assert len(mod.padded._cache) == 3  # pads 0, 2, 1; alpha is not part of the signature


def test_numpy_integer_scalars_specialise_too(mod):
    got = mod.one_hot(np.array([1, 0]), np.int32(2))
    np.testing.assert_array_equal(got, [[0, 1], [1, 0]])
    assert mod.one_hot.compile(np.array([1, 0]), np.int32(2)).specs[1].value == 2


def test_the_signature_shows_the_value(mod):
    ck = mod.one_hot.compile(np.array([1]), 4)
    assert str(ck.specs[1]) == "Python int = 4"


def test_a_negative_size_is_an_error(mod):
    with pytest.raises(hyb.HybridTypeError) as info:
        mod.one_hot(np.array([1]), -2)
    assert info.value.message == "a shape cannot be negative (got -2)"
    assert (info.value.line, info.value.col) == (3, 41)


def test_a_float_scalar_cannot_size_a_tensor(mod):
    with pytest.raises(hyb.HybridTypeError) as info:
        mod.one_hot(np.array([1]), 2.5)
    assert info.value.message == "a shape must be an integer known at compile time"
