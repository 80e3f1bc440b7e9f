"""The custom-operator layer (hyb.ops): Custom of every kind, operator information
(CustomRegOp, DataType, custom_info_register), bprop and derived gradients, and the seeds'
examples in examples/seeds/, each run as a script and compared with what the seeds print."""
from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import warnings

import numpy as np
import pytest

import hyb
import hyb.ops as ops
from hyb import context
from hyb.ops import AotKernelError, Custom, CustomRegOp, DataType, custom_info_register

ROOT = Path(__file__).resolve().parents[2]
SEEDS = ROOT / "examples" / "seeds"
needs_gxx = pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++ to build aot kernels")

F32 = np.float32


@pytest.fixture(autouse=True)
def cpu_context():
    context._reset()
    yield
    context._reset()


def build(tmp_path, name):
    """Build examples/seeds/<name>.cc into tmp_path/<name>.so with the seeds' command."""
    so = tmp_path / f"{name}.so"
    subprocess.run(["g++", "--shared", "-fPIC", "-o", str(so), str(SEEDS / f"{name}.cc")], check=True)
    return so


# ------------------------------------------------------------------ kernels used below
def add(a, b):
    c = output_tensor(a.shape, a.dtype)
    for i0 in range(a.shape[0]):
        for i1 in range(a.shape[1]):
            c[i0, i1] = a[i0, i1] + b[i0, i1]
    return c


def mul(a, b):
    c = output_tensor(a.shape, a.dtype)
    for i in range(a.shape[0]):
        c[i] = a[i] * b[i]
    return c


def scale(x, alpha):
    y = output_tensor(x.shape, x.dtype)
    for i in range(x.shape[0]):
        y[i] = alpha * x[i]
    return y


def sum_and_prod(a, b):
    s = output_tensor(a.shape, a.dtype)
    p = output_tensor(a.shape, a.dtype)
    for i in range(a.shape[0]):
        s[i] = a[i] + b[i]
        p[i] = a[i] * b[i]
    return s, p


def double_in_place(a):
    for i in range(a.shape[0]):
        a[i] = 2.0 * a[i]
    return a


def to_int(a):
    c = output_tensor(a.shape, "int32")
    for i in range(a.shape[0]):
        c[i] = int32(a[i])
    return c


X0 = np.array([[0.0, 0.0], [1.0, 1.0]], F32)
X1 = np.array([[2.0, 2.0], [3.0, 3.0]], F32)


def info_add(*rows, target="CPU"):
    b = CustomRegOp("add").input(0, "a").input(1, "b").output(0, "c")
    for r in rows:
        b = b.dtype_format(*r)
    if target:
        b = b.target(target)
    return b.get_op_info()


F32_ROW = (DataType.F32_Default,) * 3
F64_ROW = (DataType.F64_Default,) * 3


# ================================================================== operator information
def test_datatype_constants():
    assert DataType.F32_Default == ("float32", "DefaultFormat")
    assert DataType.F16_Default == ("float16", "DefaultFormat")
    assert DataType.BF16_Default == ("bfloat16", "DefaultFormat")
    assert DataType.F64_Default == ("float64", "DefaultFormat")
    assert DataType.BOOL_Default == ("bool", "DefaultFormat")
    assert DataType.None_None == ("", "")
    assert DataType.I32_None == ("int32", "")
    for p, name in [("I8", "int8"), ("I16", "int16"), ("I32", "int32"), ("I64", "int64"),
                    ("U8", "uint8"), ("U16", "uint16"), ("U32", "uint32"), ("U64", "uint64")]:
        assert getattr(DataType, f"{p}_Default") == (name, "DefaultFormat")


def test_get_op_info_is_a_dict_like_mindsporess():
    info = (CustomRegOp("Dropout2D").fusion_type("OPAQUE")
            .input(0, "x", "required").output(0, "y", "required").output(1, "mask", "required")
            .attr("keep_prob", "required", "float")
            .attr("cust", "required", "str", "kernels")
            .dtype_format(DataType.F32_Default, DataType.F32_Default, DataType.BOOL_Default)
            .target("CPU").get_op_info())
    assert isinstance(info, dict)
    assert info["op_name"] == "Dropout2D" and info["fusion_type"] == "OPAQUE" and info["target"] == "CPU"
    assert info["inputs"] == [{"index": 0, "name": "x", "param_type": "required"}]
    assert [o["name"] for o in info["outputs"]] == ["y", "mask"]
    assert info["attr"] == [{"name": "keep_prob", "param_type": "required", "type": "float"},
                            {"name": "cust", "param_type": "required", "type": "str", "default_value": "kernels"}]
    assert info["dtype_format"] == [[["float32", "DefaultFormat"], ["float32", "DefaultFormat"],
                                     ["bool", "DefaultFormat"]]]
    assert info.rows() == [("float32", "float32", "bool")]


def test_inputs_are_ordered_by_index():
    info = CustomRegOp("f").input(1, "b").input(0, "a").output(0, "c").get_op_info()
    assert info.input_names == ["a", "b"]


def test_indices_other_than_0_to_n_are_accepted_with_a_warning():
    with pytest.warns(hyb.HybridWarning) as w:
        info = CustomRegOp("f").input(0, "x1").input(0, "x2").output(0, "y").get_op_info()
    assert info.input_names == ["x1", "x2"]
    assert str(w[0].message) == ('warning: CustomRegOp("f"): input indices are [0, 0], not 0..1; the inputs are '
                                 "taken in the order x1, x2")
    with pytest.warns(hyb.HybridWarning, match=r"input indices are \[2, 0\], not 0..1; the inputs are taken in the "
                                               "order b, a"):
        assert CustomRegOp("f").input(2, "a").input(0, "b").get_op_info().input_names == ["b", "a"]


