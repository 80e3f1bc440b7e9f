"""A hyb kernel as a JAX function, its VJP derived by hyb.

`hyb.jax.op` wraps the kernel in a `jax.custom_vjp` whose forward and backward call hyb's compiled
kernels through `jax.pure_callback` (on the CPU). It works under `jax.jit`, `jax.grad` and
`jax.vmap`, and passes `jax.test_util.check_grads` (reverse mode).

Run from the repository root with JAX installed (`pip install -e ".[jax]"`):
    python examples/frameworks/jax_op.py
Without JAX it says how to install it and exits with status 0.
"""
import sys
from pathlib import Path

try:
    import jax
except ImportError as e:  # an optional framework: say which and how to get it, then stop cleanly
    print(f"jax_op.py needs JAX, which is not importable here ({e}). Install it (the CPU build) with\n"
          "    pip install jax")
    sys.exit(0)

jax.config.update("jax_enable_x64", True)  # float64, for the gradient check

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax.test_util import check_grads  # noqa: E402

import hyb  # noqa: E402
import hyb.jax  # noqa: E402

HERE = Path(__file__).resolve().parent
matmul = hyb.jax.op(hyb.load(HERE.parent / "matmul.hyb").matmul)


@hyb.hybrid
def axpy(alpha, x, y):
    z = output_tensor(x.shape, x.dtype)  # noqa: F821 - a name of the kernel language
    for i in range(x.shape[0]):
        z[i] = alpha * x[i] + y[i]
    return z


saxpy = hyb.jax.op(axpy)  # alpha is a number: it gets no gradient

rng = np.random.default_rng(0)
a, b = jnp.asarray(rng.standard_normal((5, 3))), jnp.asarray(rng.standard_normal((3, 4)))


@jax.jit
def loss(a, b):
    c = matmul(a, b)
    return jnp.sum(saxpy(2.0, c.ravel(), jnp.ones(c.size)) ** 2)


ga, gb = jax.jit(jax.grad(loss, argnums=(0, 1)))(a, b)
want = jax.grad(lambda a, b: jnp.sum((2.0 * (a @ b).ravel() + 1.0) ** 2), argnums=(0, 1))(a, b)
np.testing.assert_allclose(ga, want[0], rtol=1e-12)
np.testing.assert_allclose(gb, want[1], rtol=1e-12)

check_grads(matmul, (a, b), order=1, modes=("rev",))
print("batched:", jax.vmap(matmul)(jnp.stack([a, a]), jnp.stack([b, b])).shape)
print("hyb matmul and axpy inside JAX: jit, grad and vmap match jax.numpy")
