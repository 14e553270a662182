"""Static checks as tests: ``ruff check`` on the package, tests, benchmarks and scripts, and ``mypy`` on
the core layers (arch, stats, flops), both configured in pyproject.toml. Skipped when the tool is
not installed (they are in the ``test`` extra)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _tool(name: str) -> str:
    found = shutil.which(name) or (str(Path(sys.executable).with_name(name))
                                   if Path(sys.executable).with_name(name).exists() else None)
    if found is None:
        pytest.skip(f"{name} is not installed (pip install -e '.[test]')")
    return found


def test_ruff_is_clean():
    proc = subprocess.run([_tool("ruff"), "check", "--output-format", "concise", "vlm_perf", "tests", "benchmarks", "scripts",
                           "dev.py"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_mypy_core_packages():
    proc = subprocess.run([_tool("mypy"), "--no-error-summary"], cwd=ROOT, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
