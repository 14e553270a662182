"""Every backend's export read back with the backend's own reader equals the report's numbers.

The reference is what ``vlm-perf report`` wrote for the same run and options (the session's `sample_report`):
each window row of its ``windows.parquet`` and the RL steps and means of its ``summary.json``, mapped to metric
names written out here (not through `vlm_perf.export.scheme`). The exports are made by the real entry point
(``vlm_perf.cli.main``, in this process; the report is a real process) and read back with: tbparse (TensorBoard), wandb's own protobuf records of the
offline run file (`wandb_file`) and ``wandb sync --dry-run``, the MLflow client, polars (Parquet, CSV).
The sample is the REAL tiny GRPO run (windows, two conventions, RL phase seconds) with an H100's peak (MFU).
"""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

from tests.export import wandb_file
from tests.support import SAMPLE_LOGS, run_cli, run_main

SAMPLE = "qwen2-vl-tiny-grpo-real"
FLAGS = ("--gpu", "H100-SXM")


@pytest.fixture(scope="module")
def report(sample_report):
    out, summary, _ = sample_report(SAMPLE, *FLAGS)
    return out, summary


def expected_series(out: Path, summary: dict) -> dict[str, dict[int, float]]:
    """metric -> {iteration: value} from the report's own files."""
    w = pl.read_parquet(out / "windows.parquet")
    assert w["iteration"].n_unique() == w.height  # no restart in this run: one window per iteration
    series: dict[str, dict[int, float]] = {}

    def put(name: str, step: int, value) -> None:
        if value is not None and math.isfinite(value):
            series.setdefault(name, {})[int(step)] = float(value)

    for row in w.iter_rows(named=True):
        it = row["iteration"]
        for conv in summary["conventions"]:
            put(f"vlm_perf/tflops_per_gpu/{conv}", it, row[f"{conv}_tflops_per_gpu"])
            put(f"vlm_perf/mfu/{conv}", it, row[f"{conv}_mfu"])
        put("vlm_perf/vision_share", it, row["vision_share"])
        put("vlm_perf/step_time_s", it, row["step_time_s"])
        put("vlm_perf/logged/tflops_per_gpu", it, row["tflops_per_gpu_logged"])
        put("vlm_perf/window/in_means", it, 1.0 if row["reliable"] else 0.0)
    for entry in summary["rl"]["per_iteration"]:
        put("vlm_perf/rl/step_s", entry["iteration"], entry["step_s"])
        for phase, seconds in entry["seconds"].items():
            put(f"vlm_perf/rl/phase_s/{phase}", entry["iteration"], seconds)
    return series


def expected_run_values(summary: dict) -> dict[str, float]:
    out = {"vlm_perf/mean/vision_share": summary["vision_share_mean"],
           "vlm_perf/mean/step_time_s": summary["step"]["seconds_per_iteration"]}
    for conv, numbers in summary["conventions"].items():
        out[f"vlm_perf/mean/tflops_per_gpu/{conv}"] = numbers["tflops_per_gpu_mean"]
        out[f"vlm_perf/mean/mfu/{conv}"] = numbers["mfu_mean"]
    return out


def assert_same(got: dict[str, dict[int, float]], want: dict[str, dict[int, float]], rel: float) -> None:
    assert sorted(got) == sorted(want)
    for name, points in want.items():
        assert sorted(got[name]) == sorted(points), name
        for step, value in points.items():
            assert got[name][step] == pytest.approx(value, rel=rel, abs=0.0), (name, step)


def test_the_reference_has_every_kind_of_series(report):
    """The chosen run exercises every series: two conventions with MFU, vision share, RL phases, a window the
    means leave out."""
    out, summary = report
    want = expected_series(out, summary)
    assert {"vlm_perf/mfu/exact", "vlm_perf/mfu/megatron-lm", "vlm_perf/rl/phase_s/generation",
            "vlm_perf/vision_share", "vlm_perf/step_time_s"} <= set(want)
    assert 0.0 in want["vlm_perf/window/in_means"].values() and summary["peak_tflops"] == 67.0


