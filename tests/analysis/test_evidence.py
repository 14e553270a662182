"""Cross-examining the evidence (vlm_perf.analysis.evidence), each defect class tested as a class.

Unit tests feed the pure checks hand-made facts (file ranges, configurations, DP ranks); the
integration tests break one thing in a copy of a bundled sample run and read the verdict line.
Sizes are checked against independent arithmetic: parameter counts from `count_params` (verified
against published totals in tests/arch), a frozen-tower number against the report recomputed with
the tower declared frozen.
"""

from __future__ import annotations

import gzip
import json
import math
import re
import shutil
from datetime import datetime, timedelta
from pathlib import Path
from types import SimpleNamespace

import polars as pl
import pytest

from vlm_perf.analysis import evidence as ev
from vlm_perf.analysis.checks import CheckInputs
from vlm_perf.arch import load_model
from vlm_perf.arch.params import count_params
from vlm_perf.ingest.log_facts import scan_lines
from vlm_perf.ingest.runconfig import RunConfig
from vlm_perf.pipeline import load_run

ROOT = Path(__file__).resolve().parents[2]
SFT = ROOT / "sample_logs" / "qwen3-vl-30b-a3b-sft"
VIDEO = ROOT / "sample_logs" / "qwen2.5-vl-7b-video"
TINY = ROOT / "sample_logs" / "qwen2-vl-tiny-real"


def _check(checks, name):
    return next(c for c in checks if c.name == name)


# ---- two runs in one folder ---------------------------------------------------------------------
def _raw(file: str, iterations, loss_offset: float = 0.0, start: datetime | None = None, step_s: float = 1.0):
    its = list(iterations)
    start = start or datetime(2025, 1, 1, 8, 0, 0)
    return pl.DataFrame({"file": file, "iteration": its, "loss": [2.0 - 1e-3 * i + loss_offset for i in its],
                         "elapsed_s": [0.5 + 1e-4 * i for i in its],
                         "timestamp": [start + timedelta(seconds=step_s * k) for k in range(len(its))]})


def _pair(a: pl.DataFrame, b: pl.DataFrame, args_a=None, args_b=None):
    raw = pl.concat([a, b])
    ranges = ev.file_ranges(raw, {"a.log": args_a or {}, "b.log": args_b or {}})
    return ev.mixed_runs(ranges, raw)


BASE_ARGS = {"world_size": "64", "global_batch_size": "128", "seq_length": "4096", "tensor_model_parallel_size": "4",
             "hf_model_id": "qwen3-vl-30b-a3b", "lr": "1e-05"}


@pytest.mark.parametrize("key,other", [("world_size", "8"), ("global_batch_size", "64"), ("seq_length", "8192"),
                                       ("tensor_model_parallel_size", "2"), ("hf_model_id", "qwen2.5-vl-7b")])
def test_a_run_defining_argument_that_differs_makes_two_runs(key, other):
    """Disjoint iterations (a resume would look like this) but another run's arguments: two runs."""
    found = _pair(_raw("a.log", range(5, 105, 5)), _raw("b.log", range(105, 205, 5), start=datetime(2025, 1, 2)),
                  BASE_ARGS, {**BASE_ARGS, key: other})
    assert len(found) == 1 and any(r.startswith(f"{key} ") for r in found[0].reasons)
    assert other in found[0].message() and "a.log" in found[0].message() and "b.log" in found[0].message()


def test_an_argument_that_may_change_between_restarts_does_not():
    assert _pair(_raw("a.log", range(5, 105, 5)), _raw("b.log", range(105, 205, 5), start=datetime(2025, 1, 2)),
                 BASE_ARGS, {**BASE_ARGS, "lr": "2e-05"}) == []


def test_the_same_iterations_logged_at_the_same_time_with_other_values_are_two_runs():
    a = _raw("a.log", range(5, 205, 5))
    b = _raw("b.log", range(5, 205, 5), loss_offset=0.3, start=datetime(2025, 1, 1, 8, 0, 30))
    (found,) = _pair(a, b)
    assert "same time" in found.message() and "40 of 40" in found.message()


