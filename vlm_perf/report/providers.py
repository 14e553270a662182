"""The report parts of the analysis blocks with their own summary.json key: peak used, training regime,
HFU, the log reconciliation, DP load balance, stragglers and peak memory (`vlm_perf.report.parts`).

Each part is declared once, at the end of this module: the analysis of the run it shows (a property of
`vlm_perf.analysis.facade.Run`: the part only renders it), its schema keys, its section (a provider `Section`:
title, bullet lines, an optional table, figures, turned into typed content, so it is escaped like every other
section) and its terminal lines.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import polars as pl  # noqa: E402

from .content import B, Bullets, FigureRef, SectionContent, Span, T, Table, fmt, md_inline  # noqa: E402
from .parts import ReportPart, register_part  # noqa: E402
from .schema import NUMBER, key  # noqa: E402
from .units import TFLOPS, RateUnit, run_rate_unit  # noqa: E402

if TYPE_CHECKING:
    from .sections import SectionInputs

_k = key


@dataclass
class Section:
    """A rendered-agnostic report block: ``lines`` are typed `content.Inline` spans, or (older providers)
    strings whose emphasis is marked ``**bold**``."""

    title: str
    lines: list
    table: tuple[list[str], list[list[str]]] | None = None  # (headers, rows)
    figures: list[tuple[str, str]] = field(default_factory=list)  # (file name in the report dir, caption)

    def markdown(self) -> str:
        out = [f"## {self.title}", ""] + [f"- {line if isinstance(line, str) else md_inline(line)}"
                                          for line in self.lines] + [""]
        if self.table:
            headers, rows = self.table
            out += ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
            out += ["| " + " | ".join(r) + " |" for r in rows] + [""]
        for name, caption in self.figures:
            out += [f"![{caption}]({name})", "", f"*{caption}*", ""]
        return "\n".join(out)


def _pct(x: float | None, digits: int = 1) -> str:
    return "—" if x is None else f"{100 * x:.{digits}f}%"


def _num(x: float | None, digits: int = 3) -> str:
    return "—" if x is None else f"{x:.{digits}f}"


# --- DP load balance -------------------------------------------------------------------------
def balance_lines(s: dict) -> list[str]:
    if not s.get("iterations"):
        return [f"no iteration with metadata from all {s.get('dp_ranks', 0)} DP ranks inside the windows the means "
                "use: nothing to report"] + s.get("notes", [])
    if s.get("dp_ranks") == 1:
        return ["one DP rank: every step waits for no other rank, nothing to balance"] + s.get("notes", [])
    lines = [f"{s['dp_ranks']} DP ranks, {s['iterations']} iterations (those of the windows the means use); load = "
             f"{s['flops']}.",
             f"Heaviest rank / mean: median **{_num(s['flops_max_over_mean_median'])}** (p90 "
             f"{_num(s.get('flops_max_over_mean_p90'))}, max {_num(s.get('flops_max_over_mean_max'))}); vision alone "
             f"{_num(s['vision_max_over_mean_median'])}, LM alone {_num(s.get('lm_max_over_mean_median'))}.",
             f"A rank with the mean load idles **{_pct(s['idle_fraction_median'])}** of the step (median; "
             f"FLOPs-weighted mean {_pct(s['idle_fraction_mean'])}; 1 − Σmean/Σmax over the run "
             f"{_pct(s.get('idle_fraction_overall'))}), if time is proportional to FLOPs."]
    tm = s.get("time_model")
    if tm:
        lines.append(f"With the fitted rates (LM {tm['lm_tflops_per_gpu']:.0f}, vision {tm['vision_tflops_per_gpu']:.0f}"
                     f" TFLOP/s/GPU, {tm['gpus_per_replica']:g} GPUs per replica) the modelled compute time's "
                     f"max/mean is {_num(tm['max_over_mean_median'])} (median) and the idle share "
                     f"{_pct(tm['idle_fraction_overall'])}.")
    else:
        lines.append("Step-time attribution not fitted: balance is in FLOPs only (vision and LM counted alike).")
    if s.get("slowest_ranks"):
        top = ", ".join(f"rank {r['dp_rank']} ({r['iterations']} it., {_pct(r['share'], 0)})"
                        for r in s["slowest_ranks"][:3])
        lines.append(f"Heaviest rank most often: {top} of {s['imbalanced_iterations']} imbalanced iterations.")
    if s.get("worst_iterations"):
        worst = ", ".join(f"{w['iteration']} (rank {w['slowest_rank']}, idle {_pct(w['idle_fraction'])})"
                          for w in s["worst_iterations"][:3])
        lines.append(f"Worst iterations: {worst}.")
    corr, same = s.get("vision_load_correlation"), s.get("slowest_is_most_vision_fraction")
    if corr is not None or same is not None:
        lines.append(f"Is vision what makes a rank heavy? correlation of per-rank vision and total FLOPs deviations "
                     f"**{_num(corr, 2)}**; the heaviest rank is also the one with the most vision FLOPs in "
                     f"{_pct(same, 0)} of imbalanced iterations.")
    lpt = s.get("lpt")
    if lpt:
        lines.append(f"What-if, longest-processing-time-first reassignment of the same microbatches: max/mean "
                     f"{_num(lpt['flops_max_over_mean_median'])} (median), the heaviest rank's FLOPs "
                     f"−{_pct(lpt['critical_flops_saving'])} (no assignment of whole microbatches beats "
                     f"−{_pct(lpt['lower_bound_saving'])}). An upper bound on what sorting/packing by cost wins: "
                     "microbatch counts per rank are not kept equal.")
        eq = lpt.get("equal_counts")
        if eq:
            lines.append(f"Keeping the microbatch count per rank (as a pipeline schedule needs): max/mean "
                         f"{_num(eq['flops_max_over_mean_median'])}, the heaviest rank's FLOPs "
                         f"−{_pct(eq['critical_flops_saving'])}.")
    return lines + s.get("notes", [])


def relative_load_matrix(ranks: pl.DataFrame, iterations: pl.Series) -> tuple[np.ndarray, list[int], list[int]]:
    """(matrix, iterations, dp_ranks): each rank's FLOPs over its iteration's mean rank FLOPs, one row per
    DP rank and one column per iteration of ``iterations`` that ``ranks`` holds (both ascending; NaN where
    a rank has no row). Built by index arithmetic: a pivot to one column per iteration costs seconds at
    tens of thousands of iterations."""
    rel = (ranks.filter(pl.col("iteration").is_in(iterations.implode()))
           .select("iteration", "dp_rank", (pl.col("flops") / pl.col("flops").mean().over("iteration")).alias("rel")))
    its, dp_ranks = rel["iteration"].unique().sort(), rel["dp_rank"].unique().sort()
    matrix = np.full((dp_ranks.len(), its.len()), np.nan)
    matrix[np.searchsorted(dp_ranks.to_numpy(), rel["dp_rank"].to_numpy()),
           np.searchsorted(its.to_numpy(), rel["iteration"].to_numpy())] = rel["rel"].to_numpy()
    return matrix, its.to_list(), dp_ranks.to_list()


def balance_figure(ranks: pl.DataFrame, per_iteration: pl.DataFrame, path: Path) -> Path:
    """Left: each rank's FLOPs / iteration mean over iterations (heat map); right: max/mean histogram."""
    used = per_iteration.filter(pl.col("used"))
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 3.8), gridspec_kw={"width_ratios": [2, 1]})
    if used.height:
        matrix, its, dp_ranks = relative_load_matrix(ranks, used["iteration"])
        im = ax1.imshow(matrix, aspect="auto", cmap="RdBu_r", vmin=2 - np.nanmax(matrix), vmax=np.nanmax(matrix),
                        interpolation="nearest")
        ticks = np.unique(np.linspace(0, len(its) - 1, min(8, len(its))).round().astype(int))
        ax1.set_xticks(ticks, [str(its[t]) for t in ticks])  # columns are the iterations used, gaps skipped
        if len(dp_ranks) <= 16:
            ax1.set_yticks(range(len(dp_ranks)), [str(r) for r in dp_ranks])
        fig.colorbar(im, ax=ax1, label="rank FLOPs / iteration mean")
        ax2.hist(used["flops_max_over_mean"].drop_nulls().to_numpy(), bins=30, color="#1f77b4", label="actual")
        if "lpt_max" in used.columns:
            lpt = (used["lpt_max"] / used["flops_mean"]).drop_nulls().to_numpy()
            ax2.hist(lpt, bins=30, color="#2ca02c", alpha=0.6, label="LPT what-if")
        ax2.legend(fontsize=8)
    ax1.set(xlabel="iteration", ylabel="DP rank", title="Per-rank load (exact training FLOPs)")
    ax2.set(xlabel="heaviest rank / mean", ylabel="iterations", title="Max-over-mean per iteration")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


