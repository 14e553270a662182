"""Figures for the notebooks (matplotlib). Every function returns a ``matplotlib.figure.Figure``.

Figures are built with ``matplotlib.figure.Figure`` (not pyplot), so they never pile up in pyplot's
state and work under any backend: display them in a notebook with ``display(fig)`` or save them with
``fig.savefig(path)``. All numbers come from :mod:`vlm_perf.analysis.explore` or a ``RunAnalysis``.
"""

from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np
import polars as pl
from matplotlib.figure import Figure

from ..analysis.explore import MFUImpact, components_by_convention, mfu_impact, sample_split, sweep
from ..analysis.run import BEFORE, RunAnalysis
from ..arch.spec import ModelSpec
from ..flops import COMPONENTS

CONV_COLORS = {"megatron-lm": "#7f7f7f", "exact": "#d62728", "megatron-bridge": "#1f77b4",
               "mbridge-pr2575": "#ff7f0e", "torchtitan": "#2ca02c", "verl": "#9467bd", "6nd": "#8c564b"}
_VISION_CMAP, _LM_CMAP = "autumn", "winter"


def _color(conv: str) -> str:
    return CONV_COLORS.get(conv, "#17becf")


def component_colors() -> dict[str, tuple]:
    """Warm colours for vision components, cool ones for LM components (stable across figures)."""
    import matplotlib

    vis = [c for c in COMPONENTS if c.startswith("vision.")]
    lm = [c for c in COMPONENTS if c.startswith("lm.")]
    vmap, lmap = matplotlib.colormaps[_VISION_CMAP], matplotlib.colormaps[_LM_CMAP]
    out = {c: vmap(i / max(len(vis) - 1, 1) * 0.85) for i, c in enumerate(vis)}
    out.update({c: lmap(i / max(len(lm) - 1, 1)) for i, c in enumerate(lm)})
    audio = [c for c in COMPONENTS if c.startswith("audio.")]  # an audio encoder (Omni thinkers): greys
    gmap = matplotlib.colormaps["Greys"]
    out.update({c: gmap(0.35 + 0.5 * i / max(len(audio) - 1, 1)) for i, c in enumerate(audio)})
    return out


# ------------------------------------------------------------------------------------ runs
def run_rates_figure(run: RunAnalysis, conventions: Sequence[str] | None = None) -> Figure:
    """TFLOP/s/GPU (top) and MFU (bottom) per usable logging window (the report's), one line per convention."""
    convs = list(conventions or run.conventions)
    w = run.reliable_windows().sort("iteration")
    x = w["iteration"].to_numpy()
    fig = Figure(figsize=(12, 6.4))
    ax1, ax2 = fig.subplots(2, 1, sharex=True)
    if "tflops_per_gpu_logged" in w.columns and w["tflops_per_gpu_logged"].drop_nulls().len():
        ax1.scatter(x, w["tflops_per_gpu_logged"].to_numpy(), s=9, color="black", zorder=3,
                    label="logged by the framework")
    for conv in convs:
        kw = dict(color=_color(conv), lw=2.0 if conv in (BEFORE, "exact") else 1.2,
                  ls="-" if conv in (BEFORE, "exact") else "--")
        label = conv + (" (LM only = before)" if conv == BEFORE else " (vision + LM = after)"
                        if conv == "exact" else "")
        ax1.plot(x, w[f"{conv}_tflops_per_gpu"].to_numpy(), label=label, **kw)
        ax2.plot(x, 100 * w[f"{conv}_mfu"].to_numpy(), label=conv, **kw)
    ax1.set_ylabel("TFLOP/s per GPU")
    ax1.set_title(f"{run.model}: throughput per logging window" + (" (ESTIMATE)" if run.estimated else ""))
    ax1.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    peak = f"{run.peak_tflops:g} TFLOP/s/GPU dense peak" if run.peak_tflops else "peak unknown"
    ax2.set_ylabel("MFU (% of peak)")
    ax2.set_xlabel("iteration (end of logging window; first window after each (re)start omitted: warm-up)")
    ax2.set_title(f"MFU ({peak})")
    for ax in (ax1, ax2):
        ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig


