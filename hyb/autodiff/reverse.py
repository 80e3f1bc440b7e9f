"""Reverse mode on the syntax tree: a kernel -> the kernel computing its vector-Jacobian product.

``reverse(kdef, module, inactive, with_outputs)`` derives the gradient kernel in five passes,
each a function in a module of its own that reads the frozen records of the passes before it
and returns a new one:

1. ``normalise(kdef, module) -> Normalised`` (``normalise.py``): the kernel's body with one
   declaration per name, its tensors, scalars, loops and blocks recorded, its statements
   numbered in program order, and every name it uses;
2. ``activity(normalised, inactive) -> Activity`` (``activity.py``): which tensors and scalars
   carry a derivative (activity, then usefulness);
3. ``plan_saves(normalised, activity) -> SavePlan`` (``saves.py``): which reads of
   overwritten cells are recomputed, which forward values the reverse part needs, and which of
   them must be saved because the kernel overwrites them later (tapes, scalar copies, saved
   conditions), asking ``dependence.py`` whether a store may follow a read;
4. ``emit(normalised, activity, save_plan, with_outputs) -> Gradient`` (``emission.py``): the
   gradient kernel itself (forward part, adjoints, reverse part), with loop nests turned from
   scatters into gathers where ``gathers.py`` can;
5. ``prune(gradient) -> Gradient`` (``prune.py``): the statements whose values nothing reads
   removed (forward values the reverse part ended up not needing, replays that restore them).

The passes that make up names (normalise, the save plan, emission) each own a ``Names``
allocator seeded with the names the records before them took.  ``tree.py`` holds the small
records and tree helpers they all use, ``affine.py`` the affine forms of subscripts and loop
bounds.  The names that used to be defined here (``param_kinds``, ``Gradient``, the records
and tree helpers) are still importable from this module.
"""
from __future__ import annotations

from ..dsl import ast as syntax
from ..errors import HybridUnsupportedError
from .activity import Activity, activity
from .saves import SavePlan, plan_saves
from .emission import emit
from .prune import prune
from .normalise import Normalised, normalise
from .tree import (TENSOR_MAKERS, Block, Gradient, Info, Loop, ScalarDecl, TensorDecl, param_kinds, rewrite, subst,
                   unsupported, value_walk, walk)

__all__ = ["reverse", "Gradient", "Normalised", "Activity", "SavePlan", "normalise", "activity",
           "plan_saves", "emit", "param_kinds", "TENSOR_MAKERS", "TensorDecl", "ScalarDecl", "Loop", "Block", "Info",
           "walk", "value_walk", "rewrite", "subst", "unsupported"]


def reverse(kdef: syntax.KernelDef, module: syntax.Module, inactive=frozenset(), with_outputs: bool = False,
            grid_ranks=None, rows: bool = True) -> Gradient:
    """The gradient kernel of ``kdef``: the passes in order.  ``inactive`` names parameters without
    a gradient (integer inputs); ``with_outputs``: the gradient kernel also takes the outputs;
    ``grid_ranks``: the rank of each ``grid`` loop for the signature (see ``normalise``); ``rows``:
    costly values may be kept in rows (``rows.py``: for a gradient that runs on one thread)."""
    nz = normalise(kdef, module, grid_ranks)
    act = activity(nz, frozenset(inactive))
    if not act.active_t:
        raise HybridUnsupportedError(f"no input of `{kdef.name}` has a gradient (no float tensor input)",
                                     kdef.span, None)
    plan = plan_saves(nz, act)
    return prune(emit(nz, act, plan, with_outputs, rows))

