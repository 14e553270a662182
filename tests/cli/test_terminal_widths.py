"""Terminal tables at 80 columns: a name (a convention, a run) is never cut ("megatro…") nor broken over two
lines; the numbers beside it wrap or fold instead."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TINY = ROOT / "sample_logs" / "qwen2-vl-tiny-real"


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "vlm_perf.cli", *args], capture_output=True, text=True, timeout=600,
                          env={**os.environ, "COLUMNS": "80"}, cwd=ROOT)


#: the longest convention name there is, with others the tiny Qwen2-VL run is defined under
NAMES = ("exact", "megatron-lm", "megatron-lm@dev-qwen35_vl_v2", "verl@v0.7.1", "hf-trainer")


@pytest.mark.slow
def test_compare_at_80_columns_prints_every_convention_whole(tmp_path):
    r = _run("compare", str(TINY), str(TINY), "-o", str(tmp_path / "cmp"),
             *(a for name in NAMES for a in ("--convention", name)))
    assert r.returncode == 0, r.stderr
    names = list(json.loads((tmp_path / "cmp" / "compare.json").read_text())["conventions"])
    assert sorted(names) == sorted(NAMES)
    assert "1.0722e+09" in r.stdout  # the numbers keep their longest word whole where the table has room
    lines = r.stdout.splitlines()
    assert max(map(len, lines)) <= 80
    for name in names:  # each on one line of the table, between its borders
        assert any(f"│ {name} " in line for line in lines), (name, r.stdout)
    assert "…" not in r.stdout


def test_explain_at_80_columns_prints_every_convention_whole():
    r = _run("explain", "--model", "qwen2.5-vl-7b", "--before", "492.7", "--after", "553.7", "--convention", "exact",
             "--before-convention", "megatron-lm")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert max(map(len, lines)) <= 80
    for name in ("exact", "megatron-lm"):
        assert any(name in line for line in lines), (name, r.stdout)
    assert "…" not in r.stdout and "megatro\n" not in r.stdout
