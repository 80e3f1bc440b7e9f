"""``CustomOpBuilder``: C++ operators compiled with the system compiler and pybind11, as
MindSpore's ``ops.CustomOpBuilder``, for the CPU.

    my_ops = hyb.ops.CustomOpBuilder("my_ops", ["custom_src/function_ops.cpp"], backend="CPU").load()
    z = my_ops.mul(x, y)                       # hyb.Tensors in, a hyb.Tensor out, on the tape

The sources include ``hyb_extension.h`` (in :func:`include_dir`, on the include path) and
define ``PYBIND11_MODULE(HYB_EXTENSION_NAME, m)``.  ``load()`` compiles them into one Python
extension module with ``c++ -O2 -shared -fPIC -std=c++17`` (``$CXX`` when set), pybind11's and
Python's headers, and imports it.

Builds are cached by content: the key hashes the module name, every source and every local
header it includes with ``#include "..."``, the flags, ``hyb_extension.h``, the compiler, and
the versions of Python, pybind11 and hyb.  The module lives in
``<cache>/extensions/<name>-<key>/`` where ``<cache>`` is ``$HYB_CACHE_DIR`` (default
``$XDG_CACHE_HOME/hyb`` or ``~/.cache/hyb``), or in ``build_dir`` when given; an unchanged
build loads without running the compiler, a changed one rebuilds.  ``HYB_CACHE=0`` builds in a
temporary directory every time.  A failed build raises :class:`CustomOpBuildError` (a
``hyb.HybridCompileError``) pointing at the file and line of the compiler's first error, with the
compiler's whole output.
"""
from __future__ import annotations

import hashlib
import importlib.machinery
import importlib.util
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import sysconfig
import tempfile

from ..errors import HybridArgumentError, HybridCompileError, HybridTypeError, HybridUnsupportedError, Span

__all__ = ["CustomOpBuilder", "CustomOpBuildError", "include_dir"]

_HERE = os.path.dirname(os.path.abspath(__file__))
_INCLUDE = os.path.join(os.path.dirname(_HERE), "include")
_HEADER = "hyb_extension.h"
_BACKENDS_REFUSED = {
    "ascend": 'backend="Ascend" builds operators for Huawei Ascend NPUs (aclnn, CustomLaunchAclnn), which hyb '
              'does not target',
    "gpu": 'backend="GPU" is not provided by CustomOpBuilder',
}
_KWARGS = ("build_dir", "debug_mode", "include_paths")
_loaded: dict = {}          # key -> module, for this process


def include_dir() -> str:
    """The directory holding ``hyb_extension.h`` (pass it as ``-I`` to build by hand)."""
    return _INCLUDE


class CustomOpBuildError(HybridCompileError):
    """A C++ build failed.  ``span`` is the place of the compiler's first error (None for link
    errors), ``compiler_output`` its whole output and ``command`` the command line."""

    def __init__(self, message, span=None, hint=None, compiler_output: str = "", command=()):
        self.compiler_output = compiler_output
        self.command = list(command)
        super().__init__(message, span, hint)

    def render(self) -> str:
        text = super().render()
        out = self.compiler_output.rstrip()
        if out:
            lines = out.splitlines()
            if len(lines) > 60:
                lines = lines[:60] + [f"... ({len(lines) - 60} more lines)"]
            text += "\ncompiler output:\n" + "\n".join("  " + line for line in lines)
        return text


