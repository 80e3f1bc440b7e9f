"""Math functions as vector code: glibc's libmvec behind LLVM's vector-function ABI.

In a vectorised loop a call of ``exp`` would otherwise be made once per lane through libm.
Here each math function with a libmvec counterpart is called by a name of hyb's own,
``hybm_expf`` (kernels' functions are ``hyb_<kernel>``, so the two never meet), which the JIT
resolves to libm's scalar function (:func:`load`), and whose declaration names its vector
variants in the ``"vector-function-abi-variant"`` attribute (:func:`annotate`), so that
LLVM's loop vectoriser calls ``_ZGVeN16v_expf`` on 16 lanes at once.  The names are hyb's
own because LLVM rewrites calls of the libm names it knows (``expf``) into its own
intrinsics, which code generation scalarises again.

The variants' names follow the x86-64 vector ABI: ``_ZGV<isa>N<lanes><v per argument>_<libm
name>``, ``isa`` one of ``b`` (SSE, 128-bit), ``c`` (AVX) or ``d`` (AVX2, 256-bit), ``e``
(AVX-512, 512-bit).  A variant is offered only when the target CPU has its instructions, this
machine too (the code runs here), and the loaded libmvec exports it.  libmvec's functions are
documented to within 4 ulp; the rows below were measured against that (``tests/codegen/
test_vecmath.py``), special values included.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import functools
import re
from dataclasses import dataclass

import llvmlite.binding as llvm

from ..dsl import types


@dataclass(frozen=True)
class MathFunction:
    """One row: a math function of the back end (``math(name, ...)``) that libmvec has."""

    name: str  # the back end's name (an LLVM intrinsic's stem or a libm name): "exp", "pow"
    float32: str  # libm's scalar function for float32
    float64: str  # and for float64
    args: int  # arguments, all of the value's dtype
    isa: str = "bcde"  # the ISA letters libmvec exports a variant for (glibc 2.35 and later)
    vector_dtypes: tuple = ("float32", "float64")  # the dtypes whose variants are accurate enough to use

    def libm(self, dtype: str) -> str:
        return self.float32 if dtype == "float32" else self.float64

    def callee(self, dtype: str) -> str:
        """The scalar name calls use: hyb's own, resolved to libm's function."""
        return "hybm_" + self.libm(dtype)


def _rows(*rows) -> dict:
    return {r.name: r for r in rows}


TABLE = _rows(
    MathFunction("exp", "expf", "exp", 1),
    MathFunction("expm1", "expm1f", "expm1", 1),
    MathFunction("log", "logf", "log", 1),
    MathFunction("log1p", "log1pf", "log1p", 1),
    MathFunction("sin", "sinf", "sin", 1),
    MathFunction("cos", "cosf", "cos", 1),
    MathFunction("tan", "tanf", "tan", 1),
    MathFunction("tanh", "tanhf", "tanh", 1),
    MathFunction("erf", "erff", "erf", 1),
    MathFunction("atan", "atanf", "atan", 1),
    MathFunction("atan2", "atan2f", "atan2", 2),
    MathFunction("pow", "powf", "pow", 2),
)

# The vector register each ISA letter passes values in, and the LLVM feature it needs, best first
# among those of one width.
_ISA = (("e", 512, "avx512f"), ("d", 256, "avx2"), ("c", 256, "avx"), ("b", 128, "sse2"))


@dataclass(frozen=True)
class Variant:
    isa: str
    lanes: int
    name: str  # the vector function's symbol, e.g. _ZGVeN16v_expf


def variant_name(row: MathFunction, dtype: str, isa: str, lanes: int) -> str:
    return f"_ZGV{isa}N{lanes}{'v' * row.args}_{row.libm(dtype)}"


@functools.lru_cache(maxsize=None)
def _libmvec():
    """libmvec loaded into the process (for the JIT) and opened for symbol look-ups; None without it."""
    if not llvm.get_process_triple().startswith("x86_64"):
        return None
    name = library()
    if not name:
        return None
    try:
        llvm.load_library_permanently(name)
        return ctypes.CDLL(name)
    except (OSError, RuntimeError):
        return None


@functools.lru_cache(maxsize=None)
def load() -> bool:
    """Make the JIT resolve every ``hybm_*`` name to libm's function and every libmvec variant
    (loading libmvec); True when libmvec is there.  Called before any JIT code is finalised."""
    libm = ctypes.CDLL(ctypes.util.find_library("m") or "libm.so.6")
    for row in TABLE.values():
        for dtype in ("float32", "float64"):
            fn = getattr(libm, row.libm(dtype), None)
            if fn is not None:
                llvm.add_symbol(row.callee(dtype), ctypes.cast(fn, ctypes.c_void_p).value)
    return _libmvec() is not None


@functools.lru_cache(maxsize=None)
def _exported(symbol: str) -> bool:
    lib = _libmvec()
    return lib is not None and hasattr(lib, symbol)


@functools.lru_cache(maxsize=None)
def _host_features() -> frozenset:
    return frozenset(k for k, v in llvm.get_host_cpu_features().items() if v)


def variants(name: str, dtype: str, features=frozenset()) -> tuple:
    """The vector variants a call of ``name`` on ``dtype`` values may use: at most one per
    vector width, for an ISA that ``features`` (the target's LLVM feature names; empty: this
    machine's) and this machine both have, that libmvec exports.  Empty where there are none."""
    row = TABLE.get(name)
    dt = types.concrete(dtype)
    if row is None or dt not in row.vector_dtypes or not load():
        return ()
    host = _host_features()
    wanted = features or host
    out, widths = [], set()
    for isa, bits, feature in _ISA:
        if isa not in row.isa or bits in widths or feature not in wanted or feature not in host:
            continue
        lanes = bits // (32 if dt == "float32" else 64)
        symbol = variant_name(row, dt, isa, lanes)
        if _exported(symbol):
            out.append(Variant(isa, lanes, symbol))
            widths.add(bits)
    return tuple(out)


def _ir_type(dtype: str) -> str:
    return "float" if types.concrete(dtype) == "float32" else "double"


def annotate(text: str, calls: dict) -> str:
    """LLVM IR text whose declarations of the ``calls`` (callee name -> (dtype, arguments,
    variants)) name their vector variants, with the variants declared and kept (listed in
    ``llvm.compiler.used``: an unused declaration is dropped before the vectoriser runs)."""
    if not calls:
        return text
    declared, used = [], []
    for callee, (dtype, args, found) in sorted(calls.items()):
        scalar_t = _ir_type(dtype)
        mapping = ",".join(f"_ZGV_LLVM_N{v.lanes}{'v' * args}_{callee}({v.name})" for v in found)
        attrs = f' nounwind willreturn memory(none) "vector-function-abi-variant"="{mapping}"'
        pattern = re.compile(rf'(?m)^(declare [^\n]*@"?{re.escape(callee)}"?\([^\n]*\))$')
        text, n = pattern.subn(lambda m: m.group(1) + attrs, text)
        if n != 1:
            from ..errors import HybridInternalError
            raise HybridInternalError(f"no declaration of {callee} to annotate", "llvm")
        for v in found:
            vt = f"<{v.lanes} x {scalar_t}>"
            declared.append(f"declare {vt} @{v.name}({', '.join([vt] * args)}) nounwind willreturn memory(none)")
            used.append(f"ptr @{v.name}")
    kept = (f'@llvm.compiler.used = appending global [{len(used)} x ptr] [{", ".join(used)}], '
            'section "llvm.metadata"')
    return text.rstrip("\n") + "\n\n" + "\n".join(declared) + "\n" + kept + "\n"


def without_variants(text: str) -> str:
    """IR text (from :func:`annotate`) whose calls stay scalar: the variant attributes removed."""
    return re.sub(r' "vector-function-abi-variant"="[^"]*"', "", text)


def calls_variants(text: str) -> bool:
    """Whether (optimised) IR text calls a libmvec function."""
    return re.search(r"call [^\n]*@_ZGV", text) is not None


def callees(text: str) -> list:
    """The ``hybm_*`` functions that (optimised) IR text calls or declares, as MathFunction rows
    with their dtype: what code outside the JIT must define."""
    names = set(re.findall(r'@"?(hybm_[A-Za-z0-9]+)"?\(', text))
    out = []
    for row in TABLE.values():
        for dtype in ("float32", "float64"):
            if row.callee(dtype) in names:
                out.append((row, dtype))
    return out


def c_definitions(text: str) -> str:
    """C definitions of the ``hybm_*`` functions optimised IR text calls, each calling libm's
    function (for code linked outside the JIT, e.g. aot libraries)."""
    lines = ["#include <math.h>"]
    for row, dtype in callees(text):
        ct = "float" if dtype == "float32" else "double"
        params = ", ".join(f"{ct} a{k}" for k in range(row.args))
        call = ", ".join(f"a{k}" for k in range(row.args))
        lines.append(f"{ct} {row.callee(dtype)}({params}) {{ return {row.libm(dtype)}({call}); }}")
    return "\n".join(lines) + "\n"


@functools.lru_cache(maxsize=None)
def library() -> str | None:
    """libmvec's file name (for the loader, and for a linker's ``-l:``), or None."""
    return ctypes.util.find_library("mvec")
