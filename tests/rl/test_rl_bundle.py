"""The bundled REAL GRPO run (sample_logs/qwen2-vl-tiny-grpo-real): `vlm-perf report` against torch's measured FLOPs.

scripts/make_real_grpo.py ran TRL's GRPOTrainer on a tiny Qwen2-VL (CPU, eager attention) while
``GRPORecorder`` wrote ``rl/`` and torch's ``FlopCounterMode`` measured every FLOP, labelled by phase with the
script's own hooks (``measured_flops.json``). The report's RL section must equal that measurement exactly, per
step, per phase and per part; the only hand arithmetic here is the head difference between the RL update and the
training-only accounting.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
RUN = ROOT / "sample_logs" / "qwen2-vl-tiny-grpo-real"
PART = {"tower": "vision_tower", "merger": "projector", "lm": "language_model"}

pytestmark = pytest.mark.skipif(not RUN.is_dir(), reason="sample_logs/qwen2-vl-tiny-grpo-real not present")


def _measured() -> dict:
    return json.loads((RUN / "measured_flops.json").read_text())


def _by_part(entry: dict) -> dict[str, int]:
    """forward.x + backward.x, named as the report names parts (rope would be a KeyError: there is none)."""
    out = {p: 0 for p in PART.values()}
    for key, value in entry.items():
        out[PART[key.split(".", 1)[1]]] += value
    return out


def test_bundle_is_labelled_real_and_small():
    names = {p.name for p in RUN.iterdir()}
    assert {"train.log", "metadata", "rl", "measured_flops.json", "config.json", "run.yaml", "README.md",
            "trainability.json"} <= names
    assert sum(p.stat().st_size for p in RUN.rglob("*") if p.is_file()) < 300 * 1024
    assert not (RUN / "_trainer").exists()
    manifest = yaml.safe_load((RUN / "run.yaml").read_text())
    assert manifest["synthetic"] is False and manifest["num_gpus"] == 1
    assert (RUN / "run.yaml").read_text().startswith("# REAL run")
    readme = (RUN / "README.md").read_text()
    assert "REAL" in readme and "scripts/make_real_grpo.py" in readme and "not synthetic" in readme
    measured = _measured()
    assert measured["versions"]["trl"] and measured["beta"] > 0 and measured["num_iterations"] == 2
    assert sum(s["flops"] for s in measured["per_step"]) == measured["total_flops"]
    assert sum(measured["by_phase"].values()) == measured["total_flops"] == sum(measured["by_part"].values())
    for step in measured["per_step"]:
        assert sum(sum(p.values()) for p in step["by_phase"].values()) == step["flops"]
    log = (RUN / "train.log").read_text()
    assert log.count("{'loss'") == 6 and "train_runtime" in log


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    from tests.support import run_cli

    out = tmp_path_factory.mktemp("grpo")
    r = run_cli("report", RUN, "-o", out, "--causal", "full")
    assert r.returncode == 0, r.stderr
    assert "Traceback" not in r.stderr
    (out / "terminal.txt").write_text(r.stdout + r.stderr)
    return out, json.loads((out / "summary.json").read_text())


def test_report_equals_measured_per_step_phase_and_part(report):
    _, summary = report
    rl = summary["rl"]
    measured = _measured()
    assert rl["algorithm"] == "grpo" and rl["framework"] == "trl" and rl["iterations"] == 6
    # TRL's logged completions/mean_length (3 rollouts) agrees with the recorded responses
    assert rl["log_response_lengths_checked"] == 3 and not any("RL" in m for m in summary["messages"])
    assert rl["flops_total"] == measured["total_flops"]
    steps = {s["iteration"]: s for s in measured["per_step"]}
    assert [it["iteration"] for it in rl["per_iteration"]] == sorted(steps) == list(range(1, 7))
    for it in rl["per_iteration"]:
        step = steps[it["iteration"]]
        assert it["flops"] == step["flops"], it["iteration"]
        assert it["phases"] == {p: sum(v.values()) for p, v in step["by_phase"].items()}, it["iteration"]
        whole = {p: 0 for p in PART.values()}
        for entry in step["by_phase"].values():
            for part, value in _by_part(entry).items():
                whole[part] += value
        assert it["parts"] == whole, it["iteration"]
    # run totals per phase and part
    for phase, entry in rl["phases"].items():
        if phase == "other":
            assert entry["flops"] == 0
            continue
        assert entry["flops"] == measured["by_phase"][phase], phase
        summed = {p: 0 for p in PART.values()}
        for step in measured["per_step"]:
            for part, value in _by_part(step["by_phase"].get(phase, {})).items():
                summed[part] += value
        assert entry["parts"] == summed, phase
    # the structure of num_iterations=2: a rollout (generation, old, ref) every other step, the update in each
    assert [sorted(it["phases"]) for it in rl["per_iteration"]] == [
        ["generation", "old_log_prob", "ref", "update_actor"], ["update_actor"]] * 3


def test_time_split_rates_and_headline(report):
    out, summary = report
    rl = summary["rl"]
    for it in rl["per_iteration"]:  # the phases (with ``other``, the rest) account for the whole step
        assert sum(it["seconds"].values()) == pytest.approx(it["step_s"], rel=1e-9)
    assert rl["step_seconds"] == pytest.approx(sum(it["step_s"] for it in rl["per_iteration"]))
    for name, phase in rl["phases"].items():
        assert phase["time_share"] == pytest.approx(phase["seconds"] / rl["step_seconds"])
        if phase["flops"]:
            assert phase["tflops_per_gpu"] == pytest.approx(phase["flops"] / phase["seconds"] / 1e12), name
    gen = rl["phases"]["generation"]
    headline = f"GRPO: generation {100 * gen['time_share']:.1f}% of the step time"
    assert rl["headline"] == headline
    md = (out / "report.md").read_text()
    assert headline in md and "Training-only accounting" in md
    # a CPU run's rates in the report's one display unit (the conventions table's), scaled from TFLOP/s
    unit = re.search(r"\| convention \| (\w+/s)/GPU \|", md).group(1)
    assert unit != "TFLOP/s" and f"| {unit}/GPU |" in md.split("## RL steps", 1)[1]
    scale = {"GFLOP/s": 1e3, "MFLOP/s": 1e6}[unit]
    assert f"| {scale * gen['tflops_per_gpu']:,.1f} |" in md.split("## RL steps", 1)[1]
    assert headline in (out / "report.html").read_text()
    assert headline in (out / "terminal.txt").read_text()
    assert summary["figures"]["rl_phases.png"] == "drawn" and (out / "rl_phases.png").stat().st_size > 0
    assert "](rl_phases.png)" in md.split("## RL steps", 1)[1]
    # the headline is near the top: before the first section heading after the checks
    assert md.index(headline) < md.index("## RL steps")


def test_training_only_accounting_beside_it_by_hand(report):
    """The training metadata counts each update microbatch as a plain training step: the head at every position,
    forward + 2 gradients. TRL's fused head projects every position but the last and recomputes its logits in
    backward: 4 passes over S - 1 positions. Per row of S tokens: 2·h·V·(4(S - 1) - 3S) = 2·h·V·(S - 4) more."""
    _, summary = report
    rl = summary["rl"]
    config = json.loads((RUN / "config.json").read_text())["text_config"]
    head = 2 * config["hidden_size"] * config["vocab_size"]
    rows = [json.loads(line) for line in (RUN / "metadata" / "metadata-rank00000.jsonl").read_text().splitlines()]
    assert rl["update_flops"] - rl["training_only_flops"] == sum(head * (s - 4) for r in rows for s in r["seq_lens"])
    assert rl["training_only_flops"] == summary["conventions"]["exact"]["flops_total"]
    assert rl["training_only_share"] == pytest.approx(rl["training_only_flops"] / rl["flops_total"])


def test_recorded_shapes_agree_with_the_training_metadata():
    """What the recorder saw (prompt + response per row) is what MetadataCallback saw the update run on."""
    rows = {json.loads(line)["iteration"]: json.loads(line)
            for line in (RUN / "metadata" / "metadata-rank00000.jsonl").read_text().splitlines()}
    for line in (RUN / "rl" / "steps.jsonl").read_text().splitlines():
        step = json.loads(line)
        (update,) = step["update"]
        assert [p + n for p, n in zip(update["prompt_lens"], update["response_lens"])] == \
            rows[step["iteration"]]["seq_lens"]
        assert update["image_grid_thw"] == rows[step["iteration"]]["image_grid_thw"]
        if step["rollout"]:
            assert step["rollout"]["response_lens"] == [8, 8]
            assert step["rollout"]["generated_steps"] == [8]  # no decode step beyond the kept responses
            assert step["rollout"]["padded_prompt_len"] == [min(step["rollout"]["prompt_lens"])]  # no padding


def test_phase_mfu_with_a_stated_peak():
    """--peak-tflops (a CPU has no tabulated peak): every phase's MFU is its rate over that peak."""
    from vlm_perf.pipeline import load_run
    from vlm_perf.report.document import build_summary

    loaded = load_run(RUN, causal="full", peak_tflops=0.002)
    rl = build_summary(loaded.analysis, loaded.context)["rl"]
    for name, phase in rl["phases"].items():
        assert phase["mfu"] == pytest.approx(phase["tflops_per_gpu"] / 0.002), name
    assert rl["mfu"] == pytest.approx(rl["flops_total"] / rl["step_seconds"] / 1e12 / 0.002)
