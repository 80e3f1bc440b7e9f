"""LLVM types of hyb's dtypes, shared by the LLVM back end's modules."""
from __future__ import annotations

from llvmlite import ir

from ..dsl import types

I1 = ir.IntType(1)
I8 = ir.IntType(8)
I32 = ir.IntType(32)
I64 = ir.IntType(64)
F16 = ir.HalfType()
F32 = ir.FloatType()
F64 = ir.DoubleType()
PTR = ir.PointerType()

_LLTYPES = {
    "bool": ir.IntType(8), "int8": ir.IntType(8), "uint8": ir.IntType(8),
    "int16": ir.IntType(16), "uint16": ir.IntType(16), "int32": ir.IntType(32), "uint32": ir.IntType(32),
    "int64": ir.IntType(64), "uint64": ir.IntType(64),
    "float16": ir.HalfType(), "float32": ir.FloatType(), "float64": ir.DoubleType(),
    # bfloat16 is its bits: hyb.codegen.legalise leaves it only to be loaded, stored, selected and
    # reinterpreted as uint16 (llvmlite has no bfloat type, and LLVM's conversions of it call
    # compiler-rt where the CPU has no instruction for them)
    "bfloat16": ir.IntType(16),
}


def value_type(dtype: str) -> ir.Type:
    """LLVM type of a value in registers (bool is i1 there, i8 in memory)."""
    dt = types.concrete(dtype)
    return I1 if dt == "bool" else _LLTYPES[dt]


def memory_type(dtype: str) -> ir.Type:
    return _LLTYPES[types.concrete(dtype)]


def is_unsigned(dtype: str) -> bool:
    return types.concrete(dtype) in types.UNSIGNED


def float_bits(dt: str) -> int:
    return {"float16": 16, "float32": 32, "float64": 64}[dt]
