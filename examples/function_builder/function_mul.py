# The seed's MyNet with its multiply written as a Python hyb.Function instead of C++: forward
# runs a hybrid kernel (compiled by hyb) and saves what backward needs in ctx; backward runs the
# same kernel on the incoming gradient.  Vectors this time, and the output summed.  Prints
#   out: 64.0
#   grads[0]: (Tensor(shape=[3], dtype=Float32, value= [ 8. 10. 12.]), Tensor(shape=[3], dtype=Float32, value= [2. 4. 6.]))
#   grads[1]: (Tensor(shape=[], dtype=Float32, value= 32.0),)
import numpy as np
import hyb
from hyb import Tensor, Parameter, nn


@hyb.hybrid
def mul(a, b):
    c = output_tensor(a.shape, a.dtype)
    for i in range(a.shape[0]):
        c[i] = a[i] * b[i]
    return c


class Mul(hyb.Function):
    """x * y, broadcasting y to x's shape (y may be a 0-d Parameter)."""

    @staticmethod
    def forward(ctx, x, y):
        yb = np.ascontiguousarray(np.broadcast_to(y.asnumpy(), x.shape))
        # Save only what the gradients asked for need: dx needs y, dy needs x.
        ctx.save_for_backward(yb if ctx.needs_input_grad[0] else None, x if ctx.needs_input_grad[1] else None)
        return mul(x, yb)                 # a NumPy array: apply returns it as a hyb.Tensor

    @staticmethod
    def backward(ctx, dout):
        yb, x = ctx.saved_tensors
        dx = mul(dout, yb) if ctx.needs_input_grad[0] else None
        dy = mul(dout, x) if ctx.needs_input_grad[1] else None   # x's shape: summed back to y's
        return dx, dy


class MyNet(nn.Cell):
    def __init__(self):
        super().__init__()
        self.p = Parameter(2.0, requires_grad=True)

    def construct(self, x, y):
        z = Mul.apply(x, y)
        return Mul.apply(z, self.p).sum()


x = Tensor([1.0, 2.0, 3.0])
y = Tensor([4.0, 5.0, 6.0])
net = MyNet()
grad_op = hyb.value_and_grad(net, grad_position=(0, 1), weights=net.trainable_params())
out, grads = grad_op(x, y)
print('out:', out)
print('grads[0]:', grads[0])
print('grads[1]:', grads[1])
