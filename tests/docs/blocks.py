"""The fenced code blocks of the documentation, read as tests.

A page's blocks run in order, in a folder of their own whose ``examples`` is the repository's:

- ``python``: executed, each page in one fresh namespace, so a block may use the names of the
  blocks above it (each block is written to a file first, so that ``@hyb.hybrid`` finds its source);
- ``hyb``: kernel source, parsed with ``hyb.compile_source``; with ``title="NAME.hyb"`` it is
  also written to that file, for the commands below it;
- ``console`` and ``text``: each ``$ hyb ...`` line is run (``hyb.cli.main``, in this process) and
  what it prints, stdout and stderr as a terminal shows them, must be the lines under it; a line
  ``...`` stands for any number of lines;
- ``sh``: each line is a ``hyb`` command that must succeed (the block shows no output).

A comment on the lines just above a block says how to take it, visibly in the page's source:

- ``<!-- docs-test: skip (REASON) -->``: not run (an install, a fragment, C source, ...);
- ``<!-- docs-test: output not compared (REASON) -->``: the commands run and must succeed, but
  what they print (timings, machine code) is not compared;
- ``<!-- docs-test: exit N -->``: the commands end with exit status N;
- ``<!-- docs-test: rejected NAME -->``: the ``hyb`` block must raise ``hyb.NAME`` when parsed, or,
  with ``rejected NAME for float32[4] ...``, when its kernel is compiled for arrays of those types;
- ``<!-- docs-test: needs torch -->`` (``jax``, ``mindspore``, ``numba``, ``pycuda``, ``gpu``,
  ``nvcc``): skipped, saying why, where that is missing.

A block with no language is a figure (a diagram, pseudo-code, a listing): nothing runs.  Any
other block (``c``, ``cpp``) must be marked ``skip``.
"""
from __future__ import annotations

import contextlib
import dataclasses
import importlib.util
import io
import os
import re
import shlex
import shutil

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

_FENCE = re.compile(r"^(?P<indent> *)(?P<fence>`{3,})(?P<info>[^`]*)$")
_MARK = re.compile(r"^\s*<!--\s*docs-test:\s*(?P<what>.*?)\s*-->\s*$")
_TITLE = re.compile(r'title="([^"]+)"')


@dataclasses.dataclass(frozen=True)
class Block:
    page: str        # path relative to the repository
    line: int        # line of the opening fence (1-based)
    lang: str
    title: str | None
    text: str
    marks: tuple     # the docs-test comments above the block

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}"

    def mark(self, word: str) -> str | None:
        """The rest of the first mark starting with ``word`` ("" when nothing follows), else None."""
        for m in self.marks:
            if m == word or m.startswith(word + " "):
                return m[len(word):].strip()
        return None

    def needs(self) -> list:
        return [m.split(None, 1)[1] for m in self.marks if m.startswith("needs ")]


def pages() -> list:
    """README.md and every Markdown page under docs/, relative to the repository."""
    out = ["README.md"]
    for base, dirs, files in os.walk(os.path.join(ROOT, "docs")):
        dirs.sort()
        out += sorted(os.path.relpath(os.path.join(base, f), ROOT) for f in files if f.endswith(".md"))
    return out


def blocks(page: str) -> list:
    with open(os.path.join(ROOT, page), encoding="utf-8") as f:
        lines = f.read().split("\n")
    out, i = [], 0
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        fence, indent, info = m.group("fence"), len(m.group("indent")), m.group("info").strip()
        start, body = i, []
        i += 1
        while i < len(lines) and not (lines[i].strip().startswith(fence) and lines[i].strip().strip("`") == ""):
            body.append(lines[i][indent:] if lines[i][:indent].strip() == "" else lines[i])
            i += 1
        i += 1
        marks, j = [], start - 1
        while j >= 0 and (lines[j].strip() == "" or _MARK.match(lines[j])):
            mm = _MARK.match(lines[j])
            if mm:
                marks.insert(0, mm.group("what"))
            elif marks or j < start - 2:
                break  # at most one blank line between a block and its marks
            j -= 1
        lang = info.split()[0] if info else ""
        title = _TITLE.search(info)
        out.append(Block(page, start + 1, lang, title.group(1) if title else None, "\n".join(body) + "\n",
                         tuple(marks)))
    return out


