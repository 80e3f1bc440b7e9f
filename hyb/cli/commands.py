"""What each `hyb` subcommand does.  Each ``cmd_*`` takes the parsed arguments and returns
the exit status: 0 done, 1 an error in a kernel or while compiling (reported in compiler
format), 2 a mistake on the command line (:class:`UsageError`, raised to :func:`main`)."""
from __future__ import annotations

import difflib
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from ..errors import HybridError
from ..runtime.kernel import compile_source, load
from ..dsl import highlight
from ..dsl.lint import lint, prints
from ..dsl.stages import STAGES
from .argspec import UsageError, bind, check_usage, parse_spec, parse_value
from .progress import Progress

# `inspect` stages `hyb compile --emit` accepts, and the file suffix each is written with.
STAGE_SUFFIX = {s.name: s.suffix for s in STAGES}


# ---------------------------------------------------------------- output

def use_color(stream, mode: str) -> bool:
    """Colour for ``--color=auto`` only on a terminal, and never with NO_COLOR set or TERM=dumb."""
    if mode == "always":
        return True
    if mode == "never":
        return False
    if os.environ.get("NO_COLOR") or os.environ.get("TERM") == "dumb":
        return False
    return bool(getattr(stream, "isatty", lambda: False)())


def report(text: str, args=None):
    """Write a diagnostic (an error or warning in compiler format) to stderr."""
    mode = getattr(args, "color", "auto") if args is not None else "auto"
    print(highlight.diagnostic(text) if use_color(sys.stderr, mode) else text, file=sys.stderr)


def emit(text: str, lang: str | None, args):
    """Write ``text`` to stdout, coloured as ``lang`` when stdout is a terminal."""
    if lang and use_color(sys.stdout, args.color):
        text = highlight.ansi(text, lang)
    sys.stdout.write(text if text.endswith("\n") else text + "\n")


# ---------------------------------------------------------------- kernels and signatures

def kernel_options(args) -> dict:
    """The kernel options given by --fastmath, --schedule and --threads."""
    from ..errors import HybridArgumentError
    from ..schedule.options import parse_options

    opts = {}
    if getattr(args, "fastmath", False):
        opts["fastmath"] = True
    sched = getattr(args, "schedule", None)
    if sched is not None:
        if sched.lstrip().startswith("{"):
            import json
            try:
                sched = json.loads(sched)
            except json.JSONDecodeError as e:
                raise UsageError(f"--schedule is not valid JSON: {e}",
                                 "e.g. --schedule '{\"tile\": [32, 64], \"parallel\": false}'") from None
        try:
            opts["schedule"] = parse_options(sched)  # parsed once: the kernels take the record
        except HybridArgumentError as e:
            raise UsageError(f"--schedule: {e.message}", e.hint) from None
    threads = getattr(args, "threads", None)
    if threads is not None:
        if threads < 1:
            raise UsageError(f"--threads {threads}: give a positive number of threads")
        opts["threads"] = threads
    return opts


def load_module(path: str, args):
    """The kernels of a .hyb file (a missing file or a syntax error is an error in the kernel: exit 1)."""
    options = kernel_options(args)
    if path.endswith((".npy", ".npz")):
        raise UsageError(f"{path} is an input, not a kernel file",
                         "give the kernel file (.hyb) first or anywhere among the inputs, e.g. "
                         "`hyb run kernels.hyb x.npy`")
    try:
        return load(path, **options)
    except OSError as e:
        raise HybridError(f"cannot read {path}: {e.strerror or e}") from None
    except UnicodeDecodeError:
        raise HybridError(f"cannot read {path}: it is not a text file (a .hyb file is UTF-8 text)") from None


def select_kernel(mod, name: str | None, path: str):
    """The kernel ``--kernel`` names, or the file's only kernel."""
    names = list(mod.kernels)
    if name is not None:
        if name not in mod.kernels:
            close = difflib.get_close_matches(name, names, 1)
            hint = (f"did you mean `{close[0]}`? " if close else "") + f"{path} defines: {', '.join(names) or 'nothing'}"
            raise UsageError(f"{path} has no kernel `{name}`", hint)
        return mod.kernels[name]
    if not names:
        raise UsageError(f"{path} defines no kernel")
    if len(names) > 1:
        raise UsageError(f"{path} defines {len(names)} kernels ({', '.join(names)}): choose one with --kernel",
                         f"e.g. --kernel {names[0]}")
    return mod.kernels[names[0]]


