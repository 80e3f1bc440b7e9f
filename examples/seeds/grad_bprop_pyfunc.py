# MindSpore's test_grad.py as "Advance Usage of Custom Operators" (r2.5) writes it: the bprop
# example with pyfunc operators, `mindspore` replaced by `hyb`.  Prints [ 2.  8. 18.].
#
# Difference from the seed: MindSpore 2.5 sets the device with ms.set_device(device_target=...);
# hyb keeps the device target in its context: hyb.set_context(device_target="CPU").
import numpy as np
import hyb as ms
from hyb.nn import Cell
import hyb.ops as ops

ms.set_context(mode=ms.GRAPH_MODE)
ms.set_context(device_target="CPU")

# Forward computation of custom operator
def square(x):
    return x * x

# Backward computation of custom operator
def square_grad(x, dout):
    dx = 2.0 * x * dout
    return dx

# Backpropagation function
def bprop():
    op = ops.Custom(square_grad, lambda x, _: x, lambda x, _: x, func_type="pyfunc")

    def custom_bprop(x, out, dout):
        dx = op(x, dout)
        return (dx,)

    return custom_bprop

class Net(Cell):
    def __init__(self):
        super(Net, self).__init__()
        # Define a custom operator of pyfunc type and provide a backpropagation function
        self.op = ops.Custom(square, lambda x: x, lambda x: x, bprop=bprop(), func_type="pyfunc")

    def construct(self, x):
        return self.op(x)

if __name__ == "__main__":
    x = np.array([1.0, 4.0, 9.0]).astype(np.float32)
    dx = ms.grad(Net())(ms.Tensor(x))
    print(dx)
