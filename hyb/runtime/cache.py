"""The disk cache of compiled kernels.

An entry is the code stage's record, a :class:`~hyb.runtime.pipeline.NativeCode`: what it
takes to load a kernel without running the middle end or LLVM's code generator (the optimised
LLVM IR, the object code LLVM made from it, the run-time check sites and the compile-time
warnings).  :func:`store` writes a record and :func:`load` reads one back, or None.  Its key
hashes everything the code depends on (DESIGN.md §6): the kernel's file text and captured
constants, the signature, the options, hyb's version, llvmlite's and LLVM's versions and the
CPU's name and features.

Entries are written atomically (a temporary file renamed into place) and carry a checksum;
an entry that is truncated, garbled or of another format is ignored and rebuilt.  A cache
directory that cannot be written is skipped: kernels are then compiled in memory only.

``HYB_CACHE_DIR`` sets the directory (default: ``$XDG_CACHE_HOME/hyb`` or ``~/.cache/hyb``);
``HYB_CACHE=0`` turns the disk cache off.

Trust: an entry is native code that runs in the user's process, so whoever can write the cache
can run code as the user.  hyb only uses a cache folder that belongs to the user (the effective
uid) and that neither its group nor other users can write; the same holds for the folder of
each entry and for the entry itself, which must also be a regular file and not a symbolic link.
Anything else is refused with a :class:`~hyb.errors.HybridWarning` (once per process and path)
and the kernel is compiled in memory.  The checks read the status of the opened descriptors
(``fstat``) and the entries' folders and files are opened relative to their folder's descriptor
without following links, so nothing can be swapped in between a check and its use; the folders
above the cache folder are not checked (a shared ``/tmp`` holding a folder of the user's own is
fine).  Folders hyb makes get mode 0700 and entries 0600, whatever the umask.
"""
from __future__ import annotations

import functools
import hashlib
import json
import os
import secrets
import stat
import warnings
from dataclasses import fields

from ..codegen.abi import AssertSite, CheckSite, PrintSite
from ..cachedir import configured, make_private, mkdir_private
from ..errors import HybridFloat64Warning, HybridWarning, Span
from ..target import host_cpu

FORMAT = b"hyb-cache-3\n"


def directory() -> str | None:
    """The cache folder, made (mode 0700) where it is missing; None when the cache is turned off,
    when the folder cannot be made, or when it is not the user's own (warned about once)."""
    d = configured()
    fd = None if d is None else _folder(d, create=True)
    if fd is None:
        return None
    os.close(fd)
    return d


# ---------------------------------------------------------------------- trust
_DIR = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_CLOEXEC", 0)
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_OWN_FOLDER = "point HYB_CACHE_DIR at a folder of your own"
_warned: set = set()  # the paths refused so far in this process


def user() -> int | None:
    """The uid the cache's folders and entries must belong to: the process's effective uid (None
    on a system without owners)."""
    return os.geteuid() if hasattr(os, "geteuid") else None


def _flaw(st: os.stat_result, path: str) -> tuple[str, str] | None:
    """What makes a folder or an entry of status ``st`` unsafe to use and how to mend it, or None."""
    uid = user()
    if uid is not None and st.st_uid != uid:
        return f"is owned by uid {st.st_uid}, not by you (uid {uid})", _OWN_FOLDER
    writers = [who for bit, who in ((stat.S_IWGRP, "its group"), (stat.S_IWOTH, "all users")) if st.st_mode & bit]
    if writers:
        return (f"can be written by {' and '.join(writers)} (mode {stat.S_IMODE(st.st_mode):04o})",
                f"chmod go-w {path}, or {_OWN_FOLDER}")
    return None


def _refuse(path: str, what: str, flaw: tuple[str, str]):
    """Warn (once per process and path) that ``path`` is not used."""
    if path in _warned:
        return
    _warned.add(path)
    if what == "entry":
        consequence = "hyb did not load it and compiles the kernel again"
    else:
        consequence = ("whoever can write there could run code in this process, so hyb neither loads nor "
                       "stores compiled code there; kernels are compiled in memory")
    warnings.warn(HybridWarning(f"hyb's disk cache {what} {path} {flaw[0]}: {consequence}", None, flaw[1]),
                  stacklevel=2)


def _link_flaw(path: str, name: str, dir_fd: int) -> tuple[str, str] | None:
    """The flaw of a name that could not be opened without following links: being a link."""
    try:
        if stat.S_ISLNK(os.lstat(name, dir_fd=dir_fd).st_mode):
            return "is a symbolic link", f"remove the link ({path}), or {_OWN_FOLDER}"
    except OSError:
        pass
    return None


def _checked(fd: int, path: str, what: str) -> int | None:
    """``fd`` when what it opened is safe to use, else None (closed, and the reason warned about)."""
    flaw = _flaw(os.fstat(fd), path)
    if flaw is None:
        return fd
    os.close(fd)
    _refuse(path, what, flaw)
    return None


