"""The error a failed run-time check raises: the same for every back end and for the interpreter."""
from __future__ import annotations

from ..codegen.abi import AssertSite
from ..dsl.interp import assertion_error, index_error
from ..errors import HybridError


def site_error(kernel: str, site, index: int, axis: int) -> HybridError:
    """The error of check site ``site`` (a CheckSite or an AssertSite) that failed in ``kernel``
    with the offending ``index`` on ``axis`` (for a subscript)."""
    if isinstance(site, AssertSite):
        return assertion_error(kernel, site.message, site.span)
    return index_error(kernel, site.tensor, site.shape, index, axis, site.span, site.reason)
