"""The Function interface and CustomOpBuilder: hyb.Function in Python
(save_for_backward, saved_tensors, needs_input_grad, apply on the tape of grad /
value_and_grad / GradOperation, hybrid kernels inside forward), the C++ header
hyb_extension.h (BaseTensor, Function<T>, AutogradContext) built by hyb.ops.CustomOpBuilder
(content-hash cache, rebuild on change, compiler errors at file:line, Ascend refused), and the
seed's CustomMul / MyNet example in examples/function_builder/, run as scripts and compared
with what they print.  Gradients are checked against central finite differences in float64.

Building a pybind11 module takes a few seconds; the tests build two (the seed's example and
OPS_SOURCE below), once per session, and use a small C-API module for the cache tests.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import hyb
from hyb import autograd
from hyb.ops import CustomOpBuilder, Custom
from hyb.ops.builder import CustomOpBuildError

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples" / "function_builder"


def _has_cxx():
    if os.environ.get("CXX") or shutil.which("c++") or shutil.which("g++") or shutil.which("clang++"):
        try:
            import pybind11  # noqa: F401
            return True
        except ImportError:
            return False
    return False


needs_cxx = pytest.mark.skipif(not _has_cxx(), reason="needs a C++ compiler and pybind11 (pip install pybind11)")


def finite_differences(f, arrays, eps=1e-6):
    """Central differences of the scalar f(*arrays) with respect to each array (float64)."""
    grads = []
    for k, a in enumerate(arrays):
        g = np.zeros_like(a)
        for idx in np.ndindex(a.shape):
            hi = [b.copy() for b in arrays]
            lo = [b.copy() for b in arrays]
            hi[k][idx] += eps
            lo[k][idx] -= eps
            g[idx] = (f(*hi) - f(*lo)) / (2 * eps)
        grads.append(g)
    return grads


def run_script(path: Path, cwd: Path) -> str:
    proc = subprocess.run([sys.executable, str(path)], cwd=cwd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


# ====================================================================== hyb.Function in Python
class Mul(hyb.Function):
    seen = []

    @staticmethod
    def forward(ctx, x, y):
        Mul.seen.append(("forward", ctx.needs_input_grad, autograd.is_grad_enabled()))
        ctx.save_for_backward(x, y)
        return x * y

    @staticmethod
    def backward(ctx, dout):
        x, y = ctx.saved_tensors
        Mul.seen.append(("backward", ctx.needs_input_grad))
        return (dout * y if ctx.needs_input_grad[0] else None,
                dout * x if ctx.needs_input_grad[1] else None)


def test_function_needs_input_grad_and_saved_tensors():
    Mul.seen.clear()
    x = hyb.Tensor(np.array([1.0, 2.0, 3.0]))
    y = hyb.Tensor(np.array([4.0, 5.0, 6.0]))
    dx = hyb.grad(lambda a, b: Mul.apply(a, b).sum(), grad_position=0)(x, y)
    np.testing.assert_array_equal(dx.asnumpy(), [4.0, 5.0, 6.0])
    # only x needs a gradient; forward runs with recording off
    assert Mul.seen == [("forward", (True, False), False), ("backward", (True, False))]

    Mul.seen.clear()
    dx, dy = hyb.grad(lambda a, b: Mul.apply(a, b).sum(), grad_position=(0, 1))(x, y)
    np.testing.assert_array_equal(dy.asnumpy(), [1.0, 2.0, 3.0])
    assert Mul.seen[0][1] == (True, True)


def test_function_outside_grad_records_nothing():
    Mul.seen.clear()
    z = Mul.apply(hyb.Tensor([1.0, 2.0]), hyb.Tensor([3.0, 4.0]))
    assert isinstance(z, hyb.Tensor) and z._node is None and not z._tracked
    np.testing.assert_array_equal(z.asnumpy(), [3.0, 8.0])
    assert Mul.seen == [("forward", (False, False), False)]


def test_function_with_parameter_and_cell():
    class Net(hyb.nn.Cell):
        def __init__(self):
            super().__init__()
            self.w = hyb.Parameter(np.array([2.0, -1.0]), name="w")

        def construct(self, x):
            return Mul.apply(x, self.w).sum()

    net = Net()
    x = hyb.Tensor(np.array([3.0, 5.0]))
    out, (gx, gw) = hyb.value_and_grad(net, grad_position=0, weights=net.trainable_params())(x)
    assert float(out) == 1.0
    np.testing.assert_array_equal(gx.asnumpy(), [2.0, -1.0])
    np.testing.assert_array_equal(gw[0].asnumpy(), [3.0, 5.0])
    # GradOperation as well
    g = hyb.ops.GradOperation(get_by_list=True)(net, net.trainable_params())(x)
    np.testing.assert_array_equal(g[0].asnumpy(), [3.0, 5.0])


class SinTimes(hyb.Function):
    """f(x, y, k) = sin(x) * y + k * x**2 with a hand-written backward; k is a plain number."""

    @staticmethod
    def forward(ctx, x, y, k):
        sx = np.sin(x.asnumpy())
        ctx.save_for_backward(x, y)
        ctx.k = k
        return sx * y.asnumpy() + k * x.asnumpy() ** 2       # NumPy: returned as a Tensor

    @staticmethod
    def backward(ctx, dout):
        x, y = ctx.saved_tensors
        x, y, d = x.asnumpy(), y.asnumpy(), dout.asnumpy()
        return d * (np.cos(x) * y + 2 * ctx.k * x), d * np.sin(x), None


def test_function_gradients_match_finite_differences():
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal((3, 4)), rng.standard_normal((4,))   # y broadcast: its gradient summed

    def f(a, b):
        return (SinTimes.apply(a, b, 0.5) * hyb.Tensor(np.arange(12.0).reshape(3, 4))).sum()

    gx, gy = hyb.grad(f, grad_position=(0, 1))(hyb.Tensor(x), hyb.Tensor(y))
    assert gy.shape == (4,)
    fx, fy = finite_differences(lambda a, b: float(f(hyb.Tensor(a), hyb.Tensor(b))), [x, y])
    np.testing.assert_allclose(gx.asnumpy(), fx, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(gy.asnumpy(), fy, rtol=1e-6, atol=1e-6)


def test_function_several_outputs_and_unused_output():
    class SplitScale(hyb.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 2, x * 3

        @staticmethod
        def backward(ctx, da, db):
            return da * 2 + db * 3

    x = hyb.Tensor(np.array([1.0, 2.0]))
    g = hyb.grad(lambda t: SplitScale.apply(t)[1].sum())(x)      # the first output gets zeros
    np.testing.assert_array_equal(g.asnumpy(), [3.0, 3.0])
    g = hyb.grad(lambda t: sum(o.sum() for o in SplitScale.apply(t)))(x)
    np.testing.assert_array_equal(g.asnumpy(), [5.0, 5.0])


def test_function_forward_runs_hybrid_kernel_and_custom_op():
    def square(x):
        y = output_tensor(x.shape, x.dtype)
        for i in range(x.shape[0]):
            y[i] = x[i] * x[i]
        return y

    kernel = hyb.hybrid(square)
    op = Custom(square, func_type="akg")

    class Square(hyb.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            a = kernel(x)                         # a hybrid kernel: NumPy out
            b = op(x)                             # a Custom op: must not record inside forward
            assert b._node is None
            return (a + b.asnumpy()) / 2

        @staticmethod
        def backward(ctx, dout):
            (x,) = ctx.saved_tensors
            return 2 * x * dout

    x = hyb.Tensor(np.array([1.0, -2.0, 3.0], np.float32))
    g = hyb.grad(lambda t: Square.apply(t).sum())(x)
    np.testing.assert_allclose(g.asnumpy(), [2.0, -4.0, 6.0])


def test_function_identity_output_and_errors():
    class Ident(hyb.Function):
        @staticmethod
        def forward(ctx, x):
            return x                                  # an input: apply returns a new Tensor

        @staticmethod
        def backward(ctx, dout):
            return dout

    x = hyb.Tensor([1.0, 2.0])
    np.testing.assert_array_equal(hyb.grad(lambda t: (Ident.apply(t) * 3).sum())(x).asnumpy(), [3.0, 3.0])

    class TooMany(hyb.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 1

        @staticmethod
        def backward(ctx, dout):
            return dout, dout

    with pytest.raises(hyb.HybridArgumentError, match="returned 2 gradient"):
        hyb.grad(lambda t: TooMany.apply(t).sum())(x)

    class BadShape(hyb.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 1

        @staticmethod
        def backward(ctx, dout):
            return np.ones(5)

    with pytest.raises(hyb.HybridArgumentError):
        hyb.grad(lambda t: BadShape.apply(t).sum())(x)
    with pytest.raises(hyb.HybridUnsupportedError):
        hyb.Function.apply(x)


def test_python_function_example():
    out = run_script(EXAMPLES / "function_mul.py", EXAMPLES)
    assert out.splitlines() == [
        "out: 64.0",
        "grads[0]: (Tensor(shape=[3], dtype=Float32, value= [ 8. 10. 12.]), "
        "Tensor(shape=[3], dtype=Float32, value= [2. 4. 6.]))",
        "grads[1]: (Tensor(shape=[], dtype=Float32, value= 32.0),)",
    ]


# ====================================================================== CustomOpBuilder: errors, cache
def test_include_dir_holds_the_header():
    header = Path(hyb.include_dir()) / "hyb_extension.h"
    assert header.is_file()
    text = header.read_text()
    for name in ("class BaseTensor", "using BaseTensorPtr", "using BaseTensorPtrList", "using ShapeVector",
                 "class Function", "class AutogradContext", "SaveForBackward", "GetSavedTensors", "NeedGrad",
                 "NeedsInputGrad", "HYB_EXTENSION_NAME"):
        assert name in text, name


def test_ascend_backend_refused(tmp_path):
    src = tmp_path / "ops.cpp"
    src.write_text("// nothing\n")
    with pytest.raises(hyb.HybridUnsupportedError, match="Ascend"):
        CustomOpBuilder("my_ops", [str(src)], backend="Ascend").load()
    with pytest.raises(hyb.HybridArgumentError, match="not found"):
        CustomOpBuilder("my_ops", [str(tmp_path / "missing.cpp")])
    with pytest.raises(hyb.HybridArgumentError, match="identifier"):
        CustomOpBuilder("my-ops", [str(src)])


# A module written against Python's C API (no pybind11), so that it builds in a fraction of a
# second: VALUE comes from a local header, to check that headers are part of the cache key.
QUICK = r"""
#include <Python.h>
#include "value.h"
#define CAT2(a, b) a##b
#define CAT(a, b) CAT2(a, b)
#define STR2(a) #a
#define STR(a) STR2(a)
static PyObject *value(PyObject *, PyObject *) { return PyLong_FromLong(VALUE); }
static PyMethodDef methods[] = {{"value", value, METH_NOARGS, ""}, {nullptr, nullptr, 0, nullptr}};
static PyModuleDef def = {PyModuleDef_HEAD_INIT, STR(HYB_EXTENSION_NAME), nullptr, -1, methods};
PyMODINIT_FUNC CAT(PyInit_, HYB_EXTENSION_NAME)() { return PyModule_Create(&def); }
"""


@needs_cxx
def test_cache_and_rebuild_on_change(tmp_path):
    src, header = tmp_path / "quick.cpp", tmp_path / "value.h"
    src.write_text(QUICK)
    header.write_text("#define VALUE 1\n")
    builder = CustomOpBuilder("quick_ops", [str(src)])
    m1 = builder.load()
    assert m1.value() == 1
    path1 = builder.path
    assert os.path.isfile(path1)
    assert CustomOpBuilder("quick_ops", [str(src)]).load() is m1          # same process: the same module

    header.write_text("#define VALUE 2\n")                                # a changed header rebuilds
    b2 = CustomOpBuilder("quick_ops", [str(src)])
    assert b2.load().value() == 2 and b2.path != path1

    header.write_text("#define VALUE 1\n")                                # back: the first build again
    b3 = CustomOpBuilder("quick_ops", [str(src)])
    assert b3.build() == path1
    b4 = CustomOpBuilder("quick_ops", [str(src)], cflags="-DVALUE_UNUSED=1")   # other flags: a new build
    assert b4.build() != path1


@needs_cxx
def test_compiler_error_points_at_file_and_line(tmp_path):
    src = tmp_path / "broken.cpp"
    src.write_text("int ok = 1;\n\nint broken = ;\n")
    with pytest.raises(hyb.HybridCompileError) as info:
        CustomOpBuilder("broken_ops", [str(src)]).load()
    e = info.value
    assert isinstance(e, CustomOpBuildError)
    assert e.filename == str(src) and e.line == 3
    text = str(e)
    assert text.startswith(f"{src}:3:")
    assert "int broken = ;" in text and "compiler output:" in text


# ====================================================================== C++ Function through pybind11
OPS_SOURCE = r"""
#include <cmath>
#include "hyb_extension.h"

