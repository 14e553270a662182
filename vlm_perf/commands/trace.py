"""``vlm-perf trace TRACE...``: where the step time went, part by part, joined with exact FLOPs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, List, Optional

import typer

from ..errors import ConfigError, InputError
from ._options import run_options

if TYPE_CHECKING:
    from ..run.options import RunOptions


@run_options("trace")
def trace(
    ctx: typer.Context,
    traces: List[str] = typer.Argument(..., help="Trace files (.json, .json.gz, Nsight .sqlite) or folders of them; "
                                       "paths or URLs (s3://, gs://, any fsspec protocol)."),
    run: Optional[str] = typer.Option(None, "--run", help="Run folder (path or URL), opened as `vlm-perf report` "
                                      "opens it (run.yaml, log, config.json, adapter / trainability files, "
                                      "metadata): the FLOPs per part are the report's."),
    out: Optional[Path] = typer.Option(None, "-o", "--out", help="Write trace_parts.{json,md,png} + per_step.csv here."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object and nothing else."),
    first_iteration: Optional[int] = typer.Option(None, "--first-iteration",
                                                  help="Training iteration of ProfilerStep#0 (default: the trace's "
                                                       "vlm_perf_first_iteration, else 1)."),
    options: Optional[dict] = None,
) -> None:
    """Attribute profiled step time to model parts (vision tower, projector, LM attention/MLP/head, loss,
    optimizer, communication, copies, data loading, idle) and divide each part's exact FLOPs by its time.

    Per-rank trace files are read and attributed in parallel: with --scheduler one task per file on the Dask
    cluster (the metadata too), else in worker processes when the files are large (256 MiB together); the same
    result as one process."""
    from ..run.options import RunOptions
    from ..scale.cluster import scheduled

    if run is None:  # a flag that would change nothing is refused, not ignored
        refuse_without_run(options or {}, ctx.get_parameter_source)
    opts = RunOptions.from_command(options or {})
    with scheduled(opts.scheduler) as client:
        result = _analyze(traces, run, opts, first_iteration, client)
    payload = result.to_dict()
    if out is not None:
        import matplotlib.pyplot as plt

        from ..analysis.trace_parts import trace_parts_figure
        from ..report.output import TRACE, atomic_report_dir

        # the report's output rule (`vlm_perf.report.output`): files created new in a fresh folder, renamed into
        # place; never written through a symlink, never over a folder that is not a trace -o folder
        with atomic_report_dir(out, TRACE) as tmp:
            (tmp / "trace_parts.json").write_text(json.dumps(payload, indent=1, default=str) + "\n")
            result.per_step().write_csv(tmp / "per_step.csv")
            (tmp / "trace_parts.md").write_text(markdown(result) + "\n")
            plt.close(trace_parts_figure(result, tmp / "trace_parts.png"))
    if as_json:
        print(json.dumps(payload, indent=1, default=str))
        return
    print(markdown(result))
    if out is not None:
        print(f"\nwritten to {out}/ (trace_parts.json, trace_parts.md, trace_parts.png, per_step.csv)")


#: the trace flags that act on the run folder's metadata FLOPs (the model, the world size they are divided by, the
#: regime, the attention core): without --run the FLOPs per part are the matmul shapes the trace recorded, which none
#: of them changes
RUN_ONLY = ("model", "gpus", "frozen", "trainable", "adapter", "qlora", "causal")


def refuse_without_run(options: dict, source_of: Callable[[str], Any] | None = None) -> None:
    """One usage error (`ConfigError`, exit 2) naming every `RUN_ONLY` flag given without ``--run``. ``source_of``:
    the command line's parameter source by name (click's ``Context.get_parameter_source``): a flag typed out counts,
    its declared default too (``--causal half``); without it, a value other than the declared default counts."""
    from ..run.options import option

    given = []
    for name in RUN_ONLY:
        if name not in options:
            continue
        source = source_of(name) if source_of is not None else None
        if source is not None:
            typed = getattr(source, "name", str(source)) not in ("DEFAULT", "DEFAULT_MAP")
        else:
            typed = options[name] not in (None, False, [], (), option(name).default)
        if typed:
            given.append(option(name).flag)
    if given:
        flags = ", ".join(given)
        raise ConfigError(f"{flags} {'acts' if len(given) == 1 else 'act'} on the run's metadata FLOPs: add --run "
                          "RUN_DIR (the run folder: run.yaml, metadata); without it the FLOPs per part are the "
                          "matmul shapes the trace recorded")


def _analyze(traces: list[str], run: str | None, opts: RunOptions, first_iteration: int | None, client: Any):
    """The attribution, with the trace files and the metadata read here or (``client``) on the cluster.

    With ``--run`` the run is opened by `vlm_perf.run.core.open_run`, as the report opens it: the same model,
    regime (frozen parts, selectors, adapter), attention core, peak and world size, so the FLOPs per part are the
    report's trace section's. Without it: the peak of the flags, FLOPs from the trace's shapes (the flags that act on
    a run's metadata are refused before: `refuse_without_run`)."""
    from ..ingest.traces import trace_files, trace_metadata

    files = trace_files(list(traces))  # a missing or empty trace path is named before the run is opened
    if run is None:
        return _attribute(files, client, first_iteration=first_iteration, peak_flops=_flag_peak(opts))
    from ..remote import as_path
    from ..run.core import open_run

    if not as_path(run).is_dir():
        raise InputError("not a folder (--run takes a run folder: run.yaml + metadata)", str(run))
    opened = open_run(run, opts, per_rank=True, need_log=False, stats=False, client=client)
    peak = opened.peak_tflops * 1e12 if opened.peak_tflops else None
    metadata = trace_metadata(opened.metadata, opened.spec) if opened.metadata is not None else None
    return _attribute(files, client, spec=opened.spec, metadata=metadata, first_iteration=first_iteration,
                      causal=opened.causal, frozen=opened.trainability, peak_flops=peak,
                      world_size=opened.config.num_gpus)


