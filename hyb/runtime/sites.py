"""The error a failed run-time check raises: the same for every back end and for the interpreter."""
from __future__ import annotations

from ..codegen.abi import AssertSite
from ..dsl.interp import assertion_error
from ..errors import HybridError, HybridIndexError


def site_error(kernel: str, site, index: int, axis: int) -> HybridError:
    """The error of check site ``site`` (a CheckSite or an AssertSite) that failed in ``kernel``
    with the offending ``index`` on ``axis`` (for a subscript)."""
    if isinstance(site, AssertSite):
        return assertion_error(kernel, site.message, site.span)
    return HybridIndexError(
        f"kernel `{kernel}`: index {index} is out of bounds for axis {axis} of `{site.tensor}` (shape {site.shape})",
        site.span, "the index was computed at run time; check the values it is read from")
