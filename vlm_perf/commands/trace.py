"""``vlm-perf trace TRACE...``: where the step time went, part by part, joined with exact FLOPs."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import List, Optional

import typer

_METADATA = re.compile(r"^metadata.*(\.(jsonl|ndjson)(\.gz|\.zst)?|\.parquet)$")


def _run_inputs(run: Path | None) -> tuple[dict, list[Path]]:
    """(run.yaml values, metadata paths) of a run folder."""
    if run is None:
        return {}, []
    from ..ingest.runconfig import find_manifest, load_manifest

    if not run.is_dir():
        raise ValueError(f"--run {run}: not a folder")
    manifest = find_manifest(run)
    values = load_manifest(manifest) if manifest else {}
    metadata = sorted(p for p in run.iterdir() if p.is_file() and _METADATA.match(p.name))
    if (run / "metadata").is_dir():
        metadata.append(run / "metadata")
    return values, metadata


def trace(
    traces: List[Path] = typer.Argument(..., help="Trace files (.json, .json.gz, Nsight .sqlite) or folders of them."),
    run: Optional[Path] = typer.Option(None, "--run", help="Run folder: run.yaml (model, gpu, dtype, frozen) and "
                                                          "metadata*.jsonl for the FLOPs per part."),
    model: Optional[str] = typer.Option(None, "--model", help="Model preset or config.json (overrides run.yaml)."),
    out: Optional[Path] = typer.Option(None, "-o", "--out", help="Write trace_parts.{json,md,png} + per_step.csv here."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object and nothing else."),
    first_iteration: Optional[int] = typer.Option(None, "--first-iteration",
                                                  help="Training iteration of ProfilerStep#0 (default: the trace's "
                                                       "vlm_perf_first_iteration, else 1)."),
    causal: str = typer.Option("half", "--causal", help="LM attention core: half (causal kernels) or full (eager)."),
    gpu: Optional[str] = typer.Option(None, "--gpu", help="GPU type for MFU per part (overrides run.yaml)."),
    dtype: Optional[str] = typer.Option(None, "--dtype", help="Compute dtype of the peak (default run.yaml or bf16)."),
    peak_tflops: Optional[float] = typer.Option(None, "--peak-tflops", help="Dense peak TFLOP/s per device."),
) -> None:
    """Attribute profiled step time to model parts (vision tower, projector, LM attention/MLP/head, loss,
    optimizer, communication, copies, data loading, idle) and divide each part's exact FLOPs by its time."""
    from ..analysis.trace_parts import analyze_traces, trace_parts_figure
    from ..arch import load_model

    values, metadata = _run_inputs(run)
    model_name = model or values.get("model")
    spec = load_model(model_name) if model_name else None
    gpu_name = gpu or values.get("gpu")
    peak = None
    if peak_tflops is not None:
        peak = peak_tflops * 1e12
    elif gpu_name:
        from ..hardware import peak_flops

        peak = peak_flops(gpu_name, dtype or values.get("dtype") or "bf16")
    result = analyze_traces([str(t) for t in traces], spec=spec, metadata=metadata or None,
                            first_iteration=first_iteration, causal=causal, frozen=tuple(values.get("frozen") or ()),
                            peak_flops=peak, world_size=values.get("num_gpus"))
    payload = result.to_dict()
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        (out / "trace_parts.json").write_text(json.dumps(payload, indent=1, default=str) + "\n")
        result.per_step().write_csv(out / "per_step.csv")
        (out / "trace_parts.md").write_text(markdown(result) + "\n")
        trace_parts_figure(result, out / "trace_parts.png")
    if as_json:
        print(json.dumps(payload, indent=1, default=str))
        return
    print(markdown(result))
    if out is not None:
        print(f"\nwritten to {out}/ (trace_parts.json, trace_parts.md, trace_parts.png, per_step.csv)")


def _fmt(v, scale=1.0, digits=2, pct=False) -> str:
    if v is None:
        return "—"
    return f"{100 * v:.1f}%" if pct else f"{v / scale:,.{digits}f}"


def markdown(result) -> str:
    """The per-part table, the step sums and the top ops, as Markdown."""
    import polars as pl

    eff = result.summary()
    unit, scale = ("TFLOP/s", 1e12)
    rates = [r for r in eff["flops_per_s"].to_list() if r] if "flops_per_s" in eff.columns else []
    if rates and max(rates) < 1e12:
        unit, scale = ("GFLOP/s", 1e9)
    lines = ["| part | time (ms) | share of time | forward (ms) | backward (ms) | FLOPs share | achieved " + unit
             + " | vs LM | excess vs LM (ms) | MFU |", "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in eff.iter_rows(named=True):
        lines.append(f"| {r['part']} | {_fmt(r['time_s'], 1e-3)} | {_fmt(r['time_share'], pct=True)} | "
                     f"{_fmt(r['forward_s'], 1e-3)} | {_fmt(r['backward_s'], 1e-3)} | "
                     f"{_fmt(r['flops_share'], pct=True)} | {_fmt(r['flops_per_s'], scale)} | "
                     f"{_fmt(r['rate_vs_lm'])} | {_fmt(r['excess_vs_lm_s'], 1e-3)} | {_fmt(r['mfu'], pct=True)} |")
    both = eff.filter(pl.col("flops").is_not_null() & pl.col("shape_flops").is_not_null() & (pl.col("flops") > 0))
    if both.height and result.flops_source == "metadata":
        gap = float(((both["shape_flops"] - both["flops"]).abs() / both["flops"]).max())  # type: ignore[arg-type]
        lines += ["", f"Cross-check: the matmul FLOPs the trace recorded (Input Dims) match the exact FLOPs within "
                      f"{100 * gap:.3f}% for {both.height} part(s) ({', '.join(both['part'].to_list())})."]
    steps = result.steps
    if result.flops_source:
        lines += ["", f"FLOPs from: {result.flops_source}."]
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
        lines.append(f"| `{r['name'][:90]}` | {r['part']} | {r['time_ns'] / 1e6:,.2f} | {r['count']} |")
    if result.notes:
        lines += [""] + [f"- note: {n}" for n in result.notes]
    return "\n".join(lines)


def register(app: typer.Typer) -> None:
    app.command("trace")(trace)
