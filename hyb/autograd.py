"""Reverse-mode automatic differentiation over eager :class:`hyb.Tensor` operations.

Every operation that produces Tensors from Tensors can put itself on the *tape* by calling
:func:`record` with its inputs, its outputs and a backward function.  hyb's own Tensor
arithmetic does this (``hyb/tensor.py``), and so do Custom operators.  The tape is not a global
list: each recorded operation becomes a :class:`Node` that the outputs point to, and the node
points to the Tensors it was computed from.  The graph behind a result therefore lives exactly
as long as the result does.

Nodes are numbered in the order they are recorded.  To differentiate, :func:`gradients` walks
back from the results, collects the nodes they depend on and runs their backward functions in
decreasing number: a node runs only after every node that used its outputs, which is a
topological order.  Gradients of the same Tensor add up; the leaves asked for get the sum.

On top of that sit MindSpore's user-facing forms:

* :func:`grad` and :func:`value_and_grad` (``hyb.grad``, ``hyb.value_and_grad``);
* :class:`GradOperation` (``hyb.ops.GradOperation``).

The interface for operators is two functions::

    needs_grad(*values) -> bool
    record(inputs, outputs, backward) -> None

``backward(douts)`` receives one NumPy array per output (zeros for an output no gradient
reached) and returns one entry per input: a NumPy array (the gradient of that input) or
``None``.  Backward functions run with recording switched off, so an operator may use other
operators (Custom ops included) inside its backward.  Gradients of gradients are not supported.
"""
from __future__ import annotations

import contextlib
import itertools
from collections.abc import Callable, Sequence

import numpy as np

from .errors import HybridArgumentError, HybridTypeError

__all__ = ["needs_grad", "record", "no_grad", "enable_grad", "is_grad_enabled", "gradients",
           "grad", "value_and_grad", "GradOperation", "Node"]

_counter = itertools.count()
_disabled = 0          # > 0 inside no_grad(): nothing is recorded


# --------------------------------------------------------------------------- recording

class Node:
    """One recorded operation: what it was computed from and how to send gradients back.

    ``inputs`` holds the ``(position, Tensor)`` pairs of the inputs that were tracked when the
    operation ran; ``n_inputs`` is the number of positional inputs the backward function answers
    for; ``outputs`` holds ``(shape, dtype)`` of each output, to make zero gradients.
    """

    __slots__ = ("seq", "name", "backward", "inputs", "n_inputs", "outputs")

    def __init__(self, name, backward, inputs, n_inputs, outputs):
        self.seq = next(_counter)
        self.name = name
        self.backward = backward
        self.inputs = inputs
        self.n_inputs = n_inputs
        self.outputs = outputs

    def __repr__(self):
        return f"<Node #{self.seq} {self.name}: {len(self.inputs)} tracked input(s), {len(self.outputs)} output(s)>"


def _is_tracked(value) -> bool:
    return getattr(value, "_tracked", False) is True


def is_grad_enabled() -> bool:
    """False inside :func:`no_grad` (and while backward functions run)."""
    return _disabled == 0


@contextlib.contextmanager
def no_grad():
    """Run a block without recording anything on the tape."""
    global _disabled
    _disabled += 1
    try:
        yield
    finally:
        _disabled -= 1


@contextlib.contextmanager
def enable_grad():
    """Run a block with recording switched on, even inside :func:`no_grad`."""
    global _disabled
    saved, _disabled = _disabled, 0
    try:
        yield
    finally:
        _disabled = saved


def needs_grad(*values) -> bool:
    """True when recording is on and any Tensor among ``values`` (lists and tuples are looked
    into) requires a gradient or was computed by a recorded operation."""
    if _disabled:
        return False
    for v in values:
        if isinstance(v, (list, tuple)):
            if needs_grad(*v):
                return True
        elif _is_tracked(v):
            return True
    return False