namespace hyb {

// y = exp(x): saves its own output for Backward.
class Exp : public Function<Exp> {
 public:
  static BaseTensorPtr Forward(AutogradContext *ctx, const BaseTensorPtr &x) {
    auto y = std::make_shared<BaseTensor>(x->data_type(), x->shape());
    const double *px = x->data<double>();
    double *py = y->data<double>();
    for (int64_t i = 0; i < x->numel(); i++) py[i] = std::exp(px[i]);
    ctx->SaveForBackward({y});
    return y;
  }
  static BaseTensorPtrList Backward(AutogradContext *ctx, BaseTensorPtrList grads) {
    auto y = ctx->GetSavedTensors()[0];
    auto dx = std::make_shared<BaseTensor>(kNumberTypeFloat64, y->shape());
    for (int64_t i = 0; i < y->numel(); i++) dx->data<double>()[i] = grads[0]->data<double>()[i] * y->data<double>()[i];
    return {dx};
  }
};

// (sin(x) * alpha, cos(x) * alpha): two outputs, a number and a string among the arguments;
// Backward answers for the one tensor argument only.
class SinCos : public Function<SinCos> {
 public:
  static BaseTensorPtrList Forward(AutogradContext *ctx, const BaseTensorPtr &x, double alpha, std::string tag) {
    if (tag != "ok") throw std::invalid_argument("tag must be ok");
    auto s = std::make_shared<BaseTensor>(kNumberTypeFloat64, x->shape());
    auto c = std::make_shared<BaseTensor>(kNumberTypeFloat64, x->shape());
    for (int64_t i = 0; i < x->numel(); i++) {
      s->data<double>()[i] = alpha * std::sin(x->data<double>()[i]);
      c->data<double>()[i] = alpha * std::cos(x->data<double>()[i]);
    }
    ctx->SaveForBackward({x});
    ctx->saved_data["alpha"] = alpha;
    return {s, c};
  }
  static BaseTensorPtrList Backward(AutogradContext *ctx, BaseTensorPtrList grads) {
    auto x = ctx->GetSavedTensors()[0];
    double alpha = std::any_cast<double>(ctx->saved_data["alpha"]);
    auto dx = std::make_shared<BaseTensor>(kNumberTypeFloat64, x->shape());
    for (int64_t i = 0; i < x->numel(); i++) {
      double v = x->data<double>()[i];
      dx->data<double>()[i] = alpha * (grads[0]->data<double>()[i] * std::cos(v) - grads[1]->data<double>()[i] * std::sin(v));
    }
    return {dx};
  }
};

// Records what NeedGrad / NeedsInputGrad say; returns x + y (same shape, float64).
static std::vector<bool> g_need;
class Add : public Function<Add> {
 public:
  static BaseTensorPtr Forward(AutogradContext *ctx, const BaseTensorPtr &x, const BaseTensorPtr &y) {
    g_need = {ctx->NeedGrad(x), ctx->NeedGrad(y), ctx->NeedsInputGrad(0), ctx->NeedsInputGrad(1)};
    auto z = std::make_shared<BaseTensor>(x->data_type(), x->shape());
    for (int64_t i = 0; i < x->numel(); i++) z->data<double>()[i] = x->data<double>()[i] + y->data<double>()[i];
    return z;
  }
  static BaseTensorPtrList Backward(AutogradContext *ctx, BaseTensorPtrList grads) {
    return {ctx->NeedsInputGrad(0) ? grads[0] : nullptr, ctx->NeedsInputGrad(1) ? grads[0] : nullptr};
  }
};

py::tuple info(const BaseTensorPtr &t) {
  if (!t) return py::make_tuple(py::none(), "null", 0);
  return py::make_tuple(py::cast(t->shape()), TypeIdName(t->data_type()), t->numel());
}

BaseTensorPtr arange(int64_t n) {
  auto t = std::make_shared<BaseTensor>(kNumberTypeInt64, ShapeVector{n});
  for (int64_t i = 0; i < n; i++) t->data<int64_t>()[i] = i;
  return t;
}

double first_as_float(const BaseTensorPtr &t) { return t->data<float>()[0]; }

// A new tensor of t's dtype (float16 or bfloat16, read as their bits) with every sign flipped.
BaseTensorPtr negate_halves(const BaseTensorPtr &t) {
  auto r = std::make_shared<BaseTensor>(t->data_type(), t->shape());
  for (int64_t i = 0; i < t->numel(); i++) r->data<uint16_t>()[i] = t->data<uint16_t>()[i] ^ 0x8000;
  return r;
}

}  // namespace hyb