def spec_text(args) -> str | None:
    return " ".join(args.args) if getattr(args, "args", None) else None


def argument_types(kernel, args, need=None) -> dict:
    """``name -> ArgType`` from ``--args`` for the kernel's parameters (all of them, or ``need``)."""
    text = spec_text(args)
    if text is None:
        wanted = kernel.params if need is None else need
        example = " ".join(f"{p}=float32[...]" for p in wanted)
        what = "its arguments" if need is None else ", ".join(f"`{p}`" for p in wanted)
        raise UsageError(f"kernel `{kernel.name}` needs the types of {what}: pass --args",
                         f"e.g. --args \"{example}\"")
    return bind(parse_spec(text), kernel, text, need=need)


def compile_for(kernel, types: dict, progress: Progress):
    progress.step("isl and LLVM")
    return kernel.compile(*[types[p].placeholder() for p in kernel.params])


def describe_types(kernel, types: dict) -> str:
    return " ".join(f"{p}={types[p]}" for p in kernel.params)


# ---------------------------------------------------------------- check

def cmd_check(args) -> int:
    status = 0
    for path in args.files:
        try:
            mod = load_module(path, args)
        except HybridError as e:
            report(e.render(), args)
            status = 1
            continue
        if spec_text(args) is None:
            # without a signature: everything that needs no shapes or dtypes
            found = lint(mod.module)
            for e in found:
                report(e.render(), args)
            if found:
                status = 1
                continue
            print(f"{path}: {len(mod.kernels)} kernel(s) checked without a signature: {', '.join(mod.kernels)} "
                  "(give --args to type-check and compile one)")
            for name, span in prints(mod.module):
                print(f"{span}: note: kernel `{name}` prints (in emulate() and on the CPU; its prints keep "
                      "their order, so the loops around them stay in order and off the threads)")
            continue
        kernel = select_kernel(mod, args.kernel, path)
        found = lint(mod.module, {kernel.name})  # every name and spelling mistake, before the first type error
        for e in found:
            report(e.render(), args)
        if found:
            status = 1
            continue
        types = argument_types(kernel, args)
        try:
            with Progress(f"checking {kernel.name}") as p:
                ck = compile_for(kernel, types, p)
        except HybridError as e:
            report(e.render(), args)
            status = 1
            continue
        print(f"{path}: kernel `{kernel.name}` checked and compiled for {describe_types(kernel, types)}")
        for decision in ck.plan.decisions:
            if decision.startswith("dependence analysis stopped"):
                print(f"{path}: note: kernel `{kernel.name}`: {decision}")
    if args.werror and args.warnings_seen and status == 0:
        report(f"hyb: error: {args.warnings_seen} warning(s), and --werror", args)
        status = 1
    return status


# ---------------------------------------------------------------- compile

def parse_stages(values: list) -> list:
    stages = []
    for value in values or ["loops"]:
        for stage in filter(None, re.split(r"[,\s]+", value)):
            if stage not in STAGE_SUFFIX:
                close = difflib.get_close_matches(stage, list(STAGE_SUFFIX), 1)
                raise UsageError(f"unknown stage `{stage}` for --emit",
                                 (f"did you mean `{close[0]}`? " if close else "") + "stages: " + " ".join(STAGE_SUFFIX))
            if stage not in stages:
                stages.append(stage)
    return stages


def output_paths(out: str | None, stages: list, kernel: str) -> dict:
    """Where each stage goes: None for stdout.  One stage goes to OUT itself; several to
    OUT<suffix> each (a suffix of a stage already on OUT is dropped first); a folder (one that
    exists, or OUT ending in /) gets <kernel><suffix> files."""
    if out is None or out == "-":
        return dict.fromkeys(stages)
    if out.endswith(("/", os.sep)) or Path(out).is_dir():
        return {s: Path(out) / f"{kernel}{STAGE_SUFFIX[s]}" for s in stages}
    if len(stages) == 1:
        return {stages[0]: Path(out)}
    stem = out
    for suffix in sorted(STAGE_SUFFIX.values(), key=len, reverse=True):
        if stem.endswith(suffix) and len(stem) > len(suffix):
            stem = stem[:-len(suffix)]
            break
    return {s: Path(stem + STAGE_SUFFIX[s]) for s in stages}


