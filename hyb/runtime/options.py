"""A kernel's options (``target=``, ``fastmath=``, ``schedule=``, ``threads=``, ``shapes=``,
``max_variants=``), checked
once when the kernel is made and kept as the frozen :class:`KernelOptions`.

The pipeline reads the record, never the keywords: :meth:`KernelOptions.schedule_for` resolves the
``schedule=`` option for one target (what the user left out, the target decides), and the disk
cache's key takes :meth:`KernelOptions.code_key`, everything in the record that changes the code.
"""
from __future__ import annotations

from dataclasses import dataclass, field, fields, replace

from ..errors import HybridArgumentError
from ..schedule.options import ScheduleOptions, parse_options
from .generic import SHAPE_MODES
from .variants import DEFAULT_MAX_VARIANTS

TARGETS = ("cpu", "cuda")
KEYS = ("target", "fastmath", "schedule", "threads", "shapes", "max_variants")


@dataclass(frozen=True)
class KernelOptions:
    """The options of one kernel, checked.  Read like the keywords it was made from
    (``options["fastmath"]``, ``dict(options)``); the values that are ``None`` are the defaults."""

    target: str | None = None  # None: hyb.set_context(device_target=...) decides, when the kernel runs
    fastmath: bool = False
    schedule: ScheduleOptions = field(default_factory=ScheduleOptions)  # as parsed: None fields undecided
    threads: int | None = None  # None: HYB_NUM_THREADS or every CPU
    shapes: str = "auto"
    max_variants: int | None = None  # None: HYB_MAX_VARIANTS or 64 (hyb.runtime.variants)

    @classmethod
    def parse(cls, options: dict) -> "KernelOptions":
        """The record of a kernel's keywords, or a HybridArgumentError naming the bad one."""
        for key in options:
            if key not in KEYS:
                raise HybridArgumentError(f"unknown kernel option `{key}`", None,
                                          "options are: " + ", ".join(sorted(KEYS)))
        target = options.get("target")
        if target is not None and target not in TARGETS:
            raise HybridArgumentError(f"unknown target {target!r}", None, "use target=\"cpu\" or target=\"cuda\"")
        schedule = parse_options(options.get("schedule"))  # bad options fail when the kernel is made
        threads = _positive(options, "threads", "omit it to use HYB_NUM_THREADS or every CPU")
        shapes = options.get("shapes", "auto")
        if shapes not in SHAPE_MODES:
            raise HybridArgumentError(f"unknown shapes={shapes!r}", None,
                                      "use shapes=\"auto\" (the default: one compile for the first shape, one "
                                      "shape-generic compile for all others), \"generic\" or \"specialise\"")
        max_variants = _positive(options, "max_variants", f"omit it for HYB_MAX_VARIANTS or {DEFAULT_MAX_VARIANTS}")
        return cls(target, bool(options.get("fastmath", False)), schedule, threads, shapes, max_variants)

    @classmethod
    def of(cls, options) -> "KernelOptions":
        """``options`` itself, or the record of a dict of keywords."""
        return options if isinstance(options, cls) else cls.parse(dict(options or {}))

    # read as the keywords it was made from
    def keys(self):
        return KEYS

    def __getitem__(self, key: str):
        if key not in KEYS:
            raise KeyError(key)
        return getattr(self, key)

    def items(self):
        return [(k, getattr(self, k)) for k in KEYS]

    def with_schedule(self, schedule) -> "KernelOptions":
        """The same options with another ``schedule=`` (a user's value, or a parsed record)."""
        return replace(self, schedule=parse_options(schedule))

    def schedule_for(self, target) -> ScheduleOptions:
        """The ``schedule=`` option resolved for ``target`` (a ``hyb.target`` record)."""
        return self.schedule.resolve(target, self.fastmath)

    def code_key(self) -> dict:
        """Everything in the record that changes the generated code, as texts (``threads`` is read
        when the code runs, not when it is made; ``max_variants`` bounds what the kernel keeps)."""
        return {f.name: repr(getattr(self, f.name)) for f in fields(self) if f.name not in ("threads", "max_variants")}


def _positive(options: dict, key: str, hint: str) -> int | None:
    """The option ``key`` of ``options``: None where it is not given, else a positive integer."""
    value = options.get(key)
    if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
        raise HybridArgumentError(f"{key}={value!r} must be a positive integer", None, hint)
    return value