# -- what a block needs -------------------------------------------------------------------------

def _gpu() -> bool:
    try:
        import pycuda.driver as drv
        drv.init()
        return drv.Device.count() > 0
    except Exception:
        return False


def missing(need: str) -> str | None:
    """Why ``need`` is missing here, or None."""
    if need in ("torch", "jax", "mindspore", "numba", "pycuda"):
        return None if importlib.util.find_spec(need) else f"{need} is not installed"
    if need == "nvcc":
        return None if shutil.which("nvcc") else "nvcc is not on the PATH"
    if need == "gpu":
        return None if _gpu() else "no NVIDIA GPU with pycuda"
    raise ValueError(f"unknown need {need!r}")


# -- commands -------------------------------------------------------------------------------------

@dataclasses.dataclass
class Command:
    argv: list
    expected: list      # the lines shown under it
    quiet_stdout: bool  # `> /dev/null`
    quiet_stderr: bool  # `2> /dev/null`


def commands(block: Block) -> list:
    """The commands of a console, text or sh block, with the output shown under each."""
    out = []
    for line in block.text.rstrip("\n").split("\n"):
        if block.lang == "sh":
            if line.strip():
                out.append(_command(line))
        elif line.startswith("$ "):
            out.append(_command(line[2:]))
        elif out:
            out[-1].expected.append(line)
        elif line.strip():
            raise AssertionError(f"{block.where}: output before any `$ hyb ...` command: {line!r}")
    return out


def _command(text: str) -> Command:
    lex = shlex.shlex(text, posix=True, punctuation_chars="<>")
    lex.whitespace_split = True
    lex.commenters = "#"
    words = list(lex)
    quiet_out = quiet_err = False
    argv = []
    k = 0
    while k < len(words):
        w = words[k]
        if w == ">" and k + 1 < len(words) and words[k + 1] == "/dev/null":
            if argv and argv[-1] == "2":
                argv.pop()
                quiet_err = True
            else:
                quiet_out = True
            k += 2
            continue
        argv.append(w)
        k += 1
    if not argv or argv[0] != "hyb":
        raise AssertionError(f"only `hyb` commands run in the documentation's tests: {text!r}")
    return Command(argv[1:], [], quiet_out, quiet_err)


class _Tee(io.StringIO):
    """A stream that also writes into another one (stdout and stderr interleaved as shown)."""

    def __init__(self, both: io.StringIO, keep: bool):
        super().__init__()
        self.both, self.keep = both, keep

    def write(self, s):
        if self.keep:
            self.both.write(s)
        return super().write(s)


def run(cmd: Command) -> tuple:
    """(exit status, what it printed) for a ``hyb`` command run in this process."""
    from hyb.cli import main
    both = io.StringIO()
    out, err = _Tee(both, not cmd.quiet_stdout), _Tee(both, not cmd.quiet_stderr)
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            status = main(list(cmd.argv))
        except SystemExit as e:  # argparse's errors and --help
            status = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    return status or 0, both.getvalue()


def normalise(text: str, workdir: str) -> list:
    text = text.replace(workdir + os.sep, "").replace(workdir, ".")
    text = re.sub(r"0x[0-9a-fA-F]{6,}", "0x...", text)
    return [line.rstrip() for line in text.rstrip("\n").split("\n")] if text.strip() else []


def matches(expected: list, actual: list) -> bool:
    """``expected`` with ``...`` lines standing for any run of lines (none too)."""
    if not expected:
        return not actual
    if expected[0].strip() == "...":
        return any(matches(expected[1:], actual[k:]) for k in range(len(actual) + 1))
    return bool(actual) and expected[0].rstrip() == actual[0] and matches(expected[1:], actual[1:])
