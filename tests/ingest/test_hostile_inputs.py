"""Inputs that crashed or hung before (issue 17), by class: unsigned 64-bit Parquet integers (metadata and
W&B exports), ragged W&B CSVs, non-finite literals and deep nesting in config.json / run.json, and shards or logs
that expand to long stretches of blank lines. Each is handled correctly or is one line with exit 2."""

from __future__ import annotations

import json
import subprocess
import sys

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.support import run_cli
from vlm_perf.errors import InputError, SchemaError, VlmPerfError



# ------------------------------------------------------------------------------------------- uint64
@pytest.mark.parametrize("column", ["iteration", "microbatch", "dp_rank", "padded_tokens"])
def test_uint64_metadata_columns_are_read(tmp_path, column):
    from vlm_perf.ingest.metadata_source import MetadataSource

    values = {"iteration": [1, 2], "microbatch": [0, 1], "dp_rank": [0, 0], "padded_tokens": [128, 256]}
    table = {k: pa.array(v, pa.uint64() if k == column else pa.int64()) for k, v in values.items()}
    table["seq_lens"] = pa.array([[100], [200]], pa.list_(pa.uint64() if column == "padded_tokens" else pa.int64()))
    pq.write_table(pa.table(table), tmp_path / "m.parquet")
    src = MetadataSource(tmp_path / "m.parquet").read()
    assert src.per_iteration["lm_tokens"].to_list() == [100, 200]


@pytest.mark.parametrize("column", ["iteration", "seq_lens"])
def test_uint64_beyond_int64_is_a_schema_error(tmp_path, column):
    from vlm_perf.ingest.metadata_source import MetadataSource

    big = 2**63 + 5
    table = {"iteration": pa.array([1, big if column == "iteration" else 2], pa.uint64()),
             "seq_lens": pa.array([[100], [big if column == "seq_lens" else 200]], pa.list_(pa.uint64()))}
    pq.write_table(pa.table(table), tmp_path / "m.parquet")
    with pytest.raises(SchemaError, match="m.parquet: a value does not fit Int64"):
        MetadataSource(tmp_path / "m.parquet").read()


@pytest.mark.parametrize("step_column", ["_step", "train/global_step"])
def test_uint64_wandb_parquet_steps(tmp_path, step_column):
    from vlm_perf.ingest.logs import parse_logs

    cols = {"_step": pa.array([1, 2, 3], pa.uint64()), "train/loss": [2.0, 1.5, 1.2]}
    if step_column != "_step":
        cols[step_column] = pa.array([10, 20, 2**64 - 1], pa.uint64())
    pq.write_table(pa.table(cols), tmp_path / "history.parquet")
    result = parse_logs([tmp_path / "history.parquet"])
    got = result.iterations["iteration"].to_list()
    # a step beyond Int64 is dropped as a partial record, never wrapped around
    assert got == ([1, 2, 3] if step_column == "_step" else [10, 20])


# ------------------------------------------------------------------------------------------- W&B CSV
@pytest.mark.parametrize("body,line", [("1,2.0\n2,3.0,4.0\n", 3), ("1,2.0,9\n", 2), ("1,2\n2,3\n3,4\n4,5,6,7\n", 5)])
def test_ragged_wandb_csv_is_one_line_naming_the_row(tmp_path, body, line):
    from vlm_perf.ingest.logs import parse_logs

    path = tmp_path / "export.csv"
    path.write_text("_step,train/loss\n" + body)
    with pytest.raises(InputError, match=f"export.csv:{line}: not a W&B CSV export"):
        parse_logs([path])


def test_ragged_wandb_csv_exits_2(tmp_path):
    path = tmp_path / "export.csv"
    path.write_text("_step,train/loss\n1,2.0\n2,3.0,4.0,5\n")
    proc = run_cli("parse", str(path), "--out", str(tmp_path / "it.parquet"), timeout=300)
    assert proc.returncode == 2 and "internal error" not in proc.stderr


