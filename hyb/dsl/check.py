"""The checker: syntax tree + call signature → typed kernel IR (:mod:`hyb.dsl.tir`).

All user errors about names, scopes, dtypes and shapes are raised here, each pointing at
the text that caused it.  Shapes are concrete: a kernel is checked once per signature.
"""
from __future__ import annotations

import contextlib
import difflib

import numpy as np

from ..errors import (HybridArgumentError, HybridAssertionError, HybridInternalError, HybridNameError, HybridTypeError,
                      HybridUnsupportedError, Span)
from . import ast as syntax
from . import deep
from . import tir
from . import types
from . import unparse
from .check_expr import ExpressionChecker, kernel_arity_error, loop_iterable_error
from .folding import is_index_expression, is_size_expression, known_condition, of_parameters
from .scopes import (BUILTIN_NAMES, LOOP_KINDS, TENSOR_MAKERS, DTypeVal, ShapeVal, Sym, TensorRef, TupleVal,
                     always_assigned)
from .signature import ArgSpec, NeedsValue, arg_spec, arg_specs  # noqa: F401 (the checker's API)

# built-in functions a local may take the name of (then calling it is an error saying so)
SHADOWABLE = ("len", "likely", "max_num_threads")
# The most copies of a body `const_range` loops unroll (nested ones: their product; more: a loop)
UNROLLED = 64


def check_kernel(kdef: syntax.KernelDef, module: syntax.Module, args: list) -> tir.TypedKernel:
    """The typed kernel for one signature.

    A scalar local takes the type of every value assigned to it, promoted together as NumPy 2
    promotes (NEP 50): a Python number is weak, so `s = 0.0` then `s += a[i]` with a float32 `a`
    makes `s` a float32, and a scalar only ever given Python numbers stays a weak Python number.  The checker runs
    again with the wider types until no assignment widens one; types only widen, so this ends.
    It recurses once per level of the module's nesting, with the room for it (:mod:`.deep`)."""
    return deep.call(deep.depth(module), _check_kernel, kdef, module, args)


def _check_kernel(kdef: syntax.KernelDef, module: syntax.Module, args: list) -> tir.TypedKernel:
    widened: dict = {}
    try:
        for _ in range(_MAX_WIDENINGS):
            checker = _Checker(kdef, module, widened)
            typed = checker.run(args)
            if not checker.widen:
                return typed
            widened.update(checker.widen)
        raise HybridInternalError(f"the scalar types of `{kdef.name}` do not settle", "check")
    except RecursionError:  # (not expected: the parser refuses what deep.call has no room for)
        raise HybridUnsupportedError(f"kernel `{kdef.name}` is nested too deeply to check", kdef.span,
                                     "split long expressions into several statements") from None


_MAX_WIDENINGS = 16  # each round widens at least one scalar, and a type widens at most 4 times


def is_print(e) -> bool:
    return isinstance(e, syntax.Call) and isinstance(e.func, syntax.Name) and e.func.id == "print"


def widened_type(current: str, value: str) -> str:
    """The type of a scalar of type ``current`` that is also assigned a ``value`` of type ``value``
    (either may be weak): their promotion, except that two integer types that only meet in a float
    (int64 and uint64) keep the scalar's type, the value being cast to it as a store into a tensor
    would be."""
    if value == current:
        return current
    p = types.promote(current, value)
    if types.is_float(p) and not types.is_float(current) and not types.is_float(value):
        return current
    return p


