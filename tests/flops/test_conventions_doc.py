"""docs/conventions.md carries the conventions table generated from the registry."""

from pathlib import Path

from vlm_perf.flops.conventions import CONVENTIONS
from vlm_perf.flops.conventions.table import conventions_markdown

DOC = Path(__file__).resolve().parents[2] / "docs" / "conventions.md"


def test_conventions_table_is_in_sync():
    assert conventions_markdown() in DOC.read_text(encoding="utf-8"), (
        "docs/conventions.md is stale: paste `vlm-perf conventions --markdown` between its table marks")


def test_table_has_one_row_per_convention_with_its_pin():
    text = conventions_markdown()
    for name, conv in CONVENTIONS.items():
        row = next(line for line in text.splitlines() if line.startswith(f"| `{name}`"))
        if conv.pin is not None:
            assert conv.pin.version in row and conv.pin.file in row