def test_two_full_runs_one_after_the_other_are_two_runs():
    a = _raw("a.log", range(5, 205, 5))
    b = _raw("b.log", range(5, 205, 5), loss_offset=0.3, start=datetime(2025, 1, 3))
    (found,) = _pair(a, b)
    assert "overlap on 196" in found.message()


@pytest.mark.parametrize("case", ["copy", "resume", "restart_from_scratch_after_a_short_crash", "no_timestamps_copy"])
def test_one_run_in_several_files_is_not_refused(case):
    if case == "copy":  # the same log twice (a per-node copy): the same values
        a, b = _raw("a.log", range(5, 205, 5)), _raw("b.log", range(5, 205, 5))
    elif case == "resume":  # the job resumed from iteration 100 and replayed 101..120
        a = _raw("a.log", range(5, 125, 5))
        b = _raw("b.log", range(105, 205, 5), loss_offset=0.01, start=datetime(2025, 1, 1, 9))
    elif case == "restart_from_scratch_after_a_short_crash":
        a = _raw("a.log", range(5, 30, 5))
        b = _raw("b.log", range(5, 205, 5), loss_offset=0.01, start=datetime(2025, 1, 1, 9))
    else:
        a = _raw("a.log", range(5, 205, 5)).drop("timestamp")
        b = _raw("b.log", range(5, 205, 5)).drop("timestamp")
    assert _pair(a, b, BASE_ARGS, BASE_ARGS) == []


def _two_run_folder(tmp_path: Path) -> Path:
    run = tmp_path / "run"
    shutil.copytree(SFT, run)
    shutil.copy(VIDEO / "train.log", run / "other.log")
    return run


def test_two_runs_in_one_folder_are_refused_naming_the_files(tmp_path):
    run = _two_run_folder(tmp_path)
    with pytest.raises(ev.MixedRunsError) as err:
        load_run(run)
    text = str(err.value)
    assert "other.log" in text and "train.log" in text and "\n" not in text
    assert "global_batch_size 64 vs 128" in text
    assert "--" not in text  # the library names no flag (the CLI adds --log / --merge-logs)
    assert sorted(Path(f).name for f in err.value.files) == ["other.log", "train.log"]


def test_choosing_the_logs_or_merging_is_the_users_call(tmp_path):
    run = _two_run_folder(tmp_path)
    chosen = load_run(run, log=[run / "train.log"])
    assert _check(chosen.analysis.checks, "log_files").status == "ok"
    assert "chosen" in _check(chosen.analysis.checks, "log_files").summary
    merged = load_run(run, merge_logs=True)
    line = _check(merged.analysis.checks, "log_files")
    assert line.status == "warn" and "two different runs" in line.summary


# ---- metadata vs log vs configuration -----------------------------------------------------------
def _inputs(evidence, gaps=None, crosscheck=None, summary=None):
    run = SimpleNamespace(gaps=gaps or {"log_interval": 5}, crosscheck=crosscheck or {},
                          convention_summary=lambda: summary or {})
    return CheckInputs(run, evidence=evidence)  # type: ignore[arg-type]


def _ev(**kw):
    spec = kw.pop("spec", load_model("qwen2.5-vl-7b"))
    config = kw.pop("config", RunConfig())
    return ev.Evidence(spec=spec, config=config, **kw)


@pytest.mark.parametrize("meta,log,status", [
    ((1001, 1200, 200), (5, 200, 40), "fail"),   # another run's metadata: no overlap
    ((1, 60, 60), (5, 200, 40), "fail"),         # covers 30% of the log
    ((1, 400, 400), (5, 200, 40), "warn"),       # 200 metadata iterations past the log
    ((1, 200, 200), (5, 200, 40), "ok"),
    ((1, 205, 205), (5, 200, 40), "ok"),          # within one log interval
])
def test_metadata_iterations_against_the_logs(meta, log, status):
    check = ev._metadata_vs_log(_inputs(_ev(metadata_iterations=meta, log_iterations=log)))
    assert check.status == status
    assert f"{meta[0]}..{meta[1]}" in check.summary


