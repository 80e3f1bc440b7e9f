"""The ``hyb`` command: argument parsing and dispatch to :mod:`hyb.cli.commands`.

Exit status: 0 done; 1 an error in a kernel file or while compiling or running it
(reported in compiler format on stderr); 2 a mistake on the command line.
"""
from __future__ import annotations

import argparse
import os
import sys
import warnings

from ..dsl import deep
from ..errors import HybridError, HybridWarning
from ..version import __version__
from . import commands
from .argspec import UsageError

_STAGES = " ".join(commands.STAGE_SUFFIX)


def _parents():
    color = argparse.ArgumentParser(add_help=False)
    color.add_argument("--color", choices=("auto", "always", "never"), default="auto",
                       help="colour the output: on a terminal only (auto, the default), always, or never")
    kernel = argparse.ArgumentParser(add_help=False)
    kernel.add_argument("-k", "--kernel", metavar="NAME", help="the kernel to use (default: the file's only kernel)")
    signature = argparse.ArgumentParser(add_help=False)
    signature.add_argument("-a", "--args", metavar="SPEC", action="append",
                           help="the type of each argument: \"a=float32[128,64] b=float32[64] alpha=float32\" "
                                "(DTYPE[dims] a tensor, DTYPE a NumPy scalar, int/float a Python number)")
    options = argparse.ArgumentParser(add_help=False)
    options.add_argument("--fastmath", action="store_true", help="LLVM fast-math flags on floating-point operations")
    options.add_argument("--schedule", metavar="S",
                         help="\"auto\" (default), \"original\", or schedule options as JSON, e.g. "
                              "'{\"tile\": [32, 64], \"parallel\": false}'")
    options.add_argument("--threads", type=int, metavar="N", help="threads for parallel loops")
    return color, kernel, signature, options


def _sub(sub, name, help, description, epilog, parents=()):
    return sub.add_parser(name, help=help, description=description, epilog="example:\n" + epilog,
                          parents=list(parents), formatter_class=argparse.RawDescriptionHelpFormatter)