def cmd_compile(args) -> int:
    stages = parse_stages(args.emit)
    mod = load_module(args.file, args)
    kernel = select_kernel(mod, args.kernel, args.file)
    types = argument_types(kernel, args)
    paths = output_paths(args.output, stages, kernel.name)
    texts, failed = {}, []
    with Progress(f"compiling {kernel.name}") as p:
        ck = compile_for(kernel, types, p)
        for stage in stages:
            p.step(stage)
            try:
                texts[stage] = ck.inspect(stage)
            except HybridError as e:
                failed.append(e)
    to_stdout = [s for s in stages if s in texts and paths[s] is None]
    for k, stage in enumerate(to_stdout):
        if len(to_stdout) > 1:
            emit(("\n" if k else "") + f"==> {kernel.name}: {stage} <==", None, args)
        emit(texts[stage], highlight.STAGE_LANGUAGE.get(stage), args)
    for stage in stages:
        if stage in texts and paths[stage] is not None:
            path = paths[stage]
            path.parent.mkdir(parents=True, exist_ok=True)
            text = texts[stage]
            path.write_text(text if text.endswith("\n") else text + "\n")
    for e in failed:
        report(e.render(), args)
    if args.time:
        sys.stderr.write(ck.inspect("timings"))
    return 1 if failed else 0


# ---------------------------------------------------------------- run

def gather_inputs(kernel, items: list) -> dict:
    """``name -> value`` from NAME=VALUE or VALUE items (the latter in parameter order)."""
    params = kernel.params
    signature = f"{kernel.name}({', '.join(params)})"
    out = {}
    free = iter(params)
    for item in items:
        name, sep, value = item.partition("=")
        if sep and re.fullmatch(r"[A-Za-z_]\w*", name):
            if name not in params:
                close = difflib.get_close_matches(name, params, 1)
                raise UsageError(f"kernel {signature} has no parameter `{name}`",
                                 f"did you mean `{close[0]}`?" if close else f"its parameters are: {', '.join(params)}")
        else:
            name, value = next((p for p in free if p not in out), None), item
            if name is None:
                raise UsageError(f"too many inputs: kernel {signature} takes {len(params)}")
        if name in out:
            raise UsageError(f"input `{name}` is given twice")
        out[name] = value = parse_value(value, f"input `{name}`")
        scalar = not isinstance(value, np.ndarray)
        check_usage(kernel, name, scalar, f"the input is {'the number ' + repr(value) if scalar else 'an array'}",
                    hints=(f"pass an array: {name}=PATH.npy", f"pass a number: {name}=2.5 or {name}=float32:2.5"))
    return out


def _show(name: str, value) -> str:
    prefix = f"{name} = "
    text = np.array_repr(value) if isinstance(value, np.ndarray) else repr(value)
    return prefix + text.replace("\n", "\n" + " " * len(prefix))


def kernel_file_first(file: str, inputs: list) -> tuple:
    """``(kernel file, inputs)`` wherever among the positional arguments the .hyb file was given."""
    if not file.endswith(".hyb"):
        for k, item in enumerate(inputs):
            if item.endswith(".hyb") and "=" not in item:
                return item, [file] + inputs[:k] + inputs[k + 1:]
    return file, list(inputs)


