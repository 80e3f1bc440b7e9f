"""Whole networks written the way MindSpore's custom-operator scripts are written, with only the
module name changed: Cells around Custom operators of each kind, built-in operators beside them,
GradOperation over both, dynamic-shape declarations (``Tensor(shape=[4, None])``,
``Cell.set_inputs``, ``ConvertToDynamic``) and an aot source with Init, InferShape and workspace.
"""
import shutil

import numpy as np
import pytest

import hyb as ms
from hyb import Tensor, context
from hyb.common import dtype as mstype
from hyb.nn import Cell
import hyb.ops as ops
from hyb.ops import CustomRegOp, DataType
from hyb.ops import operations as P
from hyb.ops.operations import _inner_ops as inner
from hyb.tensor import TensorSpec


@pytest.fixture(autouse=True)
def cpu():
    context.set_context(mode=context.PYNATIVE_MODE, device_target="CPU")
    yield
    context.set_context(device_target="CPU")


# --------------------------------------------------------------------------- pyfunc in a network

def sub_pyfunc(x1, x2):
    return x1 - x2


class PyFuncReluNet(Cell):
    def __init__(self, fn, out_shapes, out_types):
        super().__init__()
        self.func = ops.Custom(fn, out_shapes, out_types, "pyfunc")
        self.relu = ops.ReLU()

    def construct(self, x1, x2):
        x = self.func(x1, x2)
        return self.relu(x[0])


@pytest.mark.parametrize("ms_dtype, np_dtype", [(ms.float16, np.float16), (ms.float32, np.float32),
                                                (ms.float64, np.float64), (ms.int32, np.int32),
                                                (ms.int64, np.int64)])
def test_pyfunc_network_reads_its_1_tuple(ms_dtype, np_dtype):
    context.set_context(mode=context.GRAPH_MODE, device_target="CPU")
    shape = (7, 9)
    rng = np.random.default_rng(3)
    x1 = rng.integers(-5, 5, size=shape).astype(np_dtype)
    x2 = rng.integers(-5, 5, size=shape).astype(np_dtype)
    out = PyFuncReluNet(sub_pyfunc, (shape,), (ms_dtype,))(Tensor(x1), Tensor(x2))
    assert out.dtype == np_dtype
    np.testing.assert_array_equal(out.asnumpy(), np.maximum(x1 - x2, 0))


# --------------------------------------------------------------------------- hybrid with built-ins

def outer_product(a, b):
    c = output_tensor(a.shape, a.dtype)
    for i0 in range(a.shape[0]):
        for i1 in range(b.shape[1]):
            c[i0, i1] = 0.0
            for i2 in range(a.shape[1]):
                c[i0, i1] = c[i0, i1] + (a[i0, i2] * b[i2, i1])
    return c


def cube(a):
    c = output_tensor(a.shape, a.dtype)
    for i0 in range(a.shape[0]):
        for i1 in range(a.shape[1]):
            c[i0, i1] = a[i0, i1] * a[i0, i1] * a[i0, i1]
    return c


class HybridNet(Cell):
    """matmul as a hybrid kernel, then built-in Add and Mul around a second kernel; the cube's
    bprop is written with built-in operators."""

    def __init__(self):
        super().__init__()
        self.program = ops.Custom(outer_product, lambda x, _: x, lambda x, _: x, func_type="akg")
        three = Tensor(np.float32(3.0))

        def cube_bprop(x, out, dout):
            return (P.Mul()(P.Mul()(P.Pow()(x, 2.0), three), dout),)

        self.cube = ops.Custom(cube, lambda x: x, lambda x: x, func_type="akg", bprop=cube_bprop)
        self.add = ops.Add()
        self.mul = ops.Mul()

    def construct(self, x, y):
        m = self.program(x, y)
        return self.mul(self.add(self.cube(m), m), 0.5)


