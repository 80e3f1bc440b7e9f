"""``print(...)`` in compiled kernels: the generated code calls ``hyb_print(rt, site, values)``, a
function of this process that formats the values as Python prints them and writes the line.

The call comes from native code (from libgomp's threads too, with the GIL taken by ctypes); the
runtime block ``rt`` of the running call says which kernel's print sites the number refers to.
"""
from __future__ import annotations

import ctypes
import struct
import sys
import threading

import llvmlite.binding as llvm
import numpy as np

from ..codegen.abi import PRINT_FUNCTION, PrintSite
from ..dsl import types
from ..dsl.tir import format_value

_running: dict = {}  # address of a running call's runtime block -> its kernel's sites
_lock = threading.Lock()

_SIGNATURE = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int64, ctypes.POINTER(ctypes.c_int64))


def value_of(bits: int, dtype: str):
    """The value of ``dtype`` an 8-byte slot holds, as the interpreter has it (a NumPy scalar for
    floats, a Python int or bool otherwise)."""
    if dtype == "bfloat16":  # the slot holds its 16 bits
        return np.array(bits & 0xFFFF, np.uint16).view(types.bfloat16())[()]
    if dtype in types.FLOATS:
        v = struct.unpack("<d", struct.pack("<q", bits))[0]
        return types.numpy_dtype(dtype).type(v)
    if dtype == "bool":
        return bool(bits)
    if dtype == "uint64":
        bits &= (1 << 64) - 1
    return bits  # the slot holds the value, sign- or zero-extended


def line(site: PrintSite, slots) -> str:
    parts, k = [], 0
    for kind, what, sep, conversion, spec in site.items:
        if kind == "text":
            parts.append(what)
        else:
            parts.append(sep + format_value(value_of(int(slots[k]), what), conversion, spec))
            k += 1
    return "".join(parts)


def _hyb_print(rt, site, slots):
    with _lock:
        sites = _running.get(rt)
    if sites is None:  # pragma: no cover - a call this module did not start
        return
    sys.stdout.write(line(sites[site - 1], slots) + "\n")


_callback = _SIGNATURE(_hyb_print)
llvm.add_symbol(PRINT_FUNCTION, ctypes.cast(_callback, ctypes.c_void_p).value)


class printing:
    """The block of one call of a kernel that prints: its runtime block names its sites."""

    def __init__(self, rt, sites):
        self.key, self.sites = ctypes.addressof(rt), sites

    def __enter__(self):
        with _lock:
            _running[self.key] = self.sites

    def __exit__(self, *exc):
        with _lock:
            _running.pop(self.key, None)
        sys.stdout.flush()
