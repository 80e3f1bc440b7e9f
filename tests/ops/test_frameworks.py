"""hyb kernels inside PyTorch (hyb.torch), JAX (hyb.jax) and MindSpore (aot libraries).

Each part skips when its framework is not installed. PyTorch: `torch.library.opcheck` and
`torch.autograd.gradcheck` in float64; JAX: `jax.test_util.check_grads` under x64;
MindSpore: `ops.Custom("lib.so:name", ..., func_type="aot")` against hyb's own results."""
from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import hyb

ROOT = Path(__file__).resolve().parents[2]
FRAMEWORKS = ROOT / "examples" / "frameworks"
matmul = hyb.load(ROOT / "examples" / "matmul.hyb").matmul


@hyb.hybrid
def softmax(x):
    out = output_tensor(x.shape, x.dtype)  # noqa: F821
    for i in range(x.shape[0]):
        m = x[i, 0]
        for j in range(1, x.shape[1]):
            m = max(m, x[i, j])
        s = x.dtype(0)
        for j in range(x.shape[1]):
            s += exp(x[i, j] - m)  # noqa: F821
        for j in range(x.shape[1]):
            out[i, j] = exp(x[i, j] - m) / s  # noqa: F821
    return out


@hyb.hybrid
def axpy(alpha, x, y):
    z = output_tensor(x.shape, x.dtype)  # noqa: F821
    for i in range(x.shape[0]):
        z[i] = alpha * x[i] + y[i]
    return z


@hyb.hybrid
def two(x, idx):
    s = output_tensor(x.shape, x.dtype)  # noqa: F821
    p = output_tensor(x.shape, x.dtype)  # noqa: F821
    for i in range(x.shape[0]):
        s[i] = sin(x[i]) * idx[i]  # noqa: F821
        p[i] = x[i] * x[i]
    return s, p


@hyb.hybrid
def double_in_place(x):
    for i in range(x.shape[0]):
        x[i] = x[i] * 2.0
    return x


@hyb.hybrid
def scale(s, x):
    y = output_tensor(x.shape, x.dtype)  # noqa: F821
    for i in range(x.shape[0]):
        y[i] = s[()] * x[i]
    return y


@hyb.hybrid
def square(x):
    y = output_tensor(x.shape, x.dtype)  # noqa: F821
    for i in range(x.shape[0]):
        y[i] = x[i] * x[i]
    return y


@hyb.hybrid
def square_grad(x, dout):
    dx = output_tensor(x.shape, x.dtype)  # noqa: F821
    for i in range(x.shape[0]):
        dx[i] = 2.0 * x[i] * dout[i]
    return dx


def run_example(name, *args):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    r = subprocess.run([sys.executable, str(FRAMEWORKS / name), *map(str, args)], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    return r.stdout


def test_importing_hyb_imports_no_framework():
    code = "import sys, hyb; bad = [m for m in ('torch', 'jax', 'mindspore') if m in sys.modules]; assert not bad, bad"
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True)


def test_every_framework_example_is_covered():
    assert sorted(p.name for p in FRAMEWORKS.glob("*.py")) == ["jax_op.py", "mindspore_aot.py", "torch_op.py"]


