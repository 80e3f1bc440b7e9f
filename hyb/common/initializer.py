"""MindSpore's ``mindspore.common.initializer`` names that ``Tensor(shape=..., dtype=...,
init=...)`` takes in hyb: ``Zero()`` and ``One()``.  Random initializers are not provided: pass
the data (``hyb.Tensor(np.random.normal(size=shape))``)."""
from __future__ import annotations

__all__ = ["Zero", "One"]


class Zero:
    """Fills a new Tensor with zeros."""

    def __repr__(self):
        return "Zero()"


class One:
    """Fills a new Tensor with ones."""

    def __repr__(self):
        return "One()"
