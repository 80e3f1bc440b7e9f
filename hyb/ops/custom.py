"""``Custom``: one operator built from a user's implementation, as MindSpore's ``ops.Custom``.

The implementation is one of several kinds (``func_type``):

* ``"hybrid"`` / ``"akg"`` (``kind_hybrid.py``): a kernel in hyb's language (a ``@hyb.hybrid`` kernel, a kernel of a
  ``.hyb`` file, or a plain Python function written in the language), compiled by hyb;
* ``"pyfunc"`` (``kind_pyfunc.py``): a Python function on NumPy arrays;
* ``"aot"`` (``kind_aot.py``): ``"path/to/lib.so:func"`` or a source hyb compiles (``"path/add.cc:func"``),
  a C function with MindSpore's aot signature ``int func(int nparam, void **params, int *ndims,
  int64_t **shapes, const char **dtypes, void *stream, void *extra)`` and its optional ``funcInit``,
  ``funcInferShape`` and ``funcInferType``;
* ``"tbe"`` / ``"aicpu"``: Ascend-only kinds, refused.

A call converts its arguments (``hyb.Tensor``, NumPy arrays, scalars) to NumPy, checks them
against the operator information for the current device target (``hyb/ops/reginfo.py``),
works out the outputs' shapes and dtypes (declared by ``out_shape``/``out_dtype``, inferred
from a hybrid kernel, or both and compared), runs the implementation and returns
``hyb.Tensor`` results.  When an argument takes part in a gradient computation the call
records itself on hyb's tape with a backward function: the user's ``bprop`` if given, else
the kernel's derived gradient (``Kernel.grad()``) for hybrid kernels.
"""
from __future__ import annotations

import warnings

import numpy as np

from .. import autograd, context
from ..errors import HybridArgumentError, HybridTypeError, HybridUnsupportedError, HybridWarning
from . import reginfo
from .kind_aot import AotImpl, AotKernelError, caller_dir
from .kind_hybrid import HybridImpl
from .kind_pyfunc import PyfuncImpl
from .values import (as_dtypes, as_shapes, check_output_rows, dout_like, dtype_of, evaluate, is_array_like,
                     is_shape_list, matching_rows, refused, shape_of, to_numpy, wrap)

__all__ = ["Custom", "AotKernelError", "FUNC_TYPES"]


FUNC_TYPES = ("hybrid", "akg", "pyfunc", "aot", "tbe", "aicpu")
_ASCEND_ONLY = ("tbe", "aicpu")


