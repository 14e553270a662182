"""Attribution of trace time to parts, the FLOPs join and the command.

Independent references: a hand-built trace whose per-part times are worked out by hand in the test;
the tiny Nsight export of tests/ingest/fixtures/traces (hand-chosen times, expected partition by
hand); interval unions computed here with plain Python for the public HTA GPU excerpt; and, for the
REAL profiled run, torch's FlopCounterMode per part and iteration (sample_logs/qwen2-vl-tiny-real/
measured_flops.json, recorded by a separate run of the same microbatches)."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

from vlm_perf.analysis.trace_parts import analyze_traces, attribute, classify_kernel, coarse_part, trace_parts_figure
from vlm_perf.arch import load_model
from vlm_perf.ingest.traces import read_traces, trace_metadata

ROOT = Path(__file__).resolve().parents[2]
FIX = ROOT / "tests" / "ingest" / "fixtures" / "traces"
TRACE_RUN = ROOT / "sample_logs" / "qwen2-vl-tiny-trace"
MEASURED = ROOT / "sample_logs" / "qwen2-vl-tiny-real" / "measured_flops.json"


def _times(result, by=("part",)) -> dict:
    t = result.parts.group_by(*by).agg(pl.col("time_ns").sum())
    return {r[:-1] if len(r) > 2 else r[0]: r[-1] for r in t.rows()}


# ------------------------------------------------------------------------------------ a hand-built trace
def _x(cat, name, ts, end, **args):
    return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": 1, "ts": ts, "dur": end - ts, "args": args}


def _mod(name, ts, end):
    return _x("python_function", f"nn.Module: {name}", ts, end)


def hand_trace(tmp_path) -> Path:
    ev = [
        _x("user_annotation", "ProfilerStep#0", 0, 100),
        _x("user_annotation", "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", 1, 5),
        _mod("Qwen2VLForConditionalGeneration_0", 10, 60),
        _mod("Qwen2VisionTransformerPretrainedModel_0", 11, 30),
        _mod("VisionAttention_0", 12, 20),
        _x("cpu_op", "aten::mm", 13, 18, **{"Sequence number": 5, "Fwd thread id": 0}),
        _mod("PatchMerger_0", 21, 29),
        _x("cpu_op", "aten::addmm", 22, 26, **{"Sequence number": 6, "Fwd thread id": 0}),
        _mod("Qwen2VLTextModel_0", 31, 50),
        _mod("Qwen2MLP_0", 32, 40),
        _x("cpu_op", "aten::mm", 33, 39, **{"Sequence number": 7, "Fwd thread id": 0}),
        _mod("Linear_3", 51, 55),  # lm_head: a bare Linear directly under the *ForConditionalGeneration
        _x("cpu_op", "aten::mm", 52, 54, **{"Sequence number": 8, "Fwd thread id": 0}),
        _x("cpu_op", "aten::cross_entropy_loss", 56, 59, **{"Sequence number": 9, "Fwd thread id": 0}),
        _x("cpu_op", "autograd::engine::evaluate_function: MmBackward0", 62, 70,
           **{"Sequence number": 7, "Fwd thread id": 1}),
        _x("cpu_op", "MmBackward0", 63, 69, **{"Sequence number": 7, "Fwd thread id": 1}),
        _x("cpu_op", "autograd::engine::evaluate_function: AddmmBackward0", 70, 75,
           **{"Sequence number": 6, "Fwd thread id": 1}),
        _x("cpu_op", "autograd::engine::evaluate_function: torch::autograd::AccumulateGrad", 75, 77),
        _x("user_annotation", "Optimizer.step#AdamW.step", 80, 90),
        _x("cpu_op", "aten::add_", 81, 85),
        _x("cpu_op", "aten::linalg_vector_norm", 91, 93),
    ]
    p = tmp_path / "hand.json"
    p.write_text(json.dumps({"traceEvents": ev}))
    return p


def test_hand_trace_by_hand(tmp_path):
    r = attribute(read_traces(hand_trace(tmp_path)).events, first_iteration=1)
    ns = 1000
    expected = {  # worked out from the intervals above (self times, µs)
        "data_loading": 4, "model.other": 50 - 19 - 19 - 4 - 3, "vision_tower.other": 19 - 8 - 8,
        "vision_tower.attention": 8, "projector": 8 + 5, "language_model.other": 19 - 8, "language_model.mlp": 8 + 8,
        "language_model.head": 4, "loss": 3, "grad_accumulation": 2, "optimizer": 10, "unattributed": 2,
    }
    expected["host"] = 100 - sum(expected.values())
    assert _times(r) == {k: v * ns for k, v in expected.items()}
    by_dir = _times(r, ("part", "direction"))
    assert by_dir[("language_model.mlp", "backward")] == 8 * ns   # MmBackward0 -> seq 7 -> Qwen2MLP
    assert by_dir[("projector", "backward")] == 5 * ns
    assert r.steps.select("step", "iteration", "step_ns", "attributed_ns").row(0) == (0, 1, 100 * ns, 100 * ns)
    assert r.check_sums() == 0


def test_gpu_hand_trace_idle_under_data_loading(tmp_path):
    def dev(cat, name, ts, end, corr):
        return {"ph": "X", "cat": cat, "name": name, "pid": 0, "tid": 7, "ts": ts, "dur": end - ts,
                "args": {"correlation": corr}}

    ev = [
        _x("user_annotation", "ProfilerStep#4", 0, 100),
        _x("user_annotation", "enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__", 0, 30),
        _mod("Qwen2VLForConditionalGeneration_0", 31, 90),
        _mod("Qwen2VisionTransformerPretrainedModel_0", 32, 50),
        _mod("VisionAttention_0", 33, 45),
        _x("cpu_op", "aten::mm", 34, 40),
        _x("cuda_runtime", "cudaLaunchKernel", 35, 36, correlation=1),
        _x("cuda_runtime", "cudaLaunchKernel", 60, 61, correlation=2),   # under the root module only
        _x("cuda_runtime", "cudaMemcpyAsync", 20, 21, correlation=3),    # inside the data loading range
        dev("kernel", "sm90_gemm", 40, 60, 1),
        dev("kernel", "elementwise", 62, 70, 2),
        dev("gpu_memcpy", "Memcpy HtoD", 22, 25, 3),
        dev("kernel", "orphan_kernel", 95, 105, 99),                     # no launch in the trace
    ]
    p = tmp_path / "gpu.json"
    p.write_text(json.dumps({"traceEvents": ev}))
    r = attribute(read_traces(p).events, first_iteration=1)
    ns = 1000
    # by hand over [0, 100): memcpy 22-25 (3); idle under the DataLoader range 0-22, 25-30 (27); kernel 40-60
    # vision attention (20); 62-70 model.other (8); orphan 95-100 (5, clipped) unattributed; idle the rest
    expected = {"memory_copy": 3, "data_loading": 27, "vision_tower.attention": 20, "model.other": 8,
                "unattributed": 5}
    expected["idle"] = 100 - sum(expected.values())
    assert _times(r) == {k: v * ns for k, v in expected.items()}
    assert r.steps.select("iteration", "step_ns", "attributed_ns").row(0) == (5, 100 * ns, 100 * ns)
    assert any("no launch" in n for n in r.notes)


# ---------------------------------------------------------------------------------------- Nsight SQLite
def test_nsys_partition_by_hand():
    r = attribute(read_traces(FIX / "nsys_tiny.sqlite").events)
    # NVTX "step 1" [0, 1000): vision kernel 200 under "vision_tower"; attention kernel 100; the MLP kernel
    # [650, 850) keeps all its 200 although NCCL runs from 800 (compute wins, 50 overlap); NCCL alone
    # 850-950 = 100; memcpy 40 (launched outside any range); idle the rest
    assert _times(r) == {"vision_tower.other": 200, "language_model.attention": 100, "language_model.mlp": 200,
                         "communication.all_reduce": 100, "memory_copy": 40, "idle": 360}
    assert r.steps.select("step", "iteration", "step_ns", "comm_ns", "overlap_ns").row(0) == (1, 1, 1000, 150, 50)


def test_collective_names():
    assert classify_kernel("ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL") == "communication.reduce_scatter"
    assert classify_kernel("ncclKernel_AllGather_RING_LL_Sum_int8_t") == "communication.all_gather"
    assert classify_kernel("sm90_xmma_gemm") is None
    assert coarse_part("vision_tower.mlp") == "vision_tower"


# ------------------------------------------------------------------------------- public GPU trace (HTA)
def _union(intervals):
    total, cur_s, cur_e = 0, None, None
    for s, e in sorted(intervals):
        if cur_e is None or s > cur_e:
            if cur_e is not None:
                total += cur_e - cur_s
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    return total + ((cur_e - cur_s) if cur_e is not None else 0)


def test_hta_gpu_excerpt_against_plain_unions():
    path = FIX / "hta_ddp_step5.json.gz"
    r = attribute(read_traces(path).events, first_iteration=1)
    raw = json.load(gzip.open(path))["traceEvents"]
    step = next(e for e in raw if e.get("name") == "ProfilerStep#5" and e.get("cat") == "user_annotation")
    lo = round(step["ts"] * 1000)
    hi = lo + round(step["dur"] * 1000)  # µs with 3 decimals -> ns

    def clip(events):
        out = []
        for e in events:
            s = round(e["ts"] * 1000)
            t = s + round(e["dur"] * 1000)
            if t > lo and s < hi:
                out.append((max(s, lo), min(t, hi)))
        return out

    device = [e for e in raw if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    nccl = [e for e in device if e["name"].startswith("ncclKernel")]
    busy = _union(clip(device))
    t = _times(r)
    assert r.steps["step_ns"][0] == hi - lo
    assert abs(r.steps["attributed_ns"][0] - (hi - lo)) <= 0.01 * (hi - lo)
    assert abs(t["idle"] - (hi - lo - busy)) <= 2  # rounding of the equal splits
    assert r.steps["comm_ns"][0] == _union(clip(nccl))
    assert t["communication.all_reduce"] + t.get("communication.broadcast", 0) <= r.steps["comm_ns"][0]
    # the DDP annotations give direction: kernels launched in "## backward ##" / autograd are backward
    dirs = _times(r, ("direction",))
    assert dirs.get("backward", 0) > 0 and dirs.get("forward", 0) > 0


# ------------------------------------------------------------------------------ the REAL profiled run
@pytest.fixture(scope="module")
def real():
    spec = load_model(str(TRACE_RUN / "config.json"))
    return analyze_traces(read_traces(TRACE_RUN / "trace"), spec=spec, metadata=trace_metadata([TRACE_RUN / "metadata"], spec),
                          causal="full")


def test_real_trace_sums_to_step_time(real):
    assert real.steps["iteration"].to_list() == [3, 4]          # ProfilerStep#2, #3 (vlm_perf_first_iteration 1)
    assert real.check_sums() <= 0.01
    gaps = (real.steps["attributed_ns"] - real.steps["step_ns"]).abs().to_list()
    assert gaps == [0, 0]
    parts = set(real.parts["part"].to_list())
    for needed in ("vision_tower.attention", "vision_tower.mlp", "vision_tower.patch_embed", "projector",
                   "language_model.attention", "language_model.mlp", "language_model.head", "loss", "optimizer",
                   "data_loading", "host"):
        assert needed in parts, needed
    unattributed = _times(real).get("unattributed", 0)
    assert unattributed < 0.05 * int(real.steps["step_ns"].sum())   # shown, and small: the grad-norm ops


def test_real_trace_flops_join_matches_flop_counter(real):
    measured = {s["iteration"]: s["by_part"] for s in json.loads(MEASURED.read_text())["per_step"]}
    fl = real.flops.with_columns(pl.col("part").map_elements(coarse_part, return_dtype=pl.String).alias("coarse"))
    for it in (3, 4):
        m = measured[it]
        got = dict(fl.filter(pl.col("iteration") == it).group_by("coarse").agg(pl.col("flops").sum()).rows())
        fwd = dict(fl.filter(pl.col("iteration") == it).group_by("coarse").agg(pl.col("forward_flops").sum()).rows())
        assert got["vision_tower"] == m["forward.tower"] + m["backward.tower"]
        assert got["projector"] == m["forward.merger"] + m["backward.merger"]
        assert got["language_model"] == m["forward.lm"] + m["backward.lm"]
        assert fwd["vision_tower"] == m["forward.tower"] and fwd["language_model"] == m["forward.lm"]


def test_real_trace_efficiency(real):
    eff = real.summary()
    rows = {r["part"]: r for r in eff.iter_rows(named=True)}
    att = rows["language_model.attention"]
    assert att["flops_per_s"] == pytest.approx(att["flops"] / att["time_s"])
    assert sum(r["time_share"] for r in rows.values()) == pytest.approx(1.0)
    assert sum(r["flops_share"] or 0 for r in rows.values()) == pytest.approx(1.0)
    assert rows["optimizer"]["flops"] is None                  # no model FLOPs outside the model parts
    per = real.per_step()
    assert per.filter(pl.col("part") == "projector").height == 2


def test_figure(real, tmp_path):
    trace_parts_figure(real, tmp_path / "f.png")
    assert (tmp_path / "f.png").stat().st_size > 10_000


def test_cli_json_and_out(tmp_path):
    cmd = [sys.executable, "-m", "vlm_perf.cli", "trace", str(TRACE_RUN / "trace"), "--run", str(TRACE_RUN),
           "--causal", "full", "--json", "-o", str(tmp_path / "out")]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["max_sum_gap"] <= 0.01 and len(data["steps"]) == 2
    assert {p["part"] for p in data["parts"] if p["flops"]} >= {"projector", "language_model.mlp"}
    for name in ("trace_parts.json", "trace_parts.md", "trace_parts.png", "per_step.csv"):
        assert (tmp_path / "out" / name).exists()


def test_cli_bad_file_one_line(tmp_path):
    bad = tmp_path / "t.json"
    bad.write_text('{"traceEvents": [')
    from tests.support import run_main  # the entry point in-process (test_cli_json_and_out runs the real process)

    proc = run_main("trace", str(bad))
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0 and "truncated" in proc.stderr


def test_mfu_per_part(real):
    from dataclasses import replace

    eff = replace(real, peak_flops=2e12).summary()
    for r in eff.iter_rows(named=True):
        if r["flops_per_s"] is not None:
            assert r["mfu"] == pytest.approx(r["flops_per_s"] / 2e12)
        else:
            assert r["mfu"] is None


# (outer -> inner module classes, part). The class names are checked to exist in the installed
# transformers (the models' own modeling files), so the table is tested against the real names.
CHAINS = [
    ("llava", ["LlavaForConditionalGeneration", "LlavaModel", "CLIPVisionModel", "CLIPEncoderLayer", "CLIPAttention",
               "Linear"], "vision_tower.attention"),
    ("llava", ["LlavaForConditionalGeneration", "LlavaModel", "CLIPVisionModel", "CLIPVisionEmbeddings", "Conv2d"],
     "vision_tower.patch_embed"),
    ("llava", ["LlavaForConditionalGeneration", "LlavaModel", "LlavaMultiModalProjector", "Linear"], "projector"),
    ("llava", ["LlavaForConditionalGeneration", "LlavaModel", "LlamaModel", "LlamaDecoderLayer", "LlamaMLP", "Linear"],
     "language_model.mlp"),
    ("llava", ["LlavaForConditionalGeneration", "Linear"], "language_model.head"),
    ("llava", ["LlavaForConditionalGeneration", "LlavaModel", "LlamaModel", "Embedding"],
     "language_model.embeddings"),
    ("internvl", ["InternVLForConditionalGeneration", "InternVLModel", "InternVLVisionModel", "InternVLVisionLayer",
                  "InternVLVisionMLP", "Linear"], "vision_tower.mlp"),
    ("internvl", ["InternVLForConditionalGeneration", "InternVLModel", "InternVLMultiModalProjector", "Linear"],
     "projector"),
    ("qwen2", ["InternVLForConditionalGeneration", "InternVLModel", "Qwen2Model", "Qwen2DecoderLayer",
               "Qwen2Attention"], "language_model.attention"),
    ("gemma3", ["Gemma3ForConditionalGeneration", "Gemma3Model", "SiglipVisionModel", "SiglipEncoderLayer",
                "SiglipMLP"], "vision_tower.mlp"),
    ("gemma3", ["Gemma3ForConditionalGeneration", "Gemma3Model", "Gemma3TextModel",
                "Gemma3TextScaledWordEmbedding"], "language_model.embeddings"),
    ("gemma3", ["Gemma3ForConditionalGeneration", "Gemma3Model"], "model.other"),
    ("qwen3_vl", ["Qwen3VLForConditionalGeneration", "Qwen3VLModel", "Qwen3VLVisionModel", "Qwen3VLVisionPatchMerger"],
     "projector"),
    ("qwen3_vl", ["Qwen3VLForConditionalGeneration", "Qwen3VLModel", "Qwen3VLVisionModel", "Qwen3VLVisionPatchEmbed"],
     "vision_tower.patch_embed"),
    ("qwen3_vl", ["Qwen3VLForConditionalGeneration", "Qwen3VLModel", "Qwen3VLTextModel", "Qwen3VLTextDecoderLayer",
                  "Qwen3VLTextRMSNorm"], "language_model.other"),
    ("qwen3_vl_moe", ["Qwen3VLMoeForConditionalGeneration", "Qwen3VLMoeModel", "Qwen3VLMoeTextModel",
                      "Qwen3VLMoeTextDecoderLayer", "Qwen3VLMoeTextSparseMoeBlock", "Qwen3VLMoeTextExperts"],
     "language_model.mlp"),
    ("mistral3", ["Mistral3ForConditionalGeneration", "Mistral3Model", "PixtralVisionModel", "PixtralTransformer",
                  "PixtralAttentionLayer", "PixtralAttention"], "vision_tower.attention"),
    ("mistral3", ["Mistral3ForConditionalGeneration", "Mistral3Model", "Mistral3MultiModalProjector",
                  "Mistral3PatchMerger"], "projector"),
    ("mistral", ["Mistral3ForConditionalGeneration", "Mistral3Model", "MistralModel", "MistralDecoderLayer",
                 "MistralMLP"], "language_model.mlp"),
    ("idefics3", ["Idefics3ForConditionalGeneration", "Idefics3Model", "Idefics3VisionTransformer",
                  "Idefics3EncoderLayer", "Idefics3VisionAttention"], "vision_tower.attention"),
    ("idefics3", ["Idefics3ForConditionalGeneration", "Idefics3Model", "Idefics3Connector"], "projector"),
    ("glm4v", ["Glm4vForConditionalGeneration", "Glm4vModel", "Glm4vVisionModel", "Glm4vVisionBlock",
               "Glm4VisionMlp"], "vision_tower.mlp"),
    ("glm4v", ["Glm4vForConditionalGeneration", "Glm4vModel", "Glm4vTextModel", "Glm4vTextDecoderLayer",
               "Glm4vTextAttention"], "language_model.attention"),
    ("qwen2_5_vl", ["Qwen2_5_VLForConditionalGeneration", "Qwen2_5_VLModel", "Qwen2_5_VisionTransformerPretrainedModel",
                    "Qwen2_5_VLVisionBlock", "Qwen2_5_VLMLP"], "vision_tower.mlp"),
    ("qwen2_5_vl", ["Qwen2_5_VLForConditionalGeneration", "Qwen2_5_VLModel", "Qwen2_5_VisionTransformerPretrainedModel",
                    "Qwen2_5_VLVisionRotaryEmbedding"], "vision_tower.other"),
]
_TORCH_LAYERS = {"Linear", "Embedding", "Conv2d"}


@pytest.mark.parametrize("family, chain, part", CHAINS, ids=[f"{c[0]}-{c[2]}-{i}" for i, c in enumerate(CHAINS)])
def test_module_class_table(family, chain, part):
    import importlib

    from vlm_perf.analysis.trace_parts import Ctx, _module_update, label_of

    pytest.importorskip("transformers")
    known = set()
    for mod in {family, "clip", "llama", "siglip", "qwen2", "pixtral", "mistral", family.replace("_moe", ""),
                "internvl", "mistral3", "idefics3", "gemma3", "qwen3_vl", "qwen3_vl_moe", "glm4v", "qwen2_5_vl", "llava"}:
        try:
            known |= set(dir(importlib.import_module(f"transformers.models.{mod}.modeling_{mod}")))
        except ImportError:
            pass
    unknown = [c for c in chain if c not in known and c not in _TORCH_LAYERS]
    assert not unknown, f"not transformers class names: {unknown}"
    ctx = Ctx()
    for cls in chain:
        ctx = _module_update(ctx, cls)
    assert label_of(ctx, "cpu_op") == part


def test_rate_and_excess_vs_lm(real):
    eff = real.summary()
    rows = {r["part"]: r for r in eff.iter_rows(named=True)}
    lm = [r for p, r in rows.items() if p.startswith("language_model.") and r["flops"]]
    ref = sum(r["flops"] for r in lm) / sum(r["time_s"] for r in lm)
    v = rows["vision_tower.attention"]
    assert v["rate_vs_lm"] == pytest.approx(v["flops"] / v["time_s"] / ref)
    assert v["excess_vs_lm_s"] == pytest.approx(v["time_s"] - v["flops"] / ref)
    # over the LM's own parts the excesses cancel
    assert sum(r["excess_vs_lm_s"] for r in lm) == pytest.approx(0.0, abs=1e-12)


@pytest.mark.parametrize("events, message", [
    ([{"ph": "s", "id": 1, "ts": 1, "cat": "ac2g", "name": "ac2g"}], "no timed events"),
    ([], "no timed events"),
])
def test_no_timed_events_is_a_typed_error(tmp_path, events, message):
    from vlm_perf.errors import InputError

    p = tmp_path / "t.json"
    p.write_text(json.dumps({"traceEvents": events}))
    with pytest.raises(InputError, match=message) as exc:
        analyze_traces(read_traces(p))
    assert str(p) in str(exc.value)


def test_kernels_without_launches_are_unattributed_and_shown(tmp_path):
    p = tmp_path / "k.json"
    p.write_text(json.dumps({"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 1,
                                              "dur": 2, "args": {"correlation": 1}}]}))
    r = analyze_traces(read_traces(p))
    assert _times(r) == {"unattributed": 2000}
    assert any("no ProfilerStep" in n for n in r.notes) and any("no launch" in n for n in r.notes)


def test_real_trace_recorded_shapes_give_the_same_flops(real):
    """Independent of the metadata: the matmuls the trace recorded (Input Dims of aten::mm/addmm/bmm/baddbmm,
    forward and backward, each placed by the time attribution incl. the backward sequence-number links)
    add up, part by part, to the library's exact FLOPs. The patch embedding is a convolution (no count)."""
    eff = {r["part"]: r for r in real.summary().iter_rows(named=True)}
    checked = 0
    for part, r in eff.items():
        if part == "vision_tower.patch_embed":
            assert r["shape_flops"] is None
        elif r["flops"]:
            assert r["shape_flops"] == r["flops"], part
            checked += 1
    assert checked == 6