@pytest.mark.parametrize("ranks,config,status,needle", [
    (range(8), dict(num_gpus=1), "fail", "8 DP ranks but the run had 1 GPU"),
    (range(4), dict(num_gpus=64, data_parallel=8), "fail", "4 DP rank(s) (ids 0..3), the configuration says 8"),
    ([0, 1, 2, 9], dict(num_gpus=64, tensor_parallel=4, pipeline_parallel=2, context_parallel=1), "fail",
     "says 8"),
    (range(8), dict(num_gpus=64, data_parallel=8, global_batch_size=100, micro_batch_size=1), "fail",
     "not a multiple of micro batch 1 x DP 8"),
    (range(8), dict(num_gpus=64, data_parallel=8, global_batch_size=128, micro_batch_size=2), "ok",
     "128 = micro batch 2 x DP 8 x 8"),
    (range(8), dict(num_gpus=64, tensor_parallel=4, pipeline_parallel=2), "ok", "= data-parallel size 8"),
    (None, dict(), "skip", "not checked"),
])
def test_dp_ranks_and_batch_against_the_parallelism(ranks, config, status, needle):
    cfg = RunConfig(**config)
    check = ev._parallelism(_inputs(_ev(config=cfg, metadata_dp_ranks=list(ranks) if ranks is not None else None)))
    assert check.status == status and needle in check.summary, check.summary


def test_another_runs_metadata_is_named(tmp_path):
    """The issue's case: the 64-GPU run's metadata next to the tiny 1-process run."""
    loaded = load_run(TINY, metadata=[SFT / "metadata.jsonl.gz"], causal="full")
    checks = {c.name: c for c in loaded.analysis.checks}
    assert checks["parallelism"].status == "fail" and "8 DP ranks but the run had 1 GPU" in checks["parallelism"].summary
    assert checks["metadata_vs_log"].status in ("warn", "fail")
    assert "1..200" in checks["metadata_vs_log"].summary


# ---- log vs model ------------------------------------------------------------------------------
SPEC_7B = load_model("qwen2.5-vl-7b")


def _files(args):
    return [ev.FileRange("train.log", 5, 200, arguments={k: str(v) for k, v in args.items()})]


@pytest.mark.parametrize("key,attr", [("num_layers", "num_layers"), ("hidden_size", "hidden_size"),
                                      ("num_attention_heads", "num_heads"), ("num_query_groups", "num_kv_heads"),
                                      ("kv_channels", "head_dim")])
def test_every_architecture_argument_is_checked(key, attr):
    true = getattr(SPEC_7B.lm, attr)
    assert ev.log_vs_model(_ev(spec=SPEC_7B, files=_files({key: true}))).status == "ok"
    wrong = ev.log_vs_model(_ev(spec=SPEC_7B, files=_files({key: true * 2})))
    assert wrong.status == "fail" and f"{key} is {true * 2}" in wrong.summary and str(true) in wrong.summary


def test_an_moe_log_against_a_dense_model():
    check = ev.log_vs_model(_ev(spec=SPEC_7B, files=_files({"num_experts": 128, "moe_router_topk": 8})))
    assert check.status == "fail" and "num_experts is 128" in check.summary and "no experts" in check.summary
    moe = load_model("qwen3-vl-30b-a3b")
    ok = ev.log_vs_model(_ev(spec=moe, files=_files({"num_experts": moe.lm.moe.num_experts,
                                                     "moe_router_topk": moe.lm.moe.top_k})))
    assert ok.status == "ok"


@pytest.mark.parametrize("logged", ["qwen2.5-vl-7b", "Qwen/Qwen2.5-VL-7B-Instruct", "/models/Qwen2.5-VL-7B-Instruct/",
                                    "qwen2_5-vl-7b-mcore"])
def test_the_models_own_names_agree(logged):
    assert ev.log_vs_model(_ev(spec=SPEC_7B, files=_files({"hf_model_id": logged}))).status == "ok"


@pytest.mark.parametrize("logged,used", [("qwen3-vl-30b-a3b", "qwen3-vl-8b"), ("Qwen/Qwen2.5-VL-72B-Instruct",
                                                                              "qwen2.5-vl-7b")])
def test_a_wrong_model_is_named_with_the_size_of_the_difference(logged, used):
    spec = load_model(used)
    check = ev.log_vs_model(_ev(spec=spec, files=_files({"hf_model_id": logged})))
    assert check.status == "fail" and used in check.summary
    theirs = count_params(load_model(ev.normalise_model_name(logged))).total
    ours = count_params(spec).total
    assert f"{100 * (ours / theirs - 1):+.1f}%" in check.summary


