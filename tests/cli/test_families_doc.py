"""docs/families.md is generated from the code (`vlm-perf families --markdown`) and must stay in sync."""

from pathlib import Path

from vlm_perf.commands.families import families_markdown

DOC = Path(__file__).resolve().parents[2] / "docs" / "families.md"


def test_families_doc_is_in_sync():
    assert DOC.read_text(encoding="utf-8") == families_markdown(), (
        "docs/families.md is stale: run `vlm-perf families --markdown > docs/families.md`")


def test_doc_names_every_family_and_the_not_defined_cells():
    from vlm_perf.arch.families import FAMILIES

    text = families_markdown()
    for name in FAMILIES:
        assert f"## `{name}`" in text
    row = next(line for line in text.splitlines() if line.startswith("| `internvl` |"))
    from vlm_perf.flops.conventions import CONVENTIONS

    undefined = sum(not c.covers("internvl") for c in CONVENTIONS.values())
    assert undefined >= 5 and row.count("not defined") == undefined and "LM + vision" in row
