"""``func_type="pyfunc"``: a Python function on NumPy arrays."""
from __future__ import annotations

import inspect

import numpy as np

from ..errors import HybridArgumentError
from .values import compare_specs, no_gradient


class PyfuncImpl:
    """A Python function on NumPy arrays."""

    static_output_count = None
    static_output_names = None
    takes_missing = True  # a None for an optional input, a tuple for a dynamic one

    def __init__(self, func):
        if not callable(func):
            raise HybridArgumentError(f'func_type="pyfunc" needs a Python function, not {type(func).__name__}',
                                      None, None)
        self.func = func
        self.name = getattr(func, "__name__", type(func).__name__)
        self.param_names, self.optional_names, self.takes_kwargs = python_params(func)

    def run(self, op, arrays, attrs, declared, target):
        got = self.func(*arrays, **{k: v for k, v in attrs.items() if v is not None})
        if declared == [] and got is None:  # out_shape=(), out_dtype=(): run for its side effects
            return []
        got = list(got) if isinstance(got, (tuple, list)) else [got]
        outs = [np.asarray(g.asnumpy() if hasattr(g, "asnumpy") else g) for g in got]
        if declared is not None and len(declared) == len(outs):
            # A number (Python or NumPy) or a 0-d array takes the declared dtype, as MindSpore casts it.
            outs = [o.astype(d) if o.ndim == 0 and d is not None and o.dtype != d and o.dtype != object else o
                    for o, (_, d) in zip(outs, declared)]
        # Outputs are new arrays: one that is (a view of) an input is copied.
        outs = [o.copy() if any(isinstance(a, np.ndarray) and np.shares_memory(o, a) for a in arrays) else o
                for o in outs]
        if declared is not None:
            compare_specs(op, declared, [(o.shape, o.dtype) for o in outs], returned=True)
        return outs

    def derived_gradient(self, op, *_):
        raise no_gradient(op)


def python_params(func):
    """``(names, names with defaults, takes **kwargs)`` of a Python function's parameters;
    ``(None, (), True)`` when they are unknown (no signature, or ``*args``)."""
    try:
        sig = inspect.signature(func)
    except (TypeError, ValueError):
        return None, (), True
    ps = list(sig.parameters.values())
    if any(p.kind == p.VAR_POSITIONAL for p in ps):
        return None, (), True
    named = [p for p in ps if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
    return ([p.name for p in named], {p.name for p in named if p.default is not p.empty},
            any(p.kind == p.VAR_KEYWORD for p in ps))
