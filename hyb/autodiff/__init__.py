"""Reverse-mode automatic differentiation, source to source.

``derive(kernel_def, module)`` returns the gradient kernel of a hybrid kernel as ``.hyb``
text: it takes the kernel's inputs and one gradient per output (the bprop convention) and
returns one gradient per differentiable input.  See ``reverse.py`` for how.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..dsl import ast as syntax
from ..dsl import unparse
from .reverse import Gradient, reverse


@dataclass
class Derived:
    name: str
    source: str  # the gradient kernel's text, with the module constants it uses
    grads: list  # per forward parameter: whether the gradient kernel returns its gradient
    outputs: list  # forward outputs, in order (one incoming gradient each)
    tapes: list  # (name, shape AST, dtype AST, what it saves)
    with_outputs: bool
    rules: list = ()  # the idiom rules applied (closed-form adjoints), in words


def derive(kdef: syntax.KernelDef, module: syntax.Module, inactive=frozenset(), with_outputs: bool = False,
           grid_ranks=None, rows: bool = True) -> Derived:
    """The gradient of ``kdef``; ``inactive`` names parameters without a gradient (integer inputs);
    ``grid_ranks`` gives the rank of each ``grid`` loop for one signature (``TypedKernel.grid_ranks``);
    ``rows``: costly values may be kept in rows (a gradient that runs on one thread)."""
    g: Gradient = reverse(kdef, module, frozenset(inactive), with_outputs, grid_ranks, rows)
    lines = [f"# Gradient of `{kdef.name}`, derived by hyb from {module.filename}.", ""]
    for n, (value, _) in module.constants.items():
        lines.append(f"{n} = {unparse.expr(value)}")
    if module.constants:
        lines.append("")
        lines.append("")
    text = "\n".join(lines) + unparse.kernel(g.kdef)
    return Derived(g.kdef.name, text, g.grads, g.outputs, g.tapes, with_outputs, list(g.rules))