def export(tmp_path_factory, backend: str, *extra: str) -> tuple[Path, dict]:
    out = tmp_path_factory.mktemp(f"export-{backend}") / "out"
    done = run_main("export", SAMPLE_LOGS / SAMPLE, "--to", backend, "-o", out, *FLAGS, *extra)
    assert done.returncode == 0, done.stderr
    assert f"export:  {out}/ ({backend}:" in done.stdout
    return out, json.loads((out / "export.json").read_text())


def check_facts(facts: dict, summary: dict) -> None:
    from vlm_perf.flops import get_convention

    assert facts["model"] == summary["model"] and facts["gpu"] == "H100-SXM"
    assert float(facts["gpus"]) == summary["world_size"] and float(facts["peak_tflops"]) == summary["peak_tflops"]
    assert facts["regime"] == summary["regime"]["description"]
    assert facts["rl_algorithm"] == summary["rl"]["algorithm"]
    assert facts["pin/megatron-lm"] == get_convention("megatron-lm").pin.describe()


def test_tensorboard_read_back_with_tbparse(report, tmp_path_factory):
    from tbparse import SummaryReader

    out, summary = report
    folder, manifest = export(tmp_path_factory, "tensorboard")
    reader = SummaryReader(str(folder))
    scalars = reader.scalars
    means = scalars[scalars["tag"].str.startswith("vlm_perf/mean/")]
    rest = scalars[~scalars["tag"].str.startswith("vlm_perf/mean/")]
    got: dict[str, dict[int, float]] = {}
    for tag, step, value in rest[["tag", "step", "value"]].itertuples(index=False):
        got.setdefault(tag, {})[int(step)] = float(value)
    assert_same(got, expected_series(out, summary), rel=1e-6)  # TensorBoard scalars are 32-bit floats
    last = max(max(points) for points in got.values())
    assert set(means["step"]) == {last}
    assert {t: v for t, v in zip(means["tag"], means["value"])} == pytest.approx(expected_run_values(summary),
                                                                                 rel=1e-6)
    hparams = dict(zip(reader.hparams["tag"], reader.hparams["value"]))
    check_facts(hparams, summary)
    assert manifest["written"]["event_files"] == [p.name for p in folder.glob("events.out.tfevents.*")]


def test_wandb_offline_run_read_back_from_its_run_file(report, tmp_path_factory):
    out, summary = report
    folder, manifest = export(tmp_path_factory, "wandb", "--project", "vlm-perf-tests", "--name", "grpo-h100")
    run_dir = Path(manifest["written"]["run_dir"])
    assert run_dir.parent == folder / "wandb" and run_dir.name.startswith("offline-run-")
    files = list(run_dir.glob("run-*.wandb"))
    assert len(files) == 1
    run = wandb_file.read_run(files[0])
    assert run["run"]["project"] == "vlm-perf-tests" and run["run"]["display_name"] == "grpo-h100"
    assert run["run"]["run_id"] == manifest["written"]["run_id"]
    assert_same(run["history"], expected_series(out, summary), rel=1e-12)
    summary_values = {k: v for k, v in run["summary"].items() if k.startswith("vlm_perf/mean/")}
    assert summary_values == pytest.approx(expected_run_values(summary), rel=1e-12)
    check_facts(run["config"], summary)
    assert run["kinds"][-1] == "exit"  # the whole run is in the file when the export returns
    # wandb's own sync tool finds the run to upload (dry run: nothing leaves the machine)
    wandb = shutil.which("wandb") or str(Path(sys.executable).with_name("wandb"))
    done = subprocess.run([wandb, "sync", "--dry-run", str(run_dir)], capture_output=True, text=True, timeout=120,
                          env={"PATH": str(Path(sys.executable).parent), "HOME": str(folder), "WANDB_MODE": "offline"})
    assert done.returncode == 0 and files[0].name in done.stdout + done.stderr, done.stdout + done.stderr