def record(inputs: Sequence, outputs: Sequence, backward: Callable, name: str | None = None) -> None:
    """Put one operation on the tape, if any of its inputs needs a gradient.

    ``inputs`` are the operation's positional inputs (Tensors or anything else), ``outputs`` the
    Tensors it returned (new Tensors, not its inputs).  ``backward(douts)`` gets one NumPy array
    per output and returns a list with one entry per input: its gradient as an array of the
    input's shape, or ``None``.  Afterwards the outputs are *tracked*: operations on them are
    recorded too, and gradients flow through them back to the inputs.
    """
    inputs = list(inputs)
    if not needs_grad(*inputs):
        return
    outputs = list(outputs)
    for out in outputs:
        if not hasattr(out, "_node"):
            raise HybridTypeError(f"record(): outputs must be hyb Tensors, got {type(out).__name__}", None,
                                  "wrap each output array in hyb.Tensor before recording")
        if any(out is x for x in inputs):
            raise HybridArgumentError("record(): an output is also an input; outputs must be new Tensors", None,
                                      "return a new Tensor (Tensor.from_numpy(x.asnumpy())) for an identity")
    tracked = [(i, x) for i, x in enumerate(inputs) if _is_tracked(x)]
    node = Node(name or getattr(backward, "__name__", "op"), backward, tracked, len(inputs),
                [(tuple(out.shape), out.dtype) for out in outputs])
    for i, out in enumerate(outputs):
        out._node = node
        out._out_index = i


# --------------------------------------------------------------------------- backward pass

def _key(t):
    """Where the gradient of Tensor ``t`` is collected: per node output, or per leaf object."""
    node = t._node
    return ("out", node.seq, t._out_index) if node is not None else ("leaf", id(t))


def _accumulate(grads: dict, key, g) -> None:
    grads[key] = g if key not in grads else grads[key] + g


def _fit(g, shape, what: str):
    """Check that a gradient has the shape of what it belongs to; one that broadcasts to that
    shape (a scalar, say) is spread over it."""
    g = np.asarray(g)
    if g.shape == shape:
        return g
    try:
        return np.array(np.broadcast_to(g, shape))
    except ValueError:
        raise HybridArgumentError(f"{what} has shape {g.shape}, expected {shape}", None,
                                  "a backward function returns one gradient per input, shaped like that "
                                  "input") from None


def _as_dtype_of(g, t):
    """A gradient in the dtype of its float Tensor (float32 stays float32 along the way)."""
    if np.issubdtype(t.dtype, np.inexact) and g.dtype != t.dtype:
        return g.astype(t.dtype)
    return g


def unbroadcast(g: np.ndarray, shape: tuple) -> np.ndarray:
    """Sum ``g`` over the axes that broadcasting added or stretched, so that it has ``shape``."""
    g = np.asarray(g)
    shape = tuple(shape)
    if g.shape == shape:
        return g
    if g.ndim > len(shape):
        g = g.sum(axis=tuple(range(g.ndim - len(shape))))
    stretched = tuple(i for i, n in enumerate(shape) if n == 1 and g.shape[i] != 1)
    if stretched:
        g = g.sum(axis=stretched, keepdims=True)
    if g.shape != shape:
        raise ValueError(f"cannot reduce a gradient of shape {g.shape} to {shape}")
    return g


