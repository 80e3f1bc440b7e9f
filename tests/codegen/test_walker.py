"""The shared walk over the loop IR (hyb.codegen.walker): a back end is its hooks.

A third back end, written here in a few lines of Python on top of ``LoopWalker``, runs the loop
nests the compiler makes: its results must equal NumPy's, and the check sites the walk numbers
must be the ones the LLVM back end numbers (the walk, not the back end, decides them).
"""
from __future__ import annotations

import operator

import numpy as np
import pytest

import hyb
from hyb.codegen import llvm as llvm_codegen
from hyb.codegen.walker import LoopWalker
from hyb.dsl import tir, types

SRC = '''def mm(a, b):
    c = output_tensor((a.shape[0], b.shape[1]), a.dtype)
    for i in range(a.shape[0]):
        for j in range(b.shape[1]):
            acc = 0.0
            for k in range(a.shape[1]):
                acc += a[i, k] * b[k, j]
            c[i, j] = acc
    return c

def gather(a, idx):
    c = output_tensor(idx.shape, a.dtype)
    for i in range(idx.shape[0]):
        if idx[i] >= 0:
            c[i] = a[idx[i]] * 2.0
        else:
            c[i] = -1.0
    return c

def tri(a):
    c = output_tensor(a.shape, a.dtype)
    for i in range(a.shape[0]):
        for j in range(a.shape[1]):
            if j <= i:
                c[i, j] = a[i, j]
            else:
                c[i, j] = 0.0
    return c
'''

_BIN = {"+": operator.add, "-": operator.sub, "*": operator.mul, "/": operator.truediv}
_CMP = {"<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge, "==": operator.eq,
        "!=": operator.ne}
_LOOP = {"add": operator.add, "sub": operator.sub, "mul": operator.mul, "fdiv_q": operator.floordiv,
         "eq": operator.eq, "le": operator.le, "lt": operator.lt, "ge": operator.ge, "gt": operator.gt,
         "and": lambda a, b: a and b, "or": lambda a, b: a or b, "min": min, "max": max}


class OutOfBounds(Exception):
    pass


class PythonBackEnd(LoopWalker):
    """Runs the walk at once: loops are Python loops, an address is (flat buffer, offset)."""

    def __init__(self, nest, buffers: dict):
        super().__init__(nest)
        self.buffers = buffers
        self.loopvars: dict = {}
        self.site_of: dict = {}

    def check_site(self, t, node):
        # This back end walks a statement each time it runs it: a subscript keeps the number the
        # first walk over it gave (a compiling back end walks each once).
        key = id(node)
        if key not in self.site_of:
            self.site_of[key] = super().check_site(t, node)
        return self.site_of[key]

    def for_loop(self, s):
        self.loopvars[s.var] = self.lexpr(s.init)
        while self.lexpr(s.cond):
            self.block(s.body)
            self.loopvars[s.var] += s.step

    def branch(self, cond, then, orelse=None):
        if cond:
            then()
        elif orelse is not None:
            orelse()

    def loop_int(self, value):
        return value

    def loop_var(self, name):
        return self.loopvars[name]

    def loop_op(self, op, args):
        if op == "neg":
            return -args[0]
        if op == "select":
            return args[1] if args[0] else args[2]
        f = _LOOP[op]
        return f(*args) if op in ("min", "max") else f(args[0], args[1])

    def bind_statement(self, st, call, body):
        self.env = {v: self.lexpr(a) for v, a in zip(st.iters, call.args)}
        body()

    def tir_loop_emit(self, s, start, stop, body):
        v = start
        while (v < stop) if s.step > 0 else (v > stop):
            self.env[s.var] = v
            body()
            v += s.step

    def memory_value(self, t, value):
        return value

    def store_value(self, address, value):
        buf, at = address
        buf[at] = value

    def scalar_ref(self, tensor):
        return self.buffers[tensor], 0

    def check_index(self, v, dim, axis, site):
        if not 0 <= v < dim:
            raise OutOfBounds(site, v, axis)
        return v

    def scale_index(self, v, stride):
        return v * stride

    def add_index(self, flat, term):
        return flat + term

    def element(self, tensor, flat):
        return self.buffers[tensor], 0 if flat is None else flat

    def to_index(self, v, dtype):
        return int(v)

    def expr(self, e):
        if isinstance(e, tir.Const):
            return np.dtype(types.concrete(e.dtype)).type(e.value)
        if isinstance(e, tir.Var):
            return self.env[e.name]
        if isinstance(e, tir.Load):
            buf, at = self.address(e.tensor, e.indices, e)
            return buf[at]
        if isinstance(e, tir.Bin):
            return _BIN[e.op](self.expr(e.a), self.expr(e.b))
        if isinstance(e, tir.Cmp):
            return _CMP[e.op](self.expr(e.a), self.expr(e.b))
        if isinstance(e, tir.Unary):
            return (not self.expr(e.a)) if e.op == "not" else -self.expr(e.a)
        if isinstance(e, tir.Cast):
            return np.dtype(types.concrete(e.dtype)).type(self.expr(e.a))
        raise NotImplementedError(type(e).__name__)