def test_mlflow_file_store_read_back_with_the_client(report, tmp_path_factory, monkeypatch):
    from mlflow.tracking import MlflowClient

    out, summary = report
    folder, manifest = export(tmp_path_factory, "mlflow")
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    written = manifest["written"]
    assert written["tracking_uri"] == (folder / "mlruns").as_uri()
    client = MlflowClient(tracking_uri=written["tracking_uri"])
    run = client.get_run(written["run_id"])
    assert run.info.status == "FINISHED" and run.info.run_name == SAMPLE
    assert client.get_experiment(written["experiment_id"]).name == "vlm-perf"
    # the store was written aside and renamed: its artifact locations name the final folder
    assert run.info.artifact_uri.startswith((folder / "mlruns").as_uri())
    want = expected_series(out, summary)
    got = {name: {m.step: m.value for m in client.get_metric_history(run.info.run_id, name)} for name in want}
    assert_same(got, want, rel=1e-12)
    last = max(max(points) for points in want.values())
    means = {name: client.get_metric_history(run.info.run_id, name) for name in expected_run_values(summary)}
    assert {name: h[0].value for name, h in means.items()} == pytest.approx(expected_run_values(summary), rel=1e-12)
    assert all(len(h) == 1 and h[0].step == last for h in means.values())
    assert set(run.data.metrics) == set(want) | set(means) | {"vlm_perf/mean/logged/tflops_per_gpu"} & set(
        run.data.metrics)
    check_facts(run.data.params, summary)


def test_mlflow_to_a_given_tracking_uri(report, tmp_path, monkeypatch):
    from mlflow.tracking import MlflowClient

    out, summary = report
    store = tmp_path / "team-store"
    folder = tmp_path / "out"
    done = run_main("export", SAMPLE_LOGS / SAMPLE, "--to", "mlflow", "-o", folder, "--tracking-uri", store.as_uri(),
                   "--project", "sweeps", *FLAGS)
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in folder.iterdir()) == [".vlm-perf-report", "export.json"]
    manifest = json.loads((folder / "export.json").read_text())
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    client = MlflowClient(tracking_uri=store.as_uri())
    experiment = client.get_experiment_by_name("sweeps")
    runs = client.search_runs([experiment.experiment_id])
    assert [r.info.run_id for r in runs] == [manifest["written"]["run_id"]]
    history = client.get_metric_history(runs[0].info.run_id, "vlm_perf/mfu/exact")
    assert {m.step: m.value for m in history} == pytest.approx(expected_series(out, summary)["vlm_perf/mfu/exact"],
                                                               rel=1e-12)


@pytest.mark.parametrize("backend", ["parquet", "csv"])
def test_tables_read_back(report, tmp_path_factory, backend):
    out, summary = report
    folder, manifest = export(tmp_path_factory, backend)
    path = folder / f"metrics.{backend}"
    table = pl.read_parquet(path) if backend == "parquet" else pl.read_csv(path)
    assert table.columns == ["metric", "step", "value"]
    got: dict[str, dict[int, float]] = {}
    for metric, step, value in table.iter_rows():
        assert step not in got.get(metric, {})
        got.setdefault(metric, {})[step] = value
    assert_same(got, expected_series(out, summary), rel=1e-15)
    assert manifest["run_values"] == pytest.approx(expected_run_values(summary), rel=1e-15)
    check_facts(manifest["facts"], summary)


def test_the_python_api_gives_the_cli_numbers(report, tmp_path):
    from vlm_perf.export import export_run

    out, summary = report
    result = export_run(SAMPLE_LOGS / SAMPLE, "parquet", tmp_path / "api", gpu="H100-SXM")
    got: dict[str, dict[int, float]] = {}
    for metric in result.data.metrics:
        got[metric] = dict(result.data.series(metric))
    assert_same(got, expected_series(out, summary), rel=1e-15)
    assert pl.read_parquet(tmp_path / "api" / "metrics.parquet").equals(result.data.points)


def test_export_replaces_an_export_but_never_a_report(report, tmp_path):
    from vlm_perf.export import export_run

    first = export_run(SAMPLE_LOGS / SAMPLE, "csv", tmp_path / "x", gpu="H100-SXM")
    export_run(SAMPLE_LOGS / SAMPLE, "tensorboard", tmp_path / "x", gpu="H100-SXM")  # another backend, same folder
    names = {p.name for p in (tmp_path / "x").iterdir()}
    assert "metrics.csv" not in names and any(n.startswith("events.out.tfevents.") for n in names)
    assert first.out == tmp_path / "x"
    out, _ = report
    mine = tmp_path / "report"
    shutil.copytree(out, mine)
    before = sorted(p.name for p in mine.iterdir())
    done = run_cli("export", SAMPLE_LOGS / SAMPLE, "--to", "csv", "-o", mine, *FLAGS)
    assert done.returncode == 2 and "not a vlm-perf export -o folder" in done.stderr
    assert sorted(p.name for p in mine.iterdir()) == before


