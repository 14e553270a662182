"""`vlm-perf parse` command."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import polars as pl

from vlm_perf.ingest.logs import CORE_COLUMNS

LINE = (" [2024-05-01 12:00:{s:02d}] iteration {it:8d}/     100 | consumed samples: {cs:12d} |"
        " elapsed time per iteration (ms): 1500.0 | learning rate: 1.000000E-04 | global batch size:     8 |"
        " lm loss: 2.000000E+00 | loss scale: 1.0 | grad norm: 1.000 | number of skipped iterations:   0 |"
        " number of nan iterations:   0 |")


def _log(tmp_path: Path) -> Path:
    p = tmp_path / "run.log"
    p.write_text("\n".join(LINE.format(s=i, it=i, cs=8 * i) for i in range(1, 6)) + "\nnoise\n")
    return p


def test_cli_writes_parquet_and_reports_diagnostics(tmp_path, cli):
    out = tmp_path / "it.parquet"
    res = cli("parse", str(_log(tmp_path)), "--out", str(out))
    assert res.exit_code == 0, res.output
    df = pl.read_parquet(out)
    assert df.columns[: len(CORE_COLUMNS)] == list(CORE_COLUMNS)
    assert df.get_column("iteration").to_list() == [1, 2, 3, 4, 5]
    assert df.get_column("elapsed_s").to_list() == [1.5] * 5
    assert "lines read 6, records 5" in res.stderr


def test_cli_summary_csv_and_format(tmp_path, cli):
    log = _log(tmp_path)
    res = cli("parse", str(log), "--format", "megatron")
    assert res.exit_code == 0
    assert "megatron" in res.stdout and "1.5" in res.stdout
    out = tmp_path / "x.csv"
    res = cli("parse", str(log), "-o", str(out))
    assert res.exit_code == 0 and pl.read_csv(out).height == 5


def test_cli_errors_are_one_line_exit_2(tmp_path):
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")]))}
    import gzip

    data = gzip.compress(("\n".join(LINE.format(s=i % 60, it=i, cs=8 * i) for i in range(1, 3000)) + "\n").encode())
    (tmp_path / "cut.log.gz").write_bytes(data[: len(data) // 2])  # a truncated download
    from tests.support import run_main

    for k, args in enumerate((["parse", str(tmp_path / "nope.log")],
                              ["parse", str(tmp_path / "cut.log.gz")],
                              ["parse", str(_log(tmp_path)), "--out", str(tmp_path / "x.xlsx")],
                              ["parse", str(_log(tmp_path)), "--format", "bogus"])):
        # the first through a real process, the others through the same entry point in-process
        proc = (subprocess.run([sys.executable, "-m", "vlm_perf.cli", *args], capture_output=True, text=True,
                               cwd=root, env=env) if k == 0 else run_main(*args))
        assert proc.returncode == 2, proc.stderr
        assert proc.stderr.startswith("error: ") and proc.stderr.count("\n") == 1


def test_cli_out_is_the_iteration_view_raw_is_every_record_and_nan_inf_survive(tmp_path, cli):
    import json
    import math

    lines = [LINE.format(s=i, it=i, cs=8 * i) for i in (1, 2, 3)]
    lines.append(LINE.format(s=9, it=3, cs=24).replace("grad norm: 1.000", "grad norm: nan"))  # rank copy
    lines[1] = lines[1].replace("grad norm: 1.000", "grad norm: inf")
    lines[0] = lines[0].replace("grad norm: 1.000", "grad norm: -inf")
    log = tmp_path / "run.log"
    log.write_text("\n".join(lines) + "\n")
    for suffix in (".jsonl", ".csv", ".parquet"):
        out = tmp_path / f"it{suffix}"
        res = cli("parse", str(log), "--out", str(out))
        assert res.exit_code == 0, res.output
        raw_out = tmp_path / f"raw{suffix}"
        assert cli("parse", str(log), "--out", str(raw_out), "--raw").exit_code == 0
        if suffix == ".jsonl":
            rows = [json.loads(x) for x in out.read_text().splitlines()]
            raw_rows = [json.loads(x) for x in raw_out.read_text().splitlines()]
        else:
            read = pl.read_csv if suffix == ".csv" else pl.read_parquet
            rows, raw_rows = read(out).to_dicts(), read(raw_out).to_dicts()
        assert [r["iteration"] for r in rows] == [1, 2, 3]          # one row per iteration
        assert [r["iteration"] for r in raw_rows] == [1, 2, 3, 3]   # every record
        g = [r["grad_norm"] for r in raw_rows]
        assert g[0] == -math.inf and g[1] == math.inf and g[2] == 1.0 and math.isnan(g[3]), (suffix, g)
        assert rows[2]["copies"] == 2