@pytest.mark.parametrize("logged,status", [("Qwen3VLModelProvider", "skip"), ("vlm_sft_recipe", "skip"),
                                           ("my-org/foo-13b", "fail"), ("llama-3.1-8b", "fail")])
def test_only_a_name_that_names_a_model_is_judged(logged, status):
    check = ev.log_vs_model(_ev(spec=SPEC_7B, files=_files({"model_name": logged})))
    assert check.status == status, check.summary


def test_parameter_counts_the_log_prints():
    pc = count_params(SPEC_7B)
    trainable_all = pc.total
    trainable_frozen_tower = pc.total - pc.vision_tower
    line = f"  Number of trainable parameters = {trainable_all:,}"
    facts = scan_lines("train.log", [(12, line)])
    assert facts.parameter_counts == [("trainable", trainable_all, 12)]
    ok = ev.log_vs_model(_ev(spec=SPEC_7B, parameter_counts=[("train.log", "trainable", trainable_all, 12)]))
    assert ok.status == "ok"
    # the log trained with a frozen tower that nobody declared: named, with the size and the fix
    bad = ev.log_vs_model(_ev(spec=SPEC_7B, parameter_counts=[("train.log", "trainable", trainable_frozen_tower, 12)]))
    assert bad.status == "fail" and "train.log:12" in bad.summary and "frozen vision tower" in bad.summary
    assert f"{100 * (trainable_frozen_tower / trainable_all - 1):+.1f}%" in bad.summary


def test_megatron_shard_counts_add_up_to_the_model():
    total = count_params(SPEC_7B).total
    lines = [(i, f" > number of parameters on (tensor, pipeline) model parallel rank ({t}, 0): {total // 2:,}")
             for i, t in enumerate((0, 1))]
    facts = scan_lines("train.log", lines)
    counts = [("train.log", k, n, line) for k, n, line in facts.parameter_counts]
    cfg = RunConfig(tensor_parallel=2, pipeline_parallel=1)
    assert ev.log_vs_model(_ev(spec=SPEC_7B, config=cfg, parameter_counts=counts)).status == "ok"
    doubled = [(f, k, 2 * n, line) for f, k, n, line in counts]
    assert ev.log_vs_model(_ev(spec=SPEC_7B, config=cfg, parameter_counts=doubled)).status == "fail"


def test_a_logged_rate_no_convention_explains_is_named():
    cc = {"status": "mismatch", "candidates": {"megatron-lm": 0.434, "exact": 0.412}}
    check = ev.log_vs_model(_ev(spec=SPEC_7B), cc)
    assert check.status == "fail" and "matches no convention for qwen2.5-vl-7b" in check.summary
    assert "-56.6%" in check.summary  # closest: megatron-lm, 0.434 - 1


def test_a_rate_gap_in_estimate_mode_is_not_blamed_on_the_model():
    """In estimate mode the recomputed rate rests on seq_length and the stated media: a gap is the log
    cross-check's to report (against the estimate), not a log-vs-model failure."""
    cc = {"status": "mismatch", "candidates": {"megatron-lm": 0.859, "exact": 0.829}}
    check = ev.log_vs_model(_ev(spec=SPEC_7B, estimated=True), cc)
    assert check.status != "fail" and "megatron-lm 0.859" in check.details["rate_not_judged"]
    assert ev.log_vs_model(_ev(spec=SPEC_7B), cc).status == "fail"  # with metadata the same gap is named


def test_a_wrong_model_on_the_sample_run_fails_naming_both():
    loaded = load_run(SFT, model="qwen3-vl-8b")
    check = _check(loaded.analysis.checks, "log_vs_model")
    assert check.status == "fail" and "qwen3-vl-30b-a3b" in check.summary and "qwen3-vl-8b" in check.summary
    ours, theirs = count_params(load_model("qwen3-vl-8b")).total, count_params(load_model("qwen3-vl-30b-a3b")).total
    assert f"{100 * (ours / theirs - 1):+.1f}%" in check.summary
    assert _check(loaded.analysis.checks, "configuration").status == "warn"  # a conflict counts as a warning