# --- peak behind every MFU ---------------------------------------------------------------------
def peak_lines(peak: dict | None) -> list:
    """Typed lines (`content.Inline`: emphasis is a span, input strings stay text in every format)."""
    if not peak:
        return [T("no peak: GPU type unknown or not tabulated (pass --gpu or --peak-tflops); MFU left empty")]
    if peak.get("override"):
        table = peak.get("table_tflops")
        return [T(B(f"{peak['tflops']:,.1f}"), " TFLOP/s per GPU from --peak-tflops (user override)",
                  f"; the table's dense {peak['dtype']} value for " if table else None, peak["device"] if table else None,
                  f" is {table:,.1f}" if table else None, ".")]
    lines = [T(B(f"{peak['tflops']:,.1f}"), " TFLOP/s per device: ", peak["device"], ", ", peak["dtype"],
               f", dense (2:4 sparsity never counted){' — UNCERTAIN value' if peak.get('uncertain') else ''}."),
             T("Clock / derivation: ", peak["clock"], ". Source: ", peak["source"], ".")]
    if peak.get("note"):
        lines.append(T("Note: ", peak["note"], "."))
    for label, value in peak.get("alternatives", {}).items():
        lines.append(T(f"Also in circulation: {value:,.1f} (", label, f"): MFU against it is ×{peak['tflops'] / value:.3f} "
                       "of the MFU shown."))
    return lines