def build_parser() -> argparse.ArgumentParser:
    color, kernel, signature, options = _parents()
    parser = argparse.ArgumentParser(
        prog="hyb", description="hyb: a polyhedral compiler for hybrid tensor kernels (.hyb files).",
        epilog="Run `hyb COMMAND --help` for a command's options and an example.\n"
               "Exit status: 0 done, 1 an error in a kernel (compiler format), 2 a mistake on the command line.",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"hyb {__version__}",
                        help="print hyb's version and exit")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    p = _sub(sub, "check", "parse .hyb files and report errors",
             "Parse each file and report errors and warnings in compiler format (file:line:col, the line, a caret, "
             "a hint).\nWith --args, also type-check and compile the kernel for that signature (out-of-bounds "
             "subscripts,\nreads of unwritten elements, ...).",
             "  hyb check kernels.hyb other.hyb\n"
             "  hyb check examples/matmul.hyb --args \"a=float32[64,32] b=float32[32,48]\"",
             (color, kernel, signature, options))
    p.add_argument("files", nargs="+", metavar="FILE.hyb")
    p.add_argument("--werror", action="store_true", help="exit with status 1 if there are warnings")
    p.set_defaults(func=commands.cmd_check)

    p = _sub(sub, "compile", "print or write the stages of the pipeline for one signature",
             f"Compile a kernel for the argument types given by --args and write the stages asked for.\n"
             f"Stages: {_STAGES} (default: loops).\n"
             "Without -o the stages go to stdout. With -o, one stage is written to OUT; several stages to\n"
             "OUT.ll, OUT.s, ... (the suffix of each stage); an existing folder, or OUT ending in /, gets\n"
             "KERNEL.ll, KERNEL.s, ...",
             "  hyb compile examples/matmul.hyb --args \"a=float32[128,64] b=float32[64,32]\" --emit loops\n"
             "  hyb compile examples/matmul.hyb -a \"float32[128,64] float32[64,32]\" --emit llvm-opt,asm -o out/\n"
             "  hyb compile examples/matmul.hyb -a \"float32[128,64] float32[64,32]\" --time   (stage times on stderr)",
             (color, kernel, signature, options))
    p.add_argument("file", metavar="FILE.hyb")
    p.add_argument("-e", "--emit", action="append", metavar="STAGE",
                   help=f"a stage to write (repeat it or separate by commas): {_STAGES}")
    p.add_argument("-o", "--output", metavar="OUT", help="file, file stem or folder to write to (default: stdout)")
    p.add_argument("--time", action="store_true",
                   help="print how long each stage of the compile took, and the total, on stderr")
    p.set_defaults(func=commands.cmd_compile)

    p = _sub(sub, "run", "compile and run a kernel on .npy files or random data",
             "Run a kernel and print its outputs (or save them with -o).\n"
             "Inputs: VALUE or NAME=VALUE, in parameter order for those without a name; VALUE is a .npy file,\n"
             "a number (a Python int or float) or DTYPE:NUMBER (a NumPy scalar, e.g. float32:2.5).\n"
             "--random makes the inputs not given from their --args types (normal floats, integers in [0, 10)).",
             "  hyb run examples/add.hyb a.npy b.npy -o c.npy\n"
             "  hyb run examples/matmul.hyb --random --args \"a=float32[256,128] b=float32[128,64]\" --time",
             (color, kernel, signature, options))
    p.add_argument("file", metavar="FILE.hyb")
    p.add_argument("inputs", nargs="*", metavar="INPUT", help="PATH.npy, a number, or NAME=VALUE")
    p.add_argument("-i", "--input", action="append", metavar="NAME=VALUE", help="an input by name (repeatable)")
    p.add_argument("--random", action="store_true", help="random inputs for the parameters not given (needs --args)")
    p.add_argument("--seed", type=int, default=0, help="seed of --random (default 0)")
    p.add_argument("-o", "--output", metavar="OUT.npy|OUT.npz", help="save the outputs instead of printing them")
    p.add_argument("--time", action="store_true",
                   help="print compile and run times on stderr, and how long each stage of the compile took")
    p.add_argument("--repeat", type=int, default=1, metavar="N", help="run N times (for --time; default 1)")
    p.add_argument("--emulate", action="store_true", help="run the reference interpreter instead of native code")
    p.set_defaults(func=commands.cmd_run)

    p = _sub(sub, "grad", "write the gradient kernels of a file as .hyb text",
             "Derive the gradient of each kernel (or of --kernel) and write it as .hyb text: a kernel NAME_grad\n"
             "taking the inputs, then one gradient per output, and returning one gradient per input.\n"
             "A kernel without gradient gets an error on stderr; the others are still written, and the exit\n"
             "status is 1.  With --args, the gradient of one kernel for those argument types: integer inputs\n"
             "get no gradient, and the ranks of the arguments decide its `grid` loops.",
             "  hyb grad examples/matmul.hyb -o matmul_grad.hyb\n"
             "  hyb grad kernels.hyb --kernel softmax --with-outputs\n"
             "  hyb grad kernels.hyb --kernel scale --args \"x=float32[8,8]\"   (a kernel with grid loops: the ranks)",
             (color, kernel, signature, options))
    p.add_argument("file", metavar="FILE.hyb")
    p.add_argument("-o", "--output", metavar="OUT.hyb", help="file to write (default: stdout)")
    p.add_argument("--with-outputs", action="store_true",
                   help="the gradient also takes the forward outputs (after the inputs) and reuses them")
    p.set_defaults(func=commands.cmd_grad)

    p = _sub(sub, "aot", "build a shared library with MindSpore's aot custom-operator signature",
             "Compile a kernel for one signature into a shared library exporting\n"
             "  int NAME(int nparam, void **params, int *ndims, int64_t **shapes, const char **dtypes,\n"
             "           void *stream, void *extra)\n"
             "params: the inputs, then the outputs (preallocated by the caller, C-contiguous). Returns 0, or\n"
             "1 wrong nparam, 2 wrong dtype, 3 wrong ndims, 4 wrong shape, 5 null pointer, 6 out of memory,\n"
             "7 index out of bounds at run time, 8 an assert failed at run time; NAME_last_error() says more,\n"
             "NAME_signature() gives the signature.",
             "  hyb aot examples/add.hyb --args \"a=float32[4,8] b=float32[4,8]\" -o libadd.so\n"
             "  then in Python: hyb.ops.Custom(\"./libadd.so:add\", out_shape=..., out_dtype=..., func_type=\"aot\")",
             (color, kernel, signature, options))
    p.add_argument("file", metavar="FILE.hyb")
    p.add_argument("-o", "--output", metavar="LIB.so", help="the library to write (default: libKERNEL.so)")
    p.add_argument("--symbol", metavar="NAME", help="the exported function's name (default: the kernel's)")
    p.add_argument("--cc", metavar="CC", help="the C compiler that links it (default: $CC, else cc)")
    p.add_argument("--cpu", choices=("native", "generic", "x86-64-v2", "x86-64-v3", "x86-64-v4"), default="native",
                   help="target CPU: this machine's (native, the default), any x86-64 (generic) or a level of it")
    p.add_argument("--keep", metavar="DIR", help="keep the generated C wrapper and object file in DIR")
    p.set_defaults(func=commands.cmd_aot)

    p = _sub(sub, "demo", "compile and run an example kernel, next to NumPy",
             "Compile a matmul kernel, run it on random data and compare with NumPy.", "  hyb demo", (color,))
    p.set_defaults(func=commands.cmd_demo)

    p = sub.add_parser("bench", help="run the benchmark suite (PolyBench and ML kernels against Numba, NumPy, C)",
                       description="Run benchmarks/ (the same as `python -m benchmarks`); every further argument "
                                   "goes to it. Example: hyb bench --size small --kernels gemm,atax",
                       add_help=False)
    p.set_defaults(func=commands.cmd_bench, passthrough=True)
    return parser


