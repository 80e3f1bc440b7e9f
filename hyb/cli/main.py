"""The ``hyb`` command."""
from __future__ import annotations

import argparse
import sys
import time

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
    import numpy as np

    import hyb

    print("kernel (hybrid language):\n")
    print("    " + DEMO_SOURCE.replace("\n", "\n    "))
    mod = hyb.compile_source(DEMO_SOURCE, "<demo>")
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
    print("    " + ck.inspect("loops").rstrip().replace("\n", "\n    ") + "\n")
    print("hyb result:\n", c, "\n")
    print("NumPy a @ b:\n", ref, "\n")
    err = float(np.abs(c - ref).max())
    ok = np.allclose(c, ref, rtol=1e-5, atol=1e-5)
    print(f"max |hyb - numpy| = {err:.3g}  ->  {'OK' if ok else 'MISMATCH'}")
    return 0 if ok else 1


def cmd_check(args) -> int:
    import hyb

    status = 0
    for path in args.files:
        try:
            mod = hyb.load(path)
        except hyb.HybridError as e:
            print(e.render(), file=sys.stderr)
            status = 1
            continue
        except OSError as e:
            print(f"error: cannot read {path}: {e.strerror}", file=sys.stderr)
            status = 1
            continue
        print(f"{path}: {len(mod.kernels)} kernel(s) parsed: {', '.join(mod.kernels)}")
    return status


def cmd_bench(args, rest) -> int:
    """Run the benchmark suite of the source tree (benchmarks/ beside the hyb package)."""
    import os
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    if not (root / "benchmarks" / "__init__.py").is_file():
        print("error: the benchmark suite is not here: `hyb bench` runs benchmarks/ of a source checkout "
              f"(looked in {root})", file=sys.stderr)
        return 2
    sys.path.insert(0, str(root))
    os.chdir(root)
    from benchmarks import main as bench_main
    return bench_main(rest)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="hyb", description="hyb: a polyhedral compiler for hybrid tensor kernels")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    p = sub.add_parser("demo", help="compile and run an example kernel, next to NumPy",
                       description="Compile a matmul kernel, run it on random data and compare with NumPy.")
    p.set_defaults(func=cmd_demo)
    p = sub.add_parser("bench", help="run the benchmark suite (PolyBench and ML kernels against Numba, NumPy, C)",
                       description="Run benchmarks/ (the same as `python -m benchmarks`); every further argument "
                                   "goes to it. Example: hyb bench --size small --kernels gemm,atax",
                       add_help=False)
    p.set_defaults(func=cmd_bench, passthrough=True)
    p = sub.add_parser("check", help="parse .hyb files and report syntax errors",
                       description="Parse each file and report errors in compiler format. Example: hyb check kernels.hyb")
    p.add_argument("files", nargs="+", metavar="FILE.hyb")
    p.set_defaults(func=cmd_check)
    args, rest = parser.parse_known_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    if getattr(args, "passthrough", False):
        return args.func(args, rest)
    if rest:
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