# --- HFU next to MFU ---------------------------------------------------------------------------
def hfu_lines(h: dict, unit: RateUnit = TFLOPS) -> list:
    """Typed lines (`content.Inline`); the MFU is the headline's exact MFU (one value, `analysis.hfu`).
    ``unit``: the run's display unit (`vlm_perf.report.units.run_rate_unit`): the model rate here is the
    headline's exact rate and is written as the headline writes it."""
    lines = [T("Recompute ", B(h["recompute"]), " (", h["source"], "): ", h["rule"], ".")]
    if h.get("hfu_mean") is not None:
        lines.append(T("MFU (exact) ", B(_pct(h["mfu_mean"])), " → HFU ", B(_pct(h["hfu_mean"])),
                       f"; hardware FLOPs = model FLOPs × {h['hardware_over_model']:.4f} "
                       f"({unit.fmt(h['hardware_tflops_per_gpu_mean'])} vs {unit.fmt(h['model_tflops_per_gpu_mean'])} "
                       f"{unit.per_gpu})."))
    elif h.get("hardware_over_model") is not None:
        lines.append(T(f"hardware FLOPs = model FLOPs × {h['hardware_over_model']:.4f}; HFU needs the GPU count and "
                       "peak."))
    lines.append(T("HFU counts what the GPUs executed (recomputed forward included), MFU what the model needs; only "
                   "MFU compares runs with different recompute settings."))
    return lines


