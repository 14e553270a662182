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


def test_modules_run_heaviest_first_and_keep_their_inner_order(monkeypatch):
    import tests.tiers as tiers

    monkeypatch.setattr(tiers, "module_seconds", lambda: {"tests/b.py": 30.0, "tests/c.py": 5.0})
    ids = ["tests/a.py::t1", "tests/b.py::t1", "tests/c.py::t1", "tests/b.py::t2[x]", "tests/d.py::t1"]
    order = [ids[i] for i in tiers.heaviest_modules_first(ids)]
    assert order == ["tests/b.py::t1", "tests/b.py::t2[x]", "tests/c.py::t1", "tests/a.py::t1", "tests/d.py::t1"]


def test_module_seconds_file_names_existing_modules_with_their_seconds():
    from tests.tiers import module_seconds

    weights = module_seconds()
    assert weights, "tests/module_seconds.txt is missing or empty: write it with `python -m tests.tiers --modules`"
    stale = [path for path in weights if not (ROOT / path).is_file()]
    assert not stale, f"modules gone since the last measurement (re-measure): {stale}"
    assert all(seconds >= 0 for seconds in weights.values())


def test_the_full_tier_keeps_the_collection_order(tmp_path):
    """dev.py turns xdist's reorder-by-test-count off, or the heaviest-first order would be undone."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("dev_for_tiers", ROOT / "dev.py")
    dev = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(dev)

    class Env:
        python = "python"

    cmd = dev.pytest_cmd(Env(), None, [])
    assert cmd[cmd.index("--dist") + 1] == "loadscope" and "--no-loadscope-reorder" in cmd