# ---- training regime ---------------------------------------------------------------------------
def test_an_unstated_regime_gives_the_frozen_tower_number(tmp_path):
    run = tmp_path / "video"
    shutil.copytree(VIDEO, run)
    text = (run / "run.yaml").read_text()
    (run / "run.yaml").write_text(re.sub(r"frozen:\n- vision\n", "", text))
    unstated = load_run(run)
    check = _check(unstated.analysis.checks, "training_regime")
    assert check.status == "warn"
    stated = load_run(VIDEO)  # the same run with its run.yaml saying the tower and projector were frozen
    frozen_tf = stated.analysis.convention_summary()["exact"]["tflops_per_gpu_mean"]
    trained_tf = unstated.analysis.convention_summary()["exact"]["tflops_per_gpu_mean"]
    ratio = check.details["alternatives"]["vision tower + projector"]
    assert trained_tf * ratio == pytest.approx(frozen_tf, rel=1e-9)
    assert f"{frozen_tf:,.1f} TFLOP/s/GPU ({100 * (frozen_tf / trained_tf - 1):+.1f}%)" in check.summary
    assert _check(stated.analysis.checks, "training_regime").status == "ok"


def test_a_log_that_says_the_tower_was_frozen_contradicts_a_trained_count():
    spec = load_model("qwen2.5-vl-7b")
    cfg = RunConfig(frozen=(), sources={"frozen": "manifest"})
    for key in ("freeze_vit", "freeze_vision_model", "freeze_visual"):
        evidence = _ev(spec=spec, config=cfg, files=_files({key: "True"}), flops_as_counted=100.0,
                       frozen_alternatives={"vision tower": 88.0})
        check = ev._training_regime(_inputs(evidence, summary={"exact": {"tflops_per_gpu_mean": 500.0}}))
        assert check.status == "fail" and key in check.summary and "440.0 TFLOP/s/GPU (-12.0%)" in check.summary


def test_text_models_have_no_regime_line():
    assert ev._training_regime(_inputs(_ev(spec=load_model("qwen3-30b-a3b")))) is None


# ---- estimate inputs, conflicts, headline ------------------------------------------------------
@pytest.mark.parametrize("given", [dict(seq_length=8192), dict(image_size=(448, 448)), dict(image_grid=(1, 32, 32)),
                                   dict(seq_length=8192, images_per_sample=2)])
def test_estimate_settings_given_with_metadata_are_said_to_be_ignored(given):
    check = ev._estimate_inputs(_inputs(_ev(overrides=given)))
    assert check.status == "warn" and all(k in check.summary for k in given)
    assert ev._estimate_inputs(_inputs(_ev(overrides=given, estimated=True))) is None
    assert ev._estimate_inputs(_inputs(_ev(overrides={"num_gpus": 8}))) is None


def test_estimate_flag_on_the_sample_run():
    loaded = load_run(SFT, seq_length=8192, image_size="448,448")
    check = _check(loaded.analysis.checks, "estimate_inputs")
    assert check.status == "warn" and "seq_length" in check.summary and "image_size" in check.summary


def test_no_gpu_count_means_no_all_passed(tmp_path):
    run = tmp_path / "tiny"
    shutil.copytree(TINY, run)
    (run / "run.yaml").write_text(re.sub(r"num_gpus: 1\n", "", (run / "run.yaml").read_text()))
    loaded = load_run(run, causal="full")
    check = _check(loaded.analysis.checks, "headline_numbers")
    assert check.status == "warn" and "MISSING" in check.summary and "GPU count" in check.summary
    assert loaded.analysis.convention_summary()["exact"]["tflops_per_gpu_mean"] is None


def test_every_sample_run_passes_the_evidence_checks():
    for run in (SFT, VIDEO):
        checks = {c.name: c for c in load_run(run).analysis.checks}
        for name in ("log_files", "metadata_vs_log", "parallelism", "log_vs_model", "training_regime",
                     "configuration", "headline_numbers"):
            assert checks[name].status == "ok", (run.name, checks[name].summary)


