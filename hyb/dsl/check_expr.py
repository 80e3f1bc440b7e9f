"""Checking expressions: AST expressions to typed IR, for :mod:`hyb.dsl.check`."""
from __future__ import annotations

import copy
import difflib
import math
import re

import numpy as np

from ..errors import HybridError, HybridIndexError, HybridNameError, HybridTypeError, HybridUnsupportedError, Span
from . import ast as syntax
from . import tir
from . import types
from . import unparse
from .folding import convert_const, fold, fold_intrinsic, known_condition, negate, wrap_int
from .intrinsics import FLOAT_MATH, INTRINSICS, PREDICATES, ROUNDING
from .scopes import (BUILTIN_NAMES, CAST_NAMES, LOOP_KINDS, MAX_NUM_THREADS, TENSOR_MAKERS, DTypeVal, GridVal, ShapeVal,
                     Sym, TensorRef, TupleVal)
from .desugar import FOREIGN_MODULES
from .signature import NeedsValue

# The NumPy/math names of built-in functions (the modules: desugar.FOREIGN_MODULES).
FOREIGN_FUNCTIONS = {"maximum": "max", "minimum": "min", "fabs": "abs", "absolute": "abs", "arctan": "atan",
                     "arctan2": "atan2", "round_": "round", "rint": "round"}


def is_foreign(e: syntax.Attribute, lookup) -> bool:
    """``np.x``, ``math.x``, ...: an attribute of a module users reach for, not of a kernel name."""
    return isinstance(e.value, syntax.Name) and e.value.id in FOREIGN_MODULES and lookup(e.value.id) is None


def foreign_error(e: syntax.Attribute, call: bool) -> HybridNameError:
    """`np.float64`, `np.exp(x)`, `math.sqrt(x)`: NumPy's and Python's spellings of what kernels
    write as a string dtype or a built-in function."""
    mod, attr = e.value.id, e.attr
    if attr in types.ALL_DTYPES or attr in ("float", "int", "bool_"):
        dt = {"float": "float64", "int": "int64", "bool_": "bool"}.get(attr, attr)
        if call:
            return HybridNameError(f"`{mod}.{attr}(...)` is NumPy's spelling of a cast", e.span, f"write `{dt}(x)`")
        return HybridNameError(f"`{mod}.{attr}` is NumPy's name of a dtype; kernels write dtypes as strings",
                               e.span, f'write "{dt}"')
    name = FOREIGN_FUNCTIONS.get(attr, attr)
    if name in INTRINSICS or name in ("abs", "max", "min"):
        return HybridNameError(f"`{mod}.{attr}` is not available inside kernels", e.span,
                               f"write `{name}(...)`: the built-in `{name}` computes what NumPy's does")
    return HybridNameError(f"`{mod}` is not available inside kernels", e.value.span,
                           "kernels use their own built-in functions (exp, sqrt, max, ...) and loops; "
                           "see the list in docs/reference/language.md")


def astype_error(e: syntax.Call) -> HybridTypeError:
    """``x.astype(dtype)``: NumPy's conversion of a whole array."""
    target = e.args[0] if e.args else None
    dt = (target.value if isinstance(target, syntax.Str) else
          target.attr if isinstance(target, syntax.Attribute) else "float32")
    return HybridTypeError("`.astype(...)` is NumPy's; kernels convert one value at a time", e.span, f"write `{dt}(x)`")


TENSOR_ATTRIBUTES = ("shape", "dtype", "ndim")


def attribute_error(e: syntax.Attribute) -> HybridTypeError:
    close = difflib.get_close_matches(e.attr, list(TENSOR_ATTRIBUTES), 1)
    return HybridTypeError(f"tensors have no attribute `{e.attr}`", e.span,
                           f"did you mean `.{close[0]}`?" if close else "tensors have .shape, .dtype and .ndim")


def intrinsic_arity_error(name: str, e: syntax.Call) -> HybridTypeError | None:
    """The error of a call of intrinsic ``name`` with the wrong number of arguments, else None."""
    params = INTRINSICS[name]
    n = len(params.split(", "))
    if not ((len(e.args) < 2) if params.endswith("...") else (len(e.args) != n)):
        return None
    need = "at least 2 arguments" if params.endswith("...") else f"{n} argument{'s' if n != 1 else ''}"
    return HybridTypeError(f"{name}() takes {need}, got {len(e.args)}", e.span, f"{name}({params})")


def kernel_in_expression_error(call: syntax.Call) -> HybridTypeError:
    """A call of another kernel used as a value inside an expression (it must be a statement)."""
    name = call.func.id
    return HybridTypeError(f"a call of kernel `{name}` inside an expression", call.span,
                           f"a kernel call is a statement of its own: write `t = {name}(...)` first, then use `t`")


def kernel_arity_error(callee: syntax.KernelDef, call: syntax.Call) -> HybridTypeError | None:
    """The error of a call of another kernel with the wrong number of arguments, else None."""
    if len(call.args) == len(callee.params):
        return None
    return HybridTypeError(f"kernel `{callee.name}` takes {len(callee.params)} argument(s), got {len(call.args)}",
                           call.span, f"{callee.name}({', '.join(p.name for p in callee.params)})")


def unknown_function_error(name: str, span, choices) -> HybridNameError:
    close = difflib.get_close_matches(name, list(choices), 1)
    return HybridNameError(f"unknown function `{name}`", span, f"did you mean `{close[0]}`?" if close else None)


