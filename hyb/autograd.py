"""MindSpore's user-facing differentiation over the tape (:mod:`hyb.tape`).

* :func:`grad` and :func:`value_and_grad` (``hyb.grad``, ``hyb.value_and_grad``);
* :class:`GradOperation` (``hyb.ops.GradOperation``).

The tape's operator interface (:func:`needs_grad`, :func:`record`, :func:`no_grad`, ...) is
re-exported here, where operators have always found it.
"""
from __future__ import annotations

import numpy as np

from .errors import HybridArgumentError, HybridTypeError
from .tape import (Node, enable_grad, gradients, is_grad_enabled, needs_grad, no_grad, record,
                   unbroadcast)
from .tensor import Tensor

__all__ = ["needs_grad", "record", "no_grad", "enable_grad", "is_grad_enabled", "gradients", "unbroadcast",
           "grad", "value_and_grad", "GradOperation", "Node"]


# --------------------------------------------------------------------------- grad, value_and_grad

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
    single = isinstance(weights, Tensor)
    items = [weights] if single else list(weights)
    for w in items:
        if not isinstance(w, Tensor):
            raise HybridTypeError(f"weights must be Parameters (e.g. cell.trainable_params()), got {type(w).__name__}")
    return items, single


def _as_leaf(value, position: int):
    """A fresh Tensor leaf that requires a gradient, sharing the data of ``value``."""
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
    if isinstance(out, (tuple, list)):
        if not isinstance(sens, (tuple, list)) or len(sens) != len(out):
            raise HybridArgumentError(f"the function returned {len(out)} outputs, so sens must be a tuple of "
                                      f"{len(out)}, got {type(sens).__name__}")
        return [s for o, se in zip(out, sens) for s in _flatten_sens(se, o)]
    return [np.asarray(sens._data if isinstance(sens, Tensor) else sens)]


def _detach(value):
    """The same structure with every Tensor replaced by an untracked Tensor of the same data."""
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