def _folder(path: str, create: bool, parent: int | None = None) -> int | None:
    """An open descriptor of a cache folder that is the user's and that no one else can write, or
    None.  Without ``parent``, ``path`` is the cache folder itself (it may be a link to a folder
    of the user's; with ``create``, it and the folders missing above it are made); with it, the
    folder of that name in ``parent``, which must not be a link."""
    name = path if parent is None else os.path.basename(path)
    flags = _DIR if parent is None else _DIR | _NOFOLLOW
    try:
        try:
            fd = os.open(name, flags, dir_fd=parent)
        except FileNotFoundError:
            if not create:
                return None
            if parent is None:
                make_private(path)
            else:
                mkdir_private(name, parent)
            fd = os.open(name, flags, dir_fd=parent)
    except OSError:
        flaw = None if parent is None else _link_flaw(path, name, parent)
        if flaw is not None:
            _refuse(path, "folder", flaw)
        return None
    return _checked(fd, path, "folder")


def _entry_folder(k: str, create: bool) -> tuple[str, int] | None:
    """The path and an open descriptor of the (checked) folder of the entry with key ``k``, or None."""
    d = configured()
    root = None if d is None else _folder(d, create)
    if root is None:
        return None
    sub = os.path.join(d, k[:2])
    try:
        fd = _folder(sub, create, root)
    finally:
        os.close(root)
    return None if fd is None else (sub, fd)


@functools.cache
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
    """The record stored under key ``k``, or None (no entry, or one that is damaged, of another
    format or not safe to load: it is not trusted)."""
    data = _read(k)
    if data is None:
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
    if not code.object:
        return False
    header = json.dumps({f.name: _CODECS[f.name][0](getattr(code, f.name))
                         for f in fields(code) if f.name in _CODECS}).encode()
    rest = b"%016d" % len(header) + header + code.object
    data = FORMAT + hashlib.sha256(rest).hexdigest().encode() + b"\n" + rest
    try:
        folder = _entry_folder(k, create=True)
    except OSError:
        return False
    if folder is None:
        return False
    sub = folder[1]
    tmp = ".tmp-" + secrets.token_hex(8)
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW | getattr(os, "O_CLOEXEC", 0), 0o600,
                     dir_fd=sub)
        try:
            with os.fdopen(fd, "wb") as f:
                os.fchmod(f.fileno(), 0o600)  # (the umask may have taken the owner's bits)
                f.write(data)
            os.replace(tmp, k, src_dir_fd=sub, dst_dir_fd=sub)  # (a link in the way is replaced, not followed)
        except BaseException:
            os.unlink(tmp, dir_fd=sub)
            raise
    except OSError:
        return False
    finally:
        os.close(sub)
    return True


def _read(k: str) -> bytes | None:
    """The bytes of the entry with key ``k`` when it is a regular file that is safe to load, else None."""
    try:
        folder = _entry_folder(k, create=False)
    except OSError:
        return None
    if folder is None:
        return None
    path, sub = os.path.join(folder[0], k), folder[1]
    try:
        try:
            # (not blocking: a FIFO in an entry's place must not hang the process)
            fd = os.open(k, os.O_RDONLY | _NOFOLLOW | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0),
                         dir_fd=sub)
        except OSError:
            flaw = _link_flaw(path, k, sub)
            if flaw is not None:
                _refuse(path, "entry", flaw)
            return None
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            return None
        fd = _checked(fd, path, "entry")
        if fd is None:
            return None
        with os.fdopen(fd, "rb") as f:
            return f.read()
    except OSError:
        return None
    finally:
        os.close(sub)


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


# the warning classes an entry may name (a plain HybridWarning names none)
_WARNING_CLASSES = {c.__name__: c for c in (HybridFloat64Warning,)}


def _warning_to_json(w: HybridWarning) -> list:
    kind = type(w).__name__
    return [w.message, _span_to_json(w.span), w.hint] + ([kind] if kind in _WARNING_CLASSES else [])


def _warning_from_json(v) -> HybridWarning:
    return _WARNING_CLASSES.get(v[3] if len(v) > 3 else None, HybridWarning)(v[0], _span_from_json(v[1]), v[2])


def _text(v) -> str:
    if not isinstance(v, str):
        raise TypeError("not a text")
    return v


def _count(v) -> int:
    if isinstance(v, bool) or not isinstance(v, int):
        raise TypeError("not a count")
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
                 lambda v: tuple(_warning_from_json(x) for x in v)),
    "buffers": _LIST, "unfilled": _LIST, "sizes": _LIST, "conditions": _LIST,
    "tuned": (lambda v: v, _tuned_from_json),
    "parallel_work": _PAIRS, "unfilled_when": _PAIRS,
    "min_parallel_work": (int, _count),
    "staged": (lambda v: [[n, list(shape), dt] for n, shape, dt in v],
               lambda v: tuple((str(n), tuple(int(d) for d in shape), str(dt)) for n, shape, dt in v)),
}
NOT_STORED = ("object", "llvm_ir")