@pytest.mark.parametrize("build_it, cls, message", [
    (lambda: CustomRegOp("f").input(-1, "a"), hyb.HybridArgumentError, "the index must be an integer >= 0"),
    (lambda: CustomRegOp("f").input(0, "a").input(1, "a"), hyb.HybridArgumentError,
     "another input is already called `a`"),
    (lambda: CustomRegOp("f").input(0, "a").output(0, "c").dtype_format(DataType.F32_Default).get_op_info(),
     hyb.HybridArgumentError, "a dtype_format row has 1 entries, but the operator has 1 inputs and 1 outputs"),
    (lambda: CustomRegOp("f").target("TPU"), hyb.HybridArgumentError, "the target must be 'CPU', 'GPU', 'Ascend'"),
    (lambda: CustomRegOp("f").attr("k", "required", "double"), hyb.HybridArgumentError,
     "value_type 'double' is not one of"),
    (lambda: CustomRegOp("f").attr("k", "required", "float", "half"), hyb.HybridArgumentError,
     "'half' is not a valid `float` value"),
    (lambda: CustomRegOp("f").attr("k", "maybe", "float"), hyb.HybridArgumentError,
     "param_type 'maybe' must be 'required' or 'optional'"),
    (lambda: CustomRegOp("f").dtype_format("float32"), hyb.HybridArgumentError, "not a DataType pair"),
    (lambda: CustomRegOp("f").dtype_format(("float128", "DefaultFormat")), hyb.HybridArgumentError,
     "unknown dtype 'float128'"),
    (lambda: CustomRegOp("f").output(0, "ys", "dynamic"), hyb.HybridUnsupportedError,
     "dynamic (variadic) outputs are not supported by hyb"),
])
def test_builder_errors(build_it, cls, message):
    with pytest.raises(cls) as e:
        build_it()
    assert type(e.value) is cls
    assert message in str(e.value)


def test_custom_info_register_sets_reg_info_and_returns_the_function():
    info = info_add(F32_ROW)

    def f(a, b):
        return a + b

    assert custom_info_register(info)(f) is f
    assert f.reg_info == [info]
    k = custom_info_register(info)(hyb.hybrid(add))
    assert isinstance(k, hyb.Kernel) and k.reg_info == [info]


# ================================================================== kinds
def test_akg_add_with_callables():
    op = Custom(add, out_shape=lambda x, _: x, out_dtype=lambda x, _: x, func_type="akg")
    out = op(hyb.Tensor(X0), hyb.Tensor(X1))
    assert isinstance(out, hyb.Tensor)
    np.testing.assert_array_equal(out.asnumpy(), X0 + X1)


def test_hybrid_kernel_infers_outputs_statically():
    k = hyb.hybrid(sum_and_prod)
    op = Custom(k)
    a, b = np.arange(4, dtype=F32), np.full(4, 3, F32)
    s, p = op(a, b)
    np.testing.assert_array_equal(s.asnumpy(), a + b)
    np.testing.assert_array_equal(p.asnumpy(), a * b)
    assert op.kernel is k


def test_kernels_of_a_hyb_file_and_decorated_kernels():
    mod = hyb.load(ROOT / "examples" / "seeds.hyb")
    np.testing.assert_array_equal(Custom(mod.add)(X0, X1).asnumpy(), X0 + X1)
    k = hyb.hybrid(add)
    np.testing.assert_array_equal(Custom(k, func_type="hybrid")(X0, X1).asnumpy(), X0 + X1)


def test_fixed_out_shape_and_dtype():
    op = Custom(add, out_shape=(2, 2), out_dtype=hyb.float32)
    np.testing.assert_array_equal(op(X0, X1).asnumpy(), X0 + X1)
    op = Custom(sum_and_prod, out_shape=((3,), (3,)), out_dtype=(np.float64, "float64"))
    s, p = op(np.ones(3), np.ones(3))
    assert s.dtype == np.float64 and p.shape == (3,)


def test_declared_shape_that_differs_from_the_kernel_is_an_error():
    op = Custom(add, out_shape=lambda x, _: (x[0], x[1] + 1), out_dtype=lambda x, _: x)
    with pytest.raises(hyb.HybridTypeError) as e:
        op(X0, X1)
    assert "out_shape declares (2, 3) for output 0 but `add` makes shape (2, 2)" in str(e.value)


def test_declared_dtype_that_differs_from_the_kernel_is_an_error():
    op = Custom(add, out_dtype=np.float64)
    with pytest.raises(hyb.HybridTypeError) as e:
        op(X0, X1)
    assert "out_dtype declares float64 for output 0 but `add` makes float32" in str(e.value)


def test_declared_output_count_that_differs_is_an_error():
    op = Custom(add, out_shape=((2, 2), (2, 2)))
    with pytest.raises(hyb.HybridTypeError) as e:
        op(X0, X1)
    assert "declares 2 outputs but `add` makes 1" in str(e.value)


def test_out_shape_callable_with_the_wrong_arity():
    op = Custom(add, out_shape=lambda x: x)
    with pytest.raises(hyb.HybridArgumentError) as e:
        op(X0, X1)
    assert "out_shape cannot be called with the 2 arguments of the call" in str(e.value)


