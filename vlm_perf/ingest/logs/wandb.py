"""Weights & Biases run-history exports: the CSV a chart panel downloads, and ``run.history()`` /
``run.scan_history()`` dumps written as CSV, JSON lines or Parquet.

* History dumps have one row per logged step with W&B's own ``_step`` (and ``_runtime`` seconds since
  start, ``_timestamp`` epoch seconds) plus the keys the framework logged (Megatron / Bridge
  ``iteration-time``, ``throughput/tflops/device``, ``lm loss``; HF ``train/loss``,
  ``train/global_step``; veRL ``perf/mfu/actor``, ``perf/throughput``; ...).
* A panel's "Export CSV" has a ``Step`` column and one ``<run name> - <key>`` column per run (plus
  ``__MIN`` / ``__MAX`` band columns, dropped): the run prefix is removed.

``iteration`` is ``train/global_step`` when logged (HF's optimizer step), else ``_step`` / ``Step``.
A non-empty cell that is not a number is null and its row counted as partial. ``run.history()`` is
*sampled* by W&B (500 rows by default); ``scan_history()`` has every row.
"""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl

from ...remote import is_url, open_binary
from ...errors import InputError
from .formats import LogFormat, register
from .reader import head_text, read_text
from .schema import (
    CORE_SCHEMA,
    KIND_DTYPE,
    PARTIAL_FLAG,
    check_int_columns,
    conform,
    extra_name,
    snake_case,
)
from .segments import FILE_SCALE, ORD, SUB_SCALE
from .tensorboard import TAG_MAP
from .verl import MAP as VERL_MAP
from .vocab import is_rl_column, lookup

FORMAT = "wandb"

#: W&B key -> (core column, multiplier): TensorBoard-style tags, veRL keys and W&B's own columns.
KEY_MAP: dict[str, tuple[str, float]] = {
    **TAG_MAP,
    **VERL_MAP,
    "train/global_step": ("iteration", 1.0),
    "_step": ("_wandb_step", 1.0),
    "Step": ("_wandb_step", 1.0),
    "_runtime": ("runtime_s", 1.0),
    "train/train_loss": ("train_loss", 1.0),
    "iteration_time": ("elapsed_s", 1.0),
    "perf/mfu": ("mfu_logged", 1.0),
    "tokens_per_sec_per_gpu": ("tokens_per_s", 1.0),
}


def _kind(path: Path) -> str | None:
    if path.is_dir():
        return None
    name = path.name.lower()
    if name.endswith(".parquet"):
        try:
            schema = pl.read_parquet_schema(open_binary(path) if is_url(path) else path)
        except FileNotFoundError:
            return None
        except (OSError, pl.exceptions.PolarsError, ValueError) as exc:  # a corrupt footer, a truncated copy
            first = (str(exc).splitlines() or [type(exc).__name__])[0][:200]
            raise InputError(f"cannot read Parquet ({first})", source=str(path)) from None
        return "parquet" if "_step" in schema else None
    try:
        head = head_text(path, 1 << 16)
    except (OSError, pl.exceptions.PolarsError):
        return None
    first = head.lstrip("\ufeff").split("\n", 1)[0]
    if name.endswith((".csv", ".csv.gz", ".csv.zst")):
        cols = [c.strip().strip('"') for c in first.split(",")]
        if "_step" in cols or (cols and cols[0] == "Step" and any(" - " in c for c in cols[1:])):
            return "csv"
        return None
    if first.startswith("{") and '"_step"' in first:
        try:
            return "jsonl" if isinstance(json.loads(first), dict) else None
        except (ValueError, RecursionError):  # not JSON, or nested beyond the interpreter's limit: not an export
            return None
    return None


def sniff(path: Path) -> bool:
    return _kind(path) is not None


