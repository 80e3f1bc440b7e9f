"""Registration forms and output conventions as MindSpore has them, written the way a MindSpore
script writes them (``import hyb as ms``, ``from hyb import ops``, ``ms.Tensor``)."""
import numpy as np
import pytest

import hyb
import hyb as ms
from hyb import Tensor, ops
from hyb.ops import CustomRegOp, DataType

X1 = np.arange(12, dtype=np.float32).reshape(3, 4) - 5
X2 = np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4)


def sub(x1, x2):
    return x1 - x2


def sub_and_add(x1, x2):
    return x1 - x2, x1 + x2


# --------------------------------------------------------------------------- outputs

@pytest.mark.parametrize("out_shape, out_dtype", [
    (((3, 4),), (ms.float32,)),
    ([(3, 4)], [ms.float32]),
    ([[3, 4]], (ms.float32,)),
    ((3, 4), (ms.float32,)),          # a tuple of dtypes makes the result a tuple
    (((3, 4),), ms.float32),          # so does a tuple of shapes
    (lambda a, b: (a,), lambda a, b: (a,)),
])
def test_a_tuple_or_list_of_one_entry_gives_a_1_tuple(out_shape, out_dtype):
    op = ops.Custom(sub, out_shape, out_dtype, "pyfunc")
    out = op(Tensor(X1), Tensor(X2))
    assert isinstance(out, tuple) and len(out) == 1
    np.testing.assert_array_equal(out[0].asnumpy(), X1 - X2)
    relu = np.maximum(out[0].asnumpy(), 0)  # the way MindSpore's tests read it: x[0]
    assert relu.shape == (3, 4)


@pytest.mark.parametrize("out_shape, out_dtype", [
    ((3, 4), ms.float32),
    ([3, 4], ms.float32),
    (lambda a, b: a, lambda a, b: a),
])
def test_one_shape_and_one_dtype_give_a_tensor(out_shape, out_dtype):
    out = ops.Custom(sub, out_shape, out_dtype, "pyfunc")(Tensor(X1), Tensor(X2))
    assert isinstance(out, ms.Tensor)
    np.testing.assert_array_equal(out.asnumpy(), X1 - X2)


def test_several_outputs_give_a_tuple():
    out = ops.Custom(sub_and_add, ((3, 4), (3, 4)), (ms.float32, ms.float32), "pyfunc")(Tensor(X1), Tensor(X2))
    assert isinstance(out, tuple) and len(out) == 2
    np.testing.assert_array_equal(out[1].asnumpy(), X1 + X2)


def test_hybrid_kernel_with_a_1_tuple_declaration():
    @hyb.hybrid
    def add(a, b):
        c = output_tensor(a.shape, a.dtype)
        for i in range(a.shape[0]):
            for j in range(a.shape[1]):
                c[i, j] = a[i, j] + b[i, j]
        return c

    out = ops.Custom(add, ((3, 4),), (ms.float32,), "akg")(Tensor(X1), Tensor(X2))
    assert isinstance(out, tuple) and len(out) == 1
    np.testing.assert_array_equal(out[0].asnumpy(), X1 + X2)
    assert isinstance(ops.Custom(add, func_type="akg")(Tensor(X1), Tensor(X2)), ms.Tensor)  # inferred: a tensor


def test_bprop_of_a_1_tuple_op_receives_tuples():
    seen = {}

    def bprop(x1, x2, out, dout):
        seen["out"], seen["dout"] = out, dout
        return (dout[0], -dout[0])

    op = ops.Custom(sub, ((3, 4),), (ms.float32,), "pyfunc", bprop=bprop)
    dx1, dx2 = ms.grad(lambda a, b: op(a, b)[0].sum(), grad_position=(0, 1))(Tensor(X1), Tensor(X2))
    assert isinstance(seen["out"], tuple) and isinstance(seen["dout"], tuple) and len(seen["dout"]) == 1
    np.testing.assert_array_equal(dx1.asnumpy(), np.ones((3, 4)))
    np.testing.assert_array_equal(dx2.asnumpy(), -np.ones((3, 4)))


def test_an_op_without_outputs_runs_for_its_side_effects():
    seen = []

    def record(x1, x2):
        seen.append(x1 + x2)

    op = ops.Custom(record, (), (), "pyfunc")
    assert op(Tensor(X1), Tensor(X2)) == ()
    np.testing.assert_array_equal(seen[0], X1 + X2)
    assert ops.Custom(record, [], [], "pyfunc")(Tensor(X1), Tensor(X2)) == ()
    assert len(seen) == 2


