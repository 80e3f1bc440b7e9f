"""Math functions emitted inline as LLVM IR, so that LLVM's loop vectoriser sees straight-line
arithmetic rather than a call: float32 ``exp``.

A call of libmvec's ``_ZGVeN16v_expf`` costs a call and its register traffic for each vector;
inline, the same work is a dozen vector instructions that interleave with the rest of the loop
body (softmax's and SiLU's loops are mostly exp).  The scalar code that finishes an array runs
the same instructions one lane at a time, so every lane of a loop gets the same result for the
same argument.

exp(x), float32, within 1 ulp of the exact result (``benchmarks.vecmath_accuracy``):

- x is clamped to [-104, 88.8]: below -104 the result rounds to 0, above 88.8 it overflows to
  inf, and the clamp keeps the scaling below in range.  The comparisons leave a NaN as it is.
- k = rint(x / ln 2) and r = x - k ln 2 in two fused steps (ln 2 as a float32 and the float32
  nearest to the rest), |r| <= ln 2 / 2 plus rounding.
- exp(r) = 1 + r + r^2 q(r), with q of degree 4 fitted to the relative error of exp on that
  interval (below 4e-9, a twentieth of an ulp): ``fma(r*r, q, r) + 1``, two roundings.
- exp(x) = exp(r) 2^k, one rounding (to a subnormal or to inf where the result is one): LLVM's
  ``ldexp``, which is ``vscalefps`` on AVX-512; elsewhere the product of two powers of two made
  from bits, ``(p 2^(k>>1)) 2^(k - (k>>1))``, whose first product is exact, the same value.

None of the steps carries fast-math flags: a reassociating LLVM would fold the two-step
reduction into one and lose the low bits of r.
"""
from __future__ import annotations

from llvmlite import ir

from .llvm_types import F32, I32

# exp, float32: bounds of the clamp, 1/ln 2, ln 2 split in two, and q's coefficients (c0 + c1 r + ...)
_EXP32_LOW = -104.0
_EXP32_HIGH = 88.8
_LOG2E = float.fromhex("0x1.715476p+0")
_LN2_HI = float.fromhex("0x1.62e430p-1")
_LN2_LO = float.fromhex("-0x1.05c610p-29")
_EXP32_Q = tuple(float.fromhex(c) for c in ("0x1.fffff8p-2", "0x1.555486p-3", "0x1.555b92p-5",
                                             "0x1.12418cp-7", "0x1.686c56p-10"))

INLINE = {("exp", "float32")}  # (function, dtype) pairs this module emits


def _intrinsic(b: ir.IRBuilder, module: ir.Module, name: str, ret, args):
    fn = module.globals.get(name) or ir.Function(module, ir.FunctionType(ret, [a.type for a in args]), name)
    return b.call(fn, args)


def _fma(b: ir.IRBuilder, module: ir.Module, x, y, z):
    return _intrinsic(b, module, "llvm.fma.f32", F32, [x, y, z])


def exp32(b: ir.IRBuilder, module: ir.Module, x, scalef: bool):
    """exp of a float32 value ``x``; ``scalef``: the target has AVX-512's ``vscalefps`` (LLVM's
    ``ldexp`` becomes one instruction), else the scaling is made of integer operations."""
    c = lambda v: ir.Constant(F32, v)
    x = b.select(b.fcmp_ordered(">", x, c(_EXP32_HIGH)), c(_EXP32_HIGH), x)
    x = b.select(b.fcmp_ordered("<", x, c(_EXP32_LOW)), c(_EXP32_LOW), x)
    k = _intrinsic(b, module, "llvm.rint.f32", F32, [b.fmul(x, c(_LOG2E))])
    r = _fma(b, module, k, c(-_LN2_HI), x)
    r = _fma(b, module, k, c(-_LN2_LO), r)
    q = c(_EXP32_Q[-1])
    for coefficient in reversed(_EXP32_Q[:-1]):
        q = _fma(b, module, q, r, c(coefficient))
    p = b.fadd(_fma(b, module, b.fmul(r, r), q, r), c(1.0))
    n = b.fptosi(k, I32)
    if scalef:
        return _intrinsic(b, module, "llvm.ldexp.f32.i32", F32, [p, n])
    half = b.ashr(n, ir.Constant(I32, 1))
    rest = b.sub(n, half)
    power = lambda e: b.bitcast(b.shl(b.add(e, ir.Constant(I32, 127)), ir.Constant(I32, 23)), F32)
    return b.fmul(b.fmul(p, power(half)), power(rest))
