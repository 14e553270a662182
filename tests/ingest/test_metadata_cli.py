"""``vlm-perf metadata``: outputs, summary, diagnostics on stderr, one-line errors (exit 2)."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from vlm_perf.cli import main

FIXTURES = Path(__file__).parent / "fixtures" / "metadata"


def run(argv, capsys):
    with pytest.raises(SystemExit) as info:
        main(argv)
    out, err = capsys.readouterr()
    return info.value.code, out, err


@pytest.mark.parametrize("suffix", [".parquet", ".csv", ".jsonl"])
def test_writes_per_iteration_stats(tmp_path, capsys, suffix):
    out = tmp_path / f"stats{suffix}"
    code, stdout, stderr = run(["metadata", str(FIXTURES / "small.jsonl"), "--out", str(out)], capsys)
    assert code == 0
    frame = {".parquet": pl.read_parquet, ".csv": pl.read_csv, ".jsonl": pl.read_ndjson}[suffix](out)
    assert frame["iteration"].to_list() == [1, 2]
    assert frame["vision_patches"].to_list() == [240, 4]
    assert "4/4 rows used" in stderr and "note:" in stderr


def test_summary_without_out(capsys):
    code, stdout, stderr = run(["metadata", str(FIXTURES / "small.jsonl")], capsys)
    assert code == 0
    assert "iterations      2 (1..2)" in stdout
    assert "vision patches  244" in stdout


def test_bad_input_is_one_line_error(capsys):
    code, stdout, stderr = run(["metadata", str(FIXTURES / "bad.jsonl")], capsys)
    assert code == 2
    assert stderr.strip().count("\n") == 0
    assert stderr.startswith(f"error: {FIXTURES / 'bad.jsonl'}:2: image_grid_thw")


def test_skip_bad_reports_diagnostics(tmp_path, capsys):
    out = tmp_path / "s.csv"
    code, stdout, stderr = run(["metadata", str(FIXTURES / "bad.jsonl"), "--skip-bad", "-o", str(out)], capsys)
    assert code == 0
    assert "2/5 rows used" in stderr and "skipped:" in stderr and "bad.jsonl:3: json" in stderr
    assert pl.read_csv(out).height == 2


def test_model_option_and_bad_suffix(tmp_path, capsys):
    code, stdout, stderr = run(["metadata", str(FIXTURES / "small.jsonl"), "--model", "qwen2.5-vl-7b"], capsys)
    assert code == 0 and "window=4" in stderr
    code, _, stderr = run(["metadata", str(FIXTURES / "small.jsonl"), "--out", str(tmp_path / "x.xlsx")], capsys)
    assert code == 2 and "unsupported format" in stderr
    code, _, stderr = run(["metadata", str(tmp_path / "missing.jsonl")], capsys)
    assert code == 2 and "no such file" in stderr