def gradients(outputs: Sequence, sens: Sequence, wrt: Sequence) -> list[np.ndarray]:
    """Gradients of ``sum(sens[i] * outputs[i])`` with respect to each Tensor of ``wrt``.

    ``outputs`` are Tensors, ``sens`` one array per output (broadcast to its shape).  A Tensor
    of ``wrt`` that the outputs do not depend on gets zeros.  Gradients have the dtype of the
    Tensor they belong to when that is a float dtype.
    """
    grads: dict = {}
    nodes: dict = {}
    stack = []
    for out, s in zip(outputs, sens):
        s = _fit(getattr(s, "_data", s), tuple(out.shape), "the sensitivity (sens) of an output")
        _accumulate(grads, _key(out), _as_dtype_of(s, out))
        if out._node is not None:
            stack.append(out._node)
    while stack:                                   # every node the outputs depend on
        node = stack.pop()
        if node.seq in nodes:
            continue
        nodes[node.seq] = node
        stack.extend(x._node for _, x in node.inputs if x._node is not None)

    with no_grad():
        for seq in sorted(nodes, reverse=True):    # later nodes first: a topological order
            node = nodes[seq]
            received = [grads.pop(("out", seq, i), None) for i in range(len(node.outputs))]
            if all(g is None for g in received):
                continue
            douts = [np.zeros(shape, dtype) if g is None else g for g, (shape, dtype) in zip(received, node.outputs)]
            results = node.backward(douts)
            if isinstance(results, np.ndarray) or not isinstance(results, (list, tuple)):
                results = [results]
            results = list(results)
            if len(results) != node.n_inputs:
                raise HybridArgumentError(
                    f"the backward function of `{node.name}` returned {len(results)} gradient(s) "
                    f"for {node.n_inputs} input(s)", None, "return one gradient (or None) per input, in order")
            for pos, x in node.inputs:
                g = results[pos]
                if g is None:
                    continue
                g = _fit(np.asarray(getattr(g, "_data", g)), tuple(x.shape),
                         f"the gradient `{node.name}` returned for its input {pos}")
                _accumulate(grads, _key(x), _as_dtype_of(g, x))

    result = []
    for w in wrt:
        g = grads.get(_key(w))
        if g is None:
            g = np.zeros(w.shape, w.dtype if np.issubdtype(w.dtype, np.inexact) else np.float32)
        result.append(np.array(g))               # own, writable, contiguous
    return result


# --------------------------------------------------------------------------- grad, value_and_grad

def _tensor_types():
    from .tensor import Parameter, Tensor
    return Tensor, Parameter


def _positions(grad_position):
    """``None``, or ``(tuple of positions, unwrap)``: an int (or a one-element tuple, as in
    MindSpore) gives a single gradient rather than a tuple."""
    if grad_position is None:
        return None
    if isinstance(grad_position, bool) or not isinstance(grad_position, (int, tuple)):
        raise HybridTypeError(f"grad_position must be an int, a tuple of ints or None, got {grad_position!r}")
    positions = (grad_position,) if isinstance(grad_position, int) else grad_position
    if not positions:
        raise HybridArgumentError("grad_position is an empty tuple", None, "use None to differentiate no input")
    for p in positions:
        if isinstance(p, bool) or not isinstance(p, int):
            raise HybridTypeError(f"grad_position holds {p!r}; its elements must be ints")
        if p < 0:
            raise HybridArgumentError(f"grad_position {p} is negative; positions count from 0")
    if len(set(positions)) != len(positions):
        raise HybridArgumentError(f"grad_position {positions} names a position twice")
    return positions, len(positions) == 1


def _weights(weights):
    """``None``, or ``(list of Parameters, unwrap)``: a single Parameter gives a single
    gradient, a list or tuple (``cell.trainable_params()``) a tuple."""
    if weights is None:
        return None
    Tensor, Parameter = _tensor_types()
    single = isinstance(weights, Tensor)
    items = [weights] if single else list(weights)
    for w in items:
        if not isinstance(w, Tensor):
            raise HybridTypeError(f"weights must be Parameters (e.g. cell.trainable_params()), got {type(w).__name__}")
    return items, single


def _as_leaf(value, position: int):
    """A fresh Tensor leaf that requires a gradient, sharing the data of ``value``."""
    Tensor, _ = _tensor_types()
    if isinstance(value, Tensor):
        data = value._data
    elif isinstance(value, np.ndarray):
        data = value
    else:
        raise HybridArgumentError(f"input {position} is a {type(value).__name__}, which cannot be differentiated",
                                  None, "pass a hyb.Tensor or a NumPy array there, or leave its position out "
                                        "of grad_position")
    leaf = Tensor.from_numpy(data)
    leaf.requires_grad = True
    return leaf


def _flatten_outputs(out):
    """The Tensors of a function's result (a Tensor, or nested tuples and lists of them)."""
    Tensor, _ = _tensor_types()
    if isinstance(out, Tensor):
        return [out]
    if isinstance(out, (tuple, list)):
        return [t for item in out for t in _flatten_outputs(item)]
    if isinstance(out, (np.ndarray, np.generic, int, float)):
        return [Tensor(out)]                   # a constant: no gradient flows from it
    raise HybridTypeError(f"the function to differentiate returned a {type(out).__name__}; "
                          "it must return Tensors (or tuples of them)")


