"""Report figures (matplotlib, Agg backend). Each function draws one PNG, or returns why it did not.

Rules every figure follows: a line never joins windows across missing ones (a gap is a gap); a
figure with nothing to show is not drawn and the report says why; MFU is drawn only when a peak
is known; legends and notes sit outside the axes, so no text covers data; every string from the
input goes through `mathtext_safe` (a ``$`` in a model name cannot switch on mathtext).
"""

from __future__ import annotations

from pathlib import Path
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402
import numpy as np  # noqa: E402
import polars as pl  # noqa: E402

from ..analysis.run import BEFORE, RunAnalysis  # noqa: E402
from .content import mathtext_safe as safe  # noqa: E402
from .units import rate_unit  # noqa: E402

AFTER = "exact"
STYLE = {BEFORE: dict(color="#7f7f7f", lw=1.8), AFTER: dict(color="#d62728", lw=2.2)}


class Skip(Exception):
    """Raised by a figure function with the reason it has nothing to draw."""


def _legend(ax, **kwargs) -> None:
    """A legend only when something is labelled (matplotlib warns on an empty one)."""
    if ax.get_legend_handles_labels()[0]:
        ax.legend(**kwargs)


def _save(fig, path: Path) -> Path:
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return path


def _integer_iterations(ax) -> None:
    """Iterations are whole numbers: no 2.5 tick on a 20-iteration run."""
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))


def _note(fig, text: str) -> None:
    """A note under the axes (never over data)."""
    fig.text(0.01, -0.02, text, fontsize=7, color="#555", ha="left", va="top")


def _skipped_text(run: RunAnalysis) -> str | None:
    skipped = run.windows.filter(~pl.col("reliable")).height
    return (f"{skipped} window(s) not shown: first after a (re)start, metadata incomplete, or step time excluded"
            if skipped else None)


#: line figures draw at most about this many points; longer runs are drawn as means of consecutive windows
MAX_LINE_POINTS = 4000
#: scatter figures draw at most about this many points (every k-th window, evenly spread)
MAX_SCATTER_POINTS = 5000


