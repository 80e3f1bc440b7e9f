"""The disk cache of compiled kernels.

An entry is the code stage's record, a :class:`~hyb.runtime.pipeline.NativeCode`: what it
takes to load a kernel without running the middle end or LLVM's code generator (the optimised
LLVM IR, the object code MCJIT made from it, the run-time check sites and the compile-time
warnings).  :func:`store` writes a record and :func:`load` reads one back, or None.  Its key
hashes everything the code depends on (DESIGN.md §6): the kernel's file text and captured
constants, the signature, the options, hyb's version, llvmlite's and LLVM's versions and the
CPU's name and features.

Entries are written atomically (a temporary file renamed into place) and carry a checksum;
an entry that is truncated, garbled or of another format is ignored and rebuilt.  A cache
directory that cannot be written is skipped: kernels are then compiled in memory only.

``HYB_CACHE_DIR`` sets the directory (default: ``$XDG_CACHE_HOME/hyb`` or ``~/.cache/hyb``);
``HYB_CACHE=0`` turns the disk cache off.
"""
from __future__ import annotations

import functools
import hashlib
import json
import os
import tempfile

from ..codegen.abi import AssertSite, CheckSite, PrintSite
from ..errors import HybridWarning, Span
from ..target import host_cpu

FORMAT = b"hyb-cache-3\n"


def directory() -> str | None:
    if os.environ.get("HYB_CACHE", "1").lower() in ("0", "no", "off", "false"):
        return None
    d = os.environ.get("HYB_CACHE_DIR")
    if d:
        return d
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "hyb")


@functools.lru_cache(maxsize=None)
def code_fingerprint() -> str:
    """A hash of hyb's own code, so that a changed compiler never reuses old entries."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    h = hashlib.sha256()
    for dirpath, _, files in sorted(os.walk(root)):
        for name in sorted(files):
            if name.endswith((".py", ".lark")):
                with open(os.path.join(dirpath, name), "rb") as f:
                    h.update(name.encode() + f.read())
    return h.hexdigest()


def key(kernel_name: str, module, specs: list, options, size_hint: dict | None = None) -> str:
    """The entry of one kernel's code for one signature: everything that changes the code (the
    compiler, LLVM, the CPU and its model, the source, the signature, the options and the sizes a
    shape-generic compile sizes its register blocks for).  ``options``: a KernelOptions, or the
    kernel's keywords."""
    import llvmlite
    import llvmlite.binding as llvm

    from ..version import __version__
    from .options import KernelOptions
    options = KernelOptions.of(options)
    parts = {
        "hyb": __version__, "code": code_fingerprint(), "llvmlite": llvmlite.__version__, "llvm": list(llvm.llvm_version_info),
        "cpu": llvm.get_host_cpu_name(), "features": llvm.get_host_cpu_features().flatten(),
        "machine": host_cpu(1).describe(),  # the model blocks and tiles are chosen for (HYB_CPU included)
        "kernel": kernel_name, "source": module.source, "file": module.filename,
        "constants": {k: repr(v[0]) for k, v in sorted(module.constants.items())},
        "callees": {k: repr(v) for k, v in sorted(module.kernels.items())},
        # (a size None: a shape-generic signature, whose code serves every shape of its ranks)
        "specs": [[list(s.shape), s.dtype, s.scalar] + ([repr(s.value)] if s.value is not None else []) for s in specs],
        "options": options.code_key(),
        "size_hint": sorted((k, int(v)) for k, v in (size_hint or {}).items()),
    }
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()


def load(k: str):
    """The record stored under key ``k``, or None (no entry, or one that is damaged or of another
    format: it is not trusted)."""
    d = directory()
    if d is None:
        return None
    try:
        with open(os.path.join(d, k[:2], k), "rb") as f:
            data = f.read()
    except OSError:
        return None
    if not data.startswith(FORMAT):
        return None
    digest, rest = data[len(FORMAT):len(FORMAT) + 64], data[len(FORMAT) + 65:]
    if hashlib.sha256(rest).hexdigest().encode() != digest:
        return None
    try:
        header_len = int(rest[:16])
        header = json.loads(rest[16:16 + header_len])
        return _record(header, rest[16 + header_len:])
    except (ValueError, KeyError, TypeError, IndexError, json.JSONDecodeError):
        return None


