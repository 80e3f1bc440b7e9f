"""hyb's benchmark suite: PolyBench/C 4.2.1 and ML kernels as hybrid kernels, timed against
Numba, NumPy and C (gcc -O3) in the same run, results cross-checked before any time is reported.

    python -m benchmarks --size medium            # or: hyb bench (calls benchmarks.main)
    python -m benchmarks --size mini --kernels gemm,atax --repeat 1
    python -m benchmarks --kernels rows           # elementwise and row kernels, hyb in three modes
    python -m benchmarks spellings                # kernels written several ways (benchmarks/spellings.py)
"""


def main(argv=None) -> int:
    """Run the suite with command-line arguments ``argv`` (None: sys.argv); returns the exit status."""
    import sys

    args = sys.argv[1:] if argv is None else list(argv)
    if args[:1] == ["spellings"]:
        from .spellings import main as spellings

        return spellings(args[1:])
    from .harness import main as _main

    return _main(argv)
