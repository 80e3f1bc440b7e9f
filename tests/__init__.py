"""hyb's tests, laid out like the package: tests/dsl, tests/schedule, tests/codegen, tests/autodiff,
tests/runtime, tests/ops (hyb.ops and the Tensor / Function / framework layers), tests/cli; tests/fuzz is the
differential fuzzer (``python -m tests.fuzz --minutes N``) with its CI campaign; test_examples.py and
test_benchmarks.py, at the top, run examples/ and benchmarks/.

Every directory is a package, so test modules and shared helpers are imported by their full name from the
repository root (``from tests import kernelgen``, ``from tests.autodiff import gradcases``); pytest puts the
root on sys.path (``pythonpath`` in pyproject.toml), and ``python -m`` from the root does the same.
"""