class Custom:
    """A custom operator (MindSpore's ``ops.Custom``).

    ``func``: the implementation (see the module docstring for each ``func_type``).
    ``out_shape``, ``out_dtype``: the outputs' shapes and dtypes, either fixed (a shape, a
    dtype, or a tuple of them for several outputs) or callables that receive the shapes
    (tuples) / dtypes (NumPy dtypes) of the call's arguments.  Hybrid kernels may omit them:
    hyb infers them from the kernel; if given, they must agree with it.
    ``bprop``: ``bprop(*inputs, out, dout)`` returning a tuple with one gradient per input.
    ``reg_info``: operator information (``CustomRegOp(...).get_op_info()``, or a list of them,
    at most one per target); it takes precedence over ``@custom_info_register``.
    """

    def __init__(self, func, out_shape=None, out_dtype=None, func_type="hybrid", bprop=None, reg_info=None):
        if func_type not in FUNC_TYPES:
            raise HybridArgumentError(f"unknown func_type {func_type!r}", None,
                                      "func_type is one of " + ", ".join(repr(t) for t in FUNC_TYPES))
        if bprop is not None and not callable(bprop):
            raise HybridArgumentError(f"bprop must be a function, not {type(bprop).__name__}", None,
                                      "def bprop(*inputs, out, dout): return (dx, ...)")
        self.func = func
        self.func_type = func_type
        self.out_shape = out_shape
        self.out_dtype = out_dtype
        self.bprop = bprop
        try:
            if func_type in _ASCEND_ONLY:
                raise refused(HybridUnsupportedError(
                    f'func_type="{func_type}" operators run on Huawei Ascend hardware, which hyb does not target',
                    None, 'write the operator as func_type="hybrid" (compiled by hyb), "pyfunc" (NumPy) or "aot" '
                    "(a C library)"))
            if func_type in ("hybrid", "akg"):
                self._impl = HybridImpl(func, func_type)
            elif func_type == "pyfunc":
                self._impl = PyfuncImpl(func)
            else:
                self._impl = AotImpl(func, caller_dir())
        except HybridUnsupportedError as e:
            if not getattr(e, "refused_kind", False):
                raise
            # MindSpore makes such an operator (a module may hold it for another target); hyb
            # makes it too, and its first call raises the error.
            self._impl = RefusedImpl(func, e)
        self.name = self._impl.name
        # Each registration is checked against the implementation when a call first uses it, as
        # MindSpore does: one for a target the program never runs on does not stop it.
        self.reg_info = select_infos(func, reg_info, func_type)
        self._checked = set()
        if isinstance(self._impl, AotImpl):
            self._impl.check_op(self)  # out_shape/out_dtype or InferShape/InferType; attributes and Init

    def __repr__(self):
        return f"<hyb.ops.Custom {self.name} ({self.func_type})>"

    @property
    def kernel(self):
        """The hyb ``Kernel`` of a hybrid/akg operator (None for other kinds): ``op.kernel.grad()``
        is the gradient kernel hyb derives for it."""
        return getattr(self._impl, "kernel", None)

    # ------------------------------------------------------------------ operator information
    def _check_info(self, info: reginfo.OpInfo):
        """The information's inputs, outputs and attributes against the implementation."""
        where = f"operator information of Custom op `{self.name}`"
        if info["target"] is not None:
            where += f" for {info['target']}"
        impl = self._impl
        attrs = info.attr_names
        params = impl.param_names  # None when the implementation's parameters are unknown (aot, *args)
        if params is not None and not impl.takes_kwargs:
            unknown = [a for a in attrs if a not in params]
            if unknown:
                raise HybridArgumentError(
                    f"{where}: attribute `{unknown[0]}` is not a parameter of `{impl.name}` "
                    f"({', '.join(params) or 'no parameters'})", None,
                    "attribute names must be the names of the implementation's scalar parameters")
        if info.attr_only:
            return
        if params is not None and not info.dynamic_inputs():
            inputs = [p for p in params if p not in attrs]
            required = [p for p in inputs if p not in impl.optional_names]
            if not len(required) <= len(info["inputs"]) <= len(inputs):
                raise HybridArgumentError(
                    f"{where}: declares {len(info['inputs'])} inputs ({', '.join(info.input_names)}) but "
                    f"`{impl.name}` takes {len(inputs)} ({', '.join(inputs) or 'none'})"
                    + (f" besides its attributes {', '.join(attrs)}" if attrs else ""), None,
                    "declare one input per parameter, in the implementation's order")
            check_order(where, "input", info.input_names, inputs)
        n_out = impl.static_output_count
        if n_out is not None and n_out != len(info["outputs"]):
            raise HybridArgumentError(
                f"{where}: declares {len(info['outputs'])} outputs ({', '.join(info.output_names)}) but "
                f"`{impl.name}` returns {n_out}", None, "declare one output per returned tensor, in order")
        if impl.static_output_names is not None:
            check_order(where, "output", info.output_names, impl.static_output_names)

    def _info_for(self, target: str):
        """The operator information that applies on ``target`` (None when there is none)."""
        if not self.reg_info:
            return None
        for info in self.reg_info:
            if info["target"] == target:
                return info
        for info in self.reg_info:
            if info["target"] is None:
                return info
        # None for this target: MindSpore's kernel selection then logs "Not find operator information
        # ... Infer operator information from inputs" and runs the operator; so does hyb, warning once
        warned = self.__dict__.setdefault("_no_info_warned", set())
        if target not in warned:
            warned.add(target)
            have = ", ".join(sorted(i["target"] for i in self.reg_info))
            warnings.warn(HybridWarning(
                f"Custom op `{self.name}` has operator information for {have} only; on {target} the inputs decide "
                "its dtypes and nothing is checked against a registration, as MindSpore does", None,
                f'register a CustomRegOp with .target("{target}") to check the calls on {target}'), stacklevel=3)
        return None

    # ------------------------------------------------------------------ calling
    def __call__(self, *args):
        if isinstance(self._impl, RefusedImpl):
            raise self._impl.error
        target = device_target()
        info = self._info_for(target)
        if info is not None and target not in self._checked:
            self._check_info(info)
            self._checked.add(target)
        inputs, attrs, given_attrs = self._split(args, info)
        dynamic = info.dynamic_inputs() if info is not None else set()
        # A dynamic input is a tuple of arrays; pyfunc receives it so, hybrid and aot kernels
        # receive its arrays as consecutive arguments.
        optional = info.optional_inputs() if info is not None else set()
        arrays = [tuple(to_numpy(x, pos) for x in a) if pos in dynamic else None if a is None and pos in optional
                  else to_numpy(a, pos) for pos, a in enumerate(inputs)]
        flat = flatten(arrays)
        structured = getattr(self._impl, "takes_missing", False)
        if any(a is None for a in flat) and not structured:
            raise HybridUnsupportedError(
                f"Custom op `{self.name}`: an optional input was passed as None; only pyfunc operators take a "
                f'missing input (func_type="{self.func_type}" kernels need every argument)', None,
                "pass a tensor, or leave the optional input out of the operator information")
        rows = matching_rows(self, info, arrays, target)
        shapes = [tuple(shape_of(x) for x in a) if pos in dynamic else shape_of(a) for pos, a in enumerate(arrays)]
        dtypes = [tuple(dtype_of(x) for x in a) if pos in dynamic else dtype_of(a) for pos, a in enumerate(arrays)]
        declared, as_tuple = self._declared_specs(shapes + [shape_of(v) for v in given_attrs],
                                                  dtypes + [dtype_of(v) for v in given_attrs])
        outs = self._impl.run(self, arrays if structured else flat, attrs, declared, target)
        if info is not None and not info.attr_only:
            check_output_rows(self, info, rows, outs)
        if as_tuple is None:  # inferred from the implementation: one output is a tensor
            as_tuple = len(outs) != 1
        tensors = [wrap(o) for o in outs]
        record(self, list(args), dynamic, flat, attrs, outs, tensors, as_tuple)
        return tuple(tensors) if as_tuple else tensors[0]

    def _split(self, args, info):
        """The call's inputs, every attribute's value (by name; None for an optional attribute
        without one) and the values of the attributes the call passed.

        Attributes come from the call's arguments after the inputs, in the information's order,
        else from the information's ``value``, else from its ``default_value``."""
        if info is None:
            return list(args), {}, []
        declared = info["attr"]
        if info.attr_only:
            n_in = next((i for i, a in enumerate(args) if not is_tensor(a)), len(args))
        else:
            n_in = len(info["inputs"])
            optional, n_req = info.optional_inputs(), n_in
            while n_req and n_req - 1 in optional:  # trailing optional inputs may be left out
                n_req -= 1
            if not n_req <= len(args) <= n_in + len(declared):
                raise HybridArgumentError(
                    f"Custom op `{self.name}` takes {n_in} inputs ({', '.join(info.input_names)})"
                    + (f", then optionally its attributes ({', '.join(info.attr_names)})" if declared else "")
                    + f"; got {len(args)} arguments", None, None)
            if len(args) < n_in:  # trailing optional inputs left out
                n_in = len(args)
            for pos in info.dynamic_inputs():
                if pos < n_in and not isinstance(args[pos], (tuple, list)):
                    raise HybridTypeError(
                        f"input {pos} (`{info.input_names[pos]}`) of Custom op `{self.name}` is declared dynamic, "
                        f"so it takes a tuple or list of tensors, not a {type(args[pos]).__name__}", None,
                        f"pass the tensors together, e.g. op(({info.input_names[pos]}1, {info.input_names[pos]}2))")
        given = list(args[n_in:])
        if len(given) > len(declared):
            raise HybridArgumentError(
                f"Custom op `{self.name}` has {len(declared)} attributes ({', '.join(info.attr_names)}) but the call "
                f"passes {len(given)} values after its {n_in} tensor inputs", None,
                "pass the tensors first, then at most one value per attribute in the information's order")
        attrs = {}
        for pos, a in enumerate(declared):
            where = f"attribute `{a['name']}` of Custom op `{self.name}`"
            if pos < len(given):
                value = given[pos]
                if hasattr(value, "asnumpy"):
                    value = value.asnumpy()
                if isinstance(value, np.ndarray) and value.ndim == 0:
                    value = value.item()
                attrs[a["name"]] = reginfo.convert_attr(a, value, where)
            elif a.get("value") is not None:
                attrs[a["name"]] = reginfo.convert_attr(a, a["value"], where)
            elif a.get("default_value") is not None:
                attrs[a["name"]] = reginfo.convert_attr(a, a["default_value"], where)
            elif a["param_type"] == "required":
                raise HybridArgumentError(f"{where} is required and has no value", None,
                                          "pass it after the inputs, or give it a value or default_value in the "
                                          "operator information")
            else:
                attrs[a["name"]] = None
        return list(args[:n_in]), attrs, [attrs[a["name"]] for a in declared[:len(given)]]

    def _declared_specs(self, shapes, dtypes):
        """``([(shape, dtype)], as_tuple)`` from ``out_shape``/``out_dtype`` (either may be None:
        not declared; both None gives ``(None, None)``).

        As in MindSpore, the operator returns a tuple when ``out_shape`` is a tuple or list of
        shapes or ``out_dtype`` a tuple or list of dtypes, even of one entry; ``out_dtype=()``
        (with ``out_shape=()``) declares an operator with no outputs."""
        if self.out_shape is None and self.out_dtype is None:
            return None, None
        shapes = evaluate(self, "out_shape", self.out_shape, shapes)
        dtypes = evaluate(self, "out_dtype", self.out_dtype, dtypes)
        if isinstance(dtypes, (tuple, list)) and not dtypes:
            if shapes is not None and not (isinstance(shapes, (tuple, list)) and not shapes):
                raise HybridArgumentError(
                    f"Custom op `{self.name}`: out_dtype=() declares no outputs but out_shape gives {shapes!r}",
                    None, "an operator without outputs has out_shape=() and out_dtype=()")
            return [], True
        as_tuple = isinstance(dtypes, (tuple, list)) or is_shape_list(shapes)
        shapes = None if shapes is None else as_shapes(self, shapes)
        dtypes = None if dtypes is None else as_dtypes(self, dtypes)
        if shapes is not None and dtypes is not None and len(shapes) != len(dtypes):
            raise HybridArgumentError(
                f"Custom op `{self.name}`: out_shape gives {len(shapes)} outputs but out_dtype gives {len(dtypes)}",
                None, "give one shape and one dtype per output")
        n = len(shapes) if shapes is not None else len(dtypes)
        specs = [(shapes[i] if shapes is not None else None, dtypes[i] if dtypes is not None else None)
                 for i in range(n)]
        return specs, as_tuple

    # ------------------------------------------------------------------ gradients
    def _backward(self, call_args, dynamic, arrays, attrs, outs, douts, as_tuple):
        """Gradients of the call's arguments given the outputs' gradients ``douts``, one per
        tensor (a dynamic input's tensors one by one) and None for each attribute value."""
        douts = [dout_like(d, o) for d, o in zip(douts, outs)]
        n = len(tape_inputs(call_args, dynamic))
        if self.bprop is None:
            grads = self._impl.derived_gradient(self, arrays, attrs, outs, douts)
            return grads + [None] * (n - len(grads))
        grads = self._run_bprop(call_args, dynamic, outs, douts, as_tuple)
        return tape_inputs([g if pos not in dynamic else tuple(g) if isinstance(g, (tuple, list))
                            else (None,) * len(call_args[pos]) for pos, g in enumerate(grads)], dynamic)

    def _run_bprop(self, call_args, dynamic, outs, douts, as_tuple):
        """The user's bprop: ``out`` and ``dout`` are tuples when the operator returns a tuple, a
        dynamic input is the tuple of its tensors."""
        fresh = [tuple(wrap(np.array(to_numpy(x, i))) for x in a) if i in dynamic
                 else wrap(np.array(to_numpy(a, i))) if is_array_like(a) else a for i, a in enumerate(call_args)]
        out = [wrap(o.copy()) for o in outs]
        dout = [wrap(d) for d in douts]
        if as_tuple:
            got = self.bprop(*fresh, tuple(out), tuple(dout))
        else:
            got = self.bprop(*fresh, out[0], dout[0])
        where = f"bprop of Custom op `{self.name}`"
        if not isinstance(got, (tuple, list)):
            raise HybridTypeError(f"{where} returned a {type(got).__name__}, not a tuple of input gradients", None,
                                  "return a tuple with one gradient per input, e.g. `return (dx,)`")
        if len(got) != len(call_args):
            raise HybridArgumentError(f"{where} returned {len(got)} gradients for {len(call_args)} inputs", None,
                                      "return one gradient per input, in the inputs' order")
        grads = []
        for pos, (g, a) in enumerate(zip(got, call_args)):
            if g is None:
                grads.append(None)
                continue
            if pos in dynamic:  # a tuple of gradients
                if not isinstance(g, (tuple, list)) or len(g) != len(a):
                    raise HybridTypeError(f"{where} returned {type(g).__name__} for input {pos}, a tuple of "
                                          f"{len(a)} tensors", None, "return a tuple with one gradient per tensor")
                grads.append(tuple(None if x is None else np.asarray(x.asnumpy() if hasattr(x, "asnumpy") else x)
                                   for x in g))
                continue
            g = np.asarray(g.asnumpy() if hasattr(g, "asnumpy") else g)
            shape = shape_of(a)
            if is_array_like(a) and g.shape != shape:
                raise HybridTypeError(f"{where} returned a gradient of shape {g.shape} for input {pos} "
                                      f"of shape {shape}", None, "each gradient has its input's shape")
            grads.append(g)
        return grads