PYBIND11_MODULE(HYB_EXTENSION_NAME, m) {
  m.def("exp", &hyb::Exp::Apply<hyb::BaseTensorPtr>);
  m.def("sincos", [](const hyb::BaseTensorPtr &x, double alpha, std::string tag) {
    return hyb::SinCos::Apply(x, alpha, tag);
  }, pybind11::arg("x"), pybind11::arg("alpha") = 1.0, pybind11::arg("tag") = "ok");
  m.def("add", [](const hyb::BaseTensorPtr &x, const hyb::BaseTensorPtr &y) { return hyb::Add::Apply(x, y); });
  m.def("need", []() { return hyb::g_need; });
  m.def("info", &hyb::info);
  m.def("arange", &hyb::arange);
  m.def("first_as_float", &hyb::first_as_float);
  m.def("negate_halves", &hyb::negate_halves);
}
"""


@pytest.fixture(scope="module")
def test_ops(tmp_path_factory):
    if not _has_cxx():
        pytest.skip("needs a C++ compiler and pybind11")
    src = tmp_path_factory.mktemp("ops") / "test_ops.cpp"
    src.write_text(OPS_SOURCE)
    # Unoptimised (the flag after the builder's -O2 wins): a build for these tests only, and quicker.
    return CustomOpBuilder("hyb_test_ops", [str(src)], backend="CPU", cflags="-O0").load()


@pytest.fixture(scope="module")
def my_ops():
    if not _has_cxx():
        pytest.skip("needs a C++ compiler and pybind11")
    return CustomOpBuilder("my_ops", [str(EXAMPLES / "custom_src" / "function_ops.cpp")]).load()


@needs_cxx
def test_seed_example_prints_what_the_seed_shows(my_ops):
    # my_ops is built (into this session's HYB_CACHE_DIR): the script loads it from the cache.
    out = run_script(EXAMPLES / "custom_mul.py", EXAMPLES)
    assert out.splitlines() == [
        "out: 12.0",
        "grads[0]: (Tensor(shape=[], dtype=Float32, value= 6.0), Tensor(shape=[], dtype=Float32, value= 4.0))",
        "grads[1]: (Tensor(shape=[], dtype=Float32, value= 6.0),)",
    ]


@needs_cxx
def test_cache_hit_loads_in_milliseconds(my_ops):
    code = textwrap.dedent(f"""
        import time
        import hyb
        from hyb.ops import CustomOpBuilder
        t = time.perf_counter()
        m = CustomOpBuilder("my_ops", [{str(EXAMPLES / "custom_src" / "function_ops.cpp")!r}]).load()
        print(time.perf_counter() - t)
        print(float(m.mul(hyb.Tensor(2.0), hyb.Tensor(3.0))))
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    seconds, value = proc.stdout.split()
    assert float(value) == 6.0
    assert float(seconds) < 0.2, seconds


