"""Typed report content: what a section says, independent of Markdown or HTML.

A section builds a list of blocks (`Paragraph`, `Bullets`, `Table`, `FigureRef`, `Code`, and for the
report's lead `Verdict`, `Stats` and the collapsible `Details`) whose text is made of `Span`s. One Jinja template per output format renders the same blocks, and every span is
escaped for that format when rendered, so a string from the input (a model name, a GPU string, a
file name) can never become Markdown syntax or live HTML. Emphasis is a property of a span, never
markup inside its text.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Iterable, Union


@dataclass(frozen=True)
class Span:
    text: str
    bold: bool = False
    code: bool = False
    tone: str = ""  # "fail" | "warn": coloured in HTML (a CSS class), plain in Markdown
    href: str = ""  # a link: only to a file of the report folder or an anchor of the page (never an input string)


Inline = tuple[Span, ...]
Part = Union[str, Span, int, float, None]


def B(value: object) -> Span:
    """A bold span."""
    return Span(str(value), bold=True)


def C(value: object) -> Span:
    """A code span (file names, keys, flags)."""
    return Span(str(value), code=True)


def L(text: object, href: str) -> Span:
    """A link to a file of the report folder (``summary.json``) or to an anchor of the page (``#checks``)."""
    if not re.fullmatch(r"#[a-z0-9_-]+|[A-Za-z0-9_.-]+", href) or href.startswith("."):
        raise RuntimeError(f"report links point inside the report folder or page: {href!r}")  # a bug, not input
    return Span(str(text), href=href)


def T(*parts: Part) -> Inline:
    """Inline text from plain strings and spans (``None`` parts are dropped)."""
    return tuple(p if isinstance(p, Span) else Span(str(p)) for p in parts if p is not None)


@dataclass
class Paragraph:
    text: Inline
    kind: str = "paragraph"


@dataclass
class Bullets:
    items: list[Inline]
    kind: str = "bullets"


@dataclass
class Table:
    header: list[str]
    rows: list[list[Inline]]
    kind: str = "table"


@dataclass
class FigureRef:
    file: str  # PNG name inside the report folder
    caption: str
    kind: str = "figure"


@dataclass
class Code:
    text: str
    language: str = ""
    kind: str = "code"


@dataclass
class Verdict:
    """The report's answer in one line (HTML: large type; ``tone`` fail / warn / ok colours its border)."""
    text: Inline
    tone: str = ""
    kind: str = "verdict"


@dataclass
class Stat:
    """One headline number: a short label, the value in large type (``492.7 → 553.7``), what it is."""
    label: str
    value: str
    detail: Inline = ()


@dataclass
class Stats:
    """Headline numbers side by side (HTML: cards; Markdown: a table of one value row and one detail row)."""
    items: list[Stat]
    kind: str = "stats"


@dataclass
class Details:
    """A summary line and the blocks it opens (HTML: a closed ``<details>``; Markdown: the line, then the blocks)."""
    summary: Inline
    blocks: list = field(default_factory=list)
    kind: str = "details"


Block = Union[Paragraph, Bullets, Table, FigureRef, Code, Verdict, Stats, Details]


@dataclass
class SectionContent:
    title: str
    blocks: list[Block] = field(default_factory=list)
    anchor: str = ""


# ---- escaping -----------------------------------------------------------------------------------
_MD_SPECIAL = re.compile(r"([\\`*_\[\]#|~$])")
_MD_LINE_START = re.compile(r"^(\s*)([-+>=]|\d+(?=[.)]))")


def md_escape(text: str, line_start: bool = False) -> str:
    """Neutralise Markdown (CommonMark + GFM tables + math) syntax in one line of plain text.

    Backslash-escapes the marks that open syntax anywhere in a line (emphasis, code, links, tables,
    strikethrough, math, headings), writes ``<`` and ``&`` as entities (so no raw HTML or entity
    survives), escapes a list / quote / heading-underline marker at the start, and folds line breaks
    into spaces (a newline could open a block). Parentheses need no escape once ``[``/``]`` are.
    """
    text = " ".join(str(text).splitlines())
    text = text.replace("&", "&amp;").replace("<", "&lt;")
    text = _MD_SPECIAL.sub(r"\\\1", text)
    start = _MD_LINE_START.match(text) if line_start else None
    if start is None:
        return text
    marker = start.group(2)
    cut = start.end()
    if marker[0].isdigit():  # "1." / "1)": the escape goes before the punctuation
        return text[:cut] + "\\" + text[cut:]
    return text[:start.start(2)] + "\\" + text[start.start(2):]


def md_inline(inline: Iterable[Span], line_start: bool = True, cell: bool = False) -> str:
    """Markdown of inline spans; ``line_start``: the text opens a line (a list marker there is escaped);
    ``cell``: the text is a GFM table cell, where a ``|`` splits the cell even inside a code span (GFM splits
    cells before inline parsing), so it is written ``\\|`` there too."""
    out = []
    for i, span in enumerate(inline):
        if span.code:
            text = " ".join(span.text.splitlines())
            if cell:
                text = text.replace("|", "\\|")
            ticks = "`" * (max((len(m) for m in re.findall(r"`+", text)), default=0) + 1)
            out.append(f"{ticks} {text} {ticks}" if "`" in text else f"{ticks}{text}{ticks}")
        elif span.href:
            out.append(f"[{md_escape(span.text)}]({span.href})")
        elif span.bold:
            out.append(f"**{md_escape(span.text)}**")
        else:
            out.append(md_escape(span.text, line_start=line_start and i == 0))
    return "".join(out)


def md_fence(text: str) -> str:
    """A fence longer than any backtick run inside ``text`` (so the text cannot close it)."""
    longest = max((len(m) for m in re.findall(r"`+", text)), default=0)
    return "`" * max(3, longest + 1)


def plain(inline: Iterable[Span]) -> str:
    return "".join(span.text for span in inline)


def mathtext_safe(text: object) -> str:
    """A string for a matplotlib title/label/legend: ``$`` cannot open mathtext.

    matplotlib treats text as math when it holds an unescaped ``$`` (count of ``$`` minus count of
    ``\\$`` is positive); escaping every ``$`` makes that count zero.
    """
    return str(text).replace("$", r"\$")


def fmt(value, digits: int = 1, pct: bool = False) -> str:
    """A number for a report cell: ``—`` when unknown, a percentage of a fraction when ``pct``."""
    if value is None:
        return "—"
    return f"{100 * value:.{digits}f}%" if pct else f"{value:,.{digits}f}"


#: FLOP/s units a report cell may use, largest first (`rate_unit`)
RATE_UNITS = (("PFLOP/s", 1e15), ("TFLOP/s", 1e12), ("GFLOP/s", 1e9), ("MFLOP/s", 1e6), ("FLOP/s", 1.0))


def rate_unit(values) -> tuple[str, float]:
    """(unit, scale) for a column of FLOP/s values: the largest unit in which the largest value is >= 1
    (TFLOP/s on GPUs, GFLOP/s on a CPU), so one column has one unit; cells are ``fmt(v / scale, 2)``."""
    top = max((abs(v) for v in values if v is not None), default=0.0)
    return next(((u, s) for u, s in RATE_UNITS if top >= s), RATE_UNITS[1])
