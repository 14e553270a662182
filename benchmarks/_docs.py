"""Rewrite one ``## `` section of docs/benchmarks.md with a benchmark's generated tables.

Shared by the ``bench_*.py`` scripts (``--write-docs``). A section runs from its heading line to the
next ``## `` heading (or the end). With ``notes_mark`` (an HTML comment line such as
``<!-- notes: kept by bench_parse.py -->``), everything in the old section from that mark on is
hand-written analysis and is kept after the new tables.
"""

from __future__ import annotations

from pathlib import Path

DOC = Path(__file__).resolve().parents[1] / "docs" / "benchmarks.md"


def replace_section(heading: str, section: str, notes_mark: str | None = None, doc: Path = DOC) -> Path:
    """Put ``section`` (which starts with ``heading``) in place of the old ``heading`` section of ``doc``,
    or append it when there is none; returns ``doc``."""
    text = doc.read_text(encoding="utf-8") if doc.exists() else "# Benchmarks\n"
    section = section.rstrip("\n") + "\n"
    start = text.find(heading + "\n")
    if start < 0:
        text = text.rstrip("\n") + "\n\n" + section
    else:
        nxt = text.find("\n## ", start + len(heading))
        end = len(text) if nxt < 0 else nxt + 1
        old = text[start:end]
        if notes_mark is not None and notes_mark in old:
            section += "\n" + old[old.index(notes_mark):].rstrip("\n") + "\n"
        text = text[:start] + section + ("\n" + text[end:] if nxt >= 0 else "")
    doc.parent.mkdir(parents=True, exist_ok=True)
    doc.write_text(text, encoding="utf-8")
    return doc