def test_not_a_shape():
    op = Custom(add, out_shape=lambda x, _: "big")
    with pytest.raises(hyb.HybridArgumentError) as e:
        op(X0, X1)
    assert "out_shape gave 'big', which is not a shape" in str(e.value)


def test_kernel_writing_an_input_in_place_leaves_the_tensor_alone():
    x = hyb.Tensor(np.array([1.0, 2.0], F32))
    out = Custom(double_in_place)(x)
    np.testing.assert_array_equal(out.asnumpy(), [2.0, 4.0])
    np.testing.assert_array_equal(x.asnumpy(), [1.0, 2.0])


def test_scalars_are_passed_to_hybrid_kernels():
    out = Custom(scale)(np.array([1.0, 2.0], F32), 3.0)
    np.testing.assert_array_equal(out.asnumpy(), [3.0, 6.0])
    assert out.dtype == np.float32


def test_pyfunc_add():
    op = Custom(lambda a, b: a + b, out_shape=lambda x, _: x, out_dtype=lambda x, _: x, func_type="pyfunc")
    np.testing.assert_array_equal(op(hyb.Tensor(X0), X1).asnumpy(), X0 + X1)


def test_pyfunc_without_declarations_takes_what_it_returns():
    op = Custom(lambda a: (a.sum(keepdims=True), a * 2), func_type="pyfunc")
    s, d = op(X0)
    assert s.shape == (1, 1) and d.shape == (2, 2)


def test_pyfunc_result_that_differs_from_the_declaration():
    op = Custom(lambda a: a[:1], out_shape=lambda x: x, out_dtype=lambda x: x, func_type="pyfunc")
    with pytest.raises(hyb.HybridTypeError) as e:
        op(X0)
    assert "out_shape declares (2, 2) for output 0 but `<lambda>` returned shape (1, 2)" in str(e.value)


def test_pyfunc_returning_its_input_gives_a_new_tensor():
    x = hyb.Tensor(X0)
    out = Custom(lambda a: a, func_type="pyfunc")(x)
    out.asnumpy()[0, 0] = 42.0
    assert x.asnumpy()[0, 0] == 0.0


@pytest.mark.parametrize("kind", ["tbe", "aicpu"])
def test_ascend_kinds_are_refused(kind):
    # made, as MindSpore makes it (a module may hold it for Ascend); refused when called
    op = Custom(add, out_shape=lambda x, _: x, out_dtype=lambda x, _: x, func_type=kind)
    assert op.name == "add" and op.kernel is None
    with pytest.raises(hyb.HybridUnsupportedError) as e:
        op(X0, X1)
    assert f'func_type="{kind}" operators run on Huawei Ascend hardware, which hyb does not target' in str(e.value)
    assert isinstance(e.value, NotImplementedError)


def test_unknown_func_type():
    with pytest.raises(hyb.HybridArgumentError) as e:
        Custom(add, func_type="julia")
    assert "unknown func_type 'julia'" in str(e.value)


def test_hybrid_needs_a_function():
    with pytest.raises(hyb.HybridArgumentError) as e:
        Custom("./add.so:CustomAdd")
    assert 'func_type="hybrid" needs a @hyb.hybrid kernel or a Python function' in str(e.value)


@pytest.mark.skipif(importlib.util.find_spec("pycuda") is not None, reason="pycuda is installed")
def test_gpu_target_compiles_for_cuda():
    hyb.set_context(device_target="GPU")
    with pytest.raises(hyb.HybridUnsupportedError) as e:
        Custom(add)(X0, X1)
    assert "needs pycuda" in str(e.value) or "needs an NVIDIA GPU" in str(e.value)


# ================================================================== aot
@needs_gxx
def test_aot_seed_add_cc_unchanged(tmp_path):
    so = build(tmp_path, "add")
    op = Custom(f"{so}:CustomAdd", out_shape=lambda x, _: x, out_dtype=lambda x, _: x, func_type="aot")
    np.testing.assert_array_equal(op(hyb.Tensor(X0), hyb.Tensor(X1)).asnumpy(), X0 + X1)
    # The seed's add.cc multiplies shapes[2][i] for i < nparam (3), past the output's 2 dims:
    # hyb pads each shape with 1s, so other shapes work too.
    a, b = np.arange(15, dtype=F32).reshape(3, 5), np.ones((3, 5), F32)
    np.testing.assert_array_equal(op(a, b).asnumpy(), a + b)
    v = np.arange(7, dtype=F32)
    np.testing.assert_array_equal(op(v, v).asnumpy(), 2 * v)


@needs_gxx
def test_aot_nonzero_return_is_an_error_with_its_code(tmp_path):
    so = build(tmp_path, "add")
    op = Custom(f"{so}:CustomAdd", out_shape=lambda x, _: x, out_dtype=lambda x, _: x, func_type="aot")
    with pytest.raises(AotKernelError) as e:
        op(X0.astype(np.float64), X1.astype(np.float64))  # add.cc returns 2 for a dtype other than float32
    assert e.value.code == 2 and isinstance(e.value, hyb.HybridError)
    assert f"aot kernel `CustomAdd` in {so} returned 2" in str(e.value)
    op2 = Custom(f"{so}:CustomAdd", out_shape=lambda x: x, out_dtype=lambda x: x, func_type="aot")
    with pytest.raises(AotKernelError) as e:
        op2(X0)  # nparam != 3
    assert e.value.code == 1


