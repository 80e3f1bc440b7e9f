"""Ahead-of-time shared libraries with MindSpore's ``aot`` custom-operator signature.

A compiled kernel (one signature: shapes and dtypes fixed) becomes a shared library that
exports::

    extern "C" int NAME(int nparam, void **params, int *ndims, int64_t **shapes,
                        const char **dtypes, void *stream, void *extra);

``params`` holds the kernel's inputs in parameter order, then its outputs in return order,
each a pointer to a C-contiguous buffer; the caller allocates the outputs.  ``ndims``,
``shapes`` and ``dtypes`` describe every parameter; they are checked against the signature
the library was built for before anything is read.  ``stream`` and ``extra`` are unused
(CPU code).  The return value is 0, or one of :data:`RETURN_CODES`; after a non-zero
return, ``const char *NAME_last_error(void)`` (per thread) says what was wrong, and
``const char *NAME_signature(void)`` always gives the signature, e.g.
``add(a: float32[4, 8], b: float32[4, 8]) -> c: float32[4, 8]``.

How it is built: the kernel's optimised LLVM module (``i32 fn(ptr buffers..., ptr rt)``, see
:mod:`hyb.codegen.llvm`) is emitted as a position-independent object file for the host
CPU; a small generated C function checks the arguments, zeroes the outputs (outputs start
at zero), allocates the kernel's temporaries, fills the runtime block (:mod:`hyb.codegen.abi`)
and calls it (and defines the ``hybm_*`` names the kernel calls libm's functions by, see
:mod:`hyb.codegen.vecmath`); ``cc -shared`` links both, with libmvec where the kernel calls
vector math functions, exporting only the three symbols above.  For a CPU other than this
machine's, vector math calls are made one value at a time through libm.  Scalar parameters
are passed like tensors: a pointer to one value, described as a 0-d tensor (``ndims[i] ==
0``; ``ndims[i] == 1`` with ``shapes[i][0] == 1`` is accepted too).  An input the kernel
writes in place is never modified: the kernel works on the output it is returned as (or
on a private copy).
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

import llvmlite.binding as llvm
import numpy as np

from ..dsl import types
from ..errors import HybridArgumentError, HybridCompileError, HybridUnsupportedError
from . import jit, vecmath
from . import llvm as llvm_codegen
from .abi import RT_AXIS, RT_INDEX, AssertSite, PrintSite, block_length, runtime_block

#: The non-zero values the exported function returns.
RETURN_CODES = {
    1: "nparam is not the number of inputs plus outputs",
    2: "a dtype string does not match the signature",
    3: "a parameter has the wrong number of dimensions",
    4: "a parameter has the wrong shape",
    5: "a null pointer where a buffer, ndims, shapes or dtypes were expected",
    6: "out of memory for the kernel's temporaries",
    7: "an index computed at run time is out of bounds (nothing outside a buffer was touched)",
}

#: Target CPUs besides this machine's ("native"): any x86-64, or one of its micro-architecture levels.
CPUS = ("generic", "x86-64-v2", "x86-64-v3", "x86-64-v4")

# Dtype strings accepted for each dtype: its NumPy name and MindSpore's short names.
_ALIASES = {"float32": "float", "int32": "int", "uint32": "uint"}


@dataclass(frozen=True)
class AotParam:
    """One entry of ``params``: an input, a scalar input or an output."""

    name: str
    role: str  # "input", "scalar" or "output"
    dtype: str
    shape: tuple

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) * types.numpy_dtype(self.dtype).itemsize

    def __str__(self):
        if self.role == "scalar":
            return f"{self.name}: {self.dtype}"
        return f"{self.name}: {self.dtype}[{', '.join(map(str, self.shape))}]"


@dataclass(frozen=True)
class AotSignature:
    """What a library built for one compiled kernel expects."""

    kernel: str
    symbol: str
    params: tuple  # AotParam: inputs in parameter order, then outputs in return order

    @property
    def inputs(self) -> tuple:
        return tuple(p for p in self.params if p.role != "output")

    @property
    def outputs(self) -> tuple:
        return tuple(p for p in self.params if p.role == "output")

    def __str__(self):
        outs = ", ".join(map(str, self.outputs))
        return f"{self.kernel}({', '.join(map(str, self.inputs))}) -> {outs}"


def signature(typed, symbol: str | None = None) -> AotSignature:
    """The aot signature of a typed kernel (``CompiledKernel.typed``)."""
    params = []
    for n in typed.inputs:
        t = typed.tensors[n]
        role = "scalar" if t.kind == "param" else "input"
        params.append(AotParam(t.source_name or n, role, types.concrete(t.dtype), tuple(t.shape)))
    for n in typed.outputs:
        t = typed.tensors[n]
        params.append(AotParam(t.source_name or n, "output", types.concrete(t.dtype), tuple(t.shape)))
    return AotSignature(typed.name, symbol or typed.name, tuple(params))


def _c_string(text: str) -> str:
    out = []
    for ch in text:
        if ch in '"\\':
            out.append("\\" + ch)
        elif ch == "\n":
            out.append("\\n")
        elif 32 <= ord(ch) < 127:
            out.append(ch)
        else:
            out.extend(f"\\{b:03o}" for b in ch.encode("utf-8"))
    return '"' + "".join(out) + '"'


_WRAPPER_HELPERS = r"""
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct param {
    const char *name, *dtype, *alias;
    int ndim;               /* 0 for scalars and 0-d tensors */
    const int64_t *shape;
    int64_t nbytes;
};