# --- stragglers ------------------------------------------------------------------------------
def straggler_lines(s: dict) -> list[str]:
    lines: list[str] = []
    t = s.get("timers")
    if t:
        lines.append(f"Megatron timers over {t['logged_iterations']} logged iterations (min, max across ranks, ms per "
                     "iteration); relative spread = (max − min) / max:")
        for e in t["timers"][:6]:
            lines.append(f"`{e['timer']}`: max {e['max_ms_median']:,.1f} ms, spread {e['spread_ms_median']:,.1f} ms "
                         f"({_pct(e['relative_spread_median'])} median, worst {_pct(e['relative_spread_max'])} at "
                         f"iteration {e['worst_iteration']})")
    d = s.get("detector")
    if d:
        slow = ", ".join(f"rank {r['rank']} ({r['reports']}×)" for r in d["slowest_ranks_rtt"][:3])
        lines.append(f"Straggler detector, {d['reports']} reports: round-trip spread {_pct(d['rtt_relative_spread_median'])} "
                     f"(median); slowest: {slow or '—'}.")
    n = s.get("nvrx")
    if n:
        worst = ", ".join(f"rank {w['rank']} {w['score']:.2f} ({w['kind']})" for w in n["worst"][:3])
        lines.append(f"NVRx scores: stragglers below {n['threshold']}: {n['stragglers'] or 'none'}; worst {worst}.")
    r = s.get("rank_steps")
    if r:
        lines.append(f"Per-rank step time ({r['ranks']} {r['rank_kind']} ranks, {r['iterations']} iterations): spread "
                     f"{_pct(r['relative_spread_median'])} (median); slowest rank {r['slowest_rank']} at "
                     f"{r['slowest_median_ms']:,.1f} ms, ×{_num(r['slowest_over_median_rank'])} the median rank.")
    c = s.get("vision_correlation")
    if c:
        for key, label in (("straggler_detector", "detector's slowest rank"), ("rank_steps", "slowest rank's step")):
            if key in c:
                lines.append(f"Is the slow rank the one with the heavy vision load? the {label} is on the DP rank with "
                             f"the most FLOPs in that window in **{_pct(c[key]['slow_is_heaviest_fraction'], 0)}** of "
                             f"{c[key]['reports']} reports (chance {_pct(c['chance'], 0)}; rank order {c['rank_order']}, "
                             f"tp {c['tp']}, cp {c['cp']}).")
        for e in c.get("timer_vs_flops_spread", []):
            lines.append(f"`{e['timer']}` spread {_pct(e['observed_median'])} vs {_pct(e['predicted_from_flops_median'])} "
                         f"predicted by the per-rank FLOPs (correlation {_num(e['correlation'], 2)}, {e['windows']} "
                         "windows); with PP > 1 part of a compute timer's spread is the stages' different layers.")
    if not lines:
        lines.append("no per-rank timing lines in the logs (Megatron timers `(min, max) time across ranks`, "
                     "--log-straggler reports, NVRx scores or rank-prefixed iteration lines)")
    return lines + s.get("notes", [])


# --- peak memory per rank (vlm_perf.analysis.memory) ------------------------------------------
def _gib(value: float | None) -> str:
    return "—" if value is None else f"{value / 1024 ** 3:,.2f}"


#: most ranks listed in the table (the highest peaks); summary.json keeps every rank
MEMORY_ROWS = 16


def memory_lines(m: dict) -> list[str]:
    units = ", ".join(m["units_in_log"])
    return [f"{m['ranks_reported']} rank(s) print memory reports (log unit {units}; shown in GiB); highest max "
            f"allocated **{_gib(m['max_allocated_bytes'])} GiB**, max reserved **{_gib(m['max_reserved_bytes'])} "
            f"GiB** (rank {m['peak_rank']}); lowest max allocated {_gib(m['min_max_allocated_bytes'])} GiB.",
            "Peaks since each process started (the allocator's maxima): the largest value of each rank's reports."]


# --- training regime ---------------------------------------------------------------------------
def regime_lines(r: dict, s: dict | None = None) -> list:
    """Typed lines (`content.Inline`): the regime, its source (input strings stay text), full training beside it
    (where it differs from what ran), rates in the run's unit (``s``: the summary)."""
    lines = [T("Regime: ", B(r["description"]), " (from ", r["source"], ")."), T("What trains: ", r["trainability"], ".")]
    ratio = r.get("full_training_over_regime")
    if ratio and abs(ratio - 1) > 1e-9:
        lines.append(T(f"Exact FLOPs per iteration under this regime {r['flops_per_iteration']:.4g}; full training of "
                       f"every weight would count {r['full_training_flops_per_iteration']:.4g} "
                       f"({100 * (ratio - 1):+.1f}%): a tool that ignores the regime overstates TFLOP/s and MFU by "
                       f"×{ratio:.3f}."))
    if r.get("full_training_tflops_per_gpu_mean") is not None and ratio and abs(ratio - 1) > 1e-9:
        mfu = r.get("full_training_mfu_mean")
        lines.append(T("Full-training accounting: ", run_rate_unit(s or {}).text(r["full_training_tflops_per_gpu_mean"]),
                       f", MFU {_pct(mfu)}" if mfu is not None else None, " (not what ran)."))
    lines += [T("Contradiction: ", c) for c in r.get("contradictions", [])]
    return lines