def loop_iterable_error(it, known) -> HybridError:
    """The error of a `for` loop over something other than range(...) and its hints: a misspelled
    hint (`rnage`: not a built-in, nor a name ``known(name)`` says the kernel has) is an unknown
    function."""
    if isinstance(it, syntax.Call) and isinstance(it.func, syntax.Name) and it.func.id not in INTRINSICS \
            and it.func.id not in BUILTIN_NAMES and not known(it.func.id):
        return unknown_function_error(it.func.id, it.func.span, list(LOOP_KINDS) + ["grid"])
    return HybridTypeError("a `for` loop must iterate over range(...)", it.span,
                           "write `for i in range(n):` (or serial/parallel/vectorize/unroll/reduce)")


def as_written(e: syntax.Name) -> str:
    """A name as the source spells it: ``float`` for the ``float64`` cast desugaring made of it."""
    s = e.span
    if s is not None and s.source_line and s.end_line == s.line:
        text = s.source_line[s.col - 1:s.end_col - 1]
        if text.isidentifier():
            return text
    return e.id


def outside_error(module, e: syntax.Name) -> HybridNameError | None:
    """For a name the Python code around a decorated kernel defines: the hint to pass it in."""
    outside = module.outside.get(e.id)
    if outside is None:
        return None
    return HybridNameError(f"unknown name `{e.id}`", e.span,
                           f"`{e.id}` is {outside} outside the kernel, which kernels cannot read: pass it as an argument")


