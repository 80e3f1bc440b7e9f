"""The intrinsics of the kernel language: one table that every stage reads.

Each :class:`Intrinsic` row gives

* ``params``: the parameters as a wrong call's hint shows them (``"a, b, ..."``: two or more);
* ``rule``: how the checker types a call (see :data:`RULES`);
* ``reference``: the interpreter's NumPy spelling, its reference semantics;
* ``derivative``: how autodiff differentiates a call: :data:`ZERO` (no gradient flows, e.g.
  ``floor``), the name of a rule autodiff writes itself (``"power"``, ``"extremum"``), or a
  function ``(d, args, g) -> adjoints`` that builds one adjoint expression per argument with
  the tree builders ``d`` autodiff passes in (``d.mul``, ``d.div``, ``d.call``, ...).

The checker (:mod:`hyb.dsl.check_expr`), the interpreter (:mod:`hyb.dsl.interp`), autodiff
(:mod:`hyb.autodiff.rules`) and both back ends read this table; adding an intrinsic is one row
here plus one emitter in each back end (``tests/dsl/test_intrinsic_table.py`` checks that
every stage covers every row).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

ZERO = "zero"  # derivative: no gradient flows through the call

RULES = {
    "float": "computed in NumPy's float result type of the (promoted) arguments",
    "power": "as the ** operator",
    "extremum": "promoted like a binary operator, folded left; NaN wins",
    "same": "keeps its argument's dtype",
    "rounding": "keeps its argument's dtype; an integer argument is returned as is",
    "predicate": "bool (constant for an integer argument)",
    "ceil_div": "integers of one dtype",
    "popcount": "uint8 (a Python int for a Python int)",
}


@dataclass(frozen=True)
class Intrinsic:
    name: str
    params: str
    rule: str
    reference: str
    derivative: object = None

    @property
    def arity(self) -> tuple:
        """``(fewest, most)`` arguments; most is None for two or more."""
        if self.params.endswith("..."):
            return 2, None
        n = len(self.params.split(", "))
        return n, n


def _rows(*rows) -> dict:
    return {row.name: row for row in rows}


_ERF_SCALE = 2.0 / math.sqrt(math.pi)

TABLE = _rows(
    Intrinsic("sqrt", "x", "float", "np.sqrt", lambda d, a, g: [d.div(d.mul(d.num(0.5), g), d.call("sqrt", a[0]))]),
    Intrinsic("rsqrt", "x", "float", "_rsqrt",
              lambda d, a, g: [d.mul(g, d.div(d.mul(d.num(-0.5), d.call("rsqrt", a[0])), a[0]))]),
    Intrinsic("exp", "x", "float", "np.exp", lambda d, a, g: [d.mul(g, d.call("exp", a[0]))]),
    Intrinsic("expm1", "x", "float", "np.expm1", lambda d, a, g: [d.mul(g, d.call("exp", a[0]))]),
    Intrinsic("log", "x", "float", "np.log", lambda d, a, g: [d.div(g, a[0])]),
    Intrinsic("log1p", "x", "float", "np.log1p", lambda d, a, g: [d.div(g, d.add(d.num(1), a[0]))]),
    Intrinsic("sin", "x", "float", "np.sin", lambda d, a, g: [d.mul(g, d.call("cos", a[0]))]),
    Intrinsic("cos", "x", "float", "np.cos", lambda d, a, g: [d.neg(d.mul(g, d.call("sin", a[0])))]),
    Intrinsic("tan", "x", "float", "np.tan",
              lambda d, a, g: [d.div(g, d.mul(d.call("cos", a[0]), d.call("cos", a[0])))]),
    Intrinsic("tanh", "x", "float", "np.tanh",
              lambda d, a, g: [d.mul(g, d.sub(d.num(1), d.mul(d.call("tanh", a[0]), d.call("tanh", a[0]))))]),
    Intrinsic("sigmoid", "x", "float", "_sigmoid",
              lambda d, a, g: [d.mul(g, d.mul(d.call("sigmoid", a[0]), d.sub(d.num(1), d.call("sigmoid", a[0]))))]),
    Intrinsic("erf", "x", "float", "_erf",
              lambda d, a, g: [d.mul(g, d.mul(d.num(_ERF_SCALE), d.call("exp", d.neg(d.mul(a[0], a[0])))))]),
    Intrinsic("atan", "x", "float", "np.arctan", lambda d, a, g: [d.div(g, d.add(d.num(1), d.mul(a[0], a[0])))]),
    Intrinsic("atan2", "y, x", "float", "np.arctan2",
              lambda d, a, g: [d.div(d.mul(g, a[1]), d.add(d.mul(a[1], a[1]), d.mul(a[0], a[0]))),
                               d.neg(d.div(d.mul(g, a[0]), d.add(d.mul(a[1], a[1]), d.mul(a[0], a[0]))))]),
    Intrinsic("power", "x, y", "power", "np.power", "power"),
    Intrinsic("abs", "x", "same", "np.absolute", lambda d, a, g: [d.mul(g, d.call("sign", a[0]))]),
    Intrinsic("sign", "x", "same", "np.sign", ZERO),
    Intrinsic("floor", "x", "rounding", "np.floor", ZERO),
    Intrinsic("ceil", "x", "rounding", "np.ceil", ZERO),
    Intrinsic("trunc", "x", "rounding", "np.trunc", ZERO),
    Intrinsic("round", "x", "rounding", "np.rint", ZERO),
    Intrinsic("isnan", "x", "predicate", "np.isnan", ZERO),
    Intrinsic("isinf", "x", "predicate", "np.isinf", ZERO),
    Intrinsic("isfinite", "x", "predicate", "np.isfinite", ZERO),
    Intrinsic("max", "a, b, ...", "extremum", "np.maximum", "extremum"),
    Intrinsic("min", "a, b, ...", "extremum", "np.minimum", "extremum"),
    Intrinsic("ceil_div", "a, b", "ceil_div", "_ceil_div", ZERO),
    Intrinsic("popcount", "x", "popcount", "np.bitwise_count", ZERO),
)

NAMES = frozenset(TABLE)


def named(rule: str) -> tuple:
    """The names of the intrinsics a rule types, in table order."""
    return tuple(n for n, row in TABLE.items() if row.rule == rule)


FLOAT_MATH = named("float")
ROUNDING = named("rounding")
PREDICATES = named("predicate")
# Intrinsic name -> its parameters as the hint for a wrong call shows them.
INTRINSICS = {n: row.params for n, row in TABLE.items()}
