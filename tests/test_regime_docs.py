"""docs/training-regimes.md's supported-families table names exactly the model types the layout gives module names."""

import re
from pathlib import Path

from vlm_perf.arch.layout import named_model_types

DOC = Path(__file__).resolve().parents[1] / "docs" / "training-regimes.md"


def test_supported_families_table_matches_the_layout():
    text = DOC.read_text(encoding="utf-8")
    table = text.split("<!-- adapter-families: begin -->")[1].split("<!-- adapter-families: end -->")[0]
    rows = [line.split("|") for line in table.strip().splitlines()[2:]]
    documented = [t for row in rows for t in re.findall(r"`([a-z0-9_]+)`", row[2])]
    assert len(documented) == len(set(documented)), "a model type listed twice"
    assert set(documented) == set(named_model_types()), (
        "docs/training-regimes.md's table and vlm_perf.arch.layout disagree: "
        f"only in the docs {sorted(set(documented) - set(named_model_types()))}, "
        f"only in the layout {sorted(set(named_model_types()) - set(documented))}")
