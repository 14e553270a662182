"""``vlm-perf metadata PATH... [--out FILE] [--to-parquet FILE] [--skip-bad] [--model M]``.

Reads per-microbatch metadata shards (schema v1, ``docs/metadata-schema.md``) and writes one row
per iteration with the `BatchStats` sufficient statistics (``.parquet``, ``.csv`` or ``.jsonl``).
``--to-parquet`` also writes the valid per-microbatch rows (schema v1 columns) as one Parquet file,
in the same pass; every reader accepts it in place of the JSONL. Diagnostics go to stderr; without
``--out`` a short summary is printed instead.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import List, Optional

import typer

from ..errors import ConfigError
from ._common import check_out_suffix, write_frame
from ._options import run_options


def _summary(frame, diag) -> str:
    if frame.height == 0:
        return "no valid iterations"
    its = frame["iteration"]
    total = {name: int(frame[name].sum()) for name in ("lm_tokens", "lm_padded_tokens", "vision_patches",
                                                       "vision_merged_tokens", "video_patches", "microbatches")}
    share = total["vision_merged_tokens"] / total["lm_tokens"] if total["lm_tokens"] else 0.0
    lines = [
        f"iterations      {frame.height} ({its.min()}..{its.max()})",
        f"microbatches    {total['microbatches']} (mean {total['microbatches'] / frame.height:.1f} per iteration)",
        f"lm tokens       {total['lm_tokens']} (padded {total['lm_padded_tokens']}); "
        f"mean {total['lm_tokens'] / frame.height:,.0f} per iteration",
        f"vision patches  {total['vision_patches']} (video {total['video_patches']}); "
        f"merged tokens {total['vision_merged_tokens']} = {share:.1%} of lm tokens",
    ]
    return "\n".join(lines)


def _raise_interrupt(signum, frame):  # SIGTERM -> KeyboardInterrupt, so the cleanup below runs
    raise KeyboardInterrupt(f"signal {signum}")


def _convert(paths, spec, skip_bad: bool, progress, target: Path):
    """Read once; stream the valid rows into ``target`` (written to a temporary name beside it,
    renamed when complete, removed on any error, Ctrl-C or SIGTERM)."""
    import signal

    import pyarrow.parquet as pq

    from ..ingest.metadata_source import MetadataSource

    from ..report.output import make_folder
    make_folder(target.parent)
    partial = target.with_name(target.name + ".partial")
    writer: list = []

    def sink(frame) -> None:
        table = frame.to_arrow()
        if not writer:
            writer.append(pq.ParquetWriter(partial, table.schema, compression="zstd"))
        writer[0].write_table(table)

    previous = signal.signal(signal.SIGTERM, _raise_interrupt)
    try:
        source = MetadataSource(paths, spec, skip_bad=skip_bad, progress=progress, raw_sink=sink).read()
        if not writer:  # no valid row: an empty file with the schema
            from ..ingest.metadata_schema import SCHEMA
            import polars as pl

            sink(pl.DataFrame(schema=SCHEMA))
        writer[0].close()
        partial.replace(target)
    except BaseException:
        if writer:
            writer[0].close()
        partial.unlink(missing_ok=True)
        raise
    finally:
        signal.signal(signal.SIGTERM, previous)
    return source


def run_metadata_paths(paths: List[str]) -> List[str]:
    """A run folder stands for its metadata, found by the rule `report` uses (`vlm_perf.run.discover`):
    ``metadata*.jsonl[.gz]`` / ``.parquet`` files and a ``metadata/`` shard folder; any other folder is a
    folder of shards."""
    from ..remote import as_path
    from ..run.discover import metadata_of

    out: List[str] = []
    for text in paths:
        path = as_path(text)  # a URL too (vlm_perf.remote)
        found = metadata_of(path) if path.is_dir() else []
        out += [str(p) for p in found] or [text]
    return out


def register(app: typer.Typer) -> None:
    @app.command("metadata")
    @run_options("metadata")
    def metadata(
        paths: List[str] = typer.Argument(..., help="metadata .jsonl/.jsonl.gz files, directories of shards, or globs"),
        out: Optional[Path] = typer.Option(None, "--out", "-o", help="write per-iteration stats (.parquet|.csv|.jsonl)"),
        to_parquet: Optional[Path] = typer.Option(None, "--to-parquet",
                                                  help="also write the valid per-microbatch rows as Parquet"),
        options: Optional[dict] = None,
    ) -> None:
        """Per-iteration sufficient statistics from per-microbatch metadata."""
        from ..ingest.metadata_source import MetadataSource
        from ._progress import byte_progress, input_bytes, want_progress

        from ..run.options import RunOptions

        opts = RunOptions.from_command(options or {})
        model, skip_bad, scheduler = opts.model, opts.skip_bad, opts.scheduler
        paths = run_metadata_paths(paths)

        check_out_suffix(out)
        if to_parquet is not None and to_parquet.suffix.lower() != ".parquet":
            raise ConfigError(f"--to-parquet {to_parquet}: the file name must end in .parquet")
        spec = None
        if model:
            from ..arch import load_model

            spec = load_model(model)
        total = input_bytes(paths)
        if scheduler and to_parquet is not None:
            raise ConfigError("--to-parquet writes one file from this process; run it without --scheduler")
        from ..scale.cluster import read_metadata, scheduled

        with byte_progress("reading metadata", total, want_progress(sys.stderr, total)) as progress, \
                scheduled(scheduler) as client:
            if client is not None:  # the same pass per partition on the cluster, merged and finished here
                source = read_metadata(client, paths, spec, skip_bad=skip_bad, progress=progress)
            elif to_parquet is None:
                source = MetadataSource(paths, spec, skip_bad=skip_bad, progress=progress).read()
            else:
                source = _convert(paths, spec, skip_bad, progress, to_parquet)
        result = source.result()
        diag = result.diagnostics
        print(f"metadata: {diag.rows_used}/{diag.rows_read} rows used from {len(diag.files)} file(s), "
              f"{diag.iterations} iterations, merge={diag.merge_size}, window={diag.window_side}", file=sys.stderr)
        if diag.rows_skipped:
            print("skipped: " + json.dumps(diag.rows_skipped), file=sys.stderr)
            for line in diag.bad_lines:
                print(f"  {line}", file=sys.stderr)
        for note in diag.notes:
            print(f"note: {note}", file=sys.stderr)
        if to_parquet is not None:
            print(f"wrote {to_parquet} ({diag.rows_read - diag.rows_skipped_total} rows)", file=sys.stderr)
        if out is not None:
            write_frame(result.frame, out)
            print(f"wrote {out} ({result.frame.height} rows)", file=sys.stderr)
        else:
            print(_summary(result.frame, diag))