def convention_summary_figure(run: RunAnalysis, conventions: Sequence[str] | None = None) -> Figure:
    """Mean TFLOP/s/GPU per convention (bars), with the MFU printed on each bar."""
    summary = run.convention_summary()
    convs = [c for c in (conventions or run.conventions) if summary.get(c, {}).get("tflops_per_gpu_mean")]
    vals = [summary[c]["tflops_per_gpu_mean"] for c in convs]
    fig = Figure(figsize=(8, 0.55 * len(convs) + 1.6))
    ax = fig.subplots()
    y = np.arange(len(convs))
    ax.barh(y, vals, color=[_color(c) for c in convs])
    for yi, c, v in zip(y, convs, vals):
        mfu = summary[c]["mfu_mean"]
        ax.text(v, yi, f" {v:.0f}" + (f"  (MFU {100 * mfu:.1f}%)" if mfu is not None else ""), va="center",
                fontsize=8)
    ax.set_yticks(y, convs)
    ax.invert_yaxis()
    ax.set_xlabel("mean TFLOP/s per GPU (time-weighted over complete windows)")
    ax.set_xlim(0, max(vals) * 1.3 if vals else 1)
    ax.set_title(f"{run.model}: the same run under each convention")
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    return fig


def components_figure(frame: pl.DataFrame, title: str = "", unit: float = 1e18, unit_name: str = "EFLOP") -> Figure:
    """Stacked horizontal bars: FLOPs per component (colour) per convention (row).

    ``frame``: long format from :func:`vlm_perf.analysis.explore.components_by_convention`.
    """
    convs = list(dict.fromkeys(frame["convention"].to_list()))
    colors = component_colors()
    present = [c for c in COMPONENTS if frame.filter((pl.col("component") == c) & (pl.col("flops") > 0)).height]
    fig = Figure(figsize=(10, 0.5 * len(convs) + 2.4))
    ax = fig.subplots()
    y = np.arange(len(convs))
    left = np.zeros(len(convs))
    for comp in present:
        vals = np.array([frame.filter((pl.col("convention") == c) & (pl.col("component") == comp))["flops"].sum()
                         for c in convs]) / unit
        ax.barh(y, vals, left=left, color=colors[comp], label=comp, edgecolor="white", linewidth=0.4)
        left += vals
    for yi, total in zip(y, left):
        ax.text(total, yi, f" {total:.3g}", va="center", fontsize=8)
    ax.set_yticks(y, convs)
    ax.invert_yaxis()
    ax.set_xlabel(f"training {unit_name} (sum over the run)" if unit_name else "training FLOPs")
    ax.set_xlim(0, left.max() * 1.15 if len(left) and left.max() > 0 else 1)
    ax.set_title(title or "FLOPs by component and convention (warm: vision, cool: language model)")
    ax.legend(fontsize=7, ncol=1, loc="upper left", bbox_to_anchor=(1.01, 1.0), title="component",
              title_fontsize=8)
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    return fig


def run_components_figure(run_spec: ModelSpec, run: RunAnalysis, conventions: Sequence[str] | None = None,
                          frozen: Sequence[str] = ()) -> Figure:
    """:func:`components_figure` of a run's per-iteration statistics under ``conventions``."""
    frame = components_by_convention(run_spec, run.per_iteration, conventions, frozen)
    return components_figure(frame, title=f"{run.model}: FLOPs by component and convention (whole run)")


# ------------------------------------------------------------------------------------ explorer
def share_vs_resolution(frame: pl.DataFrame, ax=None, y: str = "vision_share", marker: tuple | None = None):
    """Vision share (%) against image side (px), one line per images-per-sample and convention.

    ``frame``: :func:`vlm_perf.analysis.explore.sweep` output. Returns the figure (new one if ``ax`` is None).
    """
    fig = None
    if ax is None:
        fig = Figure(figsize=(6.5, 4))
        ax = fig.subplots()
    styles = ["-", "--", ":", "-."]
    for (conv, n), part in frame.sort("image_h_px").group_by(["convention", "images_per_sample"],
                                                             maintain_order=True):
        ax.plot(part["image_h_px"].to_numpy(), 100 * part[y].to_numpy(), marker="o", ms=3, color=_color(conv),
                ls=styles[(n - 1) % len(styles)] if n else "-", label=f"{conv}, {n} image(s)/sample")
    if marker is not None:
        ax.plot(*marker, marker="*", ms=14, color="gold", mec="black", zorder=5, label="current selection")
    ax.set_xlabel("image side (px, square; resized by the processor)")
    ax.set_ylabel({"vision_share": "vision share of training FLOPs (%)",
                   "vision_to_lm": "vision FLOPs / LM FLOPs (%)"}.get(y, y))
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    return fig or ax.figure