@pytest.mark.parametrize("func, dtype, expect", [
    (lambda a, b: a - b, ms.int32, np.int32(5)),            # a 0-d array of the inputs' dtype
    (lambda a, b: int(a - b), ms.int32, np.int32(5)),       # a Python int
    (lambda a, b: float(a - b), ms.float16, np.float16(5)),  # a Python float
    (lambda a, b: np.float64(a - b), ms.float32, np.float32(5)),  # a NumPy scalar
    (lambda a, b: bool(a > b), ms.bool_, np.bool_(True)),
])
def test_a_number_result_takes_out_dtype(func, dtype, expect):
    out = ops.Custom(func, (), dtype, "pyfunc")(Tensor(10), Tensor(5))
    assert out.shape == () and out.asnumpy().dtype == expect.dtype
    assert out.asnumpy() == expect


def test_output_convention_errors():
    with pytest.raises(hyb.HybridArgumentError) as e:
        ops.Custom(sub, (3, 4), (), "pyfunc")(Tensor(X1), Tensor(X2))
    assert str(e.value).splitlines()[0] == (
        "error: Custom op `sub`: out_dtype=() declares no outputs but out_shape gives (3, 4)")
    with pytest.raises(hyb.HybridArgumentError) as e:
        ops.Custom(sub, ((3, 4), (3, 4)), (ms.float32,), "pyfunc")(Tensor(X1), Tensor(X2))
    assert "out_shape gives 2 outputs but out_dtype gives 1" in str(e.value)
    with pytest.raises(hyb.HybridTypeError) as e:
        ops.Custom(sub, (), (), "pyfunc")(Tensor(X1), Tensor(X2))
    assert "declares 0 outputs but `sub` returned 1" in str(e.value)
    with pytest.raises(hyb.HybridTypeError) as e:  # an array (not a number) keeps its dtype: a mistake
        ops.Custom(sub, (3, 4), ms.int32, "pyfunc")(Tensor(X1), Tensor(X2))
    assert "out_dtype declares int32 for output 0 but `sub` returned float32" in str(e.value)


# --------------------------------------------------------------------------- registrations

def addn(xs):
    return sum(xs[1:], xs[0])


ADDN_INFO = (CustomRegOp("addn").input(0, "xs", "dynamic").output(0, "y")
             .dtype_format(DataType.F32_Default, DataType.F32_Default).target("CPU").get_op_info())


@hyb.hybrid
def fma3(a, b, c):
    d = output_tensor(a.shape, a.dtype)
    for i in range(a.shape[0]):
        for j in range(a.shape[1]):
            d[i, j] = a[i, j] + b[i, j] * c[i, j]
    return d


def test_a_dynamic_input_is_a_tuple_passed_as_one_argument():
    op = ops.Custom(addn, lambda shapes: shapes[0], lambda dtypes: dtypes[0], "pyfunc", reg_info=ADDN_INFO)
    ts = (Tensor(X1), Tensor(X2), Tensor(X1))
    np.testing.assert_allclose(op(ts).asnumpy(), X1 + X2 + X1)
    np.testing.assert_allclose(op([Tensor(X1)]).asnumpy(), X1)
    # a hybrid kernel takes the tuple's tensors as consecutive parameters
    op = ops.Custom(fma3, reg_info=ADDN_INFO)
    np.testing.assert_allclose(op(ts).asnumpy(), X1 + X2 * X1)


def test_gradients_through_a_dynamic_input():
    def bprop(xs, out, dout):
        return (tuple(dout * (k + 1) for k in range(len(xs))),)

    op = ops.Custom(addn, lambda s: s[0], lambda d: d[0], "pyfunc", bprop=bprop, reg_info=ADDN_INFO)
    grads = ms.grad(lambda a, b: op((a, b)).sum(), grad_position=(0, 1))(Tensor(X1), Tensor(X2))
    np.testing.assert_array_equal(grads[0].asnumpy(), np.ones((3, 4)))
    np.testing.assert_array_equal(grads[1].asnumpy(), 2 * np.ones((3, 4)))
    # the derived gradient of a hybrid kernel
    op = ops.Custom(fma3, reg_info=ADDN_INFO)
    ga, gb, gc = ms.grad(lambda a, b, c: op((a, b, c)).sum(), grad_position=(0, 1, 2))(
        Tensor(X1), Tensor(X2), Tensor(X1))
    np.testing.assert_allclose(ga.asnumpy(), np.ones((3, 4)))
    np.testing.assert_allclose(gb.asnumpy(), X1)
    np.testing.assert_allclose(gc.asnumpy(), X2)