def _column_name(key: str, taken: set[str]) -> tuple[str, float] | None:
    if key.endswith(("__MIN", "__MAX")):
        return None
    if " - " in key and key not in KEY_MAP:  # panel export: "<run name> - <key>"
        key = key.split(" - ", 1)[1]
    if "\x00dup" in key:  # a header name given twice: the repeat is an extra (`_header_oddities`)
        return (extra_name(snake_case(key.split("\x00")[0]), taken | {snake_case(key.split("\x00")[0])}), 1.0)
    if key in KEY_MAP:
        return KEY_MAP[key]
    if key == "_timestamp":
        return ("_timestamp", 1.0)
    m = lookup(key)  # RL steps (veRL / EasyR1 / TRL keys): phase seconds, lengths, token counts
    if m is not None and m.column and is_rl_column(m.column) and m.column not in taken:
        return (m.column, m.mult)
    if m is not None and m.column == "elapsed_s" and m.quantity == "time":
        return (m.column, m.mult)  # a step timer (ROLL time/step_total, siiRL / slime step timers, ...)
    return (extra_name(snake_case(key), taken), 1.0)


def _ragged_row(path: Path, text: str) -> str:
    """``path:line`` of the first row with more comma-separated fields than the header (rows without
    quotes only; ``path`` when none is found that way)."""
    lines = text.split("\n")
    width = lines[0].count(",") if lines else 0
    for n, line in enumerate(lines[1:], start=2):
        if '"' not in line and line.strip() and line.count(",") > width:
            return f"{path}:{n}"
    return str(path)


def read(path: Path, file_idx: int, diag) -> pl.DataFrame:
    kind = _kind(path)
    if kind == "parquet":
        table = pl.read_parquet(open_binary(path) if is_url(path) else path)
        first_line = 1
    elif kind == "csv":
        text, bad = read_text(path)
        diag.decode_errors += bad
        text = text.lstrip("\ufeff")
        try:
            table = pl.read_csv(text.encode(), infer_schema=False)
        except pl.exceptions.PolarsError as exc:  # a ragged row: one line naming the file (and the row)
            raise InputError(f"not a W&B CSV export: {str(exc).splitlines()[0][:200]}; every row needs the header's "
                             "columns", source=_ragged_row(path, text)) from None
        table = _header_oddities(path, text, table, diag)
        first_line = 2  # the header is line 1
    else:
        text, bad = read_text(path)
        diag.decode_errors += bad
        rows = []
        for n, raw in enumerate(text.splitlines(), start=1):
            if not raw.strip():
                continue
            try:  # numbers kept as their text: one beyond float64 is named below, never read as inf
                value = json.loads(raw, parse_float=str, parse_int=str)
            except (ValueError, RecursionError):
                diag.fail(f"{path}:{n}")
                continue
            if isinstance(value, dict):
                flat = {k: v for k, v in value.items() if isinstance(v, (int, float, str)) and not isinstance(v, bool)}
                rows.append({"_line": n, **{k: (str(v) if not isinstance(v, str) else v) for k, v in flat.items()}})
        table = pl.from_dicts(rows, infer_schema_length=None) if rows else pl.DataFrame()
        first_line = None
    diag.lines_read += table.height + (1 if kind == "csv" else 0)
    if "_line" in table.columns:
        lines = table.get_column("_line").cast(pl.Int64)
        table = table.drop("_line")
    else:
        lines = pl.int_range(first_line, first_line + table.height, eager=True, dtype=pl.Int64)
    exprs, taken, partial, overflow = [], set(CORE_SCHEMA), [], []
    for col in table.columns:
        target = _column_name(col, taken)
        if target is None:
            continue
        name, mult = target
        if name in taken and any(e.meta.output_name() == name for e in exprs):
            # a second key for the same column (`lm loss` and `train/loss`; `_step` and `Step`): an extra
            base = snake_case(col) if name.startswith("_") else name
            name = extra_name(base, taken | {base})
            diag.note(f"{path}:1: columns {col!r} and an earlier one both mean {target[0]!r}: {col!r} kept as {name!r}")
        taken.add(name)
        src = pl.col(col)
        if table.schema[col] == pl.Utf8:
            stripped = src.str.strip_chars()
            value = stripped.cast(pl.Float64, strict=False)
            # `1e400` (or a 400-digit integer) reads as inf: beyond float64, not a value; null, partial, named
            over = value.is_infinite() & ~stripped.str.to_lowercase().str.contains("inf", literal=True)
            overflow.append((col, over))
            value = pl.when(over).then(None).otherwise(value)
            partial.append(stripped.is_not_null() & (stripped != "") & value.is_null())
        else:
            value = src.cast(pl.Float64, strict=False)
        exprs.append((value * mult if mult != 1.0 else value).alias(name))
    if not exprs:
        return conform(pl.DataFrame({"iteration": pl.Series([], dtype=pl.Int64)}))
    _name_overflow(path, table, lines, overflow, diag)
    kinds = _row_kinds(table)
    out = table.select(*exprs, (pl.any_horizontal(*partial) if partial else pl.lit(False)).alias(PARTIAL_FLAG))
    if kinds is not None:
        out = out.with_columns(kinds.alias("kind"))
    if "iteration" not in out.columns and "_wandb_step" in out.columns:
        out = out.rename({"_wandb_step": "iteration"})
    elif "_wandb_step" in out.columns:
        out = out.rename({"_wandb_step": "wandb_step"})
    if "_timestamp" in out.columns:
        out = out.with_columns(pl.from_epoch((pl.col("_timestamp") * 1e6).cast(pl.Int64, strict=False),
                                             time_unit="us").alias("timestamp")).drop("_timestamp")
    out = out.with_columns(lines.alias("line"))
    out = _negative_steps(path, out, diag)
    out = check_int_columns(out).with_columns(
        pl.lit(FORMAT).alias("framework"), pl.lit(None, pl.Utf8).alias("rank_label"))
    diag.saw(FORMAT, out.height)
    out = conform(out)
    return out.with_columns((pl.lit(file_idx * FILE_SCALE, pl.Int64) + pl.col("line") * SUB_SCALE).alias(ORD))


