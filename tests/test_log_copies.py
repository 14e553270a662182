"""Copies, partial copies and restart splits of one run's log are recognised by their content, not by file names
(issue 34, silent numbers): a copy (plain, gzipped, CRLF, under logs/) is read once, not as a restart that replayed
everything; a restart split into two files is read in the order its content says, whatever the names sort as."""

from __future__ import annotations

import gzip
import shutil
from pathlib import Path

import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from vlm_perf.analysis.evidence import MixedRunsError
from vlm_perf.ingest.logs import parse_logs
from vlm_perf.pipeline import load_run

from tests.support import SAMPLE_LOGS, SFT_SAMPLE, megatron_line, run_main

SFT = SAMPLE_LOGS / SFT_SAMPLE
LINES = (SFT / "train.log").read_text().splitlines(keepends=True)
#: the sample's log: attempt 1 logs iterations 5..135, the restart (banner at line 241) replays 105..200
CUT = 235


def _check(loaded, name):
    return next(c for c in loaded.analysis.checks if c.name == name)


def _numbers(loaded):
    it = loaded.iterations.select("iteration", "elapsed_s", "loss").sort("iteration")
    health = loaded.analysis.health if hasattr(loaded.analysis, "health") else None
    return it, loaded.analysis.convention_summary()["exact"]["tflops_per_gpu_mean"], health


@pytest.fixture(scope="module")
def single():
    return _numbers(load_run(SFT))


def _folder(tmp_path: Path, files: dict[str, bytes]) -> Path:
    run = tmp_path / "run"
    shutil.copytree(SFT, run)
    (run / "train.log").unlink()
    for name, data in files.items():
        (run / name).parent.mkdir(parents=True, exist_ok=True)
        (run / name).write_bytes(data)
    return run


TEXT = "".join(LINES).encode()
CRLF = TEXT.replace(b"\n", b"\r\n")


@pytest.mark.parametrize("extra", [
    {"train_copy.log": TEXT},                                   # the same log twice
    {"logs/train.log.gz": gzip.compress(TEXT)},                 # gzipped, in logs/
    {"a_crlf.log": CRLF},                                       # CRLF line ends, name sorting first
    {"logs/node1.log": TEXT, "backup.log": TEXT},               # two copies
    {"head.log": "".join(LINES[:200]).encode()},                # a partial copy: attempt 1 only
    {"tail.log": "".join(LINES[300:]).encode()},                # a partial copy of the restart's part
    {"mid.log": "".join(LINES[CUT - 20:CUT + 60]).encode()},    # a partial copy across the restart
])
def test_a_copy_of_the_log_changes_no_number(tmp_path, single, extra):
    run = _folder(tmp_path, {"train.log": TEXT, **extra})
    loaded = load_run(run)
    its, tflops, _ = _numbers(loaded)
    assert its.equals(single[0]) and tflops == pytest.approx(single[1], rel=1e-12)
    assert loaded.analysis.diagnostics["segments"] == 2 if hasattr(loaded.analysis, "diagnostics") else True
    line = _check(loaded, "log_files")
    assert line.status == "ok" and f"{len(extra)} read once as copies" in line.summary, line.summary
    assert "a copy of" in line.details["copies"][0]


def test_the_copy_is_read_once_in_the_report_with_strict(tmp_path):
    run = _folder(tmp_path, {"train.log": TEXT, "logs/train.log.gz": gzip.compress(TEXT), "x_crlf.log": CRLF})
    done = run_main("report", run, "--strict", "-o", tmp_path / "out")
    assert done.returncode == 0, done.stderr[-2000:]
    text = (tmp_path / "out" / "report.md").read_text()
    assert "(35 iterations replayed)" in text and "1 restart banner(s); 2 segment(s)" in text
    assert "2 read once as copies" in text


@pytest.mark.parametrize("first,second", [("train.log", "train-attempt2.log"), ("z_attempt1.log", "a_attempt2.log"),
                                          ("train.log", "train.0.log")])
def test_a_restart_split_into_two_files_is_read_in_content_order(tmp_path, single, first, second):
    run = _folder(tmp_path, {first: "".join(LINES[:CUT]).encode(), second: "".join(LINES[CUT:]).encode()})
    loaded = load_run(run)
    its, tflops, _ = _numbers(loaded)
    assert its.equals(single[0]) and tflops == pytest.approx(single[1], rel=1e-12)
    seg = loaded.raw.filter(pl.col("iteration").is_not_null()).group_by("file").agg(pl.col("segment").unique())
    by_file = {Path(f).name: sorted(s) for f, s in seg.iter_rows()}
    assert by_file == {first: [0], second: [1]}
    assert "copies" not in _check(loaded, "log_files").summary


# ---- files that are not copies stay -----------------------------------------------------------------
def _lines(its, loss=2.5, ts="2024-05-01 12:00:00", prefix=""):
    return "".join(megatron_line(i, loss=loss + 1e-3 * i, ts=ts, prefix=prefix) + "\n" for i in its)


