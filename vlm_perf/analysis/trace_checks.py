"""What a set of profiler traces says about itself before and after the attribution (`trace_parts.analyze_traces`).

Before (`checked_events`), on the merged event table of the trace files:

* two files holding the same rank's same ``ProfilerStep#N`` are two copies of one rank's trace (or two ranks
  named alike): summing them would double that rank's time, so it is an error naming both files;
* a ``ProfilerStep#N`` that appears more than once in one rank's trace (overlapping or repeated steps) is named
  with its count;
* an event whose duration is negative (end before start) cannot be placed: it is dropped and named with the count
  per rank.

After (`implausible`), on the per-part result joined with FLOPs:

* a part whose achieved FLOP/s exceed the GPU's peak (MFU > `MFU_PLAUSIBLE`) did not do those FLOPs in that
  time: the FLOPs are not the profiled work's (metadata of another run or of other iterations) or the peak is
  wrong; named as implausible, with the part and its MFU;
* where the trace recorded the matmul shapes (``record_shapes``), the parts whose recorded matmul FLOPs and the
  metadata's exact FLOPs differ by more than `SHAPES_AGREE` are named (`shapes_gap`): expected for a fused
  attention core (not recorded) or recomputed activations (recorded twice), otherwise a sign that the metadata
  is not of the profiled run;
* `attention_core`: evidence that the language model's attention core ran unfused (eager: the score and value
  matmuls ``aten::bmm`` and a ``softmax`` recorded in ``language_model.attention``, no fused attention kernel;
  or the model config's ``attn_implementation: eager``) computes every query x key score, the causal mask applied
  after: counted ``--causal half``, that part's exact FLOPs (the metadata's) read low, so it is a warning naming
  the evidence and the fix (``--causal full``), never a pass. FLOPs from the recorded shapes (no metadata) already
  hold the eager square: no warning there. The run-level warning (every exact number) is
  `vlm_perf.analysis.attention_kernel`'s.
"""

from __future__ import annotations

import re

import polars as pl

from ..errors import InputError

__all__ = ["MFU_PLAUSIBLE", "SHAPES_AGREE", "attention_core", "checked_events", "checked_frames", "checked_steps",
           "eager_ops", "explained_by_attention", "implausible", "negative_notes", "profiler_steps", "shapes_gap"]

#: the largest MFU a part can have (the peak is what the hardware can do)
MFU_PLAUSIBLE = 1.0
#: relative gap within which the recorded matmul FLOPs and the exact FLOPs of a part agree
SHAPES_AGREE = 0.01
_STEP = re.compile(r"^ProfilerStep#(\d+)$")
#: the LM's attention part, and the ops of an unfused (eager) core there: scores and values by batched matmuls, a
#: softmax between them; a fused kernel (flash / memory-efficient / cuDNN SDPA, flash-attn) computes no such ops
LM_ATTENTION = "language_model.attention"
_EAGER_MATMUL = re.compile(r"^aten::(bmm|baddbmm)$")
_EAGER_SOFTMAX = re.compile(r"^aten::_?(safe_)?softmax$")
_FUSED = re.compile(r"flash|efficient_attention|cudnn_attention|fused_attention|fmha", re.IGNORECASE)


def profiler_steps(frame: pl.DataFrame, path: str) -> pl.DataFrame | None:
    """The ``ProfilerStep#N`` ranges of one file's events (rank, name, file), or None without any."""
    named = frame.filter((pl.col("kind") == "annotation") & pl.col("name").str.starts_with("ProfilerStep#"))
    return named.select("rank", "name").with_columns(pl.lit(path).alias("file")) if named.height else None