class CustomOpBuilder:
    """Build and load a C++ operator module (MindSpore's ``CustomOpBuilder``).

    ``name``: the module's name (an identifier; the sources use ``HYB_EXTENSION_NAME``).
    ``sources``: a path or a list of paths to C++ files; a relative path is looked for in the
    working directory, then beside the script that makes the builder.
    ``backend``: ``"CPU"`` (or None); ``"Ascend"`` and ``"GPU"`` raise ``HybridUnsupportedError``.
    ``cflags``, ``ldflags``: extra compiler / linker flags, a string or a list of strings.
    Keyword arguments: ``include_paths`` (directories added with ``-I``), ``build_dir`` (where
    the module is built, instead of the cache), ``debug_mode`` (``-O0 -g`` instead of ``-O2``).
    """

    def __init__(self, name, sources, backend="CPU", cflags=None, ldflags=None, **kwargs):
        unknown = [k for k in kwargs if k not in _KWARGS]
        if unknown:
            raise HybridArgumentError(f"CustomOpBuilder got an unknown argument `{unknown[0]}`", None,
                                      "it takes name, sources, backend, cflags, ldflags and " + ", ".join(_KWARGS))
        if not isinstance(name, str) or not name.isidentifier():
            raise HybridArgumentError(f"CustomOpBuilder: the module name {name!r} is not a Python identifier", None,
                                      'use letters, digits and underscores, e.g. "my_ops"')
        if backend is not None and not isinstance(backend, str):
            raise HybridTypeError(f"CustomOpBuilder: backend must be a string, got {type(backend).__name__}")
        kind = (backend or "CPU").lower()
        if kind in _BACKENDS_REFUSED:
            raise HybridUnsupportedError(f"CustomOpBuilder `{name}`: {_BACKENDS_REFUSED[kind]}", None,
                                         'build for the CPU: backend="CPU", with a C++ loop (or any CPU library) '
                                         "in place of aclnn calls")
        if kind != "cpu":
            raise HybridArgumentError(f"CustomOpBuilder `{name}`: unknown backend {backend!r}", None,
                                      'hyb builds for backend="CPU"')
        if isinstance(sources, (str, os.PathLike)):
            sources = [sources]
        if not isinstance(sources, (list, tuple)) or not sources:
            raise HybridArgumentError(f"CustomOpBuilder `{name}`: sources must be a path or a non-empty list of "
                                      "paths to C++ files")
        self.name = name
        self.backend = "CPU"
        caller = _caller_dir()
        self.sources = [_find_source(s, caller, name) for s in sources]
        self.cflags = _flags(cflags, "cflags")
        self.ldflags = _flags(ldflags, "ldflags")
        self.include_paths = [os.path.abspath(p) for p in (kwargs.get("include_paths") or [])]
        self.build_dir = kwargs.get("build_dir")
        self.debug_mode = bool(kwargs.get("debug_mode", False))
        self.path = None                     # the built module's file, after build()/load()

    def __repr__(self):
        return f"CustomOpBuilder({self.name!r}, {self.sources!r}, backend={self.backend!r})"

    # ------------------------------------------------------------------ building
    def _command(self, output: str) -> list:
        import pybind11
        cxx = cxx_compiler()
        opt = ["-O0", "-g"] if self.debug_mode else ["-O2"]
        cmd = [cxx, *opt, "-shared", "-fPIC", "-std=c++17", "-fvisibility=hidden",
               f"-DHYB_EXTENSION_NAME={self.name}", "-I", _INCLUDE]
        for p in self.include_paths:
            cmd += ["-I", p]
        cmd += ["-I", pybind11.get_include()]
        for key in ("include", "platinclude"):
            p = sysconfig.get_paths().get(key)
            if p and p not in cmd:
                cmd += ["-I", p]
        cmd += self.cflags + self.sources + ["-o", output]
        if sys.platform == "darwin":
            cmd += ["-undefined", "dynamic_lookup"]
        return cmd + self.ldflags

    def _key(self) -> str:
        import pybind11

        from ..version import __version__
        files = {}
        search = [_INCLUDE] + self.include_paths
        for src in self.sources:
            _hash_with_includes(src, search, files)
        parts = {
            "name": self.name, "files": files, "cflags": self.cflags, "ldflags": self.ldflags,
            "include_paths": self.include_paths, "debug": self.debug_mode, "cxx": cxx_compiler(),
            "python": sys.version, "ext": _suffix(), "pybind11": pybind11.__version__, "hyb": __version__,
            "platform": sys.platform,
        }
        return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()

    def build(self) -> str:
        """Compile the module unless an identical build exists; return the path of its file."""
        _need_pybind11()
        key = self._key()
        base = self.build_dir
        if base is None:
            from ..runtime import cache as _cache
            cache_dir = _cache.directory()
            base = os.path.join(cache_dir, "extensions") if cache_dir else None

        def compile_to(tmp):
            cmd = self._command(tmp)
            proc = subprocess.run(cmd, capture_output=True, text=True)
            if proc.returncode != 0:
                raise _build_error(self.name, cmd, proc.stdout + proc.stderr, self.sources)

        self.path = build_file(None if base is None else os.path.abspath(base), self.name, key,
                               self.name + _suffix(), _suffix(), "ext", compile_to)
        return self.path

    def load(self):
        """Build if needed, import the module and return it."""
        key = None
        try:
            key = self._key()
        except OSError:
            pass
        if key is not None and key in _loaded:
            self.path = _loaded[key].__file__
            return _loaded[key]
        path = self.build()
        module = _import(self.name, path)
        if key is not None:
            _loaded[key] = module
        return module