@needs_gxx
def test_aot_relative_path_is_found_in_the_working_directory(tmp_path, monkeypatch):
    build(tmp_path, "add")
    monkeypatch.chdir(tmp_path)
    op = Custom("./add.so:CustomAdd", out_shape=lambda x, _: x, out_dtype=lambda x, _: x, func_type="aot")
    np.testing.assert_array_equal(op(X0, X1).asnumpy(), X0 + X1)


@needs_gxx
def test_aot_relative_path_is_found_beside_the_calling_script(tmp_path):
    build(tmp_path, "add")
    script = tmp_path / "use_add.py"
    script.write_text("import numpy as np, hyb.ops as ops\n"
                      "op = ops.Custom('./add.so:CustomAdd', lambda x, _: x, lambda x, _: x, func_type='aot')\n"
                      "print(op(np.ones(3, np.float32), np.ones(3, np.float32)))\n")
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "[2. 2. 2.]\n"


@needs_gxx
def test_aot_non_contiguous_inputs_and_odd_dtypes(tmp_path):
    so = build(tmp_path, "add")
    op = Custom(f"{so}:CustomAdd", out_shape=lambda x, _: x, out_dtype=lambda x, _: x, func_type="aot")
    a = np.arange(12, dtype=F32).reshape(3, 4)
    np.testing.assert_array_equal(op(a.T, a.T).asnumpy(), 2 * a.T)
    np.testing.assert_array_equal(op(a[:, ::2], a[:, ::2]).asnumpy(), 2 * a[:, ::2])
    bad = Custom(f"{so}:CustomAdd", out_shape=lambda x, _: x, out_dtype=np.complex64, func_type="aot")
    with pytest.raises(hyb.HybridTypeError) as e:
        bad(a, a)
    assert "aot operator `CustomAdd`: output 0 has dtype complex64, which aot kernels do not take" in str(e.value)


@pytest.mark.skipif(shutil.which("cc") is None, reason="hyb aot links with cc")
def test_aot_library_built_by_hyb_aot(tmp_path):
    lib = tmp_path / "libadd.so"
    subprocess.run([sys.executable, "-m", "hyb.cli", "aot", str(ROOT / "examples" / "add.hyb"),
                    "--args", "a=float32[2,2] b=float32[2,2]", "-o", str(lib)], check=True, capture_output=True)
    op = Custom(f"{lib}:add", out_shape=lambda x, _: x, out_dtype=lambda x, _: x, func_type="aot")
    np.testing.assert_array_equal(op(hyb.Tensor(X0), hyb.Tensor(X1)).asnumpy(), X0 + X1)
    with pytest.raises(AotKernelError) as e:
        op(np.ones((2, 3), F32), np.ones((2, 3), F32))
    assert e.value.code == 4  # the library's message comes with the code
    assert "returned 4: parameter 0 (`a`): shape [2, 3], expected [2, 2]" in str(e.value)


@needs_gxx
def test_aot_errors_when_made(tmp_path):
    so = build(tmp_path, "add")
    with pytest.raises(hyb.HybridArgumentError) as e:
        Custom(str(so), out_shape=(1,), out_dtype=F32, func_type="aot")
    assert 'func_type="aot" needs "path/to/lib.so:function"' in str(e.value)
    with pytest.raises(hyb.HybridArgumentError) as e:
        Custom(str(tmp_path / "nothing.so") + ":f", out_shape=(1,), out_dtype=F32, func_type="aot")
    assert "nothing.so not found" in str(e.value)
    with pytest.raises(hyb.HybridArgumentError) as e:
        Custom(f"{so}:Missing", out_shape=(1,), out_dtype=F32, func_type="aot")
    assert "has no function `Missing`" in str(e.value)
    with pytest.raises(hyb.HybridArgumentError) as e:
        Custom(f"{so}:CustomAdd", func_type="aot")
    assert "aot operator `CustomAdd` needs out_shape and out_dtype" in str(e.value)


@needs_gxx
def test_aot_on_gpu_is_refused(tmp_path):
    so = build(tmp_path, "add")
    op = Custom(f"{so}:CustomAdd", out_shape=lambda x, _: x, out_dtype=lambda x, _: x, func_type="aot")
    hyb.set_context(device_target="GPU")
    with pytest.raises(hyb.HybridUnsupportedError) as e:
        op(X0, X1)
    assert "hyb calls aot kernels on the CPU with host memory" in str(e.value)


def dropout_info(target="CPU"):
    b = (CustomRegOp("Dropout2D").fusion_type("OPAQUE").input(0, "x", "required")
         .output(0, "y", "required").output(1, "mask", "required")
         .attr("keep_prob", "required", "float").attr("seed", "required", "int", "0"))
    for name in ["BOOL", "I8", "I16", "I32", "I64", "U8", "U16", "U32", "U64", "F16", "F32", "F64"]:
        b = b.dtype_format(getattr(DataType, f"{name}_Default"), getattr(DataType, f"{name}_Default"),
                           DataType.BOOL_Default)
    return b.target(target).get_op_info()


@needs_gxx
@pytest.mark.parametrize("dtype", ["bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
                                   "float16", "float32", "float64"])
