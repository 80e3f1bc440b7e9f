"""``func_type="hybrid"`` / ``"akg"``: a kernel in hyb's language, compiled by hyb."""
from __future__ import annotations

import ast
import inspect

import numpy as np

from ..dsl import ast as syntax
from ..dsl import types
from ..errors import HybridArgumentError, HybridUnsupportedError
from ..runtime.arguments import prepare_arrays
from ..runtime.kernel import Kernel, hybrid
from .values import compare_specs, refused


class HybridImpl:
    """A kernel in hyb's language, compiled by hyb."""

    takes_kwargs = False
    optional_names = ()
    takes_missing = False

    def __init__(self, func, func_type):
        if isinstance(func, Kernel):
            self.kernel = func
        elif callable(func) and inspect.isfunction(func):
            refuse_ir_builder(func, func_type)
            self.kernel = hybrid(func)
        else:
            raise HybridArgumentError(
                f'func_type="{func_type}" needs a @hyb.hybrid kernel or a Python function written in hyb\'s '
                f"language, not {type(func).__name__}", None,
                'for a compiled library use func_type="aot" and "path/to/lib.so:function"')
        self.name = self.kernel.name
        self.param_names = list(self.kernel.params)
        returned = returned_names(self.kernel.kdef)
        self.static_output_count = None if returned is None else len(returned)
        self.static_output_names = returned
        self._typed = {}

    def _kernel_args(self, op, arrays, attrs):
        """Arguments in the kernel's parameter order: inputs fill the parameters that are not
        attributes, in order; attributes go by name."""
        if not attrs:
            return list(arrays)
        inputs = iter(arrays)
        out = []
        for p in self.param_names:
            if p not in attrs:
                out.append(next(inputs))
            elif attrs[p] is None:
                raise HybridArgumentError(f"attribute `{p}` of Custom op `{op.name}` has no value, and kernel "
                                          f"`{self.name}` needs one", None,
                                          "pass it after the inputs, or give it a default_value")
            else:
                out.append(attrs[p])
        return out

    def typed(self, kargs):
        key = tuple((a.shape, a.dtype) if isinstance(a, np.ndarray) else type(a) for a in kargs)
        t = self._typed.get(key)
        if t is None:
            t = self._typed[key] = self.kernel.typed(*kargs)
        return t

    def run(self, op, arrays, attrs, declared, target):
        kargs = self._kernel_args(op, arrays, attrs)
        typed = self.typed(kargs)
        real = [(tuple(typed.tensors[n].shape), types.numpy_dtype(typed.tensors[n].dtype)) for n in typed.outputs]
        if declared is not None:
            compare_specs(op, declared, real)
        # Operators are functional: a kernel that writes an input in place gets a copy.
        written = typed.written
        run_args = [a.copy() if isinstance(a, np.ndarray) and name in written else a
                    for name, a in zip(typed.inputs, kargs)]
        if target == "GPU":
            ck = self.kernel.compile(*run_args, target="cuda")  # the CUDA back end: refused until it is built
            got = ck.run(prepare_arrays(self.kernel, run_args))
        else:
            got = self.kernel(*run_args)
        return list(got) if isinstance(got, tuple) else [got]

    def derived_gradient(self, op, arrays, attrs, outs, douts):
        kargs = self._kernel_args(op, arrays, attrs)
        g = self.kernel.grad()
        got = g(*kargs, *douts)
        got = list(got) if isinstance(got, tuple) else [got]
        by_param = dict(zip(self.param_names, got))
        inputs = [p for p in self.param_names if p not in attrs]
        return [by_param[p] for p in inputs]


def returned_names(kdef: syntax.KernelDef):
    """The names a kernel returns (its last top-level ``return``; ``""`` for an expression that
    is not a name), or None without one."""
    for stmt in reversed(kdef.body):
        if isinstance(stmt, syntax.Return):
            return [v.id if isinstance(v, syntax.Name) else "" for v in stmt.values]
    return None


def refuse_ir_builder(func, func_type: str):
    """A function written with TVM's IR builder (akg's other way to write a kernel: ``ib =
    tvm.ir_builder.create()``, ``with ib.for_range(...)``) is refused where it uses the builder,
    before the language's parser would stop at some construct of it."""
    from ..dsl import parser
    try:
        text, smap = parser.function_source(func)
        tree = ast.parse(text)
    except (HybridUnsupportedError, SyntaxError):
        return  # hyb.hybrid reports what is wrong with the source
    for node in ast.walk(tree):
        named = node.attr if isinstance(node, ast.Attribute) else node.id if isinstance(node, ast.Name) else None
        if named in ("ir_builder", "IRBuilder"):
            raise refused(HybridUnsupportedError(
                f"`{func.__name__}` is written with TVM's IR builder, which hyb does not run "
                f'(func_type="{func_type}" takes a kernel in the hybrid language)',
                smap.span(node.lineno, node.col_offset + 1, node.end_lineno, node.end_col_offset + 1),
                "write it as a hybrid kernel: c = output_tensor(a.shape, a.dtype), `for i in range(...)` loops and "
                "c[i] = ... stores (docs/reference/language.md), then pass it to Custom"))
