"""Compiling aot operators' sources: ``func="path/add.cc:CustomAdd"`` (``.cc``, ``.cpp``, ``.cxx``,
``.c``) with the C++ compiler, ``.cu`` with ``nvcc``, into a shared library in hyb's cache; and
hyb's own runtime library for aot operators (``aot_runtime.cc``: the ``AotExtra`` objects).

The commands are ``g++ -O2 -std=c++17 -shared -fPIC -I<source's dir> -I<hyb include> src -o lib``
(``$CXX`` when set) and ``nvcc --shared -Xcompiler -fPIC -O3 -std=c++17 -I... src -o lib``; hyb's
include directory holds ``custom_aot_extra.h``.  A library is cached by content: its key hashes
the command, the source and the local headers it includes (``#include "..."``), hyb's
``custom_aot_extra.h``, the compiler's version and hyb's version.  It lives in
``<cache>/aot/<name>-<key>/`` where ``<cache>`` is ``$HYB_CACHE_DIR`` (see ``hyb.runtime.cache``),
written to a temporary file and renamed into place, so that a build that fails or is interrupted
leaves nothing behind and concurrent builds do not see half-written files.  ``HYB_CACHE=0``
builds in a temporary directory every time.  hyb says on stderr what it compiles (a compile may
take seconds); a failed build raises :class:`AotCompileError` at the source's file and line with
the compiler's output.
"""
from __future__ import annotations

import functools
import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
import sys

from ..errors import HybridUnsupportedError, Span
from .builder import CustomOpBuildError, _hash_with_includes, build_file, cxx_compiler, first_diagnostic, include_dir
from .values import refused

__all__ = ["AotCompileError", "SOURCE_SUFFIXES", "CUDA_SUFFIXES", "compile_source", "runtime_library"]

SOURCE_SUFFIXES = (".cc", ".cpp", ".cxx", ".c")
CUDA_SUFFIXES = (".cu",)
_HERE = os.path.dirname(os.path.abspath(__file__))
_RUNTIME_SOURCE = os.path.join(_HERE, "aot_runtime.cc")
_HEADER = "custom_aot_extra.h"


class AotCompileError(CustomOpBuildError):
    """Compiling an aot operator's source failed: ``span`` is the place of the compiler's first
    error, ``compiler_output`` its whole output and ``command`` the command line."""


def nvcc_compiler() -> str | None:
    return shutil.which("nvcc")


@functools.lru_cache(maxsize=None)
def _compiler_version(compiler: str) -> str:
    try:
        return subprocess.run([compiler, "--version"], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        return ""


def _command(source: str, output: str, cuda: bool) -> list:
    includes = ["-I", os.path.dirname(source), "-I", include_dir()]
    if cuda:
        return [nvcc_compiler(), "--shared", "-Xcompiler", "-fPIC", "-O3", "-std=c++17", *includes, source,
                "-o", output]
    compiler = cxx_compiler("hyb, compiling an aot operator's source,",
                            ', or give the path of a library you built ("./add.so:CustomAdd")', ("g++", "c++", "clang++"))
    return [compiler, "-O2", "-std=c++17", "-shared", "-fPIC", *includes, source, "-o", output]


def _key(source: str, cuda: bool) -> str:
    from ..version import __version__
    files: dict = {}
    _hash_with_includes(source, [os.path.dirname(source), include_dir()], files)
    with open(os.path.join(include_dir(), _HEADER), "rb") as f:
        header = hashlib.sha256(f.read()).hexdigest()
    cmd = _command(source, "<output>", cuda)
    parts = {"command": cmd, "files": files, "header": header, "compiler": _compiler_version(cmd[0]),
             "hyb": __version__, "platform": sys.platform}
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()


def compile_source(source: str, cuda: bool = False, quiet: bool = False) -> str:
    """Compile ``source`` into a shared library unless an identical build is cached; its path."""
    source = os.path.normpath(os.path.abspath(source))
    if cuda and nvcc_compiler() is None:
        raise HybridUnsupportedError(f"compiling {source} needs nvcc (the CUDA compiler), which is not on PATH",
                                     None, "install the CUDA toolkit, or build the library yourself and give "
                                     "its path (\"./add.so:CustomAdd\")")
    refuse_ascend_c(source)
    key = _key(source, cuda)
    stem = os.path.splitext(os.path.basename(source))[0]

    def compile_to(tmp):
        cmd = _command(source, tmp, cuda)
        if not quiet:
            print(f"hyb: compiling {source} with {os.path.basename(cmd[0])}", file=sys.stderr, flush=True)
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        except subprocess.TimeoutExpired:
            raise AotCompileError(f"compiling {source} took more than 10 minutes; hyb stopped the compiler", None,
                                  "command: " + shlex.join(cmd), command=cmd) from None
        if proc.returncode != 0:
            raise compile_error(source, cmd, proc.stdout + proc.stderr)

    from ..runtime import cache as _cache
    base = _cache.directory()
    return build_file(None if base is None else os.path.join(base, "aot"), stem, key, f"lib{stem}.so", ".so",
                      "aot", compile_to)


def runtime_library() -> str:
    """hyb's aot runtime library (built on first use, then cached like a user's source)."""
    return compile_source(_RUNTIME_SOURCE, quiet=True)


_ASCEND_C = re.compile(r'__aicore__|#\s*include\s*[<"]kernel_operator\.h[>"]')


def refuse_ascend_c(source: str):
    """An Ascend C kernel (``__aicore__`` functions, ``kernel_operator.h``) runs on Ascend NPUs
    only: refused at its first such line, before g++ would stop at it."""
    try:
        with open(source, encoding="utf-8", errors="replace") as f:
            lines = f.read().splitlines()
    except OSError:
        return
    for number, text in enumerate(lines, 1):
        m = _ASCEND_C.search(text)
        if m:
            raise refused(HybridUnsupportedError(
                f"{os.path.basename(source)} is an Ascend C kernel, which runs on Huawei Ascend NPUs; hyb does not "
                "target them", Span(source, number, m.start() + 1, number, m.end() + 1, text),
                "write the kernel as plain C++ for the CPU (the aot signature, see custom_aot_extra.h) or as a "
                'hybrid kernel (func_type="hybrid")'))


def compile_error(source, cmd, output) -> AotCompileError:
    """The error for a failed compile: at the first error in ``source`` (else the first anywhere)."""
    span, msg = first_diagnostic(output, [source])
    name = os.path.basename(source)
    if msg is not None:
        message = f"compiling aot operator source {name} failed: {msg}"
    else:
        message = f"compiling aot operator source {name} failed (the compiler or linker exited with an error)"
    return AotCompileError(message, span, "command: " + shlex.join(cmd), compiler_output=output, command=cmd)
