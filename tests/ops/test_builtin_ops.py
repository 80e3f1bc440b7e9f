"""MindSpore's built-in operators (hyb.ops.builtin) as classes and functions: values against
NumPy, MindSpore's dtype rules, gradients on the tape against central finite differences, the
Tensor methods that mirror them, a network mixing them with Custom operators, and the message
of each bad input."""
import numpy as np
import pytest

import hyb
import hyb.ops as ops
from hyb import Tensor, context
from hyb.errors import HybridArgumentError, HybridError, HybridTypeError, HybridUnsupportedError
from hyb.ops import Custom
from hyb.ops import operations as P
from hyb.ops.builtin import ELEMENTWISE

RNG = np.random.default_rng(11)


def rand(*shape, low=-2.0, high=2.0):
    return RNG.uniform(low, high, shape)


def check_grad(f, *arrays, eps=1e-6, tol=1e-6):
    """hyb.grad of ``sum(f(*xs) * w)`` (random weights ``w``) in every input, against central
    differences in float64."""
    out = f(*[Tensor(a) for a in arrays])
    w = rand(*out.shape, low=0.5, high=1.5)

    def loss(*xs):
        return ops.sum(ops.mul(f(*xs), w))

    def value(xs):
        return float(np.sum(f(*[Tensor(x) for x in xs]).asnumpy() * w))

    grads = hyb.grad(loss, tuple(range(len(arrays))))(*[Tensor(a) for a in arrays])
    grads = grads if isinstance(grads, tuple) else (grads,)
    for i, a in enumerate(arrays):
        fd = np.zeros_like(a)
        for idx in np.ndindex(a.shape):
            plus, minus = [x.copy() for x in arrays], [x.copy() for x in arrays]
            plus[i][idx] += eps
            minus[i][idx] -= eps
            fd[idx] = (value(plus) - value(minus)) / (2 * eps)
        assert grads[i].shape == a.shape and grads[i].dtype == a.dtype
        np.testing.assert_allclose(grads[i].asnumpy(), fd, rtol=tol, atol=tol)


# ----------------------------------------------------------------------------- elementwise

NUMPY = {
    "add": np.add, "subtract": np.subtract, "multiply": np.multiply, "divide": np.divide, "power": np.power,
    "maximum": np.maximum, "minimum": np.minimum, "negative": np.negative, "exp": np.exp, "log": np.log,
    "sqrt": np.sqrt, "square": np.square, "absolute": np.abs, "relu": lambda a: np.maximum(a, 0),
    "sigmoid": lambda a: 1 / (1 + np.exp(-a)), "tanh": np.tanh, "equal": np.equal, "not_equal": np.not_equal,
    "greater": np.greater, "greater_equal": np.greater_equal, "less": np.less, "less_equal": np.less_equal,
}
COMPARISONS = {"equal", "not_equal", "greater", "greater_equal", "less", "less_equal"}
POSITIVE = {"log", "sqrt", "power"}
UNARY = {"negative", "exp", "log", "sqrt", "square", "absolute", "relu", "sigmoid", "tanh"}
SHAPES = [((2, 3), (2, 3)), ((2, 3), (3,)), ((4, 1), (1, 5)), ((), (2,)), ((1,), ()), ((0, 3), (3,))]


def forms(entry):
    """(name in messages, callable) for the class and every function of an ELEMENTWISE entry."""
    cls, fns, _ = entry
    out = [(cls, getattr(ops, cls)())] + [(f"ops.{f}", getattr(ops, f)) for f in fns]
    return out + ([("ops.div", ops.div)] if cls == "Div" else [])


def operand(rule, shape, dtype):
    if rule in COMPARISONS:                       # small integers, so that some elements are equal
        return RNG.integers(-2, 3, shape).astype(dtype)
    return rand(*shape, low=0.5 if rule in POSITIVE else -2.0).astype(dtype)


def test_the_table_covers_every_rule():
    assert {rule for _, _, rule in ELEMENTWISE} == set(NUMPY)
    assert {e[0] for e in ELEMENTWISE} >= {"Add", "Sub", "Mul", "Div", "RealDiv", "Neg", "Pow", "Exp", "Log",
                                           "Sqrt", "Square", "Abs", "ReLU", "Sigmoid", "Tanh", "Maximum",
                                           "Minimum", "Equal", "Greater", "Less"}


@pytest.mark.parametrize("entry", ELEMENTWISE, ids=[e[0] for e in ELEMENTWISE])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_elementwise_matches_numpy(entry, dtype):
    rule = entry[2]
    for sa, sb in SHAPES:
        a, b = operand(rule, sa, dtype), operand(rule, sb, dtype)
        args = (a,) if rule in UNARY else (a, b)
        with np.errstate(all="ignore"):
            want = NUMPY[rule](*args)
        for name, f in forms(entry):
            for got in (f(*[Tensor(x) for x in args]), f(*args)):     # Tensors, and NumPy arrays
                assert isinstance(got, Tensor), name
                assert got.dtype == (np.bool_ if rule in COMPARISONS else dtype), name
                np.testing.assert_allclose(got.asnumpy(), want, rtol=2e-6 if dtype == np.float32 else 1e-12)