def cmd_run(args) -> int:
    args.file, args.inputs = kernel_file_first(args.file, args.inputs)
    mod = load_module(args.file, args)
    kernel = select_kernel(mod, args.kernel, args.file)
    values = gather_inputs(kernel, list(args.inputs) + list(args.input or []))
    missing = [p for p in kernel.params if p not in values]
    if missing:
        if not args.random:
            raise UsageError(f"no input for {', '.join(f'`{p}`' for p in missing)} of kernel "
                             f"{kernel.name}({', '.join(kernel.params)})",
                             "give NAME=PATH.npy (or a number), or --random with --args for their types")
        types = argument_types(kernel, args, need=missing)
        rng = np.random.default_rng(args.seed)
        for p in missing:
            values[p] = types[p].random(rng)
    arguments = [values[p] for p in kernel.params]
    if args.output:
        _check_output_name(args.output)
    t0 = time.perf_counter()
    times = []
    if args.emulate:
        typed = kernel.typed(*arguments)
        t1 = time.perf_counter()
        result = kernel.emulate(*arguments)
        times.append(time.perf_counter() - t1)
    else:
        with Progress(f"compiling {kernel.name}") as p:
            p.step("isl and LLVM")
            ck = kernel.compile(*arguments)
        typed = ck.typed
        t1 = time.perf_counter()
        for _ in range(args.repeat):
            start = time.perf_counter()
            result = ck(*arguments)
            times.append(time.perf_counter() - start)
    compile_s = t1 - t0
    outputs = list(result) if isinstance(result, tuple) else [result]
    names = [typed.tensors[n].source_name or n for n in typed.outputs]
    if args.output:
        _save(args.output, names, outputs)
    else:
        for name, value in zip(names, outputs):
            print(_show(name, value))
    if args.time:
        what = "checked (emulate)" if args.emulate else "compiled"
        line = f"{kernel.name}: {what} in {compile_s * 1e3:.1f} ms; ran in {min(times) * 1e3:.3f} ms"
        if len(times) > 1:
            line += f" (best of {len(times)}, median {float(np.median(times)) * 1e3:.3f} ms)"
        print(line, file=sys.stderr)
        if not args.emulate:
            sys.stderr.write(ck.inspect("timings"))
    return 0


def _check_output_name(out: str):
    if not out.endswith((".npy", ".npz")):
        raise UsageError(f"-o {out}: write outputs to a .npy file (one output) or a .npz file (any number)")


def _save(out: str, names: list, outputs: list):
    if out.endswith(".npz"):
        unique = {}
        for name, value in zip(names, outputs):
            key, k = name, 1
            while key in unique:
                k += 1
                key = f"{name}_{k}"
            unique[key] = value
        np.savez(out, **unique)
        return
    if len(outputs) != 1:
        raise UsageError(f"-o {out}: the kernel returns {len(outputs)} outputs ({', '.join(names)}); a .npy file holds one",
                         "write them to a .npz file")
    np.save(out, np.asarray(outputs[0]))


# ---------------------------------------------------------------- grad

_CONSTANT = re.compile(r"[A-Za-z_]\w*\s*=")


def merge_gradients(sources: list, path: str) -> str:
    """One .hyb text from several gradient kernels' sources: their module constants once, at the top."""
    if len(sources) == 1:
        return sources[0]
    constants, bodies = [], []
    for text in sources:
        kept = []
        for line in text.splitlines():
            if _CONSTANT.match(line):
                if line not in constants:
                    constants.append(line)
            else:
                kept.append(line)
        bodies.append("\n".join(kept).strip("\n"))
    head = f"# Gradients of the kernels of {path}, derived by hyb.\n"
    if constants:
        head += "\n" + "\n".join(constants) + "\n"
    return head + "\n\n" + "\n\n\n".join(bodies) + "\n"


def cmd_grad(args) -> int:
    mod = load_module(args.file, args)
    typed = spec_text(args) is not None
    names = [select_kernel(mod, args.kernel, args.file).name] if args.kernel or typed else list(mod.kernels)
    sources, failed = [], []
    with Progress("deriving gradients") as p:
        for name in names:
            p.step(name)
            try:
                g = mod.kernels[name].grad(with_outputs=args.with_outputs)
                if typed:
                    # for these argument types: integer inputs get no gradient, grid loops their ranks
                    types = argument_types(mod.kernels[name], args)
                    sources.append(g.source_for(*[types[q].placeholder() for q in mod.kernels[name].params]))
                else:
                    sources.append(g.source)
            except HybridError as e:
                failed.append(name)
                report(e.render(), args)
    if sources:
        text = merge_gradients(sources, args.file)
        compile_source(text, args.output or "<gradients>")  # what is written parses
        if args.output and args.output != "-":
            Path(args.output).parent.mkdir(parents=True, exist_ok=True)
            Path(args.output).write_text(text)
        else:
            emit(text, "hyb", args)
    if failed:
        report(f"hyb: error: no gradient for {len(failed)} of {len(names)} kernel(s): {', '.join(failed)}"
               + ("; the others were written" if sources else ""), args)
        return 1
    return 0