# =================================================================== PyTorch
class TestTorch:
    @pytest.fixture(autouse=True)
    def _torch(self):
        self.torch = pytest.importorskip("torch")
        import hyb.torch
        self.ht = hyb.torch

    def f64(self, *shape, grad=True, seed=0):
        g = self.torch.Generator().manual_seed(seed)
        return self.torch.randn(shape, dtype=self.torch.float64, generator=g).requires_grad_(grad)

    def check(self, op, args):
        torch = self.torch
        assert torch.library.opcheck(op, args) == {k: "SUCCESS" for k in (
            "test_schema", "test_autograd_registration", "test_faketensor", "test_aot_dispatch_dynamic")}
        nograd = tuple(a.detach() if isinstance(a, torch.Tensor) else a for a in args)
        torch.library.opcheck(op, nograd)
        diff = [i for i, a in enumerate(args) if isinstance(a, torch.Tensor) and a.requires_grad]

        def f(*xs):
            full = list(args)
            for i, x in zip(diff, xs):
                full[i] = x
            return op(*full)

        assert torch.autograd.gradcheck(f, tuple(args[i] for i in diff))

    def test_param_kinds(self):
        assert self.ht.param_kinds(axpy) == ["scalar", "tensor", "tensor"]
        assert self.ht.param_kinds(matmul) == ["tensor", "tensor"]
        assert self.ht.param_kinds(two) == ["tensor", "tensor"]

    def test_matmul_forward_and_derived_gradient(self):
        torch = self.torch
        op = self.ht.op(matmul)
        assert op.kernel is matmul and op.hyb_name.startswith("matmul")
        assert str(getattr(torch.ops.hyb, op.hyb_name).default._schema).endswith("(Tensor a, Tensor b) -> Tensor")
        a, b = self.f64(5, 3), self.f64(3, 4, seed=1)
        c = op(a, b)
        torch.testing.assert_close(c, a @ b)
        dout = self.f64(5, 4, grad=False, seed=2)
        c.backward(dout)
        da, db = matmul.grad()(a.detach().numpy(), b.detach().numpy(), dout.numpy())
        assert np.array_equal(a.grad.numpy(), da) and np.array_equal(b.grad.numpy(), db)
        self.check(op, (a, b))

    def test_softmax(self):
        torch = self.torch
        op = self.ht.op(softmax)
        x = self.f64(6, 7)
        torch.testing.assert_close(op(x), torch.softmax(x, 1))
        self.check(op, (x,))

    def test_scalar_parameter(self):
        torch = self.torch
        op = self.ht.op(axpy)
        x, y = self.f64(9), self.f64(9, seed=1)
        torch.testing.assert_close(op(2.5, x, y), 2.5 * x + y)
        self.check(op, (2.5, x, y))
        with pytest.raises(RuntimeError, match="argument 'alpha'"):  # the schema says Scalar alpha
            op(torch.tensor(2.5), x, y)

    def test_two_outputs_and_an_integer_input(self):
        torch = self.torch
        op = self.ht.op(two)
        x, idx = self.f64(8), torch.arange(8)
        s, p = op(x, idx)
        torch.testing.assert_close(s, torch.sin(x) * idx)
        torch.testing.assert_close(p, x * x)
        (s.sum() + p.sum()).backward()
        torch.testing.assert_close(x.grad, torch.cos(x.detach()) * idx + 2 * x.detach())
        self.check(op, (x, idx))

    def test_zero_dimensional_tensor_gets_its_gradient(self):
        torch = self.torch
        op = self.ht.op(scale)
        s, x = self.f64(), self.f64(6, seed=1)
        op(s, x).sum().backward()
        assert s.grad.shape == ()
        torch.testing.assert_close(s.grad, x.detach().sum())
        assert op.grad_op(s, x, torch.ones(6, dtype=torch.float64))[0].shape == ()
        self.check(op, (self.f64(), x))

    def test_in_place_kernel_is_functional(self):
        torch = self.torch
        op = self.ht.op(double_in_place)
        x = self.f64(6, grad=False)
        before = x.clone()
        y = op(x)
        assert torch.equal(x, before) and torch.equal(y, 2 * before)
        self.check(op, (x.clone().requires_grad_(),))

    def test_bprop_kernel_and_bprop_function(self):
        torch = self.torch
        calls = []

        def bprop(x, out, dout):
            calls.append(1)
            return (2 * x * dout,)

        x = self.f64(7)
        for op in (self.ht.op(square, bprop=square_grad), self.ht.op(square, bprop=bprop)):
            torch.testing.assert_close(op(x), x * x)
            self.check(op, (x,))
        assert calls
        assert self.ht.op(square, bprop=bprop).grad_op is None

    def test_cpu_tensors_are_not_copied(self, monkeypatch):
        torch = self.torch
        seen = []
        call = type(matmul).__call__

        def spy(kernel, *args):
            seen.append([a.__array_interface__["data"][0] for a in args])
            out = call(kernel, *args)
            seen.append(out.__array_interface__["data"][0])
            return out

        monkeypatch.setattr(type(matmul), "__call__", spy)
        op = self.ht.op(matmul)
        a, b = torch.randn(4, 3), torch.randn(3, 2)
        c = op(a, b)
        assert seen[0] == [a.data_ptr(), b.data_ptr()] and seen[1] == c.data_ptr()

    def test_float32_noncontiguous_and_names(self):
        torch = self.torch
        op1, op2 = self.ht.op(matmul), self.ht.op(matmul, name="my_matmul")
        assert op1.hyb_name != op2.hyb_name
        assert op2.hyb_name.startswith("my_matmul")
        a = torch.randn(3, 5).t()  # not contiguous: hyb copies it
        b = torch.randn(3, 4)
        torch.testing.assert_close(op1(a, b), a @ b)
        torch.testing.assert_close(torch.ops.hyb.__getattr__(op2.hyb_name)(a, b), a @ b)

    def test_unsupported_dtype(self):
        torch = self.torch
        op = self.ht.op(matmul)
        with pytest.raises(hyb.HybridArgumentError, match="complex64.*bfloat16"):
            op(torch.ones(2, 2, dtype=torch.complex64), torch.ones(2, 2, dtype=torch.complex64))

    def test_bfloat16_tensors(self):
        torch = self.torch
        ml_dtypes = pytest.importorskip("ml_dtypes")
        op = self.ht.op(two)
        x = torch.randn(9, dtype=torch.bfloat16, requires_grad=True)
        idx = torch.arange(9)
        s, p = op(x, idx)
        assert s.dtype == p.dtype == torch.bfloat16
        xb = x.detach().view(torch.int16).numpy().view(ml_dtypes.bfloat16)  # the same bits in NumPy
        want_s, want_p = two(xb, idx.numpy())
        assert np.array_equal(s.detach().view(torch.int16).numpy(), want_s.view(np.int16))
        assert np.array_equal(p.detach().view(torch.int16).numpy(), want_p.view(np.int16))
        torch.testing.assert_close(p.detach(), x.detach() * x.detach())  # torch rounds as hyb does
        (s.sum() + p.sum()).backward()
        assert x.grad.dtype == torch.bfloat16
        ds, dp = np.ones(9, ml_dtypes.bfloat16), np.ones(9, ml_dtypes.bfloat16)
        want = two.grad()(xb, idx.numpy(), ds, dp)[0]
        assert np.array_equal(x.grad.view(torch.int16).numpy(), want.view(np.int16))
        # not contiguous, and through the fake (meta) implementation
        y = torch.randn(4, 9, dtype=torch.bfloat16).t()[2]
        torch.testing.assert_close(op(y, idx)[1], y * y)
        torch.library.opcheck(op, (x.detach(), idx), test_utils=("test_schema", "test_faketensor"))

    def test_torch_compile(self):
        torch = self.torch
        op = self.ht.op(softmax)
        x = self.f64(4, 5)
        w = self.f64(4, 5, grad=False, seed=1)

        def rows_and_loss(v, weights):
            y = op(v * 2)
            return y.sum(dim=1), (y * weights).sum()

        f = torch.compile(rows_and_loss, backend="aot_eager", fullgraph=True)
        rows, loss = f(x, w)
        torch.testing.assert_close(rows, torch.ones(4, dtype=torch.float64))
        # a weighted sum: its gradient is not zero (that of the row sums is, whatever the code does)
        ref = x.detach().clone().requires_grad_()
        want_loss = (torch.softmax(ref * 2, dim=1) * w).sum()
        torch.testing.assert_close(loss, want_loss, rtol=1e-12, atol=1e-12)
        loss.backward()
        want_loss.backward()
        assert ref.grad.abs().max() > 0.1
        torch.testing.assert_close(x.grad, ref.grad, rtol=1e-10, atol=1e-12)

    def test_example(self):
        assert "match torch.softmax" in run_example("torch_op.py")