def test_hybrid_network_and_its_gradients_with_sens():
    rng = np.random.default_rng(5)
    x = rng.normal(size=(4, 4)).astype(np.float32)
    y = rng.normal(size=(4, 4)).astype(np.float32)
    sens = rng.normal(size=(4, 4)).astype(np.float32)
    net = HybridNet()
    out = net(Tensor(x), Tensor(y)).asnumpy()
    m = x @ y
    np.testing.assert_allclose(out, 0.5 * (m ** 3 + m), rtol=1e-4, atol=1e-4)
    dx, dy = ops.GradOperation(sens_param=True, get_all=True)(net)(Tensor(x), Tensor(y), Tensor(sens))
    dm = 0.5 * (3 * m ** 2 + 1) * sens
    np.testing.assert_allclose(dx.asnumpy(), dm @ y.T, rtol=1e-3, atol=1e-3)
    np.testing.assert_allclose(dy.asnumpy(), x.T @ dm, rtol=1e-3, atol=1e-3)


# --------------------------------------------------------------------------- dynamic shapes and aot

ADD_REDUCE_CC = r"""
#include <stdint.h>
#include <vector>
#include "custom_aot_extra.h"

class add_reduce_data : public AotKernelData {
 public:
  int64_t axis;
};

extern "C" int AddReduceInit(int *ndims, int64_t **shapes, const char **dtypes, AotExtra *extra) {
  size_t count = 1;
  for (int i = 0; i < ndims[0]; i++) count *= shapes[0][i];
  extra->SetWorkSpace({count * sizeof(float)});
  auto *data = new add_reduce_data;
  data->axis = extra->Attr<int64_t>("axis");
  extra->SetKernelData(data);
  return 0;
}

extern "C" std::vector<int64_t> AddReduceInferShape(int *ndims, int64_t **shapes, AotExtra *extra) {
  return {shapes[0][1 - extra->Attr<int64_t>("axis")]};
}

extern "C" int AddReduce(int nparam, void **params, int *ndims, int64_t **shapes, const char **dtypes, void *stream,
                         void *extra) {
  float *x = static_cast<float *>(params[0]), *y = static_cast<float *>(params[1]);
  float *out = static_cast<float *>(params[2]), *tmp = static_cast<float *>(params[3]);
  int64_t rows = shapes[0][0], cols = shapes[0][1];
  for (int64_t i = 0; i < rows * cols; i++) tmp[i] = x[i] + y[i];
  auto *data = static_cast<add_reduce_data *>(static_cast<AotExtra *>(extra)->KernelData());
  int64_t n = data->axis == 1 ? rows : cols, m = data->axis == 1 ? cols : rows;
  for (int64_t i = 0; i < n; i++) {
    out[i] = 0;
    for (int64_t j = 0; j < m; j++) out[i] += data->axis == 1 ? tmp[i * cols + j] : tmp[j * cols + i];
  }
  return 0;
}
"""


class AddReduceDynNet(Cell):
    def __init__(self, func, axis):
        super().__init__()
        info = (CustomRegOp("add_reduce").input(0, "x1").input(1, "x2").output(0, "y")
                .dtype_format(DataType.None_None, DataType.None_None, DataType.None_None)
                .attr("axis", "required", "all", value=axis).target("CPU").get_op_info())
        self.program = ops.Custom(func, None, mstype.float32, "aot", reg_info=info)
        self.convert_to_dynamic = inner.ConvertToDynamic(is_dynamic_rank=True).add_prim_attr(
            "primitive_target", "CPU")

    def construct(self, x, y):
        return self.program(self.convert_to_dynamic(x), y)


@pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++ to compile the aot source")
@pytest.mark.parametrize("axis", [0, 1])
def test_dynamic_shape_network_around_an_aot_source(tmp_path, axis):
    (tmp_path / "add_reduce.cc").write_text(ADD_REDUCE_CC)
    net = AddReduceDynNet(f"{tmp_path}/./add_reduce.cc:AddReduce", axis)
    net.set_inputs(Tensor(shape=[4, None], dtype=mstype.float32), Tensor(shape=[4, None], dtype=mstype.float32))
    for cols in (5, 1, 3):  # one network, several shapes
        x = np.arange(4 * cols, dtype=np.float32).reshape(4, cols)
        y = np.ones((4, cols), np.float32)
        np.testing.assert_allclose(net(Tensor(x), Tensor(y)).asnumpy(), (x + y).sum(axis))
    with pytest.raises(ms.HybridTypeError) as e:
        net(Tensor(np.ones((3, 5), np.float32)), Tensor(np.ones((3, 5), np.float32)))
    assert str(e.value) == ("error: input 0 of AddReduceDynNet has shape [3, 5], but set_inputs declared [4, None]\n"
                            "hint: None in a declared shape is any size; a number must match")


