"""A hyb kernel as a PyTorch operator, its backward derived by hyb.

`hyb.torch.op` registers `torch.ops.hyb.softmax` (and `softmax_grad`): CPU tensors go to the
compiled kernel without a copy, autograd runs `softmax.grad()`, and the operator passes
`torch.library.opcheck` and `torch.autograd.gradcheck`. Works under `torch.compile` too.

Run from the repository root with PyTorch installed (`pip install -e ".[torch]"`):
    python examples/frameworks/torch_op.py
Without PyTorch it says how to install it and exits with status 0.
"""
import sys

try:
    import torch
except ImportError as e:  # an optional framework: say which and how to get it, then stop cleanly
    print(f"torch_op.py needs PyTorch, which is not importable here ({e}). Install its CPU build with\n"
          "    pip install torch --index-url https://download.pytorch.org/whl/cpu")
    sys.exit(0)

import hyb  # noqa: E402
import hyb.torch  # noqa: E402


@hyb.hybrid
def softmax(x):
    out = output_tensor(x.shape, x.dtype)  # noqa: F821 - a name of the kernel language
    for i in range(x.shape[0]):
        m = x[i, 0]
        for j in range(1, x.shape[1]):
            m = max(m, x[i, j])
        s = x.dtype(0)
        for j in range(x.shape[1]):
            s += exp(x[i, j] - m)  # noqa: F821
        for j in range(x.shape[1]):
            out[i, j] = exp(x[i, j] - m) / s  # noqa: F821
    return out


op = hyb.torch.op(softmax)
print(op, "is torch.ops.hyb." + op.hyb_name)

x = torch.randn(8, 10, dtype=torch.float64, requires_grad=True)
y = op(x)
torch.testing.assert_close(y, torch.softmax(x, dim=1))
(y * torch.arange(10.0, dtype=torch.float64)).sum().backward()  # runs softmax.grad() through hyb
want = torch.autograd.grad((torch.softmax(x, 1) * torch.arange(10.0, dtype=torch.float64)).sum(), x)[0]
torch.testing.assert_close(x.grad, want)

assert torch.autograd.gradcheck(op, (x,))
print(torch.library.opcheck(op, (x,)))

# In a model, compiled: the operator is opaque to torch.compile, its fake implementation gives shapes.
model = torch.nn.Sequential(torch.nn.Linear(10, 10))
loss = torch.compile(lambda v: op(model(v)).square().sum())
loss(torch.randn(4, 10)).backward()
print("weight gradient:", tuple(model[0].weight.grad.shape))
print("hyb softmax inside PyTorch: forward and gradient match torch.softmax")
