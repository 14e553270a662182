"""``python -m vlm_perf.report.doc_tables``: rewrite the generated tables of the docs between their markers: the
option table of docs/run-config.md (`vlm_perf.run.options.options_markdown`) and the summary.json schema
of docs/report.md (`vlm_perf.report.schema.schema_markdown`); ``--check`` only reports whether they are
current."""

from __future__ import annotations

import re
import sys
from pathlib import Path

from ..run.options import options_markdown

DOCS = Path(__file__).resolve().parents[2] / "docs"
DOC = DOCS / "run-config.md"
SCHEMA_DOC = DOCS / "report.md"


def _section(mark: str) -> re.Pattern:
    return re.compile(rf"(<!-- {mark}:start[^\n]*-->\n)(.*?)(<!-- {mark}:end -->)", re.S)


def replace_marked_table(text: str, mark: str, table: str, doc: Path) -> str:
    pattern = _section(mark)
    if not pattern.search(text):
        raise SystemExit(f"{doc}: no <!-- {mark}:start --> / <!-- {mark}:end --> markers")
    return pattern.sub(lambda m: m.group(1) + table + m.group(3), text, count=1)


def with_table(text: str) -> str:
    """``text`` (docs/run-config.md) with the generated option table between its markers."""
    return replace_marked_table(text, "options", options_markdown(), DOC)


def with_schema(text: str) -> str:
    """``text`` (docs/report.md) with the generated summary.json schema between its markers."""
    from .schema import schema_markdown

    return replace_marked_table(text, "schema", schema_markdown(), SCHEMA_DOC)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    stale = 0
    for doc, rewrite in ((DOC, with_table), (SCHEMA_DOC, with_schema)):
        text = doc.read_text()
        new = rewrite(text)
        if new != text:
            stale += 1
            if "--check" not in argv:
                doc.write_text(new)
    return 1 if stale and "--check" in argv else 0


if __name__ == "__main__":
    raise SystemExit(main())