# =================================================================== JAX
class TestJax:
    @pytest.fixture(autouse=True)
    def _jax(self):
        self.jax = pytest.importorskip("jax")
        import hyb.jax
        self.hj = hyb.jax
        old = self.jax.config.jax_enable_x64
        self.jax.config.update("jax_enable_x64", True)
        yield
        self.jax.config.update("jax_enable_x64", old)

    def rand(self, *shape, seed=0):
        return np.random.default_rng(seed).standard_normal(shape)

    def check(self, f, args):
        from jax.test_util import check_grads
        check_grads(f, args, order=1, modes=("rev",))
        check_grads(self.jax.jit(f), args, order=1, modes=("rev",))

    def test_matmul_jit_grad(self):
        jax, jnp = self.jax, self.jax.numpy
        mm = self.hj.op(matmul)
        a, b = self.rand(5, 3), self.rand(3, 4, seed=1)
        np.testing.assert_allclose(mm(a, b), a @ b, rtol=1e-12)
        np.testing.assert_allclose(jax.jit(mm)(a, b), a @ b, rtol=1e-12)
        dout = self.rand(5, 4, seed=2)
        da, db = jax.jit(jax.grad(lambda a, b: jnp.sum(mm(a, b) * dout), argnums=(0, 1)))(a, b)
        want = matmul.grad()(a, b, dout)
        assert np.array_equal(da, want[0]) and np.array_equal(db, want[1])
        self.check(mm, (a, b))

    def test_softmax_and_vmap(self):
        jax = self.jax
        sm = self.hj.op(softmax)
        x = self.rand(4, 6)
        np.testing.assert_allclose(sm(x), jax.nn.softmax(x, axis=1), rtol=1e-12)
        self.check(sm, (x,))
        xs = self.rand(3, 4, 6)
        np.testing.assert_allclose(jax.vmap(sm)(xs), jax.nn.softmax(xs, axis=2), rtol=1e-12)

    def test_scalar_parameter(self):
        jax = self.jax
        f = self.hj.op(axpy)
        x, y = self.rand(9), self.rand(9, seed=1)
        np.testing.assert_allclose(f(2.5, x, y), 2.5 * x + y, rtol=1e-12)
        np.testing.assert_allclose(jax.jit(f)(2.5, x, y), 2.5 * x + y, rtol=1e-12)
        self.check(lambda x, y: f(2.5, x, y), (x, y))
        # float32 arrays with a Python float: weak, as in hyb (the result stays float32)
        assert f(2.5, x.astype(np.float32), y.astype(np.float32)).dtype == np.float32

    def test_two_outputs_integer_input(self):
        jax, jnp = self.jax, self.jax.numpy
        f = self.hj.op(two)
        x, idx = self.rand(8), np.arange(8)
        s, p = jax.jit(f)(x, idx)
        np.testing.assert_allclose(s, np.sin(x) * idx, rtol=1e-12)
        np.testing.assert_allclose(p, x * x, rtol=1e-12)
        self.check(lambda x: f(x, idx), (x,))
        g = jax.grad(lambda x: jnp.sum(f(x, idx)[0]))(x)
        np.testing.assert_allclose(g, np.cos(x) * idx, rtol=1e-12)

    def test_zero_dimensional_array_gets_its_gradient(self):
        f = self.hj.op(scale)
        s, x = self.rand(), self.rand(6, seed=1)
        g = self.jax.grad(lambda s, x: f(s, x).sum())(s, x)
        np.testing.assert_allclose(g, x.sum(), rtol=1e-12)
        self.check(f, (s, x))

    def test_bfloat16_arrays(self):
        jax, jnp = self.jax, self.jax.numpy
        f = self.hj.op(two)
        x = jnp.asarray(self.rand(8), jnp.bfloat16)  # ml_dtypes.bfloat16 in NumPy
        idx = np.arange(8)
        s, p = jax.jit(f)(x, idx)
        assert s.dtype == p.dtype == jnp.bfloat16
        want_s, want_p = two(np.asarray(x), idx)
        assert np.array_equal(np.asarray(s).view(np.int16), want_s.view(np.int16))
        assert np.array_equal(np.asarray(p).view(np.int16), want_p.view(np.int16))
        g = jax.grad(lambda x: jnp.sum(f(x, idx)[1].astype(jnp.float32)))(x)
        assert g.dtype == jnp.bfloat16
        want = two.grad()(np.asarray(x), idx, np.zeros(8, x.dtype), np.ones(8, x.dtype))[0]
        assert np.array_equal(np.asarray(g).view(np.int16), want.view(np.int16))

    def test_in_place_and_bprops(self):
        x = self.rand(7)
        f = self.hj.op(double_in_place)
        np.testing.assert_allclose(f(x), 2 * x)
        self.check(f, (x,))
        self.check(self.hj.op(square, bprop=square_grad), (x,))
        self.check(self.hj.op(square, bprop=lambda x, out, dout: (2 * x * dout,)), (x,))

    def test_example(self):
        assert "jit, grad and vmap" in run_example("jax_op.py")