def test_dynamic_input_errors():
    op = ops.Custom(addn, lambda s: s[0], lambda d: d[0], "pyfunc", reg_info=ADDN_INFO)
    with pytest.raises(hyb.HybridTypeError) as e:
        op(Tensor(X1))
    assert str(e.value) == ("error: input 0 (`xs`) of Custom op `addn` is declared dynamic, so it takes a tuple or "
                            "list of tensors, not a Tensor\nhint: pass the tensors together, e.g. op((xs1, xs2))")
    with pytest.raises(hyb.HybridTypeError) as e:
        op((Tensor(X1), Tensor(X2.astype(np.float64))))
    assert "does not support inputs of dtype ((float32, float64)) on CPU" in str(e.value)

    def bad_bprop(xs, out, dout):
        return (dout,)

    op = ops.Custom(addn, lambda s: s[0], lambda d: d[0], "pyfunc", bprop=bad_bprop, reg_info=ADDN_INFO)
    with pytest.raises(hyb.HybridTypeError) as e:
        ms.grad(lambda a, b: op((a, b)).sum())(Tensor(X1), Tensor(X2))
    assert "bprop of Custom op `addn` returned Tensor for input 0, a tuple of 2 tensors" in str(e.value)


OPT_INFO = (CustomRegOp("maybe_add").input(0, "a").input(1, "b", "optional").output(0, "y")
            .target("CPU").get_op_info())


def maybe_add(a, b=None):
    return a if b is None else a + b


def test_an_optional_input_may_be_left_out_or_none():
    op = ops.Custom(maybe_add, lambda *s: s[0], lambda *d: d[0], "pyfunc", reg_info=OPT_INFO)
    np.testing.assert_array_equal(op(Tensor(X1)).asnumpy(), X1)
    np.testing.assert_array_equal(op(Tensor(X1), None).asnumpy(), X1)
    np.testing.assert_array_equal(op(Tensor(X1), Tensor(X2)).asnumpy(), X1 + X2)


@hyb.hybrid
def add2(a, b):
    c = output_tensor(a.shape, a.dtype)
    for i in range(a.shape[0]):
        c[i] = a[i] + b[i]
    return c


def test_only_trailing_optional_inputs_may_be_left_out():
    info = (CustomRegOp("f").input(0, "a", "optional").input(1, "b", "optional").input(2, "c").output(0, "y")
            .get_op_info())
    op = ops.Custom(lambda a, b, c: a + c, lambda *s: s[0], lambda *d: d[0], "pyfunc", reg_info=info)
    np.testing.assert_array_equal(op(Tensor(X1), None, Tensor(X2)).asnumpy(), X1 + X2)
    with pytest.raises(hyb.HybridArgumentError) as e:
        op(Tensor(X1), Tensor(X2))  # c is required: the optional b cannot be left out before it
    assert "Custom op `<lambda>` takes 3 inputs (a, b, c); got 2 arguments" in str(e.value)


def test_a_missing_optional_input_of_a_kernel_is_refused():
    op = ops.Custom(add2, reg_info=OPT_INFO)
    np.testing.assert_array_equal(op(Tensor(X1[0]), Tensor(X2[0])).asnumpy(), X1[0] + X2[0])
    with pytest.raises(hyb.HybridUnsupportedError) as e:
        op(Tensor(X1[0]), None)
    assert ("an optional input was passed as None; only pyfunc operators take a missing input "
            '(func_type="hybrid" kernels need every argument)') in str(e.value)
    with pytest.raises(hyb.HybridArgumentError) as e:
        op()
    assert "takes 2 inputs (a, b); got 0 arguments" in str(e.value)


def scale_add(x1, x2, scale, paddings):
    return x1 + x2 * scale + paddings[0]


def test_attribute_only_registration():
    info = (CustomRegOp("scale_add").attr("scale", "required", "float", value=0.7)
            .attr("paddings", "required", "all", value=[2.0, 2.0]).target("CPU").get_op_info())
    op = ops.Custom(scale_add, (3, 4), ms.float32, "pyfunc", reg_info=info)
    np.testing.assert_allclose(op(Tensor(X1), Tensor(X2)).asnumpy(), X1 + X2 * np.float32(0.7) + 2, rtol=1e-6)
    # values after the tensors are the attributes, in the registration's order
    np.testing.assert_allclose(op(Tensor(X1), Tensor(X2), 0.5).asnumpy(), X1 + X2 * 0.5 + 2, rtol=1e-6)
    np.testing.assert_allclose(op(Tensor(X1), Tensor(X2), 0.5, (1.0,)).asnumpy(), X1 + X2 * 0.5 + 1, rtol=1e-6)
    with pytest.raises(hyb.HybridArgumentError) as e:
        op(Tensor(X1), Tensor(X2), 0.5, (1.0,), 3)
    assert ("has 2 attributes (scale, paddings) but the call passes 3 values after its 2 tensor inputs"
            in str(e.value))