def _attribute(files: list, client: Any, **kwargs):
    """The attribution of the trace ``files``: per-rank files read and attributed on the cluster's workers
    (``client``), in worker processes when they are large (`analysis.trace_ranks.worth_parallel`), else in this
    process; the same result each way (tests/analysis/test_trace_streaming.py)."""
    from ..analysis.trace_parts import analyze_traces
    from ..analysis.trace_ranks import analyze_trace_files, worth_parallel
    from ..ingest.traces import read_traces

    if client is not None:
        return analyze_trace_files(files, client=client, **kwargs)
    if worth_parallel(files):
        return analyze_trace_files(files, **kwargs)
    return analyze_traces(read_traces(files), **kwargs)


def _flag_peak(opts: RunOptions) -> float | None:
    """FLOP/s of the --peak-tflops / --gpu (+ --dtype) flags (the run's peak when there is no run folder)."""
    if opts.peak_tflops is not None:
        return opts.peak_tflops * 1e12
    if not opts.gpu:
        return None
    from ..hardware import peak_flops

    return peak_flops(opts.gpu, opts.dtype or "bf16")


def _fmt(v, scale=1.0, digits=2, pct=False) -> str:
    if v is None:
        return "—"
    return f"{100 * v:.1f}%" if pct else f"{v / scale:,.{digits}f}"


