"""The loop-nest stage and the marks alone: each returns a new LoopNest and leaves its input as it was."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import hyb
from hyb.runtime import pipeline
from hyb.schedule import astgen, deps, extract, loops, vector
from hyb.schedule.options import parse_options
from hyb.schedule.parallel import mark_original_parallel
from hyb.target import host_cpu

SRC = '''def scale(a):
    c = output_tensor(a.shape, a.dtype)
    for i in range(a.shape[0]):
        for j in range(a.shape[1]):
            c[i, j] = a[i, j] * 2.0
    return c
'''


def program(*args):
    typed = hyb.compile_source(SRC).scale.typed(*args)
    p = extract.extract(typed)
    return p, deps.compute(p)


def test_the_original_order_as_loops():
    p, _ = program(np.zeros((3, 4)))
    nest = astgen.generate(p, None)
    text = loops.fmt_nest(nest)
    assert text.count("for (") == 2 and "S0(" in text
    assert isinstance(nest.body, tuple) and nest.kernel is p.kernel and set(nest.statements) == {"S0"}


def test_loops_are_frozen():
    p, _ = program(np.zeros((3, 4)))
    (outer,) = astgen.generate(p, None).body
    with pytest.raises(dataclasses.FrozenInstanceError):
        outer.parallel = True


def test_marks_return_a_new_nest_and_leave_their_input_alone():
    p, d = program(np.zeros((512, 512)))
    nest = astgen.generate(p, None)
    before = loops.fmt_nest(nest)
    marked, decisions = mark_original_parallel(p, nest, d.all, parse_options(None).resolve(host_cpu(1)))
    assert loops.fmt_nest(nest) == before
    assert "parallel for" in loops.fmt_nest(marked) and "parallel for" not in before
    assert decisions and "marked `parallel`" in decisions[0]


def test_vector_marks_are_pure():
    p, _ = program(np.zeros((8, 32)))
    nest = astgen.generate(p, None)
    marked, names = vector.mark_vector_loops(p, nest)
    assert names == ("c3",)  # the inner loop: 32 trips, unit stride, a new cell each iteration
    assert "vector for" in loops.fmt_nest(marked) and "vector for" not in loops.fmt_nest(nest)


def test_with_flags_changes_only_the_loops_named():
    p, _ = program(np.zeros((3, 4)))
    nest = astgen.generate(p, None)
    (outer,) = nest.body
    (inner,) = outer.body
    changed = loops.with_flags(nest, {id(inner): {"parallel": True}})
    (outer2,) = changed.body
    assert not outer2.parallel and outer2.body[0].parallel and not inner.parallel


def test_the_middle_end_record_holds_every_stage():
    typed = hyb.compile_source(SRC).scale.typed(np.zeros((512, 512)))
    middle = pipeline.middle_end(typed, {}, host_cpu(1))
    assert middle.poly.kernel is typed and middle.nest.kernel is typed
    assert middle.followed.decisions[:len(middle.planned.decisions)] == middle.planned.decisions
    with pytest.raises(dataclasses.FrozenInstanceError):
        middle.nest = None