# ---------------------------------------------------------------------- helpers
def build_file(base, name: str, key: str, filename: str, suffix: str, kind: str, compile_to) -> str:
    """The path of ``filename`` in ``<base>/<name>-<key[:16]>/``, built there by
    ``compile_to(path)`` unless an earlier build left it; without ``base`` (no cache), or where
    that folder cannot be made, built in a new temporary folder (``hyb-<kind>-<name>-...``).
    ``compile_to`` writes a temporary file beside it (a name ending in ``suffix``), renamed into
    place once it succeeds: a build that fails or is interrupted leaves nothing behind, and
    concurrent builds never see a half-written file."""
    out_dir = None
    if base is not None:
        out_dir = os.path.join(base, f"{name}-{key[:16]}")
        final = os.path.join(out_dir, filename)
        if os.path.exists(final):
            return final
        try:
            os.makedirs(out_dir, exist_ok=True)
        except OSError:
            out_dir = None
    if out_dir is None:
        out_dir = tempfile.mkdtemp(prefix=f"hyb-{kind}-{name}-")
        final = os.path.join(out_dir, filename)
    fd, tmp = tempfile.mkstemp(prefix=f".{name}-", suffix=suffix, dir=out_dir)
    os.close(fd)
    try:
        compile_to(tmp)
        os.replace(tmp, final)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return final


def _need_pybind11():
    try:
        import pybind11  # noqa: F401
    except ImportError:
        raise HybridUnsupportedError("CustomOpBuilder needs pybind11, which is not installed", None,
                                     "pip install pybind11") from None


def cxx_compiler(who: str = "CustomOpBuilder", hint: str = "", names=("c++", "g++", "clang++")) -> str:
    """The C++ compiler: $CXX, else the first of ``names`` on PATH."""
    cxx = os.environ.get("CXX")
    if cxx:
        return cxx
    for name in names:
        path = shutil.which(name)
        if path:
            return path
    raise HybridUnsupportedError(f"{who} found no C++ compiler ({', '.join(names[:-1])} or {names[-1]})", None,
                                 "install one (e.g. apt-get install g++) or set $CXX" + hint)


def _suffix() -> str:
    return sysconfig.get_config_var("EXT_SUFFIX") or importlib.machinery.EXTENSION_SUFFIXES[0]


def _flags(value, what) -> list:
    if value is None:
        return []
    if isinstance(value, str):
        return shlex.split(value)
    if isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
        return list(value)
    raise HybridTypeError(f"CustomOpBuilder: {what} must be a string or a list of strings, got {value!r}")


