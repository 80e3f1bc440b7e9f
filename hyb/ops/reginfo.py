"""Operator information: what a Custom operator accepts, as MindSpore's ``CustomRegOp`` describes it.

An operator's information lists its inputs and outputs (in the order the implementation takes
and returns them), its attributes (named constants passed to the implementation), the dtype
combinations it supports (one ``dtype_format`` row per combination, inputs first, then outputs)
and the device target the rows are for::

    info = (CustomRegOp("add")
            .input(0, "a").input(1, "b").output(0, "c")
            .dtype_format(DataType.F32_Default, DataType.F32_Default, DataType.F32_Default)
            .target("CPU")
            .get_op_info())

``get_op_info()`` returns a plain dict (an :class:`OpInfo`, which is a ``dict``); bind it to an
operator with ``Custom(..., reg_info=info)`` or with the :func:`custom_info_register` decorator.
hyb has no operator library to register into: each ``Custom`` keeps its own information and
checks its calls against it (see ``hyb/ops/custom.py``).

Everything here is checked when it is written, so a mistake points at the builder call that
made it rather than at a later call of the operator.
"""
from __future__ import annotations

import json
import warnings

import numpy as np

from ..errors import HybridArgumentError, HybridUnsupportedError, HybridWarning

TARGETS = ("CPU", "GPU", "Ascend")
PARAM_TYPES = ("required", "optional", "dynamic")
ATTR_VALUE_TYPES = ("int", "float", "bool", "str", "listInt", "listFloat", "listBool", "listStr", "all")
# Formats whose data is row-major in the order of the tensor's own dimensions: a hyb array is
# all of them.  Other formats (NC1HWC0, FRACTAL_Z, ...) are the blocked layouts of Ascend kernels;
# rows that ask for them are recorded, and never match a call.
ROW_MAJOR_FORMATS = ("DefaultFormat", "", "ND", "NCHW", "NHWC", "NCDHW", "NDHWC")


class _DataTypeNames(type):
    """Any ``<DTYPE>_<FORMAT>`` name MindSpore's ``DataType`` has: ``F16_5HD`` is
    ``("float16", "NC1HWC0")``, so that registrations for Ascend layouts still build."""

    def __getattr__(cls, name):
        prefix, _, fmt = name.partition("_")
        if prefix in _PREFIXES and fmt:
            return (_PREFIXES[prefix], _FORMAT_NAMES.get(fmt, fmt))
        raise AttributeError(f"type object 'DataType' has no attribute {name!r}")


class DataType(metaclass=_DataTypeNames):
    """``(dtype, format)`` pairs for ``CustomRegOp.dtype_format`` rows, named as in MindSpore.

    ``F32_Default`` is ``("float32", "DefaultFormat")``; ``F32_None`` is ``("float32", "")``
    (a dtype with no layout requirement, the same thing in hyb); ``None_None`` is ``("", "")``,
    which matches any dtype.  Names with other formats (``F16_5HD``, ``F32_FracZ``, ...) exist as
    in MindSpore; hyb's arrays have none of those layouts, so rows made of them never match.
    """

    None_None = ("", "")
    None_Default = ("", "DefaultFormat")


_PREFIXES = {
    "BOOL": "bool",
    "I8": "int8", "I16": "int16", "I32": "int32", "I64": "int64",
    "U8": "uint8", "U16": "uint16", "U32": "uint32", "U64": "uint64",
    "F16": "float16", "BF16": "bfloat16", "F32": "float32", "F64": "float64",
}
for _prefix, _dtype in _PREFIXES.items():
    setattr(DataType, f"{_prefix}_Default", (_dtype, "DefaultFormat"))
    setattr(DataType, f"{_prefix}_None", (_dtype, ""))
del _prefix, _dtype

DTYPE_NAMES = tuple(_PREFIXES.values())
_PREFIXES.update({"C64": "complex64", "C128": "complex128", "STR": "string"})  # names only: no such arrays
_FORMAT_NAMES = {"Default": "DefaultFormat", "None": "", "5HD": "NC1HWC0", "FracZ": "FRACTAL_Z",
                 "FracNZ": "FRACTAL_NZ", "C1HWNCoC0": "C1HWNCoC0", "NDC1HWC0": "NDC1HWC0",
                 "FRACTAL_Z_3D": "FRACTAL_Z_3D", "ChannelLast": "ChannelLast"}


