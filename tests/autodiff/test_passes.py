"""The passes of reverse mode one at a time (hyb/autodiff/reverse.py): normalise -> activity ->
save plan -> emission, each a function from frozen records to a new frozen record."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import hyb

from hyb.autodiff import derive
from hyb.autodiff.reverse import (Activity, Normalised, SavePlan, activity, emit, normalise, plan_saves, reverse)
from hyb.dsl import parser
from hyb.dsl import unparse
from hyb.dsl import ast as syntax
from hyb.errors import HybridUnsupportedError

# x is overwritten in place in a time loop (its old values go to a tape); `unused` and the second
# `s` are computed from active values but reach no output; `idx` is an integer input.
SRC = """def k(x, w, idx):
    y = output_tensor(x.shape, x.dtype)
    n = x.shape[0]
    unused = allocate(x.shape, x.dtype)
    for t in range(3):
        for i in range(n):
            x[i] = sin(x[i]) * w[i]
    for i in range(n):
        unused[i] = x[i] * 2.0
    for i in range(n):
        s = x[i] * x[i]
        y[idx[i]] = s + 1.0
    for i in range(n):
        s = w[i]
    return y
"""


@pytest.fixture
def records():
    mod = parser.parse_string(SRC, "passes.hyb")
    nz = normalise(mod.kernels["k"], mod)
    act = activity(nz, frozenset({"idx"}))
    plan = plan_saves(nz, act)
    return mod, nz, act, plan


def store_to(nz, tensor):
    return [s for s in nz.assigns if isinstance(s.target, syntax.Subscript) and s.target.value.id == tensor]


def test_normalise_gives_one_declaration_per_name(records):
    mod, nz, _, _ = records
    assert isinstance(nz, Normalised)
    assert nz.params == ("x", "w", "idx") and nz.tensor_params == ("x", "w", "idx")
    assert nz.scalar_params == frozenset()
    assert nz.outputs == ("y",)
    assert set(nz.tensors) == {"x", "w", "idx", "y", "unused"}
    assert nz.tensors["y"].kind == "output" and nz.tensors["unused"].kind == "temp" and nz.tensors["x"].kind == "param"
    # The loop variable `i` of the later loops and the second `s` are renamed.
    assert list(nz.loops) == ["t", "i", "i_2", "i_3", "i_4"]
    assert list(nz.scalars) == ["n", "s", "s_2"]
    assert nz.scalars["n"].int_typed and not nz.scalars["s"].int_typed
    # Statements are numbered in program order; the assignments are listed in that order.
    firsts = [nz.info[id(s)].first for s in nz.assigns]
    assert firsts == sorted(firsts) and len(nz.assigns) == 6
    # Every name of the kernel and the renamed ones are taken.
    assert {"x", "w", "idx", "y", "n", "s", "s_2", "i_4", "sin"} <= nz.used
    # The kernel as written is left alone.
    assert "i_2" not in unparse.kernel(mod.kernels["k"])


def test_activity_keeps_the_useful_names_that_depend_on_a_float_input(records):
    _, nz, act, _ = records
    assert isinstance(act, Activity)
    assert act.active_t == frozenset({"x", "w", "y"})  # not idx (inactive), not unused (reaches no output)
    assert act.active_s == frozenset({"s"})  # s_2 = w[i] is active but reaches no output
    everything = activity(nz)
    assert "idx" in everything.active_t


def test_save_plan_tapes_the_in_place_store(records):
    _, nz, act, plan = records
    assert isinstance(plan, SavePlan)
    (store,) = store_to(nz, "x")
    assert plan.taped == frozenset({id(store)})
    assert plan.restore == frozenset({"x"})
    assert {"x", "w", "idx", "n"} <= plan.needed and "unused" not in plan.needed
    assert not plan.snap and not plan.entry and not plan.cond_snap and not plan.value_tape
    # The chain rule of each active assignment whose value is active; not that of `unused`.
    assert id(store) in plan.chains
    assert id(store_to(nz, "unused")[0]) not in plan.chains
    assert plan.used >= nz.used


def test_save_plan_copies_a_scalar_assigned_again():
    src = ("def k(a):\n    c = output_tensor(a.shape, a.dtype)\n    for i in range(a.shape[0]):\n"
           "        v = a[i] * a[i]\n        v = sin(v)\n        c[i] = v * a[i]\n    return c\n")
    mod = parser.parse_string(src, "snap.hyb")
    nz = normalise(mod.kernels["k"], mod)
    plan = plan_saves(nz, activity(nz))
    second = [s for s in nz.assigns if isinstance(s.target, syntax.Name)][1]
    assert dict(plan.snap) == {id(second): "v_old"}
    assert "v_old" in plan.used and "v_old" not in nz.used


def test_emit_writes_the_gradient_with_the_tape(records):
    _, nz, act, plan = records
    g = emit(nz, act, plan)
    assert g.grads == [True, True, False]
    assert g.outputs == ["y"]
    assert [(t[0], t[3]) for t in g.tapes] == [("x_tape", "old values of `x`")]
    text = unparse.kernel(g.kdef)
    assert "def k_grad(x, w, idx, dout):" in text
    assert "x_tape[t, i] = x[i]" in text and "x[i] = x_tape[t, i]" in text
    # A name the kernel uses is not made up again: `idx` is taken, the copy loop gets `idx_2`.
    assert "for idx_2 in grid(d_y.shape):" in text
    assert "unused" not in text and "s_2" not in text


def test_emit_leaves_the_records_alone(records):
    _, nz, act, plan = records
    before = (dict(nz.tensors), nz.assigns, nz.used, act.active_t, dict(plan.chains), plan.used)
    first = unparse.kernel(emit(nz, act, plan).kdef)
    second = unparse.kernel(emit(nz, act, plan, with_outputs=False).kdef)
    assert first == second
    assert (dict(nz.tensors), nz.assigns, nz.used, act.active_t, dict(plan.chains), plan.used) == before
    assert "y_out" in unparse.kernel(emit(nz, act, plan, with_outputs=True).kdef)


def test_the_driver_runs_the_passes_in_order(records):
    mod, nz, act, plan = records
    g = reverse(mod.kernels["k"], mod, frozenset({"idx"}))
    assert unparse.kernel(g.kdef) == unparse.kernel(emit(nz, act, plan).kdef)
    assert derive(mod.kernels["k"], mod, {"idx"}).source.endswith(unparse.kernel(g.kdef))


@pytest.mark.parametrize("field", ["record", "mapping"])
def test_records_are_frozen(records, field):
    _, nz, act, plan = records
    if field == "record":
        for rec, name in ((nz, "assigns"), (act, "active_t"), (plan, "taped")):
            with pytest.raises(dataclasses.FrozenInstanceError):
                setattr(rec, name, None)
    else:
        for mapping in (nz.tensors, nz.scalars, nz.loops, nz.info, nz.blocks, plan.chains, plan.snap, plan.entry):
            with pytest.raises(TypeError):
                mapping["new"] = None


def test_normalise_needs_the_rank_of_a_grid_loop():
    src = "def k(a):\n    c = output_tensor(a.shape, a.dtype)\n    for p in grid(c.shape):\n        c[p] = a[p]\n    return c\n"
    mod = parser.parse_string(src, "grid.hyb")
    with pytest.raises(HybridUnsupportedError) as info:
        normalise(mod.kernels["k"], mod)
    assert info.value.message == ("the gradient of a kernel with a `grid` loop is derived for the ranks of its "
                                  "arguments, and none were given")
    assert (info.value.span.line, info.value.span.col) == (3, 5)
    # with the ranks the checker found, the loop is one `range` loop per dimension
    nz = normalise(mod.kernels["k"], mod, {(3, 5): 2})
    loops = list(nz.loops.values())
    assert [lp.kind for lp in loops] == ["range", "range"]
    assert [unparse.expr(lp.hi) for lp in loops] == ["a.shape[0]", "a.shape[1]"]
    store = nz.assigns[0]
    assert unparse.expr(store.target) == f"c[{loops[0].var}, {loops[1].var}]"


def test_no_active_input_is_refused_by_the_driver():
    src = "def k(a):\n    c = output_tensor(a.shape, a.dtype)\n    for i in range(a.shape[0]):\n        c[i] = a[i]\n    return c\n"
    mod = parser.parse_string(src, "int.hyb")
    nz = normalise(mod.kernels["k"], mod)
    assert activity(nz, frozenset({"a"})).active_t == frozenset()
    with pytest.raises(HybridUnsupportedError, match="no input of `k` has a gradient"):
        reverse(mod.kernels["k"], mod, frozenset({"a"}))


def test_a_scalar_parameter_bounds_a_taped_loop():
    # a size parameter is fixed for the call: the tape it sizes is allocated for its value
    src = '''
def scan(x, n):
    out = output_tensor((n,), x.dtype)
    for i in range(n):
        out[i] = x[i]
    for i in range(n - 1):
        out[i + 1] = out[i + 1] * x[i]
    return out
'''
    k = hyb.compile_source(src, "scan.hyb").scan
    x = np.array([1.5, 2.0, 3.0, 0.5])
    got, none = k.grad()(x, 4, np.ones(4))
    assert none is None and "allocate((max(0, n - 1),), out.dtype)" in k.grad().source
    eps = 1e-6
    fd = [(k(x + eps * e, 4).sum() - k(x - eps * e, 4).sum()) / (2 * eps) for e in np.eye(4)]
    np.testing.assert_allclose(got, fd, rtol=1e-6)
