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
from .analysis import Analysis
from .dependence import Dependence
from .emission import Emission
from .gathers import Gathers
from .normalise import Normalise
from .tree import (TENSOR_MAKERS, Block, Gradient, Info, Loop, ScalarDecl, TensorDecl, param_kinds, rewrite, subst,
                   unsupported, value_walk, walk)

__all__ = ["Reverser", "Gradient", "param_kinds", "TENSOR_MAKERS", "TensorDecl", "ScalarDecl", "Loop", "Block",
           "Info", "walk", "value_walk", "rewrite", "subst", "unsupported"]


class Reverser(Normalise, Analysis, Dependence, Emission, Gathers):
    """The gradient of one kernel: ``Reverser(kdef, module, inactive, with_outputs).run()``."""

    def __init__(self, kdef: syntax.KernelDef, module: syntax.Module, inactive=frozenset(), with_outputs=False):
        self.kdef = kdef
        self.module = module
        self.inactive = set(inactive)
        self.with_outputs = with_outputs
        self.used = set(module.constants) | set(module.kernels) | {p.name for p in kdef.params}
        for s in kdef.body:
            for e in walk(s):
                if isinstance(e, syntax.Name):
                    self.used.add(e.id)
        self.tensors: dict = {}
        self.scalars: dict = {}
        self.loops: dict = {}
        self.info: dict = {}  # id(stmt) -> Info
        self.blocks: dict = {}  # id(For) -> Block; id(If) -> (Block, Block)
        self.assigns: list = []  # every scalar assignment and tensor store, program order
        self.counter = 0
        self.declared: set = set()

    def fresh(self, base: str) -> str:
        """A name nothing in the kernel or the gradient kernel uses yet: ``base``, else ``base_2``, ..."""
        n, k = base, 1
        while n in self.used:
            k += 1
            n = f"{base}_{k}"
        self.used.add(n)
        return n

    def run(self) -> Gradient:
        """Run the passes in order and return the gradient kernel."""
        self.prepare()
        self.activity()
        self.usefulness()
        if not self.active_t:
            raise HybridUnsupportedError(f"no input of `{self.kdef.name}` has a gradient (no float tensor input)",
                                         self.kdef.span, None)
        self.recompute = {}
        self.plan_recompute()
        self.analyse()
        self.plan_saves()
        return self.emit()
