"""``python -m vlm_perf.export.docs``: rewrite docs/export.md's metric table (`vlm_perf.export.scheme.metrics_markdown`)
between its markers; ``--check`` only reports whether it is current (tests/export/test_export_scheme.py checks it)."""

from __future__ import annotations

import sys

from ..report.doc_tables import DOCS, replace_marked_table
from .scheme import metrics_markdown

DOC = DOCS / "export.md"


def with_metrics(text: str) -> str:
    """``text`` (docs/export.md) with the generated metric table between its markers."""
    return replace_marked_table(text, "metrics", metrics_markdown(), DOC)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    text = DOC.read_text()
    new = with_metrics(text)
    if new != text and "--check" not in argv:
        DOC.write_text(new)
    return 1 if new != text and "--check" in argv else 0


if __name__ == "__main__":
    raise SystemExit(main())