class _Checker(ExpressionChecker):
    def __init__(self, kdef: syntax.KernelDef, module: syntax.Module, widened: dict | None = None):
        self.kdef = kdef
        # unique scalar name -> (the type earlier rounds found it needs, the assignment that widened it)
        self.widened = widened or {}
        self.widen: dict = {}  # what this round found, as widened
        self.alias_spans: dict = {}  # names that stand for an index expression -> where they were assigned
        self.stdout = None  # the 0-d stand-in for the output stream, made by the first print()
        self.module = module
        self.tensors: dict = {}
        self.known_values: dict = {}  # inputs compiled for their values (a shape passed as a tuple)
        # names every branch of an `if` assigns -> the scope (outside the `if`) their scalar goes in
        self.hoisted: dict = {}
        self.unrolling = 1  # the copies of a body the `const_range` loops around it unroll
        self.var_names: dict = {}  # each loop variable's unique name -> the name written
        self.scopes: list = [{}]
        self.closed: dict = {}  # names of scalars whose block has ended -> Span of declaration
        self.base_depth = 0  # the block depth at which the kernel being checked starts
        self.used_names: set = set()
        self.outputs: list = []
        self.returned = False
        self.depth = 0  # enclosing `for`/`if` blocks
        # enclosing blocks that may not run (an `if` branch or a loop whose running is not known
        # now): an assert there is checked when it is reached, never decided now
        self.maybe = 0
        self.loop_stack: list = []  # unique names of the enclosing loop variables
        self.call_stack: list = [kdef.name]  # kernels being inlined, outermost first
        self.grid_ranks: dict = {}  # (line, col) of each grid loop -> its rank

    # ------------------------------------------------------------ scopes
    def unique(self, base: str) -> str:
        name, n = base, 1
        while name in self.used_names:
            name = f"{base}_{n}"
            n += 1
        self.used_names.add(name)
        return name

    def lookup(self, name: str):
        for scope in reversed(self.scopes):
            if name in scope:
                return scope[name]
        return None

    def declare(self, name: str, sym: Sym):
        self.scopes[-1][name] = sym

    def push(self):
        self.scopes.append({})

    def pop(self):
        scope = self.scopes.pop()
        for name, sym in scope.items():
            if sym.kind == "scalar":
                self.closed[name] = self.tensors[sym.name].span
            elif name in self.alias_spans and sym.kind == "const":
                self.closed[name] = self.alias_spans[name]

    # ------------------------------------------------------------ entry
    def run(self, args: list) -> tir.TypedKernel:
        k = self.kdef
        self.assign_counts = _assignment_counts(k.body)
        if len(args) != len(k.params):
            names = ", ".join(p.name for p in k.params)
            raise HybridArgumentError(
                f"kernel `{k.name}` takes {len(k.params)} argument{'s' if len(k.params) != 1 else ''} "
                f"({names}) but was called with {len(args)}", k.span,
                "pass one array per parameter")
        for c_name, (c_expr, c_span) in self.module.constants.items():
            self.scopes[0][c_name] = Sym("const", c_name, (c_expr, c_span))
        inputs = []
        seen = set()
        for p, a in zip(k.params, args):
            if p.name in seen:
                raise HybridNameError(f"parameter `{p.name}` appears twice", p.span, None)
            seen.add(p.name)
            if p.name in BUILTIN_NAMES:
                raise HybridNameError(f"parameter `{p.name}` hides the built-in `{p.name}`", p.span,
                                      "rename the parameter")
            name = self.unique(p.name)
            if a.scalar:
                self.tensors[name] = tir.Tensor(name, (), a.dtype, "param", p.span, p.name)
                if a.value is not None:  # specialised on its value: a constant of its type
                    self.declare(p.name, Sym("const", p.name, tir.Const(a.dtype, a.value)))
                else:
                    self.declare(p.name, Sym("scalar", name))
            else:
                # a size None: known when the kernel runs (a shape-generic signature)
                shape = tuple(tir.Size(types.WEAK_INT, tir.size_name(len(inputs), j)) if d is None else d
                              for j, d in enumerate(a.shape))
                self.tensors[name] = tir.Tensor(name, shape, a.dtype, "input", p.span, p.name)
                self.declare(p.name, Sym("tensor", name))
                if a.value is not None:  # specialised on its items
                    self.known_values[name] = a.value
            inputs.append(name)
        self.push()
        body = self.block(k.body)
        self.pop()
        # An input the kernel writes is written in place, returned or not (as under Numba and TVM):
        # the caller's array changes.  A kernel with no `return` must write one.
        written = tir.TypedKernel(k.name, self.tensors, inputs, self.outputs, body).written
        for st in tir.walk_stmts(body):
            if isinstance(st, tir.Store) and st.tensor in self.known_values:
                raise HybridTypeError(f"argument `{self.tensors[st.tensor].source_name}` is written, but the kernel "
                                      "is compiled for its values (it gives a shape)", st.span,
                                      "write a tensor of the kernel's own, or pass two arguments")
        if not self.returned and not any(n in written for n in inputs if self.tensors[n].kind != "param"):
            raise HybridTypeError(f"kernel `{k.name}` returns nothing and writes none of its inputs", k.span,
                                  "end the kernel with `return c` (or `return c, d`) naming its outputs")
        fits = tuple(dict.fromkeys(self.__dict__.get("fits", ())))
        return tir.TypedKernel(k.name, self.tensors, inputs, self.outputs, body, self.module.filename, k.span,
                               dict(self.grid_ranks), fits, dict(self.var_names),
                               tuple(self.__dict__.get("float64_sites", ())))

    # ------------------------------------------------------------ statements
    def block(self, stmts: list) -> list:
        out = []
        for s in stmts:
            if self.returned:
                raise HybridUnsupportedError("statements after `return` are not supported", s.span,
                                             "a kernel has one `return`, at its end")
            r = self.stmt(s)
            if r is not None:
                out.extend(r if isinstance(r, list) else [r])
        return out

    def stmt(self, s):
        if isinstance(s, syntax.Assign):
            return self.assign(s)
        if isinstance(s, syntax.AugAssign):
            return self.aug_assign(s)
        if isinstance(s, syntax.For):
            return self.for_loop(s)
        if isinstance(s, syntax.If):
            return self.if_stmt(s)
        if isinstance(s, syntax.Return):
            return self.return_stmt(s)
        if isinstance(s, syntax.Pass):
            return None
        if isinstance(s, syntax.Assert):
            return self.assertion(s)
        if isinstance(s, syntax.ExprStmt):
            if isinstance(s.value, syntax.Str):
                return None  # docstring or comment string
            callee = self.kernel_call(s.value)
            if callee is not None:
                return self.inline(callee, s.value, None)
            if is_print(s.value) and self.lookup("print") is None:
                return self.print_stmt(s.value)
            raise HybridTypeError("this expression is computed and thrown away", s.value.span,
                                  "assign it to a tensor element or a scalar")
        raise HybridUnsupportedError(f"unsupported statement {type(s).__name__}", s.span, None)

    def print_stmt(self, call: syntax.Call):
        """``print(...)`` of string literals and scalar values, as Python prints them."""
        if call.kwargs:
            key = next(iter(call.kwargs))
            raise HybridUnsupportedError(f"print() with `{key}=` is not supported", call.kwargs[key].span,
                                         "print values separated by spaces, one line per call")
        items, layout = [], []  # layout: (separator before, conversion, format spec) of each item
        for a in call.args:
            for k, part in enumerate(a.parts if isinstance(a, syntax.FString) else [a]):
                sep = " " if k == 0 and items else ""
                if isinstance(part, syntax.Str):
                    items.append(part.value)
                    layout.append((sep, "", ""))
                    continue
                field = part if isinstance(part, syntax.Formatted) else None
                v = self.value(part.value if field else part)
                if not isinstance(v, tir.TExpr):
                    raise HybridTypeError("print() takes numbers and strings", part.span,
                                          "print a tensor's elements one by one, e.g. `print(a[i])`; "
                                          "a shape's items as `a.shape[0]`")
                if field and field.spec:
                    tir.check_format(types.concrete(v.dtype), field.spec, field.span)
                items.append(v)
                layout.append((sep, field.conversion, field.spec) if field else (sep, "", ""))
        if self.stdout is None:
            self.stdout = self.unique("hyb_stdout")
            self.tensors[self.stdout] = tir.Tensor(self.stdout, (), "int64", "temp", call.span, "print's output")
        return tir.Print(items, self.stdout, call.span, tuple(layout))

    def assertion(self, s: syntax.Assert):
        """``assert cond, "message"``: decided now when the condition is (shapes, constants), else a
        check when it runs."""
        message = self.assert_message(s.msg) if s.msg is not None else ""
        cond = self.condition(s.test)
        known = known_condition(cond)
        if known:
            return None
        if known is not None and not self.maybe:  # reached whenever the kernel runs
            what = f": {message}" if message else ""
            raise HybridAssertionError(f"assertion failed{what}", s.test.span,
                                       "decided at compile time: the condition depends only on shapes and constants")
        return tir.Assert(cond, message, s.span)

    def return_stmt(self, s: syntax.Return):
        if self.depth > self.base_depth:
            raise HybridUnsupportedError("`return` inside a loop or `if` is not supported", s.span,
                                         "return once, at the end of the kernel")
        if not s.values:
            raise HybridTypeError("`return` without a value", s.span, "return the output tensor(s)")
        for v in s.values:
            if not isinstance(v, syntax.Name):
                raise HybridTypeError("a kernel returns tensors by name", v.span,
                                      "store the value into a tensor made by output_tensor(...) and return it")
            sym = self.lookup(v.id)
            if sym is None:
                self.unknown_name(v)
            if sym.kind != "tensor":
                raise HybridTypeError(f"`{v.id}` is a {self.kind_word(sym)}, not a tensor; a kernel returns tensors",
                                      v.span, "store the value into a tensor made by output_tensor(...) and return it")
            if sym.name in self.outputs:
                raise HybridTypeError(f"`{v.id}` is returned twice", v.span, None)
            self.outputs.append(sym.name)
        self.returned = True
        return None

    def kind_word(self, sym: Sym) -> str:
        return {"scalar": "scalar", "loop": "loop variable", "grid": "grid index", "const": "constant",
                "tensor": "tensor"}[sym.kind]

    def kernel_call(self, e):
        """The KernelDef called by ``e`` if it is a call of another kernel of the same file."""
        if (isinstance(e, syntax.Call) and isinstance(e.func, syntax.Name) and e.func.id in self.module.kernels
                and self.lookup(e.func.id) is None):
            return self.module.kernels[e.func.id]
        return None

    def assign(self, s: syntax.Assign):
        tgt = s.target
        callee = self.kernel_call(s.value)
        if callee is not None:
            targets = tgt.elts if isinstance(tgt, syntax.Tuple) else [tgt]
            return self.inline(callee, s.value, targets)
        if isinstance(tgt, syntax.Tuple):
            raise HybridUnsupportedError("tuple assignment is not supported", tgt.span,
                                         "assign one name per statement")
        if isinstance(tgt, syntax.Subscript):
            return self.store(tgt, self.expr(s.value), s.span)
        if not isinstance(tgt, syntax.Name):
            raise HybridTypeError("cannot assign to this expression", tgt.span,
                                  "assign to a name (`s = ...`) or a tensor element (`c[i] = ...`)")
        name = tgt.id
        sym = self.lookup(name)
        if isinstance(s.value, syntax.Call) and isinstance(s.value.func, syntax.Name) and s.value.func.id in TENSOR_MAKERS:
            if sym is not None and sym.kind != "const":
                raise HybridNameError(f"`{name}` is already defined as a {self.kind_word(sym)}", tgt.span,
                                      "give the new tensor its own name")
            return self.make_tensor(name, s.value, tgt.span)
        if sym is None or sym.kind == "const":
            if name in BUILTIN_NAMES and name not in SHADOWABLE:
                # (loop hints, tensor makers, casts: the language's own words; a function such as
                # `len` or `max` may be shadowed by a local, as in Python)
                raise HybridNameError(f"`{name}` is a built-in name and cannot be assigned", tgt.span,
                                      "choose another name")
            if self.assign_counts.get(name, 0) == 1 and isinstance(s.value, (syntax.Tuple, syntax.Attribute,
                                                                                syntax.Name)):
                whole = self.value(s.value)
                if isinstance(whole, (TupleVal, ShapeVal)):
                    # a tuple or a shape, assigned once (`out_shape = (n, 2)`): a name for it
                    self.declare(name, Sym("const", name, whole))
                    return None
            value = self.expr(s.value)
            if (((isinstance(value, tir.Const) or is_size_expression(value)) and types.is_weak(value.dtype)
                 or isinstance(value, tir.Const) and types.is_int(value.dtype) and not isinstance(value.value, bool))
                    and self.assign_counts.get(name, 0) == 1):
                # Assigned once, to a number known now (e.g. `n = a.shape[0]`): a compile-time
                # constant (in a called kernel too, whose body is counted when it is inlined).
                self.declare(name, Sym("const", name, value))
                return None
            if self.assign_counts.get(name, 0) == 1 and len(self.call_stack) == 1 and (
                    is_index_expression(value) or of_parameters(value, self.tensors)):
                # Assigned once, to an affine-like integer expression of loop variables (`ih = p * 2 + dr - 1`):
                # the name stands for the expression, so that extraction, the bounds proofs and the
                # scheduler see the subscripts it appears in as they would written out.  It keeps the
                # type a scalar would have had (int64 for a Python-int expression).
                if types.is_weak(value.dtype):
                    value = tir.Cast(types.concrete(value.dtype), value, span=value.span)
                self.declare(name, Sym("const", name, value))
                self.alias_spans[name] = tgt.span
                return None
            uname = self.unique(name)
            # (a Python number stays weak: it takes the type of the tensor values it meets)
            dtype = self.widened[uname][0] if uname in self.widened else value.dtype
            self.tensors[uname] = tir.Tensor(uname, (), dtype, "scalar", tgt.span, name,
                                           private_to=tuple(self.loop_stack))
            if name in self.hoisted:  # assigned on every path through an `if`: visible after it
                self.scopes[self.hoisted.pop(name)][name] = Sym("scalar", uname)
            else:
                self.declare(name, Sym("scalar", uname))
            return tir.Store(uname, [], self.coerce(value, dtype), s.span)
        if sym.kind == "scalar":
            self.not_a_param(sym, tgt)
            return self.scalar_store(sym.name, self.expr(s.value), s.span)
        if sym.kind == "loop":
            raise HybridTypeError(f"cannot assign to loop variable `{name}`", tgt.span,
                                  "use a new scalar name, e.g. `j = " + name + " + 1`")
        raise HybridNameError(f"`{name}` is a tensor; assigning to it would redefine it", tgt.span,
                              f"write to its elements instead: `{name}[i] = ...`")

    def not_a_param(self, sym: Sym, tgt: syntax.Name):
        if self.tensors[sym.name].kind == "param":
            raise HybridTypeError(f"cannot assign to `{tgt.id}`, a scalar parameter", tgt.span,
                                  f"copy it into a local first: `{tgt.id}_ = {tgt.id}`")

    def aug_assign(self, s: syntax.AugAssign):
        tgt = s.target
        load = self.expr(tgt)
        if isinstance(tgt, syntax.Name):
            sym = self.lookup(tgt.id)
            if sym.kind != "scalar":
                raise HybridTypeError(f"cannot update `{tgt.id}`, a {self.kind_word(sym)}", tgt.span,
                                      "augmented assignment works on scalars and tensor elements")
            self.not_a_param(sym, tgt)
        elif not isinstance(tgt, syntax.Subscript):
            raise HybridTypeError("cannot assign to this expression", tgt.span, None)
        value = self.binop(s.op, load, self.expr(s.value), s.span)
        if isinstance(tgt, syntax.Name):
            return self.scalar_store(self.lookup(tgt.id).name, value, s.span)
        return self.store(tgt, value, s.span)

    def scalar_store(self, uname: str, value: tir.TExpr, span: Span):
        """``value`` assigned to the scalar local ``uname``; a value of a wider type widens the scalar
        (in the next round of checking)."""
        t = self.tensors[uname]
        if t.kind == "scalar":
            so_far = self.widen[uname][0] if uname in self.widen else t.dtype
            wider = widened_type(so_far, value.dtype)
            if wider != so_far:
                self.widen[uname] = (wider, span)
        return tir.Store(uname, [], self.coerce(value, t.dtype), span)

    def store(self, tgt: syntax.Subscript, value: tir.TExpr, span: Span):
        ref = self.value(tgt.value)
        if not isinstance(ref, TensorRef):
            self.not_indexable(ref, tgt.value)
        t = ref.tensor
        idx = self.indices(t, tgt, ref.prefix)
        return tir.Store(t.name, idx, self.coerce(value, t.dtype), span)

    def not_indexable(self, v, e):
        if isinstance(v, tir.Load) and not v.indices:
            t = self.tensors[v.tensor]
            if t.kind == "param":
                raise HybridTypeError(f"`{t.source_name}` is a scalar ({types.concrete(t.dtype)} argument) and cannot "
                                      "be indexed", e.span, f"pass an array for `{t.source_name}`")
            raise HybridTypeError(f"`{t.source_name}` is a scalar and cannot be indexed", e.span, None)
        if isinstance(v, tir.Load):
            t = self.tensors[v.tensor]
            raise HybridTypeError(f"an element of `{t.source_name}` is indexed: `{t.source_name}` has {t.ndim} "
                                  f"dimension{'s' if t.ndim != 1 else ''} (shape {t.shape})", e.span,
                                  f"index `{t.source_name}` with one subscript per dimension" + (
                                      "; an empty list passed for it has one: pass `np.zeros((0, k), dtype)`"
                                      if t.shape[:1] == (0,) else ""))
        raise HybridTypeError("only tensors and shapes can be indexed", e.span, None)

    def make_tensor(self, name: str, call: syntax.Call, span: Span):
        maker = call.func.id
        names = ("shape", "dtype", "scope") if maker == "allocate" else ("shape", "dtype")
        usage = f"{maker}(shape, dtype" + (", scope)" if maker == "allocate" else ")")
        if len(call.args) > len(names):
            raise HybridTypeError(f"{maker}() takes a shape and a dtype, got {len(call.args)} argument(s)",
                                  call.span, f"write `{maker}(a.shape, a.dtype)` or `{maker}((n, m), \"float32\")`")
        given = dict(zip(names, call.args))
        for key, value in call.kwargs.items():
            if key not in names:
                raise HybridTypeError(f"{maker}() got an unexpected keyword argument `{key}`", value.span, usage)
            if key in given:
                raise HybridTypeError(f"{maker}() got two values for `{key}`", value.span, usage)
            given[key] = value
        if "shape" not in given:
            raise HybridTypeError(f"{maker}() takes a shape and a dtype: the shape is missing", call.span,
                                  f"write `{maker}(a.shape, a.dtype)` or `{maker}((n, m), \"float32\")`")
        shape = self.shape_value(given["shape"])
        dtype = self.dtype_value(given["dtype"]) if "dtype" in given else "float32"
        if "scope" in given and not isinstance(given["scope"], syntax.Str):
            raise HybridTypeError("an allocate() scope is a string such as \"local\" or \"global\"",
                                  given["scope"].span, "hyb places every temporary itself: the scope changes nothing")
        if maker == "output_tensor" and self.depth > self.base_depth:
            raise HybridUnsupportedError("output_tensor(...) inside a loop or `if`", call.span,
                                         "create outputs at the top level of the kernel")
        uname = self.unique(name)
        kind = "output" if maker == "output_tensor" and len(self.call_stack) == 1 else "temp"
        t = tir.Tensor(uname, shape, dtype, kind, span, name,
                       private_to=tuple(self.loop_stack) if self.depth > 0 else ())
        self.tensors[uname] = t
        self.declare(name, Sym("tensor", uname))
        if self.depth > 0:
            # A tensor allocated inside a loop starts at zero on every iteration.
            return self.zero_fill(t, call.span)
        return None

    def zero_fill(self, t: tir.Tensor, span: Span):
        vars_ = [self.unique(f"_z{k}") for k in range(t.ndim)]
        stmt = tir.Store(t.name, [tir.Var(types.WEAK_INT, v, span=span) for v in vars_],
                       tir.Const(t.dtype, 0, span=span), span)
        for k in reversed(range(t.ndim)):
            stmt = tir.Loop(vars_[k], tir.Const(types.WEAK_INT, 0), tir.dim(t.shape[k]), 1, [stmt],
                          "range", span)
        return stmt

    def shape_value(self, e) -> tuple:
        v = self.value(e)
        if isinstance(v, ShapeVal):
            return v.dims
        if isinstance(v, TupleVal):
            dims = []
            for item, sub in zip(v.items, e.elts if isinstance(e, syntax.Tuple) else [e] * len(v.items)):
                dims.append(self.const_int(item, sub.span, "a shape"))
            return tuple(dims)
        if isinstance(v, tir.TExpr):
            return (self.const_int(v, e.span, "a shape"),)
        items = self.shape_argument(v, e.span, "a shape") if isinstance(v, TensorRef) else None
        if items is not None:  # a shape passed as a tuple or list: compiled for its items
            return tuple(self.const_int(tir.Const(types.WEAK_INT, d), e.span, "a shape") for d in items)
        if isinstance(v, TensorRef) and v.tensor.kind == "input" and not v.prefix and v.ndim == 1:
            raise HybridTypeError(f"expected a shape, but `{v.tensor.source_name}` holds {v.tensor.dtype}", e.span,
                                  "pass a tuple or list of integers as the shape")
        raise HybridTypeError("expected a shape", e.span, "write `x.shape` or a tuple such as `(n, m)`")

    def const_int(self, v, span, what) -> int:
        if what == "a shape" and isinstance(v, tir.TExpr) and is_size_expression(v):
            return v  # a size of a shape-generic kernel: known when it runs
        if isinstance(v, tir.Const) and types.is_int(v.dtype) and not isinstance(v.value, bool):
            if v.value < 0:
                raise HybridTypeError(f"{what} cannot be negative (got {v.value})", span, None)
            return int(v.value)
        self.needs_value(v, span, what)
        raise HybridTypeError(f"{what} must be an integer known at compile time", span,
                              "use literals, constants and `x.shape[k]`")

    def needs_value(self, v, span, what):
        """Raise NeedsValue when ``v`` is computed from integer scalar parameters only (with
        literals, constants and shapes), so that specialising on their values makes it known."""
        if not isinstance(v, tir.TExpr) or not types.is_int(v.dtype):
            return
        params = []  # (name, whether an item of an array argument)
        for sub in tir.walk_expr(v):
            if isinstance(sub, tir.Load):
                t = self.tensors[sub.tensor]
                if not types.is_int(t.dtype):
                    return
                array = t.kind == "input" and t.ndim == 1 and all(isinstance(i, tir.Const) for i in sub.indices)
                if t.kind != "param" and not array:  # (an item of a tuple or list argument is a value of the call)
                    return
                params.append((t.source_name, array))
            elif isinstance(sub, tir.Var):
                return  # a loop variable: not a value of the call
        if params:
            name, array = params[0]
            raise NeedsValue(name, what, span, array)

    def dtype_value(self, e) -> str:
        if isinstance(e, syntax.Str):
            # hyb's names, and NumPy's spellings of them ("f4", "<f4", "i8", "u1", "f2", "double")
            try:
                order = np.dtype(e.value).byteorder if e.value != "bfloat16" else "="
            except Exception:  # NumPy's parse of any string: TypeError, ValueError ("99int64"), ...
                order = "="
            if order == ">":
                raise HybridTypeError(f"dtype {e.value!r} is big-endian", e.span,
                                      "tensors are in the machine's byte order: write "
                                      f"{'<' + e.value[1:]!r} or {np.dtype(e.value).name!r}")
            d = types.normalize(e.value, e.span)
            if d is None:
                close = difflib.get_close_matches(e.value, types.ALL_DTYPES, 1)
                raise HybridTypeError(f"unknown dtype {e.value!r}", e.span,
                                      f"did you mean {close[0]!r}?" if close else
                                      "use one of " + ", ".join(repr(d) for d in types.ALL_DTYPES)
                                      + ", or NumPy's spelling of one ('f4', 'i8', 'u1')")
            return d
        v = self.value(e)
        if isinstance(v, DTypeVal):
            return v.name
        raise HybridTypeError("expected a dtype", e.span, "write `x.dtype` or a string such as \"float32\"")

    def inline(self, callee: syntax.KernelDef, call: syntax.Call, targets):
        """Check the body of another kernel in place of a call to it (the call is inlined)."""
        if callee.name in self.call_stack:
            chain = " -> ".join(self.call_stack + [callee.name])
            raise HybridTypeError(f"recursive kernel call ({chain})", call.span, "kernels cannot call themselves")
        if call.kwargs:
            raise HybridTypeError("kernel calls take positional arguments only", next(iter(call.kwargs.values())).span,
                                  None)
        err = kernel_arity_error(callee, call)
        if err is not None:
            raise err
        bound, copies = {}, []
        for p, a in zip(callee.params, call.args):
            v = self.value(a)
            if isinstance(v, TensorRef):
                # a row (a sub-array, `cams[c]`) is a view: the callee's subscripts follow its prefix
                bound[p.name] = Sym("tensor", v.tensor.name, v.prefix or None)
            elif isinstance(v, (tir.Const, TupleVal, ShapeVal, DTypeVal)):  # known now: a constant there too
                bound[p.name] = Sym("const", p.name, v)
            elif isinstance(v, tir.TExpr):  # a value of the run: the callee's own copy, as Python passes it
                uname = self.unique(p.name)
                dtype = v.dtype  # (a Python number passed stays weak in the callee, as in Python)
                self.tensors[uname] = tir.Tensor(uname, (), dtype, "scalar", a.span, p.name,
                                                 private_to=tuple(self.loop_stack))
                copies.append(tir.Store(uname, [], self.coerce(v, dtype), a.span))
                bound[p.name] = Sym("scalar", uname)
            else:
                raise HybridUnsupportedError("arguments of a kernel call are tensors, shapes, dtypes or numbers",
                                             a.span, "pass a tensor by name, or a number")
        saved = (self.scopes, self.closed, self.returned, self.outputs, self.base_depth, self.assign_counts)
        # (the callee sees the module's constants and its own parameters, none of the caller's names)
        self.scopes = [{c: Sym("const", c, v) for c, v in self.module.constants.items()}, bound, {}]
        self.closed, self.returned, self.outputs, self.base_depth = {}, False, [], self.depth
        self.assign_counts = _assignment_counts(callee.body)
        self.call_stack.append(callee.name)
        body = copies + self.block(callee.body)
        if not self.returned:
            # a helper that writes tensors it is given (`fill(b, 2.0)`), called as a statement
            written = {st.tensor for st in tir.walk_stmts(body) if isinstance(st, tir.Store)}
            writes_args = any(sym.kind == "tensor" and sym.name in written for sym in bound.values())
            if targets is not None:
                raise HybridTypeError(f"kernel `{callee.name}` returns nothing, so its result cannot be assigned",
                                      call.span, f"call it as a statement: `{unparse.expr(call)}`"
                                      if writes_args else "end it with `return c` naming its output")
            if not writes_args:
                raise HybridTypeError(f"kernel `{callee.name}` returns nothing and writes none of its arguments",
                                      callee.span, "end it with `return c` naming its output, or write a tensor "
                                      "it is given")
        outputs = self.outputs
        self.call_stack.pop()
        self.scopes, self.closed, self.returned, self.outputs, self.base_depth, self.assign_counts = saved
        if targets is not None:
            if len(targets) != len(outputs):
                raise HybridTypeError(f"kernel `{callee.name}` returns {len(outputs)} tensor(s), "
                                      f"assigned to {len(targets)} name(s)", call.span, None)
            for tgt, out in zip(targets, outputs):
                if not isinstance(tgt, syntax.Name):
                    raise HybridTypeError("the result of a kernel call is assigned to a name", tgt.span, None)
                if self.lookup(tgt.id) not in (None,) and self.lookup(tgt.id).kind != "const":
                    raise HybridNameError(f"`{tgt.id}` is already defined", tgt.span, "choose a new name")
                self.declare(tgt.id, Sym("tensor", out))
        return body

    def bound_loop(self, call: syntax.Call) -> syntax.Call:
        """TVM's ``bind("threadIdx.x", n)``: a loop over ``range(n)`` whose iterations are
        independent, as a loop bound to a GPU's threads or blocks is: a ``parallel`` loop (on the
        CPU's threads, on the CUDA grid as hyb's GPU schedule maps it)."""
        names = ("threadIdx.x", "threadIdx.y", "threadIdx.z", "blockIdx.x", "blockIdx.y", "blockIdx.z",
                 "vthread")
        if len(call.args) != 2 or call.kwargs or not isinstance(call.args[0], syntax.Str):
            raise HybridTypeError("bind() takes the name of a GPU index and an extent", call.span,
                                  'write `for tx in bind("threadIdx.x", n):`')
        if call.args[0].value not in names:
            raise HybridTypeError(f"bind() to {call.args[0].value!r}: not a GPU index", call.args[0].span,
                                  "bind to one of " + ", ".join(repr(n) for n in names))
        return syntax.Call(call.span, syntax.Name(call.func.span, "parallel"), [call.args[1]], {})

    def grid_loop(self, s: syntax.For, call: syntax.Call):
        if len(call.args) != 1 or call.kwargs:
            raise HybridTypeError("grid() takes one argument, a shape", call.span, "for idx in grid(c.shape):")
        dims = self.shape_value(call.args[0])
        name = s.target.id
        if s.span is not None:
            where = (s.span.line, s.span.col)
            self.grid_ranks[where] = len(dims) if self.grid_ranks.get(where, len(dims)) == len(dims) else None
        old = self.lookup(name)
        if old is not None and old.kind != "const":
            raise HybridNameError(f"loop variable `{name}` is already in use", s.target.span,
                                  "choose another name for this loop variable")
        vars_ = [self.unique(f"{name}_{k}") for k in range(len(dims))]
        self.var_names.update({v: f"{name}[{k}]" for k, v in enumerate(vars_)})
        self.push()
        self.depth += 1
        self.declare(name, Sym("grid", name, vars_))
        self.loop_stack.extend(vars_)
        with self.perhaps(not all(isinstance(d, int) and d > 0 for d in dims)):
            body = self.block(s.body)
        del self.loop_stack[len(self.loop_stack) - len(vars_):]
        self.depth -= 1
        self.pop()
        for k in reversed(range(len(dims))):
            body = [tir.Loop(vars_[k], tir.Const(types.WEAK_INT, 0), tir.dim(dims[k]), 1, body, "grid", s.span)]
        return body

    def for_loop(self, s: syntax.For):
        call = s.iter
        if isinstance(call, syntax.Call) and isinstance(call.func, syntax.Name) and call.func.id == "grid":
            return self.grid_loop(s, call)
        if isinstance(call, syntax.Call) and isinstance(call.func, syntax.Name) and call.func.id == "bind":
            call = self.bound_loop(call)
        if not (isinstance(call, syntax.Call) and isinstance(call.func, syntax.Name) and call.func.id in LOOP_KINDS):
            raise loop_iterable_error(call, lambda n: self.lookup(n) is not None or n in self.module.kernels)
        kind = call.func.id
        if call.kwargs:
            raise HybridTypeError(f"{kind}() takes no keyword arguments", next(iter(call.kwargs.values())).span, None)
        if not 1 <= len(call.args) <= 3:
            raise HybridTypeError(f"{kind}() takes 1 to 3 arguments, got {len(call.args)}", call.span,
                                  f"{kind}(stop), {kind}(start, stop) or {kind}(start, stop, step)")
        vals = [self.expr(a) for a in call.args]
        for v, a in zip(vals, call.args):
            if not types.is_int(v.dtype):
                raise HybridTypeError(f"loop bounds must be integers, this is {v.dtype}", a.span,
                                      "convert with int32(...) or use an integer expression")
        if len(vals) == 1:
            start, stop, step = tir.Const(types.WEAK_INT, 0), vals[0], 1
        else:
            start, stop = vals[0], vals[1]
            step = 1
            if len(vals) == 3:
                sv = vals[2]
                if not (isinstance(sv, tir.Const) and isinstance(sv.value, int)):
                    self.needs_value(sv, call.args[2].span, "the loop step")
                    raise HybridTypeError("the loop step must be an integer constant", call.args[2].span, None)
                if sv.value == 0:
                    raise HybridTypeError("the loop step cannot be zero", call.args[2].span, None)
                step = int(sv.value)
        name = s.target.id
        old = self.lookup(name)
        if old is not None and old.kind != "const":
            what = "an enclosing loop" if old.kind == "loop" else f"a {self.kind_word(old)}"
            raise HybridNameError(f"loop variable `{name}` is already in use by {what}", s.target.span,
                                  "choose another name for this loop variable")
        if kind == "const_range" and isinstance(start, tir.Const) and isinstance(stop, tir.Const):
            trips = range(int(start.value), int(stop.value), step)
            if len(trips) * self.unrolling <= UNROLLED:  # (nested ones: their product)
                return self.unrolled(s, name, trips)
        var = self.unique(name)
        self.var_names[var] = name
        self.push()
        self.depth += 1
        self.declare(name, Sym("loop", var))
        self.loop_stack.append(var)
        runs = (isinstance(start, tir.Const) and isinstance(stop, tir.Const)
                and len(range(int(start.value), int(stop.value), step)) > 0)
        with self.perhaps(not runs):
            body = self.block(s.body)
        self.loop_stack.pop()
        self.depth -= 1
        self.pop()
        return tir.Loop(var, start, stop, step, body, kind, s.span)

    def unrolled(self, s: syntax.For, name: str, trips: range) -> list:
        """A ``const_range`` loop of known bounds, unrolled as TVM's parser does: its body once per
        value, the variable a constant in each (so `x.shape[i]` and `inputs[i]` are known)."""
        out = []
        self.depth += 1
        outer = self.unrolling
        self.unrolling = outer * max(len(trips), 1)
        for v in trips:
            self.push()
            self.declare(name, Sym("const", name, tir.Const(types.WEAK_INT, v)))
            out.extend(self.block(s.body))
            self.pop()
        self.unrolling = outer
        self.depth -= 1
        return out

    def if_stmt(self, s: syntax.If):
        cond = self.condition(s.cond)
        known = known_condition(cond)
        if known is not None:
            # decided now (shapes, constants, an unrolled loop's variable): only the branch that
            # runs is checked, in place, as TVM's parser folds it (the other may index out of
            # range for this shape, or `return`)
            return self.block(s.body if known else s.orelse)
        # A name every branch assigns is one scalar, visible after the `if` (as in Python, and in
        # TVM, whose scopes are loops only)
        mine = [n for n in always_assigned(s.body) & always_assigned(s.orelse)
                if self.lookup(n) is None and n not in self.hoisted]
        for n in mine:
            self.hoisted[n] = len(self.scopes) - 1
        self.depth += 1
        with self.perhaps(True):  # either branch may not run (a condition known now was folded above)
            self.push()
            body = self.block(s.body)
            self.pop()
            self.push()
            orelse = self.block(s.orelse)
            self.pop()
        self.depth -= 1
        for n in mine:
            self.hoisted.pop(n, None)
        return tir.If(cond, body, orelse, s.span)

    @contextlib.contextmanager
    def perhaps(self, maybe: bool):
        """A block that ``maybe`` does not run (see ``self.maybe``)."""
        self.maybe += int(maybe)
        try:
            yield
        finally:
            self.maybe -= int(maybe)

    def condition(self, e) -> tir.TExpr:
        c = self.expr(e)
        if not types.is_bool(c.dtype):
            raise HybridTypeError(f"a condition must be a comparison or a bool, this is {c.dtype}", e.span,
                                  "compare explicitly, e.g. `x != 0`")
        return c

def _assignment_counts(body: list) -> dict:
    """How often each plain name is assigned (``=`` or an augmented assignment) in a kernel body."""
    counts: dict = {}

    class V(syntax.NodeVisitor):
        def visit_Assign(self, node):
            if isinstance(node.target, syntax.Name):
                counts[node.target.id] = counts.get(node.target.id, 0) + 1

        def visit_AugAssign(self, node):
            if isinstance(node.target, syntax.Name):
                counts[node.target.id] = counts.get(node.target.id, 0) + 2

    v = V()
    for st in body:
        v.visit(st)
    return counts