def test_shifted_metadata_is_another_runs(tmp_path):
    run = tmp_path / "shifted"
    shutil.copytree(SFT, run)
    rows = [json.loads(line) for line in gzip.open(SFT / "metadata.jsonl.gz", "rt")]
    with gzip.open(run / "metadata.jsonl.gz", "wt") as fh:
        for row in rows:
            fh.write(json.dumps({**row, "iteration": row["iteration"] + 1000}) + "\n")
    check = _check(load_run(run).analysis.checks, "metadata_vs_log")
    assert check.status == "fail" and "1001..1200" in check.summary and "do not overlap" in check.summary
    assert not math.isnan(0.0)


# ---- tokens per second ---------------------------------------------------------------------------
def _token_windows(logged_factor: float):
    seconds, tokens = [2.0, 2.0, 4.0], [1.0e6, 1.2e6, 2.0e6]
    return pl.DataFrame({"reliable": True, "window_seconds": seconds, "lm_tokens": tokens,
                         "tokens_per_s": [logged_factor * t / s for t, s in zip(tokens, seconds)]})


@pytest.mark.parametrize("factor,reading", [(1.0, "global"), (1 / 64, "per GPU"), (1 / 8, "per DP rank")])
def test_logged_tokens_per_second_under_each_reading(factor, reading):
    run = SimpleNamespace(windows=_token_windows(factor), world_size=64, gaps={})
    check = ev._log_tokens(CheckInputs(run, evidence=_ev(config=RunConfig(num_gpus=64, data_parallel=8))))
    assert check.status == "ok" and reading in check.summary


def test_logged_tokens_no_reading_explains_are_flagged():
    run = SimpleNamespace(windows=_token_windows(1.5), world_size=64, gaps={})
    check = ev._log_tokens(CheckInputs(run, evidence=_ev(config=RunConfig(num_gpus=64))))
    assert check.status == "warn" and "global 1.500" in check.summary and "per GPU 96.000" in check.summary
    no_tokens = SimpleNamespace(windows=_token_windows(1.0).drop("tokens_per_s"), world_size=64, gaps={})
    assert ev._log_tokens(CheckInputs(no_tokens, evidence=_ev())) is None


# ---- fuzz: the scanners and the pair rule never crash ---------------------------------------------
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

_FRAGMENTS = ["[Rank 3] (after 10 iterations) memory (MB) | allocated: ", "max allocated: ", "| max reserved: ",
              "mem-max-allocated-gigabytes: ", " > number of parameters on (tensor, pipeline) model parallel rank (",
              "Number of trainable parameters = ", "  world_size ........ ", "  hf_model_id ....... ", "1e400",
              "nan", "-3", "9" * 30, "1,234,567", ")", ": ", " | ", "\x00", "é", "[default0]:", "..."]


@settings(derandomize=True, deadline=None, max_examples=150)
@given(st.lists(st.lists(st.sampled_from(_FRAGMENTS), max_size=8).map("".join), max_size=20))
def test_fuzz_scan_lines_never_crashes(lines):
    facts = scan_lines("f.log", list(enumerate(lines, 1)))
    for _rank, _iteration, allocated, reserved, _unit, _line in facts.memory:
        assert all(v is None or not v < 0 for v in (allocated, reserved))  # (inf / nan from "1e400" allowed)
    from vlm_perf.analysis.memory import peak_memory

    peak_memory([facts])
    ev.log_vs_model(_ev(spec=SPEC_7B, files=[ev.FileRange("f.log", arguments=facts.arguments)],
                        parameter_counts=[("f.log", k, n, line) for k, n, line in facts.parameter_counts]))


@settings(derandomize=True, deadline=None, max_examples=100)
@given(st.lists(st.tuples(st.integers(0, 300), st.integers(1, 60), st.floats(0, 1)), min_size=1, max_size=4))
def test_fuzz_pair_rule(files):
    frames = [_raw(f"{k}.log", range(start, start + 5 * n, 5), loss_offset=off,
                   start=datetime(2025, 1, 1) + timedelta(hours=k)) for k, (start, n, off) in enumerate(files)]
    raw = pl.concat(frames)
    ranges = ev.file_ranges(raw, {})
    found = ev.mixed_runs(ranges, raw)
    for m in found:
        assert m.reasons and m.a != m.b