DIFFERENTIABLE = [e for e in ELEMENTWISE if e[2] not in COMPARISONS]


@pytest.mark.parametrize("entry", DIFFERENTIABLE, ids=[e[0] for e in DIFFERENTIABLE])
def test_elementwise_gradients_match_finite_differences(entry):
    rule = entry[2]
    a, b = operand(rule, (2, 3), np.float64), operand(rule, (3,), np.float64)   # b is broadcast
    for _, f in forms(entry):
        if rule in UNARY:
            check_grad(f, a)
        else:
            check_grad(f, a, b)


@pytest.mark.parametrize("entry", ELEMENTWISE, ids=[e[0] for e in ELEMENTWISE])
def test_elementwise_bad_inputs(entry):
    rule = entry[2]
    for name, f in forms(entry):
        if rule in UNARY:
            with pytest.raises(HybridTypeError) as e:
                f("x")
            assert e.value.message == f"{name}: input 0 has type str, not a Tensor or a number"
        else:
            with pytest.raises(HybridArgumentError) as e:
                f(Tensor(np.ones((2, 3))), np.ones(4))
            assert e.value.message == f"{name}: shapes (2, 3) and (4,) do not broadcast"
            assert "trailing dimension" in e.value.hint


DTYPES = [  # (x, y, the dtype of x + y), MindSpore's implicit conversion
    (np.ones(2, np.int32), 1.5, np.float32), (np.ones(2, np.float16), 1.5, np.float16),
    (np.ones(2, np.int32), 2, np.int32), (np.ones(2, np.uint8), 2, np.uint8), (np.ones(2, np.bool_), 1, np.int32),
    (np.ones(2, np.bool_), 1.0, np.float32), (np.ones(2, np.bool_), True, np.bool_),
    (np.ones(2, np.int64), np.ones(2, np.float16), np.float16),
    (np.ones(2, np.uint8), np.ones(2, np.int8), np.int16), (np.ones(2, np.int32), np.ones(2, np.int64), np.int64),
    (np.ones(2, np.float32), np.ones(2, np.float64), np.float64),
    (np.ones(2, np.bool_), np.ones(2, np.int8), np.int8), (np.ones(2, np.float32), np.float64(2), np.float64),
    (1, 2, np.int64), (1, 2.0, np.float32),
]


@pytest.mark.parametrize("x,y,dtype", DTYPES)
def test_dtype_promotion(x, y, dtype):
    tx = Tensor(x) if isinstance(x, np.ndarray) else x
    for got in (ops.add(tx, y), ops.Mul()(y, tx), ops.maximum(tx, y)):
        assert got.dtype == dtype
    if isinstance(x, np.ndarray):
        assert (tx + y).dtype == dtype and (y * tx).dtype == dtype      # the Tensor's operators agree
        assert (tx == y).dtype == np.bool_
    assert ops.less(tx, y).dtype == np.bool_