def _flatten_sens(sens, out):
    """One sensitivity array per output Tensor, following the structure of ``out``."""
    Tensor, _ = _tensor_types()
    if isinstance(out, (tuple, list)):
        if not isinstance(sens, (tuple, list)) or len(sens) != len(out):
            raise HybridArgumentError(f"the function returned {len(out)} outputs, so sens must be a tuple of "
                                      f"{len(out)}, got {type(sens).__name__}")
        return [s for o, se in zip(out, sens) for s in _flatten_sens(se, o)]
    return [np.asarray(sens._data if isinstance(sens, Tensor) else sens)]


def _detach(value):
    """The same structure with every Tensor replaced by an untracked Tensor of the same data."""
    Tensor, _ = _tensor_types()
    if isinstance(value, Tensor):
        return Tensor.from_numpy(value._data)
    if isinstance(value, tuple):
        return tuple(_detach(v) for v in value)
    if isinstance(value, list):
        return [_detach(v) for v in value]
    return value


def _differentiate(fn, args, positions, weights, has_aux, sens=None):
    """Run ``fn`` on ``args`` with the inputs at ``positions`` as fresh leaves; return
    ``(full output, aux tuple or None, input gradients, weight gradients)`` as Tensors."""
    Tensor, _ = _tensor_types()
    args = list(args)
    leaves = []
    for p in positions:
        if p >= len(args):
            raise HybridArgumentError(f"grad_position {p} is out of range: the function got {len(args)} input(s)")
        args[p] = _as_leaf(args[p], p)
        leaves.append(args[p])
    with enable_grad():
        out = fn(*args)
    aux = None
    diff_out = out
    if has_aux:
        if not isinstance(out, tuple) or len(out) < 2:
            raise HybridArgumentError("with has_aux=True the function must return a tuple of at least two "
                                      "values: the output to differentiate, then the auxiliary ones")
        diff_out, aux = out[0], tuple(out[1:])
    roots = _flatten_outputs(diff_out)
    if sens is None:
        sens_arrays = [np.ones(t.shape, t.dtype) for t in roots]
    else:
        sens_arrays = _flatten_sens(sens, diff_out)
    grads = gradients(roots, sens_arrays, leaves + list(weights))
    grads = [Tensor.from_numpy(g) for g in grads]
    return _detach(out), _detach(aux), grads[:len(leaves)], grads[len(leaves):]


def _arrange(input_grads, weight_grads, pos_spec, weight_spec):
    """Shape the gradients as MindSpore returns them."""
    parts = []
    if pos_spec is not None:
        parts.append(input_grads[0] if pos_spec[1] else tuple(input_grads))
    if weight_spec is not None:
        parts.append(weight_grads[0] if weight_spec[1] else tuple(weight_grads))
    return parts[0] if len(parts) == 1 else tuple(parts)


def _check_spec(grad_position, weights):
    pos_spec, weight_spec = _positions(grad_position), _weights(weights)
    if pos_spec is None and weight_spec is None:
        raise HybridArgumentError("grad_position and weights are both None: there is nothing to differentiate",
                                  None, "give grad_position (inputs), weights (e.g. net.trainable_params()), or both")
    return pos_spec, weight_spec


