"""Fixtures shared by every test directory (the plain helpers behind them are in ``tests/support.py``)."""

from __future__ import annotations

from pathlib import Path

import pytest

# Helpers that hold test assertions outside test_*.py files: pytest rewrites them too (clear failure messages).
# Both names: tests/ has no __init__.py, so a collected test file imports it as verify.fixed_tile.
pytest.register_assert_rewrite("verify.fixed_tile", "tests.verify.fixed_tile")

from tests import support  # noqa: E402


@pytest.fixture
def cli():
    """``cli(*args, **invoke_kwargs)``: ``vlm-perf ARGS`` run in-process; click's Result (exit_code, stdout,
    stderr, output, exception)."""
    return support.invoke_cli


@pytest.fixture
def cli_proc():
    """``cli_proc(*args, timeout=600)``: ``python -m vlm_perf.cli ARGS`` in a subprocess; CompletedProcess."""
    return support.run_cli


@pytest.fixture
def sample_run(tmp_path):
    """``sample_run(name=SFT sample, dest="run")``: a bundled sample run copied to ``tmp_path / dest``; its path."""
    def copy(name: str = support.SFT_SAMPLE, dest: str = "run") -> Path:
        return support.copy_sample(tmp_path / dest, name)
    return copy


def pytest_collection_modifyitems(config, items):
    """Files tests into the tiers (tests/tiers.py): ``measured`` for the torch-measured directories, ``slow`` for the
    listed heavy tests; ``dev.py test --fast`` deselects both."""
    from tests.tiers import tier_markers

    for item in items:
        for name in tier_markers(item.nodeid):
            item.add_marker(getattr(pytest.mark, name))
