"""Reverse mode on the syntax tree: a kernel -> the kernel computing its vector-Jacobian product.

``Reverser(kdef, module).run()`` derives the gradient kernel in five passes, each in a module of
its own; ``Reverser`` combines them as mixins and holds the state they share:

1. ``normalise.py``: the kernel's body with one declaration per name, its tensors, scalars,
   loops and blocks recorded and its statements numbered in program order;
2. ``analysis.py``: which tensors and scalars carry a derivative (activity, usefulness);
3. ``analysis.py``: which forward values the reverse part reads (needed values), and which
   reads of overwritten cells can be recomputed instead of saved;
4. ``analysis.py``: which of those values must be saved because the kernel overwrites them
   later (tapes, scalar copies, saved conditions), asking ``dependence.py`` whether a store
   may follow a read;
5. ``emission.py``: the gradient kernel itself (forward part, adjoints, reverse part), with
   loop nests turned from scatters into gathers where ``gathers.py`` can.

``tree.py`` holds the records and tree helpers they all use.  The names that used to be defined
here (``param_kinds``, ``Gradient``, the records and tree helpers) are still importable from
this module.
"""
from __future__ import annotations

from ..dsl import ast as syntax
from ..errors import HybridUnsupportedError
from .activity import activity
from . import dependence
from .analysis import chain, plan_saves
from .emission import Emission
from .gathers import Gathers
from .normalise import normalise, stmt_exprs, walk_stmts
from .tree import (TENSOR_MAKERS, Block, Gradient, Info, Loop, Names, ScalarDecl, TensorDecl, param_kinds, rewrite,
                   subst, unsupported, value_walk, walk)

__all__ = ["Reverser", "Gradient", "param_kinds", "TENSOR_MAKERS", "TensorDecl", "ScalarDecl", "Loop", "Block",
           "Info", "walk", "value_walk", "rewrite", "subst", "unsupported"]


class Reverser(Emission, Gathers):
    """The gradient of one kernel: ``Reverser(kdef, module, inactive, with_outputs).run()``."""

    walk_stmts = staticmethod(walk_stmts)
    stmt_exprs = staticmethod(stmt_exprs)

    def __init__(self, kdef: syntax.KernelDef, module: syntax.Module, inactive=frozenset(), with_outputs=False):
        self.kdef = kdef
        self.module = module
        self.inactive = frozenset(inactive)
        self.with_outputs = with_outputs

    def __getattr__(self, n):
        # The records of the passes already converted, read as if they were attributes.
        for rec in ("nz", "act", "plan"):
            r = self.__dict__.get(rec)
            if r is not None and hasattr(r, n):
                return getattr(r, n)
        raise AttributeError(n)

    def fresh(self, base: str) -> str:
        return self.names.fresh(base)

    def run(self) -> Gradient:
        """Run the passes in order and return the gradient kernel."""
        self.nz = normalise(self.kdef, self.module)
        self.names = Names(self.nz.used)
        self.act = activity(self.nz, self.inactive)
        if not self.act.active_t:
            raise HybridUnsupportedError(f"no input of `{self.kdef.name}` has a gradient (no float tensor input)",
                                         self.kdef.span, None)
        self.plan = plan_saves(self.nz, self.act)
        self.names = Names(self.plan.used)
        return self.emit()

    def chain(self, s, g):
        return chain(self.nz, self.act, self.plan.recompute, s, g)

    def affine(self, e):
        return dependence.affine(self.nz, self.act, e)

    def may_follow(self, w, s, sub, n):
        return dependence.may_follow(self.nz, self.act, w, s, sub, n)

    def constant_like(self, n):
        return dependence.constant_like(self.nz, self.act, n)