def checked_steps(steps: list[pl.DataFrame]) -> list[str]:
    """Notes on the files' ``ProfilerStep#N`` tables (`profiler_steps`, in file order); raises `InputError` when two
    files hold the same rank's same profiler step."""
    notes: list[str] = []
    if steps:
        table = pl.concat(steps)
        per_file = table.unique(["rank", "name", "file"], maintain_order=True)
        shared = per_file.group_by("rank", "name", maintain_order=True).agg(pl.col("file")).filter(
            pl.col("file").list.len() > 1)
        if shared.height:
            row = shared.row(0, named=True)
            raise InputError(f"rank {row['rank']}'s {row['name']} is in {row['file'][0]} and {row['file'][1]}: two "
                             f"copies of one rank's trace (or two ranks named alike; {shared.height} step(s) in all); "
                             "give each rank's trace once")
        repeated = table.group_by("rank", "name", maintain_order=True).len().filter(pl.col("len") > 1)
        for row in repeated.head(5).iter_rows(named=True):
            notes.append(f"rank {row['rank']}: {row['name']} appears {row['len']} times in its trace (repeated or "
                         "overlapping profiler steps); each range is attributed as recorded")
    return notes


def negative_notes(dropped: dict[int, int]) -> list[str]:
    """Notes for the events dropped for a negative duration ({rank: count}, in order of first appearance)."""
    return [f"rank {rank}: {n} event(s) with a negative duration (end before start) dropped: their time cannot be "
            "placed" for rank, n in dropped.items()]


def checked_frames(partial) -> tuple[list[tuple[int, pl.DataFrame]], list[str]]:
    """The events of ``partial`` (a `TracePartial`) per rank, in order of first appearance, without negative-duration
    events, and notes; raises `InputError` when two files hold the same rank's same profiler step. No copy of the
    event table is made where each rank's events are one file's (the usual layout: one file per rank)."""
    steps = [t for t in (profiler_steps(f, p) for p, f in zip(partial.files, partial.frames)) if t is not None]
    notes = checked_steps(steps)
    dropped: dict[int, int] = {}
    by_rank: dict[int, list[pl.DataFrame]] = {}
    for frame in partial.frames:
        if not frame.height:
            continue
        ranks = frame["rank"].unique(maintain_order=True).to_list()
        parts = [frame] if len(ranks) == 1 else frame.partition_by("rank", maintain_order=True)
        for rank, part in zip(ranks, parts):
            negative = int((part["end"] < part["start"]).sum())
            if negative:
                dropped[rank] = dropped.get(rank, 0) + negative
                part = part.filter(pl.col("end") >= pl.col("start"))
            if part.height:
                by_rank.setdefault(rank, []).append(part)
    frames = [(rank, fs[0] if len(fs) == 1 else pl.concat(fs)) for rank, fs in by_rank.items()]
    return frames, notes + negative_notes(dropped)


def checked_events(partial) -> tuple[pl.DataFrame, list[str]]:
    """The merged events of ``partial`` (a `TracePartial`) without negative-duration events, and notes (one table:
    `checked_frames` per rank)."""
    frames, notes = checked_frames(partial)
    events = pl.concat([f for _, f in frames]) if frames else partial.events
    return events, notes


def shapes_gap(eff: pl.DataFrame) -> tuple[float, list[str]] | None:
    """(largest relative gap, the parts beyond `SHAPES_AGREE`) between the recorded matmul FLOPs and the exact
    FLOPs over the parts that have both; None when no part has both."""
    if "shape_flops" not in eff.columns:
        return None
    both = eff.filter(pl.col("flops").is_not_null() & pl.col("shape_flops").is_not_null() & (pl.col("flops") > 0))
    if not both.height:
        return None
    gaps = both.with_columns(((pl.col("shape_flops") - pl.col("flops")).abs() / pl.col("flops")).alias("_gap"))
    beyond = gaps.filter(pl.col("_gap") > SHAPES_AGREE)["part"].to_list()
    return float(gaps["_gap"].max()), beyond  # type: ignore[arg-type]