@needs_cxx
def test_custom_mul_gradients_match_finite_differences(my_ops):
    rng = np.random.default_rng(1)
    x, y = rng.standard_normal((3, 4)), rng.standard_normal((4,))
    w = rng.standard_normal((3, 4))

    def f(a, b):
        return (my_ops.mul(a, b) * hyb.Tensor(w)).sum()

    gx, gy = hyb.grad(f, grad_position=(0, 1))(hyb.Tensor(x), hyb.Tensor(y))
    fx, fy = finite_differences(lambda a, b: float(f(hyb.Tensor(a), hyb.Tensor(b))), [x, y])
    assert gx.shape == (3, 4) and gy.shape == (4,)                 # the broadcast gradient summed back
    np.testing.assert_allclose(gx.asnumpy(), fx, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(gy.asnumpy(), fy, rtol=1e-6, atol=1e-6)
    # only x: y is saved as nullptr and Backward skips it
    gx_only = hyb.grad(f, grad_position=0)(hyb.Tensor(x), hyb.Tensor(y))
    np.testing.assert_allclose(gx_only.asnumpy(), fx, rtol=1e-6, atol=1e-6)
    # outside a gradient: a plain Tensor, nothing on the tape
    z = my_ops.mul(hyb.Tensor(x), y)
    assert isinstance(z, hyb.Tensor) and z._node is None
    np.testing.assert_allclose(z.asnumpy(), x * y)
    # a Python function's forward may call the C++ op: it records nothing there
    with autograd.no_grad():
        assert my_ops.mul(hyb.Parameter(np.ones(2)), np.ones(2))._node is None


def test_cpp_function_gradients_match_finite_differences(test_ops):
    rng = np.random.default_rng(2)
    x = rng.standard_normal((2, 3))

    def f(a):
        s, c = test_ops.sincos(a, 1.5, "ok")
        return (test_ops.exp(s) * 2 + c * c).sum()

    g = hyb.grad(f)(hyb.Tensor(x))
    (fx,) = finite_differences(lambda a: float(f(hyb.Tensor(a))), [x])
    np.testing.assert_allclose(g.asnumpy(), fx, rtol=1e-6, atol=1e-6)
    # the second output alone: the first one's gradient arrives as zeros
    g = hyb.grad(lambda a: test_ops.sincos(a)[1].sum())(hyb.Tensor(x))
    np.testing.assert_allclose(g.asnumpy(), -np.sin(x), rtol=1e-12)
    with pytest.raises(ValueError, match="tag must be ok"):
        test_ops.sincos(hyb.Tensor(x), 1.0, "bad")


def test_cpp_need_grad_flags(test_ops):
    x, y = hyb.Tensor(np.array([1.0, 2.0])), hyb.Tensor(np.array([3.0, 4.0]))
    g = hyb.grad(lambda a, b: test_ops.add(a, b).sum(), grad_position=1)(x, y)
    np.testing.assert_array_equal(g.asnumpy(), [1.0, 1.0])
    assert test_ops.need() == [False, True, False, True]
    test_ops.add(x, y)
    assert test_ops.need() == [False, False, False, False]
    p = hyb.Parameter(np.array([1.0, 1.0]))
    with autograd.enable_grad():
        z = test_ops.add(p, y)
    assert test_ops.need() == [True, False, True, False] and z._node is not None


def test_cpp_tensor_conversions(test_ops):
    assert test_ops.info(hyb.Parameter(2.0)) == ([], "float32", 1)      # scalars are 0-d tensors
    assert test_ops.info(2.0) == ([], "float32", 1)
    assert test_ops.info(3) == ([], "int64", 1)
    assert test_ops.info(None) == (None, "null", 0)
    assert test_ops.info(np.zeros((2, 3), np.float16)) == ([2, 3], "float16", 6)
    bf16 = hyb.dtype.bfloat16
    assert test_ops.info(np.zeros((2, 3), bf16)) == ([2, 3], "bfloat16", 6)
    for dt in (np.float16, bf16):
        x = np.array([1.5, -2.0, 0.0, np.inf], dt)
        y = test_ops.negate_halves(x)
        assert isinstance(y, hyb.Tensor) and y.dtype == dt
        np.testing.assert_array_equal(y.asnumpy().astype(np.float32), -x.astype(np.float32))
    assert test_ops.info(np.zeros((4, 6))[:, ::2]) == ([4, 3], "float64", 12)   # non-contiguous: copied
    t = test_ops.arange(5)                                                      # memory owned by Python
    assert isinstance(t, hyb.Tensor) and t.dtype == np.int64
    np.testing.assert_array_equal(t.asnumpy(), np.arange(5))
    arr = t.asnumpy()
    del t
    np.testing.assert_array_equal(arr, np.arange(5))
    assert test_ops.info(test_ops.arange(0)) == ([0], "int64", 0)
    with pytest.raises(ValueError, match="holds float64"):
        test_ops.first_as_float(np.zeros(2))
    with pytest.raises(TypeError):
        test_ops.info("not a tensor")
