"""``vlm-perf parse LOG... [--format auto|NAME] [--out FILE]``: training logs -> iteration table.

Writes the raw rows (core columns first, then extras) as ``.parquet``, ``.csv`` or ``.jsonl``;
diagnostics go to stderr. Without ``--out`` a short summary table is printed to stdout.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import List, Optional

import typer

from ._common import check_out_suffix, write_frame


def _diagnostics_text(diag) -> str:
    d = diag.to_dict()
    ignored = ", ".join(f"{k}={v}" for k, v in d["ignored"].items()) or "none"
    formats = ", ".join(f"{k}={v}" for k, v in d["formats_seen"].items()) or "none"
    lines = [
        f"lines read {d['lines_read']}, records {d['records']}, segments {d['segments']}, "
        f"duplicates {d['duplicates']}, decode errors {d['decode_errors']}",
        f"formats: {formats}",
        f"ignored: {ignored}",
    ]
    if d["failed_count"]:
        shown = ", ".join(d["failed"][:5]) + (" ..." if d["failed_count"] > 5 else "")
        lines.append(f"failed ({d['failed_count']}): {shown}")
    if d["partial_count"]:
        shown = ", ".join(d["partial"][:5]) + (" ..." if d["partial_count"] > 5 else "")
        lines.append(f"partial ({d['partial_count']}): {shown}")
    return "\n".join(lines)


def _summary(result) -> str:
    """Per (framework, segment): iterations, range and medians of the logged performance columns."""
    import polars as pl

    it = result.iterations
    if it.height == 0:
        return "no iterations"
    agg = (
        it.group_by("framework", "segment", maintain_order=True)
        .agg(
            pl.len().alias("rows"),
            pl.col("iteration").min().alias("first"),
            pl.col("iteration").max().alias("last"),
            pl.col("elapsed_s").median().alias("median_s_per_iter"),
            pl.col("tflops_per_gpu_logged").median().alias("median_tflops_gpu"),
            pl.col("loss").drop_nans().last().alias("last_loss"),
        )
        .sort("segment")
    )
    with pl.Config(tbl_rows=50, tbl_hide_dataframe_shape=True, tbl_hide_column_data_types=True,
                   float_precision=4):
        return str(agg)


def register(app: typer.Typer) -> None:
    @app.command("parse")
    def parse(
        logs: List[Path] = typer.Argument(..., help="training logs (.log/.txt/.gz/.zst, JSONL, trainer_state.json, TensorBoard dirs)"),
        format: str = typer.Option("auto", "--format", "-f", help="auto (detect per line) or one format name"),
        out: Optional[Path] = typer.Option(None, "--out", "-o", help="write the iteration table (.parquet|.csv|.jsonl)"),
    ) -> None:
        """Parse training logs into one tidy iteration table."""
        from ..ingest.logs import parse_logs

        check_out_suffix(out)
        result = parse_logs(list(logs), format=format)
        print(_diagnostics_text(result.diagnostics), file=sys.stderr)
        if out is not None:
            write_frame(result.raw, out)
            print(f"wrote {result.raw.height} rows to {out}", file=sys.stderr)
        else:
            print(_summary(result))