static __thread char last_error[512];

static int fail(int code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_error, sizeof last_error, fmt, ap);
    va_end(ap);
    return code;
}

static const char *shape_text(char *buf, size_t size, int ndim, const int64_t *shape) {
    size_t used = (size_t)snprintf(buf, size, "[");
    for (int d = 0; d < ndim && used < size; d++)
        used += (size_t)snprintf(buf + used, size - used, d ? ", %lld" : "%lld", (long long)shape[d]);
    if (used < size) snprintf(buf + used, size - used, "]");
    return buf;
}

/* 0, or the return code for the first way parameter i differs from p. */
static int check_param(int i, const struct param *p, int *ndims, int64_t **shapes, const char **dtypes) {
    char got[160], want[160];
    const char *dt = dtypes[i];
    if (!dt || (strcmp(dt, p->dtype) != 0 && (!p->alias || strcmp(dt, p->alias) != 0)))
        return fail(2, "parameter %d (`%s`): dtype %s, expected %s", i, p->name, dt ? dt : "(null)", p->dtype);
    if (p->ndim == 0) {
        int one = ndims[i] == 1 && shapes && shapes[i] && shapes[i][0] == 1;
        if (ndims[i] != 0 && !one)
            return fail(3, "parameter %d (`%s`): %d dimensions, expected a scalar (0 dimensions)", i, p->name,
                        ndims[i]);
        return 0;
    }
    if (ndims[i] != p->ndim)
        return fail(3, "parameter %d (`%s`): %d dimensions, expected %d", i, p->name, ndims[i], p->ndim);
    if (!shapes || !shapes[i])
        return fail(5, "parameter %d (`%s`): shapes[%d] is NULL", i, p->name, i);
    for (int d = 0; d < p->ndim; d++)
        if (shapes[i][d] != p->shape[d])
            return fail(4, "parameter %d (`%s`): shape %s, expected %s", i, p->name,
                        shape_text(got, sizeof got, ndims[i], shapes[i]), shape_text(want, sizeof want, p->ndim,
                                                                                     p->shape));
    return 0;
}