@pytest.mark.parametrize("value, expect", [
    ([1.0, 2.0], (1.0, 2.0)), (3, 3), ("mean", "mean"), (True, True), ((1, (2, 3)), (1, (2, 3))),
])
def test_all_attribute_values_are_taken_as_given(value, expect):
    seen = []

    def f(x, v):
        seen.append(v)
        return x

    info = CustomRegOp("f").input(0, "x").output(0, "y").attr("v", "required", "all", value=value).get_op_info()
    ops.Custom(f, lambda s: s, lambda d: d, "pyfunc", reg_info=info)(Tensor(X1))
    assert seen == [expect]


def test_all_attribute_refuses_other_values():
    with pytest.raises(hyb.HybridArgumentError) as e:
        CustomRegOp("f").attr("v", "required", "all", value={"a": 1})
    assert str(e.value).splitlines()[0] == (
        "error: CustomRegOp(\"f\").attr('v') value: {'a': 1} is not a bool, int, float, string or a list of them")


def test_list_attribute_types():
    seen = []

    def f(x, ks, fs, bs, ss):
        seen.append((ks, fs, bs, ss))
        return x

    info = (CustomRegOp("f").input(0, "x").output(0, "y").attr("ks", "required", "listInt", value=[1, 2])
            .attr("fs", "required", "listFloat", default_value="0.5,1.5")
            .attr("bs", "required", "listBool", value=[True, False])
            .attr("ss", "required", "listStr", value=["a", "b"]).get_op_info())
    ops.Custom(f, lambda s: s, lambda d: d, "pyfunc", reg_info=info)(Tensor(X1))
    assert seen == [((1, 2), (0.5, 1.5), (True, False), ("a", "b"))]


def test_registrations_for_each_target_are_selected_by_the_device_target():
    def reg(target, row):
        return (CustomRegOp("add2").input(0, "a").input(1, "b").output(0, "c").dtype_format(*row)
                .target(target).get_op_info())

    f32 = (DataType.F32_Default,) * 3
    f64 = (DataType.F64_Default,) * 3
    # a registration for GPU that does not fit the kernel is not checked while the target is CPU
    bad_gpu = CustomRegOp("add2").input(0, "a").output(0, "c").target("GPU").get_op_info()
    op = ops.Custom(add2, reg_info=[reg("CPU", f32), reg("Ascend", f64), bad_gpu])
    old = ms.get_context("device_target")
    try:
        ms.set_context(device_target="CPU")
        np.testing.assert_array_equal(op(Tensor(X1[0]), Tensor(X2[0])).asnumpy(), X1[0] + X2[0])
        with pytest.raises(hyb.HybridTypeError):
            op(Tensor(X1[0].astype(np.float64)), Tensor(X2[0].astype(np.float64)))
        ms.set_context(device_target="GPU")
        with pytest.raises(hyb.HybridArgumentError) as e:
            op(Tensor(X1[0]), Tensor(X2[0]))
        assert "operator information of Custom op `add2` for GPU: declares 1 inputs (a)" in str(e.value)
    finally:
        ms.set_context(device_target=old)


def test_what_mindspore_accepts_at_import_time_builds():
    # Ascend layouts and dynamic inputs: registrations a shared module may hold for other targets
    info = (CustomRegOp("conv").input(0, "x", "dynamic").input(1, "w", "optional").output(0, "y")
            .dtype_format(DataType.F16_5HD, DataType.F16_FracZ, DataType.F16_5HD)
            .dtype_format(DataType.F32_NCHW, DataType.F32_NCHW, DataType.F32_NCHW)
            .attr("mode", "optional", "all").target("Ascend").get_op_info())
    assert info["dtype_format"][0][0] == ["float16", "NC1HWC0"]
    assert info["dtype_format"][1][0] == ["float32", "NCHW"]
    assert info.rows() == [("float32", "float32", "float32")]  # rows of blocked layouts never match
    assert DataType.I8_Default == ("int8", "DefaultFormat") and DataType.F32_None == ("float32", "")
    ops.Custom(lambda x, w=None: x, (1,), ms.float32, "pyfunc", reg_info=info)
    with pytest.raises(AttributeError, match="type object 'DataType' has no attribute 'F99_Default'"):
        DataType.F99_Default  # noqa: B018
