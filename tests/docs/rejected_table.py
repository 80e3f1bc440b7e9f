"""The table of rejected constructs in docs/reference/language.md, made from the cases that
tests/dsl/test_errors.py checks (each compiled here, its error read back), so the page lists
exactly what the compiler rejects and says.

    python -m tests.docs.rejected_table           # print the table
    python -m tests.docs.rejected_table --write   # put it in the page
"""
from __future__ import annotations

import os
import sys

import numpy as np

from tests.docs.blocks import ROOT

PAGE = os.path.join(ROOT, "docs", "reference", "language.md")
START = "<!-- rejected-table: made by `python -m tests.docs.rejected_table --write` -->"
END = "<!-- rejected-table: end -->"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _code(text: str) -> str:
    text = _cell(text.strip())
    fence = "``" if "`" in text else "`"
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def table() -> str:
    """The markdown table: each case's name, the line the error points at, the error class, the
    message and the hint."""
    import hyb
    from hyb.errors import HybridError
    from tests.dsl.test_errors import CASES

    rows = ["| construct | the line it points at | error | message | hint |",
            "| --- | --- | --- | --- | --- |"]
    x = np.arange(4, dtype=np.float32)
    for name, src, _cls, line, col, _words in CASES:
        try:
            hyb.compile_source(src, "bad.hyb").k(x)
        except HybridError as e:
            err = e
        else:
            raise AssertionError(f"{name}: compiled without an error")
        where = src.split("\n")[line - 1]
        rows.append(f"| {name} | {_code(where)} (column {col}) | `{type(err).__name__}` | {_cell(err.message)} | "
                    f"{_cell(err.hint or '')} |")
    return "\n".join(rows)


def page_table(text: str) -> str:
    """The table the page holds, between its markers."""
    start = text.index(START) + len(START)
    return text[start:text.index(END, start)].strip()


def main(argv: list) -> int:
    made = table()
    if "--write" not in argv:
        print(made)
        return 0
    with open(PAGE, encoding="utf-8") as f:
        text = f.read()
    start = text.index(START) + len(START)
    text = text[:start] + "\n\n" + made + "\n\n" + text[text.index(END, start):]
    with open(PAGE, "w", encoding="utf-8") as f:
        f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