# --- schema entries of the parts' summary keys -------------------------------------------------------
_HFU = (
    _k("recompute", "text", str, "recompute policy label (none, selective, full, full:N)", "analysis.hfu"),
    _k("source", "text", str, "where the policy came from", "analysis.hfu"),
    _k("rule", "text", str, "what is recomputed, in words", "analysis.hfu"),
    _k("policy", "block", dict, "the policy's fields", "analysis.hfu"),
    _k("model_tflops_per_gpu_mean", "TFLOP/s/GPU", NUMBER, "= conventions.exact.tflops_per_gpu_mean", "analysis.hfu",
       nullable=True),
    _k("hardware_tflops_per_gpu_mean", "TFLOP/s/GPU", NUMBER, "model x hardware_over_model", "analysis.hfu",
       nullable=True),
    _k("mfu_mean", "fraction", NUMBER, "= conventions.exact.mfu_mean", "analysis.hfu", nullable=True),
    _k("hfu_mean", "fraction", NUMBER, "mfu_mean x hardware_over_model", "analysis.hfu", nullable=True),
    _k("hardware_over_model", "ratio", NUMBER, "(model + recomputed FLOPs) / model FLOPs", "analysis.hfu",
       nullable=True),
    _k("recompute_flops_share_of_model", "fraction", NUMBER, "recomputed FLOPs / model FLOPs", "analysis.hfu",
       nullable=True, required=False),
)
_RECONCILE = tuple(_k(n, u, t, m, "analysis.log_reconcile", required=False, **kw) for n, u, t, m, kw in (
    ("status", "text", str, "ok | no_logged_value | no_world_size | no_windows", {}),
    ("message", "text", str, "why there is nothing to reconcile", {}),
    ("windows", "count", int, "windows the means use with a logged TFLOP/s/GPU", {}),
    ("printed_decimals", "count", int, "print precision inferred from the logged values", {}),
    ("printed_median", "TFLOP/s/GPU", NUMBER, "median logged value over those windows", {}),
    ("conventions", "block", list, "every registered convention computed for the run, closest first: convention, "
     "tflops_per_gpu_mean (TFLOP/s/GPU), mfu_mean (fraction; both as conventions.<name>), rel_diff_median (fraction), windows_matched (count), matches (bool: "
     "within print precision in at least half of the windows)", {}),
    ("not_defined", "block", dict, "convention -> why it is not defined for this model", {}),
    ("matches", "text", list, "conventions that match the log's number", {}),
    ("closest", "text", str, "the convention with the smallest median relative difference", {}),
    ("closest_minus_exact", "block", list, "closest minus exact per component, run totals: component, delta_flops "
     "(FLOPs), delta_of_exact_total (fraction)", {}),
    ("mfu", "block", dict, "every convention's implied MFU against the log's printed MFU: status, mode (window or "
     "cumulative since start, as ms-swift's perf_log), peak_tflops_per_device (TFLOP/s) and peak_source (the peak "
     "the framework divided by: DEVICE_TFLOPS, measured matmul rate, or the datasheet), devices, devices_source, "
     "windows (count), printed_decimals, printed_median (fraction), conventions (convention, mfu_median fraction, "
     "rel_diff_median, windows_matched, matches), matches, closest, closest_minus_exact, not_defined", {}),
    ("total_flos", "block", dict, "every convention's run total against the Trainer's printed total_flos: status, "
     "printed (per printed value: printed text, value in FLOPs, interval [low, high) in FLOPs, conventions "
     "(convention, flops_total FLOPs, rel_diff fraction, matches), matches), not_defined, note", {}),
))
_MEMORY_RANK = (
    _k("rank", "count", int, "the rank the memory report names (0: the rank that logs)", "analysis.memory"),
    _k("max_allocated_bytes", "bytes", NUMBER, "largest max-allocated value of the rank's reports", "analysis.memory",
       nullable=True),
    _k("max_reserved_bytes", "bytes", NUMBER, "largest max-reserved value of the rank's reports", "analysis.memory",
       nullable=True),
    _k("reports", "count", int, "memory reports of the rank", "analysis.memory"),
    _k("last_iteration", "count", int, "iteration of the rank's last report", "analysis.memory", nullable=True),
    _k("first", "text", str, "file:line of the rank's first report", "analysis.memory"),
)
_MEMORY = (
    _k("ranks", "block", list, "one entry per rank", "analysis.memory", each=_MEMORY_RANK),
    _k("ranks_reported", "count", int, "ranks that print memory reports", "analysis.memory"),
    _k("units_in_log", "text", list, "units the log prints (MB = MiB for Megatron-LM, GB = 1e9 for "
       "Megatron-Bridge, ...)", "analysis.memory"),
    _k("max_allocated_bytes", "bytes", NUMBER, "highest max-allocated over the ranks", "analysis.memory",
       nullable=True),
    _k("max_reserved_bytes", "bytes", NUMBER, "highest max-reserved over the ranks", "analysis.memory", nullable=True),
    _k("min_max_allocated_bytes", "bytes", NUMBER, "lowest max-allocated over the ranks", "analysis.memory",
       nullable=True),
    _k("peak_rank", "count", int, "the rank with the highest peak", "analysis.memory"),
)
_REGIME = (
    _k("description", "text", str, "the regime in words (e.g. LoRA r=16 on LM attention + MLP, tower and projector "
       "frozen)", "run.regime"),
    _k("source", "text", str, "which source stated it (command line > run.yaml > files in the run folder)",
       "run.regime"),
    _k("whole_parts", "bool", bool, "only whole parts are frozen (counted exactly as without a regime)", "run.regime"),
    _k("trainability", "text", str, "the trainability's selectors, adapter and hooks", "arch.trainability"),
    _k("flops_per_iteration", "FLOPs", NUMBER, "exact FLOPs per iteration under the regime (windows the means use)",
       "analysis.regime.regime_summary", nullable=True),
    _k("full_training_flops_per_iteration", "FLOPs", NUMBER, "exact FLOPs per iteration if every weight trained",
       "analysis.regime.regime_summary", nullable=True),
    _k("full_training_over_regime", "ratio", NUMBER, "full-training FLOPs / regime FLOPs (the overstatement of a tool "
       "that ignores the regime)", "analysis.regime.regime_summary", nullable=True),
    _k("full_training_tflops_per_gpu_mean", "TFLOP/s/GPU", NUMBER, "conventions.exact.tflops_per_gpu_mean x "
       "full_training_over_regime", "analysis.regime.regime_summary", nullable=True),
    _k("full_training_mfu_mean", "fraction", NUMBER, "conventions.exact.mfu_mean x full_training_over_regime",
       "analysis.regime.regime_summary", nullable=True),
    _k("contradictions", "text", list, "sources that state another regime, with the size of the FLOPs difference",
       "analysis.regime.regime_summary"),
)