def test_per_rank_files_with_their_own_labels_are_not_copies(tmp_path):
    a = tmp_path / "rank0.log"
    b = tmp_path / "rank1.log"
    a.write_text(_lines(range(1, 21), prefix="[default0]:"))
    b.write_text(_lines(range(1, 21), prefix="[default1]:"))
    parsed = parse_logs([a, b])
    assert set(parsed.raw["file"].unique()) == {str(a), str(b)}
    assert not [n for n in parsed.diagnostics.notes if "a copy of" in n]


def test_another_run_is_still_refused(tmp_path):
    run = _folder(tmp_path, {"train.log": TEXT, "other.log": (SAMPLE_LOGS / "qwen2.5-vl-7b-video" / "train.log")
                             .read_bytes()})
    with pytest.raises(MixedRunsError):
        load_run(run)


# ---- fuzz: any cut into pieces, copies and names sort any way: the numbers of the one file ----------------
@settings(max_examples=25, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(cut=st.integers(5, 40), copy_from=st.integers(0, 45), copy_len=st.integers(1, 45),
       names=st.permutations(["a.log", "b.log", "c.log"]), crlf=st.booleans())
def test_fuzz_splits_and_copies_parse_as_the_one_file(tmp_path_factory, cut, copy_from, copy_len, names, crlf):
    folder = tmp_path_factory.mktemp("fz")
    # attempt 1: iterations 1..cut (then a crash); attempt 2 restarts from 1 with other step times and losses
    times = [f"2024-05-01 12:{m:02d}:{s:02d}" for m in range(60) for s in range(0, 60, 10)]
    first = "".join(megatron_line(i, loss=3.0 - 1e-3 * i, ts=times[i]) + "\n" for i in range(1, cut + 1))
    second = "".join(megatron_line(i, loss=2.9 - 1e-3 * i, ts=times[100 + i]) + "\n" for i in range(1, 46))
    whole = folder / "whole.log"
    whole.write_text(first + second)
    reference = parse_logs([whole]).raw.drop("file", "line")
    pieces = (first + second).splitlines(keepends=True)
    copy = "".join(pieces[copy_from:copy_from + copy_len])
    files = {names[0]: first, names[1]: second, names[2]: copy.replace("\n", "\r\n") if crlf else copy}
    paths = []
    for name, text in files.items():
        (folder / name).write_text(text)
        paths.append(folder / name)
    parsed = parse_logs(sorted(paths))
    got = parsed.raw.drop("file", "line")
    assert got.sort("segment", "iteration").equals(reference.sort("segment", "iteration"))


def test_the_pair_rule_sees_every_record_of_an_iteration():
    """A restarted run's log holds iterations 105..135 twice (attempt and replay); a partial copy holds the attempt
    only: no iteration differs (each has a record with the same values), so it is not 'two runs at the same
    time' — while another run's values still differ at every shared iteration."""
    from datetime import datetime, timedelta

    from vlm_perf.analysis import evidence as ev

    def rows(file, its, offset, start):
        return pl.DataFrame({"file": file, "iteration": list(its),
                             "loss": [2.0 - 1e-3 * i + offset for i in its], "elapsed_s": [0.5] * len(its),
                             "timestamp": [start + timedelta(seconds=k) for k in range(len(its))]})

    t0 = datetime(2025, 1, 1, 8)
    whole = pl.concat([rows("a.log", range(5, 140, 5), 0.0, t0),
                       rows("a.log", range(105, 205, 5), 0.01, t0 + timedelta(hours=1))])
    for part in (rows("b.log", range(5, 140, 5), 0.0, t0), rows("b.log", range(105, 205, 5), 0.01,
                                                                 t0 + timedelta(hours=1))):
        raw = pl.concat([whole, part])
        assert ev.mixed_runs(ev.file_ranges(raw), raw) == []
    other = pl.concat([whole, rows("b.log", range(5, 205, 5), 0.3, t0)])
    (found,) = ev.mixed_runs(ev.file_ranges(other), other)
    assert "logged at the same time" in found.message()


@pytest.mark.parametrize("names", [("a_trainer_state.json", "trainer_state.json"),
                                   ("trainer_state.json", "z_trainer_state.json")])
def test_an_earlier_trainer_state_is_a_partial_copy_of_the_later_one(tmp_path, names):
    """Every HF checkpoint folder keeps the trainer_state.json of its step: the log history up to there, a part of
    the final one, not a restart that replayed it."""
    import json

    hist = [{"epoch": i / 10, "grad_norm": 0.9, "learning_rate": 2e-05, "loss": 2.0 - i / 100, "step": i}
            for i in range(10, 110, 10)]
    early, final = tmp_path / names[0], tmp_path / names[1]
    early.write_text(json.dumps({"global_step": 50, "log_history": hist[:5]}))
    final.write_text(json.dumps({"global_step": 100, "log_history": hist}))
    parsed = parse_logs([tmp_path / n for n in sorted(names)])
    assert parsed.diagnostics.segments == 1 and parsed.raw.height == 10
    (note,) = [n for n in parsed.diagnostics.notes if "a copy of" in n]
    assert note.startswith(f"{early}: a copy of {final}")