def _record(header: dict, object_code: bytes):
    from .pipeline import NativeCode

    if not isinstance(header["llvm_opt"], str) or not object_code:
        raise ValueError("not a code record")
    sites = tuple(_site_from_json(v) for v in header["sites"])
    found = tuple(HybridWarning(v[0], _span_from_json(v[1]), v[2]) for v in header["warnings"])
    schedule = header.get("schedule")
    if isinstance(schedule, dict):  # JSON made the tuples lists
        schedule = {k: tuple(v) if isinstance(v, list) else v for k, v in schedule.items()}
    work = tuple(tuple(_names(pair)) for pair in header["parallel_work"])
    if any(len(pair) != 2 for pair in work) or not isinstance(header["min_parallel_work"], int):
        raise ValueError("not a code record")
    return NativeCode(header["llvm_opt"], object_code, sites, found, _names(header["buffers"]), schedule=schedule,
                      unfilled=_names(header["unfilled"]), sizes=_names(header["sizes"]),
                      conditions=_names(header["conditions"]), parallel_work=work,
                      min_parallel_work=header["min_parallel_work"],
                      unfilled_when=tuple(tuple(_names(pair)) for pair in header["unfilled_when"]))


def _names(value) -> tuple:
    """A list of names (or texts) from an entry's header, as a tuple."""
    if not (isinstance(value, list) and all(isinstance(n, str) for n in value)):
        raise ValueError("not a list of names")
    return tuple(value)


def store(k: str, code) -> bool:
    """Write the code record ``code`` (a NativeCode) under key ``k``; False when it cannot be written."""
    d = directory()
    if d is None or not code.object:
        return False
    header = json.dumps({"llvm_opt": code.llvm_opt, "sites": [_site_to_json(x) for x in code.sites],
                         "warnings": [_warning_to_json(w) for w in code.warnings],
                         "schedule": code.schedule,
                         "buffers": list(code.buffers),
                         "unfilled": list(code.unfilled),
                         "sizes": list(code.sizes), "conditions": list(code.conditions),
                         "parallel_work": [list(pair) for pair in code.parallel_work],
                         "min_parallel_work": code.min_parallel_work,
                         "unfilled_when": [list(pair) for pair in code.unfilled_when]}).encode()
    rest = b"%016d" % len(header) + header + code.object
    data = FORMAT + hashlib.sha256(rest).hexdigest().encode() + b"\n" + rest
    sub = os.path.join(d, k[:2])
    try:
        os.makedirs(sub, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=sub, prefix=".tmp-")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.replace(tmp, os.path.join(sub, k))
        except BaseException:
            os.unlink(tmp)
            raise
    except OSError:
        return False
    return True


def _span_to_json(s: Span | None):
    return None if s is None else [s.filename, s.line, s.col, s.end_line, s.end_col, s.source_line]


def _span_from_json(v) -> Span | None:
    return None if v is None else Span(*v)


def _site_to_json(site) -> dict:
    if isinstance(site, PrintSite):
        return {"print": [list(x) for x in site.items], "span": _span_to_json(site.span)}
    if isinstance(site, AssertSite):
        return {"assert": site.message, "span": _span_to_json(site.span)}
    return {"tensor": site.tensor, "shape": list(site.shape), "span": _span_to_json(site.span),
            "reason": site.reason}


def _site_from_json(v: dict):
    """A CheckSite or an AssertSite, as ``_site_to_json`` wrote it."""
    if "print" in v:
        return PrintSite(tuple((str(a), str(b)) for a, b in v["print"]), _span_from_json(v["span"]))
    if "assert" in v:
        return AssertSite(str(v["assert"]), _span_from_json(v["span"]))
    return CheckSite(v["tensor"], tuple(v["shape"]), _span_from_json(v["span"]), str(v["reason"]))


def _warning_to_json(w: HybridWarning) -> list:
    return [w.message, _span_to_json(w.span), w.hint]