def run(kernel, *args):
    """The kernel's loop nest run by PythonBackEnd on ``args``; returns its outputs."""
    ck = kernel.compile(*args)
    nest = ck.middle.code  # the legalised nest every back end renders
    k = nest.kernel
    buffers = {}
    for name, value in zip(k.inputs, args):
        buffers[name] = np.ascontiguousarray(value).reshape(-1)
    for t in k.tensors.values():
        if t.name not in buffers:
            buffers[t.name] = np.zeros(max(1, t.size), dtype=types.concrete(t.dtype))
    walker = PythonBackEnd(nest, buffers)
    walker.block(nest.body)
    outs = [buffers[n][:k.tensors[n].size].reshape(k.tensors[n].shape) for n in k.outputs]
    return outs, walker, ck


@pytest.fixture(scope="module")
def mod():
    return hyb.compile_source(SRC, shapes="specialise")  # (this back end knows constant shapes only)


@pytest.mark.parametrize("shape", [(1, 1, 1), (3, 5, 2), (17, 9, 33)])
def test_a_back_end_made_of_hooks_runs_matmul(mod, shape):
    m, k, n = shape
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal((m, k)), rng.standard_normal((k, n))
    (c,), _, _ = run(mod.mm, a, b)
    np.testing.assert_allclose(c, a @ b, rtol=1e-12, atol=1e-12)


def test_branches_and_guards_follow_the_kernel(mod):
    a = np.arange(36, dtype=np.float32).reshape(6, 6)
    (c,), _, _ = run(mod.tri, a)
    np.testing.assert_array_equal(c, np.tril(a))


def test_check_sites_are_the_walks_and_match_llvms(mod):
    a = np.arange(5, dtype=np.float64)
    idx = np.array([4, -1, 0, 2], dtype=np.int64)
    (c,), walker, ck = run(mod.gather, a, idx)
    np.testing.assert_array_equal(c, [8.0, -1.0, 0.0, 4.0])
    generated = llvm_codegen.generate_ir(ck.middle.code, llvm_codegen.Options())
    assert walker.sites, "the data-dependent subscript a[idx[i]] is checked at run time"
    assert walker.sites == generated.sites
    assert [s.tensor for s in walker.sites] == ["a"]


def test_a_failed_check_names_its_site_index_and_axis(mod):
    a = np.arange(5, dtype=np.float64)
    with pytest.raises(OutOfBounds) as info:
        run(mod.gather, a, np.array([1, 7], dtype=np.int64))
    assert info.value.args == (1, 7, 0)
    with pytest.raises(hyb.HybridIndexError):
        mod.gather(a, np.array([1, 7], dtype=np.int64))
