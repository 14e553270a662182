"""Report figures (matplotlib, Agg backend). Each function draws one PNG and returns its path."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import polars as pl  # noqa: E402

from ..analysis.run import BEFORE, RunAnalysis  # noqa: E402

AFTER = "exact"
STYLE = {BEFORE: dict(color="#7f7f7f", lw=1.8), AFTER: dict(color="#d62728", lw=2.2)}


def _legend(ax, **kwargs) -> None:
    """A legend only when something is labelled (matplotlib warns on an empty one)."""
    if ax.get_legend_handles_labels()[0]:
        ax.legend(**kwargs)


def _save(fig, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _skipped_note(ax, run: RunAnalysis) -> None:
    skipped = run.windows.filter(pl.col("first_in_segment") | ~pl.col("complete")).height
    if skipped:
        ax.text(0.01, 0.02, f"{skipped} window(s) not shown: first after a (re)start, or metadata incomplete",
                transform=ax.transAxes, fontsize=7, color="#555")


def tflops_over_time(run: RunAnalysis, path: Path) -> Path:
    w = run.reliable_windows().sort("iteration")
    fig, ax = plt.subplots(figsize=(11, 4.2))
    _skipped_note(ax, run)
    x = w["iteration"].to_numpy()
    if "tflops_per_gpu_logged" in w.columns and w["tflops_per_gpu_logged"].drop_nulls().len():
        ax.scatter(x, w["tflops_per_gpu_logged"].to_numpy(), s=10, color="black", label="logged by the framework",
                   zorder=3)
    for conv in run.conventions:
        style = STYLE.get(conv, dict(lw=1.0, ls="--"))
        label = {BEFORE: f"{BEFORE} (LM only: before vision accounting)",
                 AFTER: f"{AFTER} (vision + LM: after)"}.get(conv, conv)
        ax.plot(x, w[f"{conv}_tflops_per_gpu"].to_numpy(), label=label, **style)
    ax.set_xlabel("iteration (end of logging window)")
    ax.set_ylabel("TFLOP/s per GPU")
    ax.set_title(f"{run.model}: TFLOP/s/GPU per logging window" + (" (ESTIMATE)" if run.estimated else ""))
    ax.grid(alpha=0.3)
    _legend(ax, fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return _save(fig, path)


def mfu_over_time(run: RunAnalysis, path: Path) -> Path:
    w = run.reliable_windows().sort("iteration")
    fig, ax = plt.subplots(figsize=(11, 3.6))
    _skipped_note(ax, run)
    x = w["iteration"].to_numpy()
    for conv, label in ((BEFORE, "before (LM only)"), (AFTER, "after (exact, vision counted)")):
        ax.plot(x, 100 * w[f"{conv}_mfu"].to_numpy(), label=label, **STYLE[conv])
    ax.set_xlabel("iteration (end of logging window)")
    ax.set_ylabel("MFU (% of dense peak)")
    peak = f"{run.peak_tflops:g} TFLOP/s" if run.peak_tflops else "unknown peak"
    ax.set_title(f"MFU before / after vision accounting ({peak} per GPU)")
    ax.grid(alpha=0.3)
    _legend(ax, fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return _save(fig, path)


def component_stack(run: RunAnalysis, path: Path) -> Path:
    frame = run.per_iteration.sort("iteration")
    cols = [c for c in frame.columns if c.startswith("flops.") and frame[c].sum() > 0]
    fig, ax = plt.subplots(figsize=(9, 4.2))
    x = frame["iteration"].to_numpy()
    ys = [frame[c].to_numpy() / 1e15 for c in cols]
    colors = plt.get_cmap("tab20")(np.linspace(0, 1, max(len(cols), 2)))
    ax.stackplot(x, ys, labels=[c.removeprefix("flops.") for c in cols], colors=colors, linewidth=0)
    ax.set_xlabel("iteration")
    ax.set_ylabel("training PFLOP per iteration (exact)")
    ax.set_title("Where the FLOPs go: components per iteration")
    _legend(ax, fontsize=7, ncol=2, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    ax.grid(alpha=0.3)
    return _save(fig, path)


def vision_share_hist(per_microbatch: pl.Series | None, per_iteration: pl.Series, path: Path) -> Path:
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
    panels = (("per microbatch", per_microbatch, "microbatches"), ("per iteration", per_iteration, "iterations"))
    for ax, (title, values, unit) in zip(axes, panels):
        data = 100 * values.drop_nulls().to_numpy() if values is not None else np.array([])
        if data.size:
            top = max(5.0, float(np.ceil(data.max() / 5) * 5))
            ax.hist(data, bins=np.linspace(0, top, 41), color="#1f77b4" if unit == "microbatches" else "#ff7f0e")
            ax.axvline(float(np.mean(data)), color="black", lw=1, ls="--", label=f"mean {np.mean(data):.1f}%")
            _legend(ax, fontsize=8)
        else:
            ax.text(0.5, 0.5, "no per-microbatch metadata", ha="center", va="center", transform=ax.transAxes)
        ax.set_xlabel("vision share of training FLOPs (%, exact)")
        ax.set_ylabel(f"number of {unit}")
        ax.set_title(f"Vision share {title}")
        ax.grid(alpha=0.3)
    return _save(fig, path)


def step_time_fit(run: RunAnalysis, path: Path) -> Path:
    w = run.reliable_windows()
    fig, ax = plt.subplots(figsize=(7, 4.2))
    per_iter = (w["window_seconds"] / w["window_iterations"]).to_numpy()
    lm = (w["exact_language"] / w["window_iterations"]).to_numpy() / 1e15
    vis = (w["exact_vision"] / w["window_iterations"]).to_numpy() / 1e15
    sc = ax.scatter(lm + vis, per_iter, c=100 * vis / np.maximum(lm + vis, 1e-30), cmap="viridis", s=14)
    fig.colorbar(sc, ax=ax, label="vision share (%)")
    a = run.attribution
    if not a.ok:
        ax.text(0.01, 0.98, f"no attribution: {a.reason}", transform=ax.transAxes, fontsize=7, va="top", wrap=True)
    if a.ok and run.world_size:
        gpus = run.world_size
        pred = a.overhead_s + lm * 1e3 / (a.lm_tflops_per_gpu * gpus) + (
            vis * 1e3 / (a.vision_tflops_per_gpu * gpus) if a.vision_tflops_per_gpu else 0)
        order = np.argsort(lm + vis)
        ax.plot((lm + vis)[order], pred[order], color="red", lw=1,
                label=f"fit: LM {a.lm_tflops_per_gpu:.0f}, vision {a.vision_tflops_per_gpu or float('nan'):.0f} "
                      "TFLOP/s/GPU" + (f", overhead {a.overhead_s:.2f} s" if a.model != "no_overhead"
                                       else " (effective, overhead included)"))
        _legend(ax, fontsize=8)
    ax.set_xlabel("exact training PFLOP per iteration")
    ax.set_ylabel("seconds per iteration")
    ax.set_title("Step time vs FLOPs (attribution fit)")
    ax.grid(alpha=0.3)
    return _save(fig, path)
