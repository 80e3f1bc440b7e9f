"""Kernel signatures written on the command line, and the values `hyb run` reads.

``--args "a=float32[128,64] b=float32[64] alpha=float32"`` names the type of every
parameter of a kernel:

* ``DTYPE[d0,d1,...]`` is a tensor (``DTYPE[]`` a 0-d tensor),
* ``DTYPE`` alone is a NumPy scalar of that dtype,
* ``int`` and ``float`` are Python numbers (weak, as in NumPy 2: ``2.0 * x[i]`` stays float32).

Items are separated by spaces or commas; ``NAME=`` is optional and works as in a Python
call (positional items first, in parameter order).  Mistakes raise :class:`UsageError`,
rendered with a caret under the offending item: the command exits with status 2.
"""
from __future__ import annotations

import difflib
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..dsl import ast as syntax
from ..dsl import types

PYTHON_SCALARS = ("int", "float")


class UsageError(Exception):
    """A mistake on the command line (exit status 2), optionally pointing into an option's text."""

    def __init__(self, message: str, hint: str | None = None, where: tuple | None = None):
        super().__init__(message)
        self.message = message
        self.hint = hint
        self.where = where  # (option, text, start, end): draw `text` with a caret under [start, end)

    def render(self) -> str:
        lines = [f"hyb: error: {self.message}"]
        if self.where:
            option, text, start, end = self.where
            prefix = f"  {option} " if option else "  "
            lines.append(prefix + text)
            lines.append(" " * (len(prefix) + start) + "^" * max(1, end - start))
        if self.hint:
            lines.append(f"hint: {self.hint}")
        return "\n".join(lines)


@dataclass(frozen=True)
class ArgType:
    """The type of one argument: a tensor (``shape`` a tuple) or a scalar (``shape`` None)."""

    dtype: str  # a NumPy dtype name, or "int"/"float" for a Python number
    shape: tuple | None = None

    @property
    def scalar(self) -> bool:
        return self.shape is None

    def __str__(self):
        if self.scalar:
            return self.dtype
        return f"{self.dtype}[{','.join(map(str, self.shape))}]"

    def placeholder(self):
        """A value of this type to compile for: compiling reads shapes and dtypes only, so a
        tensor is one zero seen through every index (no memory however large the shape)."""
        if self.dtype == "int":
            return 0
        if self.dtype == "float":
            return 0.0
        if self.scalar:
            return types.numpy_dtype(self.dtype).type(0)
        return np.broadcast_to(np.zeros((), dtype=types.numpy_dtype(self.dtype)), self.shape)

    def random(self, rng: np.random.Generator):
        """A random value of this type: normal floats, integers in [0, 10), random booleans."""
        shape = () if self.scalar else self.shape
        dt = types.concrete(self.dtype)
        if dt == "bool":
            v = rng.integers(0, 2, size=shape).astype(bool)
        elif dt in types.FLOATS:
            v = rng.standard_normal(size=shape).astype(types.numpy_dtype(dt))
        else:
            v = rng.integers(0, 10, size=shape).astype(dt)
        if self.dtype in PYTHON_SCALARS:
            return v.item()
        return v[()] if self.scalar else v


@dataclass(frozen=True)
class SpecItem:
    name: str | None
    type: ArgType
    start: int  # where the item is in the option's text, for carets
    end: int


_ITEM = re.compile(r"(?:(?P<name>[A-Za-z_]\w*)=)?(?P<dtype>[A-Za-z_]\w*)(?P<shape>\[(?P<dims>[^\[\]]*)\])?")
_SEPARATORS = " \t\n,;"
_NEXT_NAMED = re.compile(r"[\s,;]+[A-Za-z_]\w*=")


def _pieces(text: str):
    """(start, end) of each item: separated by spaces or commas outside brackets."""
    i, n = 0, len(text)
    while i < n:
        if text[i] in _SEPARATORS:
            i += 1
            continue
        start, depth = i, 0
        while i < n and (depth > 0 or text[i] not in _SEPARATORS):
            if depth > 0 and _NEXT_NAMED.match(text, i):
                break  # an unclosed bracket: the next item starts here
            depth += {"[": 1, "]": -1}.get(text[i], 0)
            i += 1
        yield start, i


