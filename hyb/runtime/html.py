"""HTML views of kernels for notebooks (Jupyter's ``_repr_html_``).

A :class:`~hyb.runtime.compiler.CompiledKernel` shows its pipeline stages as tabs, one
``<pre>`` per stage, made with radio buttons and CSS only (no script, so a notebook that is
not trusted shows the same thing; where styles are stripped every stage is shown in turn).
A :class:`~hyb.runtime.kernel.Kernel` shows its source and the signatures compiled so far.
Every piece of text is escaped.
"""
from __future__ import annotations

import html
import itertools
import os

from ..dsl import stages

# The stages a compiled kernel shows, first the one open at the start.
TABS = stages.tabs("cpu")

_ids = itertools.count()

_STYLE = """
.{c} {{ font-family: sans-serif; }}
.{c} > input {{ display: none; }}
.{c} > label {{ display: inline-block; padding: 3px 10px; margin-right: 2px; border: 1px solid #ccc;
  border-bottom: none; border-radius: 4px 4px 0 0; cursor: pointer; background: #f3f3f3; font-size: 90%; }}
.{c} > div.hyb-panel {{ display: none; border: 1px solid #ccc; padding: 4px 8px; }}
.{c} pre {{ max-height: 32em; overflow: auto; margin: 0; font-size: 85%; line-height: 1.3; }}
{checked}
{colors}
"""


def _highlighted(text: str, stage: str) -> str:
    from ..dsl import highlight

    return highlight.html(text, highlight.STAGE_LANGUAGE.get(stage, ""))


def _unique() -> str:
    return f"hyb-view-{os.getpid():x}-{next(_ids)}"


def tabs(title_html: str, panels: list) -> str:
    """A tab strip over ``panels``, a list of ``(tab name, inner html)``; the first is open."""
    uid = _unique()
    checked = "\n".join(
        f".{uid} > #{uid}-{i}:checked + label {{ background: white; font-weight: bold; }}\n"
        f".{uid} > #{uid}-{i}:checked ~ div.hyb-panel-{i} {{ display: block; }}"
        for i in range(len(panels)))
    from ..dsl import highlight

    style = _STYLE.format(c=uid, checked=checked, colors=highlight.css(uid))
    parts = [f'<div class="{uid}">', f"<style>{style}</style>",
             f"<div>{title_html}</div>"]
    for i, (name, _) in enumerate(panels):
        parts.append(f'<input type="radio" name="{uid}" id="{uid}-{i}"{" checked" if i == 0 else ""}>'
                     f'<label for="{uid}-{i}">{html.escape(name)}</label>')
    for i, (name, inner) in enumerate(panels):
        parts.append(f'<div class="hyb-panel hyb-panel-{i}">{inner}</div>')
    parts.append("</div>")
    return "\n".join(parts)


def compiled_kernel_html(ck) -> str:
    """``CompiledKernel._repr_html_``: the stages of one compiled kernel, one tab each."""
    from ..errors import HybridError

    panels = []
    for stage in TABS:
        try:
            text = ck.inspect(stage)
            inner = f"<pre>{_highlighted(text, stage)}</pre>"
        except HybridError as e:  # e.g. a kernel whose gradient is not supported
            inner = f'<pre style="color:#b00">{html.escape(e.render())}</pre>'
        panels.append((stage, inner))
    sig = ", ".join(html.escape(str(s)) for s in ck.specs)
    title = f"<b>CompiledKernel</b> <code>{html.escape(ck.name)}({sig})</code>"
    return tabs(title, panels)


def kernel_html(kernel) -> str:
    """``Kernel._repr_html_``: the kernel's source and the signatures it was compiled for."""
    title = f"<b>hyb.Kernel</b> <code>{html.escape(kernel.name)}({html.escape(', '.join(kernel.params))})</code>"
    compiled = [", ".join(str(s) for s in specs) for (specs, _target) in list(getattr(kernel, "_cache", {}))]
    rows = "".join(f"<li><code>{html.escape(c)}</code></li>" for c in compiled)
    note = f"<div>compiled for:<ul>{rows}</ul></div>" if rows else "<div>not compiled yet</div>"
    from ..dsl import highlight

    uid = _unique()
    return (f'<div class="{uid}"><style>{highlight.css(uid)}</style>{title}'
            f"<pre>{_highlighted(kernel.source, 'ast')}</pre>{note}</div>")


# Methods, bound in the classes' bodies (``from .html import compiled_kernel_html as _repr_html_``).
__all__ = ["compiled_kernel_html", "kernel_html", "tabs"]