# --------------------------------------------------------------------------- the pieces, and their bad input

def test_tensor_with_shape_and_dtype():
    spec = Tensor(shape=[4, None], dtype=mstype.float32)
    assert isinstance(spec, TensorSpec) and not isinstance(spec, Tensor)
    assert spec.shape == (4, None) and spec.dtype == np.float32
    assert repr(spec) == "Tensor(shape=[4, None], dtype=Float32)"
    with pytest.raises(ms.HybridTypeError) as e:
        spec.asnumpy()
    assert str(e.value) == ("error: Tensor(shape=[4, None], dtype=Float32) has no data: a shape with None declares "
                            "an input for Cell.set_inputs\nhint: call the network with real tensors")
    with pytest.raises(ms.HybridTypeError, match="Add: input 0 has type TensorSpec, not a Tensor or a number"):
        ops.Add()(spec, 1.0)
    zeros = Tensor(shape=(2, 3), dtype=mstype.int32)
    assert isinstance(zeros, Tensor) and zeros.dtype == np.int32
    np.testing.assert_array_equal(zeros.asnumpy(), np.zeros((2, 3)))
    np.testing.assert_array_equal(Tensor(shape=[2], dtype=mstype.float16, init="ones").asnumpy(), [1, 1])
    from hyb.common.initializer import One, Zero
    np.testing.assert_array_equal(Tensor(shape=[2], dtype=mstype.int8, init=One()).asnumpy(), [1, 1])
    np.testing.assert_array_equal(Tensor(shape=[1], dtype=mstype.float32, init=Zero()).asnumpy(), [0])
    with pytest.raises(ms.HybridUnsupportedError) as e:
        Tensor(shape=[2], dtype=mstype.float32, init="normal")
    assert "Tensor(init='normal'): hyb has the initializers 'zeros' and 'ones'" in str(e.value)
    with pytest.raises(ms.HybridTypeError, match="a shape is a list of sizes, None for any size"):
        Tensor(shape=[4, "n"], dtype=mstype.float32)


def test_set_inputs_checks_count_rank_and_dtype():
    class Net(Cell):
        def construct(self, x):
            return x * 2

    net = Net().set_inputs(Tensor(shape=[None, 3], dtype=mstype.float32))
    assert net.get_inputs()[0].shape == (None, 3)
    np.testing.assert_array_equal(net(Tensor(np.ones((5, 3), np.float32))).asnumpy(), 2 * np.ones((5, 3)))
    with pytest.raises(ms.HybridArgumentError, match=r"Net.set_inputs declared 1 inputs; the call passes 2"):
        net(Tensor(np.ones((5, 3), np.float32)), 1)
    with pytest.raises(ms.HybridTypeError, match=r"input 0 of Net has shape \[5\], but set_inputs declared "
                                                 r"\[None, 3\]"):
        net(Tensor(np.ones(5, np.float32)))
    with pytest.raises(ms.HybridTypeError, match="input 0 of Net has dtype float64, but set_inputs declared float32"):
        net(Tensor(np.ones((5, 3))))
    net.set_inputs(Tensor(shape=[-2], dtype=mstype.float32))  # any rank
    assert net(Tensor(np.ones((2, 2, 2), np.float32))).shape == (2, 2, 2)


def test_operations_module_has_the_classes_scripts_take_from_it():
    assert P.Custom is ops.Custom and P.Add is ops.Add and P.GradOperation is ops.GradOperation
    with pytest.raises(AttributeError, match="module 'hyb.ops.operations' has no attribute 'Nope'"):
        P.Nope  # noqa: B018


def test_add_prim_attr_returns_the_operator():
    op = ops.Mul().add_prim_attr("primitive_target", "CPU")
    assert isinstance(op, ops.Mul) and op.attrs == {"primitive_target": "CPU"}
    assert repr(op) == "Prim[Mul]"
    with pytest.raises(ms.HybridTypeError, match="Mul.add_prim_attr: the name must be a string, got 3"):
        ops.Mul().add_prim_attr(3, "CPU")
    conv = inner.ConvertToDynamic(is_dynamic_rank=True)
    assert conv.add_prim_attr("primitive_target", "CPU") is conv
