"""The tier list (tests/tiers.py) names only tests that exist: a renamed or deleted test must leave it, or the
fast tier would silently keep a heavy test (or the list would rot into names that mean nothing)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.tiers import MEASURED_DIRS, SLOW, tier_markers

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("key", sorted(SLOW))
def test_every_slow_entry_names_an_existing_test(key):
    path, _, function = key.partition("::")
    source = (ROOT / path).read_text()
    if function:
        assert re.search(rf"^def {re.escape(function)}\(", source, re.M), f"{key}: no such test function"
    else:
        assert re.search(r"^def test_", source, re.M), f"{path}: no test in it"
    assert SLOW[key].strip(), f"{key}: say why it is full-tier only"


def test_measured_dirs_exist_and_the_rule_is_by_prefix():
    assert all((ROOT / d).is_dir() for d in MEASURED_DIRS)
    assert tier_markers("tests/verify/test_x.py::test_y[a]") == ("measured",)
    assert tier_markers("tests/test_notebooks.py::test_notebook_executes[01]") == ("slow",)
    assert tier_markers("tests/test_lint.py::test_mypy_core_packages") == ("slow",)
    assert tier_markers("tests/test_lint.py::test_mypy_core_packages_x") == ()  # a prefix of a name is not a match
    assert tier_markers("tests/test_lint.py::test_ruff") == ()


def test_the_measured_slow_list_names_existing_test_files():
    from tests.tiers import measured_slow

    for nodeid in measured_slow():
        path, _, name = nodeid.partition("::")
        assert (ROOT / path).is_file(), nodeid
        function = name.split("[")[0]
        assert re.search(rf"^(async )?def {re.escape(function)}\(", (ROOT / path).read_text(), re.M), nodeid