def test_aot_dropout_two_outputs_and_attributes(tmp_path, dtype):
    op = Custom(f"{SEEDS / 'dropout2d.cc'}:Dropout2D", out_shape=lambda x, *_: (x, x),
                out_dtype=lambda x, *_: (x, hyb.bool_),
                func_type="aot", reg_info=dropout_info())
    x = (np.arange(1, 401).reshape(4, 100) % 7 + 1).astype(dtype)
    y, mask = op(hyb.Tensor(x), 0.5, 3)
    y, mask = y.asnumpy(), mask.asnumpy()
    assert y.dtype == np.dtype(dtype) and mask.dtype == np.bool_ and y.shape == mask.shape == x.shape
    assert 0.35 < mask.mean() < 0.65
    if dtype == "bool":
        want = x & mask
    else:
        want = np.where(mask, (x.astype(np.float64) * 2).astype(dtype), 0).astype(dtype)
    np.testing.assert_array_equal(y, want)
    # the seed attribute's default ("0") is used when the call passes only keep_prob; the same
    # seed gives the same mask
    _, m0 = op(x, 0.5)
    _, m0b = op(x, 0.5, 0)
    np.testing.assert_array_equal(m0.asnumpy(), m0b.asnumpy())
    assert not np.array_equal(m0.asnumpy(), mask)


@needs_gxx
def test_aot_required_attribute_and_dtype_rows(tmp_path):
    op = Custom(f"{SEEDS / 'dropout2d.cc'}:Dropout2D", out_shape=lambda x, *_: (x, x),
                out_dtype=lambda x, *_: (x, hyb.bool_),
                func_type="aot", reg_info=dropout_info())
    with pytest.raises(hyb.HybridArgumentError) as e:
        op(np.ones(3, F32))
    assert "attribute `keep_prob` of Custom op `Dropout2D` is required and has no value" in str(e.value)
    with pytest.raises(hyb.HybridArgumentError) as e:
        op(np.ones(3, F32), 0.5, 1, 2)
    assert "takes 1 inputs (x), then optionally its attributes (keep_prob, seed); got 4 arguments" in str(e.value)
    with pytest.raises(hyb.HybridArgumentError) as e:
        op(np.ones(3, F32), "half")
    assert "'half' is not a valid `float` value" in str(e.value)
    with pytest.raises(AotKernelError) as e:
        op(np.ones(3, F32), 1.5)  # the kernel refuses keep_prob outside (0, 1]
    assert e.value.code == 3
    with pytest.raises(hyb.HybridTypeError) as e:
        op(np.ones(3, np.complex64), 0.5)
    assert "does not support inputs of dtype (complex64) on CPU" in str(e.value)


# ================================================================== operator information rules
def test_input_dtypes_are_checked_against_the_rows():
    op = Custom(add, reg_info=info_add(F32_ROW, F64_ROW))
    np.testing.assert_array_equal(op(X0, X1).asnumpy(), X0 + X1)
    op(X0.astype(np.float64), X1.astype(np.float64))
    with pytest.raises(hyb.HybridTypeError) as e:
        op(X0.astype(np.int32), X1.astype(np.int32))
    msg = str(e.value)
    assert "Custom op `add` does not support inputs of dtype (int32, int32) on CPU" in msg
    assert "(float32, float32) -> (float32)" in msg and "(float64, float64) -> (float64)" in msg


def test_rows_check_the_output_dtype_too():
    info = info_add((DataType.F32_Default, DataType.F32_Default, DataType.F64_Default))
    with pytest.raises(hyb.HybridTypeError) as e:
        Custom(add, reg_info=info)(X0, X1)
    assert "gives outputs of dtype (float32), which no row of its operator information" in str(e.value)


def test_none_none_matches_any_dtype_and_python_numbers_are_weak():
    info = (CustomRegOp("scale").input(0, "x").output(0, "y")
            .dtype_format(DataType.None_None, DataType.None_None).get_op_info())
    Custom(lambda x: x * 2, func_type="pyfunc", reg_info=info)(X0.astype(np.int8))
    info = (CustomRegOp("scale").input(0, "x").input(1, "alpha").output(0, "y")
            .dtype_format(DataType.F32_Default, DataType.F32_Default, DataType.F32_Default).get_op_info())
    out = Custom(scale, reg_info=info)(np.ones(2, F32), 2.0)  # a Python float fits float32
    np.testing.assert_array_equal(out.asnumpy(), [2.0, 2.0])
    with pytest.raises(hyb.HybridTypeError):
        Custom(scale, reg_info=info)(np.ones(2, F32), 2)  # an int does not fit float32


def test_reg_info_takes_precedence_over_the_decorator():
    decorated = custom_info_register(info_add(F64_ROW))(hyb.hybrid(add))
    with pytest.raises(hyb.HybridTypeError):
        Custom(decorated)(X0, X1)  # the decorator allows float64 only
    op = Custom(decorated, reg_info=info_add(F32_ROW))
    np.testing.assert_array_equal(op(X0, X1).asnumpy(), X0 + X1)
    with pytest.raises(hyb.HybridTypeError):
        op(X0.astype(np.float64), X1.astype(np.float64))


def test_decorator_on_a_plain_function():
    @custom_info_register(info_add(F64_ROW))
    def add2(a, b):
        c = output_tensor(a.shape, a.dtype)
        for i0 in range(a.shape[0]):
            for i1 in range(a.shape[1]):
                c[i0, i1] = a[i0, i1] + b[i0, i1]
        return c

    op = Custom(add2, func_type="akg")
    op(X0.astype(np.float64), X1.astype(np.float64))
    with pytest.raises(hyb.HybridTypeError):
        op(X0, X1)


