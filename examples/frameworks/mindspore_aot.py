"""A hyb kernel and its derived gradient inside MindSpore, as `aot` custom operators.

hyb builds two shared libraries (what `hyb aot` does on the command line): the matrix product
of examples/matmul.hyb and its gradient kernel (`hyb grad`); MindSpore 2.x loads them with
`ops.Custom("./lib.so:name", out_shape=..., out_dtype=..., func_type="aot")` and runs them on
the CPU, the gradient as the operator's bprop. Both are checked against hyb and NumPy.

Run from the repository root with MindSpore installed (`pip install mindspore`):
    python examples/frameworks/mindspore_aot.py [BUILD_DIR]
Without MindSpore it says how to install it and exits with status 0.
"""
import sys
import tempfile
from pathlib import Path

try:
    import mindspore as ms
    from mindspore import Tensor, nn, ops
except ImportError as e:  # an optional framework: say which and how to get it, then stop cleanly
    print(f"mindspore_aot.py needs MindSpore 2.x, which is not importable here ({e}). Install it with\n"
          "    pip install mindspore")
    sys.exit(0)

import numpy as np  # noqa: E402

import hyb  # noqa: E402
from hyb.codegen.aot import build_library  # noqa: E402

HERE = Path(__file__).resolve().parent
matmul = hyb.load(HERE.parent / "matmul.hyb").matmul

rng = np.random.default_rng(0)
a = rng.standard_normal((6, 4)).astype(np.float32)
b = rng.standard_normal((4, 5)).astype(np.float32)
dout = rng.standard_normal((6, 5)).astype(np.float32)

# 1. The libraries: one signature each (hyb aot examples/matmul.hyb -a "float32[6,4] float32[4,5]").
build = Path(sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp(prefix="hyb-ms-"))
build.mkdir(parents=True, exist_ok=True)
lib = build / "libmatmul.so"
grad_lib = build / "libmatmul_grad.so"
print(build_library(matmul.compile(a, b), lib))                    # matmul(a, b) -> c
print(build_library(matmul.grad().compile(a, b, dout), grad_lib))  # matmul_grad(a, b, dout) -> d_a, d_b

# 2. MindSpore operators.
if hasattr(ms, "set_device"):  # MindSpore >= 2.5
    ms.set_device("CPU")
else:
    ms.set_context(device_target="CPU")
grad_op = ops.Custom(f"{grad_lib}:matmul_grad", out_shape=lambda a, b, d: (a, b), out_dtype=lambda a, b, d: (a, b),
                     func_type="aot")


def bprop(x, y, out, dout):
    return grad_op(x, y, dout)


mm = ops.Custom(f"{lib}:matmul", out_shape=lambda a, b: (a[0], b[1]), out_dtype=lambda a, b: a, func_type="aot",
                bprop=bprop)


class Net(nn.Cell):
    def __init__(self):
        super().__init__()
        self.mm = mm

    def construct(self, x, y):
        return self.mm(x, y)


c = Net()(Tensor(a), Tensor(b)).asnumpy()
da, db = ops.GradOperation(get_all=True, sens_param=True)(Net())(Tensor(a), Tensor(b), Tensor(dout))
da, db = da.asnumpy(), db.asnumpy()

# 3. The same numbers as hyb, and as NumPy.
want_da, want_db = matmul.grad()(a, b, dout)
assert np.array_equal(c, matmul(a, b)), "forward differs from hyb"
assert np.array_equal(da, want_da) and np.array_equal(db, want_db), "gradient differs from hyb"
np.testing.assert_allclose(c, a @ b, rtol=1e-5, atol=1e-5)
np.testing.assert_allclose(da, dout @ b.T, rtol=1e-5, atol=1e-5)
np.testing.assert_allclose(db, a.T @ dout, rtol=1e-5, atol=1e-5)
print(f"MindSpore {ms.__version__}: the aot matmul and its gradient give hyb's results")
