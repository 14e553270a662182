"""`vlm-perf trace` on a trace that shows eager attention: counted `--causal half` (the default), the language
model's attention core is half of what the kernels computed, so the trace says so as a warning naming the evidence
and the fix (`--causal full`), never as a cross-check that looks like a pass.

The bundled trace (sample_logs/qwen2-vl-tiny-trace, its README: "Eager attention, float32") records the eager
core's ops inside ``language_model.attention``: ``aten::bmm`` (scores and values) and ``aten::_softmax``; with
``--causal full`` the matmul FLOPs the trace recorded (Input Dims) equal the exact FLOPs."""

from __future__ import annotations

import json
import shutil
from types import SimpleNamespace

import polars as pl
import pytest

from tests.support import SAMPLE_LOGS, invoke_cli
from vlm_perf.analysis.trace_checks import attention_core

TRACE_RUN = SAMPLE_LOGS / "qwen2-vl-tiny-trace"


def test_eager_trace_counted_causal_half_is_a_warning_with_the_fix():
    r = invoke_cli("trace", TRACE_RUN / "trace", "--run", TRACE_RUN)
    assert r.exit_code == 0, r.output
    text = " ".join(r.stdout.replace("\\_", "_").split())  # Markdown: "\_" is "_"
    assert "WARNING: eager attention counted causal half" in text
    assert "aten::bmm x" in text and "aten::_softmax x" in text  # the evidence, with its counts
    assert "Fix: rerun with --causal full" in text
    # the cross-check passes the other parts and points at the warning for the LM's attention (not a pass, and
    # not "FAILED ... expected for a fused attention core": the core is not fused)
    assert "match the exact FLOPs within 0.000% for 5 part(s); `language_model.attention` departs by 16.294%" in text
    assert "FAILED" not in text and "fused attention core (not recorded)" not in text
    assert text.count("eager attention counted causal half") == 1  # said once (not again among the notes)


def test_the_fix_removes_the_warning_and_the_shapes_then_agree():
    r = invoke_cli("trace", TRACE_RUN / "trace", "--run", TRACE_RUN, "--causal", "full")
    assert r.exit_code == 0, r.output
    text = " ".join(r.stdout.split())
    assert "WARNING" not in text
    assert "match the exact FLOPs within 0.000%" in text


@pytest.mark.slow
def test_json_carries_the_warning(tmp_path):
    half = json.loads(invoke_cli("trace", TRACE_RUN / "trace", "--run", TRACE_RUN, "--json").stdout)
    full = json.loads(invoke_cli("trace", TRACE_RUN / "trace", "--run", TRACE_RUN, "--json", "--causal",
                                 "full").stdout)
    assert half["attention_warning"].startswith("WARNING: eager attention counted causal half")
    assert full["attention_warning"] is None
    # what the warning is about: the LM attention part's exact FLOPs grow with the full core; nothing else moves
    flops = {c: {p["part"]: p["flops"] for p in d["parts"]} for c, d in (("half", half), ("full", full))}
    assert flops["full"]["language_model.attention"] > flops["half"]["language_model.attention"]
    assert {k: v for k, v in flops["full"].items() if k != "language_model.attention"} == \
        {k: v for k, v in flops["half"].items() if k != "language_model.attention"}


def test_a_configs_attn_implementation_eager_is_evidence_too(tmp_path):
    """Without the ops in the trace (a trace without them, a trimmed one), the checkpoint's config saying
    ``attn_implementation: eager`` is enough; ``sdpa`` is not evidence either way."""
    empty = SimpleNamespace(attention_ops=pl.DataFrame(schema={"name": pl.String, "part": pl.String,
                                                                "count": pl.Int64}),
                            flops_source="metadata", summary=lambda: pl.DataFrame({"part": []}))
    eager = SimpleNamespace(extra={"attn_implementation": "eager"})
    warning = attention_core(empty, "half", eager)
    assert warning is not None and "attn_implementation: eager" in warning and "--causal full" in warning
    assert attention_core(empty, "full", eager) is None
    assert attention_core(empty, "half", SimpleNamespace(extra={"attn_implementation": "sdpa"})) is None
    # read from the run folder's config.json by the model loader
    run = tmp_path / "run"
    shutil.copytree(TRACE_RUN, run)
    config = json.loads((run / "config.json").read_text())
    config["attn_implementation"] = "eager"
    (run / "config.json").write_text(json.dumps(config))
    r = invoke_cli("trace", run / "trace", "--run", run, "--json")
    assert r.exit_code == 0, r.output
    assert "attn_implementation: eager" in json.loads(r.stdout)["attention_warning"]


def test_fused_attention_is_no_evidence():
    """A flash / SDPA-efficient kernel in the attention part means a fused core: no warning from the ops."""
    ops = pl.DataFrame({"name": ["aten::bmm", "aten::_softmax", "aten::_scaled_dot_product_flash_attention"],
                        "part": ["language_model.attention"] * 3, "count": [4, 2, 2]})
    fused = SimpleNamespace(attention_ops=ops, flops_source=None, summary=lambda: pl.DataFrame({"part": []}))
    assert attention_core(fused, "half", None) is None
    eager = SimpleNamespace(attention_ops=ops.head(2), flops_source="metadata",
                            summary=lambda: pl.DataFrame({"part": []}))
    assert "aten::bmm x4, aten::_softmax x2" in attention_core(eager, "half", None)


def test_no_warning_when_the_flops_are_the_recorded_shapes():
    """Without the run's metadata the FLOPs per part are the matmuls the trace recorded, which for an eager core
    already hold the whole score square: nothing is counted half, so the warning (and its fix) would be false."""
    ops = pl.DataFrame({"name": ["aten::bmm", "aten::_softmax"], "part": ["language_model.attention"] * 2,
                        "count": [4, 2]})
    shapes = SimpleNamespace(attention_ops=ops, flops_source="trace shapes", summary=lambda: pl.DataFrame({"part": []}))
    assert attention_core(shapes, "half", SimpleNamespace(extra={"attn_implementation": "eager"})) is None
    r = invoke_cli("trace", TRACE_RUN / "trace")
    assert r.exit_code == 0, r.output
    assert "WARNING" not in r.stdout and "FLOPs from: trace shapes" in r.stdout
