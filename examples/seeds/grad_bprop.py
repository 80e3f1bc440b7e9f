# MindSpore's test_grad.py (the bprop example of "Advanced Usage of Custom Operators", r2.0 and
# r2.3), with `mindspore` replaced by `hyb`.  Prints [ 2.  8. 18.].
#
# Differences from the seed: device_target is "CPU" (the seed says "GPU"; hyb's CUDA back end
# is not built).  The forward kernel is kept as the seed writes it, `y[i0] * y[i0]` (it
# reads the output, not x), so hyb warns on stderr that `y` is read before anything writes it;
# the printed gradient comes from square_grad, which reads x.
import numpy as np
import hyb as ms
from hyb.nn import Cell
import hyb.ops as ops

ms.set_context(mode=ms.GRAPH_MODE, device_target="CPU")

# Forward computation of custom operator
def square(x):
    y = output_tensor(x.shape, x.dtype)
    for i0 in range(x.shape[0]):
        y[i0] = y[i0] * y[i0]
    return y

# Backward computation of custom operator
def square_grad(x, dout):
    dx = output_tensor(x.shape, x.dtype)
    for i0 in range(x.shape[0]):
        dx[i0] = 2.0 * x[i0]
    for i0 in range(x.shape[0]):
        dx[i0] = dx[i0] * dout[i0]
    return dx

# Backpropagation function
def bprop():
    op = ops.Custom(square_grad, lambda x, _: x, lambda x, _: x, func_type="akg")

    def custom_bprop(x, out, dout):
        dx = op(x, dout)
        return (dx,)

    return custom_bprop

class Net(Cell):
    def __init__(self):
        super(Net, self).__init__()
        # Define a custom operator of akg type and provide a backpropagation function
        self.op = ops.Custom(square, lambda x: x, lambda x: x, bprop=bprop(), func_type="akg")

    def construct(self, x):
        return self.op(x)

if __name__ == "__main__":
    x = np.array([1.0, 4.0, 9.0]).astype(np.float32)
    dx = ms.grad(Net())(ms.Tensor(x))
    print(dx)
