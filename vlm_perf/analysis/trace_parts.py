"""Where the step time went, part by part: profiler events attributed to model parts, joined with exact FLOPs.

Input: the event table of `vlm_perf.ingest.traces` (one or many ranks). Output: `TraceParts`.

Attribution (facts: docs/traces.md)
-----------------------------------
1. **Steps** are the ``ProfilerStep#N`` ranges of each rank (``profile.step()``); without them the
   whole trace is one step (said in ``notes``).
2. **Host context.** On every host thread, ranges nest (``cpu_op``, ``record_function`` / NVTX
   ranges, ``nn.Module: <Class>_<k>`` events of ``with_stack``). One pass in time order gives every
   host event a context: model zone (vision tower, projector, language model), sub-part
   (attention, MLP/experts, embeddings, head, ...), special phase (optimizer, data loading, loss,
   gradient accumulation) and direction. The names go through `PART_RULES`, a table of class-name
   and range-name patterns (HF module class names of every registered family; Megatron-LM / Transformer
   Engine NVTX range names; the HF Trainer's ``record_function`` names).
3. **Backward.** ``autograd::engine::evaluate_function: XBackward0`` ops carry the ``Sequence
   number`` of the forward op that created the autograd node; the backward op takes the context of
   that forward op (module events exist in forward only), marked backward.
4. **Device time.** A kernel / memcpy / memset is linked to its launch (``correlation`` ->
   runtime call, else ``External id`` -> op) and takes the launch's context; communication kernels
   (NCCL & co, by name) are ``communication.<collective>``. Each step window is partitioned into
   elementary intervals: compute kernels active -> split equally among them; else communication;
   else memory copies; else ``idle``. Communication hidden under compute is reported as overlap.
5. **CPU-only traces** (no device events): the host thread holding the step is the device. Each
   instant of the step goes to the innermost event covering it (self time), so ops, Python time
   inside modules (the module's part) and loop time outside any op (``host``) add up to the step.

Every nanosecond of every step window lands in exactly one part (``unattributed`` included:
device work whose launch has no recognisable context, ops outside every known range), so the
parts add up to the step time; `TraceParts.check_sums` states the largest relative gap.

Per-part efficiency: exact FLOPs of each part for the profiled iteration (`flops_by_part`, from the
FLOPs library's components, forward and training modes) divided by the part's measured time.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache
from typing import TYPE_CHECKING

import numpy as np
import polars as pl

from ..arch.spec import ModelSpec
from ..errors import InputError
from ..flops.breakdown import AUDIO_COMPONENTS, COMPONENTS
from ..stats import BatchStats

if TYPE_CHECKING:
    from ..ingest.traces import TraceMetadata, TracePartial

__all__ = ["PART_ORDER", "TraceParts", "attribute", "flops_by_part", "COMPONENT_TRACE_PART", "classify_kernel",
           "efficiency", "trace_parts_figure", "coarse_part"]

# ----------------------------------------------------------------------------------------------- the parts
PART_ORDER = (
    "vision_tower.patch_embed", "vision_tower.attention", "vision_tower.mlp", "vision_tower.other",
    "projector",
    "language_model.embeddings", "language_model.attention", "language_model.mlp", "language_model.head",
    "language_model.other", "model.other", "loss", "grad_accumulation", "optimizer", "data_loading",
    "communication", "memory_copy", "memset", "host", "idle", "unattributed",
)
#: FLOPs components of the library -> the trace part they are spent in
COMPONENT_TRACE_PART = {
    "vision.patch_embed": "vision_tower.patch_embed", "vision.attn_proj": "vision_tower.attention",
    "vision.attn_core": "vision_tower.attention", "vision.mlp": "vision_tower.mlp", "vision.merger": "projector",
    "vision.deepstack_merger": "projector", "lm.attn_proj": "language_model.attention",
    "lm.attn_core": "language_model.attention", "lm.dense_mlp": "language_model.mlp",
    "lm.routed_experts": "language_model.mlp", "lm.shared_experts": "language_model.mlp",
    "lm.router": "language_model.mlp", "lm.logits": "language_model.head", "lm.mtp": "language_model.other",
    "lm.altup": "language_model.other", "lm.laurel": "language_model.other", "lm.per_layer_input": "language_model.other",
    # an audio encoder (Omni thinkers): its modules have no trace zone yet, so its kernels and FLOPs both land in
    # model.other (attributed together, never mixed into the vision tower or the LM)
    **{name: "model.other" for name in AUDIO_COMPONENTS},
}
assert set(COMPONENT_TRACE_PART) == set(COMPONENTS)


def coarse_part(part: str) -> str:
    """``vision_tower.attention`` -> ``vision_tower``; ``communication.all_reduce`` -> ``communication``."""
    return part.split(".", 1)[0]


# --------------------------------------------------------------------------------------- the rule table
@dataclass(frozen=True)
class Ctx:
    zone: str | None = None      # vision_tower | projector | language_model | root
    sub: str | None = None       # patch_embed | attention | mlp | embeddings | head | other
    special: str | None = None   # optimizer | data_loading | loss | grad_accumulation | communication.<c>
    backward: bool = False
    in_module: bool = False      # inside some nn.Module event / model range
    generic_leaf: str | None = None  # "linear" / "embedding" when the innermost module is a bare torch layer
    forward: bool = False        # inside a range named as the forward pass (e.g. "## forward ##")


_CLASS_SUFFIX = re.compile(r"_\d+$")
# Module class names (HF transformers, every registered family; class names only: with_stack has no FQN)
_PROJECTOR = re.compile(r"Merger|Projector|Connector|MultiModalProjector|Resampler|mlp1$|Aligner")
_VISION = re.compile(r"Vision|ViT|Vit[A-Z]|Siglip|Pixtral|InternVision|CLIP|Clip|PatchEmbed|Idefics3Vision")
_ROOT = re.compile(r"For(ConditionalGeneration|CausalLM|ImageTextToText)$")
_LM = re.compile(r"TextModel$|LanguageModel|DecoderLayer$|^(Llama|Qwen\d?|Mistral|Glm\d?|InternLM\d?)Model$")
_ROTARY = re.compile(r"Rotary|RoPE|Rope")
_ATTN = re.compile(r"Attention|Attn|SelfAttn")
_MLP = re.compile(r"MLP|Mlp|FeedForward|FFN|Expert|Moe|MoE|SparseMoe|TopkRouter")
_VIS_EMBED = re.compile(r"PatchEmbed|Embeddings$|PatchConv|Conv[23]d$")
_EMBED = re.compile(r"^Embedding$|Embedding$|Embed$|ScaledWordEmbedding")
_LM_HEAD = re.compile(r"LMHead|LmHead")
# record_function / NVTX range names: the HF Trainer's, Megatron-LM's (``<module>.<function>.<suffix>``),
# Transformer Engine's, and plain user ranges naming a part
_R_OPT = re.compile(r"^Optimizer\.(step|zero_grad)#|optimizer|Optimizer", re.IGNORECASE)
_R_DATA = re.compile(r"^enumerate\(DataLoader\)|DataLoader|data_load|get_batch|dataloader", re.IGNORECASE)
_R_FORWARD = re.compile(r"(^|[._ #])forward($|[._ #])", re.IGNORECASE)
_R_BACKWARD = re.compile(r"(^|[._ ])backward($|[._ ])|Backward", re.IGNORECASE)
_R_VISION = re.compile(r"vision|visual|\bvit\b|image_encoder", re.IGNORECASE)
_R_PROJ = re.compile(r"projector|merger|adapter", re.IGNORECASE)
_R_ATTN = re.compile(r"core_attention|self_attention|linear_qkv|attention|attn", re.IGNORECASE)
_R_MLP = re.compile(r"(^|[._])mlp($|[._])|linear_fc[12]|experts|\bmoe\b", re.IGNORECASE)
_R_EMBED = re.compile(r"embedding", re.IGNORECASE)
_R_HEAD = re.compile(r"output_layer|lm_head", re.IGNORECASE)
_R_LOSS = re.compile(r"loss|cross_entropy", re.IGNORECASE)
_R_COMM = re.compile(r"^nccl:(\w+)|^c10d::(\w+)|record_param_comms")
_LOSS_OPS = re.compile(r"^aten::(cross_entropy_loss|nll_loss\w*|_?log_softmax(_backward_data)?)$")
_EVAL = "autograd::engine::evaluate_function: "
_COLLECTIVES = (("all_reduce", re.compile(r"all_?reduce", re.I)), ("all_gather", re.compile(r"all_?gather", re.I)),
                ("reduce_scatter", re.compile(r"reduce_?scatter", re.I)),
                ("all_to_all", re.compile(r"all_?to_?all|alltoall", re.I)),
                ("broadcast", re.compile(r"broadcast", re.I)), ("send_recv", re.compile(r"send|recv", re.I)))
_COMM_KERNEL = re.compile(r"^nccl|ncclKernel|ncclDevKernel|^rccl|^hccl|^c10d|cross_device_reduce")


def _collective(name: str) -> str:
    for label, rx in _COLLECTIVES:
        if rx.search(name):
            return label
    return "other"


@lru_cache(maxsize=1 << 16)
def classify_kernel(name: str) -> str | None:
    """``communication.<collective>`` for a communication kernel name, else None (facts: HTA's regexes)."""
    return f"communication.{_collective(name)}" if _COMM_KERNEL.search(name) else None


@lru_cache(maxsize=1 << 16)
def _module_update(ctx: Ctx, cls: str) -> Ctx:
    zone, sub, generic = ctx.zone, ctx.sub, None
    if _PROJECTOR.search(cls):
        zone, sub = "projector", None
    elif zone != "projector" and _VISION.search(cls) and not _ROTARY.search(cls):
        if zone != "vision_tower":
            zone, sub = "vision_tower", None
    elif _ROOT.search(cls):
        zone = zone or "root"
    elif zone in (None, "root") and _LM.search(cls):
        zone, sub = "language_model", None
    if cls in ("Linear", "NonDynamicallyQuantizableLinear", "Conv1D"):
        generic = "linear"
    elif cls == "Embedding":
        generic = "embedding"
    # the innermost recognised sub-part wins
    if _ROTARY.search(cls):
        sub = "other"
    elif _LM_HEAD.search(cls):
        sub = "head"
    elif _ATTN.search(cls):
        sub = "attention"
    elif _MLP.search(cls):
        sub = "mlp"
    elif zone == "vision_tower" and _VIS_EMBED.search(cls):
        sub = "patch_embed"
    elif zone != "vision_tower" and _EMBED.search(cls):
        sub = "embeddings"
    elif generic == "linear" and zone == "root" and sub is None:
        sub = "head"  # a bare Linear directly under the *ForConditionalGeneration / *ForCausalLM: the LM head
    if sub in ("attention", "mlp", "embeddings", "head") and zone in (None, "root"):
        zone = "language_model"
    return Ctx(zone, sub, ctx.special, ctx.backward, True, generic, ctx.forward)


@lru_cache(maxsize=1 << 16)
def _range_update(ctx: Ctx, name: str) -> Ctx:
    if name.startswith("ProfilerStep#"):
        return ctx
    zone, sub, special, backward = ctx.zone, ctx.sub, ctx.special, ctx.backward
    m = _R_COMM.search(name)
    if m:
        return Ctx(zone, sub, f"communication.{_collective(name)}", backward, ctx.in_module, None, ctx.forward)
    if _R_OPT.search(name):
        special = "optimizer"
    elif _R_DATA.search(name):
        special = "data_loading"
    if _R_BACKWARD.search(name):
        backward = True
    forward = ctx.forward or bool(_R_FORWARD.search(name))
    in_model = ctx.in_module
    if _R_PROJ.search(name):
        zone, sub, in_model = "projector", None, True
    elif _R_VISION.search(name):
        zone, sub, in_model = "vision_tower", None, True
    if _R_ATTN.search(name):
        sub, in_model = "attention", True
    elif _R_MLP.search(name):
        sub, in_model = "mlp", True
    elif _R_HEAD.search(name):
        sub, in_model = "head", True
    elif _R_EMBED.search(name):
        sub, in_model = ("patch_embed" if zone == "vision_tower" else "embeddings"), True
    elif _R_LOSS.search(name) and special is None:
        special = "loss"
    if sub is not None and zone in (None, "root"):
        zone = "language_model"
    return Ctx(zone, sub, special, backward, in_model, None, forward)


@lru_cache(maxsize=1 << 16)
def _op_update(ctx: Ctx, name: str) -> Ctx:
    if ctx.special is None and ctx.sub is None and ctx.zone in (None, "root") and _LOSS_OPS.match(name):
        return Ctx(ctx.zone, ctx.sub, "loss", ctx.backward, ctx.in_module, None, ctx.forward)
    return ctx


def _direction(ctx: Ctx) -> str:
    if ctx.backward:
        return "backward"
    return "forward" if ctx.in_module or ctx.zone or ctx.forward else "none"


@lru_cache(maxsize=1 << 16)
def label_of(ctx: Ctx, kind: str) -> str:
    """The part of an event with context ``ctx`` (``kind``: the event's kind)."""
    if ctx.special is not None:
        return ctx.special
    if ctx.zone == "projector":
        return "projector"
    if ctx.zone == "vision_tower":
        return f"vision_tower.{ctx.sub or 'other'}" if ctx.sub != "embeddings" else "vision_tower.patch_embed"
    if ctx.zone == "language_model":
        sub = ctx.sub if ctx.sub != "patch_embed" else "embeddings"
        return f"language_model.{sub or 'other'}"
    if ctx.zone == "root":
        return "model.other"
    if kind in ("annotation", "module") and not ctx.in_module:
        return "host"
    return "unattributed"


# ------------------------------------------------------------------------------------------ the result
@dataclass
class TraceParts:
    """Per rank and step: time per part (ns) by direction, step durations, FLOPs per part when known.

    ``parts``: rank, step, iteration, part, direction (forward/backward/none), time_ns.
    ``steps``: rank, step, iteration, step_ns (the ProfilerStep range), attributed_ns, device (cpu/gpu),
    comm_ns (communication kernel busy time), overlap_ns (communication under compute).
    ``top``: the events with the most time (name, part, time_ns, count), per trace.
    ``flops``: rank, iteration, part, flops, forward_flops: the FLOPs of that rank's work in the iteration
    (empty without a model and metadata).
    """

    parts: pl.DataFrame
    steps: pl.DataFrame
    top: pl.DataFrame
    flops: pl.DataFrame = field(default_factory=lambda: pl.DataFrame(schema=FLOPS_SCHEMA))
    notes: list[str] = field(default_factory=list)
    peak_flops: float | None = None
    #: matmul FLOPs of the recorded ops (``Input Dims`` of aten::mm/addmm/bmm/baddbmm, forward and backward) per
    #: rank, step and part: an independent count from the trace itself (convolutions and fused attention kernels
    #: carry no shapes-based count)
    shape_flops: pl.DataFrame = field(default_factory=lambda: pl.DataFrame(
        schema={"rank": pl.Int64, "step": pl.Int64, "part": pl.String, "flops": pl.Int64}))
    #: where ``flops`` comes from: "metadata" (exact, the FLOPs library), "trace shapes" (the recorded matmuls
    #: only, when there is no model + metadata) or None
    flops_source: str | None = None
    #: the ops recorded inside attention parts (name, part, count): what ran the core (`trace_checks.attention_core`)
    attention_ops: pl.DataFrame = field(default_factory=lambda: pl.DataFrame(
        schema={"name": pl.String, "part": pl.String, "count": pl.Int64}))
    #: a --causal setting the trace contradicts (eager attention counted causal half), with its evidence and fix
    attention_warning: str | None = None

    def check_sums(self) -> float:
        """Largest |attributed - step| / step over ranks and steps (0 when exact)."""
        if self.steps.height == 0:
            return 0.0
        gap = (self.steps["attributed_ns"] - self.steps["step_ns"]).abs() / self.steps["step_ns"].clip(1)
        return float(gap.max())  # type: ignore[arg-type]

    def summary(self) -> pl.DataFrame:
        """One row per part: time (s, summed over ranks and steps), share, FLOPs, FLOPs share, FLOP/s."""
        return efficiency(self)

    def to_dict(self) -> dict:
        eff = self.summary()
        return {
            "steps": self.steps.to_dicts(), "parts": eff.to_dicts(),
            "per_step": self.per_step().to_dicts(), "top": self.top.to_dicts(),
            "max_sum_gap": self.check_sums(), "notes": self.notes, "peak_flops": self.peak_flops,
            "flops_source": self.flops_source, "attention_warning": self.attention_warning,
        }

    def per_step(self) -> pl.DataFrame:
        """Per rank, step and part: time_s, flops, achieved FLOP/s (null without FLOPs)."""
        t = self.parts.group_by("rank", "step", "iteration", "part").agg(pl.col("time_ns").sum())
        if self.flops.height:
            t = t.join(self.flops.select("rank", "iteration", "part", "flops"), on=["rank", "iteration", "part"],
                       how="left")
        elif self.flops_source == "trace shapes" and self.shape_flops.height:
            t = t.join(self.shape_flops.with_columns(pl.col("flops").cast(pl.Float64)), on=["rank", "step", "part"],
                       how="left")
        else:
            t = t.with_columns(pl.lit(None, dtype=pl.Float64).alias("flops"))
        return t.with_columns((pl.col("time_ns") / 1e9).alias("time_s"),
                              (pl.col("flops") / (pl.col("time_ns") / 1e9)).alias("flops_per_s")
                              ).sort("rank", "step", "part")


def _order(part: str) -> int:
    head = part if part in PART_ORDER else coarse_part(part)
    return PART_ORDER.index(head) if head in PART_ORDER else len(PART_ORDER)


def efficiency(result: TraceParts) -> pl.DataFrame:
    parts = result.parts.group_by("part").agg(
        (pl.col("time_ns").sum() / 1e9).alias("time_s"),
        (pl.col("time_ns").filter(pl.col("direction") == "forward").sum() / 1e9).alias("forward_s"),
        (pl.col("time_ns").filter(pl.col("direction") == "backward").sum() / 1e9).alias("backward_s"))
    # the total from the whole nanoseconds (an integer sum): a float sum over group_by's unordered rows can
    # move the last bit from one run to the next
    total = float(result.parts["time_ns"].sum()) / 1e9 or 1.0
    parts = parts.sort("part").with_columns((pl.col("time_s") / total).alias("time_share"))
    if result.shape_flops.height:
        shape = result.shape_flops.group_by("part").agg(pl.col("flops").sum().cast(pl.Float64).alias("shape_flops"))
        parts = parts.join(shape, on="part", how="left")
    else:
        parts = parts.with_columns(pl.lit(None, pl.Float64).alias("shape_flops"))
    fl = None
    if result.flops.height:
        # FLOPs of every profiled (rank, step): the iteration's FLOPs per rank-step
        used = result.steps.select("rank", "step", "iteration").join(result.flops, on=["rank", "iteration"],
                                                                      how="inner")
        fl = used.group_by("part").agg(pl.col("flops").sum(), pl.col("forward_flops").sum())
    elif result.flops_source == "trace shapes" and result.shape_flops.height:
        fl = result.shape_flops.group_by("part").agg(pl.col("flops").sum().cast(pl.Float64),
                                                     pl.lit(None, pl.Float64).alias("forward_flops"))
    if fl is not None:
        parts = parts.join(fl, on="part", how="full", coalesce=True).with_columns(
            pl.col("time_s").fill_null(0.0), pl.col("time_share").fill_null(0.0))
        total_flops = float(parts["flops"].sum() or 0) or None
        parts = parts.with_columns(
            (pl.col("flops") / total_flops if total_flops else pl.lit(None, pl.Float64)).alias("flops_share"),
            pl.when(pl.col("time_s") > 0).then(pl.col("flops") / pl.col("time_s")).alias("flops_per_s"),
            pl.when(pl.col("forward_s") > 0).then(pl.col("forward_flops") / pl.col("forward_s"))
            .alias("forward_flops_per_s"),
            pl.when(pl.col("backward_s") > 0).then((pl.col("flops") - pl.col("forward_flops")) / pl.col("backward_s"))
            .alias("backward_flops_per_s"))
    else:
        parts = parts.with_columns(*(pl.lit(None, pl.Float64).alias(c) for c in
                                     ("flops", "forward_flops", "flops_share", "flops_per_s", "forward_flops_per_s",
                                      "backward_flops_per_s")))
    if result.peak_flops:
        parts = parts.with_columns((pl.col("flops_per_s") / result.peak_flops).alias("mfu"))
    else:
        parts = parts.with_columns(pl.lit(None, pl.Float64).alias("mfu"))
    # the reference efficiency: the language model's (every language_model.* part with FLOPs, together);
    # "vs LM" = the part's rate over it, "excess" = its time minus the time its FLOPs take at that rate
    lm = parts.filter(pl.col("part").str.starts_with("language_model.") & (pl.col("flops") > 0))
    lm_time = float(lm["time_s"].sum()) if lm.height else 0.0
    ref = float(lm["flops"].sum()) / lm_time if lm_time > 0 else None
    if ref:
        parts = parts.with_columns((pl.col("flops_per_s") / ref).alias("rate_vs_lm"),
                                   pl.when(pl.col("flops") > 0).then(pl.col("time_s") - pl.col("flops") / ref)
                                   .alias("excess_vs_lm_s"))
    else:
        parts = parts.with_columns(pl.lit(None, pl.Float64).alias("rate_vs_lm"),
                                   pl.lit(None, pl.Float64).alias("excess_vs_lm_s"))
    return parts.with_columns(pl.col("part").map_elements(_order, return_dtype=pl.Int64).alias("_o")).sort(
        "_o", "part").drop("_o")


# -------------------------------------------------------------------------------------------- attribution
def attribute(events: pl.DataFrame, first_iteration: int | None = None) -> TraceParts:
    """Attribute every step's time to parts (see the module docstring), rank by rank, in bounded memory
    (`vlm_perf.analysis.trace_attribute`). ``first_iteration``: the training iteration of ``ProfilerStep#0``
    (None: iterations unknown, left null)."""
    from .trace_attribute import attribute as run

    return run(events, first_iteration)


# ------------------------------------------------------------------------------------------------- FLOPs
def flops_by_part(spec: ModelSpec, stats: BatchStats, frozen=(), causal: str = "half") -> dict[str, tuple[float, float]]:
    """part -> (training FLOPs, forward FLOPs) of one iteration's statistics, from the FLOPs library; ``frozen``:
    the run's regime (today's frozen-parts tuple, or a `Trainability`)."""
    from ..flops.regime import exact_flops  # the run's regime (a frozen-parts tuple or a Trainability)

    train = exact_flops(spec, stats, frozen, mode="training", causal=causal).components
    fwd = exact_flops(spec, stats, frozen, mode="forward", causal=causal).components
    out: dict[str, list[float]] = {}
    for comp, part in COMPONENT_TRACE_PART.items():
        a = out.setdefault(part, [0.0, 0.0])
        a[0] += float(train.get(comp, 0) or 0)
        a[1] += float(fwd.get(comp, 0) or 0)
    return {k: (v[0], v[1]) for k, v in out.items() if v[0] or v[1]}


FLOPS_SCHEMA = {"rank": pl.Int64, "iteration": pl.Int64, "part": pl.String, "flops": pl.Float64,
                "forward_flops": pl.Float64}


def flops_frame(per_rank_iteration: dict[tuple[int, int], dict[str, tuple[float, float]]]) -> pl.DataFrame:
    """{(rank, iteration): {part: (training FLOPs, forward FLOPs)}} -> rows of `FLOPS_SCHEMA`."""
    rows = [{"rank": rank, "iteration": it, "part": part, "flops": f, "forward_flops": ff}
            for (rank, it), parts in per_rank_iteration.items() for part, (f, ff) in parts.items()]
    return pl.DataFrame(rows, schema=FLOPS_SCHEMA)


# ------------------------------------------------------------------------------------------------ figure
def trace_parts_figure(result: TraceParts, path=None):
    """Stacked time per part per (rank, step), each part annotated with its achieved FLOP/s. Returns the figure."""
    import matplotlib.pyplot as plt  # the caller's backend (Agg when headless, inline in a notebook)

    per = result.per_step()
    coarse = per.with_columns(pl.col("part").map_elements(coarse_part, return_dtype=pl.String).alias("coarse"))
    agg = coarse.group_by("rank", "step", "coarse").agg(pl.col("time_s").sum(), pl.col("flops").sum())
    keys = agg.select("rank", "step").unique().sort("rank", "step").rows()
    groups = sorted(agg["coarse"].unique().to_list(), key=_order)
    fig, ax = plt.subplots(figsize=(max(6, 1.2 * len(keys) + 4), 4.5))
    bottom = np.zeros(len(keys))
    cmap = plt.get_cmap("tab20")
    for gi, g in enumerate(groups):
        vals, rates = [], []
        for r, st in keys:
            row = agg.filter((pl.col("rank") == r) & (pl.col("step") == st) & (pl.col("coarse") == g))
            t = float(row["time_s"].sum()) if row.height else 0.0
            f = float(row["flops"].sum() or 0) if row.height else 0.0
            vals.append(t * 1e3)
            rates.append(f / t if t > 0 and f > 0 else None)
        ax.bar(range(len(keys)), vals, bottom=bottom, color=cmap(gi % 20), label=g)
        for x, (v, rate) in enumerate(zip(vals, rates)):
            if rate and v > 0.04 * max(1e-9, float(sum(vals)) / max(1, len(vals)) * len(groups) / 2):
                ax.text(x, bottom[x] + v / 2, _rate(rate), ha="center", va="center", fontsize=7)
        bottom += np.array(vals)
    ax.set_xticks(range(len(keys)), [f"r{r} s{st}" for r, st in keys])
    ax.set_ylabel("time (ms)")
    ax.set_title("Step time per part (labels: achieved FLOP/s of the part)")
    ax.legend(fontsize=7, bbox_to_anchor=(1.01, 1), loc="upper left")
    fig.tight_layout()
    if path is not None:
        fig.savefig(path, dpi=110)
    return fig


def _rate(v: float) -> str:
    for unit, scale in (("TFLOP/s", 1e12), ("GFLOP/s", 1e9), ("MFLOP/s", 1e6)):
        if v >= scale:
            return f"{v / scale:.2f} {unit}"
    return f"{v:.0f} FLOP/s"


# ------------------------------------------------------------------------------------------ entry point
#: the largest training iteration a trace may be joined with (10^12 steps)
MAX_ITERATION = 10**12


def analyze_traces(partial: "TracePartial", *, spec: ModelSpec | None = None, metadata: "TraceMetadata | None" = None,
                   first_iteration: int | None = None, causal: str = "half", frozen=(),
                   peak_flops: float | None = None, world_size: int | None = None) -> TraceParts:
    """Attribute the time of the traces read (``partial``: `vlm_perf.ingest.traces.read_traces`, or the cluster's
    `read_traces_on`) and, with ``spec`` and ``metadata`` (the run's statistics per iteration and per DP rank:
    `vlm_perf.ingest.traces.trace_metadata`), join exact FLOPs per part and iteration (``frozen``: the run's
    regime, a `Trainability`). Reads nothing itself.

    ``first_iteration``: the training iteration of ``ProfilerStep#0``; None: the trace's
    ``vlm_perf_first_iteration`` metadata, else 1 (``profile.step()`` after every optimizer step from
    the first, as with a Trainer callback), said in ``notes``.

    FLOPs per rank: the metadata's per-(iteration, dp_rank) statistics when the trace ranks are DP ranks (pure
    data parallelism: ``world_size`` equal to the number of DP ranks in the metadata, or one rank only);
    otherwise the iteration's FLOPs divided by ``world_size`` (an average over GPUs, said in ``notes``).
    """
    from .trace_attribute import combine, rank_parts
    from .trace_checks import checked_frames

    if not any(f.height for f in partial.frames):
        raise InputError("no timed events (complete 'X' events of profiler categories) in the trace",
                         ", ".join(partial.files[:3]) + (" ..." if len(partial.files) > 3 else ""))
    by_rank, checked = checked_frames(partial)  # duplicate rank-steps refused, negative durations dropped
    first_iteration, notes = first_iteration_of(partial, first_iteration, list(partial.notes) + checked)
    if not by_rank:
        raise InputError("the trace holds no timed events")
    result = combine([rank_parts(rank, frame) for rank, frame in by_rank], first_iteration)
    return complete(result, notes, spec=spec, metadata=metadata, causal=causal, frozen=frozen, peak_flops=peak_flops,
                    world_size=world_size)


def first_iteration_of(partial: "TracePartial", first_iteration: int | None, notes: list[str]) -> tuple[int, list[str]]:
    """The training iteration of ProfilerStep#0: given, else the traces' ``vlm_perf_first_iteration``, else 1."""
    if first_iteration is None:
        stated = {m.get("vlm_perf_first_iteration") for m in partial.meta} - {None}
        if len(stated) == 1:
            value = stated.pop()
            if type(value) is not int or not 0 <= value <= MAX_ITERATION:
                raise InputError(f"vlm_perf_first_iteration must be an iteration, an integer from 0 to {MAX_ITERATION}, "
                                 f"got {str(value)[:40]}", partial.files[0])
            first_iteration = value
        else:
            first_iteration = 1
            notes.append("ProfilerStep#N taken as training iteration N+1 (profile.step() after every optimizer "
                         "step from the first); pass the first iteration when the profiler started later")
    elif not 0 <= first_iteration <= MAX_ITERATION:
        raise InputError(f"first iteration {str(first_iteration)[:40]} is not an iteration (0 to {MAX_ITERATION})")
    return first_iteration, notes


def complete(result: TraceParts, notes: list[str], *, spec: ModelSpec | None, metadata: "TraceMetadata | None",
             causal: str, frozen, peak_flops: float | None, world_size: int | None) -> TraceParts:
    """The attribution joined with FLOPs (metadata or the trace's shapes) and checked (`analyze_traces`' last half;
    ``notes``: the reading's and the checks' notes, first)."""
    from .trace_checks import attention_core, implausible

    result.notes = list(dict.fromkeys(notes + result.notes))
    result.peak_flops = peak_flops
    if spec is not None and metadata is not None:
        result.flops = _metadata_flops(result, spec, metadata, frozen, causal, world_size)
        result.flops_source = "metadata"
    elif result.shape_flops.height:
        result.flops_source = "trace shapes"
        result.notes.append("no model + metadata: FLOPs per part from the matmul shapes the trace recorded "
                            "(aten::mm/addmm/bmm/baddbmm only; convolutions, fused attention (SDPA / flash) and "
                            "grouped GEMMs are not counted, so those parts read low)")
    elif spec is None:
        result.notes.append("no model: times only (pass the run folder: --run RUN_DIR, with run.yaml + metadata)")
    else:
        result.notes.append("no per-microbatch metadata: times only, no FLOPs per part")
    result.attention_warning = attention_core(result, causal, spec)  # eager attention counted causal half
    result.notes += implausible(result) + ([result.attention_warning] if result.attention_warning else [])
    return result


def _metadata_flops(result: TraceParts, spec: ModelSpec, metadata: "TraceMetadata", frozen, causal: str,
                    world_size: int | None) -> pl.DataFrame:
    per_it, per_rank = metadata.per_iteration, metadata.per_rank
    steps = result.steps.filter(pl.col("iteration").is_not_null())
    wanted = sorted(set(steps["iteration"].to_list()))
    have = set(per_it["iteration"].to_list())
    missing = [i for i in wanted if i not in have]
    if missing:
        result.notes.append(f"no metadata for profiled iteration(s) {missing[:10]}: their parts have no FLOPs")
    trace_ranks = sorted(set(steps["rank"].to_list()))
    dp_ranks = set(per_rank["dp_rank"].drop_nulls().to_list()) if "dp_rank" in per_rank.columns else set()
    pure_dp = len(dp_ranks) > 1 and set(trace_ranks) <= dp_ranks and world_size in (None, len(dp_ranks))

    def stats(frame: pl.DataFrame) -> BatchStats:
        return BatchStats(**{k: int(v) for k, v in frame.select(BatchStats.field_names()).row(0, named=True).items()})

    out: dict[tuple[int, int], dict[str, tuple[float, float]]] = {}
    divide = 1
    if not pure_dp and len(dp_ranks) > 1:
        if world_size:
            divide = world_size
            result.notes.append(f"trace ranks are not the metadata's DP ranks: each rank is credited the iteration's "
                                f"FLOPs / {world_size} GPUs (an average; model-parallel layouts split the work)")
        else:
            result.notes.append("the metadata holds several DP ranks but the world size is unknown: each rank is "
                                "credited the WHOLE iteration's FLOPs (pass a run.yaml with num_gpus)")
    for rank in trace_ranks:
        for it in wanted:
            if it not in have:
                continue
            if pure_dp:
                row = per_rank.filter((pl.col("iteration") == it) & (pl.col("dp_rank") == rank))
                if row.height == 0:
                    continue
                parts = flops_by_part(spec, stats(row), frozen=frozen, causal=causal)
            else:
                parts = flops_by_part(spec, stats(per_it.filter(pl.col("iteration") == it)), frozen=frozen,
                                      causal=causal)
            out[(rank, it)] = {k: (f / divide, ff / divide) for k, (f, ff) in parts.items()}
    return flops_frame(out)
