"""The stages ``inspect(stage)`` shows, named once: what each shows, how it is coloured, the file
suffix ``hyb compile --emit`` writes it with, the back ends whose compiled kernels have it, and
its place among the notebook view's tabs.

Every reader takes its list from :data:`STAGES`: ``CompiledKernel.inspect`` and its CUDA
counterpart (the stages of their target, in this order), the notebook view (:func:`tabs`), the
highlighter (:data:`hyb.dsl.highlight.STAGE_LANGUAGE`) and the command line (the suffixes).
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Stage:
    name: str
    shows: str  # what inspect(name) returns
    language: str  # the highlighter's language for it (hyb.dsl.highlight)
    suffix: str  # the file suffix `hyb compile --emit` writes it with
    targets: tuple  # the back ends ("cpu", "cuda") whose compiled kernels list it
    tab: int | None = None  # its place among the notebook view's tabs (the first is open); None: no tab


STAGES = (
    Stage("ast", "the checked kernel, printed as source", "hyb", ".ast", ("cpu", "cuda"), 2),
    Stage("isl", "the statements' domains, accesses and original schedule (isl)", "isl", ".isl", ("cpu", "cuda"), 4),
    Stage("deps", "the dependences (isl maps)", "isl", ".deps", ("cpu", "cuda"), 5),
    Stage("schedule", "the schedule and every decision taken on the way", "isl", ".schedule", ("cpu", "cuda"), 3),
    Stage("loops", "the generated loops, with their marks", "hyb", ".loops", ("cpu", "cuda"), 0),
    Stage("llvm", "the LLVM IR as generated", "llvm", ".ll", ("cpu",), 6),
    Stage("llvm-opt", "the LLVM IR after LLVM's optimisation", "llvm", ".opt.ll", ("cpu",), 7),
    Stage("asm", "the machine code, as assembly", "asm", ".s", ("cpu",), 8),
    Stage("cuda", "the CUDA C", "hyb", ".cu", ("cuda",), 1),
    Stage("ptx", "nvcc's PTX of the CUDA C", "asm", ".ptx", ("cuda",)),
    Stage("emulate", "the reference interpreter's Python", "hyb", ".emulate.py", ("cpu", "cuda")),
    Stage("grad", "the gradient kernel and the bytes of tape it allocates", "hyb", ".grad.hyb", ("cpu", "cuda"), 9),
    Stage("timings", "how long each stage of the compile took, and the total", "text", ".timings.txt", ("cpu",)),
    Stage("rewrites", "what each typed-kernel rewrite applied and refused, with the reasons, or why it did not run",
          "text", ".rewrites.txt", ("cpu", "cuda"), 10),
)

BY_NAME = {s.name: s for s in STAGES}


def names(target: str) -> tuple:
    """The stages of a kernel compiled for ``target`` (``"cpu"`` or ``"cuda"``), in order."""
    return tuple(s.name for s in STAGES if target in s.targets)


def tabs(target: str) -> tuple:
    """The stages the notebook view of a kernel compiled for ``target`` shows, in tab order."""
    return tuple(s.name for s in sorted((s for s in STAGES if s.tab is not None and target in s.targets),
                                        key=lambda s: s.tab))