# --- sections: a provider `Section` (lines may mark emphasis with ``**``) becomes typed content --------
def _spans(text) -> tuple[Span, ...]:
    """Typed spans as they are; a string ``a **b** c`` -> plain, bold, plain spans (an unpaired ``**`` stays
    literal text)."""
    if isinstance(text, tuple):
        return text
    pieces = str(text).split("**")
    if len(pieces) % 2 == 0:  # unbalanced: keep the text as it is
        return T(str(text))
    return T(*(B(p) if i % 2 else p for i, p in enumerate(pieces) if p))


def _section(name: str, render: Callable[[Any, Path, dict], Section | None]):
    """The part's section: ``render(result, out_dir, summary)`` (figures drawn into ``out_dir``) as typed,
    escaped content; nothing when the part was not computed for this run."""
    def build(inputs: SectionInputs) -> SectionContent | None:
        if name not in inputs.ctx.results or inputs.out_dir is None:
            return None
        section = render(inputs.result(name), inputs.out_dir, inputs.summary)
        if section is None:
            return None
        blocks: list = []
        if section.lines:
            blocks.append(Bullets([_spans(line) for line in section.lines]))
        if section.table:
            header, rows = section.table
            blocks.append(Table([str(h) for h in header], [[_spans(str(c)) for c in row] for row in rows]))
        for file, caption in section.figures:
            if (inputs.out_dir / file).exists():
                blocks.append(FigureRef(file, caption))
        return SectionContent(section.title, blocks)
    build.__name__ = f"{name}_section"
    return build


def balance_section(result, out_dir: Path, summary: dict) -> Section:
    """``result``: a `vlm_perf.analysis.balance.BalanceResult`, or None (no per-microbatch metadata)."""
    if result is None:
        return Section("DP load balance", ["no per-microbatch metadata with dp_rank: load balance not computed"])
    lines = balance_lines(result.summary)
    n_ranks = result.ranks["dp_rank"].n_unique() if result.ranks.height else 0
    if n_ranks < 2:  # one DP rank: no balance to draw (said, not drawn as an empty heat map)
        return Section("DP load balance", lines + [f"figure not drawn: {n_ranks} DP rank in the metadata, "
                                                   "nothing to balance"])
    balance_figure(result.ranks, result.per_iteration, out_dir / "balance.png")
    return Section("DP load balance", lines,
                   figures=[("balance.png", "Per-rank load over iterations and the max/mean distribution")])