def test_integer_inputs_become_float32_where_mindspore_computes_in_float():
    n = Tensor(np.array([1, 2, 4], np.int32))
    for got in (ops.div(n, 2), n / n, ops.Div()(n, n), ops.exp(n), ops.sqrt(n), ops.sigmoid(n), ops.log(n)):
        assert got.dtype == np.float32
    np.testing.assert_array_equal(ops.div(n, 2).asnumpy(), [0.5, 1.0, 2.0])
    for got in (ops.neg(n), ops.square(n), ops.abs(n), ops.relu(n), ops.pow(n, 2), n // 3, ops.maximum(n, 2)):
        assert got.dtype == np.int32
    x = Tensor(np.array([-7.0, 7.0, 2.5]))
    np.testing.assert_array_equal(ops.div(x, 2, rounding_mode="floor").asnumpy(), [-4.0, 3.0, 1.0])
    np.testing.assert_array_equal(ops.div(x, 2, rounding_mode="trunc").asnumpy(), [-3.0, 3.0, 1.0])
    assert ops.div(n, 3, rounding_mode="trunc").dtype == np.int32
    assert ops.div([7, -7], 2, rounding_mode="trunc").tolist() == [3, -3]     # int64, rounded towards 0


def test_non_float_inputs_get_no_gradient():
    x, n = np.array([1.0, 2.0]), np.array([3, 4], np.int32)
    gx, gn = hyb.grad(lambda a, b: ops.sum(ops.mul(a, b)), (0, 1))(x, n)
    np.testing.assert_array_equal(gx.asnumpy(), [3.0, 4.0])
    np.testing.assert_array_equal(gn.asnumpy(), [0.0, 0.0])
    g = hyb.grad(lambda a: ops.sum(ops.cast(ops.cast(a, hyb.int32), hyb.float64)))(x)   # through an integer
    np.testing.assert_array_equal(g.asnumpy(), [0.0, 0.0])
    g = hyb.grad(lambda a: ops.sum(ops.select(ops.greater(a, 1.5), a, ops.zeros_like(a))))(x)
    np.testing.assert_array_equal(g.asnumpy(), [0.0, 1.0])


def test_gradient_at_ties_and_kinks():
    x, y = Tensor(np.array([1.0, 2.0, -1.0])), Tensor(np.array([1.0, 1.0, 3.0]))
    gx, gy = hyb.grad(lambda a, b: ops.sum(ops.maximum(a, b)), (0, 1))(x, y)
    np.testing.assert_array_equal(gx.asnumpy(), [1, 1, 0])             # a tie: to the first input
    np.testing.assert_array_equal(gy.asnumpy(), [0, 0, 1])
    g = hyb.grad(lambda a: ops.sum(ops.ReduceMax()(a, ())))(Tensor(np.array([1.0, 3.0, 3.0])))
    np.testing.assert_array_equal(g.asnumpy(), [0, 0.5, 0.5])          # tied maxima share it
    g = hyb.grad(lambda a: ops.sum(ops.relu(a)))(Tensor(np.array([-1.0, 0.0, 2.0])))
    np.testing.assert_array_equal(g.asnumpy(), [0, 0, 1])


# ----------------------------------------------------------------------------- matrix products

def swap(a):
    return np.swapaxes(a, -1, -2)


@pytest.mark.parametrize("ta,tb", [(False, False), (True, False), (False, True), (True, True)])
def test_matmul_and_batch_matmul(ta, tb):
    a, b = rand(2, 3), rand(3, 4)
    a, b = (a.T.copy() if ta else a), (b.T.copy() if tb else b)
    op = ops.MatMul(transpose_a=ta, transpose_b=tb)
    np.testing.assert_allclose(op(Tensor(a), b).asnumpy(), (a.T if ta else a) @ (b.T if tb else b))
    check_grad(op, a, b)
    A, B = rand(2, 1, *a.shape), rand(3, *b.shape)                      # batch axes broadcast
    op = P.BatchMatMul(ta, tb)
    want = np.matmul(swap(A) if ta else A, swap(B) if tb else B)
    assert want.shape == (2, 3, 2, 4)
    np.testing.assert_allclose(op(A, Tensor(B)).asnumpy(), want)
    check_grad(op, A, B)


def test_matmul_functions():
    for sa, sb in [((3,), (3, 4)), ((2, 3), (3,)), ((3,), (3,)), ((2, 2, 3), (3, 4)), ((0, 3), (3, 2))]:
        a, b = rand(*sa), rand(*sb)
        np.testing.assert_allclose(ops.matmul(a, Tensor(b)).asnumpy(), np.matmul(a, b))
        np.testing.assert_allclose(Tensor(a).matmul(b).asnumpy(), np.matmul(a, b))
        if a.size:
            check_grad(ops.matmul, a, b)
    a, b = rand(2, 4, 1, 3), rand(2, 4, 3, 3)
    np.testing.assert_allclose(ops.bmm(a, b).asnumpy(), a @ b)
    check_grad(ops.bmm, rand(2, 1, 3), rand(3, 2))
    m = ops.MatMul()(np.ones((2, 3), np.int32), np.ones((3, 2), np.float16))
    assert m.dtype == np.float16 and m.asnumpy().tolist() == [[3, 3], [3, 3]]


# ----------------------------------------------------------------------------- reductions

REDUCTIONS = [("ReduceSum", np.sum), ("ReduceMean", np.mean), ("ReduceMax", np.max), ("ReduceMin", np.min)]
FUNCTIONS = {"ReduceSum": lambda x, ax, k: ops.sum(x, ax, k), "ReduceMean": lambda x, ax, k: ops.mean(x, ax, k),
             "ReduceMax": lambda x, ax, k: ops.amax(x, ax, k), "ReduceMin": lambda x, ax, k: ops.amin(x, ax, k)}
METHODS = {"ReduceSum": lambda x, ax, k: x.sum(ax, k), "ReduceMean": lambda x, ax, k: x.mean(ax, keep_dims=k),
           "ReduceMax": lambda x, ax, k: x.max(ax, k), "ReduceMin": lambda x, ax, k: x.min(ax, k)}


@pytest.mark.parametrize("name,np_fn", REDUCTIONS, ids=[n for n, _ in REDUCTIONS])
def test_reductions(name, np_fn):
    a = rand(2, 3, 4)
    for axis, np_axis in [((), None), (0, 0), (-1, -1), ((0, 2), (0, 2)), ([1], (1,)), ((-3, 1), (0, 1))]:
        for keep in (False, True):
            want = np_fn(a, axis=np_axis, keepdims=keep)
            for got in (getattr(ops, name)(keep_dims=keep)(Tensor(a), axis), FUNCTIONS[name](a, axis, keep),
                        METHODS[name](Tensor(a), axis, keep)):
                assert got.shape == want.shape and got.dtype == np.float64
                np.testing.assert_allclose(got.asnumpy(), want, rtol=1e-12)
    assert getattr(ops, name)()(Tensor(a)).shape == ()                 # axis=(): every axis
    assert FUNCTIONS[name](a, None, False).shape == ()
    check_grad(lambda x: getattr(ops, name)()(x, 1), rand(2, 3))
    check_grad(lambda x: FUNCTIONS[name](x, (0, 1), True), rand(2, 3))
    check_grad(lambda x: getattr(ops, name)(True)(x, ()), rand(3))


def test_reduction_dtypes_sizes_and_skip_mode():
    n = Tensor(np.arange(6, dtype=np.int32).reshape(2, 3))
    assert ops.ReduceSum()(n, 1).dtype == np.int32                      # MindSpore keeps the dtype
    assert ops.sum(n, dtype=hyb.float64).dtype == np.float64
    assert ops.sum(Tensor(np.array([True, True, False]))).asnumpy() == 2
    assert ops.mean(n).dtype == np.float32 and ops.mean(n).asnumpy() == 2.5
    assert ops.ReduceMax()(n, 0).dtype == np.int32
    z = Tensor(np.zeros((0, 3)))
    np.testing.assert_array_equal(ops.ReduceSum()(z, 0).asnumpy(), np.zeros(3))
    assert ops.ReduceSum()(z, 1).shape == (0,)
    assert ops.ReduceSum()(Tensor(np.float32(2)), ()).asnumpy() == 2    # a 0-d tensor
    x = rand(2, 3)
    np.testing.assert_array_equal(ops.ReduceSum(skip_mode=True)(x, ()).asnumpy(), x)
    np.testing.assert_allclose(ops.ReduceSum(skip_mode=True)(x, 0).asnumpy(), x.sum(0))
    check_grad(lambda t: ops.ReduceSum(skip_mode=True)(t, ()), x)


# ----------------------------------------------------------------------------- shapes, dtypes, new tensors

SHAPE_OPS = [  # (name, hyb callable, NumPy reference, input shape)
    ("Reshape", lambda x: P.Reshape()(x, (3, -1)), lambda a: a.reshape(3, -1), (2, 3, 2)),
    ("ops.reshape", lambda x: ops.reshape(x, (12,)), lambda a: a.reshape(12), (2, 3, 2)),
    ("reshape_empty", lambda x: ops.reshape(x, (3, 0)), lambda a: a.reshape(3, 0), (0, 3)),
    ("Transpose", lambda x: P.Transpose()(x, (2, 0, 1)), lambda a: a.transpose(2, 0, 1), (2, 3, 4)),
    ("ops.transpose", lambda x: ops.transpose(x, (1, 0)), lambda a: a.T, (2, 3)),
    ("ops.permute", lambda x: ops.permute(x, (0, -1, 1)), lambda a: a.transpose(0, 2, 1), (2, 3, 4)),
    ("ExpandDims", lambda x: P.ExpandDims()(x, -1), lambda a: a[..., None], (2, 3)),
    ("ops.expand_dims", lambda x: ops.expand_dims(x, 0), lambda a: a[None], (3,)),
    ("ops.unsqueeze", lambda x: ops.unsqueeze(x, 1), lambda a: a[:, None], (3,)),
    ("Squeeze", lambda x: P.Squeeze()(x), lambda a: a.reshape(3), (1, 3, 1)),
    ("Squeeze(2)", lambda x: P.Squeeze(2)(x), lambda a: a[:, :, 0], (1, 3, 1)),
    ("ops.squeeze", lambda x: ops.squeeze(x, (0, 2)), lambda a: a.reshape(3), (1, 3, 1)),
    ("Cast", lambda x: P.Cast()(x, hyb.float32), lambda a: a.astype(np.float32), (2, 3)),
    ("ops.cast", lambda x: ops.cast(x, "float16"), lambda a: a.astype(np.float16), (2, 3)),
    ("Concat", lambda x: P.Concat(1)((x, x * 2, x)), lambda a: np.concatenate([a, a * 2, a], 1), (2, 3)),
    ("ops.concat", lambda x: ops.concat([x, x[:1]], axis=-2), lambda a: np.concatenate([a, a[:1]], -2), (2, 3)),
    ("ops.cat", lambda x: ops.cat((x,)), lambda a: a, (2,)),
    ("Stack", lambda x: P.Stack(-1)((x, x * 3)), lambda a: np.stack([a, a * 3], -1), (2, 3)),
    ("ops.stack", lambda x: ops.stack([x, x, -x], axis=1), lambda a: np.stack([a, a, -a], 1), (2, 3)),
    ("Select", lambda x: P.Select()(x > 0, x, x * x), lambda a: np.where(a > 0, a, a * a), (2, 3)),
    ("ops.select", lambda x: ops.select(x > 0, x[0], 1.5), lambda a: np.where(a > 0, a[0], 1.5), (2, 3)),
]


@pytest.mark.parametrize("name,f,ref,shape", SHAPE_OPS, ids=[s[0] for s in SHAPE_OPS])
def test_shape_operators(name, f, ref, shape):
    a = rand(*shape)
    want = ref(a)
    for got in (f(Tensor(a)), f(a) if name not in ("Select", "ops.select", "Concat", "Stack", "ops.stack") else None):
        if got is not None:
            assert got.shape == want.shape and got.dtype == want.dtype
            np.testing.assert_allclose(got.asnumpy(), want, rtol=1e-3 if want.dtype == np.float16 else 1e-12)
    if a.size and not name.startswith(("Cast", "ops.cast")):
        check_grad(f, a)


def test_cast_gradients_and_dtypes():
    a = rand(2, 3)
    g = hyb.grad(lambda x: ops.sum(ops.Cast()(x, hyb.float32) * 2))(a)
    assert g.dtype == np.float64 and np.all(g.asnumpy() == 2)
    assert ops.cast(Tensor(np.array([1.7, -1.7])), hyb.int32).tolist() == [1, -1]
    assert Tensor(a).astype(hyb.bool_).dtype == np.bool_


def test_new_tensors():
    for got, want in [(ops.Zeros()((2, 3), hyb.float32), np.zeros((2, 3), np.float32)),
                      (ops.Ones()(4, hyb.int32), np.ones(4, np.int32)),
                      (ops.Fill()(hyb.float16, (2,), 1.5), np.full(2, 1.5, np.float16)),
                      (ops.zeros((0, 2)), np.zeros((0, 2), np.float32)), (ops.ones(()), np.ones((), np.float32)),
                      (ops.ones([2], hyb.bool_), np.ones(2, np.bool_)),
                      (ops.fill(hyb.int64, (1, 2), Tensor(7)), np.full((1, 2), 7)),
                      (ops.ZerosLike()(np.ones((2, 2), np.int8)), np.zeros((2, 2), np.int8)),
                      (ops.OnesLike()(Tensor(np.zeros(3, np.float16))), np.ones(3, np.float16)),
                      (ops.zeros_like(Tensor([1.0, 2.0]), dtype=hyb.int32), np.zeros(2, np.int32)),
                      (ops.ones_like(np.zeros((1, 0))), np.ones((1, 0)))]:
        assert isinstance(got, Tensor) and got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_array_equal(got.asnumpy(), want)
    g = hyb.grad(lambda x: ops.sum(ops.OnesLike()(x) + ops.zeros_like(x) * x))(rand(3))
    np.testing.assert_array_equal(g.asnumpy(), np.zeros(3))           # zeros_like(x) * x: d/dx = 0


def test_tensor_methods_mirror_the_operators():
    a, b = rand(2, 3, low=0.5), rand(3, low=0.5)
    t = Tensor(a)
    pairs = [(t.abs(), ops.abs(a)), (t.exp(), ops.exp(a)), (t.log(), ops.log(a)), (t.sqrt(), ops.sqrt(a)),
             (t.square(), ops.square(a)), (t.sigmoid(), ops.sigmoid(a)), (t.tanh(), ops.tanh(a)), (t.neg(), -t),
             (t.add(b), ops.add(a, b)), (t.sub(b), ops.sub(a, b)), (t.mul(b), ops.mul(a, b)),
             (t.div(b), ops.div(a, b)), (t.pow(b), ops.pow(a, b)), (t.maximum(b), ops.maximum(a, b)),
             (t.minimum(b), ops.minimum(a, b)), (t.reshape(3, 2), ops.reshape(a, (3, 2))),
             (t.transpose(), ops.transpose(a, (1, 0))), (t.permute(1, 0), ops.permute(a, (1, 0))),
             (t.expand_dims(1), ops.expand_dims(a, 1)), (t[None].squeeze(), ops.squeeze(a[None])),
             (t.astype(hyb.float32), ops.cast(a, hyb.float32)), (t.sum(1, True), ops.sum(a, 1, True)),
             (t.mean(0), ops.mean(a, 0)), (t.max(), ops.amax(a)), (t.min(axis=1), ops.amin(a, 1)),
             (t.matmul(a.T), ops.matmul(a, a.T)), (abs(t - 1), ops.abs(a - 1)), (t >= 1, ops.ge(a, 1))]
    for got, want in pairs:
        assert isinstance(got, Tensor) and got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_array_equal(got.asnumpy(), want.asnumpy())
    check_grad(lambda x, y: (x.sigmoid() * y.exp()).max(1) + x.square().mean(1) - x.matmul(y), a, b)


# ----------------------------------------------------------------------------- around a Custom operator

def square(x):
    y = output_tensor(x.shape, x.dtype)  # noqa: F821 - hyb's kernel language
    for i0 in range(x.shape[0]):
        y[i0] = x[i0] * x[i0]
    return y


@pytest.fixture
def cpu():
    context._reset()
    yield
    context._reset()


def test_network_mixing_custom_and_builtin_operators(cpu):
    # a pyfunc operator whose bprop is written with built-in operators, and a hybrid kernel whose
    # gradient hyb derives
    soft = Custom(lambda x: np.tanh(x), out_shape=lambda s: s, out_dtype=lambda d: d, func_type="pyfunc",
                  bprop=lambda x, out, dout: (ops.mul(dout, ops.sub(1, ops.square(out))),))
    sq = Custom(square, func_type="hybrid")

    class Net(hyb.nn.Cell):
        def __init__(self):
            super().__init__()
            self.w = hyb.Parameter(rand(3, 4), name="w")
            self.b = hyb.Parameter(rand(4), name="b")
            self.matmul = P.MatMul(transpose_b=False)
            self.mean = P.ReduceMean(keep_dims=False)

        def construct(self, x):
            h = soft(ops.add(self.matmul(x, self.w), self.b))           # (2, 4)
            flat = P.Reshape()(h, (-1,))
            s = sq(flat)
            both = ops.concat((s, ops.relu(flat)))
            return self.mean(ops.maximum(both, 0.1), ()) + ops.sum(ops.transpose(h, (1, 0))[0])

    net = Net()
    x = rand(2, 3)
    gx = ops.GradOperation()(net)(Tensor(x))
    gw, gb = ops.GradOperation(get_by_list=True)(net, net.trainable_params())(Tensor(x))

    def fd(array):                   # central differences, moving ``array`` (x or a weight) in place
        g = np.zeros_like(array)
        for idx in np.ndindex(array.shape):
            old = array[idx]
            array[idx] = old + 1e-6
            up = float(net(Tensor(x)).asnumpy())
            array[idx] = old - 1e-6
            down = float(net(Tensor(x)).asnumpy())
            array[idx] = old
            g[idx] = (up - down) / 2e-6
        return g

    assert float(net(x).asnumpy()) == float(net(Tensor(x)).asnumpy())        # NumPy input, same value
    np.testing.assert_allclose(gx.asnumpy(), fd(x), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(gw.asnumpy(), fd(net.w.asnumpy()), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(gb.asnumpy(), fd(net.b.asnumpy()), rtol=1e-5, atol=1e-6)


def test_bprop_written_with_builtin_operators():
    """A bprop in MindSpore's style: operator objects made once, called on Tensors."""
    mul, sub, reduce_sum = P.Mul(), P.Sub(), P.ReduceSum(keep_dims=True)

    def bprop(x, w, out, dout):
        return mul(dout, w), reduce_sum(mul(dout, x), 0)

    op = Custom(lambda x, w: x * w, out_shape=lambda s, _: s, out_dtype=lambda d, _: d, func_type="pyfunc",
                bprop=bprop)
    x, w = rand(3, 2), rand(1, 2)
    gx, gw = hyb.grad(lambda a, b: ops.sum(sub(op(a, b), 1) ** 2), (0, 1))(x, w)
    r = 2 * (x * w - 1)
    np.testing.assert_allclose(gx.asnumpy(), r * w)
    np.testing.assert_allclose(gw.asnumpy(), (r * x).sum(0, keepdims=True))


# ----------------------------------------------------------------------------- bad inputs

X = Tensor(np.ones((2, 3)))
ERRORS = [
    (lambda: ops.Add()(X, object()), HybridTypeError, "Add: input 1 has type object, not a Tensor or a number"),
    (lambda: ops.MatMul()(X, np.ones((4, 5))), HybridArgumentError,
     "MatMul: the inner dimensions differ: x has shape (2, 3) (transpose_a=False), y has shape (4, 5) "
     "(transpose_b=False), so 3 meets 4"),
    (lambda: ops.MatMul(transpose_a=True)(X, np.ones((3, 2))), HybridArgumentError,
     "MatMul: the inner dimensions differ: x has shape (2, 3) (transpose_a=True), y has shape (3, 2) "
     "(transpose_b=False), so 2 meets 3"),
    (lambda: ops.MatMul()(np.ones((2, 3, 4)), np.ones((4, 5))), HybridArgumentError,
     "MatMul: takes 2-D tensors, got shapes (2, 3, 4) and (4, 5)"),
    (lambda: ops.MatMul(transpose_a=1), HybridTypeError, "MatMul: transpose_a must be a bool, got 1"),
    (lambda: ops.BatchMatMul()(np.ones((2, 2, 3)), np.ones((3, 3, 4))), HybridArgumentError,
     "BatchMatMul: the batch dimensions of shapes (2, 2, 3) and (3, 3, 4) do not broadcast"),
    (lambda: ops.BatchMatMul()(np.ones(3), X), HybridArgumentError,
     "BatchMatMul: takes tensors of rank 2 or more, got shapes (3,) and (2, 3)"),
    (lambda: ops.matmul(X, np.ones(4)), HybridArgumentError,
     "ops.matmul: the inner dimensions of shapes (2, 3) and (4,) differ (3 and 4)"),
    (lambda: ops.matmul(X, 2.0), HybridArgumentError,
     "ops.matmul: cannot multiply shapes (2, 3) and (): a 0-d tensor is not a matrix"),
    (lambda: ops.bmm(X, X), HybridArgumentError,
     "ops.bmm: takes input_x of rank 3 or more and mat2 of rank 2 or more, got shapes (2, 3) and (2, 3)"),
    (lambda: X @ X, HybridArgumentError, "Tensor.__matmul__: the inner dimensions of shapes (2, 3) and (2, 3) "
                                         "differ (3 and 2)"),
    (lambda: ops.ReduceSum()(X, 2), HybridArgumentError, "ReduceSum: axis 2 is out of range for a tensor of rank 2"),
    (lambda: ops.ReduceMean()(X, 1.0), HybridTypeError, "ReduceMean: axis must be an int or a tuple of ints, got 1.0"),
    (lambda: ops.sum(X, (0, -2)), HybridArgumentError, "ops.sum: axis (0, -2) names an axis twice"),
    (lambda: ops.ReduceSum(keep_dims="yes"), HybridTypeError, "ReduceSum: keep_dims must be a bool, got 'yes'"),
    (lambda: ops.ReduceMax()(np.ones((0, 3)), 0), HybridArgumentError,
     "ReduceMax: the maximum over an empty axis is undefined (shape (0, 3), axis 0)"),
    (lambda: ops.ReduceMin()(X, -3), HybridArgumentError, "ReduceMin: axis -3 is out of range for a tensor of rank 2"),
    (lambda: ops.mean(X, 0, keep_dims=None), HybridTypeError, "ops.mean: keep_dims must be a bool, got None"),
    (lambda: ops.amax(X, initial=0.0), HybridUnsupportedError, "ops.amax: initial and where are not supported"),
    (lambda: X.sum(axis=5), HybridArgumentError, "Tensor.sum: axis 5 is out of range for a tensor of rank 2"),
    (lambda: ops.Reshape()(X, (4, 2)), HybridArgumentError,
     "Reshape: cannot reshape a tensor of shape (2, 3) (6 elements) to (4, 2)"),
    (lambda: ops.reshape(X, (4, -1)), HybridArgumentError,
     "ops.reshape: cannot reshape a tensor of shape (2, 3) (6 elements) to (4, -1)"),
    (lambda: ops.reshape(X, (-1, -1)), HybridArgumentError,
     "ops.reshape: shape (-1, -1) may hold sizes >= 0 and one -1"),
    (lambda: X.reshape("ab"), HybridTypeError, "Tensor.reshape: the shape must be a tuple of ints, got ('ab',)"),
    (lambda: ops.Transpose()(X, (0, 0)), HybridArgumentError,
     "Transpose: perm (0, 0) is not a permutation of the 2 axes of the tensor"),
    (lambda: ops.transpose(X, (0, 1, 2)), HybridArgumentError,
     "ops.transpose: perm (0, 1, 2) is not a permutation of the 2 axes of the tensor"),
    (lambda: ops.permute(X, 1), HybridTypeError, "ops.permute: perm must be a tuple of ints, got 1"),
    (lambda: ops.ExpandDims()(X, 3), HybridArgumentError, "ExpandDims: axis 3 is out of range for a tensor of rank 2"),
    (lambda: ops.expand_dims(X, (0,)), HybridTypeError, "ops.expand_dims: axis must be an int, got (0,)"),
    (lambda: ops.Squeeze(0)(np.ones((2, 1))), HybridArgumentError, "Squeeze: axis 0 of shape (2, 1) has size 2, not 1"),
    (lambda: ops.Squeeze("a"), HybridTypeError, "Squeeze: axis must be an int or a tuple of ints, got 'a'"),
    (lambda: ops.squeeze(X, 2), HybridArgumentError, "ops.squeeze: axis 2 is out of range for a tensor of rank 2"),
    (lambda: ops.Cast()(X, "flaot32"), HybridTypeError, "Cast: 'flaot32' is not a dtype"),
    (lambda: ops.cast(X, None), HybridTypeError, "ops.cast: None is not a dtype"),
    (lambda: X.astype(X), HybridTypeError, "Tensor.astype: " + repr(X) + " is not a dtype"),
    (lambda: ops.Concat()((X, np.ones(3))), HybridArgumentError,
     "Concat: the tensors have different ranks: shapes (2, 3), (3,)"),
    (lambda: ops.concat((X, np.ones((2, 4))), 0), HybridArgumentError,
     "ops.concat: shapes (2, 3), (2, 4) differ outside axis 0"),
    (lambda: ops.cat((X, X), 2), HybridArgumentError, "ops.cat: axis 2 is out of range for a tensor of rank 2"),
    (lambda: ops.Concat()(X), HybridTypeError, "Concat: takes a tuple or list of tensors, got Tensor"),
    (lambda: ops.concat((Tensor(1.0), Tensor(2.0))), HybridArgumentError, "ops.concat: cannot concatenate 0-d tensors"),
    (lambda: ops.stack([]), HybridArgumentError, "ops.stack: takes at least one tensor, got an empty list"),
    (lambda: ops.Stack()((np.ones(2), np.ones(3))), HybridArgumentError,
     "Stack: the tensors have different shapes: (2,), (3,)"),
    (lambda: ops.Stack(3)((X, X)), HybridArgumentError, "Stack: axis 3 is out of range for a tensor of rank 2"),
    (lambda: ops.Select()(X, X, X), HybridTypeError, "Select: the condition must be a bool tensor, got float64"),
    (lambda: ops.select(X > 0, X, np.ones(4)), HybridArgumentError,
     "ops.select: shapes (2, 3) and (2, 3) and (4,) (condition, x, y) do not broadcast"),
    (lambda: ops.Zeros()((2, -1), hyb.float32), HybridTypeError,
     "Zeros: the shape must be an int or a tuple of ints >= 0, got (2, -1)"),
    (lambda: ops.Ones()(2, "flaot"), HybridTypeError, "Ones: 'flaot' is not a dtype"),
    (lambda: ops.fill(hyb.float32, (2,), "a"), HybridTypeError,
     "ops.fill: the value must be a number or a 0-d tensor, got 'a'"),
    (lambda: ops.Fill()(hyb.float32, 2.5, 1), HybridTypeError,
     "Fill: the shape must be an int or a tuple of ints >= 0, got 2.5"),
    (lambda: ops.zeros((2,), 7), HybridTypeError, "ops.zeros: 7 is not a dtype"),
    (lambda: ops.ZerosLike()("x"), HybridTypeError, "ZerosLike: input 0 has type str, not a Tensor"),
    (lambda: ops.ones_like(X, dtype="x"), HybridTypeError, "ops.ones_like: 'x' is not a dtype"),
    (lambda: ops.div(X, X, rounding_mode="round"), HybridArgumentError,
     "ops.div: rounding_mode must be None, 'floor' or 'trunc', got 'round'"),
    (lambda: ops.add(Tensor(np.array([1], np.int8)), 300), HybridArgumentError,
     "ops.add: Python integer 300 out of bounds for int8"),
]


@pytest.mark.parametrize("call,error,message", ERRORS, ids=[m.split(":")[0] + f"-{i}" for i, (_, _, m) in
                                                           enumerate(ERRORS)])
def test_bad_input_messages(call, error, message):
    with pytest.raises(error) as e:
        call()
    assert e.value.message == message
    assert e.value.hint


def test_what_numpy_refuses_is_a_hybrid_error_naming_the_operator():
    with pytest.raises(HybridArgumentError) as e:
        ops.pow(Tensor(np.array([2], np.int32)), -1)
    assert e.value.message.startswith("ops.pow: Integers to negative integer powers are not allowed")
    with pytest.raises(HybridTypeError) as e:
        ops.Neg()(Tensor([True]))
    assert e.value.message.startswith("Neg: ") and "boolean negative" in e.value.message
    assert isinstance(e.value, HybridError)


def test_operations_module_holds_the_classes():
    assert P.Add is ops.Add and P.ReduceSum is ops.ReduceSum and P.MatMul is ops.MatMul
    assert not hasattr(P, "add")
    assert repr(P.Add()) == "Prim[Add]" and repr(ops.ReduceSum(True)) == "Prim[ReduceSum]"
    assert ops.gt is not ops.greater and ops.gt(1.0, Tensor(0.5)).item() is True