def test_the_first_registration_for_a_target_is_used():
    with pytest.warns(hyb.HybridWarning) as w:
        op = Custom(add, reg_info=[info_add(F32_ROW), [info_add(F64_ROW)]])
    assert str(w[0].message) == ("warning: operator information for target CPU is given twice (`add` and `add`); the first "
                                 "is used and `add` is ignored, as in MindSpore")
    op(X0, X1)
    with pytest.raises(hyb.HybridTypeError):
        op(X0.astype(np.float64), X1.astype(np.float64))


def test_the_rows_of_the_current_target_apply():
    op = Custom(add, reg_info=[info_add(F32_ROW, target="CPU"), info_add(F64_ROW, target="GPU")])
    op(X0, X1)
    with pytest.raises(hyb.HybridTypeError):
        op(X0.astype(np.float64), X1.astype(np.float64))
    # information for other targets only: the inputs decide, with a warning, as MindSpore's kernel
    # selection infers the information from the inputs
    for reg in (info_add(F32_ROW, target="Ascend"), [info_add(F32_ROW, target="Ascend"), info_add(F32_ROW, target="GPU")]):
        op = Custom(add, reg_info=reg)
        with pytest.warns(hyb.HybridWarning) as w:
            np.testing.assert_array_equal(op(X0, X1).asnumpy(), X0 + X1)
        assert str(w[0].message).startswith(f"warning: Custom op `{op.name}` has operator information for "
                                            f"{'Ascend, GPU' if isinstance(reg, list) else 'Ascend'} only; on CPU")
        x64 = X0.astype(np.float64)
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # once per operator and target
            np.testing.assert_array_equal(op(x64, x64).asnumpy(), x64 + x64)  # no row to fit: it runs
    op = Custom(add, reg_info=info_add(F32_ROW, target=None))  # no target: applies everywhere
    op(X0, X1)


def test_input_count_must_match_the_implementation():
    info = CustomRegOp("add").input(0, "a").output(0, "c").get_op_info()
    op = Custom(add, reg_info=info)  # checked when a call first uses it, as MindSpore does
    with pytest.raises(hyb.HybridArgumentError) as e:
        op(X0, X1)
    assert "declares 1 inputs (a) but `add` takes 2 (a, b)" in str(e.value)
    with pytest.raises(hyb.HybridArgumentError):
        Custom(lambda a, b: a + b, func_type="pyfunc", reg_info=info)(X0, X1)


def test_output_count_must_match_the_implementation():
    info = CustomRegOp("add").input(0, "a").input(1, "b").output(0, "c").output(1, "d").get_op_info()
    with pytest.raises(hyb.HybridArgumentError) as e:
        Custom(add, reg_info=info)(X0, X1)
    assert "declares 2 outputs (c, d) but `add` returns 1" in str(e.value)
    # a pyfunc's outputs are counted when it runs
    with pytest.raises(hyb.HybridTypeError) as e:
        Custom(lambda a, b: a + b, func_type="pyfunc", reg_info=info)(X0, X1)
    assert "declares 2 outputs but `<lambda>` gave 1" in str(e.value)


def test_input_and_output_order_must_match_the_implementation():
    info = CustomRegOp("add").input(0, "b").input(1, "a").output(0, "c").get_op_info()
    with pytest.raises(hyb.HybridArgumentError) as e:
        Custom(add, reg_info=info)(X0, X1)
    assert "input 0 is `b`, but `b` is input 1 of the implementation (a, b)" in str(e.value)
    info = CustomRegOp("sp").input(0, "a").input(1, "b").output(0, "p").output(1, "s").get_op_info()
    with pytest.raises(hyb.HybridArgumentError) as e:
        Custom(sum_and_prod, reg_info=info)(X0, X1)
    assert "output 0 is `p`, but `p` is output 1 of the implementation (s, p)" in str(e.value)
    # names that are not the implementation's are labels
    info = CustomRegOp("add").input(0, "x1").input(1, "x2").output(0, "y").get_op_info()
    Custom(add, reg_info=info)(X0, X1)


def attr_info(**attr_kwargs):
    return (CustomRegOp("scale").input(0, "x").output(0, "y")
            .attr("alpha", "required", "float", **attr_kwargs)
            .dtype_format(DataType.F32_Default, DataType.F32_Default).get_op_info())


def test_attribute_values_are_passed_to_the_kernel():
    x = np.array([1.0, 2.0], F32)
    op = Custom(scale, reg_info=attr_info(value=3.0))
    np.testing.assert_array_equal(op(x).asnumpy(), [3.0, 6.0])
    op = Custom(scale, reg_info=attr_info(default_value="0.5"))
    np.testing.assert_array_equal(op(x).asnumpy(), [0.5, 1.0])
    np.testing.assert_array_equal(op(x, 4.0).asnumpy(), [4.0, 8.0])  # a value in the call wins


def test_attribute_names_must_be_the_kernels_scalar_parameters():
    info = (CustomRegOp("scale").input(0, "x").output(0, "y").attr("beta", "required", "float", "1.0")
            .get_op_info())
    with pytest.raises(hyb.HybridArgumentError) as e:
        Custom(scale, reg_info=info)(np.ones(2, F32))
    assert "attribute `beta` is not a parameter of `scale` (x, alpha)" in str(e.value)