def test_a_restarted_run_exports_the_later_segment_once_per_iteration(tmp_path):
    """The SFT sample's last 5 logged iterations printed again after its end (a restart from the checkpoint
    before them, a slower second pass): one point per iteration, the later segment's window (the report's window
    table already keeps the log's last write per iteration)."""
    from tests.support import SFT_SAMPLE

    run = tmp_path / "run"
    shutil.copytree(SAMPLE_LOGS / SFT_SAMPLE, run)
    log = run / "train.log"
    lines = log.read_text().splitlines(keepends=True)
    logged = [line for line in lines if " iteration " in line and "elapsed time per iteration (ms):" in line]
    again = [line.replace("elapsed time per iteration (ms): ", "elapsed time per iteration (ms): 2") for line in
             logged[-5:]]  # "328.3" -> "2328.3": a slower second pass
    log.write_text("".join(lines + again))
    report_out = tmp_path / "report"
    done = run_main("report", run, "-o", report_out)
    assert done.returncode == 0, done.stderr
    w = pl.read_parquet(report_out / "windows.parquet")
    later = w.filter(pl.col("segment") == w["segment"].max())
    assert later["iteration"].to_list() == [int(line.split("iteration")[1].split("/")[0]) for line in again]
    done = run_main("export", run, "--to", "parquet", "-o", tmp_path / "x")
    assert done.returncode == 0, done.stderr
    table = pl.read_parquet(tmp_path / "x" / "metrics.parquet")
    step_time = table.filter(pl.col("metric") == "vlm_perf/step_time_s")
    assert step_time["step"].n_unique() == step_time.height == w["iteration"].n_unique()
    got = dict(zip(step_time["step"], step_time["value"]))
    assert {it: got[it] for it in later["iteration"]} == dict(zip(later["iteration"], later["step_time_s"]))
    assert all(got[it] > 2 for it in later["iteration"])  # the slower pass, not the first one


def test_a_report_folder_exports_as_written_with_the_runs_numbers(report, tmp_path):
    """The report folder of the same run and options gives the same points, run values and facts as the run."""
    from vlm_perf.export import export_run

    out, summary = report
    from_report = export_run(out, "parquet", tmp_path / "a")
    from_run = export_run(SAMPLE_LOGS / SAMPLE, "parquet", tmp_path / "b", gpu="H100-SXM")
    assert from_report.data.points.equals(from_run.data.points)
    assert from_report.data.run_values == from_run.data.run_values and from_report.data.facts == from_run.data.facts
    assert from_report.data.name == SAMPLE  # the run's name, not the report folder's
    done = run_main("export", out, "--to", "csv", "-o", tmp_path / "c", "--peak-tflops", "989")
    assert done.returncode == 2 and not (tmp_path / "c").exists()
    assert "a report folder is exported as written; the run options (peak_tflops)" in done.stderr


def test_every_wandb_run_file_is_complete_when_the_export_returns(tmp_path):
    """Back-to-back exports in one process: wandb's finish() alone can return before the run file is written out
    (seen: 4 of 6 files held only their 7-byte header); each export's file must hold the whole run at once."""
    from vlm_perf.export import export_loaded
    from vlm_perf.pipeline import load_run

    loaded = load_run(SAMPLE_LOGS / SAMPLE, gpu="H100-SXM")
    for i in range(3):
        result = export_loaded(loaded, "wandb", tmp_path / f"x{i}")
        (file,) = Path(result.written["run_dir"]).glob("run-*.wandb")
        run = wandb_file.read_run(file)
        assert run["kinds"][-1] == "exit" and len(run["history"]) == len(result.data.metrics), i


def test_a_tracking_uri_mlflow_refuses_is_one_line(tmp_path):
    done = run_main("export", SAMPLE_LOGS / SAMPLE, "--to", "mlflow", "-o", tmp_path / "x", "--tracking-uri",
                    "nosuch://host/store")
    assert done.returncode == 2 and not (tmp_path / "x").exists()
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: MLflow (nosuch://host/store): "), done.stderr
