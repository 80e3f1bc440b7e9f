"""The machine a kernel is compiled for, as one immutable record.

A :class:`CpuTarget` or :class:`CudaTarget` is resolved once per compile (by the operator
layer or the kernel from its options) and passed explicitly into planning and code
generation; nothing below the runtime reads global settings to learn where code will run.
Every field can be overridden with :func:`dataclasses.replace`.

This module imports nothing from the rest of hyb: every layer may use it.
"""
from __future__ import annotations

import os
import warnings
from dataclasses import dataclass, field
from functools import lru_cache

__all__ = ["CpuTarget", "CudaTarget", "host_cpu", "cuda_device", "resolve", "thread_count"]


@dataclass(frozen=True)
class CpuTarget:
    """A CPU: vector unit, caches and threads."""

    vector_bits: int = 256  # widest vector register
    vector_registers: int = 16
    fma_units: int = 1
    l1d_bytes: int = 32 * 1024
    l2_bytes: int = 1024 * 1024
    l2_ways: int = 16  # the L2's associativity: rows a power-of-two apart share its sets
    l3_bytes: int = 8 * 1024 * 1024
    threads: int = 1
    min_parallel_work: int = 1 << 15  # statement instances a parallel loop needs to run on threads
    features: frozenset = field(default_factory=frozenset)  # LLVM feature names, e.g. "avx512f"

    kind = "cpu"

    @property
    def avx512(self) -> bool:
        return "avx512f" in self.features

    def describe(self) -> str:
        return (f"cpu: {self.vector_bits}-bit vectors x {self.vector_registers} registers, {self.fma_units} FMA "
                f"unit(s), L1d {self.l1d_bytes // 1024} KiB, L2 {self.l2_bytes // 1024} KiB, "
                f"L3 {self.l3_bytes // 1024} KiB, {self.threads} thread(s)")


@dataclass(frozen=True)
class CudaTarget:
    """An NVIDIA GPU, by the limits code generation and the parallel policy need."""

    arch: str = "sm_90"
    warp_size: int = 32
    max_threads_per_block: int = 1024
    shared_bytes_per_block: int = 48 * 1024
    registers_per_thread: int = 255
    min_parallel_work: int = 0  # any parallel loop goes on the grid

    kind = "cuda"

    def describe(self) -> str:
        return (f"cuda: {self.arch}, warps of {self.warp_size}, {self.max_threads_per_block} threads and "
                f"{self.shared_bytes_per_block // 1024} KiB shared memory per block")


def thread_count(option=None) -> int:
    """Threads for parallel loops: the `threads` option, else HYB_NUM_THREADS, else the CPU count."""
    if option is not None:
        return max(1, int(option))
    env = os.environ.get("HYB_NUM_THREADS")
    if env:
        try:
            return max(1, int(env))
        except ValueError:
            from .errors import HybridWarning
            warnings.warn(HybridWarning(f"HYB_NUM_THREADS={env!r} is not a number; using the CPU count"))
    return os.cpu_count() or 1


def _sysfs_caches() -> dict:
    """{"l1d": bytes, "l2": bytes, "l3": bytes, "l2_ways": the L2's associativity} read from
    Linux's sysfs; empty where it is absent."""
    out = {}
    base = "/sys/devices/system/cpu/cpu0/cache"
    try:
        entries = sorted(os.listdir(base))
    except OSError:
        return out
    for entry in entries:
        if not entry.startswith("index"):
            continue
        try:
            with open(os.path.join(base, entry, "level")) as f:
                level = int(f.read())
            with open(os.path.join(base, entry, "type")) as f:
                kind = f.read().strip()
            with open(os.path.join(base, entry, "size")) as f:
                text = f.read().strip()
        except (OSError, ValueError):
            continue
        scale = {"K": 1024, "M": 1024 * 1024, "G": 1024 ** 3}.get(text[-1:], 1)
        try:
            size = int(text.rstrip("KMG")) * scale
        except ValueError:
            continue
        if level == 1 and kind in ("Data", "Unified"):
            out["l1d"] = size
        elif level in (2, 3) and kind in ("Data", "Unified"):
            out[f"l{level}"] = size
            if level == 2:
                try:
                    with open(os.path.join(base, entry, "ways_of_associativity")) as f:
                        out["l2_ways"] = max(1, int(f.read()))
                except (OSError, ValueError):
                    pass
    return out


