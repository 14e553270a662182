"""`vlm-perf flops --new-tokens N`: generating N tokens after each prompt (prefill + KV-cache decode), by part.

Specified here: the numbers by hand on a tiny Qwen2 LM (the arithmetic of tests/flops/test_generation.py), that the
command's numbers ARE the RL path's generation phase (`rl_step_flops(...).phases["generation"]`, one function), one
or many prompts, an adapter's forward on every prefill and decode token, and bad input as one line + exit 2.
FlopCounterMode around transformers' own ``generate()`` checks the same command end to end in
tests/verify/test_measured_generation.py."""

from __future__ import annotations

import json

import pytest

from tests.support import run_main as cli

from tests.support import TINY_QWEN2_CORE_PER_POSITION as CORE_PER_POSITION  # noqa: E402
from tests.support import TINY_QWEN2_HEAD as HEAD  # noqa: E402
from tests.support import TINY_QWEN2_PER_TOKEN_LAYER as PER_TOKEN_LAYER  # noqa: E402
from tests.support import TINY_QWEN2 as TINY  # noqa: E402
VLM = ("flops", "--model", "qwen2.5-vl-7b", "--seq-len", "1024", "--grid", "1,32,32")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    path = tmp_path_factory.mktemp("tiny") / "config.json"
    path.write_text(json.dumps(TINY))
    return path


def _json(*args):
    r = cli(*args, "--json")
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def test_prefill_and_decode_by_hand(tiny):
    """6 prompt positions, 4 new tokens, eager square: the prefill runs every matmul on 6 positions and the head on
    the last one; 3 decode steps run every matmul on one token and attend to 7, 8 and 9 cached positions."""
    out = _json("flops", "--model", tiny, "--seq-len", "6", "--new-tokens", "4", "--causal", "full")
    gen = out["generation"]
    assert gen["prefill"]["language_model"] == 2 * (6 * PER_TOKEN_LAYER + CORE_PER_POSITION * 36) + HEAD
    assert gen["decode"]["language_model"] == 3 * (2 * PER_TOKEN_LAYER + HEAD) + 2 * CORE_PER_POSITION * (7 + 8 + 9)
    assert gen["parts"]["language_model"] == out["total"] == gen["total"]
    assert gen["new_tokens"] == 4 and out["inputs"]["new_tokens"] == 4 and gen["prompts"] == [6]


def test_one_token_is_the_prefill_alone(tiny):
    gen = _json("flops", "--model", tiny, "--seq-len", "6", "--new-tokens", "1", "--causal", "full")["generation"]
    assert gen["decode"]["language_model"] == 0
    assert gen["prefill"]["language_model"] == 2 * (6 * PER_TOKEN_LAYER + CORE_PER_POSITION * 36) + HEAD


def test_many_prompts_add_up(tiny):
    """--seq-len S --samples B: B prompts of S; --seq-lens: one prompt per length (each its own cache)."""
    one = _json("flops", "--model", tiny, "--seq-len", "6", "--new-tokens", "4")["total"]
    three = _json("flops", "--model", tiny, "--seq-len", "6", "--samples", "3", "--new-tokens", "4")
    assert three["total"] == 3 * one and three["generation"]["new_tokens"] == 12
    nine = _json("flops", "--model", tiny, "--seq-len", "9", "--new-tokens", "4")["total"]
    both = _json("flops", "--model", tiny, "--seq-lens", "6,9", "--new-tokens", "4")
    assert both["total"] == one + nine and both["generation"]["prompts"] == [6, 9]


def test_the_command_is_the_rl_generation_phase():
    """The same function the RL phases use: the command's parts equal rl_step_flops' generation phase."""
    from vlm_perf.arch import load_model
    from vlm_perf.flops.generation import rl_step_flops

    out = _json(*VLM, "--new-tokens", "16")
    step = rl_step_flops(load_model("qwen2.5-vl-7b"), [1024], [16], image_grids=[(1, 32, 32)])
    assert out["generation"]["parts"] == step.phases["generation"]
    assert out["generation"]["parts"]["vision_tower"] > 0 and out["generation"]["decode"]["vision_tower"] == 0


def test_image_sizes_go_through_the_family_processor_rule():
    """--image-size derives the media as `flops` does (the JSON echoes them); the count equals the one by grid."""
    by_size = _json("flops", "--model", "qwen2.5-vl-7b", "--seq-len", "1024", "--image-size", "448,448",
                    "--new-tokens", "8")
    grid = by_size["media"][0]["grid"]
    assert by_size["inputs"]["grids"] == [grid] and by_size["media"][0]["visual_tokens"] == 256
    by_grid = _json("flops", "--model", "qwen2.5-vl-7b", "--seq-len", "1024", "--grid", ",".join(map(str, grid)),
                    "--new-tokens", "8")
    assert by_size["generation"]["parts"] == by_grid["generation"]["parts"]


