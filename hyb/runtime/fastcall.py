"""Warm calls of a compiled kernel: find the compiled code of a call's signature and run it with
as little work as the checks allow.

A :class:`~hyb.runtime.kernel.Kernel` keeps a table from a signature key (:func:`fast_key`:
the shape and dtype of each array, the type of each scalar, and the value of the scalars the
kernel is specialised on) to an *entry* made from a :class:`CallPlan`.  ``call(table,
values_of, args)`` looks the call up and runs it, or returns :data:`MISS` when the table has
no entry for the key (the kernel then checks and compiles the signature).

Two dispatchers share this interface:

* the C extension ``hyb.runtime._fastcall`` (built when hyb is installed, where a C compiler
  is found): it checks every argument (an ndarray of the plan's dtype in native byte order,
  C-contiguous and aligned, writeable where the kernel writes it; scalars converted to the
  parameter's dtype), allocates the outputs and temporaries, fills the runtime block and calls
  the native function with the GIL released.  Whatever it does not handle goes, unchanged, to
  the plan's ``run`` -- the Python path: non-contiguous, byte-swapped or unaligned arrays
  (copied there), read-only arrays written in place and arrays that may share memory with one
  written in place (refused or copied there), scalars that do not fit (the error comes from
  there), kernels that print, native functions with more than ``MAX_BUFFERS`` buffers;
* the Python dispatcher below, which runs every call through ``run``.

``HYB_FASTCALL=0`` in the environment (read when this module is imported) selects the Python
one; so does a hyb installed without the extension.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Callable

import numpy as np

from . import aligned


@dataclass(frozen=True)
class Slot:
    """One argument of the native function: an array (``written``: the kernel writes it in
    place) or a scalar parameter, passed as a pointer to a value of ``dtype``."""
    scalar: bool
    dtype: np.dtype
    written: bool = False


@dataclass(frozen=True)
class Made:
    """A buffer the call allocates (an output or a temporary): ``allocate(shape, dtype)``,
    which is ``np.empty`` or ``np.zeros``, or, for a large buffer, their 64-byte aligned
    versions in :mod:`hyb.runtime.aligned`."""
    shape: tuple
    dtype: np.dtype
    allocate: Callable

    @property
    def zeroed(self) -> bool:
        return aligned.zeroes(self.allocate)


@dataclass(frozen=True)
class CallPlan:
    """What a warm call of one compiled signature does, for the dispatcher.

    The native function is ``int32 f(void *buf0, ..., void *bufN, int64 *block)``: the
    ``inputs`` in order, then the ``made`` buffers.  ``block`` is the runtime block's initial
    contents (:func:`hyb.codegen.abi.runtime_block`: its layout is described there).  ``outputs``
    are indices into the inputs (>= 0) or the made buffers (``-(k + 1)``).  A non-zero code
    means a run-time check failed: ``failed(code, index, axis)``, with the block's ``RT_INDEX``
    and ``RT_AXIS`` slots after the call, raises its error.  ``run(args)`` is the Python path,
    which handles every call; with ``python_only`` every call goes there."""
    address: int
    inputs: tuple
    made: tuple
    block: tuple
    outputs: tuple
    failed: Callable
    run: Callable
    python_only: bool = False


def fast_key(args, values_of=frozenset()):
    """A cheap signature key for arguments that need no conversion (arrays and plain scalars), or
    None; the scalars at the positions ``values_of`` count with their value."""
    key = []
    for k, a in enumerate(args):
        t = type(a)
        if t is np.ndarray:
            key.append((a.shape, a.dtype))
        elif t in (int, float, bool) or isinstance(a, np.generic):
            key.append((t, a) if k in values_of else t)
        else:
            return None
    return tuple(key)


class _Miss:
    def __repr__(self):
        return "MISS"


class Tracked:
    """An entry whose calls go to a Python ``run(args)``: the Python dispatcher's (``plan.run``)
    and, under either dispatcher, a compiled kernel's without a plan.  Like the C entry it notes
    that it was called (``used``), which tells the kernel which signatures are in use."""

    __slots__ = ("plan", "_run", "used")

    def __init__(self, run: Callable, plan: CallPlan | None = None):
        self.plan = plan
        self._run = run
        self.used = True

    def run(self, args):
        self.used = True
        return self._run(args)


def python_entry(plan: CallPlan):
    """The Python dispatcher's entry: the plan's ``run``, tracked."""
    return Tracked(plan.run, plan)


def python_call(table: dict, values_of, args: tuple):
    """Run the call through its plan's ``run``, or return :data:`MISS`."""
    key = fast_key(args, values_of)
    entry = table.get(key) if key is not None else None
    if entry is None:
        return MISS
    return entry.run(args)


def _load_native():
    try:
        from . import _fastcall
    except ImportError:
        return None
    return _fastcall


native = _load_native()  # the C extension, None where it was not built
if native is not None:
    MISS = native.MISS
    native_entry = native.Entry
    native_call = native.call
else:
    MISS = _Miss()
    native_entry = native_call = None

NATIVE = native is not None and os.environ.get("HYB_FASTCALL", "1").strip() != "0"
"""Whether warm calls go through the C dispatcher."""

entry = native_entry if NATIVE else python_entry
"""``entry(plan)``: what a kernel's table holds for one signature."""
call = native_call if NATIVE else python_call
"""``call(table, values_of, args)``: the call's result, or :data:`MISS`."""
