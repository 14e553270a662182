"""Many runs side by side (a sweep): pure functions over the runs' report summaries.

Every number of a row is read from that run's own ``summary.json`` dict (`vlm_perf.report.build_summary`), so a
sweep always agrees with each run's `vlm-perf report`: TFLOP/s/GPU and MFU per convention (the report's
time-weighted means), the vision share, the step time and the media per iteration (the summary's ``step`` block,
`vlm_perf.analysis.compare.step_facts`). Run #1 is the baseline: each other row states what differs from it (the
stated configuration, the regime, and the media and LM tokens per iteration).
"""

from __future__ import annotations

import math
from typing import Any, Sequence

from ..errors import ConfigError
from .compare import regime_of, logged_convention

__all__ = ["MAX_RUNS", "sweep_table", "sweep_frame_rows", "media_tokens_per_iteration", "CONFIG_FIELDS"]

#: the most runs one sweep compares (a larger one is refused, not truncated)
MAX_RUNS = 100

#: run_config fields whose difference from run #1 a row names (field, label), after model / GPUs / regime
CONFIG_FIELDS: tuple[tuple[str, str], ...] = (
    ("seq_length", "seq_length"), ("global_batch_size", "global_batch_size"),
    ("micro_batch_size", "micro_batch_size"), ("tensor_parallel", "TP"), ("pipeline_parallel", "PP"),
    ("context_parallel", "CP"), ("expert_parallel", "EP"), ("data_parallel", "DP"), ("image_grid", "image_grid"),
    ("image_size", "image_size"), ("images_per_sample", "images_per_sample"),
    ("recompute_granularity", "recompute"), ("recompute_method", "recompute_method"),
    ("recompute_num_layers", "recompute_num_layers"), ("gradient_checkpointing", "gradient_checkpointing"),
    ("seed", "seed"),
)


def media_tokens_per_iteration(step: dict) -> float | None:
    """Merged media (image + video) tokens the LM sees per iteration: LM tokens / iteration x visual-token share
    (both from the summary's ``step`` block, over the windows the report's means use)."""
    tokens, share = step.get("lm_tokens_per_iteration"), step.get("visual_token_share")
    if tokens is None or share is None:
        return None
    return tokens * share


def _text(value: Any) -> str:
    if value is None:
        return "—"
    if isinstance(value, (list, tuple)):
        return ",".join(map(str, value)) if value else "—"
    return str(value)


def _ratio_note(label: str, value: float | None, first: float | None) -> str | None:
    """``label ×r`` when the two differ at the shown precision (3 decimals), else None."""
    if value is None or first is None:
        return None if value == first else f"{label} {_text(first)} → {_text(value)}"
    if first == 0:
        return None if value == 0 else f"{label} 0 → {value:,.0f}"
    ratio = value / first
    if not math.isfinite(ratio) or f"{ratio:.3f}" == "1.000":
        return None
    return f"{label} ×{ratio:.3f}"


def _identity(summary: dict) -> dict:
    """What a row compares with run #1 besides the run_config fields."""
    return {"model": summary.get("model"), "GPUs": summary.get("world_size"), "GPU": summary.get("gpu"),
            "dtype": summary.get("dtype"), "peak TFLOP/s": summary.get("peak_tflops"),
            "regime": regime_of(summary.get("regime"))["description"]}


def changes(summary: dict, first: dict) -> list[str]:
    """What differs between run ``summary`` and run #1 ``first``: identity, configuration, then data."""
    out = []
    mine, theirs = _identity(summary), _identity(first)
    for key in mine:
        if mine[key] != theirs[key]:
            out.append(f"{key} {_text(theirs[key])} → {_text(mine[key])}")
    ca, cb = first.get("run_config") or {}, summary.get("run_config") or {}
    for field, label in CONFIG_FIELDS:
        if ca.get(field) != cb.get(field):
            out.append(f"{label} {_text(ca.get(field))} → {_text(cb.get(field))}")
    step, step0 = summary.get("step") or {}, first.get("step") or {}
    for label, value, base in (("media tokens/iteration", media_tokens_per_iteration(step),
                                media_tokens_per_iteration(step0)),
                               ("LM tokens/iteration", step.get("lm_tokens_per_iteration"),
                                step0.get("lm_tokens_per_iteration"))):
        note = _ratio_note(label, value, base)
        if note:
            out.append(note)
    return out


def _name(run: str, runs: Sequence[str]) -> str:
    """A short name for the run: its last path part, or the whole path where two runs share that part."""
    def tail(text: str) -> str:
        return text.rstrip("/").rsplit("/", 1)[-1] or text

    mine = tail(run)
    return mine if sum(tail(r) == mine for r in runs) == 1 else run