def parse_spec(text: str, option: str = "--args") -> list:
    """The items of a signature string, each a :class:`SpecItem`."""
    items = []
    for start, end in _pieces(text):
        piece = text[start:end]
        where = (option, text, start, end)
        m = _ITEM.fullmatch(piece)
        if m is None:
            if piece.count("[") != piece.count("]"):
                raise UsageError(f"unbalanced brackets in `{piece}`", "a tensor is written DTYPE[d0,d1,...]", where)
            raise UsageError(f"cannot read `{piece}` as an argument type",
                             "write NAME=DTYPE[d0,d1,...] for a tensor, NAME=DTYPE for a scalar, "
                             "e.g. a=float32[128,64] alpha=float32", where)
        dtype = m.group("dtype")
        d0, d1 = start + m.start("dtype"), start + m.end("dtype")
        tensor = m.group("shape") is not None
        if dtype in PYTHON_SCALARS and tensor:
            raise UsageError(f"`{dtype}` is a Python number, not a tensor dtype", f"use {dtype}32 or {dtype}64",
                             (option, text, d0, d1))
        if dtype not in types.ALL_DTYPES and dtype not in PYTHON_SCALARS:
            close = difflib.get_close_matches(dtype, types.ALL_DTYPES + PYTHON_SCALARS, 1)
            hint = (f"did you mean `{close[0]}`? " if close else "") + "dtypes: " + ", ".join(types.ALL_DTYPES) + \
                "; `int` and `float` are Python numbers"
            raise UsageError(f"unknown dtype `{dtype}`", hint, (option, text, d0, d1))
        shape = None
        if tensor:
            shape = _parse_dims(m.group("dims"), text, start + m.start("dims"), option)
        items.append(SpecItem(m.group("name"), ArgType(dtype, shape), start, end))
    return items


def _parse_dims(dims: str, text: str, offset: int, option: str) -> tuple:
    out = []
    pos = 0
    parts = dims.split(",")
    if parts and not parts[-1].strip() and len(parts) > 1:
        parts = parts[:-1]  # a trailing comma, as in a Python tuple
    for part in parts:
        word = part.strip()
        at = offset + pos + (len(part) - len(part.lstrip()))
        pos += len(part) + 1
        if not word and len(parts) == 1:
            return ()  # DTYPE[]: a 0-d tensor
        if not re.fullmatch(r"\d+", word):
            raise UsageError(f"dimension `{word}` is not a non-negative integer",
                             "shapes are integers, e.g. float32[128,64]; float32[] is a 0-d tensor",
                             (option, text, at, at + max(1, len(word))))
        out.append(int(word))
    return tuple(out)


# ---------------------------------------------------------------- binding to a kernel's parameters

def bind(items: list, kernel, text: str, option: str = "--args", need=None) -> dict:
    """``name -> ArgType`` for the parameters of ``kernel`` from parsed items; every parameter
    (or every one in ``need``) must have a type."""
    params = kernel.params
    signature = f"{kernel.name}({', '.join(params)})"
    bound: dict = {}
    positional = 0
    seen_named = False
    for item in items:
        where = (option, text, item.start, item.end)
        if item.name is None:
            if seen_named:
                raise UsageError("an argument without a name follows a named one",
                                 "give positional arguments first, as in a Python call", where)
            if positional >= len(params):
                raise UsageError(f"too many arguments: kernel {signature} takes {len(params)}", None, where)
            name = params[positional]
            positional += 1
        else:
            seen_named = True
            name = item.name
            if name not in params:
                close = difflib.get_close_matches(name, params, 1)
                raise UsageError(f"kernel {signature} has no parameter `{name}`",
                                 f"did you mean `{close[0]}`?" if close else f"its parameters are: {', '.join(params)}",
                                 where)
            if name in bound:
                raise UsageError(f"parameter `{name}` is given twice", None, where)
        bound[name] = (item.type, where)
    missing = [p for p in (params if need is None else need) if p not in bound]
    if missing:
        example = " ".join(f"{p}=float32[...]" for p in missing)
        raise UsageError(f"missing {option} for {', '.join(f'`{p}`' for p in missing)} of kernel {signature}",
                         f"give every parameter a type, e.g. {option} \"{example}\"")
    for p, (t, where) in bound.items():
        check_usage(kernel, p, t.scalar, f"{option} gives the {'scalar' if t.scalar else 'tensor'} {t}", where)
    return {p: bound[p][0] for p in params if p in bound}


def check_usage(kernel, param: str, scalar: bool, given: str, where=None, hints=None):
    """A UsageError when ``param`` is given as a scalar but the kernel uses it as a tensor, or the
    other way round (``given`` says how it was given, for the message)."""
    use = parameter_usage(kernel.kdef, kernel.module).get(param)
    if use is None:
        return
    kind, span = use
    place = f" (line {span.line}: `{span.source_line.strip()}`)" if span and span.source_line else ""
    tensor_hint, number_hint = hints or (f"give it a shape, e.g. {param}=float32[4,4]",
                                         f"give it a scalar type, e.g. {param}=float32 or {param}=float")
    if kind == "tensor" and scalar:
        raise UsageError(f"`{param}` is a tensor in kernel `{kernel.name}`{place} but {given}", tensor_hint, where)
    if kind == "number" and not scalar:
        raise UsageError(f"`{param}` is used as a number in kernel `{kernel.name}`{place} but {given}", number_hint,
                         where)