class ExpressionChecker:
    """Expressions of the kernel language to typed IR: names, subscripts, operators with NumPy's
    promotion, calls of intrinsics, casts and tensor makers.

    Mixed into the kernel checker, whose scopes and tensors it uses."""

    # ------------------------------------------------------------ expressions
    def expr(self, e) -> tir.TExpr:
        """A scalar expression."""
        v = self.value(e)
        if isinstance(v, tir.TExpr):
            return v
        if isinstance(v, TensorRef) and v.prefix:
            raise self.count_error(v.tensor, len(v.prefix), v.span)
        if isinstance(v, TensorRef):
            raise HybridTypeError(f"tensor `{v.tensor.source_name}` is used as a number", e.span,
                                  f"index it: `{v.tensor.source_name}[i]`")
        if isinstance(v, ShapeVal):
            raise HybridTypeError("a shape is used as a number", e.span, "pick one dimension: `x.shape[0]`")
        if isinstance(v, DTypeVal):
            raise HybridTypeError("a dtype is used as a number", e.span, None)
        raise HybridTypeError("a tuple is used as a number", e.span, None)

    def value(self, e):
        m = getattr(self, "v_" + type(e).__name__)
        return m(e)

    def v_Num(self, e: syntax.Num):
        if isinstance(e.value, bool):
            return tir.Const("bool", e.value, span=e.span)
        if isinstance(e.value, int):
            return tir.Const(types.WEAK_INT, e.value, span=e.span)
        return tir.Const(types.WEAK_FLOAT, e.value, span=e.span)

    def v_Str(self, e: syntax.Str):
        raise HybridTypeError("a string is only allowed as a dtype", e.span,
                              "strings name dtypes: output_tensor(shape, \"float32\")")

    def v_FString(self, e: syntax.FString):
        raise HybridUnsupportedError("an f-string outside print()", e.span,
                                     'f-strings are for printing: `print(f"i = {i}")`')

    def v_Tuple(self, e: syntax.Tuple):
        return TupleVal([self.value(x) for x in e.elts])

    def unknown_name(self, e: syntax.Name):
        if e.id in self.closed:
            decl = self.closed[e.id]
            raise HybridNameError(f"`{e.id}` is not visible here", e.span,
                                  f"it was declared on line {decl.line} inside a block that has ended; "
                                  "assign it before that block to use it after")
        err = outside_error(self.module, e)
        if err is not None:
            raise err
        candidates = [n for scope in self.scopes for n in scope] + list(BUILTIN_NAMES)
        close = difflib.get_close_matches(e.id, candidates, 1)
        raise HybridNameError(f"unknown name `{e.id}`", e.span,
                              f"did you mean `{close[0]}`?" if close else None)

    def v_Name(self, e: syntax.Name):
        sym = self.lookup(e.id)
        if sym is None:
            if e.id in BUILTIN_NAMES or e.id in INTRINSICS:
                raise HybridTypeError(f"`{e.id}` is a function; call it", e.span, None)
            self.unknown_name(e)
        if sym.kind == "tensor":  # (a row passed to a called kernel: the sub-array its value fixes)
            return TensorRef(self.tensors[sym.name], tuple(sym.value or ()), e.span if sym.value else None)
        if sym.kind == "scalar":
            t = self.tensors[sym.name]
            return tir.Load(t.dtype, sym.name, [], span=e.span)
        if sym.kind == "loop":
            return tir.Var(types.WEAK_INT, sym.name, span=e.span)
        if sym.kind == "grid":
            return GridVal(sym.value)
        if isinstance(sym.value, tir.Const):  # a local constant
            return tir.Const(sym.value.dtype, sym.value.value, span=e.span)
        if isinstance(sym.value, tir.TExpr):  # a name for an index expression (a fresh copy each time)
            return copy.deepcopy(sym.value)
        if isinstance(sym.value, (TupleVal, ShapeVal, DTypeVal)):  # a tuple, a shape or a dtype known now
            return sym.value
        # module constant (which may use the others)
        c_expr, _ = sym.value
        resolving = self.__dict__.setdefault("resolving", set())
        if e.id in resolving:
            raise HybridNameError(f"module constant `{e.id}` is defined in terms of itself", e.span,
                                  "give it a value that does not use its own name")
        resolving.add(e.id)
        try:
            return self.const_value(c_expr, e.span)
        finally:
            resolving.discard(e.id)

    def const_value(self, ce, span):
        if isinstance(ce, syntax.Num):
            return self.v_Num(syntax.Num(span, ce.value))
        if isinstance(ce, syntax.Tuple):
            return TupleVal([self.const_value(x, span) for x in ce.elts])
        if isinstance(ce, syntax.UnaryOp) and ce.op == "-" and isinstance(ce.operand, syntax.Num):
            return self.v_Num(syntax.Num(span, -ce.operand.value))
        if isinstance(ce, syntax.Str):
            d = types.normalize(ce.value, span)
            if d:
                return DTypeVal(d)
        # Other constant expressions are evaluated in the module scope (the module's constants in it).
        fresh = type(self)(self.kdef, self.module)
        fresh.scopes[0].update({n: Sym("const", n, c) for n, c in self.module.constants.items()})
        fresh.resolving = self.__dict__.setdefault("resolving", set())
        v = fresh.value(ce)
        if isinstance(v, tir.Const):
            return tir.Const(v.dtype, v.value, span=span)
        return v

    def v_Attribute(self, e: syntax.Attribute):
        if is_foreign(e, self.lookup):
            raise foreign_error(e, call=False)
        base = self.value(e.value)
        if isinstance(base, TensorRef):
            if e.attr == "shape":
                return ShapeVal(base.shape)
            if e.attr == "dtype":
                return DTypeVal(base.tensor.dtype)
            if e.attr == "ndim":
                return tir.Const(types.WEAK_INT, base.ndim, span=e.span)
            raise attribute_error(e)
        if e.attr == "dtype" and isinstance(base, tir.TExpr):
            return DTypeVal(types.concrete(base.dtype))  # a scalar's dtype, e.g. `s.dtype(0)`
        raise HybridTypeError(f"`.{e.attr}` is only defined on tensors", e.span,
                              "scalars have .dtype only" if isinstance(base, tir.TExpr) else None)

    def v_Subscript(self, e: syntax.Subscript):
        base = self.value(e.value)
        if e.unpack:
            self.check_unpack(base, e)
        if isinstance(base, TensorRef) and len(e.indices) == 1 and isinstance(e.indices[0], syntax.Slice):
            items = self.shape_argument(base, e.span, "a sliced shape")  # `out_shape[1:]`
            if items is not None:
                return TupleVal([tir.Const(types.WEAK_INT, v) for v in items][self.const_slice(e.indices[0])])
        if isinstance(base, TensorRef):
            t = base.tensor
            subs = None if self.whole_index(t, e) else self.subscripts(e)
            if subs is not None and len(base.prefix) + len(subs) < t.ndim:
                # fewer subscripts than dimensions: the sub-array, indexed further (`b[i][j]`) or
                # asked its length, shape or dtype
                prefix = base.prefix + tuple(self.index_values(t, subs, len(base.prefix), bounds=True))
                return TensorRef(t, prefix, e.span)
            idx = self.indices(t, e, base.prefix, subs)
            known = self.known_values.get(t.name)
            if known is not None and all(isinstance(i, tir.Const) for i in idx):
                k = idx[0].value
                if 0 <= k < len(known):  # an array the kernel is compiled for the values of
                    return tir.Const(t.dtype, known[k], span=e.span)
            return tir.Load(t.dtype, t.name, idx, span=e.span)
        if isinstance(base, GridVal):
            base = TupleVal([tir.Var(types.WEAK_INT, v, span=e.span) for v in base.vars])
        if isinstance(base, (ShapeVal, TupleVal)) and len(e.indices) == 1 and isinstance(e.indices[0], syntax.Slice):
            return TupleVal(self.tuple_items(base)[self.const_slice(e.indices[0])])  # `x.shape[1:]`
        if isinstance(base, (ShapeVal, TupleVal)):
            items = list(base.dims) if isinstance(base, ShapeVal) else base.items
            if len(e.indices) != 1:
                raise HybridTypeError("a shape is indexed by one integer", e.span, None)
            k = self.expr(e.indices[0])
            if not (isinstance(k, tir.Const) and types.is_int(k.dtype)):
                if isinstance(base, TupleVal):
                    raise HybridUnsupportedError(
                        "a tuple or list constant indexed by a value known only when the kernel runs",
                        e.indices[0].span, "index it with a constant, or pass the table as an array argument "
                        "(`np.array(T)`) and index that")
                raise HybridTypeError("the index into a shape must be an integer constant", e.indices[0].span,
                                      "write `x.shape[0]`; shapes are known at compile time")
            n = len(items)
            if not -n <= k.value < n:
                raise HybridTypeError(f"index {k.value} is out of range for a shape of {n} dimension(s)",
                                      e.indices[0].span, None)
            item = items[k.value]
            if isinstance(item, int):
                return tir.Const(types.WEAK_INT, item, span=e.span)
            return item
        self.not_indexable(base, e.value)

    def shape_argument(self, ref: TensorRef, span, what: str):
        """The items of a 1-D integer argument used as ``what`` (a shape passed as a tuple or list),
        which the kernel is compiled for (NeedsValue until it is); None for any other tensor."""
        t = ref.tensor
        if ref.prefix or t.ndim != 1 or not types.is_int(t.dtype) or t.kind != "input":
            return None
        if t.name not in self.known_values:
            raise NeedsValue(t.source_name, what, span, array=True)
        return self.known_values[t.name]

    def assert_message(self, msg) -> str:
        """An assert's message: a string, or one formatted as TVM's script evaluates it (``"%s and
        %s" % (x, y)``, an f-string): values known now are written in, others as their text."""
        if isinstance(msg, syntax.Str):
            return msg.value
        if isinstance(msg, syntax.FString):
            return "".join(p.value if isinstance(p, syntax.Str) else
                           self.message_value(p.value, "{:" + p.spec + "}" if p.spec else "{}") for p in msg.parts)
        if isinstance(msg, syntax.BinOp) and msg.op == "%" and isinstance(msg.left, syntax.Str):
            args = list(msg.right.elts) if isinstance(msg.right, syntax.Tuple) else [msg.right]
            out, k, at = [], 0, 0
            for m in re.finditer(r"%[-#0 +]*\d*(?:\.\d+)?[diouxXeEfFgGcrsa%]", msg.left.value):
                out.append(msg.left.value[at:m.start()])
                at = m.end()
                if m.group() == "%%":
                    out.append("%")
                    continue
                if k >= len(args):
                    raise HybridTypeError("the assert message has more `%` fields than values", msg.span, None)
                out.append(self.message_value(args[k], m.group()))
                k += 1
            if k != len(args):
                raise HybridTypeError("the assert message has fewer `%` fields than values", msg.span, None)
            return "".join(out) + msg.left.value[at:]
        raise HybridTypeError("the message of an `assert` is a string", msg.span,
                              'write `assert n > 0, "n must be positive"` (or format it with `%` or an f-string)')

    def message_value(self, e, spec: str) -> str:
        """One value of an assert message: formatted when known now, else its text in backticks."""
        v = self.value(e)
        if isinstance(v, tir.Const) and not isinstance(v.value, bool):
            try:
                return spec.format(v.value) if spec.startswith("{") else spec % v.value
            except (ValueError, TypeError):
                pass
        return f"`{unparse.expr(e)}`"

    def const_slice(self, sl: syntax.Slice) -> slice:
        """A slice of a tuple or a shape: its bounds and step are integers known now."""
        parts = []
        for part in (sl.lower, sl.upper, sl.step):
            v = self.expr(part) if part is not None else None
            if v is not None and not (isinstance(v, tir.Const) and types.is_int(v.dtype)):
                self.needs_value(v, part.span, "a slice bound")
                raise HybridTypeError("the bounds of a slice of a tuple or a shape must be integers known at "
                                      "compile time", part.span, "write `x.shape[1:]` or `idx[:2]`")
            parts.append(int(v.value) if v is not None else None)
        if parts[2] == 0:
            raise HybridTypeError("slice step cannot be zero", sl.step.span, None)
        return slice(*parts)

    def v_Slice(self, e: syntax.Slice):
        raise HybridUnsupportedError("slices are not supported; index one element at a time", e.span,
                                     "write a loop over the range the slice would cover (tuples and shapes "
                                     "may be sliced: `x.shape[1:]`)")

    def check_unpack(self, base, e: syntax.Subscript):
        """``x, y = value``: ``value`` must be a shape, a tuple or a grid index of as many items."""
        if isinstance(base, GridVal):
            n = len(base.vars)
        elif isinstance(base, ShapeVal):
            n = len(base.dims)
        elif isinstance(base, TupleVal):
            n = len(base.items)
        else:
            what = "a tensor" if isinstance(base, TensorRef) else "this value"
            raise HybridTypeError(f"cannot unpack {what} into {e.unpack} names", e.value.span,
                                  "unpack a shape (`n, m = a.shape`), a tuple or a grid index; "
                                  "read a tensor's elements one by one")
        if n != e.unpack:
            raise HybridTypeError(f"{n} value{'s' if n != 1 else ''} assigned to {e.unpack} targets", e.value.span,
                                  "write as many targets on the left as the value has items")

    def whole_index(self, t: tir.Tensor, e: syntax.Subscript) -> bool:
        """``x[()]`` of a 0-d tensor, or ``x[idx]`` with ``idx`` a grid loop's index."""
        if t.ndim == 0 and len(e.indices) == 1 and isinstance(e.indices[0], syntax.Tuple) and not e.indices[0].elts:
            return True
        if len(e.indices) == 1 and isinstance(e.indices[0], syntax.Name):
            sym = self.lookup(e.indices[0].id)
            return sym is not None and sym.kind == "grid"
        return False

    @staticmethod
    def count_error(t: tir.Tensor, n: int, span) -> HybridTypeError:
        """``t`` indexed with ``n`` subscripts, not one per dimension."""
        if t.kind == "input":
            return HybridTypeError(
                f"argument `{t.source_name}` has {t.ndim} dimension{'s' if t.ndim != 1 else ''} (shape {t.shape}), "
                f"but `{t.source_name}` is indexed with {n} subscript{'s' if n != 1 else ''} here", span,
                f"pass an array of {n} dimension{'s' if n != 1 else ''} for `{t.source_name}`, or index it with "
                f"{t.ndim} subscript{'s' if t.ndim != 1 else ''}")
        return HybridTypeError(
            f"`{t.source_name}` has {t.ndim} dimension{'s' if t.ndim != 1 else ''} but is indexed with {n}", span,
            f"write {t.source_name}[{', '.join('i' + str(k) for k in range(t.ndim))}]")

    def subscripts(self, e: syntax.Subscript) -> list:
        """``e``'s subscripts: one tuple-valued subscript (``out[(i,) + idx]``, ``b[idx[1:]]``) stands
        for its items (a single subscript comes back evaluated)."""
        if len(e.indices) == 1 and not isinstance(e.indices[0], syntax.Slice):
            v = self.value(e.indices[0])
            items = self.tuple_items(v)
            if items is not None:
                return items
            return [v if isinstance(v, tir.TExpr) else e.indices[0]]
        return list(e.indices)

    def indices(self, t: tir.Tensor, e: syntax.Subscript, prefix: tuple = (), subs=None) -> list:
        """The subscripts of ``e`` (``subs``: as :meth:`subscripts` gave them) after the ``prefix``
        already written (``b[i][j]``): one per dimension."""
        if self.whole_index(t, e) and not prefix:
            if t.ndim == 0:
                return []  # x[()] on a 0-d tensor
            sym = self.lookup(e.indices[0].id)
            if len(sym.value) != t.ndim:
                raise HybridTypeError(f"`{t.source_name}` has {t.ndim} dimension(s) but the grid index "
                                      f"`{e.indices[0].id}` has {len(sym.value)}", e.span, None)
            return [tir.Var(types.WEAK_INT, v, span=e.span) for v in sym.value]
        subs = self.subscripts(e) if subs is None else subs
        if len(prefix) + len(subs) != t.ndim:
            raise self.count_error(t, len(prefix) + len(subs), e.span)
        return list(prefix) + self.index_values(t, subs, len(prefix))

    def index_values(self, t: tir.Tensor, exprs: list, first_axis: int, bounds: bool = False) -> list:
        """Integer index expressions of ``t`` from axis ``first_axis`` on; a known negative one is an
        error, and with ``bounds`` (a sub-array's, which may be read for its length only) one past the end."""
        out = []
        for axis, ie in enumerate(exprs, first_axis):
            v = ie if isinstance(ie, tir.TExpr) else self.expr(ie)
            if isinstance(v, tir.Const) and types.is_int(v.dtype) and v.value < 0:
                last = f"{t.source_name}.shape[{axis}] - {-v.value}"
                if t.ndim == 1:
                    last = f"{t.source_name}[{last}]"
                raise HybridIndexError(f"index {v.value} is negative: indices do not wrap around in kernels", ie.span,
                                       f"to count from the end, write `{last}`")
            if not types.is_int(v.dtype):
                raise HybridTypeError(f"an index must be an integer, this is {v.dtype}", ie.span,
                                      self.index_hint(v))
            size = t.shape[axis]
            if (bounds and isinstance(v, tir.Const) and isinstance(size, int)
                    and isinstance(v.value, int) and v.value >= size):
                raise HybridIndexError(f"index {v.value} is out of bounds for axis {axis} of "
                                       f"`{t.source_name}` with size {size}", ie.span, None)
            out.append(v)
        return out

    def index_hint(self, v: tir.TExpr) -> str:
        """The hint for a non-integer index: where a scalar it reads became a float, if one did."""
        for sub in tir.walk_expr(v):
            if isinstance(sub, tir.Load) and sub.tensor in self.widened:
                t = self.tensors[sub.tensor]
                dtype, span = self.widened[sub.tensor]
                if types.is_float(dtype) and span is not None:
                    return (f"`{t.source_name}` is a {dtype} because line {span.line} assigns it a {dtype} value "
                            f"(a scalar takes the type of all its values); convert that value with int64(...)")
        return "convert it with int32(...)"

    def v_BinOp(self, e: syntax.BinOp):
        if e.op == "+":
            a, b = self.value(e.left), self.value(e.right)
            left, right = self.tuple_items(a), self.tuple_items(b)
            if left is not None and right is not None:
                return TupleVal(left + right)  # `(n,) + a.shape`, as Python
            return self.binop(e.op, self.expr_of(a, e.left), self.expr_of(b, e.right), e.span)
        return self.binop(e.op, self.expr(e.left), self.expr(e.right), e.span)

    @staticmethod
    def tuple_items(v):
        """The items of a tuple, a shape or a grid index known now (None for anything else)."""
        if isinstance(v, TupleVal):
            return list(v.items)
        if isinstance(v, ShapeVal):
            return [tir.Const(types.WEAK_INT, d) if isinstance(d, int) else d for d in v.dims]
        if isinstance(v, GridVal):
            return [tir.Var(types.WEAK_INT, name) for name in v.vars]
        return None

    def expr_of(self, v, e) -> tir.TExpr:
        """``v``, the value of ``e``, as a scalar expression (the error of :meth:`expr` otherwise)."""
        return v if isinstance(v, tir.TExpr) else self.expr(e)

    def binop(self, op: str, a: tir.TExpr, b: tir.TExpr, span: Span) -> tir.TExpr:
        if op == "@":
            raise HybridUnsupportedError("`@` is not supported inside kernels", span, "write the loops out")
        if types.is_bool(a.dtype) and types.is_bool(b.dtype):
            raise HybridTypeError(f"arithmetic `{op}` on two bool values", span,
                                  "combine conditions with `and` / `or`, or convert one first, e.g. int32(c)")
        if types.is_bool(a.dtype) or types.is_bool(b.dtype):
            # as NumPy: a bool takes the other operand's type (`x * mask`), a Python number's default
            # one beside a Python number (`(x > 0) + 1` is an int64)
            other = (b if types.is_bool(a.dtype) else a).dtype
            a, b = (tir.Cast(types.concrete(other), v, span=v.span) if types.is_bool(v.dtype) else v for v in (a, b))
        if op == "/":
            t = types.true_divide_type(a.dtype, b.dtype)
        else:
            t = types.promote(a.dtype, b.dtype)
        for e in (a, b):
            if (isinstance(e, tir.Load) and not e.indices and e.dtype == types.WEAK_INT and types.is_int(t)
                    and not types.is_weak(t) and t != "int64" and self.tensors[e.tensor].kind == "param"):
                # a Python int argument in arithmetic at a narrower integer: as in NumPy, its value
                # must fit (checked at each call)
                self.__dict__.setdefault("fits", []).append((e.tensor, t, e.span))
        self.note_float64(t, (a, b), span)
        a, b = self.coerce(a, t), self.coerce(b, t)
        if op == "**" and types.is_int(t) and isinstance(b, tir.Const) and b.value < 0:
            raise HybridTypeError("integers to negative integer powers are not allowed", b.span,
                                  "make the base a float, e.g. `float64(x) ** -2` or `x ** -2.0`")
        if isinstance(a, tir.Const) and isinstance(b, tir.Const) and types.is_weak(t):
            folded = fold(op, a.value, b.value)
            if folded is not None:
                return tir.Const(t, folded, span=span)
        if (isinstance(a, tir.Const) and isinstance(b, tir.Const) and types.is_int(t) and op != "/"
                and not isinstance(a.value, bool) and not isinstance(b.value, bool)):
            # integers of a fixed dtype known now (a NumPy scalar argument the kernel is compiled
            # for, times a shape): folded exactly, then wrapped into the dtype as NumPy computes
            folded = fold(op, int(a.value), int(b.value))
            if folded is not None:
                return tir.Const(t, wrap_int(folded, t), span=span)
        return tir.Bin(t, op, a, b, span=span)

    def note_float64(self, t: str, operands, span: Span):
        """Keep the place where a float32 (float16, bfloat16) value is computed in float64 though
        no operand was written as float64: a promotion (a float32 with an int64 or an int32) or a
        float64 scalar argument (a NumPy float64 passed for a hyper-parameter).  A kernel whose arrays hold
        narrower floats gets a warning naming the first (:func:`float64_note`)."""
        if t != "float64" or not any(types.concrete(o.dtype) in ("float32", "float16", "bfloat16") for o in operands):
            return  # (float64 from integers alone, `a[i] * 0.5`, computes no narrower float in float64)
        argument = None
        for o in operands:
            if o.dtype != "float64":
                continue
            if not (isinstance(o, tir.Load) and not o.indices and self.tensors[o.tensor].kind == "param"):
                return  # a float64 the user wrote (a float64 array, a `float64(...)` cast, ...)
            argument = self.tensors[o.tensor].source_name
        if argument is not None:
            why = f"the float64 argument `{argument}` makes it float64"
        else:
            names = {types.WEAK_FLOAT: "a Python float", types.WEAK_INT: "a Python int"}
            why = " and ".join(dict.fromkeys(names.get(o.dtype, o.dtype) for o in operands)) + " meet in float64"
        self.__dict__.setdefault("float64_sites", []).append((span, why, argument))

    def coerce(self, e: tir.TExpr, dtype: str) -> tir.TExpr:
        if e.dtype == dtype:
            return e
        if isinstance(e, tir.Const):
            if types.is_weak(e.dtype) and types.is_int(dtype) and not types.is_weak(dtype):
                self.check_fits(e, dtype)
            return tir.Const(dtype, convert_const(e.value, e.dtype, dtype), span=e.span)
        return tir.Cast(dtype, e, span=e.span)

    def check_fits(self, e: tir.Const, dtype: str):
        """A Python number given to an integer dtype must fit in it: NumPy raises otherwise."""
        kind = "integer" if e.dtype == types.WEAK_INT else "float"
        if not math.isfinite(e.value):
            raise HybridTypeError(f"Python float {e.value} cannot be converted to {dtype}", e.span,
                                  "integers have no inf or nan; compute in a float dtype")
        info = np.iinfo(dtype)
        if not info.min <= int(e.value) <= info.max:
            raise HybridTypeError(f"Python {kind} {e.value} is out of bounds for {dtype}", e.span,
                                  f"{dtype} holds {info.min} to {info.max}; cast the other operand "
                                  "to a wider type, e.g. int64(x)")

    def v_UnaryOp(self, e: syntax.UnaryOp):
        a = self.expr(e.operand)
        if e.op == "not":
            if not types.is_bool(a.dtype):
                raise HybridTypeError("`not` needs a condition", e.operand.span, "compare explicitly, e.g. `x == 0`")
            return tir.Unary("bool", "not", a, span=e.span)
        if types.is_bool(a.dtype):
            raise HybridTypeError(f"unary `{e.op}` on a bool value", e.span, None)
        if e.op == "+":
            return a
        if isinstance(a, tir.Const):
            return tir.Const(a.dtype, negate(a), span=e.span)
        return tir.Unary(a.dtype, "neg", a, span=e.span)

    def v_Compare(self, e: syntax.Compare):
        vals = [self.expr(x) for x in e.operands]
        result = None
        for op, a, b in zip(e.ops, vals, vals[1:]):
            t = types.promote(a.dtype, b.dtype) if not (types.is_bool(a.dtype) and types.is_bool(b.dtype)) else "bool"
            if (types.is_int(t) and not types.is_weak(t) and t not in ("int64", "uint64")
                    and any(x.dtype == types.WEAK_INT and not isinstance(x, tir.Const) for x in (a, b))):
                # a Python int known only when the kernel runs (an argument, a loop variable) against
                # a narrower integer: compared exactly, as NumPy does, not wrapped into that type
                t = "int64"
            c = tir.Cmp("bool", op, self.coerce(a, t), self.coerce(b, t), span=e.span)
            result = c if result is None else tir.Logic("bool", "and", result, c, span=e.span)
        return result

    def v_BoolOp(self, e: syntax.BoolOp):
        vals = [self.condition(x) for x in e.values]
        result = vals[0]
        for v in vals[1:]:
            result = tir.Logic("bool", e.op, result, v, span=e.span)
        return result

    def v_IfExp(self, e: syntax.IfExp):
        c = self.condition(e.cond)
        known = known_condition(c)
        if known is not None:
            # decided now (an unrolled loop's variable, a shape): the arm that runs; the other
            # still gives its type, unless it indexes out of range where it does not run
            live, dead = (e.body, e.orelse) if known else (e.orelse, e.body)
            v = self.expr(live)
            try:
                other = self.expr(dead)
            except HybridIndexError:
                return v
            t = "bool" if types.is_bool(v.dtype) and types.is_bool(other.dtype) else types.promote(v.dtype, other.dtype)
            return self.coerce(v, t)
        a, b = self.expr(e.body), self.expr(e.orelse)
        t = "bool" if types.is_bool(a.dtype) and types.is_bool(b.dtype) else types.promote(a.dtype, b.dtype)
        return tir.Select(t, c, self.coerce(a, t), self.coerce(b, t), span=e.span)

    def v_Call(self, e: syntax.Call):
        if isinstance(e.func, syntax.Attribute) and e.func.attr == "dtype":
            return self.dtype_call(e)
        if isinstance(e.func, syntax.Attribute):
            if is_foreign(e.func, self.lookup):
                raise foreign_error(e.func, call=True)
            if e.func.attr == "astype":
                raise astype_error(e)
        if not isinstance(e.func, syntax.Name):
            raise HybridTypeError("only built-in functions can be called", e.func.span, None)
        name = e.func.id
        if self.lookup(name) is not None:
            hides = name in BUILTIN_NAMES or name in INTRINSICS
            raise HybridTypeError(f"`{name}` is not a function", e.func.span,
                                  f"a local named `{name}` hides the built-in here: rename the local" if hides else None)
        if e.kwargs:
            raise HybridTypeError(f"{as_written(e.func)}() takes no keyword arguments",
                                  next(iter(e.kwargs.values())).span, None)
        if name in CAST_NAMES:
            if len(e.args) != 1:
                shown = as_written(e.func)
                raise HybridTypeError(f"{shown}() takes 1 argument, got {len(e.args)}", e.span, f"{shown}(x)")
            if name == "bfloat16":
                types.bfloat16(e.func.span)  # ml_dtypes is needed to hold the results
            return self.coerce(self.expr(e.args[0]), name) if name != "bool" else self._to_bool(e)
        if name == "likely":  # TVM's branch hint: the condition itself
            if len(e.args) != 1 or e.kwargs:
                raise HybridTypeError("likely() takes one argument, a condition", e.span, "if likely(i < n):")
            return self.expr(e.args[0])
        if name == "max_num_threads":
            if len(e.args) > 1 or e.kwargs:
                raise HybridTypeError("max_num_threads() takes at most one argument", e.span, "max_num_threads(True)")
            return tir.Const(types.WEAK_INT, MAX_NUM_THREADS, span=e.span)
        if name == "bind":
            raise HybridTypeError("bind(...) is only allowed as the iterable of a `for` loop", e.span,
                                  'write `for tx in bind("threadIdx.x", n):`')
        if name == "len":
            if len(e.args) != 1:
                raise HybridTypeError(f"len() takes 1 argument, got {len(e.args)}", e.span, None)
            arg = e.args[0]
            v = self.value(arg)
            if isinstance(v, TensorRef):
                if v.ndim == 0:
                    raise HybridTypeError("len() of a 0-d tensor", e.span, None)
                return tir.dim(v.shape[0], e.span)
            if isinstance(v, GridVal):
                return tir.Const(types.WEAK_INT, len(v.vars), span=e.span)
            if isinstance(v, (ShapeVal, TupleVal)):
                return tir.Const(types.WEAK_INT, len(v.dims if isinstance(v, ShapeVal) else v.items), span=e.span)
            raise HybridTypeError("len() takes a tensor or a shape", e.args[0].span, None)
        if name in TENSOR_MAKERS:
            raise HybridTypeError(f"{name}(...) must be assigned to a name", e.span,
                                  f"write `c = {name}(shape, dtype)`")
        if name in LOOP_KINDS or name == "grid":
            raise HybridTypeError(f"{name}(...) is only allowed as the iterable of a `for` loop", e.span, None)
        if name in INTRINSICS:
            return self.intrinsic(name, e)
        if name in self.module.kernels:
            raise kernel_in_expression_error(e)
        raise unknown_function_error(name, e.func.span, list(INTRINSICS) + list(BUILTIN_NAMES))

    # ------------------------------------------------------------ intrinsics
    def intrinsic(self, name: str, e: syntax.Call) -> tir.TExpr:
        err = intrinsic_arity_error(name, e)
        if err is not None:
            raise err
        args = [self.expr(a) for a in e.args]
        if name not in PREDICATES + ("max", "min"):
            for v, a in zip(args, e.args):
                if types.is_bool(v.dtype):
                    raise HybridTypeError(f"{name}() of a bool value", a.span,
                                          "convert it first, e.g. int32(c) or float32(c)")
        if name == "power":
            return self.binop("**", args[0], args[1], e.span)
        if name in FLOAT_MATH:
            return self.float_math(name, args, e.span)
        if name in ("ceil_div", "popcount"):
            for v, a in zip(args, e.args):
                if not types.is_int(v.dtype):
                    raise HybridTypeError(f"{name}() takes integers, this is {v.dtype}", a.span,
                                          "for floats write ceil(a / b)" if name == "ceil_div"
                                          else "convert it first, e.g. int32(x)")
        if name in ("max", "min"):
            return self.extremum(name, args, e.span)
        return self.integral(name, args, e.span)

    def float_math(self, name: str, args: list, span: Span) -> tir.TExpr:
        """sqrt, exp, atan2, ...: computed in NumPy's float result type of the (promoted) argument dtype."""
        dt = args[0].dtype if len(args) == 1 else types.promote(args[0].dtype, args[1].dtype)
        t = types.float_math_type(dt)
        self.note_float64(t, args, span)
        return tir.Intrinsic(t, name, [self.coerce(a, t) for a in args], span=span)

    def extremum(self, name: str, args: list, span: Span) -> tir.TExpr:
        """max/min of two or more values, folded left: NaN wins, as NumPy's maximum/minimum."""
        acc = args[0]
        for b in args[1:]:
            t = "bool" if types.is_bool(acc.dtype) and types.is_bool(b.dtype) else types.promote(acc.dtype, b.dtype)
            x, y = self.coerce(acc, t), self.coerce(b, t)
            if isinstance(x, tir.Const) and isinstance(y, tir.Const) and types.is_weak(t):
                acc = tir.Const(t, fold_intrinsic(name, [x.value, y.value]), span=span)
            else:
                acc = tir.Intrinsic(t, name, [x, y], span=span)
        return acc

    def integral(self, name: str, args: list, span: Span) -> tir.TExpr:
        """abs, sign, floor, ceil, trunc, round, isnan, isinf, isfinite, ceil_div, popcount."""
        a = args[0]
        if name in PREDICATES and not types.is_float(a.dtype):
            return tir.Const("bool", name == "isfinite", span=span)
        if name in ROUNDING and not types.is_float(a.dtype):
            return a  # an integer is already integral; NumPy 2 keeps its dtype
        if name == "ceil_div":
            t = types.promote(a.dtype, args[1].dtype)
            if not types.is_int(t):
                raise HybridTypeError(f"ceil_div() of {a.dtype} and {args[1].dtype} would compute in {t} "
                                      "(NumPy's promotion)", span, "cast the arguments to one integer dtype, "
                                      "e.g. ceil_div(int64(a), int64(b))")
            args = [self.coerce(a, t), self.coerce(args[1], t)]
        elif name == "popcount":
            t = types.WEAK_INT if types.is_weak(a.dtype) else "uint8"
        else:
            t = "bool" if name in PREDICATES else a.dtype
        if all(isinstance(x, tir.Const) and types.is_weak(x.dtype) for x in args):
            folded = fold_intrinsic(name, [x.value for x in args])
            if folded is not None:
                return tir.Const(t, folded, span=span)
        return tir.Intrinsic(t, name, args, span=span)

    def dtype_call(self, e: syntax.Call):
        """``x.dtype(v)``: ``v`` cast to the dtype of tensor or scalar ``x`` (as ``float32(v)``)."""
        d = self.value(e.func)
        if e.kwargs or len(e.args) != 1:
            raise HybridTypeError(f"a dtype takes 1 argument, got {len(e.args) + len(e.kwargs)}", e.span,
                                  "x.dtype(0) is a zero of x's dtype")
        if d.name == "bool":
            return self._to_bool(e)
        return self.coerce(self.expr(e.args[0]), d.name)

    def _to_bool(self, e: syntax.Call):
        v = self.expr(e.args[0])
        if types.is_bool(v.dtype):
            return v
        return tir.Cmp("bool", "!=", v, tir.Const(v.dtype, 0), span=e.span)