def grad(fn, grad_position=0, weights=None, has_aux=False):
    """A function computing the gradient of ``fn`` (a function or a Cell), as ``mindspore.grad``.

    ``grad_position`` picks the inputs: an int gives one gradient, a tuple a tuple of them (a
    one-element tuple gives one gradient, as in MindSpore), ``None`` no input (then ``weights``
    is required).  ``weights`` are Parameters (``net.trainable_params()``, or one Parameter);
    with both the result is ``(input_grads, weight_grads)``.  The output's sensitivity is ones;
    when ``fn`` returns several outputs, each contributes.  With ``has_aux=True``, ``fn`` returns
    ``(out, aux1, ...)``, only ``out`` is differentiated and the result is
    ``(gradients, (aux1, ...))``.  Inputs at the chosen positions may be Tensors or NumPy arrays.
    """
    pos_spec, weight_spec = _check_spec(grad_position, weights)

    def grad_fn(*args):
        _, aux, gi, gw = _differentiate(fn, args, pos_spec[0] if pos_spec else (),
                                        weight_spec[0] if weight_spec else [], has_aux)
        result = _arrange(gi, gw, pos_spec, weight_spec)
        return (result, aux) if has_aux else result

    grad_fn.__name__ = f"grad_{getattr(fn, '__name__', type(fn).__name__)}"
    return grad_fn


def value_and_grad(fn, grad_position=0, weights=None, has_aux=False):
    """Like :func:`grad`, but the function returns ``(value, gradients)``, where ``value`` is
    everything ``fn`` returned (with ``has_aux``, the whole tuple; only its first element is
    differentiated)."""
    pos_spec, weight_spec = _check_spec(grad_position, weights)

    def value_and_grad_fn(*args):
        out, _, gi, gw = _differentiate(fn, args, pos_spec[0] if pos_spec else (),
                                        weight_spec[0] if weight_spec else [], has_aux)
        return out, _arrange(gi, gw, pos_spec, weight_spec)

    value_and_grad_fn.__name__ = f"value_and_grad_{getattr(fn, '__name__', type(fn).__name__)}"
    return value_and_grad_fn


class GradOperation:
    """MindSpore's ``ops.GradOperation``: ``GradOperation(...)(net)`` or, with ``get_by_list``,
    ``GradOperation(get_by_list=True)(net, weights)`` is a function of the net's inputs.

    * default: the gradient of the first input;
    * ``get_all=True``: a tuple with the gradient of every Tensor (or NumPy array) input;
    * ``get_by_list=True``: a tuple with the gradient of each of ``weights``;
    * both: ``(input_grads, weight_grads)``;
    * ``sens_param=True``: the function takes the output's sensitivity (the gradient flowing
      into the output, a tuple for several outputs) as its last argument, instead of ones.
    """

    def __init__(self, get_all=False, get_by_list=False, sens_param=False):
        for name, value in (("get_all", get_all), ("get_by_list", get_by_list), ("sens_param", sens_param)):
            if not isinstance(value, bool):
                raise HybridTypeError(f"GradOperation's {name} must be a bool, got {value!r}")
        self.get_all = get_all
        self.get_by_list = get_by_list
        self.sens_param = sens_param

    def __repr__(self):
        return (f"GradOperation(get_all={self.get_all}, get_by_list={self.get_by_list}, "
                f"sens_param={self.sens_param})")

    def __call__(self, fn, weights=None):
        if self.get_by_list and weights is None:
            raise HybridArgumentError("GradOperation(get_by_list=True) needs the weights: grad_op(net, weights)",
                                      None, "pass net.trainable_params()")
        weight_spec = _weights(weights) if self.get_by_list else None
        Tensor, _ = _tensor_types()

        def grad_fn(*args):
            sens = None
            if self.sens_param:
                if not args:
                    raise HybridArgumentError("GradOperation(sens_param=True): the sensitivity is missing",
                                              None, "pass it as the last argument, after the net's inputs")
                args, sens = args[:-1], args[-1]
            if self.get_all:
                positions = tuple(i for i, a in enumerate(args) if isinstance(a, (Tensor, np.ndarray)))
                pos_spec = (positions, False)
            elif self.get_by_list:
                positions, pos_spec = (), None
            else:
                if not args:
                    raise HybridArgumentError("GradOperation: the function has no input to differentiate")
                positions, pos_spec = (0,), ((0,), True)
            _, _, gi, gw = _differentiate(fn, args, positions, weight_spec[0] if weight_spec else [], False, sens)
            return _arrange(gi, gw, pos_spec, weight_spec)

        grad_fn.__name__ = f"grad_{getattr(fn, '__name__', type(fn).__name__)}"
        return grad_fn
