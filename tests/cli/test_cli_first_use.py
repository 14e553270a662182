"""What a newcomer trips on: --version, plain metavars, units that scale with the run, titles that
name the model, the per-window table, peak memory per rank, timer names without rank labels, and
errors on bad metadata rows that name --skip-bad (the library names no flag)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

import vlm_perf
from tests.support import run_cli, run_main as cli  # in-process entry point; run_cli: a real subprocess
from vlm_perf.analysis.memory import peak_memory
from vlm_perf.analysis.stragglers import plain_timer_names
from vlm_perf.ingest.log_facts import read_file_facts, scan_lines
from vlm_perf.report.units import model_title, rate_unit

ROOT = Path(__file__).resolve().parents[2]
SFT = ROOT / "sample_logs" / "qwen3-vl-30b-a3b-sft"
VIDEO = ROOT / "sample_logs" / "qwen2.5-vl-7b-video"
TINY = ROOT / "sample_logs" / "qwen2-vl-tiny-real"


def test_version():
    r = run_cli("--version")
    assert r.returncode == 0 and r.stdout.strip() == f"vlm-perf {vlm_perf.__version__}"


@pytest.mark.parametrize("command", ["report", "flops", "parse", "metadata", "compare", "explain", "export"])
def test_help_shows_plain_metavars(command):
    r = cli(command, "--help")
    assert r.returncode == 0, r.stderr
    # typer's own rendering: <path>, <list[Path]>, <int>, <bool>, {RUN}
    assert not re.search(r"<(?:path|int|float|str|bool|list\[[A-Za-z]+\])>", r.stdout), r.stdout
    assert "{" not in r.stdout.split("\n", 3)[1]  # the usage line


# ---- units --------------------------------------------------------------------------------------
@pytest.mark.parametrize("tflops,unit,text", [(553.7, "TFLOP/s", "553.7 TFLOP/s/GPU"),
                                              (1.2, "TFLOP/s", "1.2 TFLOP/s/GPU"),
                                              (0.0035, "GFLOP/s", "3.5 GFLOP/s/GPU"),
                                              (2.5e-7, "kFLOP/s", "250.0 kFLOP/s/GPU"),
                                              (1500.0, "TFLOP/s", "1,500.0 TFLOP/s/GPU"),
                                              (None, "TFLOP/s", "—")])
def test_one_unit_per_run(tflops, unit, text):
    u = rate_unit([tflops, None, float("nan")])
    assert u.name == unit and u.text(tflops) == text


def test_titles_name_the_model():
    assert model_title("qwen2.5-vl-7b", "preset:qwen2.5-vl-7b", "qwen2_5_vl") == "qwen2.5-vl-7b"
    assert model_title("config", "runs/tiny/config.json", "qwen2_vl") == "qwen2_vl (tiny/config.json)"


@pytest.fixture(scope="module")
def tiny_report(sample_report):
    out, _, r = sample_report(TINY.name, "--causal", "full")  # shared with tests/cli/test_real_run.py
    return out, r


def test_a_tiny_cpu_run_reads_in_gflops_everywhere(tiny_report):
    out, r = tiny_report
    s = json.loads((out / "summary.json").read_text())
    exact = s["conventions"]["exact"]["tflops_per_gpu_mean"]
    assert exact < 1e-2  # TFLOP/s in summary.json (its unit is its key), a few GFLOP/s
    gflops = f"{exact * 1e3:,.1f}"
    md = (out / "report.md").read_text()
    assert f"**{gflops}** GFLOP/s/GPU" in md and "0.0 TFLOP/s" not in md
    assert re.search(rf"exact\s+{re.escape(gflops)} GFLOP/s/GPU", r.stdout), r.stdout
    assert "GFLOP/s/GPU" in (out / "report.html").read_text()
    assert md.splitlines()[0].endswith("qwen2\\_vl (qwen2-vl-tiny-real/config.json)")  # the title names the model


def test_windows_table_matches_the_headline(tiny_report):
    out, _ = tiny_report
    s = json.loads((out / "summary.json").read_text())
    table = pl.read_parquet(out / "windows.parquet")
    assert table.equals(pl.read_csv(out / "windows.csv", schema=table.schema))
    assert table.height == s["logged_windows"]
    used = table.filter(pl.col("reliable"))
    assert used.height == s["windows_used"]
    for conv, entry in s["conventions"].items():
        # a time-weighted mean over the windows the means use = sum(rate x seconds) / sum(seconds)
        mean = (used[f"{conv}_tflops_per_gpu"] * used["window_seconds"]).sum() / used["window_seconds"].sum()
        assert mean == pytest.approx(entry["tflops_per_gpu_mean"], rel=1e-12)
    assert {"step_time_s", "vision_share", "exact_mfu"} <= set(table.columns)


def test_a_figure_with_nothing_to_show_is_skipped_with_the_reason(tiny_report):
    out, _ = tiny_report
    assert not (out / "balance.png").exists()
    md = (out / "report.md").read_text()
    assert "figure not drawn: 1 DP rank in the metadata, nothing to balance" in md
    assert "not drawn (GPU peak unknown" in md


# ---- memory, timers -----------------------------------------------------------------------------
def test_megatron_memory_reports_both_shapes():
    mb = ("[Rank 3] (after 10 iterations) memory (MB) | allocated: 1024.0 | max allocated: 2048.0 | reserved: "
          "3072.0 | max reserved: 4096.0")
    gb = ("p4/0 [Rank 9] (after 2 iterations) memory (GB) | mem-allocated-gigabytes: 63.66 | "
          "mem-max-allocated-gigabytes: 153.4 | mem-reserved-gigabytes: 182.2 | mem-max-reserved-gigabytes: 182.2 | "
          "mem-alloc-retires: 0")
    later = mb.replace("after 10", "after 20").replace("max allocated: 2048.0", "max allocated: 1536.0")
    facts = scan_lines("train.log", [(1, mb), (2, gb), (3, later)])
    m = peak_memory([facts])
    by_rank = {r["rank"]: r for r in m["ranks"]}
    assert by_rank[3]["max_allocated_bytes"] == 2048 * 1024 ** 2  # MiB (Megatron-LM divides by 1024**2)
    assert by_rank[3]["max_reserved_bytes"] == 4096 * 1024 ** 2 and by_rank[3]["reports"] == 2
    assert by_rank[9]["max_allocated_bytes"] == pytest.approx(153.4e9)  # decimal GB (Megatron-Bridge)
    assert m["peak_rank"] == 9 and m["units_in_log"] == ["GB", "MB"]


def test_sample_log_memory_lines_reach_the_report(tmp_path):
    text = (VIDEO / "train.log").read_text().splitlines()
    expected: dict[int, float] = {}
    for line in text:
        m = re.search(r"\[Rank (\d+)\].*mem-max-allocated-gigabytes: ([\d.]+)", line)
        if m:
            expected[int(m.group(1))] = max(expected.get(int(m.group(1)), 0.0), float(m.group(2)) * 1e9)
    assert expected
    facts = read_file_facts(VIDEO / "train.log")
    assert {r["rank"]: r["max_allocated_bytes"] for r in peak_memory([facts])["ranks"]} == pytest.approx(expected)
    out = tmp_path / "out"
    assert cli("report", VIDEO, "-o", out).returncode == 0
    s = json.loads((out / "summary.json").read_text())
    assert s["memory"]["ranks_reported"] == len(expected)
    assert "Peak GPU memory per rank" in (out / "report.md").read_text()
    names = [t["timer"] for t in s["stragglers"]["timers"]["timers"]]
    assert names and not any("[" in n or ":" in n for n in names)  # the log's timer lines carry [default7]:


@pytest.mark.parametrize("label", ["[default7]:    ", "[rank3]: ", " 12: ", ""])
def test_timer_names_lose_rank_labels(label):
    frame = pl.DataFrame({"timer": [f"{label}forward-backward", "optimizer"]})
    assert plain_timer_names(frame)["timer"].to_list() == ["forward-backward", "optimizer"]


# ---- bad metadata rows --------------------------------------------------------------------------
def test_bad_metadata_rows_mention_skip_bad_at_the_cli_only(tmp_path):
    run = tmp_path / "run"
    shutil.copytree(TINY, run)
    meta = run / "metadata" / "metadata-rank00000.jsonl"
    lines = meta.read_text().splitlines()
    lines[3] = "{not json"
    meta.write_text("\n".join(lines) + "\n")
    r = cli("report", run, "-o", tmp_path / "out", "--causal", "full")
    assert r.returncode == 2 and "metadata-rank00000.jsonl:4" in r.stderr and "--skip-bad" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    from vlm_perf.errors import SchemaError
    from vlm_perf.pipeline import load_run

    with pytest.raises(SchemaError) as err:
        load_run(run, causal="full")
    assert "skip bad rows" in str(err.value) and "--" not in str(err.value)
    skipped = cli("report", run, "-o", tmp_path / "out2", "--causal", "full", "--skip-bad")
    assert skipped.returncode == 0, skipped.stderr


def test_two_runs_error_at_the_cli_offers_the_choice(tmp_path):
    run = tmp_path / "run"
    shutil.copytree(SFT, run)
    shutil.copy(VIDEO / "train.log", run / "other.log")
    r = cli("report", run, "-o", tmp_path / "out")
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1
    assert "other.log and train.log look like two different runs" in r.stderr
    assert "--log FILE" in r.stderr and "--merge-logs" in r.stderr
    chosen = cli("report", run, "-o", tmp_path / "out", "--log", run / "train.log")
    assert chosen.returncode == 0, chosen.stderr


def test_compare_pages_use_the_same_unit(tmp_path):
    out = tmp_path / "cmp"
    # the terminal table has the 8 columns of compare.md: wide enough that its headers are not wrapped
    r = subprocess.run([sys.executable, "-m", "vlm_perf.cli", "compare", str(TINY), str(TINY), "-o", str(out)],
                       capture_output=True, text=True, timeout=600, env={**os.environ, "COLUMNS": "200"})
    assert r.returncode == 0, r.stderr
    md = (out / "compare.md").read_text()
    assert "| convention | A GFLOP/s/GPU | B GFLOP/s/GPU |" in md and "GFLOP/s/GPU" in (out / "compare.html").read_text()
    assert "A GFLOP/s/GPU" in r.stdout


def test_memory_from_structured_records(tmp_path):
    """torchtitan prints the reserved peak (GiB) on its step lines: it reaches the memory block too."""
    from vlm_perf.ingest.logs import parse_logs

    log = tmp_path / "train.log"
    log.write_text("\n".join(f"step: {i}  loss:  2.0000  grad_norm:  1.0000  memory: {40 + i / 10:.2f}GiB(50.00%)  "
                             "tps: 12,345  tflops: 567.89  mfu: 57.42%" for i in range(1, 6)) + "\n")
    m = peak_memory([], parse_logs([log]).raw)
    assert m["ranks_reported"] == 1 and m["max_reserved_bytes"] == pytest.approx(40.5 * 1024 ** 3)


def test_without_a_gpu_count_the_headline_never_says_all_passed(tmp_path):
    run = tmp_path / "tiny"
    shutil.copytree(TINY, run)
    (run / "run.yaml").write_text(re.sub(r"num_gpus: 1\n", "", (run / "run.yaml").read_text()))
    out = tmp_path / "out"
    r = cli("report", run, "-o", out, "--causal", "full")
    assert r.returncode == 0, r.stderr
    head = "\n".join((out / "report.md").read_text().splitlines()[:30])
    assert "all passed" not in head and "No headline number" in head and "headline numbers MISSING" in head
    s = json.loads((out / "summary.json").read_text())
    assert s["checks_status"] == "warn" and s["conventions"]["exact"]["tflops_per_gpu_mean"] is None
    assert "headline_numbers" in r.stdout  # the terminal's count of warnings names it
