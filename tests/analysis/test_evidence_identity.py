"""Identity checks compare architectures, not strings: one honest run is never failed for how it names its model,
for a LoRA run's own trainable count, or for a tower a selector / adapter freezes (issue 34, false alarms)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from vlm_perf.analysis import evidence as ev
from vlm_perf.arch import load_model
from vlm_perf.arch.params import count_params
from vlm_perf.arch.trainability import Trainability
from vlm_perf.ingest.adapter_config import read_adapter_config
from vlm_perf.ingest.runconfig import RunConfig
from vlm_perf.run.regime import Regime

from tests.support import run_main

ROOT = Path(__file__).resolve().parents[2]
LORA = ROOT / "sample_logs" / "qwen2-vl-tiny-lora-real"
PRESETS = ROOT / "vlm_perf" / "arch" / "presets"
SPEC_7B = load_model("qwen2.5-vl-7b")
MOE = load_model("qwen3-vl-30b-a3b")


def _ev(spec, args=None, **kw):
    files = [ev.FileRange("train.log", 5, 200, arguments={k: str(v) for k, v in (args or {}).items()})]
    return ev.Evidence(spec=spec, config=kw.pop("config", RunConfig()), files=files, **kw)


# ---- names: one architecture under many names --------------------------------------------------
@pytest.mark.parametrize("spec,logged", [
    (MOE, "Qwen/Qwen3-VL-30B-A3B-Thinking"), (MOE, "Qwen/Qwen3-VL-30B-A3B-Instruct-FP8"),
    (MOE, "qwen3-vl-30b-a3b-instruct-awq"), (SPEC_7B, "acme/qwen2.5-vl-7b-docvqa-sft"),
    (SPEC_7B, "/ckpt/Qwen2_5-VL-7B-Instruct-finetuned-v2/"), (SPEC_7B, "Qwen2.5-VL-7B-Instruct-bf16"),
])
def test_release_variants_and_fine_tunes_are_the_same_architecture(spec, logged):
    for key in ("hf_model_id", "model_name", "model_name_or_path"):
        check = ev.log_vs_model(_ev(spec, {key: logged}))
        assert check.status != "fail", check.summary


def test_a_model_given_as_config_json_is_judged_by_its_architecture(tmp_path):
    """``--model path/to/config.json``: the model's name is ``config``; the log's name is compared by parameters."""
    (tmp_path / "config.json").write_bytes((PRESETS / "qwen2.5-vl-7b.json").read_bytes())
    spec = load_model(str(tmp_path / "config.json"))
    assert spec.name != "qwen2.5-vl-7b"
    ok = ev.log_vs_model(_ev(spec, {"hf_model_id": "Qwen/Qwen2.5-VL-7B-Instruct"}))
    assert ok.status == "ok" and "qwen2.5-vl-7b's architecture" in ok.summary
    # another architecture under its own name still fails, with the size of the difference
    bad = ev.log_vs_model(_ev(spec, {"hf_model_id": "Qwen/Qwen2.5-VL-72B-Instruct"}))
    theirs, ours = count_params(load_model("qwen2.5-vl-72b")).total, count_params(spec).total
    assert bad.status == "fail" and f"{100 * (ours / theirs - 1):+.1f}%" in bad.summary


@pytest.mark.parametrize("logged,used", [("acme/qwen2.5-vl-72b-docvqa-sft", SPEC_7B),
                                         ("Qwen3-VL-8B-Thinking", MOE), ("Qwen2.5-VL-7B-Instruct-FP8", MOE)])
def test_another_architecture_behind_a_variant_name_still_fails(logged, used):
    check = ev.log_vs_model(_ev(used, {"hf_model_id": logged}))
    assert check.status == "fail" and "preset" in check.summary, check.summary


# ---- trainable parameters under the stated regime ----------------------------------------------
def _lora_regime(spec):
    adapter = read_adapter_config(LORA / "adapter_config.json")
    return Regime(Trainability.build(adapter=adapter), "adapter_config.json", stated=True,
                  description="LoRA r=4")


def test_a_lora_runs_trainable_count_is_the_adapters():
    spec = load_model(str(LORA / "config.json"))
    regime = _lora_regime(spec)
    lo, hi = ev.regime_trainable(spec, regime)
    assert lo == hi == 16_384  # the count the real run's PEFT printed for r=4 on every LM Linear
    for printed, status in ((16_384, "ok"), (16_384 + 200, "ok"), (32_768, "fail"), (count_params(spec).total, "fail")):
        check = ev.log_vs_model(_ev(spec, regime=regime, parameter_counts=[("train.log", "trainable", printed, 3)]))
        assert check.status == status, (printed, check.summary)
    bad = ev.log_vs_model(_ev(spec, regime=regime, parameter_counts=[("train.log", "trainable", 32_768, 3)]))
    assert "train.log:3 prints 32,768" in bad.summary and "trains 16,384 (+100.0%)" in bad.summary


def test_selectors_that_train_part_of_a_part_give_a_range():
    regime = Regime(Trainability.build(trainable=["language_model[0:4]"]), "run.yaml", stated=True)
    lo, hi = ev.regime_trainable(SPEC_7B, regime)
    pc = count_params(SPEC_7B)
    assert lo == 0 and hi == pc.lm + pc.audio
    inside = ev.log_vs_model(_ev(SPEC_7B, regime=regime, parameter_counts=[("t.log", "trainable", hi // 7, 1)]))
    assert inside.status == "ok"
    whole = Regime(Trainability.build(trainable=["language_model"]), "run.yaml", stated=True)
    assert ev.regime_trainable(SPEC_7B, whole) == (pc.lm, pc.lm)


# ---- freeze_vit against a regime that freezes the tower ----------------------------------------
@pytest.mark.parametrize("regime", [
    Trainability.build(trainable=["language_model"]), Trainability.build(frozen=["vision_tower"]),
    Trainability.build(trainable=["language_model", "projector"]),
])
def test_freeze_vit_agrees_with_a_selector_that_freezes_the_tower(regime):
    for key in ("freeze_vit", "freeze_vision_tower"):
        evidence = _ev(SPEC_7B, {key: "true"}, regime=Regime(regime, "run.yaml", stated=True),
                       config=RunConfig(frozen=()))
        check = ev._training_regime(_inputs(evidence))
        assert check.status == "ok", check.summary


def test_freeze_vit_with_a_regime_that_trains_the_tower_fails():
    evidence = _ev(SPEC_7B, {"freeze_vit": "true"}, config=RunConfig(frozen=()),
                   regime=Regime(Trainability.build(trainable=["vision_tower[0:2]"]), "run.yaml", stated=True))
    assert ev._training_regime(_inputs(evidence)).status == "fail"


def _inputs(evidence):
    from types import SimpleNamespace

    from vlm_perf.analysis.checks import CheckInputs

    run = SimpleNamespace(gaps={}, crosscheck={}, convention_summary=lambda: {})
    return CheckInputs(run, evidence=evidence)  # type: ignore[arg-type]


# ---- near miss: the real LoRA run, its count, freeze_vit and a fine-tune's name pass --strict -----------------
def test_the_lora_run_with_its_own_statements_passes_strict(tmp_path):
    run = tmp_path / "lora"
    shutil.copytree(LORA, run)
    log = run / "train.log"
    log.write_text("  model_name_or_path ........ acme/tiny-qwen2-vl-docvqa\n  freeze_vit ........ true\n"
                   "  Number of trainable parameters = 16,384\n" + log.read_text())
    done = run_main("report", run, "--strict", "-o", tmp_path / "out")
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    text = (tmp_path / "out" / "report.md").read_text()
    assert "trainable parameters under the stated regime" in text
