"""One discovery rule: `parse DIR`, `report DIR`, `compare` and `metadata DIR` find the same files of a run
folder (W&B history exports, JSON-lines histories, logs/ and tensorboard-style sub-folders, compressed
logs); a config.json in the run folder is the model when nothing else names one."""

from __future__ import annotations

import gzip
import json
import re
import shutil
from pathlib import Path

import pytest

from vlm_perf.ingest.logs import parse_logs
from vlm_perf.pipeline import discover
from vlm_perf.run.discover import discover_run

ROOT = Path(__file__).resolve().parents[2]
SFT = ROOT / "sample_logs" / "qwen3-vl-30b-a3b-sft"
TINY = ROOT / "sample_logs" / "qwen2-vl-tiny-real"
STEP = re.compile(r"iteration\s+(\d+)/\s*\d+ \|.*?elapsed time per iteration \(ms\): ([0-9.]+)")


def _wandb_history(dst: Path) -> None:
    """The sample's iteration lines as a W&B run.history() CSV dump (Megatron keys)."""
    rows = ["_step,iteration-time,batch-size"]
    for line in (SFT / "train.log").read_text().splitlines():
        m = STEP.search(line)
        if m:
            rows.append(f"{m.group(1)},{float(m.group(2)) / 1000},128")
    (dst / "history.csv").write_text("\n".join(rows) + "\n")


LAYOUTS = {
    "top-level log": lambda d: shutil.copy(SFT / "train.log", d / "train.log"),
    "logs/ sub-folder": lambda d: ((d / "logs").mkdir(), shutil.copy(SFT / "train.log", d / "logs" / "train.log")),
    "compressed": lambda d: (d / "train.log.gz").write_bytes(gzip.compress((SFT / "train.log").read_bytes())),
    "plain-text stdout": lambda d: shutil.copy(SFT / "train.log", d / "stdout.txt"),
    "W&B history export": _wandb_history,
}


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_parse_and_report_read_the_same_files(layout, tmp_path, cli):
    run = tmp_path / "run"
    run.mkdir()
    LAYOUTS[layout](run)
    shutil.copy(SFT / "metadata.jsonl.gz", run / "metadata.jsonl.gz")
    (run / "run.yaml").write_text("model: qwen3-vl-30b-a3b\nnum_gpus: 64\ngpu: GB200\nlog_interval: 5\n")
    parsed = parse_logs(run)
    files = discover_run(run)
    assert [str(p) for p in files.logs] == parsed.diagnostics.files
    assert files.metadata == [run / "metadata.jsonl.gz"] and files.manifest == run / "run.yaml"
    r = cli("report", str(run), "-o", str(tmp_path / "out"))
    assert r.exit_code == 0, r.output
    s = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert s["inputs"]["logs"] == parsed.diagnostics.files
    assert s["inputs"]["metadata"] == [str(run / "metadata.jsonl.gz")]
    assert s["logged_windows"] == parsed.iterations.filter(parsed.iterations["elapsed_s"].is_not_null()).height
    m = cli("metadata", str(run))
    assert m.exit_code == 0, m.output
    assert "25600/25600 rows used from 1 file(s)" in m.stderr


def test_a_folder_without_logs_is_the_same_error_everywhere(tmp_path, cli):
    run = tmp_path / "run"
    run.mkdir()
    shutil.copy(SFT / "metadata.jsonl.gz", run / "metadata.jsonl.gz")
    errors = []
    for args in (["parse", str(run)], ["report", str(run), "-o", str(tmp_path / "o")], ["compare", str(run), str(run)]):
        r = cli(*args)
        assert r.exit_code != 0
        errors.append(str(r.exception))
    assert all("no training log found" in e for e in errors), errors


def test_metadata_of_a_run_folder_is_its_metadata(cli, sample_run):
    """``metadata DIR`` of a run folder reads its metadata/ shards (as report does), not every JSON-lines file."""
    run = sample_run("qwen2-vl-tiny-real")
    (run / "trainer_log.jsonl").write_text('{"current_steps": 1, "loss": 2.0}\n')  # a log, never metadata
    r = cli("metadata", str(run))
    assert r.exit_code == 0, r.output
    assert "from 1 file(s)" in r.stderr and "80/80 rows" in r.stderr
    assert discover(run)[1] == [run / "metadata"]


def test_config_json_in_the_run_folder_is_the_model(tmp_path, cli, sample_run):
    """The tiny real run names its config.json in run.yaml; without that key the folder's config.json is
    found (lowest precedence), named as the model's source, and gives the same numbers."""
    run = sample_run("qwen2-vl-tiny-real")
    yaml = (run / "run.yaml").read_text()
    (run / "run.yaml").write_text("\n".join(x for x in yaml.splitlines() if not x.startswith("model:")) + "\n")
    out = {}
    for label, folder in (("named", TINY), ("found", run)):
        r = cli("report", str(folder), "-o", str(tmp_path / label))
        assert r.exit_code == 0, r.output
        out[label] = json.loads((tmp_path / label / "summary.json").read_text())
    assert out["found"]["inputs"]["model_source"] == "checkpoint:config.json"
    assert out["found"]["inputs"]["model"] == str(run / "config.json")
    assert out["named"]["inputs"]["model_source"] == "manifest"
    assert out["found"]["conventions"] == out["named"]["conventions"]
    # a model stated anywhere else wins over the folder's config.json
    r = cli("report", str(run), "-o", str(tmp_path / "preset"), "--model", "qwen2-vl-7b")
    assert r.exit_code == 0, r.output
    assert json.loads((tmp_path / "preset" / "summary.json").read_text())["inputs"]["model_source"] == "cli"
