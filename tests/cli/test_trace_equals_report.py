"""`vlm-perf trace TRACE --run RUN` and `vlm-perf report RUN` open the run the same way (`vlm_perf.run.core.open_run`):
the FLOPs per part, the peak and the world size of the trace command are the report's trace section's, whatever
decides the regime (an adapter found in the folder, a frozen part given by flag, the attention core).

Before, `trace` read only run.yaml's `frozen`: with the LoRA run's adapter_config.json beside the bundled trace, it
printed LM MLP 649,986,048 FLOPs where the report printed 680,454,144 (the adapter's FLOPs and gradient flow).
"""

from __future__ import annotations

import json
import shutil

import pytest

from tests.support import SAMPLE_LOGS, invoke_cli

TRACE_RUN = SAMPLE_LOGS / "qwen2-vl-tiny-trace"
ADAPTER = SAMPLE_LOGS / "qwen2-vl-tiny-lora-real" / "adapter_config.json"

# perturbation -> (files added to the run folder, flags given to both commands)
CASES = {
    "as bundled": ((), ()),
    "adapter in the folder": ((ADAPTER,), ()),
    "frozen tower by flag": ((), ("--frozen", "vision_tower")),
    "full attention core and a peak": ((), ("--causal", "full", "--peak-tflops", "50")),
}


def _flops(parts: list[dict]) -> dict[str, float | None]:
    return {p["part"]: p["flops"] for p in parts}


@pytest.fixture(scope="module")
def both(tmp_path_factory):
    """case -> (trace --json payload, the report's summary.json trace section)."""
    out = {}
    for case, (files, flags) in CASES.items():
        root = tmp_path_factory.mktemp("case")
        run = root / "run"
        shutil.copytree(TRACE_RUN, run)
        for f in files:
            shutil.copy(f, run / f.name)
        traced = invoke_cli("trace", run / "trace", "--run", run, "--json", *flags)
        assert traced.exit_code == 0, traced.output
        reported = invoke_cli("report", run, "-o", root / "out", *flags)
        assert reported.exit_code == 0, reported.output
        out[case] = (json.loads(traced.stdout), json.loads((root / "out" / "summary.json").read_text())["trace_parts"])
    return out


@pytest.mark.parametrize("case", list(CASES))
def test_trace_flops_per_part_are_the_reports(both, case):
    traced, section = both[case]
    assert _flops(traced["parts"]) == _flops(section["parts"])
    assert sum(f for f in _flops(traced["parts"]).values() if f) == section["flops_total"]
    peak = section["peak_tflops"]
    assert traced["peak_flops"] == (peak * 1e12 if peak is not None else None)
    assert [p["mfu"] for p in traced["parts"]] == [p["mfu"] for p in section["parts"]]


def test_each_perturbation_moves_the_numbers(both):
    """The cases are not vacuous: each changes the FLOPs per part (or the MFU) against the bundled run."""
    base, _ = both["as bundled"]
    for case in ("adapter in the folder", "frozen tower by flag", "full attention core and a peak"):
        traced, _ = both[case]
        moved = _flops(traced["parts"]) != _flops(base["parts"]) or traced["peak_flops"] != base["peak_flops"]
        assert moved, case
    # hand check of the adapter case: LoRA adds FLOPs to the LM MLP (adapter matmuls and the gradient flow)
    lm_mlp = {case: _flops(both[case][0]["parts"])["language_model.mlp"] for case in ("as bundled",
                                                                                         "adapter in the folder")}
    assert lm_mlp["adapter in the folder"] > lm_mlp["as bundled"]


def test_a_run_folder_without_a_log_still_gives_the_flops(tmp_path):
    """A profiled run shipped as run.yaml + config.json + metadata + traces (no console log) opens for `trace`:
    the configuration comes from run.yaml and the checkpoint's config.json, the FLOPs from the metadata."""
    run = tmp_path / "run"
    shutil.copytree(TRACE_RUN, run)
    (run / "train.log").unlink()
    with_log = invoke_cli("trace", TRACE_RUN / "trace", "--run", TRACE_RUN, "--json")
    without = invoke_cli("trace", run / "trace", "--run", run, "--json")
    assert without.exit_code == 0, without.output
    assert _flops(json.loads(without.stdout)["parts"]) == _flops(json.loads(with_log.stdout)["parts"])
    assert json.loads(without.stdout)["flops_source"] == "metadata"