# --------------------------------------------------------------------------------- config / run.json
@pytest.mark.parametrize("where", ["config", "run.json"])
@pytest.mark.parametrize("payload", ["Infinity", "NaN", "-Infinity", "[" * 200_000 + "]" * 200_000])
def test_non_finite_and_deep_json_exit_2(tmp_path, where, payload, sample_run):
    run = sample_run("qwen2.5-vl-7b-video")
    if where == "config":
        config = json.loads(json.dumps(__import__("vlm_perf.arch", fromlist=["x"]).preset_config("qwen2.5-vl-7b")))
        text = json.dumps(config)[:-1] + f', "extra": {payload}}}'
        (run / "config.json").write_text(text)
        args = ["flops", "--model", str(run / "config.json"), "--seq-len", "4096"]
    else:
        (run / "run.yaml").unlink()
        (run / "run.json").write_text(f'{{"model": "qwen2.5-vl-7b", "notes": {payload}}}')
        args = ["report", str(run), "-o", str(tmp_path / "out")]
    proc = run_cli(*args, timeout=300)
    assert proc.returncode == 2, proc.stderr[-400:]
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("error: ") and len(last) < 300


# ---------------------------------------------------------------------------------------- blank lines
def test_blank_log_stretches_are_not_parsed_line_by_line(tmp_path):
    """A counter, not a clock: a .zst log of 64 MiB of blank lines reaches the parser as one blank line per piece of
    at most 2**20 lines (the rest counted as omitted), and line numbers after a blank stretch stay exact."""
    import zstandard

    from vlm_perf.ingest.logs import parse_logs
    from vlm_perf.ingest.logs.reader import line_frames

    n = 64 << 20
    path = tmp_path / "train.log.zst"
    path.write_bytes(zstandard.ZstdCompressor(level=3).compress(b"\n" * n))
    assert path.stat().st_size < 64 << 10
    omitted = [0]
    rows = sum(f.height for f in line_frames(path, omitted))
    assert rows <= 64 and rows + omitted[0] == n  # one row per piece of at most 2**20 lines
    mixed = tmp_path / "mixed.log"
    mixed.write_bytes(b"\n" * (40 << 20) + b"hello\n" + b" \t\r\n" * 5 + b"bye")
    text = [r for f in line_frames(mixed) for r in f.iter_rows() if r[1].strip()]
    assert text == [((40 << 20) + 1, "hello"), ((40 << 20) + 7, "bye")]
    with pytest.raises(InputError, match="no recognisable training-log record"):
        parse_logs([path])


def test_blank_metadata_shard_is_read_quickly(tmp_path):
    """256 MiB of newlines in a 10 KB .zst: the metadata pass (including the key sampling that looped over every
    blank line in Python, 150 s for 64 MiB before) finishes far inside the bound and finds no rows."""
    import zstandard

    path = tmp_path / "metadata.jsonl.zst"
    path.write_bytes(zstandard.ZstdCompressor(level=3).compress(b"\n" * (256 << 20)))
    code = ("from vlm_perf.ingest.metadata_source import MetadataSource\n"
            f"s = MetadataSource({str(path)!r}).read()\nprint(s.per_iteration.height, s.diagnostics.rows_read)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=90)
    assert proc.returncode == 0 and proc.stdout.split() == ["0", "0"], proc.stderr[-300:]


def test_key_sampling_skips_blank_stretches():
    """`_sample_keys` finds the first rows after a blank stretch (and counts only non-blank lines)."""
    from vlm_perf.ingest.metadata_source import _sample_keys

    seen: dict[str, int] = {}
    left = [2]
    data = b"\n" * 200_000 + b'{"iteration": 1, "typo": 1}\n' + b"  \n" * 1000 + b'{"iteration": 2, "typo": 2}\n{"x": 1}\n'
    _sample_keys(data, left, seen)
    assert seen == {"typo": 2} and left == [0]


def test_all_are_vlmperf_errors():
    assert issubclass(SchemaError, VlmPerfError) and issubclass(InputError, VlmPerfError)