# =================================================================== MindSpore
class TestMindSpore:
    @pytest.fixture(autouse=True)
    def _ms(self):
        if importlib.util.find_spec("mindspore") is None:
            pytest.skip("mindspore is not installed")

    def test_example(self, tmp_path):
        out = run_example("mindspore_aot.py", tmp_path)
        assert "give hyb's results" in out
        assert (tmp_path / "libmatmul.so").exists() and (tmp_path / "libmatmul_grad.so").exists()

    def test_cli_library_two_outputs(self, tmp_path):
        """`hyb aot` on the command line; a kernel with two outputs, an integer input, relative path."""
        (tmp_path / "two.hyb").write_text(
            "def two(x, idx):\n"
            "    s = output_tensor(x.shape, x.dtype)\n"
            "    p = output_tensor(x.shape, x.dtype)\n"
            "    for i in range(x.shape[0]):\n"
            "        s[i] = sin(x[i]) * idx[i]\n"
            "        p[i] = x[i] * x[i]\n"
            "    return s, p\n")
        hyb_cmd = [sys.executable, "-m", "hyb.cli"]
        subprocess.run([*hyb_cmd, "aot", "two.hyb", "--args", "x=float32[16] idx=int32[16]", "-o", "libtwo.so"],
                       cwd=tmp_path, check=True, capture_output=True, env=dict(os.environ, PYTHONPATH=str(ROOT)))
        code = (
            "import numpy as np, mindspore as ms\n"
            "from mindspore import ops, Tensor\n"
            "ms.set_context(device_target='CPU')\n"
            "op = ops.Custom('./libtwo.so:two', out_shape=lambda x, i: (x, x), out_dtype=lambda x, i: (x, x),"
            " func_type='aot')\n"
            "x = np.linspace(-2, 2, 16).astype(np.float32); idx = np.arange(16, dtype=np.int32)\n"
            "s, p = op(Tensor(x), Tensor(idx))\n"
            "np.save('s.npy', s.asnumpy()); np.save('p.npy', p.asnumpy())\n")
        subprocess.run([sys.executable, "-c", code], cwd=tmp_path, check=True, capture_output=True)
        two_k = hyb.load(tmp_path / "two.hyb").two
        x = np.linspace(-2, 2, 16).astype(np.float32)
        idx = np.arange(16, dtype=np.int32)
        s, p = two_k(x, idx)
        assert np.array_equal(np.load(tmp_path / "s.npy"), s)
        assert np.array_equal(np.load(tmp_path / "p.npy"), p)
