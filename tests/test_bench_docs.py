"""benchmarks/_docs.py: a benchmark rewrites only its own section of docs/benchmarks.md and keeps
the hand-written notes after its mark."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

from _docs import replace_section  # noqa: E402

MARK = "<!-- notes: kept by bench_x.py -->"


def test_replaces_only_its_section_and_keeps_notes(tmp_path):
    doc = tmp_path / "benchmarks.md"
    doc.write_text(f"# Benchmarks\n\n## A\n\nold table\n\n{MARK}\n\n### analysis\nkept\n\n## B\n\nother\n")
    replace_section("## A", "## A\n\nnew table\n", MARK, doc=doc)
    assert doc.read_text() == f"# Benchmarks\n\n## A\n\nnew table\n\n{MARK}\n\n### analysis\nkept\n\n## B\n\nother\n"


def test_without_a_mark_the_whole_section_is_replaced_and_a_missing_one_appended(tmp_path):
    doc = tmp_path / "benchmarks.md"
    doc.write_text("# Benchmarks\n\n## A\n\nold\n\n## B\n\nother\n")
    replace_section("## A", "## A\n\nnew\n", doc=doc)
    replace_section("## C", "## C\n\nthird\n", doc=doc)
    assert doc.read_text() == "# Benchmarks\n\n## A\n\nnew\n\n## B\n\nother\n\n## C\n\nthird\n"
