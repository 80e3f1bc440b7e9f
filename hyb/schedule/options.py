"""The ``schedule=`` option of a kernel, parsed into :class:`ScheduleOptions`."""
from __future__ import annotations

from dataclasses import dataclass

from ..errors import HybridArgumentError

PARALLEL_TILES = 8


DEFAULT_TILES = {2: (32, 512), 3: (32, 64, 512)}


OPTION_KEYS = ("tile", "register", "pack", "parallel", "interchange", "fuse", "vectorize", "vector_math", "reassociate",
               "max_operations", "timeout", "min_parallel_work", "analysis_operations")


@dataclass
class ScheduleOptions:
    original: bool = False  # keep the program order (schedule="original")
    tile: object = True  # True: default sizes; False: no tiling; a tuple: sizes, outermost first
    # register blocks of contraction bands (schedule.blocking): True: chosen from the machine;
    # False: none; (MR, NR): that block
    register: object = True
    # packed panels of a register block's vector operand (schedule.promote): None: only where the
    # operand is transposed (on AMD Zen 4 packing others measured no gain, see README); True:
    # every block's; False: none (a transposed operand's contraction then gets no block)
    pack: bool | None = None
    parallel: bool = True
    interchange: bool = True
    fuse: bool = True  # let isl fuse loops (False: keep strongly connected components apart)
    vectorize: bool = True  # mark the loops LLVM's loop vectoriser should get whole (schedule.vector)
    # math functions in vectorised loops as vector calls (codegen.vecmath; False: one libm call a lane)
    vector_math: bool = True
    # sums and products may be reassociated (LLVM's `reassoc` flag), so that a reduction into one cell
    # or scalar runs as vector partial sums; fast-math implies it; False keeps IEEE program order
    reassociate: bool = False
    max_operations: int = 300_000
    timeout: float = 0.35  # seconds for isl's scheduler
    min_parallel_work: int = 1 << 15  # statement instances a parallel loop needs to run on threads
    # isl operations the exact dependence analysis may take (0: no limit); past it the dependences are
    # over-approximated and the original order is kept
    analysis_operations: int = 1_000_000
    machine: object = None  # the hyb.target.CpuTarget blocks and tiles are chosen for (None: a generic one)


def parse_options(schedule) -> ScheduleOptions:
    """The ``schedule=`` option of a kernel: None, "auto", "original" or a dict of ScheduleOptions."""
    if schedule in (None, "auto", "tune"):  # "tune": the runtime measures variants of auto's choices
        return ScheduleOptions()
    if schedule == "original":
        return ScheduleOptions(original=True, tile=False, parallel=False, interchange=False)
    if isinstance(schedule, dict):
        unknown = set(schedule) - set(OPTION_KEYS)
        if unknown:
            raise HybridArgumentError(f"unknown schedule option `{sorted(unknown)[0]}`", None,
                                      "schedule options are: " + ", ".join(OPTION_KEYS))
        opts = ScheduleOptions()
        tile = schedule.get("tile", True)
        if not (isinstance(tile, bool) or (isinstance(tile, (tuple, list)) and tile
                                            and all(isinstance(t, int) and t > 0 for t in tile))):
            raise HybridArgumentError(f"schedule option tile={tile!r} is not valid", None,
                                      "use True, False or a tuple of positive sizes such as (32, 64, 256)")
        opts.tile = tuple(tile) if isinstance(tile, (tuple, list)) else tile
        register = schedule.get("register", True)
        if not (isinstance(register, bool) or (isinstance(register, (tuple, list)) and len(register) == 2
                                                and all(isinstance(t, int) and not isinstance(t, bool) and t > 0
                                                        for t in register))):
            raise HybridArgumentError(f"schedule option register={register!r} is not valid", None,
                                      "use True (chosen for the machine), False (no register blocks) or "
                                      "(MR, NR) such as (6, 64)")
        opts.register = tuple(register) if isinstance(register, (tuple, list)) else register
        for key in ("parallel", "interchange", "fuse", "vectorize", "vector_math", "reassociate", "pack"):
            if key in schedule:
                if not isinstance(schedule[key], bool):
                    raise HybridArgumentError(f"schedule option {key}={schedule[key]!r} must be True or False",
                                              None, None)
                setattr(opts, key, schedule[key])
        if "max_operations" in schedule:
            opts.max_operations = int(schedule["max_operations"])
        if "analysis_operations" in schedule:
            n = schedule["analysis_operations"]
            if isinstance(n, bool) or not isinstance(n, int) or n < 0:
                raise HybridArgumentError(f"schedule option analysis_operations={n!r} must be a count >= 0", None,
                                          "0 runs the dependence analysis without a limit")
            opts.analysis_operations = n
        if "min_parallel_work" in schedule:
            w = schedule["min_parallel_work"]
            if isinstance(w, bool) or not isinstance(w, int) or w < 0:
                raise HybridArgumentError(f"schedule option min_parallel_work={w!r} must be a count >= 0", None, None)
            opts.min_parallel_work = w
        if "timeout" in schedule:
            t = schedule["timeout"]
            if isinstance(t, bool) or not isinstance(t, (int, float)) or t < 0:
                raise HybridArgumentError(f"schedule option timeout={t!r} must be a number of seconds", None,
                                          "0 runs isl without a time limit")
            opts.timeout = float(t)
        return opts
    raise HybridArgumentError(f"schedule={schedule!r} is not valid", None,
                              "use schedule=\"auto\", \"tune\", \"original\" or a dict such as "
                              "{\"tile\": (32, 64, 256), \"parallel\": True}")
