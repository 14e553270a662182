"""The training regime in `vlm-perf report` / `compare` (issue 18, deliver item 3).

* whole-part freezing gives exactly today's numbers, over every bundled sample, whichever way it is spelled, and
  the same numbers (to float rounding) when spelled as module-kind selectors counted by the per-Linear walker;
* ``--adapter`` on the full-training REAL run counts what the REAL LoRA run measured (FlopCounterMode) on the
  same data: an independent check of the flag path;
* precedence command line > run.yaml > run folder, and contradictions named with the size of the FLOPs difference;
* compare shows both regimes side by side.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from vlm_perf.errors import ConfigError
from vlm_perf.pipeline import load_run
from tests.support import run_main  # the CLI entry point in-process (same exit statuses, one-line errors)

ROOT = Path(__file__).resolve().parents[2]
# every bundled run with a training log whose regime no file states (a trainability.json states one: the LoRA
# run's and the profiled run's, tested below and in tests/report/test_trace_section.py)
SAMPLES = sorted(p for p in (ROOT / "sample_logs").iterdir()
                 if p.is_dir() and any(p.glob("train.log*")) and not (p / "trainability.json").exists())
REAL = ROOT / "sample_logs" / "qwen2-vl-tiny-real"
LORA = ROOT / "sample_logs" / "qwen2-vl-tiny-lora-real"
ALL_KINDS = "attention+mlp+norms+embeddings+head"


def _exact(loaded) -> list[float]:
    return loaded.analysis.per_iteration.sort("iteration")["exact_total"].to_list()


@pytest.mark.parametrize("sample", SAMPLES, ids=lambda p: p.name)
def test_whole_part_freezing_gives_todays_numbers(sample):
    today = load_run(sample)
    frozen = tuple(today.context.run_config["frozen"])
    block = today.context.block("regime")
    assert (block is None) == (not frozen)  # no regime stated: no regime block
    if frozen:
        assert block["whole_parts"] is True and block["flops_per_iteration"] == pytest.approx(
            today.analysis.convention_summary()["exact"]["flops_total"] / today.analysis.per_iteration.height
            if today.analysis.selection.iterations().len() == today.analysis.per_iteration.height
            else block["flops_per_iteration"])
    # the same freezing spelled through --frozen aliases: the same code path, the same numbers to the bit
    if frozen:
        spelled = load_run(sample, frozen=["vit", "projector"] if frozen == ("vision",) else list(frozen))
        assert _exact(spelled) == _exact(today)
    # the same regime as module-kind selectors: counted by the per-Linear walker (vlm_perf.flops.regime)
    trainable = [f"lm.{ALL_KINDS}"]
    if today.spec.vision is not None and "vision" not in frozen:
        trainable += [f"vision_tower.{ALL_KINDS}", f"projector.{ALL_KINDS}"]
    walked = load_run(sample, trainable=trainable, frozen=None)
    assert walked.context.run_config["frozen"] == list(frozen)  # run.yaml's frozen parts still apply
    assert _exact(walked) == pytest.approx(_exact(today), rel=1e-12)
    regime = walked.context.block("regime")
    assert regime["full_training_over_regime"] == pytest.approx(
        1.0 if not frozen else regime["full_training_flops_per_iteration"] / regime["flops_per_iteration"])


def test_adapter_flag_counts_what_the_real_lora_run_measured():
    """The full-training run's data under ``--adapter`` (the LoRA run's adapter_config.json): the same model, data
    and seed as the LoRA run, so its exact FLOPs per step are what FlopCounterMode measured in the LoRA run."""
    loaded = load_run(REAL, causal="full", adapter=str(LORA / "adapter_config.json"))
    measured = json.loads((LORA / "measured_flops.json").read_text())["per_step"]
    assert _exact(loaded) == [s["flops"] for s in measured]
    regime = loaded.context.block("regime")
    assert regime["description"] == "LoRA r=4 on LM attention + MLP, tower and projector frozen"
    assert regime["source"] == "the command line"


def test_command_line_beats_the_run_folder(tmp_path):
    """--trainable lm on the LoRA run: full LM training stated on the command line wins over trainability.json;
    the observed LoRA regime is named as a contradiction with its FLOPs difference."""
    stated = load_run(LORA, causal="full", trainable=["lm"])
    lora = load_run(LORA, causal="full")
    regime = stated.context.block("regime")
    assert regime["source"] == "the command line + adapter_config.json"
    # the found adapter completes a stated regime that names none: LoRA on top of a fully trained LM
    assert regime["description"].startswith("LoRA r=4 on LM attention + MLP, LM weights trained")
    used = sum(_exact(stated)[i] for i in range(20))
    assert used > sum(_exact(lora))
    (text,) = regime["contradictions"]
    assert "trainability.json" in text and "LoRA r=4" in text
    sel = stated.analysis.selection.iterations().to_list()
    per = dict(zip(range(1, 21), _exact(stated)))
    other = dict(zip(range(1, 21), _exact(lora)))
    pct = 100 * (sum(other[i] for i in sel) / sum(per[i] for i in sel) - 1)
    assert f"{pct:+.1f}% FLOPs" in text
    assert any(m.startswith("training regime contradiction: ") for m in stated.analysis.messages)


def test_run_yaml_regime_and_its_contradiction(tmp_path):
    """run.yaml says the vision is frozen (LM fully trained); trainability.json shows LoRA only: run.yaml wins, the
    difference is named."""
    run = tmp_path / "run"
    shutil.copytree(LORA, run)
    (run / "adapter_config.json").unlink()  # the record carries the adapter itself
    yaml = (run / "run.yaml").read_text() + "frozen: [vision]\n"
    (run / "run.yaml").write_text(yaml)
    loaded = load_run(run, causal="full")
    regime = loaded.context.block("regime")
    assert regime["source"] == "run.yaml" and regime["whole_parts"] is True
    assert regime["description"] == "LM weights trained, tower and projector frozen"
    # whole-part freezing from run.yaml: exactly the numbers of --frozen vision on the same data
    assert _exact(loaded) == _exact(load_run(REAL, causal="full", frozen=["vision"]))
    (text,) = regime["contradictions"]
    assert text.startswith("trainability.json (observed by the callback) says LoRA r=4") and "% FLOPs" in text


def test_run_yaml_adapter_key_relative_to_the_manifest(tmp_path):
    run = tmp_path / "run"
    shutil.copytree(REAL, run)
    shutil.copy(LORA / "adapter_config.json", tmp_path / "lora.json")
    (run / "run.yaml").write_text((run / "run.yaml").read_text() + "adapter: ../lora.json\nqlora: true\n")
    loaded = load_run(run, causal="full")
    regime = loaded.context.block("regime")
    assert regime["description"].startswith("QLoRA r=4 on LM attention + MLP")
    assert regime["source"] == "run.yaml"
    # QLoRA counts the base matmuls at the dequantised weights' FLOPs: the LoRA numbers
    assert _exact(loaded) == [s["flops"] for s in json.loads((LORA / "measured_flops.json").read_text())["per_step"]]


@pytest.mark.parametrize("args, needle", [
    (["--trainable", "lm[1:2:3]"], "no step"),
    (["--frozen", "eyes"], "unknown part"),
    (["--adapter", "/nonexistent/adapter_config.json"], "adapter config not found"),
])
def test_bad_regime_input_is_one_line(args, needle, tmp_path):
    r = run_main("report", str(REAL), "-o", str(tmp_path / "out"), *args)
    assert r.returncode != 0
    assert needle in r.stderr and "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_bad_selector_in_run_yaml_names_the_key(tmp_path):
    run = tmp_path / "run"
    shutil.copytree(REAL, run)
    (run / "run.yaml").write_text((run / "run.yaml").read_text() + "trainable: [lm.qkv]\n")
    with pytest.raises((ConfigError, ValueError), match="trainable: .*unknown module kind"):
        load_run(run)


def test_compare_across_regimes(tmp_path, cli):
    r = cli("compare", str(REAL), str(LORA), "--causal", "full", "-o", str(tmp_path / "cmp"),
            env={"COLUMNS": "200"})
    assert r.exit_code == 0, r.output
    cmp = json.loads((tmp_path / "cmp" / "compare.json").read_text())
    a, b = cmp["runs"]["a"]["regime"], cmp["runs"]["b"]["regime"]
    assert a["description"] == "full training (no regime stated)"
    assert b["description"] == "LoRA r=4 on LM attention + MLP, tower and projector frozen"
    # B's full-training accounting is A's exact count: the same data, every weight trained
    facts = cmp["step"]["exact_flops_per_iteration"]
    assert b["full_training_over_regime"] * facts["b"] == pytest.approx(facts["a"], rel=1e-12)
    md = (tmp_path / "cmp" / "compare.md").read_text().replace("\\", "")
    assert "Regime: A **full training (no regime stated)**; B **LoRA r=4" in md and "the regimes differ" in md
    assert "the regimes differ" in " ".join(r.output.split())


def test_compare_per_run_adapter_flag(tmp_path, cli):
    """--adapter-b: the same run counted under two regimes side by side; exact B/A is the inverse of B's
    full-training factor, and the conventions that ignore the regime are unchanged."""
    r = cli("compare", str(REAL), str(REAL), "--adapter-b", str(LORA), "--causal", "full",
            "-o", str(tmp_path / "cmp"))
    assert r.exit_code == 0, r.output
    cmp = json.loads((tmp_path / "cmp" / "compare.json").read_text())
    b = cmp["runs"]["b"]["regime"]
    assert b["source"] == "the command line" and b["description"].startswith("LoRA r=4")
    exact = cmp["conventions"]["exact"]
    assert exact["b"] / exact["a"] == pytest.approx(1 / b["full_training_over_regime"], rel=1e-9)
    assert cmp["conventions"]["megatron-lm"]["a"] == cmp["conventions"]["megatron-lm"]["b"]


def test_an_empty_frozen_list_that_the_record_contradicts_is_a_warning(tmp_path):
    """run.yaml's ``frozen: []`` reads "nothing frozen"; the callback's record shows tower and projector frozen (LoRA
    on the LM): the training-regime check says they disagree and which one is counted. The bundled sample states no
    frozen list, so it agrees with its own record."""
    run = tmp_path / "run"
    shutil.copytree(LORA, run)
    (run / "run.yaml").write_text((run / "run.yaml").read_text() + "frozen: []\n")
    check = next(c for c in load_run(run, causal="full").analysis.checks if c.name == "training_regime")
    assert check.status == "warn"
    assert check.summary.startswith("training regime: run.yaml says frozen: [] (nothing frozen) but trainability.json")
    assert "says tower and projector frozen" in check.summary
    sample = next(c for c in load_run(LORA, causal="full").analysis.checks if c.name == "training_regime")
    assert sample.status == "ok" and "tower and projector frozen" in sample.summary