class OpInfo(dict):
    """The operator information ``CustomRegOp.get_op_info()`` returns: a dict with the keys
    ``op_name``, ``imply_type``, ``fusion_type``, ``target``, ``inputs``, ``outputs``, ``attr``
    and ``dtype_format``, as MindSpore's.  The properties below read it."""

    @property
    def input_names(self) -> list:
        return [i["name"] for i in self["inputs"]]

    @property
    def output_names(self) -> list:
        return [o["name"] for o in self["outputs"]]

    @property
    def attr_names(self) -> list:
        return [a["name"] for a in self["attr"]]

    def rows(self) -> list:
        """The supported dtype combinations: one tuple of dtype names per row, inputs then
        outputs; ``""`` matches any dtype.  Rows that ask for a blocked layout (an Ascend format)
        are left out: no hyb array has one."""
        return [tuple(dt for dt, _fmt in row) for row in self["dtype_format"]
                if all(fmt in ROW_MAJOR_FORMATS for _dt, fmt in row)]

    def layout_rows(self) -> list:
        """The formats of the rows :meth:`rows` leaves out."""
        return sorted({fmt for row in self["dtype_format"] for _dt, fmt in row if fmt not in ROW_MAJOR_FORMATS})

    @property
    def attr_only(self) -> bool:
        """Information that declares attributes and no inputs or outputs: the call's leading
        tensors are the inputs, and the values after them the attributes."""
        return not self["inputs"] and not self["outputs"] and bool(self["attr"])

    def dynamic_inputs(self) -> set:
        """Positions of the inputs declared ``"dynamic"``."""
        return {pos for pos, i in enumerate(self["inputs"]) if i.get("param_type") == "dynamic"}

    def optional_inputs(self) -> set:
        return {pos for pos, i in enumerate(self["inputs"]) if i.get("param_type") == "optional"}

    def describe_rows(self) -> str:
        """The rows as text, one per line: ``(float32, float32) -> (float32)``."""
        n = len(self["inputs"])
        out = []
        for row in self.rows():
            ins = ", ".join(d or "any" for d in row[:n])
            outs = ", ".join(d or "any" for d in row[n:])
            out.append(f"  ({ins}) -> ({outs})")
        return "\n".join(out)