def memory_section(m, out_dir: Path, summary: dict) -> Section | None:
    if not m:
        return None
    rows = sorted(m["ranks"], key=lambda r: -(r["max_reserved_bytes"] or r["max_allocated_bytes"] or 0))
    table = [[str(r["rank"]), _gib(r["max_allocated_bytes"]), _gib(r["max_reserved_bytes"]), str(r["reports"]),
              str(r["last_iteration"])] for r in rows[:MEMORY_ROWS]]
    lines = memory_lines(m) + ([f"{len(rows) - MEMORY_ROWS} more rank(s) in summary.json"]
                               if len(rows) > MEMORY_ROWS else [])
    return Section("Peak GPU memory per rank", lines, table=(["rank", "max allocated (GiB)", "max reserved (GiB)",
                                                              "reports", "last report (iteration)"], table))


def peak_terminal(summary: dict) -> list[str]:
    peak = summary.get("peak")
    if not peak:
        return []
    return [f"peak:    {fmt(peak['tflops'])} TFLOP/s/GPU (--peak-tflops override)" if peak.get("override")
            else f"peak:    {fmt(peak['tflops'])} TFLOP/s/GPU {peak['dtype']} dense, {peak['device']} "
            f"({peak['source_short']})"]


def hfu_terminal(summary: dict) -> list[str]:
    hfu = summary.get("hfu")
    if not hfu or hfu.get("hfu_mean") is None:
        return []
    return [f"  HFU (exact + recompute {hfu['recompute']}) {fmt(hfu['hfu_mean'], 1, True):>6}   "
            f"MFU (exact) {fmt(hfu['mfu_mean'], 1, True)}   hardware/model FLOPs "
            f"{hfu['hardware_over_model']:.4f}"]


# --- the parts: one declaration each ----------------------------------------------------------------
register_part(ReportPart(
    "peak", order=12, terminal=peak_terminal, terminal_order=0,
    compute=lambda c: c.run.peak,
    keys=(key("peak", "block", dict, "the peak used for MFU and its provenance", "hardware", nullable=True),),
    section=_section("peak", lambda peak, out, s: Section("Peak used for MFU", peak_lines(peak)))))
register_part(ReportPart(
    "regime", order=13,
    compute=lambda c: c.run.regime_summary,
    keys=(key("regime", "block", dict, "the training regime (what trains, its source) and full-training accounting "
              "beside it; null when no source states one", "analysis.regime.regime_summary", nullable=True,
              fields=_REGIME),),
    section=_section("regime", lambda r, out, s: Section("Training regime", regime_lines(r, s)) if r else None)))
register_part(ReportPart(
    "hfu", order=14, terminal=hfu_terminal,
    compute=lambda c: c.run.hfu,
    keys=(key("hfu", "block", dict, "HFU next to MFU under activation recompute", "analysis.hfu", nullable=True,
              fields=_HFU),),
    section=_section("hfu", lambda h, out, s: Section("HFU and activation recompute", hfu_lines(h, run_rate_unit(s))
                                                      if h else ["HFU not computed"]))))
register_part(ReportPart(  # shown by the "Which number to quote" section (`report.sections.which_number`)
    "log_reconcile", order=15,
    compute=lambda c: c.run.log_reconcile,
    keys=(key("log_reconcile", "block", dict, "every registered convention (variants included) against the log's "
              "printed TFLOP/s/GPU, within its print precision (flops.conventions.reconcile)",
              "analysis.log_reconcile", fields=_RECONCILE),)))
register_part(ReportPart(
    "balance", order=32, summary=lambda result: result.summary if result is not None else None,
    compute=lambda c: c.run.balance,
    keys=(key("balance", "block", dict, "DP load balance from per-microbatch FLOPs", "analysis.balance",
              nullable=True),),
    section=_section("balance", balance_section)))
register_part(ReportPart(
    "stragglers", order=34,
    compute=lambda c: c.run.stragglers,
    keys=(key("stragglers", "block", dict, "per-rank timing lines of the logs", "analysis.stragglers",
              nullable=True),),
    section=_section("stragglers", lambda st, out, s: Section("Stragglers", straggler_lines(st) if st else
                                                              ["not computed"]))))
register_part(ReportPart(
    "memory", order=36,
    compute=lambda c: c.run.memory,
    keys=(key("memory", "block", dict, "peak GPU memory per rank from the log's memory reports", "analysis.memory",
              nullable=True, fields=_MEMORY),),
    section=_section("memory", memory_section)))