# ---------------------------------------------------------------- aot

def cmd_aot(args) -> int:
    from ..codegen import aot

    mod = load_module(args.file, args)
    kernel = select_kernel(mod, args.kernel, args.file)
    if args.symbol is not None and not re.fullmatch(r"[A-Za-z_]\w*", args.symbol):
        raise UsageError(f"--symbol {args.symbol}: not a C identifier", "e.g. --symbol CustomAdd")
    types = argument_types(kernel, args)
    out = args.output or f"lib{kernel.name}.so"
    with Progress(f"building {out}") as p:
        ck = compile_for(kernel, types, p)
        p.step("object code and link")
        sig = aot.build_library(ck, out, args.symbol, cc=args.cc, cpu=args.cpu, keep=args.keep,
                                origin=f"{args.file}, kernel {kernel.name}")
    print(f"wrote {out}: int {sig.symbol}(nparam, params, ndims, shapes, dtypes, stream, extra) "
          f"for {sig}")
    return 0


# ---------------------------------------------------------------- demo and bench

DEMO_SOURCE = '''\
def matmul(a, b):
    """c = a @ b, written as loops."""
    c = output_tensor((a.shape[0], b.shape[1]), a.dtype)
    for i in range(a.shape[0]):
        for j in range(b.shape[1]):
            for k in range(a.shape[1]):
                c[i, j] += a[i, k] * b[k, j]
    return c
'''


def cmd_demo(args) -> int:
    color = use_color(sys.stdout, args.color)

    def show(text, lang):
        return highlight.ansi(text, lang) if color else text

    print("kernel (hybrid language):\n")
    print("    " + show(DEMO_SOURCE, "hyb").replace("\n", "\n    "))
    mod = compile_source(DEMO_SOURCE, "<demo>")
    rng = np.random.default_rng(0)
    a = rng.standard_normal((4, 3)).astype(np.float32)
    b = rng.standard_normal((3, 5)).astype(np.float32)
    t0 = time.perf_counter()
    ck = mod.matmul.compile(a, b)
    t1 = time.perf_counter()
    c = ck(a, b)
    ref = a @ b
    np.set_printoptions(precision=4, suppress=True)
    print(f"compiled for float32[4, 3] x float32[3, 5] in {t1 - t0:.3f} s (parse, isl, LLVM O3)\n")
    print("loops chosen by isl:\n")
    print("    " + show(ck.inspect("loops").rstrip(), "hyb").replace("\n", "\n    ") + "\n")
    print("hyb result:\n", c, "\n")
    print("NumPy a @ b:\n", ref, "\n")
    err = float(np.abs(c - ref).max())
    ok = np.allclose(c, ref, rtol=1e-5, atol=1e-5)
    print(f"max |hyb - numpy| = {err:.3g}  ->  {'OK' if ok else 'MISMATCH'}")
    return 0 if ok else 1


def cmd_bench(args, rest) -> int:
    """Run the benchmark suite of the source tree (benchmarks/ beside the hyb package) as
    ``python -m benchmarks`` in a child process started in that tree."""
    root = Path(__file__).resolve().parents[2]
    if not (root / "benchmarks" / "__init__.py").is_file():
        print("error: the benchmark suite is not here: `hyb bench` runs benchmarks/ of a source checkout "
              f"(looked in {root}); in a checkout, run `python -m benchmarks` from its root", file=sys.stderr)
        return 2
    code = subprocess.call([sys.executable, "-m", "benchmarks", *rest], cwd=root)
    if code or not any(a in ("-h", "--help") for a in rest):
        return code
    print("\nexample:\n  hyb bench --size small --kernels gemm,atax      # two kernels, small sizes\n"
          "  hyb bench --list                                # the kernels of the suite")
    return 0
