"""Pass 2 of reverse mode: which tensors and scalars carry a derivative.

A tensor or scalar is *active* when its value depends on a differentiable input (a float tensor
parameter not named in ``inactive``), found by iterating over the assignments to a fixed point.
The active names whose value never reaches an output are then dropped (*usefulness*): their
adjoint would be zero, and a derivative such as sqrt'(0) = inf must not turn that zero into nan.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..dsl import ast as syntax
from . import rules
from .normalise import Normalised
from .tree import target_name, unsupported


@dataclass(frozen=True, eq=False)
class Activity:
    """Pass 2's record: the names that carry a derivative."""
    active_t: frozenset  # active tensors (differentiable parameters among them, useful or not)
    active_s: frozenset  # active scalars

    def is_active(self, e) -> bool:
        """Whether expression ``e`` carries a derivative."""
        return rules.active(e, lambda n: n in self.active_s, lambda n: n in self.active_t)


def activity(nz: Normalised, inactive=frozenset()) -> Activity:
    """Pass 2: the active tensors and scalars of the normalised kernel ``nz``; the parameters in
    ``inactive`` (integer inputs, say) carry no derivative."""
    active_t = {p for p in nz.tensor_params if p not in inactive}
    active_s = set()

    def is_active(e) -> bool:
        return rules.active(e, lambda n: n in active_s, lambda n: n in active_t)

    changed = True
    while changed:
        changed = False
        for s in nz.assigns:
            if not is_active(s.value):
                continue
            n = target_name(s.target)
            if isinstance(s.target, syntax.Subscript):
                t = nz.tensors.get(n)
                if t is None:
                    raise unsupported(f"a store to `{n}`, which is not a tensor", s)
                if not t.int_dtype and n not in active_t:
                    active_t.add(n)
                    changed = True
            elif not nz.scalars[n].int_typed and n not in active_s:
                active_s.add(n)
                changed = True
    # Usefulness: drop the names whose value reaches no output.
    useful = set(nz.outputs)
    changed = True
    while changed:
        changed = False
        for s in nz.assigns:
            if target_name(s.target) in useful:
                for n in nz.reads(s.value):
                    if n not in useful:
                        useful.add(n)
                        changed = True
    params = set(nz.tensor_params)
    return Activity(frozenset(n for n in active_t if n in useful or n in params),
                    frozenset(n for n in active_s if n in useful))
