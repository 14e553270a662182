"""HFU: equal to MFU without recompute, and the stated multiple with it (hand arithmetic from the
component FLOPs of one iteration), plus the recompute settings read from Megatron / HF configs."""

from __future__ import annotations

import json

import numpy as np
import polars as pl
import pytest

from vlm_perf.analysis import analyze_run
from vlm_perf.analysis.hfu import Recompute, hfu_summary, parse_recompute, recompute_from_config
from vlm_perf.arch import load_model
from vlm_perf.flops import compute_flops
from vlm_perf.stats import BatchStats
from tests.support import run_main  # the CLI entry point in-process (same exit statuses, one-line errors)

MODEL = "qwen3-vl-30b-a3b"
LAYER = ("lm.attn_proj", "lm.attn_core", "lm.dense_mlp", "lm.routed_experts", "lm.shared_experts", "lm.router")


def _constant_run(spec, frozen=()):
    """Every iteration has the same statistics, so window means equal one iteration's numbers."""
    one = BatchStats.from_batch(seq_lens=[3000, 1096], image_grids=[[1, 32, 48]], spec=spec)
    its = np.arange(1, 51)
    stats = pl.DataFrame({"iteration": its, **{k: np.full(its.size, v) for k, v in one.as_dict().items()}})
    log = pl.DataFrame({"segment": 0, "iteration": np.arange(5, 51, 5), "elapsed_s": 0.5})
    run = analyze_run(log, spec, stats, world_size=8, peak_tflops=989.0, log_interval=5, frozen=frozen)
    return run, one


@pytest.fixture(scope="module")
def setup():
    spec = load_model(MODEL)
    run, one = _constant_run(spec)
    return spec, run, compute_flops(spec, one, "exact")


def test_no_recompute_hfu_equals_mfu(setup):
    spec, run, _ = setup
    h = hfu_summary(run, spec, Recompute())
    assert h["hfu_mean"] == h["mfu_mean"] == pytest.approx(run.convention_summary()["exact"]["mfu_mean"], rel=1e-12)
    assert h["hardware_over_model"] == 1.0


def test_selective_adds_the_attention_core_forward(setup):
    spec, run, b = setup
    # every term trainable: the attention core costs forward + 2 x forward in backward (dQ/dK, dV/dP) = 3 x forward
    attn_core_forward = b.components["lm.attn_core"] / 3
    h = hfu_summary(run, spec, parse_recompute("selective"))
    assert h["hardware_over_model"] == pytest.approx(1 + attn_core_forward / b.total, rel=1e-9)
    assert h["hfu_mean"] == pytest.approx(h["mfu_mean"] * (1 + attn_core_forward / b.total), rel=1e-9)


def test_full_adds_the_layer_forward_for_n_of_l_layers(setup):
    spec, run, b = setup
    # weight GEMMs: forward + weight grad + input grad = 3 x forward; attention core 3 x forward as well
    layer_forward = sum(b.components.get(c, 0) for c in LAYER) / 3
    full = hfu_summary(run, spec, parse_recompute("full"))
    assert full["hardware_over_model"] == pytest.approx(1 + layer_forward / b.total, rel=1e-9)
    n, total = 12, spec.lm.num_layers
    part = hfu_summary(run, spec, parse_recompute(f"full:{n}"))
    assert part["hardware_over_model"] == pytest.approx(1 + layer_forward * n / total / b.total, rel=1e-9)
    assert f"{n} of {total}" in part["rule"]


def test_a_training_step_with_nothing_trainable_is_refused():
    # with every part frozen there is no backward (and so no recompute); issue 11 made that an error
    from vlm_perf.errors import ConfigError
    spec = load_model(MODEL)
    with pytest.raises(ConfigError, match="frozen"):
        _constant_run(spec, frozen=("vision", "lm"))


@pytest.mark.parametrize("args,expected", [
    (("full", "uniform", 1, None, 4), ("full", None)),  # uniform: every layer, in chunks of 1
    (("full", "block", 2, None, 4), ("full", 8)),  # block: 2 layers per stage x 4 stages
    (("selective", None, None, None, 1), ("selective", None)),
    ((None, None, None, True, 1), ("full", None)),  # HF gradient_checkpointing
    (("None", None, None, None, 1), ("none", None)),  # Megatron prints None when off
    ((None, None, None, None, 1), None),  # nothing stated
])
def test_recompute_from_config(args, expected):
    got = recompute_from_config(*args)
    assert (None if got is None else (got.granularity, got.layers)) == expected


@pytest.mark.parametrize("text", ["fulll", "full:0", "full:x", "selective:3", ""])
def test_bad_recompute_is_one_line_error(text):
    with pytest.raises(ValueError, match="none, selective, full|positive number"):
        parse_recompute(text)


def test_megatron_arguments_block_sets_the_rule(tmp_path):
    """A Megatron arguments dump (`name ....... value`) states block recompute; the report applies it."""
    seq = [2048, 2048]
    rows = [{"iteration": it, "microbatch": 0, "dp_rank": r, "samples": 1, "padded_tokens": 4096, "seq_lens": seq,
             "image_grid_thw": [], "video_grid_thw": []} for it in range(1, 21) for r in range(2)]
    (tmp_path / "metadata.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    args = ["------------------------ arguments ------------------------",
            "  pipeline_model_parallel_size .................... 2",
            "  recompute_granularity ........................... full",
            "  recompute_method ................................ block",
            "  recompute_num_layers ............................ 3",
            "-------------------- end of arguments ---------------------"]
    log = [f" [2025-01-01 00:00:{i:02d}] iteration {i:8d}/      20 | consumed samples: {2 * i:8d} | "
           f"elapsed time per iteration (ms): 800.0 | global batch size: 2 | lm loss: 1.0E+00 |" for i in range(5, 21, 5)]
    (tmp_path / "train.log").write_text("\n".join(args + log) + "\n")
    (tmp_path / "run.yaml").write_text("model: qwen3-30b-a3b\nnum_gpus: 4\ngpu: H100\nlog_interval: 5\n")
    out = tmp_path / "out"
    r = run_main("report", str(tmp_path), "-o", str(out))
    assert r.returncode == 0, r.stderr
    h = json.loads((out / "summary.json").read_text())["hfu"]
    assert h["recompute"] == "full:6" and "block" in h["source"] and h["hfu_mean"] > h["mfu_mean"]
    r = run_main("report", str(tmp_path), "-o", str(out),
                 "--recompute", "none")
    h = json.loads((out / "summary.json").read_text())["hfu"]
    assert r.returncode == 0 and h["recompute"] == "none" and h["hfu_mean"] == h["mfu_mean"]
    r = run_main("report", str(tmp_path), "-o", str(out),
                 "--recompute", "ful")
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "--recompute" in r.stderr