static int64_t thread_count(int64_t built_with) {
    if (built_with > 0) return built_with;
    const char *env = getenv("HYB_NUM_THREADS");
    if (env && *env) {
        long n = strtol(env, NULL, 10);
        if (n > 0) return n;
    }
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    return cpus > 0 ? cpus : 1;
}
"""


def wrapper_source(typed, sig: AotSignature, check_sites: list, kernel_symbol: str, threads: int | None,
                   origin: str = "", *, buffers, staged=()) -> str:
    """The C source of the exported function for a typed kernel whose code is ``kernel_symbol``;
    ``buffers``: the tensors that code takes, in order (the compiled kernel's ``buffers``);
    ``staged``: its temporaries as the code has them, ``(name, shape, dtype)`` each (a stage may
    have added or reshaped one)."""
    order = list(buffers)
    n_in = len(typed.inputs)
    n_par = len(sig.params)
    s = sig.symbol
    lines = [f"/* Generated by hyb{' from ' + origin if origin else ''}: {sig}. */", _WRAPPER_HELPERS]
    lines.append(f"int32_t {kernel_symbol}({', '.join(['void *'] * len(order) + ['int64_t *'])});\n")
    for i, p in enumerate(sig.params):
        if p.shape:
            lines.append(f"static const int64_t shape_{i}[] = {{{', '.join(map(str, p.shape))}}};")
    entries = []
    for i, p in enumerate(sig.params):
        alias = _ALIASES.get(p.dtype)
        entries.append(f"    {{{_c_string(p.name)}, {_c_string(p.dtype)}, {_c_string(alias) if alias else 'NULL'}, "
                       f"{len(p.shape)}, {f'shape_{i}' if p.shape else 'NULL'}, {p.nbytes}}},")
    lines.append(f"static const struct param PARAMS[{n_par}] = {{\n" + "\n".join(entries) + "\n};")
    sites = [(f"assertion failed: {x.message}" if isinstance(x, AssertSite) else
              f"`{x.tensor}` (shape {tuple(x.shape)})") + (f" at {x.span}" if x.span else "") for x in check_sites]
    asserts = [str(int(isinstance(x, AssertSite))) for x in check_sites]
    lines.append(f"static const char *const SITES[] = {{{', '.join(_c_string(t) for t in sites) or '0'}}};")
    lines.append(f"static const char ASSERTS[] = {{{', '.join(asserts) or '0'}}};")
    lines.append(f"""
const char *{s}_signature(void) {{ return {_c_string(str(sig))}; }}

const char *{s}_last_error(void) {{ return last_error; }}

int {s}(int nparam, void **params, int *ndims, int64_t **shapes, const char **dtypes, void *stream, void *extra) {{
    (void)stream;
    (void)extra;
    last_error[0] = 0;
    if (nparam != {n_par})
        return fail(1, "{s}: %d parameters, expected {n_par} ({_count(n_in, 'input')}, then {_count(n_par - n_in, 'output')})",
                    nparam);
    if (!params || !ndims || !dtypes)
        return fail(5, "{s}: params, ndims or dtypes is NULL");
    for (int i = 0; i < {n_par}; i++) {{
        int code = check_param(i, &PARAMS[i], ndims, shapes, dtypes);
        if (code) return code;
        if (!params[i] && PARAMS[i].nbytes > 0)
            return fail(5, "parameter %d (`%s`) is NULL", i, PARAMS[i].name);
    }}
    void *buf[{len(order)}];""")
    body, after, owned = _buffer_plan(typed, order, sig, {n: (shape, dt) for n, shape, dt in staged})
    lines.extend("    " + b for b in body)
    if owned:
        cond = " || ".join(f"!buf[{k}]" for k in owned)
        frees = " ".join(f"free(buf[{k}]);" for k in owned)
        lines.append(f"    if ({cond}) {{\n        {frees}\n        return fail(6, \"{s}: out of memory\");\n    }}")
    block = ", ".join(map(str, runtime_block(f"thread_count({int(threads or 0)})")))
    lines.append(f"    int64_t rt[{block_length()}] = {{{block}}};")
    args = ", ".join([f"buf[{k}]" for k in range(len(order))] + ["rt"])
    lines.append(f"    int32_t status = {kernel_symbol}({args});")
    if owned:
        lines.append("    " + " ".join(f"free(buf[{k}]);" for k in owned))
    lines.append("    if (status && ASSERTS[status - 1])")
    lines.append(f"        return fail(8, \"{s}: %s\", SITES[status - 1]);")
    lines.append("    if (status)")
    lines.append(f"        return fail(7, \"{s}: index %lld is out of bounds for axis %lld of %s\", "
                 f"(long long)rt[{RT_INDEX}], (long long)rt[{RT_AXIS}], SITES[status - 1]);")
    lines.extend("    " + a for a in after)
    lines.append("    return 0;\n}\n")
    return "\n".join(lines)


def _count(n: int, what: str) -> str:
    return f"{n} {what}{'s' if n != 1 else ''}"


def _buffer_plan(typed, order: list, sig: AotSignature, staged: dict):
    """C statements that set ``buf[k]`` for every buffer of the kernel (before the call), the
    copies made after it, and the indices of the buffers the wrapper allocates."""
    n_in = len(typed.inputs)
    written = typed.written
    out_index: dict = {}  # tensor -> first params index returning it
    for j, name in enumerate(typed.outputs):
        out_index.setdefault(name, n_in + j)
    body, after, owned = [], [], []
    for k, name in enumerate(order):
        t = typed.tensors.get(name)
        shape, dtype = staged.get(name) or (t.shape, t.dtype)
        nbytes = int(np.prod(shape, dtype=np.int64)) * types.numpy_dtype(dtype).itemsize
        label = (t.source_name if t is not None else "") or name
        if k < n_in:
            if name in written and name in out_index:
                o = out_index[name]
                body.append(f"/* `{label}` is written in place: the kernel updates output {o}, a copy of it */")
                body.append(f"if (params[{o}] != params[{k}]) memcpy(params[{o}], params[{k}], {nbytes});")
                body.append(f"buf[{k}] = params[{o}];")
            elif name in written:
                body.append(f"/* `{label}` is written in place but not returned: the kernel updates a copy */")
                body.append(f"buf[{k}] = malloc({max(nbytes, 1)});")
                body.append(f"if (buf[{k}]) memcpy(buf[{k}], params[{k}], {nbytes});")
                owned.append(k)
            else:
                body.append(f"buf[{k}] = params[{k}];  /* `{label}` */")
        elif name in out_index:
            o = out_index[name]
            body.append(f"memset(params[{o}], 0, {nbytes});  /* output `{label}` starts at zero */")
            body.append(f"buf[{k}] = params[{o}];")
        else:
            body.append(f"buf[{k}] = calloc(1, {max(nbytes, 1)});  /* temporary `{label}` */")
            owned.append(k)
    # Outputs that repeat another output, or return an input unchanged, are copies.
    for j, name in enumerate(typed.outputs):
        o = n_in + j
        src = None
        if name in typed.inputs and name not in written:
            src = f"params[{typed.inputs.index(name)}]"
        elif out_index[name] != o:
            src = f"params[{out_index[name]}]"
        if src is not None:
            after.append(f"if (params[{o}] != {src}) memcpy(params[{o}], {src}, {sig.params[o].nbytes});")
    return body, after, owned


def object_code(llvm_ir: str, function: str, rename: str, cpu: str | None = None) -> bytes:
    """A position-independent object file of an optimised kernel module, its function renamed
    ``rename`` and every function hidden (the wrapper is the only thing the library exports)."""
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    mod = llvm.parse_assembly(llvm_ir)
    fn = mod.get_function(function)
    fn.name = rename
    for f in mod.functions:
        if not f.is_declaration:
            f.visibility = "hidden"
    target = llvm.Target.from_triple(mod.triple or llvm.get_process_triple())
    if cpu in (None, "native", "host"):
        cpu_name, features = llvm.get_host_cpu_name(), llvm.get_host_cpu_features().flatten()
    elif cpu in CPUS:
        cpu_name, features = cpu, ""
    else:  # LLVM aborts the process on a CPU it does not know
        raise HybridArgumentError(f"unknown target CPU `{cpu}`", None, "use one of: native, " + ", ".join(CPUS))
    tm = target.create_target_machine(cpu=cpu_name, features=features, opt=3, reloc="pic", codemodel="default")
    return tm.emit_object(mod)


def find_c_compiler(cc: str | None = None) -> str:
    cc = cc or os.environ.get("CC") or "cc"
    path = shutil.which(cc)
    if path is None:
        raise HybridCompileError(f"no C compiler `{cc}` to link the shared library", None,
                                 "install gcc or clang, or name one with CC=... (or --cc)")
    return path


def build_library(compiled, output, symbol: str | None = None, *, cc: str | None = None, cpu: str | None = None,
                  keep: str | os.PathLike | None = None, origin: str = "") -> AotSignature:
    """Write a shared library for ``compiled`` (a :class:`~hyb.runtime.compiler.CompiledKernel`)
    to ``output``; returns its signature.  ``keep`` names a folder for the generated C file and
    object (kept for reading); ``cpu`` a target CPU other than this machine's (``"generic"``)."""
    typed = compiled.typed
    symbol = symbol or typed.name
    if not re.fullmatch(r"[A-Za-z_]\w*", symbol):
        raise HybridArgumentError(f"`{symbol}` is not a C identifier", None, "name the exported function, e.g. add")
    printed = [s for s in compiled.check_sites if isinstance(s, PrintSite)]
    if printed:
        raise HybridUnsupportedError("print() in a kernel built into an aot library is not supported",
                                     printed[0].span, "remove the print, or debug the kernel in Python first")
    sig = signature(typed, symbol)
    inner = f"{symbol}__hyb_kernel"
    threads = compiled.options.threads
    llvm_opt = compiled.llvm_opt
    if vecmath.calls_variants(llvm_opt) and cpu not in (None, "native", "host"):
        # the vector math variants were chosen for this machine's ISA: another CPU gets libm's calls
        llvm_opt = str(jit.optimize(vecmath.without_variants(compiled.llvm_ir)))
    c_text = (wrapper_source(typed, sig, compiled.check_sites, inner, threads, origin, buffers=compiled.buffers,
                             staged=compiled.code.staged)
              + vecmath.c_definitions(llvm_opt))
    obj = object_code(llvm_opt, llvm_codegen.function_name(typed), inner, cpu)
    compiler = find_c_compiler(cc)
    parallel = re.search(r"@(GOMP_|omp_)", llvm_opt) is not None
    mvec = vecmath.library() if vecmath.calls_variants(llvm_opt) else None
    output = Path(output)
    with tempfile.TemporaryDirectory(prefix="hyb-aot-") as tmp:
        work = Path(tmp)
        (work / "wrapper.c").write_text(c_text)
        (work / "kernel.o").write_bytes(obj)
        (work / "exports.map").write_text(
            "{\n  global: " + " ".join(f"{symbol}{x};" for x in ("", "_signature", "_last_error")) +
            "\n  local: *;\n};\n")
        cmd = [compiler, "-shared", "-fPIC", "-O2", "-o", str(work / "lib.so"), str(work / "wrapper.c"),
               str(work / "kernel.o"), f"-Wl,--version-script={work / 'exports.map'}", "-Wl,-z,noexecstack", "-lm"]
        if parallel:
            cmd.insert(1, "-fopenmp")
        if mvec:
            cmd.append("-l:" + mvec)
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode != 0:
            raise HybridCompileError(f"linking the shared library failed ({' '.join(cmd)}):\n{done.stderr.strip()}",
                                     None, "set CC to another C compiler, or report this as a hyb bug")
        if keep is not None:
            keep = Path(keep)
            keep.mkdir(parents=True, exist_ok=True)
            shutil.copy(work / "wrapper.c", keep / f"{symbol}_wrapper.c")
            shutil.copy(work / "kernel.o", keep / f"{symbol}_kernel.o")
        output.parent.mkdir(parents=True, exist_ok=True)
        tmp_out = output.with_name(output.name + ".tmp")
        shutil.copy(work / "lib.so", tmp_out)
        os.replace(tmp_out, output)  # a process that has the old library loaded keeps it intact
    return sig
