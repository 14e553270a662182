"""Render the typed report (title + sections of blocks) to Markdown and HTML through Jinja templates."""

from __future__ import annotations

import base64
from pathlib import Path

from jinja2 import Environment, PackageLoader, StrictUndefined
from markupsafe import Markup, escape

from .content import SectionContent, md_escape, md_fence, md_inline


def _html_inline(inline) -> Markup:
    out = []
    for span in inline:
        text = escape(span.text)
        if span.code:
            text = Markup(f"<code>{text}</code>")
        if span.bold:
            text = Markup(f"<b>{text}</b>")
        if span.tone in ("fail", "warn"):
            text = Markup(f'<span class="{span.tone}">{text}</span>')
        if span.href:  # content.L: a file of the report folder or an anchor, checked when the span was made
            text = Markup(f'<a href="{escape(span.href)}">{text}</a>')
        out.append(text)
    return Markup("").join(out)


def _environment(autoescape: bool) -> Environment:
    env = Environment(loader=PackageLoader("vlm_perf.report", "templates"), autoescape=autoescape,
                      undefined=StrictUndefined, trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True)
    env.filters.update(md=md_escape, md_inline=md_inline, md_fence=md_fence, html_inline=_html_inline,
                       md_cell=lambda inline: md_inline(inline, line_start=False, cell=True))
    return env


_MD = _environment(autoescape=False)
_HTML = _environment(autoescape=True)


def _blocks(blocks: list) -> list:
    """Every block, those inside `Details` included."""
    return [inner for b in blocks for inner in ([b] + (_blocks(b.blocks) if b.kind == "details" else []))]


def render_markdown(title: str, sections: list[SectionContent], kind: str = "report") -> str:
    """Markdown of a report (``kind`` report) or a comparison page (``kind`` compare): one template, one escaping."""
    text = _MD.get_template("report.md.j2").render(title=title, sections=sections, kind=kind)
    while "\n\n\n" in text:
        text = text.replace("\n\n\n", "\n\n")
    return text


def render_html(title: str, sections: list[SectionContent], figure_dir: Path, kind: str = "report") -> str:
    """Self-contained HTML (figures inlined from ``figure_dir``) of the same sections as `render_markdown`."""
    files = {b.file for s in sections for b in _blocks(s.blocks) if b.kind == "figure"}
    images = {name: base64.b64encode((figure_dir / name).read_bytes()).decode() for name in files}
    return _HTML.get_template("report.html.j2").render(title=title, sections=sections, images=images, kind=kind)