@lru_cache(maxsize=None)
def _host_facts() -> tuple:
    import llvmlite.binding as llvm

    features = frozenset(k for k, v in llvm.get_host_cpu_features().items() if v)
    if "avx512f" in features:
        bits, regs = 512, 32
    elif "avx" in features:
        bits, regs = 256, 16
    elif "neon" in features or "sve" in features:
        bits, regs = 128, 32
    else:
        bits, regs = 128, 16
    fma = 2 if ("fma" in features or "neon" in features) else 1
    caches = _sysfs_caches()
    return features, bits, regs, fma, caches


# The fields of the machine model HYB_CPU may set, with the spelling of their values.
CPU_FIELDS = {"vector_bits": "bits", "vector_registers": "count", "fma_units": "count",
              "l1d": "bytes", "l2": "bytes", "l3": "bytes"}


def cpu_overrides(text: str) -> dict:
    """The machine-model fields set by ``HYB_CPU`` (``"l2=2M,vector_bits=256"``), as CpuTarget
    keyword arguments; a malformed entry raises ValueError naming it."""
    out = {}
    for item in (x.strip() for x in text.split(",")):
        if not item:
            continue
        name, sep, value = item.partition("=")
        name, value = name.strip(), value.strip()
        if not sep or name not in CPU_FIELDS:
            raise ValueError(f"HYB_CPU entry {item!r}: use name=value with name one of {', '.join(CPU_FIELDS)}")
        scale = {"K": 1024, "M": 1024 ** 2, "G": 1024 ** 3}.get(value[-1:].upper(), 1) if CPU_FIELDS[name] == "bytes" else 1
        digits = value[:-1] if scale != 1 else value
        if not digits.isdigit() or int(digits) <= 0:
            raise ValueError(f"HYB_CPU entry {item!r}: the value must be a positive whole number"
                             + (" (with K, M or G)" if CPU_FIELDS[name] == "bytes" else ""))
        if name == "vector_bits" and int(digits) not in (128, 256, 512):
            raise ValueError(f"HYB_CPU entry {item!r}: vector_bits is 128, 256 or 512")
        out[name + ("_bytes" if CPU_FIELDS[name] == "bytes" else "")] = int(digits) * scale
    return out


def host_cpu(threads=None) -> CpuTarget:
    """The machine this process runs on (vector unit from LLVM's host features, caches from sysfs),
    with the fields the environment variable ``HYB_CPU`` sets (``HYB_CPU="l2=512K,vector_registers=16"``)."""
    features, bits, regs, fma, caches = _host_facts()
    defaults = CpuTarget()
    fields = dict(vector_bits=bits, vector_registers=regs, fma_units=fma,
                  l1d_bytes=caches.get("l1d", defaults.l1d_bytes), l2_bytes=caches.get("l2", defaults.l2_bytes),
                  l2_ways=caches.get("l2_ways", defaults.l2_ways), l3_bytes=caches.get("l3", defaults.l3_bytes))
    text = os.environ.get("HYB_CPU", "")
    if text:
        try:
            fields.update(cpu_overrides(text))
        except ValueError as e:
            from .errors import HybridArgumentError
            raise HybridArgumentError(str(e), None, "unset HYB_CPU to use the machine as detected") from None
    return CpuTarget(**fields, threads=thread_count(threads), features=features)


def cuda_device() -> CudaTarget:
    """The GPU code is generated for; the defaults describe a Hopper card (code runs only with pycuda)."""
    return CudaTarget()


def resolve(name: str, threads=None):
    """The target for a back-end name: ``"cpu"`` or ``"cuda"``."""
    return cuda_device() if name == "cuda" else host_cpu(threads)
