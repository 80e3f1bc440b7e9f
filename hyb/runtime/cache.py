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
from dataclasses import fields

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
    """The NativeCode of an entry's header and object code (each stored field read by its codec)."""
    from .pipeline import NativeCode

    if not object_code:
        raise ValueError("not a code record")
    return NativeCode(object=object_code, **{f.name: _CODECS[f.name][1](header[f.name])
                                             for f in fields(NativeCode) if f.name in _CODECS})


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
    header = json.dumps({f.name: _CODECS[f.name][0](getattr(code, f.name))
                         for f in fields(code) if f.name in _CODECS}).encode()
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
        return PrintSite(tuple(tuple(str(x) for x in item) for item in v["print"]), _span_from_json(v["span"]))
    if "assert" in v:
        return AssertSite(str(v["assert"]), _span_from_json(v["span"]))
    return CheckSite(v["tensor"], tuple(v["shape"]), _span_from_json(v["span"]), str(v["reason"]))


def _warning_to_json(w: HybridWarning) -> list:
    return [w.message, _span_to_json(w.span), w.hint]


def _text(v) -> str:
    if not isinstance(v, str):
        raise ValueError("not a text")
    return v


def _count(v) -> int:
    if isinstance(v, bool) or not isinstance(v, int):
        raise ValueError("not a count")
    return v


def _pairs(value) -> tuple:
    pairs = tuple(_names(pair) for pair in value)
    if any(len(pair) != 2 for pair in pairs):
        raise ValueError("not a list of pairs")
    return pairs


def _tuned_from_json(v):
    if isinstance(v, dict):  # JSON made the tuples lists
        return {k: tuple(x) if isinstance(x, list) else x for k, x in v.items()}
    return v


_LIST = (list, _names)
_PAIRS = (lambda v: [list(pair) for pair in v], _pairs)
# How each field of NativeCode is written to an entry's header and read back (to JSON, from
# JSON); `object` follows the header as bytes, and the unoptimised IR is not kept.
_CODECS = {
    "llvm_opt": (str, _text),
    "sites": (lambda v: [_site_to_json(x) for x in v], lambda v: tuple(_site_from_json(x) for x in v)),
    "warnings": (lambda v: [_warning_to_json(w) for w in v],
                 lambda v: tuple(HybridWarning(x[0], _span_from_json(x[1]), x[2]) for x in v)),
    "buffers": _LIST, "unfilled": _LIST, "sizes": _LIST, "conditions": _LIST,
    "tuned": (lambda v: v, _tuned_from_json),
    "parallel_work": _PAIRS, "unfilled_when": _PAIRS,
    "min_parallel_work": (int, _count),
    "staged": (lambda v: [[n, list(shape), dt] for n, shape, dt in v],
               lambda v: tuple((str(n), tuple(int(d) for d in shape), str(dt)) for n, shape, dt in v)),
}
NOT_STORED = ("object", "llvm_ir")