def test_optional_attribute_without_value():
    info = (CustomRegOp("scale").input(0, "x").output(0, "y").attr("alpha", "optional", "float")
            .get_op_info())
    with pytest.raises(hyb.HybridArgumentError) as e:
        Custom(scale, reg_info=info)(np.ones(2, F32))
    assert "attribute `alpha` of Custom op `scale` has no value, and kernel `scale` needs one" in str(e.value)

    def pyscale(x, alpha=10.0):
        return x * F32(alpha)

    op = Custom(pyscale, func_type="pyfunc", reg_info=info)
    np.testing.assert_array_equal(op(np.ones(2, F32)).asnumpy(), [10.0, 10.0])  # Python's default
    np.testing.assert_array_equal(op(np.ones(2, F32), 2.0).asnumpy(), [2.0, 2.0])  # by keyword


# ================================================================== gradients
def square_grad(x, dout):
    dx = output_tensor(x.shape, x.dtype)
    for i0 in range(x.shape[0]):
        dx[i0] = 2.0 * x[i0]
    for i0 in range(x.shape[0]):
        dx[i0] = dx[i0] * dout[i0]
    return dx


def square(x):
    y = output_tensor(x.shape, x.dtype)
    for i0 in range(x.shape[0]):
        y[i0] = x[i0] * x[i0]
    return y


XS = np.array([1.0, 4.0, 9.0], F32)


def test_bprop_gets_inputs_out_dout_and_its_akg_op_runs():
    seen = {}
    grad_op = Custom(square_grad, lambda x, _: x, lambda x, _: x, func_type="akg")

    def bprop(x, out, dout):
        seen.update(x=x, out=out, dout=dout)
        return (grad_op(x, dout),)

    op = Custom(square, bprop=bprop)
    dx = hyb.grad(op)(hyb.Tensor(XS))
    np.testing.assert_array_equal(dx.asnumpy(), 2 * XS)
    assert all(isinstance(v, hyb.Tensor) for v in seen.values())
    np.testing.assert_array_equal(seen["out"].asnumpy(), XS * XS)
    np.testing.assert_array_equal(seen["dout"].asnumpy(), np.ones(3, F32))


def test_sens_param_reaches_dout():
    op = Custom(square, bprop=lambda x, out, dout: (2 * x * dout,))
    sens = np.array([1.0, 0.5, 2.0], F32)
    dx = ops.GradOperation(sens_param=True)(op)(hyb.Tensor(XS), hyb.Tensor(sens))
    np.testing.assert_allclose(dx.asnumpy(), 2 * XS * sens)


def test_bprop_of_several_outputs_gets_tuples():
    seen = {}

    def bprop(a, b, out, dout):
        seen.update(out=out, dout=dout)
        ds, dp = dout
        return ds + dp * b, ds + dp * a

    op = Custom(sum_and_prod, bprop=bprop)
    a, b = np.array([1.0, 2.0], F32), np.array([3.0, 5.0], F32)

    def f(a, b):
        s, p = op(a, b)
        return (s * 2 + p).sum()

    da, db = hyb.grad(f, grad_position=(0, 1))(hyb.Tensor(a), hyb.Tensor(b))
    np.testing.assert_allclose(da.asnumpy(), 2 + b)
    np.testing.assert_allclose(db.asnumpy(), 2 + a)
    assert isinstance(seen["out"], tuple) and len(seen["out"]) == 2
    assert isinstance(seen["dout"], tuple)
    np.testing.assert_allclose(seen["dout"][0].asnumpy(), [2.0, 2.0])


def test_bprop_must_return_a_tuple():
    op = Custom(square, bprop=lambda x, out, dout: 2 * x * dout)
    with pytest.raises(hyb.HybridTypeError) as e:
        hyb.grad(op)(hyb.Tensor(XS))
    assert "bprop of Custom op `square` returned a Tensor, not a tuple of input gradients" in str(e.value)
    assert "`return (dx,)`" in str(e.value)


def test_bprop_gradient_count_and_shape():
    op = Custom(square, bprop=lambda x, out, dout: (dout, dout))
    with pytest.raises(hyb.HybridArgumentError) as e:
        hyb.grad(op)(hyb.Tensor(XS))
    assert "bprop of Custom op `square` returned 2 gradients for 1 inputs" in str(e.value)
    op = Custom(square, bprop=lambda x, out, dout: (np.ones(2, F32),))
    with pytest.raises(hyb.HybridTypeError) as e:
        hyb.grad(op)(hyb.Tensor(XS))
    assert "returned a gradient of shape (2,) for input 0 of shape (3,)" in str(e.value)


def test_derived_gradient_of_a_hybrid_op():
    op = Custom(mul)
    a, b = np.array([1.0, 2.0, 3.0], F32), np.array([4.0, 5.0, 6.0], F32)
    da, db = hyb.grad(lambda a, b: op(a, b).sum(), grad_position=(0, 1))(hyb.Tensor(a), hyb.Tensor(b))
    np.testing.assert_allclose(da.asnumpy(), b)
    np.testing.assert_allclose(db.asnumpy(), a)
    value, dx = hyb.value_and_grad(Custom(square))(hyb.Tensor(XS))
    np.testing.assert_allclose(value.asnumpy(), XS * XS)
    np.testing.assert_allclose(dx.asnumpy(), 2 * XS)


def test_derived_gradient_with_attributes_and_scalars():
    x = hyb.Tensor(np.array([1.0, 2.0], F32))
    op = Custom(scale, reg_info=attr_info(value=3.0))
    np.testing.assert_allclose(hyb.grad(lambda x: op(x).sum())(x).asnumpy(), [3.0, 3.0])
    plain = Custom(scale)
    np.testing.assert_allclose(hyb.grad(lambda x: plain(x, 5.0).sum())(x).asnumpy(), [5.0, 5.0])