class CustomRegOp:
    """Builder of operator information (MindSpore's ``CustomRegOp``); every method returns
    the builder, so calls chain.

    ``name`` is the operator's name, used in messages.  ``target`` left unset means the
    information applies on whatever device target the operator runs.
    """

    def __init__(self, op_name: str = "Custom"):
        if not isinstance(op_name, str) or not op_name:
            raise HybridArgumentError(f"CustomRegOp name must be a non-empty string, got {op_name!r}", None,
                                      'write CustomRegOp("my_op")')
        self.op_name = op_name
        self._fusion_type = "OPAQUE"
        self._target = None
        self._inputs: list = []
        self._outputs: list = []
        self._attrs: list = []
        self._rows: list = []

    def __repr__(self):
        return f"<CustomRegOp {self.op_name}>"

    # ------------------------------------------------------------ inputs and outputs
    def input(self, index=None, name=None, param_type="required", **kwargs):
        """Declare input ``index`` (0, 1, ...) called ``name``; ``param_type`` is
        ``"required"``, ``"optional"`` (a call may leave it out, or pass None) or ``"dynamic"``
        (a call passes a tuple or list of tensors as this one argument)."""
        self._inputs.append(self._io("input", self._inputs, index, name, param_type, kwargs))
        return self

    def output(self, index=None, name=None, param_type="required", **kwargs):
        """Declare output ``index`` called ``name``, as :meth:`input`."""
        self._outputs.append(self._io("output", self._outputs, index, name, param_type, kwargs))
        return self

    def _io(self, what, declared, index, name, param_type, kwargs):
        where = f'CustomRegOp("{self.op_name}").{what}({index!r}, {name!r})'
        if not isinstance(index, int) or isinstance(index, bool) or index < 0:
            raise HybridArgumentError(f"{where}: the index must be an integer >= 0", None,
                                      f"number the {what}s 0, 1, 2, ... in the order the implementation has them")
        if not isinstance(name, str) or not name:
            raise HybridArgumentError(f"{where}: the name must be a non-empty string", None, None)
        if any(d["name"] == name for d in declared):
            raise HybridArgumentError(f"{where}: another {what} is already called `{name}`", None, None)
        if param_type not in PARAM_TYPES:
            raise HybridArgumentError(f"{where}: param_type {param_type!r} is not one of "
                                      + ", ".join(PARAM_TYPES), None, None)
        if param_type == "dynamic" and what == "output":
            raise HybridUnsupportedError(f"{where}: dynamic (variadic) outputs are not supported by hyb", None,
                                         "declare each output on its own")
        entry = {"index": index, "name": name, "param_type": param_type}
        entry.update(kwargs)
        return entry

    # ------------------------------------------------------------ attributes
    def attr(self, name=None, param_type=None, value_type=None, default_value=None, value=None, **kwargs):
        """Declare an attribute: a named constant the implementation receives.

        ``param_type`` is ``"required"`` or ``"optional"``; ``value_type`` one of ``int``,
        ``float``, ``bool``, ``str``, ``listInt``, ``listFloat``, ``listBool``, ``listStr``, or ``all``
        (the value's own type, lists of lists included);
        ``default_value`` (text, as in MindSpore, or a Python value) and ``value`` give the
        value used when a call does not pass one (``value`` first).
        """
        where = f'CustomRegOp("{self.op_name}").attr({name!r})'
        if not isinstance(name, str) or not name.isidentifier():
            raise HybridArgumentError(f"{where}: an attribute name must be an identifier", None,
                                      "use the name of the implementation's parameter")
        if any(a["name"] == name for a in self._attrs):
            raise HybridArgumentError(f"{where}: attribute `{name}` is declared twice", None, None)
        if param_type is None:
            param_type = "required"
        if param_type not in ("required", "optional"):
            raise HybridArgumentError(f"{where}: param_type {param_type!r} must be 'required' or 'optional'",
                                      None, None)
        if value_type not in ATTR_VALUE_TYPES:
            raise HybridArgumentError(f"{where}: value_type {value_type!r} is not one of "
                                      + ", ".join(ATTR_VALUE_TYPES), None, None)
        entry = {"name": name, "param_type": param_type, "type": value_type}
        # Convert now, so a default that does not fit its type is reported here.
        if default_value is not None:
            convert_attr(entry, default_value, where + " default_value")
            entry["default_value"] = default_value
        if value is not None:
            convert_attr(entry, value, where + " value")
            entry["value"] = value
        entry.update(kwargs)
        self._attrs.append(entry)
        return self

    # ------------------------------------------------------------ rows, target, fusion
    def dtype_format(self, *args):
        """Add one supported combination: a ``DataType`` pair per input, then per output."""
        row = []
        for pos, pair in enumerate(args):
            if (not isinstance(pair, (tuple, list)) or len(pair) != 2
                    or not all(isinstance(p, str) for p in pair)):
                raise HybridArgumentError(
                    f'CustomRegOp("{self.op_name}").dtype_format: entry {pos} is {pair!r}, not a DataType pair',
                    None, "use the constants of hyb.ops.DataType, e.g. DataType.F32_Default")
            dtype, fmt = pair
            if dtype and dtype not in _PREFIXES.values():
                raise HybridArgumentError(
                    f'CustomRegOp("{self.op_name}").dtype_format: entry {pos} has unknown dtype {dtype!r}', None,
                    "known dtypes: " + ", ".join(DTYPE_NAMES))
            row.append((dtype, fmt))
        if not row:
            raise HybridArgumentError(f'CustomRegOp("{self.op_name}").dtype_format() needs at least one entry',
                                      None, None)
        self._rows.append(tuple(row))
        return self

    def target(self, target=None):
        """The device target these rows are for: ``"CPU"``, ``"GPU"`` or ``"Ascend"``."""
        if target not in TARGETS:
            raise HybridArgumentError(f'CustomRegOp("{self.op_name}").target({target!r}): the target must be '
                                      + ", ".join(repr(t) for t in TARGETS), None, None)
        self._target = target
        return self

    def fusion_type(self, fusion_type=None):
        """Recorded and reported; hyb fuses nothing across operators."""
        if not isinstance(fusion_type, str):
            raise HybridArgumentError(f'CustomRegOp("{self.op_name}").fusion_type({fusion_type!r}) takes a string',
                                      None, 'e.g. "OPAQUE" or "ELEMWISE"')
        self._fusion_type = fusion_type
        return self

    # ------------------------------------------------------------ result
    def get_op_info(self) -> OpInfo:
        """The operator information as a dict (checked: rows of the right length).

        Inputs and outputs are ordered by index, and in the order they were declared where two
        share one.  Indices other than 0..n-1 are accepted, as MindSpore accepts them, with a
        warning: the order is what counts."""
        for what, declared in (("input", self._inputs), ("output", self._outputs)):
            indices = [d["index"] for d in declared]
            if sorted(indices) != list(range(len(declared))):
                warnings.warn(HybridWarning(
                    f'CustomRegOp("{self.op_name}"): {what} indices are {indices}, not 0..{len(declared) - 1}; '
                    f"the {what}s are taken in the order " + ", ".join(d["name"] for d in _ordered(declared))),
                    stacklevel=2)
        width = len(self._inputs) + len(self._outputs)
        for row in self._rows:
            if len(row) != width:
                raise HybridArgumentError(
                    f'CustomRegOp("{self.op_name}"): a dtype_format row has {len(row)} entries, but the operator '
                    f"has {len(self._inputs)} inputs and {len(self._outputs)} outputs ({width} entries)", None,
                    "give one DataType per input, then one per output")
        return OpInfo(
            op_name=self.op_name,
            imply_type="Custom",
            fusion_type=self._fusion_type,
            target=self._target,
            inputs=[dict(d) for d in _ordered(self._inputs)],
            outputs=[dict(d) for d in _ordered(self._outputs)],
            attr=[dict(a) for a in self._attrs],
            dtype_format=[[list(p) for p in row] for row in self._rows],
        )


