"""Draw the benchmark page's plots from the tables of docs/benchmarks.md.

    python docs/assets/benchmark_plots.py      # needs matplotlib (the bench extra)

The plots show the published measurements; nothing is measured here.  Run it again whenever a
table they come from changes.
"""
import os
import re

import matplotlib
import matplotlib.ticker

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
PAGE = os.path.join(os.path.dirname(HERE), "benchmarks.md")


def table_after(text: str, marker: str) -> list:
    """The rows (lists of cells) of the first Markdown table after ``marker``; the header first."""
    start = text.index(marker)
    rows = []
    for line in text[start:].split("\n"):
        if line.startswith("|"):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if not all(set(c) <= set("-: ") for c in cells):
                rows.append(cells)
        elif rows:
            break
    return rows


def ratio(cell: str) -> float:
    return float(re.sub(r"[^0-9.]", "", cell))


def columns(rows: list, names: list) -> tuple:
    header, body = rows[0], [r for r in rows[1:] if "geometric mean" not in r[0]]
    kernels = [r[0].replace("*", "") for r in body]
    return kernels, {n: [ratio(r[header.index(n)]) for r in body] for n in names}


def bars(kernels, series: dict, title: str, xlabel: str, path: str, log=False):
    fig, ax = plt.subplots(figsize=(8, 0.38 * len(kernels) + 1.4))
    height = 0.8 / len(series)
    for k, (name, values) in enumerate(series.items()):
        ax.barh([i + k * height for i in range(len(kernels))], values, height=height, label=name)
    ax.set_yticks([i + height * (len(series) - 1) / 2 for i in range(len(kernels))], kernels)
    ax.invert_yaxis()
    ax.axvline(1.0, color="black", linewidth=0.8)
    if log:
        ax.set_xscale("log")
    ax.xaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}×"))
    ax.set_xlabel(xlabel)
    ax.set_title(title)
    ax.legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main():
    with open(PAGE, encoding="utf-8") as f:
        text = f.read()
    ml = table_after(text, "**Latest, 2026-11-28, third sitting**")
    kernels, s = columns(ml, ["vs torch.compile", "vs JAX"])
    bars(kernels, s, "ML kernels, default mode, one thread (2026-11-28)",
         "speedup of hyb (peer time / hyb time; right of 1: hyb is faster)",
         os.path.join(HERE, "ml-vs-frameworks.png"), log=True)
    grad = table_after(text, "vs = peer time / hyb gradient time")
    kernels, s = columns(grad, ["vs eager", "vs torch.compile", "vs JAX"])
    bars(kernels, s, "Gradient kernels, one thread (2026-11-27)",
         "speedup of hyb's gradient (peer time / hyb time)", os.path.join(HERE, "grad-vs-frameworks.png"),
         log=True)
    rows = table_after(text, "| kernel | hyb fast-math | hyb IEEE |")
    kernels, s = columns(rows, ["vs Numba", "vs NumPy"])
    bars(kernels, s, "Elementwise and row kernels, fast-math, one thread",
         "speedup of hyb (peer time / hyb time)", os.path.join(HERE, "rows-vs-numba-numpy.png"), log=True)


if __name__ == "__main__":
    main()
