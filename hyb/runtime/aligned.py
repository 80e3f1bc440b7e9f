"""Large outputs and temporaries on 64-byte boundaries.

NumPy allocates with ``malloc``, whose large blocks start 16 bytes past a page here, so a
64-byte vector store (AVX-512) into such an array straddles two cache lines. A kernel storing
along rows barely notices; one storing a block of rows at a time (a transposed copy out, which
writes a line of each of sixteen rows) writes every line in two halves at different times: a
2048x1024 float32 bias-SiLU stored transposed took 1.0-1.1 ms into an array 32 bytes off a line
and 0.7-0.8 ms into an aligned one. So buffers of at least :data:`LARGE` bytes are carved out of
a slightly larger NumPy array at its first 64-byte boundary; smaller ones are allocated as
NumPy allocates (the extra call would cost more than the alignment gains there). The result is
an ordinary C-contiguous, writeable array (a view of the larger one: ``base`` is set).
"""
from __future__ import annotations

import math

import numpy as np

ALIGN = 64
LARGE = 1 << 16


def empty(shape, dtype):
    """``np.empty(shape, dtype)`` starting on a 64-byte boundary."""
    return _carve(np.empty, shape, dtype)


def zeros(shape, dtype):
    """``np.zeros(shape, dtype)`` starting on a 64-byte boundary."""
    return _carve(np.zeros, shape, dtype)


def allocator(zero: bool, shape, dtype):
    """The allocator for a buffer: aligned where its size is known now and at least LARGE bytes."""
    if all(isinstance(d, int) for d in shape) and math.prod(shape) * np.dtype(dtype).itemsize >= LARGE:
        return zeros if zero else empty
    return np.zeros if zero else np.empty


def zeroes(allocate) -> bool:
    """Whether ``allocate`` fills its buffers with zeros."""
    return allocate is np.zeros or allocate is zeros


def _carve(make, shape, dtype):
    dt = np.dtype(dtype)
    shape = tuple(shape)
    n = math.prod(shape) * dt.itemsize
    raw = make(n + ALIGN, np.uint8)
    off = -raw.__array_interface__["data"][0] % ALIGN
    return raw[off:off + n].view(dt).reshape(shape)
