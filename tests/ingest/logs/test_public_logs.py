"""Real-shaped excerpts of public logs (tests/ingest/logs/fixtures/public/, each citing its source)
parse to the values a person reads in them (issue 19). The expected numbers are read off the
fixture lines by hand and converted with hand arithmetic written here (ms / 1000, % / 100, the
1e-3 scale veRL's SFT trainer writes in its key), never taken from the parser."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from vlm_perf.ingest.logs import parse_logs

PUBLIC = Path(__file__).resolve().parent / "fixtures" / "public"


def rows(name):
    r = parse_logs([PUBLIC / name])
    return r, r.raw.rows(named=True)


def by_line(rs, line):
    (row,) = [x for x in rs if x["line"] == line]
    return row


def test_every_fixture_cites_a_public_source():
    for p in sorted(PUBLIC.glob("*.log")):
        head = [ln for ln in p.read_text().splitlines() if ln.startswith("#")]
        assert sum("https://github.com/" in ln for ln in head) >= 2, p.name


def test_every_json_lines_fixture_has_a_citation_header_file():
    """A JSON-lines fixture holds no comment: ``<name>.source`` beside it is its header, with at least two public
    sources, one of them a file at a named commit (repository + path + 40-hex commit)."""
    import re

    fixtures = sorted(PUBLIC.glob("*.jsonl"))
    assert fixtures
    for p in fixtures:
        header = (PUBLIC / (p.name + ".source")).read_text()
        assert header.startswith(p.name + ":"), p.name
        urls = re.findall(r"https://github\.com/\S+", header)
        assert len(urls) >= 2, p.name
        assert any(re.search(r"/blob/[0-9a-f]{40}/\S+", u) for u in urls), p.name


def test_header_comments_are_not_records():
    for p in sorted(PUBLIC.glob("*.log")):
        r = parse_logs([p])
        n_head = sum(1 for ln in p.read_text().splitlines() if ln.startswith("#"))
        assert r.raw.get_column("line").min() > n_head, p.name


def test_xtuner_mmengine():
    r, rs = rows("xtuner_mmengine.log")
    assert [x["framework"] for x in rs] == ["mmengine"] * 4
    a = by_line(rs, 5)
    assert (a["iteration"], a["train_iters"]) == (1010, 2046)
    assert a["elapsed_s"] == 18.9265 and a["lr"] == 1.0704e-04 and a["loss"] == 0.7775 and a["grad_norm"] == 0.0009
    assert a["data_time"] == 16.06 and a["memory"] == 15266  # extras, as printed (MB)
    b = by_line(rs, 9)
    assert b["iteration"] == 20 and math.isnan(b["grad_norm"]) and b["loss"] == 2.1004 and b["elapsed_s"] == 0.8301
    assert r.diagnostics.ignored.get("warning", 0) >= 1  # the WARNING line is counted, not parsed


def test_composer_blocks():
    r, rs = rows("composer.log")
    assert [(x["framework"], x["iteration"]) for x in rs] == [("composer", 366), ("composer", 367)]
    assert rs[0]["loss"] == 10.375 and rs[0]["tokens_per_s"] == 13500.5 and rs[0]["train_iters"] == 48000
    assert rs[0]["elapsed_s"] is None  # time/train is hours since start, time/batch a counter: never a step time
    assert rs[1]["loss"] == 10.25 and rs[1]["tokens_per_s"] == 13490.0
    assert r.diagnostics.failed_count == 0


def test_lightning_bars():
    r, rs = rows("lightning.log")
    a, b = by_line(rs, 5), by_line(rs, 6)
    assert (a["iteration"], a["loss"], a["elapsed_s"]) == (4, 10.07, 4.47)
    assert (b["iteration"], b["loss"], b["elapsed_s"]) == (5, 9.947, 4.14)
    c = by_line(rs, 7)  # `150it [00:03, 46.84it/s, ...]`: no total
    assert c["iteration"] == 150 and c["loss"] == 1.625 and c["epoch"] == 8 and c["elapsed_s"] == pytest.approx(1 / 46.84)
    d = by_line(rs, 8)  # `12/? [..., 2.50it/s, ..., train_loss=1.231]`
    assert d["iteration"] == 12 and d["loss"] == 1.231 and d["elapsed_s"] == pytest.approx(1 / 2.5) and d["epoch"] == 9
    assert len(rs) == 4  # the validation bar without metrics is not a record


def test_nanochat_and_nanogpt():
    r, rs = rows("nanochat.log")
    a = by_line(rs, 6)
    assert a["framework"] == "nanochat" and a["iteration"] == 10 and a["train_iters"] == 5000
    assert a["loss"] == 6.912345 and a["grad_norm"] == 0.51234
    assert a["elapsed_s"] == pytest.approx(523.45 / 1000) and a["tokens_per_s_total"] == 1001234
    assert a["mfu_logged"] == pytest.approx(45.23 / 100)  # nanochat prints percent without a sign
    assert a["lr"] is None and a["lrm"] == 1.0  # a multiplier, not the learning rate
    g = by_line(rs, 8)
    assert g["framework"] == "generic" and g["iteration"] == 10 and g["loss"] == 3.2202
    assert g["elapsed_s"] == pytest.approx(0.89376) and g["mfu_logged"] == pytest.approx(0.1668)
    # `step 250: train loss ..., val loss ...`: nanoGPT's estimate on both splits, an evaluation (issue 31:
    # multi-word keys are read), never a training iteration
    e = by_line(rs, 10)
    assert e["kind"] == "eval" and e["eval_loss"] == 1.722 and e["train_loss"] == 1.544 and e["loss"] is None
    assert 250 not in r.iterations.get_column("iteration").to_list()


def test_verl_grpo_step0_and_sft_scale():
    r, rs = rows("verl_sft_grpo.log")
    s0 = by_line(rs, 5)
    assert s0["iteration"] == 0 and s0["kind"] == "eval"
    s1 = by_line(rs, 6)
    assert s1["kind"] == "train" and s1["loss"] == 0.002 and s1["mfu_logged"] == 0.341 and s1["elapsed_s"] == 71.5
    assert s1["first_in_segment"] and not s0["first_in_segment"]  # the validation-only step 0 does not take it
    assert r.iterations.get_column("iteration").to_list() == [1, 2, 10, 11]
    sft = by_line(rs, 8)
    assert sft["loss"] == 0.8123 and sft["lr"] == pytest.approx(0.02 * 1e-3) and sft["elapsed_s"] == 0.8828
    assert sft["mfu_logged"] == 0.2221


def test_metriclogger_and_dll():
    r, rs = rows("metriclogger.log")
    a = by_line(rs, 5)  # Train: [30/300][20/2859]: 0-based epoch 30 -> 30 * 2859 + 20
    assert a["iteration"] == 30 * 2859 + 20 and a["epoch"] == 30
    assert a["elapsed_s"] == 0.4177 and a["loss"] == 1.9455 and a["grad_norm"] == 2.2848 and a["lr"] == 0.000872
    d = by_line(rs, 7)
    assert d["iteration"] == 651 and d["loss"] == 2.0511345863342285 and d["lr"] == 2.9369138959931797e-05
    assert "data_time" not in r.raw.columns or a.get("data_time") is None or a["data_time"] != a["elapsed_s"]


def test_deepspeed_prints():
    r, rs = rows("deepspeed_prints.log")
    assert [(x["rank_label"], x["iteration"], x["loss"]) for x in rs if x["loss"] is not None] == [
        ("rank3", 77, 0.95703125), ("rank1", 77, 0.71484375), ("rank3", 78, 0.921875)]
    assert not [x for x in rs if x["iteration"] == 4510]  # DeepSpeed's engine line: an lr alone is no record
    assert 5 not in [x["line"] for x in rs]  # the ThroughputTimer line: samples/s only
    assert any("generic extractor" in n for n in r.diagnostics.notes)


def test_torchtitan_and_fork():
    r, rs = rows("torchtitan_fork.log")
    a = by_line(rs, 5)
    assert a["framework"] == "torchtitan" and a["tokens_per_s"] == 10050 and a["mfu_logged"] == pytest.approx(0.1399)
    f = by_line(rs, 7)
    assert f["framework"] == "generic" and (f["iteration"], f["train_iters"]) == (640, 644)
    assert f["loss"] == 2.1234 and f["tokens_per_s"] == 12345 and f["tflops_per_gpu_logged"] == 567.89
    assert f["mfu_logged"] == pytest.approx(0.5742) and f["rank_label"] == "rank0"


def test_declared_formats_from_public_logs():
    r, rs = rows("declared_formats.log")
    m = by_line(rs, 6)
    assert m["framework"] == "megatron" and m["elapsed_s"] == pytest.approx(86545.2 / 1000) and m["loss"] == 2.50422
    n = by_line(rs, 7)
    assert n["framework"] == "nemo2" and n["iteration"] == 120 and n["elapsed_s"] == 0.03146 and n["loss"] == 1.233
    a = by_line(rs, 8)
    assert a["framework"] == "automodel" and a["tokens_per_s"] == 1409.82 and a["tokens_per_s_total"] == 11278.56
    x = by_line(rs, 9)
    assert x["framework"] == "maxtext" and x["elapsed_s"] == 5.667 and x["tflops_per_gpu_logged"] == 134.924


def test_dict_scalars_and_step_before_dict(tmp_path):
    # mmengine's vis_data/scalars.json lines (xtuner writes them next to the console log): JSON scalars
    # mapped through the vocabulary (`time` s/iter); and a dict printed after `step N:` takes step N
    p = tmp_path / "scalars.json"
    p.write_text('{"lr": 0.0001, "data_time": 0.0172, "loss": 0.8473, "time": 2.8955, "iter": 1020, "memory": 15266, '
                 '"step": 1020}\n', encoding="utf-8")
    row = parse_logs([p]).raw.row(0, named=True)
    assert (row["iteration"], row["elapsed_s"], row["loss"], row["lr"]) == (1020, 2.8955, 0.8473, 0.0001)
    q = tmp_path / "slime.log"
    q.write_text("step 3: {'train/loss': 0.52, 'train/grad_norm': 1.5, 'train/lr': 1e-06}\n"
                 "step 3: {'eval/acc': 0.4}\n", encoding="utf-8")
    rs = parse_logs([q]).raw.rows(named=True)
    assert (rs[0]["iteration"], rs[0]["loss"], rs[0]["grad_norm"], rs[0]["lr"], rs[0]["kind"]) == (3, 0.52, 1.5, 1e-06, "train")
    assert rs[1]["kind"] == "eval" and rs[1]["iteration"] == 3


def test_swift_and_trl_dicts():
    r, rs = rows("swift_trl_hf.log")
    a, b, c = by_line(rs, 6), by_line(rs, 7), by_line(rs, 8)
    assert a["framework"] == "swift" and a["iteration"] == 5 and a["loss"] == 2.28026438
    assert a["elapsed_s"] == pytest.approx(1 / 0.081597)  # iter/s inverted
    assert b["framework"] == "swift" and b["iteration"] == 55 and b["loss"] == 0.01419 and b["elapsed_s"] == 2.143
    assert c["framework"] == "hf" and c["iteration"] is None and c["loss"] == 0.0 and c["kl"] == 0.0005371240986278281
    assert c["kind"] == "train"


def test_nanotron():
    r, rs = rows("nanotron.log")
    a, b = by_line(rs, 5), by_line(rs, 6)
    assert (a["iteration"], a["train_iters"]) == (327281, 378950)
    assert a["elapsed_s"] == pytest.approx(11.5e3 / 1000) and a["tokens_per_s"] == pytest.approx(11.4e3)
    assert a["tokens_per_s_total"] == pytest.approx(22.8e3) and a["tflops_per_gpu_logged"] == 38.3 and a["loss"] == 2.38
    assert b["iteration"] == 991 and b["elapsed_s"] == pytest.approx(0.045) and b["tokens_per_s"] == pytest.approx(1780)