def _caller_dir():
    """The directory of the script that made the builder (outside hyb)."""
    hyb_root = os.path.dirname(_HERE)
    frame = sys._getframe(1)
    while frame is not None:
        f = os.path.abspath(frame.f_code.co_filename)
        if not f.startswith(hyb_root + os.sep) and os.path.exists(f):
            return os.path.dirname(f)
        frame = frame.f_back
    return None


def _find_source(path, caller_dir, name) -> str:
    path = os.fspath(path)
    candidates = [os.path.abspath(path)]
    if caller_dir and not os.path.isabs(path):
        candidates.append(os.path.join(caller_dir, path))
    for c in candidates:
        if os.path.isfile(c):
            return os.path.normpath(c)
    raise HybridArgumentError(f"CustomOpBuilder `{name}`: source file {path!r} not found", None,
                              "a relative path is looked for in the working directory, then beside the "
                              "calling script")


_LOCAL_INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"', re.M)


def _hash_with_includes(path, search, files: dict):
    """Record the sha256 of ``path`` and, recursively, of the local headers it includes."""
    path = os.path.normpath(path)
    if path in files:
        return
    with open(path, "rb") as f:
        data = f.read()
    files[path] = hashlib.sha256(data).hexdigest()
    for inc in _LOCAL_INCLUDE.findall(data.decode("utf-8", "replace")):
        for d in [os.path.dirname(path)] + search:
            p = os.path.join(d, inc)
            if os.path.isfile(p):
                _hash_with_includes(p, search, files)
                break


# g++/clang++ (``file:line:col: error: msg``) and nvcc (``file(line): error: msg``) diagnostics.
DIAGNOSTICS = (
    re.compile(r"^(?P<file>[^\s:][^:]*):(?P<line>\d+):(?:(?P<col>\d+):)?\s*(?:fatal )?error:\s*(?P<msg>.*)$", re.M),
    re.compile(r"^(?P<file>[^\s(][^(]*)\((?P<line>\d+)\)(?P<col>):\s*(?:fatal )?error:\s*(?P<msg>.*)$", re.M),
)


def first_diagnostic(output: str, sources) -> tuple:
    """``(span, message)`` of the compiler's first error in one of ``sources`` (else its first
    error anywhere); ``(None, None)`` when the output has none."""
    diags = sorted([m for pattern in DIAGNOSTICS for m in pattern.finditer(output)], key=lambda m: m.start())
    own = [d for d in diags if os.path.normpath(os.path.abspath(d["file"])) in sources]
    first = (own or diags or [None])[0]
    if first is None:
        return None, None
    fname, line, col = first["file"], int(first["line"]), int(first["col"] or 1)
    source_line = ""
    try:
        with open(fname, encoding="utf-8", errors="replace") as f:
            for i, text in enumerate(f, 1):
                if i == line:
                    source_line = text.rstrip("\n")
                    break
    except OSError:
        pass
    return Span(fname, line, col, line, col + 1, source_line), first["msg"]


def _build_error(name, cmd, output, sources) -> CustomOpBuildError:
    """The error for a failed build: at the first error in one of the sources (else the first
    error anywhere), with the compiler's output."""
    span, msg = first_diagnostic(output, sources)
    if msg is not None:
        message = f"building C++ operator module `{name}` failed: {msg}"
    else:
        message = f"building C++ operator module `{name}` failed (the compiler or linker exited with an error)"
    return CustomOpBuildError(message, span, "command: " + " ".join(shlex.quote(c) for c in cmd),
                              compiler_output=output, command=cmd)


def _import(name, path):
    loader = importlib.machinery.ExtensionFileLoader(name, path)
    spec = importlib.util.spec_from_file_location(name, path, loader=loader)
    try:
        module = importlib.util.module_from_spec(spec)
        loader.exec_module(module)
    except ImportError as e:
        raise HybridArgumentError(f"the C++ operator module `{name}` built but does not load: {e}", None,
                                  "define the module with PYBIND11_MODULE(HYB_EXTENSION_NAME, m) { ... }") from None
    return module