def test_without_metadata_flops_come_from_recorded_shapes(real):
    r = analyze_traces(read_traces(TRACE_RUN / "trace"))
    assert r.flops_source == "trace shapes" and any("matmul shapes" in n for n in r.notes)
    got = {x["part"]: x["flops"] for x in r.summary().iter_rows(named=True)}
    want = {x["part"]: x["flops"] for x in real.summary().iter_rows(named=True)}
    for part in ("vision_tower.attention", "language_model.mlp", "projector"):
        assert got[part] == want[part]
    assert got["vision_tower.patch_embed"] is None          # a convolution: no shapes-based count
    per = r.per_step().filter(pl.col("part") == "language_model.mlp")
    assert per["flops"].sum() == want["language_model.mlp"]


def _two_rank_run(tmp_path):
    """Two DP ranks: both trace files are the REAL trace (rank 0 and 1 by name); rank 1's metadata for
    iteration N is rank 0's microbatches of iteration N+1, so its FLOPs must be the measured FLOPs of N+1."""
    import shutil

    (tmp_path / "trace").mkdir()
    for r in (0, 1):
        shutil.copy(TRACE_RUN / "trace" / "rank0.pt.trace.json.gz", tmp_path / "trace" / f"rank{r}.pt.trace.json.gz")
    lines = [json.loads(x) for x in (TRACE_RUN / "metadata" / "metadata-rank00000.jsonl").read_text().splitlines()]
    shifted = [{**x, "iteration": x["iteration"] - 1, "dp_rank": 1} for x in lines if x["iteration"] > 1]
    (tmp_path / "metadata.jsonl").write_text("\n".join(json.dumps(x) for x in lines + shifted) + "\n")
    return tmp_path


def test_two_dp_ranks_get_their_own_flops(tmp_path):
    run = _two_rank_run(tmp_path)
    spec = load_model(str(TRACE_RUN / "config.json"))
    metadata = trace_metadata([run / "metadata.jsonl"], spec)
    r = analyze_traces(read_traces(run / "trace"), spec=spec, metadata=metadata, causal="full", world_size=2)
    measured = {s["iteration"]: s["flops"] for s in json.loads(MEASURED.read_text())["per_step"]}
    got = dict(r.flops.filter(pl.col("iteration") == 3).group_by("rank").agg(pl.col("flops").sum()).rows())
    assert got == {0: measured[3], 1: measured[4]}
    # a world size that is not the DP size: each rank gets the iteration's FLOPs / world size
    r4 = analyze_traces(read_traces(run / "trace"), spec=spec, metadata=metadata, causal="full", world_size=4)
    got4 = dict(r4.flops.filter(pl.col("iteration") == 3).group_by("rank").agg(pl.col("flops").sum()).rows())
    assert got4 == {0: (measured[3] + measured[4]) / 4, 1: (measured[3] + measured[4]) / 4}
    assert any("/ 4 GPUs" in n for n in r4.notes)
