"""The ``schedule=`` option of a kernel, parsed once into a frozen :class:`ScheduleOptions`.

:func:`parse_options` reads what the user gave (``None``, ``"auto"``, ``"tune"``, ``"original"`` or
a dict of the keys in :data:`OPTION_KEYS`) and checks it; a field the user left out is ``None``,
which means "the target decides".  :meth:`ScheduleOptions.resolve` then fills every such field for
one target (the CPU's machine model, or the GPU's policy) and returns the record every stage reads:
a stage never looks back at what the user wrote.

Each key has one meaning:

``tile``
    the tile sizes of a permutable band that is not a register-blocked contraction: ``True`` the
    model's sizes, ``False`` none, an int that size on every member, a tuple the sizes outermost
    first (a shorter tuple is padded on the outside with its first size);
``cache_tile``
    the cache tiles of a register-blocked contraction band (its other members, then ``I``, ``J`` and
    the reduction's, as :mod:`hyb.schedule.blocking` lays them out): ``None`` the model's, a tuple
    those sizes (padded on the outside with its first), an int that size on every member;
``register``
    the register block ``(MR, NR)`` of contractions: ``True`` chosen for the machine, ``False`` none;
``pack``
    packed panels of a register block's vector operand: ``None`` only where the operand is
    transposed (on AMD Zen 4 packing others measured no gain, see docs/tutorials/speed.md), ``True`` every block's,
    ``False`` none (a transposed operand's contraction then gets no block);
``parallel``, ``interchange``, ``fuse``, ``recompute``, ``vectorize``, ``vector_math``, ``reassociate``
    switches (see the field comments);
``max_operations``, ``timeout``, ``analysis_operations``, ``min_parallel_work``
    the limits of isl's scheduler and of the dependence analysis, and the work a loop needs to run
    on threads.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from ..errors import HybridArgumentError
from ..target import CpuTarget

PARALLEL_TILES = 8


DEFAULT_TILES = {2: (32, 512), 3: (32, 64, 512)}


OPTION_KEYS = ("tile", "cache_tile", "register", "pack", "parallel", "interchange", "fuse", "recompute", "vectorize",
               "vector_math", "reassociate", "max_operations", "timeout", "min_parallel_work",
               "analysis_operations")

MODES = ("auto", "tune", "original")

def fit_sizes(sizes: tuple, n: int) -> tuple:
    """Tile sizes for a band of ``n`` members: the last ``n`` of ``sizes``, or ``sizes`` padded on
    the outside with its first (the reading of ``tile`` and ``cache_tile``)."""
    return tuple(sizes[-n:]) if len(sizes) >= n else (sizes[0],) * (n - len(sizes)) + tuple(sizes)


_SWITCHES = ("parallel", "interchange", "fuse", "recompute", "vectorize", "vector_math", "reassociate", "pack")


@dataclass(frozen=True)
class ScheduleOptions:
    """A kernel's ``schedule=`` option.  As parsed, ``None`` in a field means the target decides;
    :meth:`resolve` gives the record for one target, in which only ``pack`` and ``cache_tile`` may
    still be ``None`` (each meaning what its comment says)."""

    mode: str = "auto"  # "auto", "tune" (the runtime measures variants of auto's choices) or "original"
    tile: object = None  # True: the model's sizes; False: no tiling; an int or a tuple of sizes
    cache_tile: tuple | None = None  # a register-blocked contraction's cache tiles (None: the model's)
    register: object = None  # True: chosen from the machine; False: none; (MR, NR): that block
    pack: bool | None = None  # None: only a transposed operand's panel; True: every block's; False: none
    parallel: bool | None = None
    interchange: bool | None = None
    fuse: bool | None = None  # let isl fuse loops (False: keep strongly connected components apart)
    # cheap elementwise temporaries computed where they are read (schedule.recompute; False, or fuse
    # False: kept in memory)
    recompute: bool | None = None
    vectorize: bool | None = None  # mark the loops LLVM's loop vectoriser should get whole (schedule.vector)
    # math functions in vectorised loops as vector calls (codegen.vecmath; False: one libm call a lane)
    vector_math: bool | None = None
    # sums and products may be reassociated (LLVM's `reassoc` flag), so that a reduction into one cell
    # or scalar runs as vector partial sums: the CPU's default; fast-math implies it; False keeps
    # IEEE program order
    reassociate: bool | None = None
    max_operations: int | None = None  # isl operations the scheduler may take
    timeout: float | None = None  # seconds for isl's scheduler (0: no limit)
    min_parallel_work: int | None = None  # statement instances a parallel loop needs to run on threads
    # isl operations the exact dependence analysis may take (0: no limit); past it the dependences are
    # over-approximated and the original order is kept
    analysis_operations: int | None = None
    machine: object = None  # the hyb.target.CpuTarget blocks and tiles are chosen for (set by resolve)

    @property
    def original(self) -> bool:
        return self.mode == "original"

    def resolve(self, target, fastmath: bool = False) -> "ScheduleOptions":
        """Every field the user left to the target, decided for ``target`` (a ``hyb.target``
        record whose ``kind`` is ``"cpu"`` or ``"cuda"``).  The CPU: the machine model's tiles and
        register blocks, the target's ``min_parallel_work``, sums reassociated unless the kernel says
        ``reassociate=False`` (fast-math reassociates them whatever it says).
        The GPU: no tiling (the grid's blocks are the tiles), isl's loop order, no register
        blocks (a thread of the grid keeps its one cell in a register anyway), no minimum work
        for a parallel loop, and sums in program order (the CUDA back end never reassociates)."""
        cpu = target.kind == "cpu"
        policy = dict(parallel=True, fuse=True, recompute=True, vectorize=True, vector_math=True,
                      max_operations=300_000, timeout=0.35, analysis_operations=1_000_000)
        if cpu:
            policy.update(tile=True, register=True, interchange=True, min_parallel_work=target.min_parallel_work)
        else:
            policy.update(tile=False, register=False, interchange=False, min_parallel_work=0)
        if self.original:
            policy.update(tile=False, parallel=False, interchange=False)
        filled = {k: v for k, v in policy.items() if getattr(self, k) is None}
        # the CPU reassociates sums unless the kernel says reassociate=False (fast-math implies it); the
        # CUDA back end keeps them in program order
        filled["reassociate"] = bool(self.reassociate is not False or fastmath) if cpu else False
        return replace(self, **filled, machine=target if isinstance(target, CpuTarget) else None)

    def for_loop_stages(self, target, fastmath: bool = False) -> "ScheduleOptions":
        """The record the loop stages after the plan read (original-order parallel marks, vector
        loops, contraction), from the record as parsed: on the CPU the same as :meth:`resolve`; the
        GPU's loop stages take the CPU's defaults for what the user left out, without a machine."""
        return self.resolve(target if target.kind == "cpu" else _CPU_DEFAULTS, fastmath)


@dataclass(frozen=True)
class _CpuDefaults:
    """A target with the CPU's default policy and no machine model."""

    kind: str = "cpu"
    min_parallel_work: int = 1 << 15


_CPU_DEFAULTS = _CpuDefaults()


def _positive_sizes(value) -> bool:
    return isinstance(value, (tuple, list)) and bool(value) and all(
        isinstance(t, int) and not isinstance(t, bool) and t > 0 for t in value)


def parse_options(schedule) -> ScheduleOptions:
    """The ``schedule=`` option of a kernel: None, ``"auto"``, ``"tune"``, ``"original"``, a dict of
    :data:`OPTION_KEYS`, or a :class:`ScheduleOptions` (returned as it is)."""
    if isinstance(schedule, ScheduleOptions):
        return schedule
    if schedule is None or schedule in MODES:
        return ScheduleOptions(mode=schedule or "auto")
    if not isinstance(schedule, dict):
        raise HybridArgumentError(f"schedule={schedule!r} is not valid", None,
                                  "use schedule=\"auto\", \"tune\", \"original\" or a dict such as "
                                  "{\"tile\": (32, 64, 256), \"parallel\": True}")
    given = schedule
    unknown = set(given) - set(OPTION_KEYS)
    if unknown:
        raise HybridArgumentError(f"unknown schedule option `{sorted(unknown)[0]}`", None,
                                  "schedule options are: " + ", ".join(OPTION_KEYS))
    out = {}
    if "tile" in given:
        tile = given["tile"]
        if not (isinstance(tile, bool) or (isinstance(tile, int) and tile > 0) or _positive_sizes(tile)):
            raise HybridArgumentError(f"schedule option tile={tile!r} is not valid", None,
                                      "use True, False, a positive size (every band member) or a tuple of "
                                      "positive sizes such as (32, 64, 256)")
        out["tile"] = tuple(tile) if isinstance(tile, (tuple, list)) else tile
    if "cache_tile" in given:
        tiles = given["cache_tile"]
        one = isinstance(tiles, int) and not isinstance(tiles, bool) and tiles > 0
        if not (tiles is None or one or _positive_sizes(tiles)):
            raise HybridArgumentError(f"schedule option cache_tile={tiles!r} is not valid", None,
                                      "use a positive size (every loop of the blocked band) or a tuple of "
                                      "positive sizes of its loops (others, then I, J and the reduction's), "
                                      "such as (96, 128, 300)")
        out["cache_tile"] = (tiles,) if one else tuple(tiles) if tiles is not None else None
    if "register" in given:
        register = given["register"]
        if not (isinstance(register, bool) or (_positive_sizes(register) and len(register) == 2)):
            raise HybridArgumentError(f"schedule option register={register!r} is not valid", None,
                                      "use True (chosen for the machine), False (no register blocks) or "
                                      "(MR, NR) such as (6, 64)")
        out["register"] = tuple(register) if isinstance(register, (tuple, list)) else register
    for key in _SWITCHES:
        if key in given:
            if not isinstance(given[key], bool):
                raise HybridArgumentError(f"schedule option {key}={given[key]!r} must be True or False", None, None)
            out[key] = given[key]
    for key, hint in (("max_operations", "0 runs isl's scheduler without a limit"),
                      ("analysis_operations", "0 runs the dependence analysis without a limit"),
                      ("min_parallel_work", None)):
        if key in given:
            n = given[key]
            if isinstance(n, bool) or not isinstance(n, int) or n < 0:
                raise HybridArgumentError(f"schedule option {key}={n!r} must be a count >= 0", None, hint)
            out[key] = n
    if "timeout" in given:
        t = given["timeout"]
        if isinstance(t, bool) or not isinstance(t, (int, float)) or t < 0:
            raise HybridArgumentError(f"schedule option timeout={t!r} must be a number of seconds", None,
                                      "0 runs isl without a time limit")
        out["timeout"] = float(t)
    return ScheduleOptions(**out)