class RefusedImpl:
    """An implementation hyb does not run: the operator exists, and calling it raises ``error``."""

    param_names = None
    takes_kwargs = True
    optional_names = ()
    static_output_count = None
    static_output_names = None

    def __init__(self, func, error):
        self.name = getattr(func, "__name__", None) or (func if isinstance(func, str) else type(func).__name__)
        self.error = error

    def run(self, *_):
        raise self.error

    def derived_gradient(self, *_):
        raise self.error


def select_infos(func, reg_info, func_type) -> list:
    """The operator information that applies: ``reg_info`` if given, else the decorator's.

    As in MindSpore, the first registration for a target is the one used; a later one for the
    same target is ignored, with a warning."""
    if reg_info is None:
        reg_info = getattr(func, "reg_info", None) if func_type != "aot" else None
    if reg_info is None:
        return []
    infos = [reginfo.normalize_info(i) for i in flatten_nested(reg_info)]
    seen = {}
    for info in infos:
        t = info["target"]
        if t in seen:
            warnings.warn(HybridWarning(
                f"operator information for target {t or '(any)'} is given twice (`{seen[t]['op_name']}` and "
                f"`{info['op_name']}`); the first is used and `{info['op_name']}` is ignored, as in MindSpore"),
                stacklevel=3)
            continue
        seen[t] = info
    return list(seen.values())


