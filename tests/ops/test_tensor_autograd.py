"""hyb.Tensor, hyb.Parameter, the tape (hyb.autograd), grad / value_and_grad / GradOperation,
hyb.nn.Cell and set_context, with MindSpore's semantics."""
import numpy as np
import pytest

import hyb
from hyb import autograd, context
from hyb.autograd import GradOperation
from hyb.errors import HybridArgumentError, HybridTypeError, HybridUnsupportedError
from hyb.nn import Cell
from hyb.tensor import Parameter, ParameterTuple, Tensor

RNG = np.random.default_rng(7)


def rand(*shape, dtype=np.float64):
    return RNG.standard_normal(shape).astype(dtype)


def fd_grad(f, arrays, i, eps=1e-6):
    """Central finite differences of the scalar ``sum(f(*arrays))`` in its argument ``i``."""
    value = lambda xs: float(np.sum(np.asarray(f(*[Tensor(a) for a in xs]))))
    x = arrays[i]
    g = np.zeros_like(x)
    for idx in np.ndindex(x.shape):
        plus = [a.copy() for a in arrays]
        minus = [a.copy() for a in arrays]
        plus[i][idx] += eps
        minus[i][idx] -= eps
        g[idx] = (value(plus) - value(minus)) / (2 * eps)
    return g


# ----------------------------------------------------------------------------- a fake operator

def square_op(x, log=None):
    """A Custom-style operator on the recording interface: y = x * x, dx = 2 * x * dout."""
    xs = x.asnumpy()
    y = Tensor.from_numpy(xs * xs)

    def backward(douts):
        if log is not None:
            log.append((douts[0].dtype, autograd.is_grad_enabled()))
        return [2 * xs * douts[0]]

    autograd.record([x], [y], backward)
    return y


def split_op(x, scale):
    """Two outputs (x * scale, x + 1) and a non-tensor input: backward answers None for it."""
    xs = x.asnumpy()
    a, b = Tensor.from_numpy(xs * scale), Tensor.from_numpy(xs + 1)
    autograd.record([x, scale], [a, b], lambda douts: [douts[0] * scale + douts[1], None])
    return a, b


# ----------------------------------------------------------------------------- Tensor basics

def test_construction_and_dtypes():
    assert Tensor(1.0).dtype == np.float32                        # Python floats: float32 (MindSpore)
    assert Tensor([1.0, 2.0]).dtype == hyb.float32
    assert Tensor([1, 2]).dtype == np.int64
    assert Tensor(True).dtype == hyb.bool_
    assert Tensor(np.zeros(3)).dtype == np.float64                # NumPy data keeps its dtype
    assert Tensor(np.float16(1)).dtype == np.float16
    for dt in (hyb.float16, np.float16, "float16"):
        assert Tensor([1, 2], dt).dtype == np.float16
    t = Tensor(np.ones((2, 3), np.int32), dtype=hyb.float64)
    assert (t.shape, t.dtype, t.ndim, t.size) == ((2, 3), np.float64, 2, 6)
    assert Tensor(t).dtype == np.float64 and Tensor(t).shape == (2, 3)
    a = np.arange(4.0)
    c = Tensor(a)
    a[0] = 99                                                     # the constructor copies
    assert c.asnumpy()[0] == 0
    shared = Tensor.from_numpy(a)
    assert shared.asnumpy() is a
    assert np.asarray(shared) is a
    assert isinstance(hyb.float32, np.dtype) and hyb.int8 == np.int8 and hyb.uint64 == np.uint64


def test_construction_errors():
    with pytest.raises(HybridTypeError, match="not a dtype"):
        Tensor([1.0], "flaot32")
    with pytest.raises(HybridTypeError, match="holds numbers"):
        Tensor(["a", "b"])
    with pytest.raises(HybridTypeError, match="needs data"):
        Tensor()


@pytest.mark.parametrize("data", [np.array([2.0, 8.0, 18.0], np.float32), np.arange(12.0).reshape(3, 4) / 7,
                                  np.array(6.0, np.float32), np.array([[1, -2], [3, 4]], np.int32),
                                  np.array([True, False])])