def implausible(result) -> list[str]:
    """Notes naming the parts of a `TraceParts` whose numbers cannot be those of the profiled work."""
    eff = result.summary()
    notes = []
    if "mfu" in eff.columns:
        for row in eff.filter(pl.col("mfu").fill_null(0) > MFU_PLAUSIBLE).iter_rows(named=True):
            notes.append(f"IMPLAUSIBLE: part {row['part']} at {100 * row['mfu']:.0f}% MFU, more than the GPU's peak: "
                         "its FLOPs are not the profiled work's (is the metadata of the run and iterations the trace "
                         "profiled? is the GPU peak right?)")
    gap = shapes_gap(eff) if result.flops_source == "metadata" else None
    if gap is not None and gap[1] and not explained_by_attention(result, gap[1]):
        notes.append(f"the matmul FLOPs the trace recorded differ from the metadata's exact FLOPs by up to "
                     f"{100 * gap[0]:.1f}% ({', '.join(gap[1])}): expected for a fused attention core (not recorded) "
                     "or recomputed activations (recorded twice); otherwise the metadata is not of the profiled run")
    return notes


def explained_by_attention(result, beyond: list[str]) -> bool:
    """The recorded matmul FLOPs depart from the exact ones in the LM's attention only, and the attention-core
    warning says why (an eager core counted causal half): no other explanation to offer."""
    return bool(getattr(result, "attention_warning", None)) and beyond == [LM_ATTENTION]


def eager_ops(result) -> str | None:
    """The trace's evidence of an unfused (eager) LM attention core, in words: batched matmuls and a softmax recorded
    in `LM_ATTENTION` and no fused attention kernel there (with their counts); None when the trace shows none."""
    ops = result.attention_ops.filter(pl.col("part") == LM_ATTENTION)
    counts = {name: int(n) for name, n in ops.group_by("name").agg(pl.col("count").sum()).iter_rows()}
    matmuls = {k: v for k, v in counts.items() if _EAGER_MATMUL.match(k)}
    softmax = {k: v for k, v in counts.items() if _EAGER_SOFTMAX.match(k)}
    if not (matmuls and softmax) or any(_FUSED.search(k) for k in counts):
        return None
    named = ", ".join(f"{k} x{v:,}" for k, v in [*sorted(matmuls.items()), *sorted(softmax.items())])
    return f"the trace records {named} in {LM_ATTENTION} and no fused attention kernel"


def attention_core(result, causal: str, spec=None) -> str | None:
    """A warning when ``causal`` (the exact FLOPs' LM attention core) is ``half`` but the trace or the model config
    says the core ran eager (full square scores): the evidence, what it does to the numbers, and the fix. None
    when nothing contradicts ``causal``, and when the FLOPs per part are not the exact ones of the run's metadata
    (the recorded matmul shapes of an eager core already hold the whole square: nothing is counted half)."""
    from .attention_kernel import config_evidence

    if causal != "half" or result.flops_source != "metadata":
        return None
    evidence = [e for e in (eager_ops(result), config_evidence(spec)) if e]
    if not evidence:
        return None
    eff = result.summary()
    gap = ""
    if "shape_flops" in eff.columns:
        row = eff.filter((pl.col("part") == LM_ATTENTION) & (pl.col("flops").fill_null(0) > 0)
                         & pl.col("shape_flops").is_not_null())
        if row.height:
            over = float(row["shape_flops"][0]) / float(row["flops"][0]) - 1
            gap = (f"; the matmul FLOPs the trace recorded there are {100 * over:+.3f}% off the exact count"
                   if abs(over) > SHAPES_AGREE else "")
    return (f"WARNING: eager attention counted causal half: {'; '.join(evidence)}. An eager core computes every "
            f"query x key score and applies the causal mask after, but the exact FLOPs count half of them "
            f"(--causal half), so {LM_ATTENTION}'s FLOPs, achieved FLOP/s and MFU read low{gap}. Fix: rerun with "
            "--causal full")
