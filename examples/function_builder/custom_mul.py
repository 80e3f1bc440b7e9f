# The seed's MyNet ("CustomOpBuilder: Develop Forward and Backward Operators with the Function
# Interface", MindSpore r2.6), with `mindspore` replaced by `hyb`.  Prints
#   out: 12.0
#   grads[0]: (Tensor(shape=[], dtype=Float32, value= 6.0), Tensor(shape=[], dtype=Float32, value= 4.0))
#   grads[1]: (Tensor(shape=[], dtype=Float32, value= 6.0),)
#
# Differences from the seed: backend="CPU" (the seed says "Ascend"), and custom_src/function_ops.cpp
# multiplies with a C++ loop instead of aclnnMul.  hyb prints a 0-d float Tensor's value as NumPy
# does (`6.0`; MindSpore prints `6`).  The first run compiles the module (a few seconds); later
# runs load it from hyb's cache.
import numpy as np
import hyb as ms
from hyb import Tensor, Parameter, nn
from hyb.ops import CustomOpBuilder


class MyNet(nn.Cell):
    def __init__(self):
        super().__init__()
        self.p = Parameter(2.0, requires_grad=True)
        self.my_ops = CustomOpBuilder("my_ops", ['./custom_src/function_ops.cpp'], backend="CPU").load()

    def construct(self, x, y):
        z = self.my_ops.mul(x, y)
        return self.my_ops.mul(z, self.p)


x = Tensor(1.0, ms.float32) * 2
y = Tensor(1.0, ms.float32) * 3
net = MyNet()
grad_op = ms.value_and_grad(net, grad_position=(0, 1), weights=net.trainable_params())
out, grads = grad_op(x, y)
print('out:', out)
print('grads[0]:', grads[0])
print('grads[1]:', grads[1])
