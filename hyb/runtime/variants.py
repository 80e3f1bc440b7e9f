"""What a long-running process keeps of the code it compiled.

Two bounds keep a process that meets many kernels or many shapes from growing without end:

* **Records.**  A compiled signature needs, to be called, its native code and the plan of its
  arguments.  The pipeline's records (the middle end's isl objects and loop nests, the unoptimised
  LLVM IR) serve only ``inspect`` and are made again by the same stage functions when asked for,
  as for code loaded from the disk cache.  The records of the ``RECENT`` signatures compiled or
  inspected last in the process are kept (a user inspecting what was just compiled does not pay for
  the middle end twice); an older signature's are released (:meth:`CompiledKernel.release`).
* **Signatures.**  A kernel keeps at most ``max_variants`` compiled signatures (the kernel option,
  else ``HYB_MAX_VARIANTS``, else ``DEFAULT_MAX_VARIANTS``).  Past that, compiling one more drops
  one the calls have not used since the last drop, oldest first (the "second chance" a clock
  replacement gives): a warm call marks its entry used at the cost of one store
  (:class:`hyb.runtime.fastcall.Tracked` and the C dispatcher's entries).  A dropped signature is
  compiled again (or loaded from the disk cache) when it is called again.
"""
from __future__ import annotations

import os
import threading
import weakref
from collections import OrderedDict

from ..errors import HybridArgumentError

RECENT = 8
DEFAULT_MAX_VARIANTS = 64

_recent: OrderedDict = OrderedDict()  # id -> weak reference to a compiled kernel whose records are kept, oldest first
_lock = threading.Lock()


def keep_records(ck) -> None:
    """``ck`` (a CompiledKernel) has just been compiled or inspected: its records stay; those of
    the signature compiled or inspected longest ago beyond ``RECENT`` are released."""
    with _lock:
        _recent.pop(id(ck), None)
        _recent[id(ck)] = weakref.ref(ck)  # (weakly: a kernel dropped by its user goes, records and all)
        while len(_recent) > RECENT:
            _, ref = _recent.popitem(last=False)
            old = ref()
            if old is not None:
                old.release()


def max_variants(option: int | None) -> int:
    """The bound on one kernel's compiled signatures: its option, else ``HYB_MAX_VARIANTS``."""
    if option is not None:
        return option
    text = os.environ.get("HYB_MAX_VARIANTS", "").strip()
    if not text:
        return DEFAULT_MAX_VARIANTS
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise HybridArgumentError(f"HYB_MAX_VARIANTS={text!r} must be a positive integer", None,
                                  f"unset it for the default, {DEFAULT_MAX_VARIANTS}")
    return value


def _used(compiled, entries: list) -> bool:
    return bool(getattr(compiled, "used", False)) or any(getattr(e, "used", False) for e in entries)


def trim(cache: dict, fast: dict, plans: dict, limit: int, newest) -> list:
    """Drop signatures of a kernel's ``cache`` (signature -> compiled kernel, in the order they
    were compiled) until ``limit`` remain, never ``newest`` (the key just compiled): first those
    whose entries in ``plans`` (warm calls, by the keys of ``fast``) were not used since the last
    trim, oldest first, then the oldest.  Every survivor's marks are cleared.  Returns the keys
    dropped."""
    excess = len(cache) - limit
    if excess <= 0:
        return []
    keys_of: dict = {}
    for k, v in fast.items():
        keys_of.setdefault(id(v), []).append(k)
    candidates = [key for key in cache if key != newest]
    idle = [key for key in candidates
            if not _used(cache[key], [plans[k] for k in keys_of.get(id(cache[key]), ()) if k in plans])]
    idle_keys = set(idle)
    victims = (idle + [key for key in candidates if key not in idle_keys])[:excess]
    for key in victims:
        compiled = cache.pop(key)
        for k in keys_of.get(id(compiled), ()):
            fast.pop(k, None)
            plans.pop(k, None)
    for key, compiled in cache.items():  # a fresh round: marks from here on
        if hasattr(compiled, "used"):
            compiled.used = False
        for k in keys_of.get(id(compiled), ()):
            e = plans.get(k)
            if e is not None and hasattr(e, "used"):
                e.used = False
    return victims
