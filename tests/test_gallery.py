"""The examples gallery: every script under examples/ is run by a named test, and an example that
needs an optional framework, run where that framework cannot be imported, says which one and how to
install it and exits with status 0 (before importing hyb), never with a traceback.

Where a framework is installed its example runs in full in tests/ops/test_frameworks.py; here the
framework is hidden from the script by an import hook, so the other path runs whatever is installed.
"""
from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
TESTS = ROOT / "tests"

# Each example script (relative to examples/) -> the test that runs it: file (relative to tests/)
# and function. The function (its decorators included) names the script's file.
GALLERY = {
    "quickstart.py": ("test_examples.py", "test_quickstart_script_runs"),
    "gradients.py": ("test_examples.py", "test_gradients_script_runs"),
    "frameworks/torch_op.py": ("ops/test_frameworks.py", "TestTorch.test_example"),
    "frameworks/jax_op.py": ("ops/test_frameworks.py", "TestJax.test_example"),
    "frameworks/mindspore_aot.py": ("ops/test_frameworks.py", "TestMindSpore.test_example"),
    "function_builder/custom_mul.py": ("ops/test_function_builder.py", "test_seed_example_prints_what_the_seed_shows"),
    "function_builder/function_mul.py": ("ops/test_function_builder.py", "test_python_function_example"),
    "seeds/custom_akg.py": ("ops/test_custom_ops.py", "test_seed_add_examples"),
    "seeds/custom_pyfunc.py": ("ops/test_custom_ops.py", "test_seed_add_examples"),
    "seeds/custom_aot.py": ("ops/test_custom_ops.py", "test_seed_aot_add_example"),
    "seeds/dropout_aot.py": ("ops/test_custom_ops.py", "test_seed_dropout_example"),
    "seeds/grad_bprop.py": ("ops/test_custom_ops.py", "test_seed_grad_examples"),
    "seeds/grad_bprop_sens.py": ("ops/test_custom_ops.py", "test_seed_grad_examples"),
    "seeds/grad_bprop_pyfunc.py": ("ops/test_custom_ops.py", "test_seed_grad_examples"),
    "seeds/grad_derived.py": ("ops/test_custom_ops.py", "test_derived_gradient_example"),
    "notebook.ipynb": ("test_notebook.py", "test_notebook_runs_and_renders_html"),
}

# The examples that need an optional framework: the modules hidden from them, and what the
# message they print must hold (the framework's name and the command that installs it).
OPTIONAL = {
    "frameworks/torch_op.py": (["torch"], ["needs PyTorch",
                                           "pip install torch --index-url https://download.pytorch.org/whl/cpu"]),
    "frameworks/jax_op.py": (["jax", "jaxlib"], ["needs JAX", "pip install jax"]),
    "frameworks/mindspore_aot.py": (["mindspore"], ["needs MindSpore", "pip install mindspore"]),
}

# Runs a script with some top-level packages made unimportable (as if not installed), then
# reports on stderr whether hyb was imported before the script stopped.
_HIDE_AND_RUN = r"""
import importlib.abc, os, runpy, sys

hidden = set(sys.argv[1].split(","))


class Hide(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in hidden:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


sys.meta_path.insert(0, Hide())
script = sys.argv[2]
sys.argv = sys.argv[2:]
sys.path.insert(0, os.path.dirname(script))
try:
    runpy.run_path(script, run_name="__main__")
finally:
    print("hyb imported:", "hyb" in sys.modules, file=sys.stderr)
"""


def example_files():
    return sorted(str(p.relative_to(EXAMPLES)) for p in EXAMPLES.rglob("*")
                  if p.suffix in (".py", ".ipynb") and ".ipynb_checkpoints" not in p.parts)


def find_test(tree: ast.Module, dotted: str):
    node = tree
    for part in dotted.split("."):
        node = next((n for n in node.body if isinstance(n, (ast.FunctionDef, ast.ClassDef)) and n.name == part), None)
        if node is None:
            return None
    return node


def test_every_example_is_in_the_gallery():
    assert example_files() == sorted(GALLERY)


@pytest.mark.parametrize("script", sorted(GALLERY))
def test_the_named_test_runs_the_example(script):
    test_file, test_name = GALLERY[script]
    tree = ast.parse((TESTS / test_file).read_text())
    func = find_test(tree, test_name)
    assert func is not None, f"{test_file} has no test {test_name}"
    # the strings of the function and its decorators, and of the module's constants it reads
    used = {n.id for n in ast.walk(func) if isinstance(n, ast.Name)}
    constants = [n for n in tree.body if isinstance(n, ast.Assign)
                 and any(isinstance(t, ast.Name) and t.id in used for t in n.targets)]
    strings = [n.value for top in [func, *constants] for n in ast.walk(top)
               if isinstance(n, ast.Constant) and isinstance(n.value, str)]
    name = Path(script).name
    assert any(name in s for s in strings), f"{test_file}::{test_name} does not name {name}"


@pytest.mark.parametrize("script", sorted(OPTIONAL))
def test_missing_framework_is_reported_and_exits_cleanly(script, tmp_path):
    hidden, wanted = OPTIONAL[script]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT)] + [p for p in [os.environ.get("PYTHONPATH")] if p]))
    proc = subprocess.run([sys.executable, "-c", _HIDE_AND_RUN, ",".join(hidden), str(EXAMPLES / script), str(tmp_path)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    for text in wanted:
        assert text in proc.stdout, proc.stdout
    # the check comes first: nothing of hyb was loaded, nothing compiled
    assert "hyb imported: False" in proc.stderr, proc.stderr
    assert not any(tmp_path.iterdir())  # mindspore_aot.py's build folder stays empty
