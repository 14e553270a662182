"""The report folder is written atomically: complete or absent, never a mix of two runs, never through a symlink."""

import json
import os
import threading
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from vlm_perf.analysis import analyze_run
from vlm_perf.arch import load_model
from vlm_perf.errors import VlmPerfError
from vlm_perf.report import ReportContext, write_report
from vlm_perf.report import document
from vlm_perf.report.output import MARKER, atomic_report_dir


def _run(seconds: float = 10.0, world: int = 64):
    its = np.arange(1, 41)
    stats = pl.DataFrame({"iteration": its, "lm_tokens": 64 * 4096, "lm_tokens_sq": 64 * 4096**2, "lm_sequences": 64,
                          "lm_samples": 64, "lm_padded_tokens": 64 * 4096, "vision_patches": 4096,
                          "vision_patches_sq_frame": 4096 * 1024, "vision_merged_tokens": 1024,
                          "vision_window_sq": 4096 * 1024})
    log = pl.DataFrame({"segment": 0, "iteration": np.arange(10, 41, 10), "elapsed_s": seconds})
    return analyze_run(log, load_model("qwen2.5-vl-7b"), stats, world_size=world, peak_tflops=989.0, log_interval=10)


def _leftovers(parent):
    return [p.name for p in parent.iterdir() if ".tmp-" in p.name or ".old-" in p.name]


def test_rewrite_replaces_the_whole_folder(tmp_path):
    out = tmp_path / "out"
    write_report(_run(), out, ReportContext(run="first"))
    (out / "stale.png").write_bytes(b"not from this run")
    write_report(_run(), out, ReportContext(run="second"))
    assert not (out / "stale.png").exists() and (out / MARKER).exists()
    assert json.loads((out / "summary.json").read_text())["run"] == "second"
    assert _leftovers(tmp_path) == []


def test_failure_leaves_the_previous_report_intact(tmp_path, monkeypatch):
    out = tmp_path / "out"
    write_report(_run(), out, ReportContext(run="good"))
    before = {p.name: p.read_bytes() for p in out.iterdir()}

    def boom(*args, **kwargs):
        raise RuntimeError("disk full while rendering")

    monkeypatch.setattr(document, "render_html", boom)
    with pytest.raises(RuntimeError):
        write_report(_run(), out, ReportContext(run="bad"))
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    assert _leftovers(tmp_path) == []


def test_foreign_folder_and_symlink_are_refused(tmp_path):
    foreign = tmp_path / "home"
    foreign.mkdir()
    (foreign / "thesis.tex").write_text("precious")
    with pytest.raises(VlmPerfError, match="not a vlm-perf report"):
        write_report(_run(), foreign, ReportContext(run="x"))
    assert (foreign / "thesis.tex").read_text() == "precious" and len(list(foreign.iterdir())) == 1
    target = tmp_path / "elsewhere"
    target.mkdir()
    link = tmp_path / "link"
    link.symlink_to(target)
    with pytest.raises(VlmPerfError, match="symlink"):
        write_report(_run(), link, ReportContext(run="x"))
    assert list(target.iterdir()) == [] and link.is_symlink()


def test_symlink_inside_an_old_report_is_not_written_through(tmp_path):
    out = tmp_path / "out"
    write_report(_run(), out, ReportContext(run="first"))
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    (out / "summary.json").unlink()
    (out / "summary.json").symlink_to(victim)
    write_report(_run(), out, ReportContext(run="second"))
    assert victim.read_text() == "keep me"
    assert not (out / "summary.json").is_symlink()


def test_concurrent_writers_never_mix(tmp_path):
    """Two writers racing on one folder (threads, no matplotlib): the survivor is one writer's whole set."""
    out = tmp_path / "out"
    errors = []

    def write(name):
        try:
            for i in range(20):
                with atomic_report_dir(out) as tmp:
                    for part in ("summary.json", "report.md", "report.html"):
                        (tmp / part).write_text(f"{name}-{i}")
        except Exception as exc:  # noqa: BLE001 - collected and asserted below
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(name,)) for name in ("a", "b")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors
    contents = {(out / part).read_text() for part in ("summary.json", "report.md", "report.html")}
    assert len(contents) == 1 and contents.pop().endswith("-19")
    assert _leftovers(tmp_path) == []


def test_atomic_dir_cleans_up_on_error(tmp_path):
    with pytest.raises(KeyError):
        with atomic_report_dir(tmp_path / "r") as tmp:
            (tmp / "half.json").write_text("{")
            raise KeyError("interrupted")
    assert not (tmp_path / "r").exists() and os.listdir(tmp_path) == []


def test_current_directory_is_refused(tmp_path, monkeypatch):
    empty = tmp_path / "empty"
    empty.mkdir()
    monkeypatch.chdir(empty)
    for out in (Path("."), Path(".."), empty):
        with pytest.raises(VlmPerfError, match="current directory"):
            with atomic_report_dir(out):
                pass
    with atomic_report_dir(Path("sub")) as tmp:  # a relative subfolder is fine
        (tmp / "summary.json").write_text("{}")
    assert (empty / "sub" / "summary.json").exists() and _leftovers(empty) == []
