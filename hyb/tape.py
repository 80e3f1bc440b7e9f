"""The tape of eager operations: reverse-mode differentiation over :class:`hyb.Tensor` values.

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

The interface for operators is two functions::

    needs_grad(*values) -> bool
    record(inputs, outputs, backward) -> None

``backward(douts)`` receives one NumPy array per output (zeros for an output no gradient
reached) and returns one entry per input: a NumPy array (the gradient of that input) or
``None``.  Backward functions run with recording switched off, so an operator may use other
operators (Custom ops included) inside its backward.  Gradients of gradients are not supported.

This module knows no Tensor class (it sees values through their ``_node`` attributes), so
:mod:`hyb.tensor` builds on it and :mod:`hyb.autograd` builds on both.
"""
from __future__ import annotations

import contextlib
import itertools
from collections.abc import Callable, Sequence

import numpy as np

from .dsl.types import is_float_dtype
from .errors import HybridArgumentError, HybridTypeError

__all__ = ["needs_grad", "record", "no_grad", "enable_grad", "is_grad_enabled", "gradients", "unbroadcast",
           "Node"]

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
    if (np.issubdtype(t.dtype, np.inexact) or is_float_dtype(t.dtype)) and g.dtype != t.dtype:
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
            g = np.zeros(w.shape, w.dtype if np.issubdtype(w.dtype, np.inexact) or is_float_dtype(w.dtype)
                         else np.float32)
        result.append(np.array(g))               # own, writable, contiguous
    return result
