"""CLI contract of the training-regime options of `vlm-perf flops`: --adapter, --trainable, layer/kind --frozen,
--qlora, --input-require-grads (JSON shape, the full-training reference, errors as one line + exit 2)."""

import json

from tests.support import run_cli, run_main as cli  # in-process entry point; run_cli: a real subprocess

BASE = ("flops", "--model", "qwen2.5-vl-7b", "--seq-len", "4096", "--grid", "1,64,64")


def test_adapter_folder_json(tmp_path):
    ckpt = tmp_path / "run" / "checkpoint-500"
    ckpt.mkdir(parents=True)
    (ckpt / "adapter_config.json").write_text(json.dumps({
        "peft_type": "LORA", "r": 16, "lora_alpha": 32,
        "target_modules": r"model\.language_model\..*\.(q_proj|k_proj|v_proj|o_proj)"}))
    r = run_cli(*BASE, "--adapter", tmp_path / "run", "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    regime = out["regime"]
    assert regime["adapted_modules"] == 4 * 28
    assert regime["adapter_params"] == 28 * 16 * ((3584 + 3584) * 2 + (3584 + 512) * 2)  # q, o; k, v (4 kv heads)
    assert regime["by_part"]["vision_tower"]["input_grad"] == 0  # nothing below the LM trains
    assert regime["by_part"]["vision_tower"]["weight_grad"] == 0
    assert out["total"] < regime["full_training_total"]
    assert abs(sum(regime["parts"].values()) - out["total"]) < 1e-6 * out["total"]


def test_selectors_and_whole_parts_agree():
    a = json.loads(cli(*BASE, "--frozen", "vision_tower", "--json").stdout)
    b = json.loads(cli(*BASE, "--trainable", "projector,lm", "--json").stdout)
    assert a["total"] == b["total"] and a["components"] == b["components"]
    c = json.loads(cli(*BASE, "--frozen", "vision_tower[:-4]", "--json").stdout)
    assert a["total"] < c["total"] < json.loads(cli(*BASE, "--json").stdout)["total"]


def test_regime_errors_are_one_line():
    for args, msg in (((*BASE, "--trainable", "lm[x]"), "not an integer"),
                      ((*BASE, "--adapter", "/nonexistent/adapter_config.json"), "not found"),
                      ((*BASE, "--qlora"), "give --adapter"),
                      ((*BASE, "--trainable", "lm", "--convention", "megatron-lm"), "--convention exact")):
        r = cli(*args)
        assert r.returncode == 2, (args, r.stdout, r.stderr)
        assert msg in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr


def test_adapter_under_veomni_convention(tmp_path):
    # VeOmni's LoRA branch (vlm_perf.flops.conventions.veomni): LM base x4 + adapters, the untouched ViT forward-only
    (tmp_path / "adapter_config.json").write_text(json.dumps({"peft_type": "LORA", "r": 16,
                                                              "target_modules": ["q_proj", "v_proj"]}))
    r = cli(*BASE, "--adapter", tmp_path, "--convention", "veomni", "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    full = json.loads(cli(*BASE, "--convention", "veomni", "--json").stdout)
    assert out["convention"] == "veomni" and 0 < out["total"] < full["total"]
    assert out["vision"] == full["vision"] / 3  # ViT linear x6 -> x2, core x12 -> x4 (the whole ViT forward-only)
    regex = tmp_path / "regex"
    regex.mkdir()
    (regex / "adapter_config.json").write_text(json.dumps({"peft_type": "LORA", "r": 16, "target_modules": ".*q_proj"}))
    bad = cli(*BASE, "--adapter", regex, "--convention", "veomni")
    assert bad.returncode == 2 and "0 FLOPs" in bad.stderr and len(bad.stderr.strip().splitlines()) == 1, bad.stderr