def explorer_figure(spec: ModelSpec, image_px: int = 448, images_per_sample: int = 1, text_tokens: int = 1024,
                    frozen_vision: bool = False, gpu: str = "H100 SXM", before_tflops_per_gpu: float = 400.0,
                    conventions: Sequence[str] = ("megatron-lm", "megatron-bridge", "mbridge-pr2575", "exact"),
                    resolutions: Sequence[int] = (224, 336, 448, 672, 896, 1120, 1344)) -> Figure:
    """The vision/LM explorer as one 2x2 figure for one setting.

    (a) training FLOPs of the sample, vision vs LM, per convention; (b) exact vision share against image
    side for 1, 2 and 4 images; (c) TFLOP/s/GPU and MFU before (megatron-lm) and after counting vision, for
    a run that logged ``before_tflops_per_gpu`` (step time unchanged); (d) exact vision share against text
    length at this resolution. ``frozen_vision`` freezes the vision tower in ``exact``.
    """
    frozen = ("vision_tower",) if frozen_vision else ()
    conventions = list(dict.fromkeys([*conventions, BEFORE, "exact"]))
    split = sample_split(spec, image_px, images_per_sample, text_tokens, frozen=frozen, conventions=conventions)
    exact_share = split.share("exact")
    fig = Figure(figsize=(12, 8.2))
    (a, b), (c, d) = fig.subplots(2, 2)
    img = split.image_grid
    fig.suptitle(f"{spec.name}: {images_per_sample} x {image_px}px image(s) -> grid {img[1]}x{img[2]} patches, "
                 f"{split.visual_tokens} visual + {text_tokens} text tokens"
                 + (" (vision tower frozen)" if frozen_vision else ""), fontsize=11)

    # (a) per-sample FLOPs per convention
    convs = list(split.breakdowns)
    y = np.arange(len(convs))
    lm = np.array([split.language(cv) for cv in convs]) / 1e12
    vis = np.array([split.vision(cv) for cv in convs]) / 1e12
    a.barh(y, lm, color="#4c72b0", label="language model")
    a.barh(y, vis, left=lm, color="#dd8452", label="vision tower + mergers")
    for yi, l_, v_, cv in zip(y, lm, vis, convs):
        a.text(l_ + v_, yi, f" {100 * split.share(cv):.1f}% vision", va="center", fontsize=8)
    a.set_yticks(y, convs)
    a.invert_yaxis()
    a.set_xlim(0, (lm + vis).max() * 1.35)
    a.set_xlabel("training TFLOP per sample")
    a.set_title("(a) FLOPs of one sample, by convention", fontsize=10)
    a.legend(fontsize=8, loc="upper right")
    a.grid(axis="x", alpha=0.3)

    # (b) share vs resolution
    frame = sweep(spec, resolutions, images_per_sample=sorted({1, 2, 4, images_per_sample}),
                  text_tokens=(text_tokens,), conventions=("exact",), frozen=frozen)
    share_vs_resolution(frame, ax=b, marker=(image_px, 100 * exact_share))
    b.set_title(f"(b) exact vision share vs image size ({text_tokens} text tokens)", fontsize=10)

    # (c) MFU impact at a fixed logged before-number
    afters = [cv for cv in convs if cv != BEFORE]
    impacts = {cv: mfu_impact(split, before=BEFORE, after=cv, before_tflops_per_gpu=before_tflops_per_gpu, gpu=gpu)
               for cv in afters}
    mfu_impact_bars(impacts, ax=c)
    c.set_title(f"(c) reported throughput if the log said {before_tflops_per_gpu:g} TFLOP/s/GPU ({gpu})",
                fontsize=10)

    # (d) share vs text length
    texts = (128, 256, 512, 1024, 2048, 4096, 8192)
    tf = sweep(spec, (image_px,), images_per_sample=(images_per_sample,), text_tokens=texts, conventions=("exact",),
               frozen=frozen)
    d.plot(tf["text_tokens"].to_numpy(), 100 * tf["vision_share"].to_numpy(), marker="o", color=_color("exact"),
           label=f"exact, {images_per_sample} x {image_px}px")
    d.plot([text_tokens], [100 * exact_share], marker="*", ms=14, color="gold", mec="black",
           label="current selection")
    d.set_xscale("log", base=2)
    d.set_xlabel("text tokens per sample (log scale)")
    d.set_ylabel("vision share of training FLOPs (%)")
    d.set_title("(d) exact vision share vs text length", fontsize=10)
    d.grid(alpha=0.3)
    d.legend(fontsize=8)
    fig.tight_layout()
    return fig


