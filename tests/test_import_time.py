"""What `import hyb` loads.  The compiler's libraries (islpy, llvmlite) and the parser's (lark) are
loaded only when a kernel is parsed or compiled, and the optional ones (torch, jax, ml_dtypes)
never by hyb's own import; the whole public API is there all the same.

Each test runs its script in a fresh interpreter (a file, so that @hyb.hybrid can read its
functions' source), since the test process itself has imported everything.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

COMPILER = ["islpy", "llvmlite", "lark"]
OPTIONAL = ["torch", "jax", "ml_dtypes"]

# Prints, after each step of the script it is put before, the top-level packages of
# COMPILER + OPTIONAL then loaded (a submodule counts as its package).
PRELUDE = textwrap.dedent(f"""\
    import json, sys
    WATCHED = {COMPILER + OPTIONAL!r}

    def loaded(step):
        names = sorted({{m.split(".")[0] for m in sys.modules}} & set(WATCHED))
        print(json.dumps([step, names]))
""")


def run(tmp_path, script: str) -> dict:
    """{step: the watched packages loaded after it} for a script of steps calling loaded(step)."""
    path = tmp_path / "script.py"
    path.write_text(PRELUDE + textwrap.dedent(script))
    r = subprocess.run([sys.executable, str(path)], capture_output=True, text=True, env=dict(os.environ),
                       timeout=300, check=False, cwd=str(tmp_path))
    assert r.returncode == 0, r.stderr
    return {step: names for step, names in map(json.loads, r.stdout.splitlines())}


def test_import_loads_no_compiler_library(tmp_path):
    steps = run(tmp_path, """
        loaded("start")
        import hyb
        loaded("import hyb")
    """)
    assert steps["start"] == []
    assert steps["import hyb"] == []


def test_every_public_name_resolves_to_its_module_object(tmp_path):
    steps = run(tmp_path, """
        import hyb
        import hyb.runtime.kernel as kernel_module
        assert hyb.hybrid is kernel_module.hybrid and hyb.Kernel is kernel_module.Kernel
        assert hyb.load is kernel_module.load and hyb.compile_source is kernel_module.compile_source
        loaded("kernel names")
        missing = [n for n in hyb.__all__ if getattr(hyb, n, None) is None]
        assert missing == [], missing
        ns = {}
        exec("from hyb import *", ns)
        assert sorted(n for n in hyb.__all__ if n not in ns) == []
        import hyb.runtime.compiler as compiler_module
        assert hyb.CompiledKernel is compiler_module.CompiledKernel
        assert "CompiledKernel" in dir(hyb)
        assert hyb.ops.MatMul is hyb.ops.builtin.MatMul and hyb.Tensor is hyb.tensor.Tensor
        loaded("all names")
    """)
    assert steps["kernel names"] == []
    # CompiledKernel's module is the compiler: reading it loads islpy and llvmlite, nothing optional
    assert set(steps["all names"]) & set(OPTIONAL) == set()


def test_unknown_attribute_is_an_attribute_error(tmp_path):
    run(tmp_path, """
        import hyb
        try:
            hyb.no_such_name
        except AttributeError as e:
            assert "no_such_name" in str(e)
        else:
            raise AssertionError("hyb.no_such_name resolved")
        assert not hasattr(hyb, "CompiledKernels")
    """)


def test_eager_operator_layer_needs_no_compiler(tmp_path):
    steps = run(tmp_path, """
        import numpy as np
        import hyb
        x = hyb.Tensor(np.arange(6, dtype=np.float32).reshape(2, 3))
        y = hyb.ops.matmul(x, hyb.ops.transpose(x, (1, 0)))
        assert np.allclose(y.asnumpy(), np.arange(6.0).reshape(2, 3) @ np.arange(6.0).reshape(2, 3).T)
        g = hyb.grad(lambda t: hyb.ops.sum(t * t))(x)
        assert np.allclose(g.asnumpy(), 2 * np.arange(6.0).reshape(2, 3))
        loaded("eager ops")
    """)
    assert steps["eager ops"] == []


def test_compiling_a_kernel_loads_the_compiler(tmp_path):
    steps = run(tmp_path, """
        import numpy as np
        import hyb

        @hyb.hybrid
        def add(a, b):
            c = output_tensor(a.shape, a.dtype)
            for i in range(a.shape[0]):
                c[i] = a[i] + b[i]
            return c

        assert isinstance(add, hyb.Kernel)
        loaded("decorated")
        x = np.arange(8.0)
        assert np.array_equal(add(x, x), 2 * x)
        assert isinstance(add.compile(x, x), hyb.CompiledKernel)
        loaded("called")
    """)
    assert steps["decorated"] == ["lark"]  # parsed, not compiled
    assert steps["called"] == sorted(COMPILER)


def test_load_and_compile_source_parse_on_demand(tmp_path):
    path = tmp_path / "scale.hyb"
    path.write_text("def scale(a):\n    c = output_tensor(a.shape, a.dtype)\n"
                    "    for i in range(a.shape[0]):\n        c[i] = a[i] * 3.0\n    return c\n")
    steps = run(tmp_path, f"""
        import numpy as np
        import hyb
        loaded("imported")
        mod = hyb.load({str(path)!r})
        assert isinstance(mod, hyb.HybModule) and isinstance(mod.scale, hyb.Kernel)
        assert np.array_equal(mod.scale.emulate(np.ones(4)), np.full(4, 3.0))
        loaded("emulated")
        other = hyb.compile_source(open({str(path)!r}).read(), "scale.hyb")
        assert np.array_equal(other.scale(np.ones(4)), np.full(4, 3.0))
        loaded("compiled")
    """)
    assert steps["imported"] == []
    assert steps["emulated"] == ["lark"]  # the interpreter needs no compiler
    assert steps["compiled"] == sorted(COMPILER)