def markdown(result) -> str:
    """The per-part table, the step sums and the top ops, as Markdown. Every name from the trace (op and kernel
    names, part names, notes) goes through the report's escaping (`vlm_perf.report.content`: `md_escape`, code
    spans by `md_inline`), so a name cannot close its code span, split a table cell or land as raw HTML."""
    import polars as pl

    from ..analysis.trace_checks import SHAPES_AGREE, explained_by_attention, shapes_gap
    from ..report.content import C, T, md_escape, md_inline

    def cell(*parts) -> str:
        return md_inline(T(*parts), line_start=False, cell=True)

    eff = result.summary()
    unit, scale = ("TFLOP/s", 1e12)
    rates = [r for r in eff["flops_per_s"].to_list() if r] if "flops_per_s" in eff.columns else []
    if rates and max(rates) < 1e12:
        unit, scale = ("GFLOP/s", 1e9)
    lines = ["| part | time (ms) | share of time | forward (ms) | backward (ms) | FLOPs share | achieved " + unit
             + " | vs LM | excess vs LM (ms) | MFU |", "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in eff.iter_rows(named=True):
        lines.append(f"| {cell(C(r['part']))} | {_fmt(r['time_s'], 1e-3)} | {_fmt(r['time_share'], pct=True)} | "
                     f"{_fmt(r['forward_s'], 1e-3)} | {_fmt(r['backward_s'], 1e-3)} | "
                     f"{_fmt(r['flops_share'], pct=True)} | {_fmt(r['flops_per_s'], scale)} | "
                     f"{_fmt(r['rate_vs_lm'])} | {_fmt(r['excess_vs_lm_s'], 1e-3)} | {_fmt(r['mfu'], pct=True)} |")
    both = eff.filter(pl.col("flops").is_not_null() & pl.col("shape_flops").is_not_null() & (pl.col("flops") > 0))
    gap = shapes_gap(eff) if result.flops_source == "metadata" else None
    if gap is not None:
        names = ", ".join(md_inline(T(C(p))) for p in both["part"].to_list())
        if gap[1] and not explained_by_attention(result, gap[1]):
            lines += ["", f"Cross-check FAILED: the matmul FLOPs the trace recorded (Input Dims) differ from the exact "
                          f"FLOPs by up to {100 * gap[0]:.1f}% (beyond {100 * SHAPES_AGREE:g}%: "
                          f"{', '.join(md_inline(T(C(p))) for p in gap[1])}; compared: {names}); see the notes."]
        elif gap[1]:  # only the LM's attention departs, and the warning below says why
            rest = both.filter(pl.col("part") != gap[1][0])
            worst = float(((rest["shape_flops"] - rest["flops"]).abs() / rest["flops"]).max() or 0.0)
            lines += ["", f"Cross-check: the matmul FLOPs the trace recorded (Input Dims) match the exact FLOPs within "
                          f"{100 * worst:.3f}% for {rest.height} part(s); {md_inline(T(C(gap[1][0])))} departs by "
                          f"{100 * gap[0]:.3f}%: see the warning below."]
        else:
            lines += ["", f"Cross-check: the matmul FLOPs the trace recorded (Input Dims) match the exact FLOPs within "
                          f"{100 * gap[0]:.3f}% for {both.height} part(s) ({names})."]
    if result.attention_warning is not None:  # said before the table's numbers are read as right
        lines += ["", f"**{md_escape(result.attention_warning)}**"]
    steps = result.steps
    if result.flops_source:
        lines += ["", f"FLOPs from: {md_escape(result.flops_source)}."]
    lines += ["", "vs LM: the part's achieved FLOP/s over the language model's (its parts with FLOPs, together); excess: "
              "its time minus the time its FLOPs would take at the LM's rate (where optimisation pays)."]
    lines += ["", f"{steps.height} step(s) over {steps['rank'].n_unique()} rank(s); the parts add up to each step's "
              f"ProfilerStep time within {100 * result.check_sums():.4f}%."]
    comm = int(steps["comm_ns"].sum())
    if comm:
        lines.append(f"communication kernels busy {comm / 1e6:,.2f} ms, of which {int(steps['overlap_ns'].sum()) / 1e6:,.2f}"
                     " ms overlapped with compute.")
    lines += ["", "| top ops / kernels by time | part | time (ms) | calls |", "|---|---|---:|---:|"]
    for r in result.top.head(10).iter_rows(named=True):
        lines.append(f"| {cell(C(r['name'][:90]))} | {cell(C(r['part']))} | {r['time_ns'] / 1e6:,.2f} | {r['count']} |")
    notes = [n for n in result.notes if n != result.attention_warning]  # the warning is said above, once
    if notes:
        lines += [""] + [f"- note: {md_escape(n)}" for n in notes]
    return "\n".join(lines)


def register(app: typer.Typer) -> None:
    app.command("trace")(trace)