def _ordered(declared: list) -> list:
    return sorted(declared, key=lambda d: d["index"])  # stable: declaration order among equal indices


def custom_info_register(*reg_info):
    """Decorator binding operator information to an implementation (MindSpore's
    ``custom_info_register``): it sets ``func.reg_info`` and returns ``func`` itself.

    It works on a plain function and on a ``@hyb.hybrid`` kernel.  ``Custom(reg_info=...)``
    overrides it.  An aot implementation is a path to a library, which cannot be decorated:
    pass its information as ``reg_info``.
    """
    if not reg_info:
        raise HybridArgumentError("custom_info_register() needs at least one operator information", None,
                                  "pass CustomRegOp(...)....get_op_info()")
    infos = [normalize_info(i) for i in reg_info]

    def decorator(func):
        if not callable(func):
            raise HybridArgumentError(f"custom_info_register decorates a function, not {type(func).__name__}",
                                      None, "for an aot library pass the information as Custom(..., reg_info=...)")
        func.reg_info = infos
        return func

    return decorator


def normalize_info(info) -> OpInfo:
    """An :class:`OpInfo` from what a user may pass: ``get_op_info()``'s dict, a
    ``CustomRegOp`` builder, or the dict as a JSON string."""
    if isinstance(info, CustomRegOp):
        return info.get_op_info()
    if isinstance(info, str):
        try:
            info = json.loads(info)
        except ValueError:
            raise HybridArgumentError("operator information given as a string is not JSON", None,
                                      "pass CustomRegOp(...)....get_op_info()") from None
    if not isinstance(info, dict):
        raise HybridArgumentError(f"operator information must be a dict from CustomRegOp(...).get_op_info(), "
                                  f"not {type(info).__name__}", None, None)
    missing = [k for k in ("inputs", "outputs") if k not in info]
    if missing:
        raise HybridArgumentError("operator information lacks " + ", ".join(f"`{k}`" for k in missing), None,
                                  "build it with CustomRegOp(...)....get_op_info()")
    out = OpInfo(info)
    out.setdefault("op_name", "Custom")
    out.setdefault("target", None)
    out.setdefault("attr", [])
    out.setdefault("dtype_format", [])
    out.setdefault("fusion_type", "OPAQUE")
    if out["target"] in ("", "UnKnown"):
        out["target"] = None
    return out


def convert_attr(attr: dict, value, where: str):
    """The Python value of an attribute, converted to its declared ``type`` (MindSpore writes
    defaults as text: ``"0.5"``, ``"true"``, ``"1,2"``)."""
    vt = attr["type"]
    if vt == "all":
        return _convert_any(value, where)
    if vt.startswith("list"):
        if isinstance(value, str):
            items = [v.strip() for v in value.split(",") if v.strip()]
        elif isinstance(value, (list, tuple)):
            items = list(value)
        else:
            raise HybridArgumentError(f"{where}: {value!r} is not a list for a `{vt}` attribute", None, None)
        item_type = vt[4:].lower()
        return tuple(_convert_one(item_type, v, where, vt) for v in items)
    return _convert_one(vt, value, where, vt)


def _convert_any(value, where):
    """A value of an ``"all"`` attribute (any type): a bool, int, float or string, or a list of
    them (lists become tuples; lists of lists are kept for vector-of-vector attributes)."""
    if isinstance(value, np.ndarray):
        value = value.tolist()
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)):
        return tuple(_convert_any(v, where) for v in value)
    raise HybridArgumentError(f"{where}: {value!r} is not a bool, int, float, string or a list of them", None, None)


def _convert_one(vt, value, where, declared):
    try:
        if vt == "str":
            if not isinstance(value, str):
                raise ValueError
            return value
        if vt == "bool":
            if isinstance(value, str):
                if value.lower() not in ("true", "false", "1", "0"):
                    raise ValueError
                return value.lower() in ("true", "1")
            if isinstance(value, (bool, np.bool_)) or (isinstance(value, (int, np.integer)) and value in (0, 1)):
                return bool(value)
            raise ValueError
        if vt == "int":
            if isinstance(value, (bool, np.bool_)) or isinstance(value, (float, np.floating)):
                raise ValueError
            return int(value)
        if vt == "float":
            if isinstance(value, (bool, np.bool_)):
                raise ValueError
            return float(value)
    except (TypeError, ValueError):
        pass
    raise HybridArgumentError(f"{where}: {value!r} is not a valid `{declared}` value", None, None)