def flatten_nested(items) -> list:
    """Registrations given as a list or tuple, nested or not, as one list."""
    if isinstance(items, (list, tuple)):
        return [x for item in items for x in flatten_nested(item)]
    return [items]


def flatten(values) -> list:
    """The arrays of a call, a dynamic input's tuple spread out in place."""
    return [x for v in values for x in (v if isinstance(v, tuple) else (v,))]


def is_tensor(a) -> bool:
    return isinstance(a, np.ndarray) or hasattr(a, "asnumpy")


def check_order(where, what, declared: list, actual: list):
    for i, name in enumerate(declared):
        if name in actual and actual.index(name) != i:
            raise HybridArgumentError(
                f"{where}: {what} {i} is `{name}`, but `{name}` is {what} {actual.index(name)} of the "
                f"implementation ({', '.join(actual)})", None,
                f"declare the {what}s in the implementation's order")


def device_target() -> str:
    return context.device_target()


def tape_inputs(call_args, dynamic) -> list:
    """A call's arguments as the tape sees them: a dynamic input's tensors one by one."""
    return [x for pos, a in enumerate(call_args) for x in (a if pos in dynamic else (a,))]


def record(op, call_args, dynamic, arrays, attrs, outs, tensors, as_tuple):
    """Put the call on hyb's tape when one of its inputs takes part in a gradient.  ``bprop``
    sees a dynamic input as the tuple it was passed as, and returns a tuple of gradients for it."""
    inputs = tape_inputs(call_args, dynamic)
    if not tensors or not autograd.needs_grad(*inputs):
        return

    def backward(douts):
        return op._backward(call_args, dynamic, arrays, attrs, outs, list(douts), as_tuple)

    autograd.record(inputs, tensors, backward, name=f"Custom({op.name})")
