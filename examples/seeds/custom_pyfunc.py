# MindSpore's test_custom_pyfunc.py ("Custom operators (based on Custom)", r1.6), with
# `mindspore` replaced by `hyb`.  Prints
# [[2. 2.]
#  [4. 4.]]
import numpy as np
from hyb import context, Tensor
import hyb.ops as ops

context.set_context(device_target="CPU")

def add(a, b):
    return a + b

if __name__ == "__main__":
    # Define a custom operator of pyfunc type
    op = ops.Custom(add, out_shape=lambda x, _: x, out_dtype=lambda x, _: x, func_type="pyfunc")

    x0 = np.array([[0.0, 0.0], [1.0, 1.0]]).astype(np.float32)
    x1 = np.array([[2.0, 2.0], [3.0, 3.0]]).astype(np.float32)
    output = op(Tensor(x0), Tensor(x1))
    print(output)
