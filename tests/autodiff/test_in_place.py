"""Gradients of kernels that write their results into arguments and return nothing, as C code is
written (llm.c's ``layernorm_forward(out, mean, rstd, inp, weight, bias)``): the kernel is the
function from every argument's value on entry to the written arguments' values on exit; its
gradient takes one gradient per written argument and gives one per argument, checked against
central finite differences."""
import numpy as np
import pytest

import hyb

SRC = '''
def layernorm_forward(out, mean, rstd, inp, weight, bias):
    for t in range(inp.shape[0]):
        m = 0.0
        for i in range(inp.shape[1]):
            m += inp[t, i]
        m = m / inp.shape[1]
        v = 0.0
        for i in range(inp.shape[1]):
            xshift = inp[t, i] - m
            v += xshift * xshift
        v = v / inp.shape[1]
        s = 1.0 / sqrt(v + 1e-5)
        for i in range(inp.shape[1]):
            out[t, i] = (s * (inp[t, i] - m)) * weight[i] + bias[i]
        mean[t] = m
        rstd[t] = s

def accumulate(acc, x):
    for i in range(x.shape[0]):
        for j in range(x.shape[1]):
            acc[i, j] += x[i, j] * x[i, j] * acc[i, j]
'''
MOD = hyb.compile_source(SRC, "inplace.hyb")


def run(kernel, args, written):
    copies = [a.copy() for a in args]
    kernel(*copies)
    return [copies[k] for k in written]


def fd(kernel, args, written, douts, eps=1e-6):
    def loss(a):
        return sum(float(np.sum(d * o)) for d, o in zip(douts, run(kernel, a, written)))
    grads = []
    for p, a in enumerate(args):
        g = np.zeros_like(a)
        for idx in np.ndindex(*a.shape):
            plus, minus = [x.copy() for x in args], [x.copy() for x in args]
            plus[p][idx] += eps
            minus[p][idx] -= eps
            g[idx] = (loss(plus) - loss(minus)) / (2 * eps)
        grads.append(g)
    return grads


@pytest.mark.parametrize("T, C", [(3, 5), (1, 1), (2, 8)])
def test_an_in_place_layernorm_has_the_gradient_of_the_function_it_computes(T, C):
    rng = np.random.default_rng(T * 10 + C)
    args = [rng.standard_normal((T, C)), rng.standard_normal(T), rng.standard_normal(T),
            rng.standard_normal((T, C)), rng.standard_normal(C), rng.standard_normal(C)]
    douts = [rng.standard_normal((T, C)), rng.standard_normal(T), rng.standard_normal(T)]
    g = MOD.layernorm_forward.grad()
    before = [a.copy() for a in args]
    got = g(*args, *douts)
    for a, b in zip(args, before):  # the gradient leaves its arguments alone
        np.testing.assert_array_equal(a, b)
    want = fd(MOD.layernorm_forward, args, [0, 1, 2], douts)
    assert len(got) == 6
    for k, (x, w) in enumerate(zip(got, want)):
        np.testing.assert_allclose(x, w, rtol=1e-5, atol=1e-6, err_msg=f"argument {k}")
    # out, mean and rstd are overwritten whole: their values on entry do not matter
    for k in range(3):
        np.testing.assert_array_equal(got[k], 0.0)


def test_an_argument_read_and_written_gets_the_gradient_of_its_value_on_entry():
    rng = np.random.default_rng(7)
    acc, x = rng.standard_normal((3, 4)), rng.standard_normal((3, 4))
    dout = rng.standard_normal((3, 4))
    g = MOD.accumulate.grad()
    got = g(acc, x, dout)
    want = fd(MOD.accumulate, [acc, x], [0], [dout])
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(got[0], dout * (1 + x * x), rtol=1e-12)
    assert "accumulate_grad(acc, x, dout)" in repr(g)