def _header_oddities(path: Path, text: str, table: pl.DataFrame, diag) -> pl.DataFrame:
    """A CSV header with an empty name (its column dropped) or a name given twice (the repeats kept as
    extras, ``<name>_extra``): each named in a note, never taken silently."""
    import csv
    import io

    try:
        header = next(csv.reader(io.StringIO(text.split("\n", 1)[0])))
    except (StopIteration, csv.Error):
        return table
    names = [h.strip() for h in header]
    empty = [i + 1 for i, h in enumerate(names) if not h]
    if empty:
        cols = [c for i, c in enumerate(table.columns) if i < len(names) and not names[i]]
        n = sum(table.get_column(c).drop_nulls().str.strip_chars().ne("").sum() for c in cols)
        diag.note(f"{path}:1: the header has {len(empty)} column(s) without a name (column "
                  f"{', '.join(map(str, empty[:5]))}): their {n} value(s) dropped")
        table = table.drop(cols)
    seen: dict[str, int] = {}
    for h in names:
        if h:
            seen[h] = seen.get(h, 0) + 1
    dups = {h: n for h, n in seen.items() if n > 1}
    if dups:
        renames = {}
        for c in table.columns:
            base, sep, tail = c.rpartition("_duplicated_")
            if sep and tail.isdigit() and base in dups:
                renames[c] = f"{base}\x00dup{tail}"
        table = table.rename(renames)
        for h, n in dups.items():
            diag.note(f"{path}:1: the header names {h!r} {n} times: the first column is read as {h!r}, the other "
                      f"{n - 1} kept as extra column(s) ({snake_case(h)}_extra...)")
    return table


