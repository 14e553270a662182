"""``vlm-perf parse LOG|DIR... [--format auto|NAME] [--out FILE] [--raw]``: training logs -> iteration table.

``--out`` writes the deduplicated iteration table (one row per iteration, latest restart segment
wins: the view the report uses; ``--raw``: every record instead, core columns first, then
extras) as ``.parquet``, ``.csv`` or ``.jsonl``. NaN and +-inf survive every format: Parquet and
CSV natively (``NaN``, ``inf``, ``-inf``), JSON lines as the bare tokens ``NaN``, ``Infinity``,
``-Infinity`` (what Python's ``json`` and pandas read; a null stays ``null``). Diagnostics go to
stderr. Without ``--out`` a short summary table is printed to stdout.
"""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path
from typing import List, Optional

import typer

from ._common import check_out_suffix, write_frame
from ._options import run_options


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
    lines += [f"note: {n}" for n in d.get("notes", [])[:20]]
    return "\n".join(lines)


#: Finite stand-ins for NaN / +inf / -inf while polars writes JSON lines (it writes them as null);
#: replaced by the JSON tokens afterwards. Values this close to the float maximum do not occur in logs.
_JSON_SENTINELS = {b"NaN": 1.7976931348623155e308, b"Infinity": 1.7976931348623153e308,
                   b"-Infinity": -1.7976931348623153e308}


def write_table(frame, out: Path) -> None:
    """``write_frame`` (parquet / CSV / JSON lines by suffix), keeping NaN and +-inf in JSON lines."""
    import polars as pl

    if out.suffix.lower() not in (".jsonl", ".ndjson"):
        write_frame(frame, out)
        return
    nan, pinf, ninf = _JSON_SENTINELS.values()
    floats = [c for c, t in frame.schema.items() if t.is_float()]
    marked = frame.with_columns(
        pl.when(pl.col(c).is_nan()).then(nan).when(pl.col(c) == float("inf")).then(pinf)
        .when(pl.col(c) == float("-inf")).then(ninf).otherwise(pl.col(c)).alias(c) for c in floats)
    import io

    buf = io.BytesIO()
    marked.write_ndjson(buf)
    data = buf.getvalue()
    for token, value in _JSON_SENTINELS.items():
        data = data.replace(repr(value).encode(), token)
    from ..report.output import make_folder
    make_folder(out.parent)
    out.write_bytes(data)


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


def _not_iterations(result) -> str:
    """Evaluations and end-of-run summaries: kept in ``raw``, shown here, never iterations."""
    import polars as pl

    raw = result.raw
    if "kind" not in raw.columns:
        return ""
    rest = raw.filter(pl.col("kind") != "train")
    if not rest.height:
        return ""
    keep = [c for c in rest.columns if c not in ("file", "rank_label", "segment", "timestamp", "first_in_segment")
            and rest.get_column(c).null_count() < rest.height]
    with pl.Config(tbl_rows=20, tbl_hide_dataframe_shape=True, tbl_hide_column_data_types=True, float_precision=4):
        return f"not iterations ({rest.height} evaluation/summary record(s), kept in --raw):\n{rest.select(keep)}"


def _progress_callback(stack: contextlib.ExitStack):
    """``progress(done_bytes, total_bytes)`` for ``parse_logs``: on its first call (the total of
    the expanded files) it opens a rich bar on stderr if stderr is a terminal and the input is
    large (``_progress.want_progress``, as ``report`` and ``metadata`` decide), else stays quiet."""
    from . import _progress

    update: list = []

    def progress(done: int, total: int) -> None:
        if not update:
            enabled = _progress.want_progress(sys.stderr, total, _progress.LARGE_INPUT_BYTES)
            update.append(stack.enter_context(_progress.byte_progress("parsing logs", total, enabled)))
        update[0](done, total)

    return progress


def register(app: typer.Typer) -> None:
    @app.command("parse")
    @run_options("parse")
    def parse(
        logs: List[str] = typer.Argument(..., help="training logs (.log/.txt/.gz/.zst, JSONL, trainer_state.json, "
                                                    "TensorBoard dirs) or run directories; paths or URLs (s3://, "
                                                    "gs://, any fsspec protocol)"),
        out: Optional[Path] = typer.Option(None, "--out", "-o", help="write the deduplicated iteration table "
                                                                      "(.parquet|.csv|.jsonl)"),
        raw: bool = typer.Option(False, "--raw", help="with --out: write every record (per rank, per restart) "
                                                      "instead of one row per iteration"),
        explain: bool = typer.Option(False, "--explain", help="per distinct line shape: which format read it, the "
                                                              "record kind, each key's column and why, unknown keys"),
        options: Optional[dict] = None,
    ) -> None:
        """Parse training logs into one tidy iteration table."""
        from ..ingest.logs import parse_logs

        if explain:
            from ..ingest.logs.explain import explain_text
            from ..ingest.logs.parser import expand_log_paths

            for path in expand_log_paths(list(logs)):
                print(explain_text(path))
            return
        check_out_suffix(out)
        from ..run.options import RunOptions
        from ..scale.cluster import parse_logs_on, scheduled

        opts = RunOptions.from_command(options or {})
        log_format, scheduler = opts.log_format, opts.scheduler

        with scheduled(scheduler) as client:
            if client is not None:  # one task per file on the cluster: the same parse, merged and finished here
                result = parse_logs_on(client, list(logs), format=log_format)
            else:
                with contextlib.ExitStack() as stack:
                    result = parse_logs(list(logs), format=log_format, progress=_progress_callback(stack))
        print(_diagnostics_text(result.diagnostics), file=sys.stderr)
        if out is not None:
            table = result.raw if raw else result.iterations
            write_table(table, out)
            what = "records" if raw else "iterations"
            print(f"wrote {table.height} {what} to {out}", file=sys.stderr)
        else:
            print(_summary(result))
            other = _not_iterations(result)
            if other:
                print(other)
