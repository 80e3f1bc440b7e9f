"""Hypothesis strategies for whole fuzzing cases: a kernel from tests/kernelgen.py plus kernel options.

kernelgen writes loop nests as deep as the tensors' rank; rank 4 (four nested loops, each tensor
dimension at most 3) is added here.  The options are drawn independently of the program: the isl
scheduler with its defaults, the original order, or explicit tile sizes (tiny ones, so that tiling
shows on small shapes) with threads, interchange, fusion (with array contraction) and vector math
functions switched on or off, and sometimes
``min_parallel_work=0`` so that small loops really run on threads.  ``fastmath`` is always off:
the comparison with ``emulate`` is exact up to rounding.
"""
from __future__ import annotations

from dataclasses import replace

from hypothesis import strategies as st

from tests import kernelgen as kg

if len(kg.LOOP_NAMES) < 4:  # a fourth loop variable, for rank-4 nests (kernelgen stops at i, j, k)
    kg.LOOP_NAMES = tuple(kg.LOOP_NAMES) + ("l",)

MAX_DIM = {1: 11, 2: 6, 3: 4, 4: 3}
BASE = kg.Config(rank=(1, 2, 3, 4), max_dim=MAX_DIM, schedules=False)

# Parity configurations (name -> kernelgen.Config); a case draws one (shrinking toward the first).
PARITY = {
    "default": BASE,
    "all_dtypes": replace(BASE, dtypes=kg.ALL_DTYPES),
    "deep_nests": replace(BASE, rank=(3, 4), max_stmts=10, expr_depth=2),
    "expressions": replace(BASE, rank=(1,), max_stmts=5, expr_depth=4, dtypes=kg.ALL_DTYPES),
    "affine_only": replace(BASE, data_dependent=False, rank=(2, 3, 4), max_stmts=9, expr_depth=2,
                           transcendental=False),
    # stores through data-dependent subscripts (`y[x[i] % n] = ...`): dependences on whole tensors
    "dd_writes": replace(BASE, dd_writes=True, rank=(1, 2, 3), max_stmts=8),
    # larger shapes, so that tiles are partial and parallel loops have work for every thread
    "larger": replace(BASE, rank=(2, 3), max_dim={2: 20, 3: 9}, min_dim=3, max_stmts=8, expr_depth=2),
}

# Data-dependent subscripts that may leave their tensor: compiled raises HybridIndexError iff emulate does.
OUT_OF_BOUNDS = replace(BASE, out_of_bounds=True)

# Gradients: float64 tensors only (finite differences), no nan/inf inputs, no data-dependent subscripts.
GRAD = replace(BASE, dtypes=("float64",), specials=False, extremes=False, data_dependent=False,
               calls=True, grid=True, max_stmts=6)


@st.composite
def kernel_options(draw):
    """Kernel options: schedule= (auto, original, or explicit switches, tile sizes and register blocks),
    threads= and shapes= (code for the call's shape, or shape-generic code)."""
    threads = draw(st.sampled_from([2, 1, 4]))
    shapes = draw(st.sampled_from(["auto", "generic"]))
    kind = draw(st.sampled_from(["auto", "original", "custom", "custom"]))
    if kind == "original":
        return {"schedule": "original", "threads": threads, "fastmath": False, "shapes": shapes}
    if kind == "auto":
        return {"threads": threads, "fastmath": False, "shapes": shapes}
    sched = {"tile": draw(st.one_of(st.sampled_from([True, False]),
                                    st.lists(st.integers(1, 5), min_size=1, max_size=4).map(tuple)))}
    for key in ("parallel", "interchange", "fuse", "vector_math"):
        sched[key] = draw(st.booleans())
    # register blocks chosen for the machine, none, or tiny ones that fill at the fuzzer's sizes
    sched["register"] = draw(st.sampled_from([True, False, (2, 2), (3, 4)]))
    sched["pack"] = draw(st.booleans())
    if draw(st.booleans()):
        sched["min_parallel_work"] = 0
    return {"schedule": sched, "threads": threads, "fastmath": False, "shapes": shapes}


@st.composite
def cases(draw, configs=None, options=True):
    """(config name, kernelgen.Program with .options set)."""
    configs = configs or PARITY
    name = draw(st.sampled_from(sorted(configs, key=lambda n: list(configs).index(n))))
    prog = kg.Gen(draw, configs[name]).program()
    prog.options = draw(kernel_options()) if options else {}
    return name, prog
