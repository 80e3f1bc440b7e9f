"""The intrinsics of the kernel language, by name: their groups and the parameters a call
takes, as the checker's hints show them."""
from __future__ import annotations

FLOAT_MATH = ("sqrt", "rsqrt", "exp", "expm1", "log", "log1p", "sin", "cos", "tan", "tanh", "sigmoid", "erf",
              "atan", "atan2")
ROUNDING = ("floor", "ceil", "trunc", "round")
PREDICATES = ("isnan", "isinf", "isfinite")
# Intrinsic name -> its parameters as the hint for a wrong call shows them ("a, b, ..." takes two or more).
INTRINSICS = {**{n: "x" for n in FLOAT_MATH}, "atan2": "y, x", "power": "x, y", "abs": "x", "sign": "x",
              **{n: "x" for n in ROUNDING + PREDICATES}, "max": "a, b, ...", "min": "a, b, ...",
              "ceil_div": "a, b", "popcount": "x"}
