"""User-facing errors.

Every error a user can cause is a :class:`HybridError`.  It carries the place in the
source (file, line, column, the source line) and renders itself the way compilers
such as rustc and elm do::

    kernels.hyb:3:5: error: `while` loops are not supported
        |
      3 |     while i < n:
        |     ^^^^^
    hint: write a `for` loop over `range(...)`
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Span:
    """A region of source text.  Lines and columns are 1-based; ``end_col`` is exclusive."""

    filename: str
    line: int
    col: int
    end_line: int
    end_col: int
    source_line: str = ""

    def __str__(self) -> str:
        return f"{self.filename}:{self.line}:{self.col}"


class HybridError(Exception):
    """Base class of every error hyb reports to a user."""

    kind = "error"

    def __init__(self, message: str, span: Span | None = None, hint: str | None = None):
        self.message = message
        self.span = span
        self.hint = hint
        super().__init__(self.render())

    # Convenience accessors used by tests and tools.
    @property
    def filename(self):
        return self.span.filename if self.span else None

    @property
    def line(self):
        return self.span.line if self.span else None

    @property
    def col(self):
        return self.span.col if self.span else None

    @property
    def source_line(self):
        return self.span.source_line if self.span else None

    def render(self) -> str:
        return render(self.kind, self.message, self.span, self.hint)


class HybridWarning(UserWarning):
    """A legal but suspicious construct; rendered like an error, with ``warning:``."""

    def __init__(self, message: str, span: Span | None = None, hint: str | None = None):
        self.message, self.span, self.hint = message, span, hint
        super().__init__(render("warning", message, span, hint))


class HybridFloat64Warning(HybridWarning):
    """A kernel whose arrays hold no float64 computes a float32 (or narrower float) value in
    float64 though no operand was written as float64 (a float32 and an int64, a NumPy float64
    argument).
    Written explicitly (`float64(x)`), float64 gets no warning;
    ``warnings.simplefilter("ignore", hyb.HybridFloat64Warning)`` silences all of them."""


def render(kind: str, message: str, span: Span | None, hint: str | None) -> str:
    """``file:line:col: kind: message``, the source line with a caret under the place, and the hint."""
    if span is None:
        text = f"{kind}: {message}"
        return text + f"\nhint: {hint}" if hint else text
    s = span
    lines = [f"{s}: {kind}: {message}"]
    if s.source_line:
        num = str(s.line)
        pad = " " * len(num)
        src = s.source_line.rstrip("\n").expandtabs(1)
        width = 1
        if s.end_line == s.line and s.end_col > s.col:
            width = s.end_col - s.col
        width = max(1, min(width, max(1, len(src) - s.col + 1)))
        lines.append(f" {pad} |")
        lines.append(f" {num} | {src}")
        lines.append(f" {pad} | {' ' * (s.col - 1)}{'^' * width}")
    if hint:
        lines.append(f"hint: {hint}")
    return "\n".join(lines)


class HybridSyntaxError(HybridError):
    """The text is not a well-formed kernel (a parse error)."""


class HybridNameError(HybridError):
    """An unknown or misused name."""


class HybridTypeError(HybridError):
    """Wrong dtype, rank, argument count, or a value of the wrong kind."""


class HybridIndexError(HybridError):
    """A subscript that leaves its tensor."""


class HybridArgumentError(HybridError):
    """The arguments of a call do not fit the kernel."""


class HybridUnsupportedError(HybridError, NotImplementedError):
    """A construct hyb recognises but does not (yet, or ever) compile."""


class HybridDependencyError(HybridError, ImportError):
    """A feature needs an optional package that is not installed (bfloat16 needs ``ml_dtypes``)."""


class HybridAssertionError(HybridError, AssertionError):
    """A kernel's ``assert`` failed: at compile time where its condition is known then (shapes,
    constants), or when the kernel ran."""


class HybridCompileError(HybridError):
    """An internal failure while compiling a valid kernel (a bug in hyb)."""


REPORT_HINT = ("this is a bug in hyb, not in your kernel: please report it with the kernel's source, the "
                   "argument shapes and dtypes, and this message")


class HybridInternalError(Exception):
    """A bug in hyb itself, met while compiling or running a valid kernel.

    Deliberately not a :class:`HybridError`: code that catches its own mistakes as
    ``HybridError`` does not swallow a compiler bug.  The message says what to report."""

    def __init__(self, message: str, stage: str | None = None):
        self.message = message
        self.stage = stage
        where = f" (stage: {stage})" if stage else ""
        super().__init__(f"internal compiler error{where}: {message}\nhint: {REPORT_HINT}")
