# The square network of test_grad.py without a bprop: hyb derives the gradient kernel from
# `square` itself (Kernel.grad(), see the README's "Gradients").  Prints [ 2.  8. 18.], through
# hyb.grad and through GradOperation(sens_param=True).
#
# Differences from the seed: no bprop, and the forward kernel reads x (`x[i0] * x[i0]`); the
# seed's `y[i0] * y[i0]` reads the zeroed output, whose derivative is 0.
import numpy as np
import hyb as ms
from hyb.nn import Cell
import hyb.ops as ops

ms.set_context(mode=ms.GRAPH_MODE, device_target="CPU")

# Forward computation of custom operator
def square(x):
    y = output_tensor(x.shape, x.dtype)
    for i0 in range(x.shape[0]):
        y[i0] = x[i0] * x[i0]
    return y

class Net(Cell):
    def __init__(self):
        super(Net, self).__init__()
        # A custom operator of akg type without a backpropagation function
        self.op = ops.Custom(square, lambda x: x, lambda x: x, func_type="akg")

    def construct(self, x):
        return self.op(x)

if __name__ == "__main__":
    x = np.array([1.0, 4.0, 9.0]).astype(np.float32)
    dx = ms.grad(Net())(ms.Tensor(x))
    print(dx)
    sens = np.array([1.0, 1.0, 1.0]).astype(np.float32)
    dx = ops.GradOperation(sens_param=True)(Net())(ms.Tensor(x), ms.Tensor(sens))
    print(dx)
