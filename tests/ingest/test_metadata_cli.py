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
    valid = tmp_path / "valid.jsonl"  # small.jsonl has more visual tokens than LM tokens for a real model
    valid.write_text('{"iteration": 1, "seq_lens": [100], "image_grid_thw": [[1, 8, 8]]}\n')
    code, stdout, stderr = run(["metadata", str(valid), "--model", "qwen2.5-vl-7b"], capsys)
    assert code == 0 and "window=4" in stderr
    code, stdout, stderr = run(["metadata", str(FIXTURES / "small.jsonl"), "--model", "qwen2.5-vl-7b"], capsys)
    assert code == 2 and "small.jsonl:1: image_grid_thw: the row's media give more visual tokens" in stderr
    code, _, stderr = run(["metadata", str(FIXTURES / "small.jsonl"), "--out", str(tmp_path / "x.xlsx")], capsys)
    assert code == 2 and "unsupported format" in stderr
    code, _, stderr = run(["metadata", str(tmp_path / "missing.jsonl")], capsys)
    assert code == 2 and "no such file" in stderr


def test_to_parquet_round_trip(tmp_path, capsys):
    """The Parquet copy is read by the same path and gives the same statistics."""
    pq = tmp_path / "conv" / "metadata.parquet"
    a = tmp_path / "a.parquet"
    code, _, stderr = run(["metadata", str(FIXTURES / "small.jsonl"), "--to-parquet", str(pq), "-o", str(a)], capsys)
    assert code == 0 and f"wrote {pq} (4 rows)" in stderr
    assert not list(pq.parent.glob("*.partial"))
    b = tmp_path / "b.parquet"
    code, _, _ = run(["metadata", str(pq), "-o", str(b)], capsys)
    assert code == 0
    assert pl.read_parquet(a).equals(pl.read_parquet(b))


def test_to_parquet_failure_leaves_no_file(tmp_path, capsys):
    pq = tmp_path / "m.parquet"
    code, _, stderr = run(["metadata", str(FIXTURES / "bad.jsonl"), "--to-parquet", str(pq)], capsys)
    assert code == 2 and not pq.exists() and not list(tmp_path.glob("*.partial"))
    code, _, stderr = run(["metadata", str(FIXTURES / "small.jsonl"), "--to-parquet", str(tmp_path / "x.csv")], capsys)
    assert code == 2 and "must end in .parquet" in stderr


def test_progress_decision():
    import io

    from vlm_perf.commands._progress import LARGE_INPUT_BYTES, want_progress

    class Tty(io.StringIO):
        def isatty(self):
            return True

    assert want_progress(Tty(), LARGE_INPUT_BYTES)
    assert not want_progress(Tty(), LARGE_INPUT_BYTES - 1)  # small input: quiet
    assert not want_progress(io.StringIO(), 10 * LARGE_INPUT_BYTES)  # not a terminal: quiet
    assert not want_progress(None, 10 * LARGE_INPUT_BYTES)


def test_quiet_when_not_a_terminal(capsys):
    code, stdout, stderr = run(["metadata", str(FIXTURES / "small.jsonl")], capsys)
    assert code == 0
    assert "\r" not in stderr and "\x1b[" not in stderr  # no bar, no cursor control


def test_to_parquet_sigterm_removes_partial_file(tmp_path):
    """SIGTERM in the middle of a conversion: no partial Parquet file is left behind."""
    import os
    import signal

    from vlm_perf.commands.metadata import _convert

    target = tmp_path / "m.parquet"
    before = signal.getsignal(signal.SIGTERM)

    seen = []

    def interrupt(done, total):  # once the partial file holds rows: as if the job were killed
        if (tmp_path / "m.parquet.partial").exists():
            seen.append(done)
            os.kill(os.getpid(), signal.SIGTERM)

    with pytest.raises(KeyboardInterrupt):
        _convert([str(FIXTURES / "small.jsonl")], None, False, interrupt, target)
    assert seen and list(tmp_path.iterdir()) == []
    assert signal.getsignal(signal.SIGTERM) is before  # restored