def test_printing_is_numpy(data, capsys):
    t = Tensor(data)
    assert str(t) == str(data)
    print(t)
    assert capsys.readouterr().out == str(data) + "\n"


def test_seed_prints():
    assert str(Tensor(np.array([1.0, 4.0, 9.0], np.float32)) * 2) == "[ 2.  8. 18.]"
    assert str(Tensor(1.0, hyb.float32) * 2 * 3 * Tensor(2.0)) == "12.0"


def test_repr_is_mindspore_style():
    assert repr(Tensor([2.0, 8.0])) == "Tensor(shape=[2], dtype=Float32, value= [2. 8.])"
    assert repr(Tensor(6.0)) == "Tensor(shape=[], dtype=Float32, value= 6.0)"
    assert repr(Tensor(np.zeros((2, 2), np.uint8))) == "Tensor(shape=[2, 2], dtype=UInt8, value=\n[[0 0]\n [0 0]])"
    assert repr(Parameter(2.0, name="p")) == "Parameter (name=p, shape=(), dtype=Float32, requires_grad=True)"


BINARY = [
    ("add", lambda a, b: a + b), ("sub", lambda a, b: a - b), ("mul", lambda a, b: a * b),
    ("div", lambda a, b: a / b), ("pow", lambda a, b: abs(a) ** b), ("matmul", lambda a, b: a @ b.T),
    ("mod", lambda a, b: a % b), ("floordiv", lambda a, b: a // b),
]


@pytest.mark.parametrize("name,op", BINARY, ids=[n for n, _ in BINARY])
def test_arithmetic_matches_numpy(name, op):
    a, b = rand(3, 4) + 3, rand(3, 4) + 3
    want = op(a, b)
    for got in (op(Tensor(a), Tensor(b)), op(Tensor(a), b), op(a, Tensor(b))):
        assert isinstance(got, Tensor)
        np.testing.assert_allclose(got.asnumpy(), want, rtol=1e-12)


def test_scalars_broadcasting_and_dtypes():
    x = Tensor(np.arange(6, dtype=np.float32).reshape(2, 3))
    for got, want in [(x + 1, x.asnumpy() + 1), (2.5 * x, 2.5 * x.asnumpy()), (1 - x, 1 - x.asnumpy()),
                      (x / 2, x.asnumpy() / 2), (2 ** x, 2 ** x.asnumpy()), (x ** 2, x.asnumpy() ** 2),
                      (-x, -x.asnumpy()), (x + np.array([1, 2, 3], np.float32), x.asnumpy() + [1, 2, 3]),
                      (x * Tensor(np.ones((2, 1), np.float32)), x.asnumpy())]:
        assert got.dtype == np.float32                            # Python numbers are weak
        np.testing.assert_array_equal(got.asnumpy(), want)
    assert (Tensor([1, 2]) / 2).dtype == np.float32                # MindSpore: int / int is float32
    assert (x + np.ones(3)).dtype == np.float64                   # the wider float wins
    r = np.ones((2, 3), np.float32) + x                           # ndarray on the left: still a Tensor
    assert isinstance(r, Tensor) and r.dtype == np.float32
    m = Tensor(np.ones((5, 2, 3))) @ Tensor(np.ones((3, 4)))
    assert m.shape == (5, 2, 4)
    with pytest.raises(HybridArgumentError, match=r"Tensor.__add__: shapes \(3,\) and \(4,\) do not broadcast"):
        Tensor(np.ones(3)) + Tensor(np.ones(4))


def test_comparisons_reductions_shapes_indexing():
    a = rand(2, 3, 4)
    t = Tensor(a)
    for got, want in [(t > 0, a > 0), (t <= 0.5, a <= 0.5), (t == t, a == a), (t != 1.0, a != 1.0)]:
        assert isinstance(got, Tensor) and got.dtype == np.bool_
        np.testing.assert_array_equal(got.asnumpy(), want)
    np.testing.assert_allclose(t.sum().asnumpy(), a.sum())
    np.testing.assert_allclose(t.sum(axis=1).asnumpy(), a.sum(axis=1))
    np.testing.assert_allclose(t.sum(axis=(0, 2), keepdims=True).asnumpy(), a.sum(axis=(0, 2), keepdims=True))
    np.testing.assert_allclose(t.mean(axis=-1).asnumpy(), a.mean(axis=-1))
    np.testing.assert_allclose(t.mean().asnumpy(), a.mean())
    assert t.reshape(6, 4).shape == (6, 4) and t.reshape((4, -1)).shape == (4, 6)
    assert t.transpose().shape == (4, 3, 2) and t.T.shape == (4, 3, 2) and t.transpose(1, 0, 2).shape == (3, 2, 4)
    np.testing.assert_array_equal(t[1, :, ::2].asnumpy(), a[1, :, ::2])
    np.testing.assert_array_equal(t[Tensor(np.array([1, 0, 1]))].asnumpy(), a[[1, 0, 1]])
    np.testing.assert_array_equal(t[t > 0].asnumpy(), a[a > 0])
    assert t.astype("float32").dtype == np.float32
    with pytest.raises(HybridUnsupportedError, match="read-only"):
        t[0] = 1.0


def test_numpy_interoperation():
    a = rand(4)
    t = Tensor(a)
    assert np.allclose(t, a) and np.array_equal(np.asarray(t), a)
    np.testing.assert_allclose(t, a)
    assert float(np.sum(t).asnumpy()) == pytest.approx(a.sum())
    np.testing.assert_allclose(np.exp(t).asnumpy(), np.exp(a))
    np.testing.assert_allclose(np.maximum(t, 0).asnumpy(), np.maximum(a, 0))   # no gradient needed: fine
    assert float(Tensor(2.5)) == 2.5 and int(Tensor([3])) == 3 and len(t) == 4
    assert [float(v) for v in t] == pytest.approx(list(a))
    assert t.tolist() == pytest.approx(list(a)) and Tensor(3.0).item() == 3.0
    assert {t: 1}[t] == 1                                          # hashable by identity


# ----------------------------------------------------------------------------- gradients of Tensor expressions

EXPRESSIONS = [
    ("poly", lambda x, y: x * x * y - 3 * x / (y * y + 1) + 2),
    ("broadcast", lambda x, y: (x * y[0] + x.sum(axis=0, keepdims=True)) ** 2),
    ("matmul", lambda x, y: (x @ y.T).mean(axis=1) * 1.5),
    ("matvec", lambda x, y: x @ y[0] - y[1] @ x.T),
    ("reshape_transpose", lambda x, y: x.reshape(6) * y.T.reshape(6) + (x.T @ y).sum()),
    ("index", lambda x, y: x[0] * y[1, ::-1] + x[[0, 0, 1]].sum(axis=0) + x[x > 0].sum()),
    ("pow_tensor", lambda x, y: (x * x + 1) ** (y * 0.5)),
    ("ufuncs", lambda x, y: np.exp(x) * np.sin(y) + np.log(x * x + 1) + np.tanh(y) * np.sqrt(y * y + 2)
     + np.cos(x) + abs(x) * np.square(y)),
    ("rsub_rdiv_rpow", lambda x, y: 1 - x + 2 / (y * y + 1) + 1.5 ** x - (-y)),
    ("mod", lambda x, y: (x * 3) % 1.7 + x // 0.5),
    ("astype", lambda x, y: (x.astype(np.float32) * 2).astype(np.float64) * y),
]


@pytest.mark.parametrize("name,f", EXPRESSIONS, ids=[n for n, _ in EXPRESSIONS])
def test_gradients_match_finite_differences(name, f):
    x, y = rand(2, 3), rand(2, 3)
    if name == "mod":                                               # stay away from the jumps
        x = np.array([[0.11, 0.2, 0.33], [0.41, 0.04, 0.27]])
    gx, gy = hyb.grad(f, grad_position=(0, 1))(Tensor(x), Tensor(y))
    eps, tol = (1e-2, 1e-4) if name == "astype" else (1e-6, 1e-6)   # float32 inside: a bigger step
    np.testing.assert_allclose(gx.asnumpy(), fd_grad(f, [x, y], 0, eps), rtol=tol, atol=tol)
    np.testing.assert_allclose(gy.asnumpy(), fd_grad(f, [x, y], 1, eps), rtol=tol, atol=tol)


def test_gradients_closed_forms():
    x = np.array([1.0, 4.0, 9.0], np.float32)
    dx = hyb.grad(lambda t: t * t)(Tensor(x))
    assert isinstance(dx, Tensor) and dx.dtype == np.float32
    assert str(dx) == "[ 2.  8. 18.]"
    a, b = rand(3, 4), rand(4, 5)
    da, db = hyb.grad(lambda p, q: (p @ q).sum(), (0, 1))(a, b)   # NumPy arrays are accepted as inputs
    np.testing.assert_allclose(da.asnumpy(), np.ones((3, 5)) @ b.T)
    np.testing.assert_allclose(db.asnumpy(), a.T @ np.ones((3, 5)))
    g = hyb.grad(lambda t: t[Tensor(np.array([0, 2, 0, 0]))].sum())(Tensor(np.zeros(3)))
    np.testing.assert_array_equal(g.asnumpy(), [3, 0, 1])           # repeated indices accumulate
    g = hyb.grad(lambda t: t.mean(axis=0))(Tensor(np.ones((4, 2))))
    np.testing.assert_allclose(g.asnumpy(), np.full((4, 2), 0.25))
    g = hyb.grad(lambda t: t ** 0)(Tensor(np.array([0.0, 2.0])))
    np.testing.assert_array_equal(g.asnumpy(), [0.0, 0.0])          # no nan at 0
    g = hyb.grad(lambda t: (t * t).sum() + t + t)(Tensor(np.array([1.0, -2.0])))
    np.testing.assert_allclose(g.asnumpy(), [6.0, -6.0])            # used three times, output of 2


def test_non_differentiable_ufunc_on_tracked_tensor_is_refused():
    with pytest.raises(HybridUnsupportedError, match="numpy.arctan2"):
        hyb.grad(lambda t: np.arctan2(t, 1.0))(Tensor([1.0]))


# ----------------------------------------------------------------------------- the recording interface

def test_needs_grad():
    plain, p = Tensor([1.0]), Parameter([1.0])
    assert not autograd.needs_grad(plain, 2.0, None, np.ones(2))
    assert autograd.needs_grad(plain, p)
    assert autograd.needs_grad([plain, (3, p)])                     # looked for inside lists and tuples
    assert autograd.needs_grad(p * 2)                               # derived from a recorded op
    assert not autograd.needs_grad(plain * 2)
    assert not autograd.needs_grad(Parameter([1.0], requires_grad=False))
    with autograd.no_grad():
        assert not autograd.needs_grad(p)
        assert not autograd.needs_grad(p * 2)
    assert autograd.needs_grad(p)


def test_record_and_grad_through_a_fake_operator():
    x = np.array([1.0, 4.0, 9.0], np.float32)
    log = []
    dx = hyb.grad(lambda t: square_op(t, log))(Tensor(x))
    np.testing.assert_array_equal(dx.asnumpy(), 2 * x)
    assert log == [(np.float32, False)]                # dout in the output's dtype; recording off in backward
    # composed with Tensor arithmetic on both sides, and the operator used twice
    f = lambda t: (square_op(t * 3 + 1) * np.float64(0.5) + square_op(t)).sum()
    x64 = rand(5)
    np.testing.assert_allclose(hyb.grad(f)(Tensor(x64)).asnumpy(), 3 * (3 * x64 + 1) + 2 * x64)
    np.testing.assert_allclose(hyb.grad(f)(Tensor(x64)).asnumpy(), fd_grad(f, [x64], 0), rtol=1e-6)
    # the sens of a float32 op is float32 even when a later op promotes to float64
    log = []
    hyb.grad(lambda t: square_op(t, log) * np.ones(3))(Tensor(x))
    assert log == [(np.float32, False)]


def test_record_does_nothing_without_tracked_inputs():
    y = square_op(Tensor([3.0]))
    assert y._node is None and not autograd.needs_grad(y)
    p = Parameter([3.0])
    y = square_op(p)
    assert y._node is not None and autograd.needs_grad(y) and not y.requires_grad


def test_record_several_outputs_and_non_tensor_inputs():
    def f(t):
        a, b = split_op(t, 3.0)
        return a                                        # b gets no gradient: its dout is zeros
    np.testing.assert_allclose(hyb.grad(f)(Tensor([1.0, 2.0])).asnumpy(), [3.0, 3.0])

    def g(t):
        a, b = split_op(t, 3.0)
        return a * b
    x = np.array([1.0, 2.0])
    np.testing.assert_allclose(hyb.grad(g)(Tensor(x)).asnumpy(), fd_grad(g, [x], 0), rtol=1e-6)
    # an output the differentiated one does not depend on
    np.testing.assert_array_equal(hyb.grad(lambda t, u: square_op(u), (0, 1))(Tensor([1.0]), Tensor([2.0]))[0]
                                  .asnumpy(), [0.0])


def test_record_checks_what_backward_returns():
    def op(x, result):
        y = Tensor.from_numpy(x.asnumpy() * 2)
        autograd.record([x], [y], lambda douts: result, name="bad_op")
        return y
    with pytest.raises(HybridArgumentError, match="`bad_op` returned 2 gradient"):
        hyb.grad(lambda t: op(t, [np.ones(2), np.ones(2)]))(Tensor([1.0, 2.0]))
    with pytest.raises(HybridArgumentError, match=r"shape \(3,\), expected \(2,\)"):
        hyb.grad(lambda t: op(t, [np.ones(3)]))(Tensor([1.0, 2.0]))
    g = hyb.grad(lambda t: op(t, [np.float64(5.0)]))(Tensor([1.0, 2.0]))   # a scalar spreads
    np.testing.assert_array_equal(g.asnumpy(), [5.0, 5.0])
    g = hyb.grad(lambda t: op(t, [None]))(Tensor([1.0, 2.0]))              # None: no gradient
    np.testing.assert_array_equal(g.asnumpy(), [0.0, 0.0])
    x = Parameter([1.0])
    with pytest.raises(HybridArgumentError, match="also an input"):
        autograd.record([x], [x], lambda d: d)
    with pytest.raises(HybridTypeError, match="must be hyb Tensors"):
        autograd.record([x], [np.ones(1)], lambda d: d)


# ----------------------------------------------------------------------------- grad and value_and_grad

def xyz():
    return (Tensor(np.array([1.0, 2.0], np.float32)), Tensor(np.array([-2.0, 3.0], np.float32)),
            Tensor(np.array([0.0, 3.0], np.float32)))


class Mul3(Cell):
    def construct(self, x, y, z):
        return x * y * z


def test_grad_positions():
    x, y, z = xyz()
    net = Mul3()
    np.testing.assert_array_equal(hyb.grad(net)(x, y, z).asnumpy(), [-0.0, 9.0])
    np.testing.assert_array_equal(hyb.grad(net, 1)(x, y, z).asnumpy(), [0.0, 6.0])
    single = hyb.grad(net, (1,))(x, y, z)
    assert isinstance(single, Tensor)                               # a one-element tuple unwraps, as MindSpore
    gx, gz = hyb.grad(net, (0, 2))(x, y, z)
    np.testing.assert_array_equal(gx.asnumpy(), [-0.0, 9.0])
    np.testing.assert_array_equal(gz.asnumpy(), [-2.0, 6.0])
    assert x._node is None and not x.requires_grad                  # the caller's Tensors are untouched


def test_value_and_grad_and_has_aux():
    x, y, z = xyz()
    out, g = hyb.value_and_grad(Mul3(), grad_position=1)(x, y, z)
    np.testing.assert_array_equal(out.asnumpy(), [-0.0, 18.0])
    np.testing.assert_array_equal(g.asnumpy(), [0.0, 6.0])
    assert out._node is None                                        # values come back detached

    def fn(x, y, z):
        return x * np.exp(y) * z ** 2, z
    x, y, z = Tensor([3.0, 3.0]), Tensor([0.0, 0.0]), Tensor([5.0, 5.0])
    (res, aux), (gy, gz) = hyb.value_and_grad(fn, (1, 2), has_aux=True)(x, y, z)
    np.testing.assert_array_equal(res.asnumpy(), [75.0, 75.0])
    np.testing.assert_array_equal(aux.asnumpy(), [5.0, 5.0])
    np.testing.assert_array_equal(gy.asnumpy(), [75.0, 75.0])
    np.testing.assert_array_equal(gz.asnumpy(), [30.0, 30.0])       # aux does not contribute
    grads, aux = hyb.grad(fn, (1, 2), has_aux=True)(x, y, z)
    assert isinstance(aux, tuple) and len(aux) == 1
    np.testing.assert_array_equal(aux[0].asnumpy(), [5.0, 5.0])
    np.testing.assert_array_equal(grads[1].asnumpy(), [30.0, 30.0])
    # without has_aux every output contributes
    gz = hyb.grad(fn, 2)(x, y, z)
    np.testing.assert_array_equal(gz.asnumpy(), [31.0, 31.0])


def test_grad_argument_errors():
    f = lambda a, b: a * b
    with pytest.raises(HybridArgumentError, match="both None"):
        hyb.grad(f, grad_position=None)
    with pytest.raises(HybridTypeError, match="grad_position"):
        hyb.grad(f, grad_position=1.0)
    with pytest.raises(HybridArgumentError, match="twice"):
        hyb.grad(f, grad_position=(0, 0))
    with pytest.raises(HybridArgumentError, match="negative"):
        hyb.grad(f, grad_position=-1)
    with pytest.raises(HybridArgumentError, match="out of range"):
        hyb.grad(f, grad_position=2)(Tensor(1.0), Tensor(2.0))
    with pytest.raises(HybridArgumentError, match="input 1 is a float"):
        hyb.grad(f, grad_position=1)(Tensor(1.0), 2.0)
    with pytest.raises(HybridArgumentError, match="has_aux=True"):
        hyb.grad(f, has_aux=True)(Tensor(1.0), Tensor(2.0))
    with pytest.raises(HybridTypeError, match="weights must be Parameters"):
        hyb.grad(f, weights=[1.0])


class Dense(Cell):
    def __init__(self):
        super().__init__()
        self.w = Parameter(np.array([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]], np.float32))
        self.b = Parameter(np.array([0.5, -0.5], np.float32))

    def construct(self, x):
        return x @ self.w + self.b


class TwoLayers(Cell):
    def __init__(self):
        super().__init__()
        self.scale = Parameter(2.0, name="scale")
        self.frozen = Parameter(np.ones(2, np.float32), requires_grad=False)
        self.dense = Dense()

    def construct(self, x):
        return ((self.dense(x) * self.scale * self.frozen) ** 2).sum()


def test_grad_with_weights():
    net = TwoLayers()
    x = Tensor(np.array([[1.0, -1.0, 2.0]], np.float32))
    params = net.trainable_params()
    assert [p.name for p in params] == ["scale", "w", "b"]
    xs, w, b, s = x.asnumpy(), net.dense.w.asnumpy(), net.dense.b.asnumpy(), 2.0
    h = xs @ w + b
    dh = 2 * h * s * s                                              # d/dh of sum((h * s) ** 2)
    want = [np.sum(2 * h * h * s), xs.T @ dh, dh.sum(axis=0)]
    gw = hyb.grad(net, grad_position=None, weights=params)(x)
    assert isinstance(gw, tuple) and len(gw) == 3
    for got, exp in zip(gw, want):
        np.testing.assert_allclose(got.asnumpy(), exp, rtol=1e-6)
        assert got.dtype == np.float32
    gx, gw2 = hyb.grad(net, 0, params)(x)
    np.testing.assert_allclose(gx.asnumpy(), dh @ w.T, rtol=1e-6)
    np.testing.assert_allclose(gw2[1].asnumpy(), want[1], rtol=1e-6)
    one = hyb.grad(net, None, net.scale)(x)                         # a single Parameter: a single gradient
    assert isinstance(one, Tensor) and one.shape == ()
    loss, (gx, gw3) = hyb.value_and_grad(net, 0, weights=ParameterTuple(params))(x)
    assert float(loss) == pytest.approx(np.sum((h * s) ** 2))
    unused = hyb.grad(net, None, [Parameter(np.ones(4))])(x)
    np.testing.assert_array_equal(unused[0].asnumpy(), np.zeros(4))


def test_seed_custom_op_builder_example():
    """The numbers of the CustomOpBuilder seed, with Tensor arithmetic in place of its op."""
    class MyNet(Cell):
        def __init__(self):
            super().__init__()
            self.p = Parameter(2.0, requires_grad=True)

        def construct(self, x, y):
            z = x * y
            return z * self.p

    x = Tensor(1.0, hyb.float32) * 2
    y = Tensor(1.0, hyb.float32) * 3
    net = MyNet()
    out, grads = hyb.value_and_grad(net, grad_position=(0, 1), weights=net.trainable_params())(x, y)
    assert str(out) == "12.0"
    assert [float(g) for g in grads[0]] == [6.0, 4.0]
    assert len(grads[1]) == 1 and float(grads[1][0]) == 6.0


# ----------------------------------------------------------------------------- GradOperation

class XYNet(Cell):
    def __init__(self):
        super().__init__()
        self.z = Parameter(np.array([1.0], np.float32), name="z")

    def construct(self, x, y):
        return (x * self.z) @ y


def xy():
    x = Tensor(np.array([[0.5, 0.6, 0.4], [1.2, 1.3, 1.1]], np.float32))
    y = Tensor(np.array([[0.01, 0.3, 1.1], [0.1, 0.2, 1.3], [2.1, 1.2, 3.3]], np.float32))
    return x, y


def test_grad_operation_variants():
    net = XYNet()
    x, y = xy()
    xs, ys = x.asnumpy(), y.asnumpy()
    ones = np.ones((2, 3), np.float32)
    dx = GradOperation()(net)(x, y)
    np.testing.assert_allclose(dx.asnumpy(), ones @ ys.T, rtol=1e-6)
    both = GradOperation(get_all=True)(net)(x, y)
    assert isinstance(both, tuple) and len(both) == 2
    np.testing.assert_allclose(both[1].asnumpy(), xs.T @ ones, rtol=1e-6)
    params = ParameterTuple(net.trainable_params())
    (gz,) = GradOperation(get_by_list=True)(net, params)(x, y)
    np.testing.assert_allclose(gz.asnumpy(), [np.sum((xs @ ys))], rtol=1e-6)
    (gx, gy), (gz2,) = GradOperation(get_all=True, get_by_list=True)(net, params)(x, y)
    np.testing.assert_allclose(gz2.asnumpy(), gz.asnumpy())
    sens = np.array([[0.1, 0.6, 0.2], [0.8, 1.3, 1.1]], np.float32)
    gx, gy = GradOperation(get_all=True, sens_param=True)(net)(x, y, Tensor(sens))
    np.testing.assert_allclose(gx.asnumpy(), sens @ ys.T, rtol=1e-6)
    np.testing.assert_allclose(gy.asnumpy(), xs.T @ sens, rtol=1e-6)
    one_input = GradOperation(get_all=True)(lambda t: t * 2)(Tensor([1.0]))
    assert isinstance(one_input, tuple) and len(one_input) == 1


def test_grad_operation_sens_with_several_outputs_and_seed_example():
    f = lambda a: (a * 2, a * a)
    a = Tensor([1.0, 3.0])
    g = GradOperation(sens_param=True)(f)(a, (Tensor([1.0, 0.0]), Tensor([0.0, 1.0])))
    np.testing.assert_array_equal(g.asnumpy(), [2.0, 6.0])
    with pytest.raises(HybridArgumentError, match="tuple of 2"):
        GradOperation(sens_param=True)(f)(a, Tensor([1.0, 1.0]))

    class Net(Cell):                                               # the seed's square network, bprop by hand
        def construct(self, x):
            return square_op(x)
    x = np.array([1.0, 4.0, 9.0]).astype(np.float32)
    sens = np.array([1.0, 1.0, 1.0]).astype(np.float32)
    dx = GradOperation(sens_param=True)(Net())(Tensor(x), Tensor(sens))
    assert str(dx) == "[ 2.  8. 18.]"
    assert str(hyb.grad(Net())(Tensor(x))) == "[ 2.  8. 18.]"


def test_grad_operation_errors():
    with pytest.raises(HybridTypeError, match="get_all must be a bool"):
        GradOperation(get_all=1)
    with pytest.raises(HybridArgumentError, match="needs the weights"):
        GradOperation(get_by_list=True)(XYNet())
    with pytest.raises(HybridArgumentError, match="sensitivity is missing"):
        GradOperation(sens_param=True)(XYNet())()


# ----------------------------------------------------------------------------- Cell and Parameter

def test_cell_parameters():
    shared = Parameter(np.zeros(2))

    class Inner(Cell):
        def __init__(self):
            super().__init__()
            self.a = Parameter(np.ones(2))
            self.s = shared

    class Outer(Cell):
        def __init__(self):
            super().__init__()
            self.c = Parameter(1.0)
            self.inner = Inner()
            self.d = Parameter(2.0, name="named", requires_grad=False)
            self.again = shared
            self.note = "not a parameter"

        def construct(self, x):
            return x * self.c

    net = Outer()
    assert [p.name for p in net.trainable_params()] == ["c", "s", "a"]   # own first, each once
    assert [n for n, _ in net.parameters_and_names()] == ["c", "d", "again", "inner.a"]
    assert net.untrainable_params() == [net.d]
    assert net.set_grad() is net and net.set_train() is net and net.inner.training
    assert float(net(Tensor(3.0))) == 3.0
    net.c = 5.0                                                     # rebinding drops the Parameter
    assert "c" not in [p.name for p in net.trainable_params()]
    assert list(net.name_cells()) == ["inner"]
    p = Parameter(np.ones(3, np.float32), name="w")
    p.set_data(np.arange(3))
    assert p.dtype == np.float32 and p.asnumpy().tolist() == [0, 1, 2] and p.requires_grad
    with pytest.raises(HybridTypeError, match="shape"):
        p.set_data(np.ones(4))


def test_cell_without_super_init_and_without_construct():
    class Lazy(Cell):
        def __init__(self):
            self.w = Parameter(1.0)

        def construct(self, x):
            return x * self.w
    assert Lazy().trainable_params()[0].name == "w"
    with pytest.raises(HybridUnsupportedError, match="does not define construct"):
        Cell()(1)


# ----------------------------------------------------------------------------- context

@pytest.fixture
def fresh_context():
    yield
    context._reset()


def test_set_context(fresh_context):
    assert hyb.get_context("mode") == hyb.PYNATIVE_MODE and context.device_target() == "CPU"
    hyb.set_context(mode=hyb.GRAPH_MODE, device_target="GPU", device_id=1, save_graphs=False)
    assert hyb.get_context("mode") == hyb.GRAPH_MODE == 0
    assert hyb.get_context("device_target") == "GPU" == context.device_target()
    assert hyb.get_context("device_id") == 1 and hyb.get_context("save_graphs") is False
    # graph mode runs eagerly
    assert str(hyb.grad(lambda t: t * t)(Tensor(np.array([1.0, 4.0, 9.0], np.float32)))) == "[ 2.  8. 18.]"
    hyb.set_context(device_target="cpu")
    assert context.device_target() == "CPU"


def test_set_context_errors(fresh_context):
    with pytest.raises(HybridArgumentError, match="'Ascend' is not supported") as e:
        hyb.set_context(device_target="Ascend")
    assert "'CPU'" in str(e.value) and "'GPU'" in str(e.value)
    assert context.device_target() == "CPU"
    with pytest.raises(HybridArgumentError, match="not a mode"):
        hyb.set_context(mode=2)
    with pytest.raises(HybridTypeError):
        hyb.set_context(device_target=1)
    with pytest.raises(HybridArgumentError, match="no context setting 'nonsense'"):
        hyb.get_context("nonsense")
