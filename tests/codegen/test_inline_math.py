"""float32 exp emitted inline (hyb.codegen.inline_math): within 1 ulp of the float64 result
rounded, special values as NumPy's, the same value in vector lanes and in the scalar loop that
finishes an array, and the same values from both ways of scaling by 2^k (AVX-512's vscalefps and
the product of two powers of two made from bits)."""
from __future__ import annotations

import ctypes

import numpy as np
import pytest
from llvmlite import ir

import hyb
from benchmarks.vecmath_accuracy import ulps
from hyb.codegen import inline_math, jit
from hyb.codegen.llvm_types import F32, I64
from tests.codegen.test_vecmath import arguments

EXP = '''def k(x):
    y = output_tensor(x.shape, x.dtype)
    for i in range(x.shape[0]):
        y[i] = exp(x[i])
    return y
'''


def sweep():
    """Every 97th float32 bit pattern, both signs, the boundaries' neighbourhoods, special values,
    random bits and samples (the arguments of the libmvec tests)."""
    bits = np.arange(0, 1 << 31, 97, dtype=np.uint32)
    pos = bits.view(np.float32)
    return np.concatenate([pos, -pos, arguments(np.float32, 1 << 15, np.random.default_rng(5))])


def reference(x):
    with np.errstate(all="ignore"):
        return np.exp(x.astype(np.float64)).astype(np.float32)


def loop_of_exp(scalef: bool):
    """A JIT function ``f(x, y, n)`` computing ``y[i] = exp(x[i])`` with inline_math's exp."""
    module = ir.Module("exp")
    tm = jit.target_machine()
    module.triple, module.data_layout = tm.triple, str(tm.target_data)
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [ir.PointerType(), ir.PointerType(), I64]), "f")
    x, y, n = fn.args
    entry, loop, done = fn.append_basic_block(), fn.append_basic_block(), fn.append_basic_block()
    b = ir.IRBuilder(entry)
    b.cbranch(b.icmp_signed(">", n, ir.Constant(I64, 0)), loop, done)
    b.position_at_end(loop)
    i = b.phi(I64)
    i.add_incoming(ir.Constant(I64, 0), entry)
    v = b.load(b.gep(x, [i], source_etype=F32), typ=F32)
    b.store(inline_math.exp32(b, module, v, scalef), b.gep(y, [i], source_etype=F32))
    nxt = b.add(i, ir.Constant(I64, 1))
    i.add_incoming(nxt, loop)
    b.cbranch(b.icmp_signed("<", nxt, n), loop, done)
    b.position_at_end(done)
    b.ret_void()
    f = jit.JitFunction(jit.object_code(jit.optimize(str(module))), "f")
    call = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64)(f.address)

    def run(xs):
        xs = np.ascontiguousarray(xs, np.float32)
        out = np.empty_like(xs)
        call(xs.ctypes.data, out.ctypes.data, xs.size)
        return out
    run.keep = f
    return run


def test_exp_within_1_ulp_with_special_values_as_numpy():
    x = sweep()
    got = hyb.compile_source(EXP).k(x)
    want = reference(x)
    assert ulps(got, want, np.float32).max() <= 1, x[np.argmax(ulps(got, want, np.float32))]
    with np.errstate(all="ignore"):
        numpy = np.exp(x)
    special = ~np.isfinite(numpy) | (numpy == 0)
    np.testing.assert_array_equal(got[special], numpy[special])


@pytest.mark.parametrize("size", [0, 1, 15, 16, 17, 1000])
def test_vector_lanes_and_the_scalar_remainder_agree(size):
    """Each value computed alone (a size-1 call: the scalar loop) equals its lane in a long call."""
    rng = np.random.default_rng(size)
    x = rng.uniform(-100, 90, size).astype(np.float32)
    k = hyb.compile_source(EXP).k
    whole = k(x)
    assert whole.shape == (size,)
    for i in range(min(size, 40)):
        np.testing.assert_array_equal(k(x[i:i + 1]), whole[i:i + 1])


def test_both_ways_of_scaling_give_the_same_values():
    x = sweep()
    np.testing.assert_array_equal(loop_of_exp(True)(x), loop_of_exp(False)(x))


def test_exp_is_inline_by_default_and_a_call_without_vector_math():
    x = np.linspace(-5, 5, 100, dtype=np.float32)
    inline = hyb.compile_source(EXP).kernels["k"].compile(x)
    called = hyb.compile_source(EXP, schedule={"vector_math": False}).kernels["k"].compile(x)
    assert "llvm.exp" not in inline.inspect("llvm") and "expf" not in inline.inspect("llvm") and "llvm.fma.f32" in inline.inspect("llvm")
    assert "llvm.exp.f32" in called.inspect("llvm")
    np.testing.assert_allclose(inline(x), called(x), rtol=3e-7)


def test_float64_exp_is_not_inline():
    x = np.linspace(-5, 5, 100)
    assert "llvm.fma" not in hyb.compile_source(EXP).kernels["k"].compile(x).inspect("llvm")
