"""MindSpore's decorator names for hybrid kernels: `ops.kernel`, `ops.ms_kernel`, `ops.ms_hybrid`,
with and without arguments, called directly and passed to Custom."""
from __future__ import annotations

import numpy as np
import pytest

import hyb
from hyb import ops
from hyb.ops import Custom, CustomRegOp, DataType, custom_info_register, kernel, ms_hybrid, ms_kernel
from tests.ops.test_custom_ops import F32, cpu_context  # noqa: F401 - the fixture runs each test on the CPU


def add_info(name="add"):
    return (CustomRegOp(name).input(0, "a").input(1, "b").output(0, "c")
            .dtype_format(DataType.F32_Default, DataType.F32_Default, DataType.F32_Default)
            .target("CPU").get_op_info())


@kernel
def add_k(a, b):
    c = output_tensor(a.shape, a.dtype)
    for i in range(a.shape[0]):
        c[i] = a[i] + b[i]
    return c


@ms_kernel
def mul_k(a, b):
    c = output_tensor(a.shape, a.dtype)
    for i in range(a.shape[0]):
        c[i] = a[i] * b[i]
    return c


@ms_hybrid(reg_info=add_info("sub"))
def sub_k(a, b):
    c = output_tensor(a.shape, a.dtype)
    for i in range(a.shape[0]):
        c[i] = a[i] - b[i]
    return c


@kernel(compile_attrs={"enable_auto_fuse": False}, fastmath=True)
def scale_k(a, b):
    c = output_tensor(a.shape, a.dtype)
    for i in range(a.shape[0]):
        c[i] = a[i] * 2.0 + b[i]
    return c


@custom_info_register(add_info("neg"))
@kernel
def neg_k(a, b):
    c = output_tensor(a.shape, a.dtype)
    for i in range(a.shape[0]):
        c[i] = b[i] - a[i]
    return c


@kernel
@custom_info_register(add_info("max"))
def max_k(a, b):
    c = output_tensor(a.shape, a.dtype)
    for i in range(a.shape[0]):
        c[i] = max(a[i], b[i])
    return c


X = np.array([1.0, -2.0, 3.5, 0.0], F32)
Y = np.array([0.5, 4.0, -1.0, 2.0], F32)
CASES = [(add_k, X + Y), (mul_k, X * Y), (sub_k, X - Y), (scale_k, 2 * X + Y), (neg_k, Y - X), (max_k, np.maximum(X, Y))]


def test_the_names_are_hyb_hybrid():
    assert ops.ms_kernel is ops.kernel and ops.ms_hybrid is ops.kernel
    for k, _ in CASES:
        assert isinstance(k, hyb.Kernel)


@pytest.mark.parametrize("k,want", CASES, ids=[c[0].name for c in CASES])
def test_called_on_numpy_arrays_returns_numpy_arrays(k, want):
    got = k(X, Y)
    assert type(got) is np.ndarray and got.dtype == F32
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("func_type", ["hybrid", "akg", "pyfunc"])
@pytest.mark.parametrize("k,want", CASES, ids=[c[0].name for c in CASES])
def test_custom_takes_them(k, want, func_type):
    op = Custom(k, out_shape=lambda a, b: a, out_dtype=lambda a, b: a, func_type=func_type)
    got = op(hyb.Tensor(X), hyb.Tensor(Y))
    np.testing.assert_array_equal(got.asnumpy(), want)


def test_reg_info_binds_operator_information():
    assert [i["op_name"] for i in sub_k.reg_info] == ["sub"]
    assert [i["op_name"] for i in neg_k.reg_info] == ["neg"]  # decorated after @kernel
    assert [i["op_name"] for i in max_k.reg_info] == ["max"]  # decorated before @kernel
    assert not hasattr(add_k, "reg_info")
    assert Custom(sub_k, out_shape=lambda a, b: a, out_dtype=lambda a, b: a).reg_info[0]["op_name"] == "sub"
    assert scale_k.compile_attrs == {"enable_auto_fuse": False} and add_k.compile_attrs == {}
    assert scale_k.options["fastmath"] is True


def test_reg_info_that_does_not_fit_the_kernel_is_refused():
    @kernel(reg_info=CustomRegOp("one").input(0, "a").output(0, "c").target("CPU").get_op_info())
    def two_inputs(a, b):
        c = output_tensor(a.shape, a.dtype)
        for i in range(a.shape[0]):
            c[i] = a[i] + b[i]
        return c
    with pytest.raises(hyb.HybridArgumentError, match=r"declares 1 inputs \(a\) but `two_inputs` takes 2"):
        Custom(two_inputs, out_shape=lambda a, b: a, out_dtype=lambda a, b: a)(np.ones(2), np.ones(2))


def test_bad_uses_of_the_decorator():
    with pytest.raises(hyb.HybridArgumentError, match="@kernel decorates a function, not int"):
        kernel(5)
    with pytest.raises(hyb.HybridArgumentError, match="compile_attrs must be a dict, not list"):
        kernel(compile_attrs=["x"])
    with pytest.raises(hyb.HybridArgumentError, match="needs at least one operator information"):
        @kernel(reg_info=[])
        def nothing(a):
            return a


class _Tvm:
    """Stands in for akg's `tvm` module: the function below is never run."""


tvm = _Tvm()


def add_one_ir(a, b):
    ib = tvm.ir_builder.create()
    with ib.for_range(0, a.shape[0], name="i") as i:
        ib.store(b, i, ib.load(a, i) + 1)
    return ib.get()


@pytest.mark.parametrize("func_type", ["akg", "hybrid"])
def test_an_ir_builder_kernel_is_refused_where_it_uses_the_builder(func_type):
    import inspect
    op = Custom(add_one_ir, out_shape=lambda a, b: a, out_dtype=lambda a, b: a, func_type=func_type)  # made
    with pytest.raises(hyb.HybridUnsupportedError) as info:
        op(np.ones(3, np.float32), np.ones(3, np.float32))  # refused when called
    e = info.value
    assert isinstance(e, NotImplementedError)
    assert e.message == (f"`add_one_ir` is written with TVM's IR builder, which hyb does not run "
                         f'(func_type="{func_type}" takes a kernel in the hybrid language)')
    line = inspect.getsourcelines(add_one_ir)[1] + 1
    assert (e.span.filename, e.span.line, e.span.col) == (__file__, line, 10)
    assert e.span.source_line.strip() == "ib = tvm.ir_builder.create()"
    assert "output_tensor" in e.hint and "^^^" in str(e)
