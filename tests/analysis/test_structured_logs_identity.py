"""Structured logs beside the console log take part in the run's cross-examination (issue 34).

Specification:
* every structured log reader (HF trainer_state.json, a W&B history export, TensorBoard events) gives its
  records the file's identity (the ``file`` column), like a console log: the evidence lists it by name, and no
  record has an unknown file;
* a structured log is its own restart stream: the SAME run's trainer_state.json beside its console log (what
  ``trainer.save_state()`` writes into every output dir) repeats the console's iterations without being a
  restart of it: the report's numbers are exactly those of the console log alone, its log-files check says one
  run of two files, and values rounded as the console prints them (HF: 4 significant digits) agree with the full
  floats;
* ANOTHER run's W&B export (other losses at the same steps) is named as another run: the report refuses it in one
  line naming both files (unless the logs are merged on purpose).
Seeded, bounded fuzz: the same run's structured record, with values perturbed within the console's printed
precision, never changes a number; perturbed beyond any plausible rounding, it is always named.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from tests.support import run_main
from vlm_perf.ingest.logs import parse_logs

ROOT = Path(__file__).resolve().parents[2]
REAL = ROOT / "sample_logs" / "qwen2-vl-tiny-real"
FUZZ = settings(derandomize=True, deadline=None, database=None, max_examples=8,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


def _console_iterations():
    return parse_logs([REAL / "train.log"]).iterations


def _run(tmp_path: Path) -> Path:
    run = tmp_path / "run"
    shutil.copytree(REAL, run)
    return run


def _trainer_state(run: Path, scale=lambda i, loss: loss) -> Path:
    """trainer_state.json as HF's Trainer writes it: one log_history entry per logged step (full floats)."""
    hist = [{"loss": scale(r["iteration"], r["loss"]), "grad_norm": r["grad_norm"], "learning_rate": 0.001,
             "epoch": r["iteration"] / 20, "step": r["iteration"]} for r in _console_iterations().iter_rows(named=True)]
    path = run / "trainer_state.json"
    path.write_text(json.dumps({"global_step": len(hist), "max_steps": len(hist), "log_history": hist}))
    return path


def _wandb_export(run: Path, loss_of) -> Path:
    """A ``run.scan_history()`` dump written as CSV (W&B's ``_step`` / ``_runtime`` and HF's keys)."""
    rows = ["_step,train/global_step,train/loss,_runtime"]
    rows += [f"{n},{r['iteration']},{loss_of(r['iteration'], r['loss'])},{r['iteration'] * 0.2}"
             for n, r in enumerate(_console_iterations().iter_rows(named=True))]
    path = run / "wandb_export.csv"
    path.write_text("\n".join(rows) + "\n")
    return path


def _summary(run: Path, out: Path, *extra) -> dict:
    r = run_main("report", run, "-o", out, *extra)
    assert r.returncode == 0, r.stderr
    return json.loads((out / "summary.json").read_text())


def _numbers(summary: dict) -> dict:
    return {k: summary[k] for k in ("conventions", "windows") if k in summary}


@pytest.fixture(scope="module")
def console_only(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("console")
    return _summary(_run(tmp), tmp / "out")


@pytest.mark.parametrize("writer", [_trainer_state, lambda run: _wandb_export(run, lambda i, loss: loss)],
                         ids=["trainer_state", "wandb"])
def test_every_structured_record_carries_its_file(tmp_path, writer):
    run = _run(tmp_path)
    path = writer(run)
    raw = parse_logs([run / "train.log", path]).raw
    assert raw["file"].null_count() == 0
    assert set(raw["file"].unique()) == {str(run / "train.log"), str(path)}


def test_the_same_runs_trainer_state_changes_no_number(tmp_path, console_only):
    run = _run(tmp_path)
    _trainer_state(run)
    both = _summary(run, tmp_path / "out")
    assert _numbers(both) == _numbers(console_only)
    check = next(c for c in both["checks"] if c["name"] == "log_files")
    assert check["status"] == "ok" and "2 files of one run" in check["summary"], check


@FUZZ
@given(rel=st.floats(-4.9e-4, 4.9e-4))
def test_fuzz_values_within_the_printed_precision_are_the_same_run(tmp_path_factory, console_only, rel):
    tmp = tmp_path_factory.mktemp("s")
    run = _run(tmp)
    _trainer_state(run, lambda i, loss: loss * (1 + rel * ((-1) ** i)))
    assert _numbers(_summary(run, tmp / "out")) == _numbers(console_only)


@FUZZ
@given(shift=st.floats(0.01, 3.0), seed=st.integers(0, 3))
def test_fuzz_another_runs_wandb_export_is_named_as_another_run(tmp_path_factory, shift, seed):
    tmp = tmp_path_factory.mktemp("w")
    run = _run(tmp)
    export = _wandb_export(run, lambda i, loss: round(loss + shift * (1 + (i + seed) % 3), 6))
    r = run_main("report", run, "-o", tmp / "out")
    assert r.returncode == 2 and r.stderr.strip().count("\n") == 0, (r.stdout, r.stderr)
    assert export.name in r.stderr and "train.log" in r.stderr and "two different runs" in r.stderr


def test_a_restart_across_two_files_of_one_structured_format_is_still_a_restart(tmp_path):
    """Near miss: W&B exports of a job and of its restart (from a checkpoint at step 5) step back against each
    other; the replayed steps come from the restart (last write wins), as for console logs."""
    first, second = tmp_path / "wandb_attempt1.csv", tmp_path / "wandb_attempt2.csv"
    first.write_text("_step,train/global_step,train/loss\n" + "".join(f"{i},{i + 1},{4 - i / 10}\n" for i in range(10)))
    second.write_text("_step,train/global_step,train/loss\n" + "".join(f"{i},{i + 6},{3 - i / 10}\n" for i in range(10)))
    parsed = parse_logs([first, second])
    assert parsed.diagnostics.segments == 2
    its = parsed.iterations
    assert its["iteration"].to_list() == list(range(1, 16))
    assert its.filter(its["iteration"] == 6)["file"].item() == str(second)
