"""``hyb.set_context`` / ``hyb.get_context``: MindSpore's global execution settings.

hyb always runs eagerly: ``mode=hyb.GRAPH_MODE`` is accepted (so MindSpore scripts run
unchanged) and behaves like ``hyb.PYNATIVE_MODE``.  ``device_target`` picks the back end that
Custom operators and kernels made without ``target=`` compile for: ``"CPU"`` (LLVM, the default)
or ``"GPU"`` (CUDA); read it with :func:`device_target`.  Other MindSpore settings (``device_id``, ``save_graphs``, ...) are
stored and otherwise ignored.
"""
from __future__ import annotations

from .errors import HybridArgumentError, HybridTypeError

__all__ = ["GRAPH_MODE", "PYNATIVE_MODE", "set_context", "get_context", "set_device", "device_target"]

GRAPH_MODE = 0
PYNATIVE_MODE = 1

TARGETS = ("CPU", "GPU")
_DEFAULTS = {"mode": PYNATIVE_MODE, "device_target": "CPU", "device_id": 0}
_settings = dict(_DEFAULTS)


def set_context(**kwargs) -> None:
    """``hyb.set_context(mode=hyb.GRAPH_MODE, device_target="GPU", ...)``."""
    if "mode" in kwargs:
        mode = kwargs["mode"]
        if isinstance(mode, bool) or mode not in (GRAPH_MODE, PYNATIVE_MODE):
            raise HybridArgumentError(f"mode {mode!r} is not a mode", None,
                                      "use hyb.GRAPH_MODE (0) or hyb.PYNATIVE_MODE (1); both run eagerly")
    if "device_target" in kwargs:
        target = kwargs["device_target"]
        if not isinstance(target, str):
            raise HybridTypeError(f"device_target must be a string, got {type(target).__name__}")
        if target.upper() not in TARGETS:
            raise HybridArgumentError(f"device_target {target!r} is not supported: hyb compiles for "
                                      "'CPU' (LLVM) and 'GPU' (CUDA)", None,
                                      "use device_target=\"CPU\" or device_target=\"GPU\"")
        kwargs["device_target"] = target.upper()
    _settings.update(kwargs)
    _push_target()


def set_device(device_target: str, device_id: int | None = None) -> None:
    """``hyb.set_device("CPU")``: MindSpore 2.x's shorthand for the device part of ``set_context``."""
    settings = {"device_target": device_target}
    if device_id is not None:
        settings["device_id"] = device_id
    set_context(**settings)


def get_context(key: str):
    """The value of one setting: ``"mode"``, ``"device_target"``, ``"device_id"`` or any key
    given to :func:`set_context` before."""
    if key not in _settings:
        raise HybridArgumentError(f"no context setting {key!r}", None,
                                  "known settings: " + ", ".join(sorted(_settings)))
    return _settings[key]


def device_target() -> str:
    """``"CPU"`` or ``"GPU"``: the back end Custom operators and kernels without ``target=`` compile for."""
    return _settings["device_target"]


def _reset() -> None:
    """Back to the defaults (for tests)."""
    _settings.clear()
    _settings.update(_DEFAULTS)
    _push_target()


def _push_target() -> None:
    """Kernels made without ``target=`` compile for the device target's back end."""
    from .runtime.kernel import set_default_target
    set_default_target("cuda" if _settings["device_target"] == "GPU" else "cpu")
