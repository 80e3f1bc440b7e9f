"""Syntax colouring of kernels, loops, LLVM IR, assembly and isl sets, for the CLI and the notebook view.

A few regular expressions per language split text into tokens of a handful of kinds
(keyword, builtin, comment, string, number, type, variable, label); :func:`ansi` paints
them with terminal colours and :func:`html` with ``<span>`` tags.  Dependency-free and
approximate on purpose: it colours what a reader scans for, it does not parse.
"""
from __future__ import annotations

import html as _html
import re

from .stages import STAGES

# Which language each `inspect` stage prints.
STAGE_LANGUAGE = {s.name: s.language for s in STAGES}

_HYB_KEYWORDS = ("def return for in if elif else and or not pass True False None while break continue import "
                 "from lambda parallel serial vectorize unroll reduce const_range").split()
_HYB_BUILTINS = ("output_tensor allocate range grid len sqrt rsqrt exp expm1 log log1p sin cos tan tanh sigmoid "
                 "erf atan atan2 power abs sign floor ceil trunc round isnan isinf isfinite max min ceil_div "
                 "popcount bool int8 int16 int32 int64 uint8 uint16 uint32 uint64 float16 bfloat16 float32 float64").split()


def _words(words) -> str:
    return r"\b(?:" + "|".join(sorted(map(re.escape, words), key=len, reverse=True)) + r")\b"


_LEXERS = {
    "hyb": [
        ("string", r'"""[\s\S]*?"""|\'\'\'[\s\S]*?\'\'\'|"(?:[^"\\\n]|\\.)*"|\'(?:[^\'\\\n]|\\.)*\''),
        ("comment", r"#[^\n]*|//[^\n]*"),
        ("keyword", _words(_HYB_KEYWORDS)),
        ("builtin", _words(_HYB_BUILTINS)),
        ("number", r"\b\d+\.?\d*(?:[eE][-+]?\d+)?\b"),
        ("label", r"(?<=\bdef )\w+|\bS\d+\b"),
    ],
    "llvm": [
        ("comment", r";[^\n]*"),
        ("string", r'c?"[^"\n]*"'),
        ("label", r"^[\w.$-]+:"),
        ("variable", r'[%@](?:[\w.$-]+|"[^"\n]*")'),
        ("comment", r"![\w.]+"),
        ("type", r"\b(?:i\d+|half|float|double|ptr|void|label|metadata)\b|<\d+ x|\[\d+ x"),
        ("number", r"-?\b\d+\.?\d*(?:e[-+]?\d+)?\b|\b0x[0-9A-Fa-f]+\b"),
        ("keyword", r"\b[a-z_][a-z_0-9]*\b"),
    ],
    "asm": [
        ("comment", r"#[^\n]*|//[^\n]*|;[^\n]*"),
        ("string", r'"[^"\n]*"'),
        ("label", r"^[\w.$]+:"),
        ("builtin", r"^\s*\.[\w.]+"),
        ("keyword", r"(?<=^\t)[a-z][\w.]*|(?<=^    )[a-z][\w.]*"),
        ("variable", r"%[\w.]+"),
        ("number", r"\$?-?\b(?:0x[0-9a-fA-F]+|\d+)\b"),
    ],
    "isl": [
        ("comment", r"#[^\n]*|//[^\n]*"),
        ("string", r'"[^"\n]*"'),
        ("keyword", r"\b(?:and|or|not|exists|mod|floor|min|max|domain|schedule|mark|child|sequence|filter|"
                    r"band|permutable|coincident)\b"),
        ("label", r"^[\w (),+-]*[\w)]:|\bS\d+\b"),
        ("number", r"-?\b\d+\b"),
    ],
}

_COMPILED = {lang: re.compile("|".join(f"(?P<{kind}{i}>{rx})" for i, (kind, rx) in enumerate(rules)), re.M)
             for lang, rules in _LEXERS.items()}


def tokens(text: str, lang: str):
    """``(kind, text)`` pairs covering ``text``; kind ``None`` for the text in between."""
    rx = _COMPILED.get(lang)
    if rx is None:
        yield None, text
        return
    pos = 0
    for m in rx.finditer(text):
        if m.start() > pos:
            yield None, text[pos:m.start()]
        kind = m.lastgroup.rstrip("0123456789")
        yield kind, m.group()
        pos = m.end()
    if pos < len(text):
        yield None, text[pos:]


_ANSI = {"keyword": "35", "builtin": "36", "comment": "90", "string": "32", "number": "33", "type": "34",
         "variable": "94", "label": "1"}
_CSS = {"keyword": "color:#a626a4", "builtin": "color:#0184bc", "comment": "color:#8a8a8a;font-style:italic",
        "string": "color:#50a14f", "number": "color:#986801", "type": "color:#4078f2", "variable": "color:#e45649",
        "label": "font-weight:bold"}


def ansi(text: str, lang: str) -> str:
    """``text`` with terminal colour codes."""
    out = []
    for kind, piece in tokens(text, lang):
        code = _ANSI.get(kind)
        out.append(f"\x1b[{code}m{piece}\x1b[0m" if code else piece)
    return "".join(out)


def html(text: str, lang: str, inline: bool = False) -> str:
    """``text`` escaped for HTML, its tokens in ``<span class="hyb-KIND">`` (styled by :func:`css`),
    or with ``inline`` styles."""
    out = []
    for kind, piece in tokens(text, lang):
        esc = _html.escape(piece, quote=False)
        if kind is None:
            out.append(esc)
        elif inline:
            out.append(f'<span style="{_CSS[kind]}">{esc}</span>')
        else:
            out.append(f'<span class="hyb-{kind}">{esc}</span>')
    return "".join(out)


def css(scope: str) -> str:
    """Style rules for :func:`html`'s classes inside elements of class ``scope``."""
    return "\n".join(f".{scope} .hyb-{kind} {{ {style} }}" for kind, style in _CSS.items())


_DIAGNOSTIC = re.compile(r"^(?P<loc>\S+:\d+:\d+: )?(?P<kind>error|warning)(?P<rest>:.*)$|^(?P<hint>hint:)|"
                         r"^(?P<caret>[\s\d|]*)(?P<carets>\^+)\s*$|^(?P<tool>hyb: )(?P<kind2>error)(?P<rest2>:.*)$")


def diagnostic(text: str) -> str:
    """A compiler message (``file:line:col: error: ...``) with its kind, carets and hint coloured."""
    out = []
    for line in text.split("\n"):
        m = _DIAGNOSTIC.match(line)
        if m is None:
            out.append(line)
        elif m.group("kind"):
            colour = "31" if m.group("kind") == "error" else "33"
            out.append(f"\x1b[1m{m.group('loc') or ''}\x1b[{colour}m{m.group('kind')}\x1b[0m\x1b[1m{m.group('rest')}"
                       "\x1b[0m")
        elif m.group("kind2"):
            out.append(f"\x1b[1m{m.group('tool')}\x1b[31m{m.group('kind2')}\x1b[0m\x1b[1m{m.group('rest2')}\x1b[0m")
        elif m.group("hint"):
            out.append("\x1b[36mhint:\x1b[0m" + line[len("hint:"):])
        else:
            out.append(f"{m.group('caret')}\x1b[32m{m.group('carets')}\x1b[0m")
    return "\n".join(out)