def parameter_usage(kdef: syntax.KernelDef, module: syntax.Module | None = None) -> dict:
    """For each parameter that the kernel clearly uses as a tensor (subscripted, ``.shape``,
    ``len(x)``, returned) or as a number (in arithmetic, a comparison, an intrinsic), that
    use: ``name -> ("tensor" | "number", span)``.  Parameters only passed to other kernels
    are left out: the checker decides for them."""
    params = {p.name for p in kdef.params}
    kernels = set(module.kernels) if module is not None else set()
    tensor: dict = {}
    number: dict = {}

    class Walk(syntax.NodeVisitor):
        def visit_Subscript(self, node):
            if isinstance(node.value, syntax.Name) and node.value.id in params:
                tensor.setdefault(node.value.id, node.span)
            else:
                self.visit(node.value)
            for i in node.indices:
                self.visit(i)

        def visit_Attribute(self, node):
            if isinstance(node.value, syntax.Name) and node.value.id in params:
                if node.attr in ("shape", "ndim"):
                    tensor.setdefault(node.value.id, node.span)
                return  # `.dtype` exists on both
            self.visit(node.value)

        def visit_Call(self, node):
            fname = node.func.id if isinstance(node.func, syntax.Name) else None
            if fname in kernels:
                return  # the callee's parameters decide
            for a in node.args:
                if fname in ("len", "grid") and isinstance(a, syntax.Name) and a.id in params:
                    tensor.setdefault(a.id, a.span)
                else:
                    self.visit(a)
            for v in node.kwargs.values():
                self.visit(v)

        def visit_Return(self, node):
            for v in node.values:
                if isinstance(v, syntax.Name) and v.id in params:
                    tensor.setdefault(v.id, v.span)
                else:
                    self.visit(v)

        def visit_Name(self, node):
            if node.id in params:
                number.setdefault(node.id, node.span)

    w = Walk()
    for stmt in kdef.body:
        w.visit(stmt)
    out = {n: ("number", s) for n, s in number.items()}
    out.update({n: ("tensor", s) for n, s in tensor.items()})
    return out


# ---------------------------------------------------------------- values for `hyb run`

_NUMBER = re.compile(r"[-+]?(\d+\.?\d*([eE][-+]?\d+)?|\.\d+([eE][-+]?\d+)?|inf|nan)", re.IGNORECASE)


def parse_value(text: str, option: str = "input"):
    """A value given on the command line: a ``.npy`` file, a number (a Python int or float), or
    ``DTYPE:NUMBER`` for a NumPy scalar (``float32:2.5``)."""
    where = (None, text, 0, len(text))
    if ":" in text and not Path(text).exists():
        dtype, _, number = text.partition(":")
        if dtype not in types.ALL_DTYPES:
            raise UsageError(f"unknown dtype `{dtype}` in {option} `{text}`", "dtypes: " + ", ".join(types.ALL_DTYPES),
                             (None, text, 0, len(dtype)))
        word = number.lower()
        if not _NUMBER.fullmatch(number) and word not in ("true", "false"):
            raise UsageError(f"`{number}` is not a number", None, (None, text, len(dtype) + 1, len(text)))
        try:
            if dtype == "bool":
                return np.bool_(word == "true" or (word != "false" and float(number) != 0))
            if types.is_int(dtype):
                if not re.fullmatch(r"[-+]?\d+", number):
                    raise ValueError(f"{number} is not an integer")
                return types.numpy_dtype(dtype).type(_checked_int(int(number), dtype))
            return types.numpy_dtype(dtype).type(float(number))
        except (OverflowError, ValueError) as e:
            raise UsageError(f"`{number}` is not a {dtype}: {e}", None, where) from None
    if _NUMBER.fullmatch(text):
        return int(text) if re.fullmatch(r"[-+]?\d+", text) else float(text)
    path = Path(text)
    if not path.exists():
        raise UsageError(f"{option}: `{text}` is not a file, nor a number", "pass PATH.npy, a number such as 2.5, "
                         "or DTYPE:NUMBER such as float32:2.5")
    try:
        value = np.load(path, allow_pickle=False)
    except (OSError, ValueError) as e:
        raise UsageError(f"{option}: cannot read {text} as a .npy file: {e}", "save arrays with numpy.save") from None
    if not isinstance(value, np.ndarray):
        value.close()
        raise UsageError(f"{option}: {text} holds several arrays; inputs are .npy files of one array",
                         "save each array with numpy.save")
    if value.dtype.kind == "V":
        # numpy.save writes an ml_dtypes.bfloat16 array as raw 2-byte records, which lose their type
        raise UsageError(f"{option}: {text} holds raw {value.dtype.itemsize}-byte records (dtype {value.dtype.str}), "
                         "not numbers", "a bfloat16 array saved with numpy.save loads back like this: save it as "
                         "float32 and cast it in the kernel, or call the kernel from Python")
    return value


def _checked_int(value: int, dtype: str) -> int:
    info = np.iinfo(dtype)
    if not info.min <= value <= info.max:
        raise OverflowError(f"{dtype} holds {info.min} to {info.max}")
    return value