def _name_overflow(path: Path, table: pl.DataFrame, lines: pl.Series, overflow: list, diag) -> None:
    """A note per column holding numbers beyond float64 (read as null, the rows partial)."""
    if not overflow:
        return
    flags = table.select([o.alias(f"o{i}") for i, (_, o) in enumerate(overflow)])
    for i, (col, _) in enumerate(overflow):
        hit = flags.get_column(f"o{i}").fill_null(False)
        n = int(hit.sum())
        if n:
            first = int(lines.filter(hit)[0])
            diag.note(f"{path}:{first}: {n} value(s) of {col.split(chr(0))[0]!r} overflow float64 (e.g. "
                      f"{table.get_column(col).filter(hit)[0][:40]!r}): read as null, the row(s) partial")


def _row_kinds(table: pl.DataFrame) -> pl.Series | None:
    """The kind of each history row (``vocab.record_kind`` of its set keys): W&B logs evaluations
    (``eval/loss`` only) and the end-of-run summary (``train/train_runtime``) as rows of their own."""
    from .vocab import record_kind

    keys = [c for c in table.columns if c != "_line"]
    if not keys or not table.height:
        return None
    set_cols = table.select([(pl.col(c).is_not_null() & (pl.col(c).cast(pl.Utf8).str.strip_chars() != ""))
                             .alias(str(i)) for i, c in enumerate(keys)])
    names = [(k.split(" - ", 1)[1] if " - " in k and k not in KEY_MAP else k).split("\x00")[0] for k in keys]
    # a row's kind depends only on which keys it sets: one decision per distinct pattern
    pattern = set_cols.select(pl.concat_str([pl.col(str(i)).cast(pl.UInt8).cast(pl.Utf8)
                                             for i in range(len(keys))]).alias("p")).get_column("p")
    kinds = {p: record_kind(n.removeprefix("train/") if n.startswith("train/train_") else n
                            for n, bit in zip(names, p) if bit == "1")
             for p in pattern.unique().to_list() if p is not None}
    kinds = {p: (k if k != "other" else "train") for p, k in kinds.items()}  # a row of counters: as before
    if all(k == "train" for k in kinds.values()):
        return None
    return pattern.replace_strict(kinds, default="train", return_dtype=pl.Utf8).cast(KIND_DTYPE)


def _negative_steps(path: Path, out: pl.DataFrame, diag) -> pl.DataFrame:
    """Rows whose step (``_step`` / ``Step`` / ``train/global_step``) is negative: no W&B step is; dropped,
    with a note naming how many and the first line."""
    if "iteration" not in out.columns:
        return out
    neg = (out.get_column("iteration").cast(pl.Float64, strict=False) < 0).fill_null(False)
    n = int(neg.sum())
    if not n:
        return out
    first = int(out.get_column("line").filter(neg)[0])
    diag.note(f"{path}:{first}: {n} row(s) with a negative step (W&B steps start at 0): dropped")
    return out.filter(~neg)


register(LogFormat(
    name=FORMAT,
    source="Weights & Biases run history: a chart panel's CSV export, `run.history()` / `scan_history()` dumps as "
           "CSV, JSON lines or Parquet",
    example='{"_step": 10, "_runtime": 25.1, "_timestamp": 1717236000.5, "train/loss": 2.31, '
            '"throughput/tflops/device": 401.2, "iteration-time": 2.5, "perf/mfu/actor": 0.31}',
    notes="`iteration` = `train/global_step` if logged, else `_step` / `Step`; keys mapped like TensorBoard tags and "
          "veRL keys (`iteration-time` s, `throughput/tflops/device`, `train/loss`, `perf/mfu/actor` fraction); "
          "`_runtime` → `runtime_s`, `_timestamp` → `timestamp`; a panel export's `<run> - ` prefix is removed and "
          "`__MIN`/`__MAX` dropped; `run.history()` is sampled by W&B (500 rows by default)",
    example_suffix=".jsonl",
    order=30,
    sniff=sniff,
    read=read,
))