def _row(index: int, summary: dict, first: dict, runs: Sequence[str], conventions: list[str]) -> dict:
    step = summary.get("step") or {}
    config = summary.get("run_config") or {}
    convs = summary.get("conventions") or {}
    logged = logged_convention(summary)
    return {
        "index": index,
        "run": summary.get("run"),
        "name": _name(str(summary.get("run")), runs),
        "model": summary.get("model"),
        "world_size": summary.get("world_size"),
        "gpu": summary.get("gpu"),
        "dtype": summary.get("dtype"),
        "peak_tflops": summary.get("peak_tflops"),
        "regime": regime_of(summary.get("regime"))["description"],
        "synthetic": bool(summary.get("synthetic")),
        "generator": config.get("generator") if summary.get("synthetic") else None,
        "seed": config.get("seed") if summary.get("synthetic") else None,
        "estimated": bool(summary.get("estimated")),
        "checks_status": summary.get("checks_status"),
        "checks_failed": list(summary.get("checks_failed") or []),
        "conventions": {c: {"tflops_per_gpu_mean": convs[c].get("tflops_per_gpu_mean"),
                            "mfu_mean": convs[c].get("mfu_mean")} for c in conventions if c in convs},
        "vision_share": summary.get("vision_share_mean"),
        "seconds_per_iteration": step.get("seconds_per_iteration"),
        "exact_flops_per_iteration": step.get("exact_flops_per_iteration"),
        "lm_tokens_per_iteration": step.get("lm_tokens_per_iteration"),
        "media_tokens_per_iteration": media_tokens_per_iteration(step),
        "images_and_videos_per_iteration": step.get("images_and_videos_per_iteration"),
        "logged_tflops_per_gpu_mean": summary.get("logged_tflops_per_gpu_mean"),
        "logged_convention": logged["convention"],
        "changed": [] if index == 1 else changes(summary, first),
    }


def sweep_table(summaries: Sequence[dict], left_out: Sequence[tuple[str, str]] = ()) -> dict:
    """Everything the sweep page shows, from the runs' report summaries in the order given (#1 = baseline).
    ``left_out``: (run, reason) of runs that could not be opened and were left out on request."""
    if not summaries:
        raise ConfigError("a sweep needs at least one opened run")
    if len(summaries) + len(left_out) > MAX_RUNS:
        raise ConfigError(f"a sweep compares at most {MAX_RUNS} runs, got {len(summaries) + len(left_out)}")
    conventions: list[str] = []
    for s in summaries:  # the union, in the order the runs state them
        conventions += [c for c in (s.get("conventions") or {}) if c not in conventions]
    runs = [str(s.get("run")) for s in summaries]
    rows = [_row(i, s, summaries[0], runs, conventions) for i, s in enumerate(summaries, start=1)]
    messages = [f"#{row['index']} {row['name']}: {m}" for row, s in zip(rows, summaries) for m in s.get("messages", [])]
    return {"kind": "sweep", "baseline": rows[0]["run"], "conventions": conventions, "runs": rows,
            "left_out": [{"run": run, "reason": reason} for run, reason in left_out], "messages": messages}


def sweep_frame_rows(sweep: dict) -> list[dict]:
    """One flat record per run (the CSV / Parquet table): plain columns, a TFLOP/s/GPU and an MFU column per
    convention (``<convention>_tflops_per_gpu``, ``<convention>_mfu``), the changes joined with "; "."""
    out = []
    for row in sweep["runs"]:
        flat = {k: row[k] for k in ("index", "run", "name", "model", "world_size", "gpu", "dtype", "peak_tflops",
                                    "regime", "synthetic", "generator", "seed", "estimated", "checks_status")}
        flat["checks_failed"] = ", ".join(row["checks_failed"])
        for conv in sweep["conventions"]:
            entry = row["conventions"].get(conv) or {}
            flat[f"{conv}_tflops_per_gpu"] = entry.get("tflops_per_gpu_mean")
            flat[f"{conv}_mfu"] = entry.get("mfu_mean")
        for key in ("vision_share", "seconds_per_iteration", "exact_flops_per_iteration", "lm_tokens_per_iteration",
                    "media_tokens_per_iteration", "images_and_videos_per_iteration", "logged_tflops_per_gpu_mean",
                    "logged_convention"):
            flat[key] = row[key]
        flat["changed_vs_first"] = "; ".join(row["changed"]) if row["index"] != 1 else "baseline"
        out.append(flat)
    return out
