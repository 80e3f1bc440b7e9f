# MindSpore's test_custom_akg.py ("Custom operators (based on Custom)", r1.6), with `mindspore`
# replaced by `hyb`.  Prints
# [[2. 2.]
#  [4. 4.]]
#
# Difference from the seed: device_target is "CPU" (the seed says "GPU"; hyb's CUDA back end
# is not built, and on the CPU hyb compiles the kernel with LLVM).
import numpy as np
from hyb import context, Tensor
import hyb.ops as ops

context.set_context(device_target="CPU")

# Operator implementation, Hybrid DSL
def add(a, b):
    c = output_tensor(a.shape, a.dtype)
    for i0 in range(a.shape[0]):
        for i1 in range(a.shape[1]):
            c[i0, i1] = a[i0, i1] + b[i0, i1]
    return c

if __name__ == "__main__":
    # Define a custom operator of akg type
    op = ops.Custom(add, out_shape=lambda x, _: x, out_dtype=lambda x, _: x, func_type="akg")

    x0 = np.array([[0.0, 0.0], [1.0, 1.0]]).astype(np.float32)
    x1 = np.array([[2.0, 2.0], [3.0, 3.0]]).astype(np.float32)
    output = op(Tensor(x0), Tensor(x1))
    print(output)