def mfu_impact_bars(impacts: Mapping[str, MFUImpact], ax=None):
    """Bars: the 'before' TFLOP/s/GPU, then each 'after' (label: MFU). Returns the figure."""
    fig = None
    if ax is None:
        fig = Figure(figsize=(6.5, 4))
        ax = fig.subplots()
    first = next(iter(impacts.values()))
    names = [first.before_convention] + list(impacts)
    vals = [first.before_tflops_per_gpu] + [i.after_tflops_per_gpu for i in impacts.values()]
    mfus = [first.before_mfu] + [i.after_mfu for i in impacts.values()]
    x = np.arange(len(names))
    ax.bar(x, vals, color=[_color(n) for n in names])
    for xi, v, m in zip(x, vals, mfus):
        ax.text(xi, v, f"{v:.0f}" + (f"\nMFU {100 * m:.1f}%" if m is not None else ""), ha="center", va="bottom",
                fontsize=8)
    ax.set_xticks(x, [n + ("\n(before)" if i == 0 else "") for i, n in enumerate(names)], fontsize=8)
    ax.set_ylabel("TFLOP/s per GPU")
    ax.set_ylim(0, max(vals) * 1.25)
    ax.grid(axis="y", alpha=0.3)
    return fig or ax.figure


# ------------------------------------------------------------------------------------ PR #2575
def ratio_figure(table: pl.DataFrame, observed_ratio: float | None = None, title: str = "") -> Figure:
    """Per-visual-token vision/LM cost ratio by frame size against the parameter ratio (the "1/6")."""
    fig = Figure(figsize=(7.5, 4.2))
    ax = fig.subplots()
    x = np.arange(table.height)
    ax.bar(x, table["cost_ratio"].to_numpy(), color="#dd8452",
           label="vision FLOPs per visual token / LM FLOPs per token")
    ax.axhline(table["param_ratio"][0], color="black", ls="--",
               label=f"parameter ratio vision / active LM = {table['param_ratio'][0]:.3f}")
    if observed_ratio is not None:
        ax.axhline(observed_ratio, color="#2ca02c", ls=":", lw=2,
                   label=f"observed increase after/before - 1 = {observed_ratio:.3f}")
    for xi, v in zip(x, table["cost_ratio"].to_numpy()):
        ax.text(xi, v, f"{v:.2f}", ha="center", va="bottom", fontsize=9)
    ax.set_xticks(x, [f"{p} patches\n({px}x{px} px)" for p, px in zip(table["patches_per_frame"], table["frame_px"])])
    ax.set_xlabel("frame size (patches per frame)")
    ax.set_ylabel("ratio (dimensionless)")
    ax.set_ylim(0, max(table["cost_ratio"].max(), observed_ratio or 0) * 1.3)
    ax.set_title(title or "Cost of a visual token vs the parameter ratio")
    ax.legend(fontsize=8, loc="upper left")
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    return fig


__all__ = ["CONV_COLORS", "component_colors", "components_figure", "convention_summary_figure", "explorer_figure",
           "mfu_impact_bars", "ratio_figure", "run_components_figure", "run_rates_figure", "share_vs_resolution"]