def test_derived_gradient_of_several_outputs():
    op = Custom(sum_and_prod)
    a, b = np.array([1.0, 2.0], F32), np.array([3.0, 5.0], F32)

    def f(a, b):
        s, p = op(a, b)
        return (s * 2 + p).sum()

    da, db = hyb.grad(f, grad_position=(0, 1))(hyb.Tensor(a), hyb.Tensor(b))
    np.testing.assert_allclose(da.asnumpy(), 2 + b)
    np.testing.assert_allclose(db.asnumpy(), 2 + a)


def pick(x, idx):
    y = output_tensor(idx.shape, x.dtype)
    for i in range(idx.shape[0]):
        y[i] = x[idx[i]]
    return y


def test_derived_gradient_with_an_integer_input():
    op = Custom(pick)
    x, idx = np.array([1.0, 2.0, 3.0], F32), np.array([2, 0, 2, 2], np.int64)
    dx = hyb.grad(lambda x, idx: op(x, idx).sum())(hyb.Tensor(x), hyb.Tensor(idx))
    np.testing.assert_array_equal(dx.asnumpy(), [1.0, 0.0, 3.0])


def test_derived_gradient_of_a_cell_weight():
    class Net(hyb.nn.Cell):
        def __init__(self):
            super().__init__()
            self.w = hyb.Parameter(hyb.Tensor(np.array([2.0, 3.0, 4.0], F32)), name="w")
            self.op = Custom(mul)

        def construct(self, x):
            return self.op(x, self.w).sum()

    net = Net()
    (gw,) = hyb.grad(net, grad_position=None, weights=net.trainable_params())(hyb.Tensor(XS))
    np.testing.assert_allclose(gw.asnumpy(), XS)


@pytest.mark.parametrize("kind", ["pyfunc", "aot"])
def test_pyfunc_and_aot_without_bprop_are_not_differentiable(kind, tmp_path):
    if kind == "pyfunc":
        op = Custom(lambda x: x * x, func_type="pyfunc")
    else:
        if shutil.which("g++") is None:
            pytest.skip("needs g++")
        so = build(tmp_path, "add")
        sq = Custom(f"{so}:CustomAdd", out_shape=lambda x, _: x, out_dtype=lambda x, _: x, func_type="aot")
        op = lambda x: sq(x, x)  # noqa: E731
    x = hyb.Tensor(XS)
    op(x)  # the forward runs
    with pytest.raises(hyb.HybridUnsupportedError) as e:
        hyb.grad(op)(x)
    assert f'(func_type="{kind}") has no bprop, and hyb derives gradients only for hybrid kernels' in str(e.value)


def test_forward_with_a_parameter_does_not_need_a_bprop():
    p = hyb.Parameter(hyb.Tensor(XS))
    out = Custom(lambda x: x * 2, func_type="pyfunc")(p)
    np.testing.assert_array_equal(out.asnumpy(), 2 * XS)


def test_ops_exports():
    assert ops.GradOperation is hyb.autograd.GradOperation
    assert hyb.ops.Custom is Custom and hyb.ops.CustomRegOp is CustomRegOp
    assert hyb.ops.DataType is DataType and hyb.ops.custom_info_register is custom_info_register


# ================================================================== the seeds' examples
# What the seeds say each example prints.
ADD_OUTPUT = "[[2. 2.]\n [4. 4.]]\n"
GRAD_OUTPUT = "[ 2.  8. 18.]\n"


def run_example(name, cwd=None):
    # The checkout's hyb, not an installed one: a script's own directory comes first on sys.path.
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT)] + [p for p in [os.environ.get("PYTHONPATH")] if p]))
    proc = subprocess.run([sys.executable, str(SEEDS / name)], capture_output=True, text=True, cwd=cwd or ROOT,
                          timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr
    return proc


@pytest.mark.parametrize("name", ["custom_akg.py", "custom_pyfunc.py"])
def test_seed_add_examples(name):
    assert run_example(name).stdout == ADD_OUTPUT


@needs_gxx
def test_seed_aot_add_example(tmp_path):
    build(tmp_path, "add")
    assert run_example("custom_aot.py", cwd=tmp_path).stdout == ADD_OUTPUT


@pytest.mark.parametrize("name", ["grad_bprop.py", "grad_bprop_sens.py", "grad_bprop_pyfunc.py"])
def test_seed_grad_examples(name):
    proc = run_example(name)
    assert proc.stdout == GRAD_OUTPUT
    if name != "grad_bprop_pyfunc.py":
        # the seeds' forward kernel reads its own output: hyb says so
        assert "`y` is read before anything writes it" in proc.stderr


def test_derived_gradient_example():
    assert run_example("grad_derived.py").stdout == GRAD_OUTPUT * 2


def _numbers(text):
    return [float(v) for v in re.findall(r"\d+\.\d*", text)]


def _bools(text):
    return re.findall(r"True|False", text)


@needs_gxx
def test_seed_dropout_example():
    out = run_example("dropout_aot.py").stdout
    # The seed shows: output : [[[[2.  2.  2.] [2.  2.  2.]]]]  /  mask: [[[[True  True  True]  [True  True  True]]]]
    first, second = out.split("mask:")
    assert first.startswith("output: ") and _numbers(first) == [2.0] * 6
    assert _bools(second) == ["True"] * 6
    assert out == ("output:  [[[[2. 2. 2.]\n   [2. 2. 2.]]]]\n"
                   "mask:  [[[[ True  True  True]\n   [ True  True  True]]]]\n")
