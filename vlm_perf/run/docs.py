"""``python -m vlm_perf.run.docs``: rewrite the generated option table of docs/run-config.md
(`vlm_perf.run.options.options_markdown`) between its markers; ``--check`` only reports whether it is current."""

from __future__ import annotations

import re
import sys
from pathlib import Path

from .options import options_markdown

DOC = Path(__file__).resolve().parents[2] / "docs" / "run-config.md"
_SECTION = re.compile(r"(<!-- options:start[^\n]*-->\n)(.*?)(<!-- options:end -->)", re.S)


def with_table(text: str) -> str:
    """``text`` (the doc) with the generated table between the markers."""
    if not _SECTION.search(text):
        raise SystemExit(f"{DOC}: no <!-- options:start --> / <!-- options:end --> markers")
    return _SECTION.sub(lambda m: m.group(1) + options_markdown() + m.group(3), text, count=1)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    text = DOC.read_text()
    new = with_table(text)
    if "--check" in argv:
        return 0 if new == text else 1
    DOC.write_text(new)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