def test_an_adapter_runs_its_forward_on_every_prefill_and_decode_token(tiny, tmp_path):
    """LoRA r=2 on q_proj and v_proj of both layers: 2·r·(64 + 64) and 2·r·(64 + 32) per token per layer, on the
    6 prompt positions and the 3 decode tokens (nothing else changes)."""
    (tmp_path / "adapter_config.json").write_text(json.dumps({"peft_type": "LORA", "r": 2,
                                                              "target_modules": ["q_proj", "v_proj"]}))
    plain = _json("flops", "--model", tiny, "--seq-len", "6", "--new-tokens", "4")["generation"]
    lora = _json("flops", "--model", tiny, "--seq-len", "6", "--new-tokens", "4", "--adapter", tmp_path)
    per_token = 2 * (2 * 2 * (64 + 64) + 2 * 2 * (64 + 32))
    gen = lora["generation"]
    assert gen["prefill"]["language_model"] - plain["prefill"]["language_model"] == 6 * per_token
    assert gen["decode"]["language_model"] - plain["decode"]["language_model"] == 3 * per_token
    assert lora["adapter_config"]["r"] == 2 and any("adapter" in n for n in lora["notes"])


def test_table_names_every_part():
    r = cli(*VLM, "--new-tokens", "16", env={"COLUMNS": "160"})
    assert r.returncode == 0, r.stderr
    for word in ("generate 16 token(s)", "vision_tower", "projector", "language_model", "prefill", "decode",
                 "per generated token"):
        assert word in r.stdout


@pytest.mark.parametrize("value", ["0", "-3", "1.5", "abc", "1e3", "", "67108865", "99999999999999999999999999"])
def test_bad_token_counts_are_one_line(value):
    r = cli(*VLM, "--new-tokens", value)
    assert r.returncode == 2, (value, r.stdout)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "--new-tokens must be a whole number of tokens from 1 to 67,108,864" in lines[0]


def test_the_token_bound_is_the_manifest_sequence_bound():
    from vlm_perf.flops.generation import MAX_NEW_TOKENS
    from vlm_perf.ingest.runconfig import INT_MAX

    assert MAX_NEW_TOKENS == INT_MAX["seq_length"]
    assert cli(*VLM, "--new-tokens", str(MAX_NEW_TOKENS), "--json").returncode == 0  # the bound itself is valid


@pytest.mark.parametrize("extra, message", [
    (("--mode", "forward"), "drop --mode"),
    (("--convention", "megatron-lm"), "drop --convention"),
    (("--frozen", "vision_tower"), "drop --frozen"),
    (("--trainable", "lm"), "drop --trainable"),
    (("--input-require-grads",), "drop --input-require-grads"),
    (("--qlora",), "give --adapter"),
    (("--log-tflops", "100", "--step-time", "1"), "drop --log-tflops"),
])
def test_training_flags_are_refused_by_name(extra, message):
    r = cli(*VLM, "--new-tokens", "8", *extra)
    assert r.returncode == 2 and message in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr


def test_too_many_prompts_is_one_line():
    r = cli(*VLM, "--samples", "65537", "--new-tokens", "8")
    assert r.returncode == 2 and "65,537 prompts is over the bound of 65,536" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


def test_packing_audio_and_dora_are_refused(tmp_path):
    r = cli("flops", "--model", "qwen2.5-vl-7b", "--seq-lens", "100,200", "--samples", "1", "--new-tokens", "8")
    assert r.returncode == 2 and "drop --samples" in r.stderr
    r = cli("flops", "--model", "qwen2.5-omni-7b", "--seq-len", "512", "--audio-frames", "300", "--new-tokens", "8")
    assert r.returncode == 2 and "audio prompt" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    (tmp_path / "adapter_config.json").write_text(json.dumps({"peft_type": "LORA", "r": 4, "use_dora": True,
                                                              "target_modules": ["q_proj", "v_proj"]}))
    r = cli(*VLM, "--new-tokens", "8", "--adapter", tmp_path)
    assert r.returncode == 2 and "DoRA" in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_a_sliding_window_model_with_a_long_generation_is_closed_form():
    """Gemma 3's sliding layers: the decode sum over a million steps is counted in closed form (no loop per step)
    and equals the per-step sum the module docstring states, here on a short case."""
    from vlm_perf.flops.generation import _windowed

    for p, n, w in ((6, 4, 8), (1, 1, 5), (3, 0, 2), (10, 20, 12), (20, 5, 12), (1, 30, 1)):
        assert _windowed(p, n, w) == sum(min(p + j, w) for j in range(1, n))
    out = _json("flops", "--model", "gemma3-4b", "--seq-len", "4096", "--new-tokens", "1000000")
    assert out["generation"]["new_tokens"] == 1_000_000 and out["total"] > 0
