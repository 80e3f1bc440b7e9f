# MindSpore's test_dropout_aicpu.py ("Custom operators (based on Custom)", r1.6) as an aot
# operator for the CPU, `mindspore` replaced by `hyb`.  Prints
# output:  [[[[2. 2. 2.]
#    [2. 2. 2.]]]]
# mask:  [[[[ True  True  True]
#    [ True  True  True]]]]
#
# hyb compiles the kernel's source, dropout2d.cc (next to this script), on first use and caches it.
#
# Differences from the seed:
# - func_type="aot" and target "CPU": aicpu operators run on Ascend hardware, which hyb does not
#   target.  An aot library cannot be decorated, so the operator information is passed as
#   reg_info (the seeds' rule), and the implementation is "./dropout2d.cc:Dropout2D".
# - The "cust_aicpu" attribute (the name of an Ascend kernel library) becomes "seed", the seed
#   of the kernel's random generator.  Seed 68 keeps all six elements, which is what the seed
#   document shows (its dropout is random, so its output varies from run to run).
import numpy as np
from hyb import Tensor
import hyb.context as context
import hyb.nn as nn
import hyb.ops as ops
from hyb import dtype as mstype
from hyb.ops import CustomRegOp, DataType

context.set_context(mode=context.GRAPH_MODE, device_target="CPU")

# Operator information
dropout2d_op_info = CustomRegOp("Dropout2D") \
    .fusion_type("OPAQUE") \
    .input(0, "x", "required") \
    .output(0, "y", "required") \
    .output(1, "mask", "required") \
    .attr("keep_prob", "required", "float") \
    .attr("seed", "required", "int", "0") \
    .dtype_format(DataType.BOOL_Default, DataType.BOOL_Default, DataType.BOOL_Default) \
    .dtype_format(DataType.I8_Default, DataType.I8_Default, DataType.BOOL_Default) \
    .dtype_format(DataType.I16_Default, DataType.I16_Default, DataType.BOOL_Default) \
    .dtype_format(DataType.I32_Default, DataType.I32_Default, DataType.BOOL_Default) \
    .dtype_format(DataType.I64_Default, DataType.I64_Default, DataType.BOOL_Default) \
    .dtype_format(DataType.U8_Default, DataType.U8_Default, DataType.BOOL_Default) \
    .dtype_format(DataType.U16_Default, DataType.U16_Default, DataType.BOOL_Default) \
    .dtype_format(DataType.U32_Default, DataType.U32_Default, DataType.BOOL_Default) \
    .dtype_format(DataType.U64_Default, DataType.U64_Default, DataType.BOOL_Default) \
    .dtype_format(DataType.F16_Default, DataType.F16_Default, DataType.BOOL_Default) \
    .dtype_format(DataType.F32_Default, DataType.F32_Default, DataType.BOOL_Default) \
    .dtype_format(DataType.F64_Default, DataType.F64_Default, DataType.BOOL_Default) \
    .target("CPU") \
    .get_op_info()

# Network with the custom operator
class NetDropout2D(nn.Cell):
    def __init__(self, keep_prob=0.5):
        super(NetDropout2D, self).__init__()
        self.op = ops.Custom("./dropout2d.cc:Dropout2D", out_shape=lambda x, _, seed: (x, x), \
                              out_dtype=lambda x, _, seed: (x, mstype.bool_), func_type="aot",
                              reg_info=dropout2d_op_info)
        self.keep_prob = keep_prob
        self.seed = 68

    def construct(self, inputs):
        return self.op(inputs, self.keep_prob, self.seed)

if __name__ == "__main__":
    # Define the custom operator
    input_tensor = Tensor(np.ones([1, 1, 2, 3]), mstype.float32)
    dropout2d_nn = NetDropout2D(0.5)
    output, mask = dropout2d_nn(input_tensor)
    print("output: ", output)
    print("mask: ", mask)