def _subparser(parser, name):
    """The parser of the subcommand ``name``."""
    for action in parser._subparsers._group_actions:  # argparse keeps them here; no public accessor
        if name in action.choices:
            return action.choices[name]
    return None


def parse(parser, argv):
    """The arguments, with a subcommand's options and positionals in any order (``hyb run k.hyb -k k
    x.npy`` as ``hyb run -k k k.hyb x.npy``); the rest, for a subcommand that passes it on."""
    argv = list(sys.argv[1:] if argv is None else argv)
    args, rest = parser.parse_known_args(argv)
    command = getattr(args, "command", None)
    if command is None or getattr(args, "passthrough", False):
        return args, rest
    sub = _subparser(parser, command)
    at = argv.index(command)
    sub_args, rest = sub.parse_known_intermixed_args(argv[at + 1:])
    for key, value in vars(sub_args).items():
        setattr(args, key, value)
    return args, rest


def main(argv=None) -> int:
    parser = build_parser()
    args, rest = parse(parser, argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    if getattr(args, "passthrough", False):
        return args.func(args, rest)
    if rest:
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    args.warnings_seen = 0

    def show_warning(message, category, filename, lineno, file=None, line=None):
        if isinstance(message, HybridWarning):
            args.warnings_seen += 1
            commands.report(str(message), args)
        else:
            print(warnings.formatwarning(message, category, filename, lineno, line), file=sys.stderr, end="")

    with warnings.catch_warnings():
        warnings.simplefilter("default")
        warnings.showwarning = show_warning
        try:
            # (on a thread with the stack for the deepest kernel the parser accepts: the commands walk
            # the syntax tree too, and this process runs no code but hyb's)
            return deep.call(deep.MAX_DEPTH, args.func, args)
        except UsageError as e:
            commands.report(e.render(), args)
            return 2
        except HybridError as e:
            commands.report(e.render(), args)
            return 1
        except KeyboardInterrupt:
            print("hyb: interrupted", file=sys.stderr)
            return 130
        except BrokenPipeError:  # `hyb compile ... | head` stopped reading
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            return 0


if __name__ == "__main__":
    sys.exit(main())