def thin_windows(w: pl.DataFrame, columns: list[str], max_points: int | None = None) -> tuple[pl.DataFrame, int]:
    """Windows for a line figure: unchanged when at most ``max_points`` (default `MAX_LINE_POINTS`), else
    means of ``k`` consecutive ones.

    Only what is drawn changes, never a reported number. Bins never span a gap (a window whose start
    is not the previous window's end), so ``_with_breaks`` still breaks the line there; a bin's
    ``iteration`` is its last window's end and ``window_start`` its first window's start, and each
    of ``columns`` is the plain mean over the bin's windows (NaN and null values left out; a bin with
    none is NaN). Returns the frame and ``k`` (1: unchanged).
    """
    max_points = max_points or MAX_LINE_POINTS
    if w.height <= max_points:
        return w, 1
    k = -(-w.height // max_points)
    w = w.sort("iteration")
    ends = w["iteration"].to_numpy().astype(float)
    starts = w["window_start"].to_numpy().astype(float)
    n = len(ends)
    new_run = np.ones(n, dtype=bool)
    new_run[1:] = starts[1:] != ends[:-1]
    run_first = np.flatnonzero(new_run)
    position = np.arange(n) - run_first[np.cumsum(new_run) - 1]  # index of the window inside its run
    first = np.flatnonzero(new_run | (position % k == 0))  # first window of each bin
    last = np.append(first[1:], n) - 1
    out = {"iteration": ends[last], "window_start": starts[first]}
    for c in columns:
        values = w[c].cast(pl.Float64).fill_null(np.nan).to_numpy()
        finite = ~np.isnan(values)
        total = np.add.reduceat(np.where(finite, values, 0.0), first)
        count = np.add.reduceat(finite.astype(np.int64), first)
        with np.errstate(invalid="ignore", divide="ignore"):
            out[c] = np.where(count > 0, total / np.maximum(count, 1), np.nan)
    return pl.DataFrame(out), k


def _thinned_text(k: int, windows: int) -> str | None:
    return (f"drawn as means of {k} consecutive windows ({windows:,} windows; every number in the report uses "
            "all of them)" if k > 1 else None)


def _notes(fig, *texts: str | None) -> None:
    text = "; ".join(t for t in texts if t)
    if text:
        _note(fig, text)


def _with_breaks(w: pl.DataFrame, columns: list[str]) -> dict[str, np.ndarray]:
    """x (window end) and ``columns`` with a NaN inserted wherever the previous window is missing."""
    w = w.sort("iteration")
    x = w["iteration"].to_numpy().astype(float)
    start = w["window_start"].to_numpy().astype(float)
    gap = np.zeros(len(x), dtype=bool)
    gap[1:] = start[1:] != x[:-1]
    idx = np.flatnonzero(gap)
    out = {"x": np.insert(x, idx, np.nan)}
    for c in columns:
        out[c] = np.insert(w[c].to_numpy().astype(float), idx, np.nan)
    return out


def tflops_over_time(run: RunAnalysis, path: Path) -> Path:
    w = run.reliable_windows()
    if w.height == 0 or not run.world_size:
        raise Skip("no usable window" if w.height == 0 else "world size unknown: no TFLOP/s/GPU")
    logged = "tflops_per_gpu_logged" in w.columns and w["tflops_per_gpu_logged"].drop_nulls().len() > 0
    cols = [f"{c}_tflops_per_gpu" for c in run.conventions] + (["tflops_per_gpu_logged"] if logged else [])
    drawn, k = thin_windows(w, cols)
    d = _with_breaks(drawn, cols)
    unit = rate_unit(e["tflops_per_gpu_mean"] for e in run.convention_summary().values())
    d = {c: (v if c == "x" else v / unit.tflops) for c, v in d.items()}
    fig, ax = plt.subplots(figsize=(12, 3.4))  # the report's lead figure: wide and short, to fit its first screen
    if logged:
        ax.scatter(d["x"], d["tflops_per_gpu_logged"], s=10, color="black", label="logged by the framework", zorder=3)
    for conv in run.conventions:
        style = STYLE.get(conv, dict(lw=1.0, ls="--"))
        label = {BEFORE: f"{BEFORE} (LM only: before vision accounting)",
                 AFTER: f"{AFTER} (vision + LM: after)"}.get(conv, conv)
        ax.plot(d["x"], d[f"{conv}_tflops_per_gpu"], label=safe(label), **style)
    ax.set_xlabel("iteration (end of logging window)")
    ax.set_ylabel(f"{unit.name} per GPU")
    ax.set_title(safe(f"{run.model}: {unit.per_gpu} per logging window" + (" (ESTIMATE)" if run.estimated else "")))
    ax.grid(alpha=0.3)
    _integer_iterations(ax)
    _legend(ax, fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    _notes(fig, _skipped_text(run), _thinned_text(k, w.height))
    return _save(fig, path)


def mfu_over_time(run: RunAnalysis, path: Path) -> Path:
    w = run.reliable_windows()
    if not run.peak_tflops:
        raise Skip("GPU peak unknown; pass --gpu TYPE or --peak-tflops X")
    if w.height == 0 or not run.world_size:
        raise Skip("no usable window" if w.height == 0 else "world size unknown: no MFU")
    pairs = [(c, label) for c, label in ((BEFORE, "before (LM only)"), (AFTER, "after (exact, vision counted)"))
             if c in run.conventions]  # no LM-only baseline for families it does not cover (InternVL, ...)
    cols = [f"{c}_mfu" for c, _ in pairs]
    drawn, k = thin_windows(w, cols)
    d = _with_breaks(drawn, cols)
    fig, ax = plt.subplots(figsize=(11, 3.6))
    for conv, label in pairs:
        ax.plot(d["x"], 100 * d[f"{conv}_mfu"], label=label, **STYLE[conv])
    ax.set_xlabel("iteration (end of logging window)")
    ax.set_ylabel("MFU (% of dense peak)")
    ax.set_title(safe(f"{run.model}: MFU before / after vision accounting ({run.peak_tflops:g} TFLOP/s per GPU)"))
    ax.grid(alpha=0.3)
    _integer_iterations(ax)
    _legend(ax, fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    _notes(fig, _skipped_text(run), _thinned_text(k, w.height))
    return _save(fig, path)


def component_shares(run: RunAnalysis, path: Path) -> Path:
    """Horizontal bars: each component's share of the run's exact training FLOPs (small parts stay visible)."""
    frame = run.per_iteration
    cols = [c for c in frame.columns if c.startswith("flops.") and frame[c].sum() > 0]
    if not cols:
        raise Skip("no FLOPs components (empty statistics)")
    totals = np.array([float(frame[c].sum()) for c in cols])
    order = np.argsort(totals)
    names = [cols[i].removeprefix("flops.") for i in order]
    shares = 100 * totals[order] / totals.sum()
    colors = ["#1f77b4" if n.startswith("vision") else "#ff7f0e" for n in names]
    fig, ax = plt.subplots(figsize=(9, 0.45 * len(names) + 1.4))
    bars = ax.barh(range(len(names)), shares, color=colors)
    ax.set_yticks(range(len(names)), [safe(n) for n in names], fontsize=8)
    top = float(shares.max())
    ax.set_xlim(0, top * 1.18)
    for bar, share in zip(bars, shares):
        ax.text(bar.get_width() + top * 0.01, bar.get_y() + bar.get_height() / 2, f"{share:.2f}%", va="center",
                fontsize=7)
    ax.set_xlabel("share of exact training FLOPs over the run (%); blue: vision, orange: language model")
    ax.set_title(safe(f"{run.model}: where the FLOPs go, components (exact)"))
    ax.grid(alpha=0.3, axis="x")
    return _save(fig, path)


HIST_SLICE = 1 << 20  # values per np.histogram call in share_histogram (bounded copies)


def share_histogram(shares: pl.Series, bins: int = 40) -> tuple[np.ndarray, np.ndarray, float]:
    """(edges, counts, mean) in percent of FLOP shares (nulls left out): ``bins`` equal bins from 0 to
    the largest share rounded up to a multiple of 5% (at least 5%), as ``np.histogram`` counts them.
    Counted slice by slice: one share per microbatch can be tens of millions, never copied whole."""
    values = shares.drop_nulls()
    top = max(5.0, float(np.ceil(100 * values.max() / 5) * 5)) if values.len() else 5.0
    edges = np.linspace(0, top, bins + 1)
    counts = np.zeros(bins, dtype=np.int64)
    for start in range(0, values.len(), HIST_SLICE):
        counts += np.histogram(100 * values.slice(start, HIST_SLICE).to_numpy(), bins=edges)[0]
    return edges, counts, 100 * float(values.mean()) if values.len() else float("nan")


def vision_share_hist(run: RunAnalysis, per_microbatch: pl.Series | None, path: Path) -> Path:
    """Distribution of the vision share per microbatch and per iteration (the iterations of the windows the
    means use); the dashed line is the run's one vision share (`vlm_perf.analysis.selection.VISION_SHARE`),
    the value every other place of the report shows, not a mean of the plotted shares."""
    if "exact_vision" not in run.per_iteration.columns or run.per_iteration["exact_vision"].sum() <= 0:
        raise Skip("no vision FLOPs in this run: text only, or no image/video grids")
    share = run.vision_share_mean()
    if share is None:
        raise Skip("no window is usable for the means: no run vision share")
    used = run.per_iteration.filter(pl.col("iteration").is_in(run.selection.iterations().implode()))
    per_iteration = used.select(
        pl.when(pl.col("exact_total") > 0).then(pl.col("exact_vision") / pl.col("exact_total")))[:, 0]
    panels = [("per iteration", per_iteration, "iterations")]
    if per_microbatch is not None and per_microbatch.drop_nulls().len():
        panels.insert(0, ("per microbatch", per_microbatch, "microbatches"))
    fig, axes = plt.subplots(1, len(panels), figsize=(5.5 * len(panels), 3.8), squeeze=False)
    for ax, (title, values, unit) in zip(axes[0], panels):
        edges, counts, _ = share_histogram(values)
        ax.hist(edges[:-1], bins=edges, weights=counts, color="#1f77b4" if unit == "microbatches" else "#ff7f0e")
        ax.axvline(100 * share, color="black", lw=1, ls="--")
        ax.set_xlabel("vision share of training FLOPs (%, exact)")
        ax.set_ylabel(f"number of {unit}")
        ax.set_title(title)  # short: the model and the run share are the figure's one title (never side by side)
        ax.grid(alpha=0.3)
    fig.suptitle(safe(f"{run.model}: vision share of FLOPs (dashed: the run's share, {100 * share:.1f}%)"))
    fig.tight_layout()
    _note(fig, "run share = Σ exact vision FLOPs / Σ exact training FLOPs over the windows the means use; "
               "the histograms show the iterations of those windows")
    return _save(fig, path)


def step_time_fit(run: RunAnalysis, path: Path) -> Path:
    w = run.reliable_windows()
    if w.height < 2:
        raise Skip("fewer than two usable windows")
    fig, ax = plt.subplots(figsize=(7, 4.2))
    step = max(1, -(-w.height // MAX_SCATTER_POINTS))  # every step-th window drawn; the fit used all
    thinned = f"1 of every {step} windows drawn ({w.height:,} in all; the fit uses all of them)" if step > 1 else None
    if step > 1:
        w = w.sort("iteration").gather_every(step)
    per_iter = (w["window_seconds"] / w["window_iterations"]).to_numpy()
    lm = (w["exact_language"] / w["window_iterations"]).to_numpy() / 1e15
    vis = (w["exact_vision"] / w["window_iterations"]).to_numpy() / 1e15
    sc = ax.scatter(lm + vis, per_iter, c=100 * vis / np.maximum(lm + vis, 1e-30), cmap="viridis", s=14)
    fig.colorbar(sc, ax=ax, label="vision share (%)")
    a = run.attribution
    _notes(fig, safe(f"no attribution: {a.reason}") if not a.ok else None, thinned)
    if a.ok and run.world_size:
        gpus = run.world_size
        pred = a.overhead_s + lm * 1e3 / (a.lm_tflops_per_gpu * gpus) + (
            vis * 1e3 / (a.vision_tflops_per_gpu * gpus) if a.vision_tflops_per_gpu else 0)
        order = np.argsort(lm + vis)
        ax.plot((lm + vis)[order], pred[order], color="red", lw=1,
                label=f"fit: LM {a.lm_tflops_per_gpu:.0f}, vision {a.vision_tflops_per_gpu or float('nan'):.0f} "
                      "TFLOP/s/GPU" + (f", overhead {a.overhead_s:.2f} s" if a.model != "no_overhead"
                                       else " (effective, overhead included)"))
        ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(0.0, -0.18))
    ax.set_xlabel("exact training PFLOP per iteration")
    ax.set_ylabel("seconds per iteration")
    ax.set_title(safe(f"{run.model}: step time vs FLOPs (attribution fit)"))
    ax.grid(alpha=0.3)
    return _save(fig, path)


TIMELINE_COLORS = {"restart": "#d62728", "untimed": "#ff7f0e", "replayed": "#9467bd", "stall": "#8c564b"}


def health_timeline(run: RunAnalysis, path: Path) -> Path:
    """Wall-clock timeline: training segments as bars, lost time as coloured spans on the row below."""
    h = run.health
    spans = h.get("segment_spans") or []
    if not spans:
        raise Skip("the log prints no timestamps: no wall-clock timeline")
    fig, ax = plt.subplots(figsize=(11, 2.6))
    wall_min = (h.get("wall_clock_s") or 0) / 60
    for s in spans:
        ax.broken_barh([(s["start_min"], s["end_min"] - s["start_min"])], (1.1, 0.8), color="#2ca02c")
        ax.text(s["start_min"], 2.0, f"segment {s['segment']}", fontsize=7, va="bottom")
    seen = set()
    for e in h.get("lost", []):
        if e.get("at_min") is None or e["seconds"] <= 0:
            continue
        label = None if e["kind"] in seen else {"restart": "restart downtime", "untimed": "untimed (checkpoint / "
                                                "validation / stall)", "replayed": "replayed work",
                                                "stall": "stall (outlier step)"}[e["kind"]]
        seen.add(e["kind"])
        ax.broken_barh([(e["at_min"], max(e["minutes"], 1e-3))], (0.1, 0.8), color=TIMELINE_COLORS[e["kind"]],
                       label=label)
        if e["minutes"] > 0.12 * wall_min:  # name the big losses inside their own bar (never over another)
            ax.text(e["at_min"] + e["minutes"] / 2, 0.5, f"{e['kind']} {e['minutes']:.1f} min", ha="center",
                    va="center", fontsize=8, color="white")
    ax.set_yticks([0.5, 1.5], ["lost", "training"])
    ax.set_ylim(0, 2.6)
    ax.set_xlabel("wall-clock minutes from the first window")
    good = h.get("goodput")
    ax.set_title(safe(f"{run.model}: run timeline") + (f": goodput {100 * good:.1f}% of {h['wall_clock_s'] / 60:.1f} min" if good
                                   is not None else ""))
    ax.grid(alpha=0.3, axis="x")
    _legend(ax, fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return _save(fig, path)


def all_figures() -> list:
    """Every report part's figures (`vlm_perf.report.parts.Figure`), in report order."""
    from .parts import all_parts

    return [figure for part in all_parts() for figure in part.figures]


def draw_all(run: RunAnalysis, ctx, folder: Path) -> dict[str, str | None]:
    """Draw every part's figure into ``folder``: name -> None when drawn, else why it was skipped."""
    out: dict[str, str | None] = {}
    for name, _, draw in all_figures():
        try:
            draw(run, ctx, folder / name)
            out[name] = None
        except Skip as why:
            plt.close("all")
            out[name] = str(why)
    return out
