# MindSpore's test_custom_aot.py, CPU example ("Custom operators (based on Custom)", r1.6), with
# `mindspore` replaced by `hyb`.  Prints
# [[2. 2.]
#  [4. 4.]]
#
# Build the kernel first, in the directory you run this from (or next to this script):
#     g++ --shared -fPIC -o add.so add.cc
# add.cc is the seed's file, unchanged.
import numpy as np
from hyb import context, Tensor
import hyb.ops as ops

context.set_context(device_target="CPU")

if __name__ == "__main__":
    # Define a custom operator of aot type
    op = ops.Custom("./add.so:CustomAdd", out_shape=lambda x, _: x, out_dtype=lambda x, _: x, func_type="aot")

    x0 = np.array([[0.0, 0.0], [1.0, 1.0]]).astype(np.float32)
    x1 = np.array([[2.0, 2.0], [3.0, 3.0]]).astype(np.float32)
    output = op(Tensor(x0), Tensor(x1))
    print(output)
