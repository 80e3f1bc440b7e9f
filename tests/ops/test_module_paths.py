"""The module paths MindSpore's custom-operator tests and documents import from resolve under
hyb, with the names they import."""
import importlib

import numpy as np
import pytest

import hyb

PATHS = {
    "hyb.ops": ["Custom", "CustomRegOp", "DataType", "custom_info_register", "ms_kernel", "kernel"],
    "hyb.ops.operations": ["Custom", "Add"],
    "hyb.ops.operations.custom_ops": ["Custom", "CustomRegOp", "DataType", "custom_op_info_register",
                                      "custom_info_register"],
    "hyb.ops.op_info_register": ["op_info_register", "TBERegOp", "AiCPURegOp", "AkgAscendRegOp", "AkgGpuRegOp",
                                 "DataType", "CustomRegOp"],
    "hyb.common": ["dtype"],
    "hyb.nn": ["Cell"],
}


@pytest.mark.parametrize("path", list(PATHS))
def test_module_paths_resolve(path):
    module = importlib.import_module(path)
    for name in PATHS[path]:
        assert hasattr(module, name), (path, name)


def test_device_registrations_register_nothing_and_custom_ones_do():
    from hyb.ops.op_info_register import DataType, TBERegOp, op_info_register
    from hyb.ops.operations.custom_ops import CustomRegOp, custom_op_info_register

    info = (TBERegOp("Square").fusion_type("ELEMWISE").async_flag(False).binfile_name("square.so")
            .input(0, "x", False, "required", "all").output(0, "y", False, "required", "all")
            .dtype_format(DataType.F32_Default, DataType.F32_Default).get_op_info())
    assert info["imply_type"] == "TBE" and info["calls"][0] == ("fusion_type", ("ELEMWISE",), {})

    def square(x):
        return x

    assert op_info_register(info)(square) is square and not hasattr(square, "reg_info")
    reg = CustomRegOp().input(0, "x").output(0, "y").dtype_format(DataType.F32_Default, DataType.F32_Default)
    assert custom_op_info_register(reg.target("CPU").get_op_info())(square).reg_info[0]["op_name"] == "Custom"
    assert op_info_register(reg)(square).reg_info

    def add(a, b):
        c = output_tensor(a.shape, a.dtype)  # noqa: F821 - the kernel language's maker
        for i in range(a.shape[0]):
            c[i] = a[i] + b[i]
        return c

    op = hyb.ops.operations.custom_ops.Custom(hyb.ops.ms_kernel(add), out_shape=lambda a, _: a,
                                              out_dtype=lambda a, _: a, func_type="hybrid")
    x = np.arange(3, dtype=np.float32)
    np.testing.assert_array_equal(op(hyb.Tensor(x), hyb.Tensor(x)).asnumpy(), x * 2)
