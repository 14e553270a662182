"""Column schema of the tidy iteration table and helpers to conform frames to it.

Units of the core columns (see docs/log-formats.md):

* ``elapsed_s``            seconds per iteration (interval mean where the framework averages)
* ``tflops_per_gpu_logged`` TFLOP/s per GPU exactly as the framework reported it (not recomputed)
* ``mfu_logged``           fraction 0..1 (percentages are divided by 100)
* ``tokens_per_s``         tokens per second per GPU as the framework reported it
* ``lr``                   learning rate; ``loss``/``grad_norm`` are unitless
* ``global_batch_size``, ``consumed_samples`` in samples; ``skipped_iterations``,
  ``nan_iterations`` are counts within the logging interval
"""

from __future__ import annotations

import re
import threading
from collections import Counter

import polars as pl

CORE_COLUMNS: tuple[str, ...] = (
    "framework",
    "file",
    "line",
    "rank_label",
    "segment",
    "iteration",
    "timestamp",
    "elapsed_s",
    "tflops_per_gpu_logged",
    "mfu_logged",
    "tokens_per_s",
    "loss",
    "lr",
    "grad_norm",
    "global_batch_size",
    "consumed_samples",
    "skipped_iterations",
    "nan_iterations",
)

CORE_SCHEMA: dict[str, pl.DataType] = {
    "framework": pl.Utf8(),
    "file": pl.Utf8(),
    "line": pl.Int64(),
    "rank_label": pl.Utf8(),
    "segment": pl.Int64(),
    "iteration": pl.Int64(),
    "timestamp": pl.Datetime("us"),
    "elapsed_s": pl.Float64(),
    "tflops_per_gpu_logged": pl.Float64(),
    "mfu_logged": pl.Float64(),
    "tokens_per_s": pl.Float64(),
    "loss": pl.Float64(),
    "lr": pl.Float64(),
    "grad_norm": pl.Float64(),
    "global_batch_size": pl.Int64(),
    "consumed_samples": pl.Int64(),
    "skipped_iterations": pl.Int64(),
    "nan_iterations": pl.Int64(),
}

#: Format names accepted by ``parse_logs(format=...)``: see ``formats.names()`` (the registry).

#: Columns the parser or its views add besides ``CORE_COLUMNS``; a log's own key never takes one.
INTERNAL_COLUMNS: frozenset[str] = frozenset({
    "copies", "rank_labels", "text", "first_in_segment", "train_iters", "_sub", "_ord", "_partial",
    "_unknown_keys", "_kind", "_canon", "_prefixed", "kind", "_generic",
})

#: What a record is (the ``kind`` column, on every row): a training iteration, an evaluation, an
#: end-of-run summary (HF ``train_runtime`` dict ...) or something else. Only ``train`` rows are
#: iterations (``ParseResult.iterations``); the others are kept in ``raw`` and shown, never counted
#: as steps, and never open a restart segment or take ``first_in_segment``.
KINDS: tuple[str, ...] = ("train", "eval", "summary", "other")
KIND_DTYPE = pl.Enum(KINDS)


def with_kind(df: pl.DataFrame) -> pl.DataFrame:
    """``df`` with a non-null ``kind`` column of ``KIND_DTYPE`` (missing or null -> ``train``)."""
    if "kind" not in df.columns:
        return df.with_columns(pl.lit("train", KIND_DTYPE).alias("kind"))
    col = df.get_column("kind")
    if col.dtype != KIND_DTYPE:
        return df.with_columns(pl.col("kind").cast(pl.Utf8).fill_null("train").cast(KIND_DTYPE))
    return df.with_columns(pl.col("kind").fill_null("train")) if col.null_count() else df


def is_train(df: pl.DataFrame) -> bool:
    """True when every row of ``df`` is a training iteration (or ``df`` has no ``kind``)."""
    if "kind" not in df.columns or not df.height:
        return True
    return not bool((df.get_column("kind").to_physical() != 0).any())
#: Core columns stored as Int64: a value that is not an exact integer becomes null (partial).
INT_COLUMNS: tuple[str, ...] = tuple(c for c in CORE_COLUMNS if CORE_SCHEMA[c] == pl.Int64() and c not in ("line", "segment"))


def extra_name(name: str, taken, reserved=frozenset()) -> str:
    """A column name for a log's own (unmapped) key: ``name`` unless that is a core/internal column,
    in ``reserved`` (the format's mapped outputs) or already ``taken`` by another spelling; then
    ``name_extra``, ``name_extra2``, ... Callers report the rename (an unknown key never overwrites
    or nulls a known column)."""
    if name not in CORE_SCHEMA and name not in INTERNAL_COLUMNS and name not in reserved and name not in taken:
        return name
    base = f"{name}_extra"
    cand, k = base, 1
    while cand in taken or cand in CORE_SCHEMA or cand in reserved:
        k += 1
        if k > _MAX_SPELLINGS:  # the same key over and over: the first value stays, the rest is said
            note_rename(name, f"{base}{_MAX_SPELLINGS} (further repeats dropped)")
            return base
        cand = f"{base}{k}"
    note_rename(name, cand)
    return cand


#: Distinct spellings of one column name kept per record; beyond it repeats are dropped (noted).
_MAX_SPELLINGS = 9


_renames = threading.local()


def note_rename(name: str, new: str) -> None:
    """Remember that a log key meant to become column ``name`` was stored as ``new``."""
    if not hasattr(_renames, "counts"):
        _renames.counts = Counter()
    _renames.counts[(name, new)] += 1


def note_text(text: str) -> None:
    """Remember a note for the file being parsed (drained with the renames)."""
    if not hasattr(_renames, "texts"):
        _renames.texts = []
    if text not in _renames.texts:
        _renames.texts.append(text)


def drain_renames() -> list[str]:
    """Notes for the renames (and ``note_text`` notes) since the last call (this thread), e.g. for one file."""
    texts = getattr(_renames, "texts", None) or []
    _renames.texts = []
    counts = getattr(_renames, "counts", None)
    if not counts:
        return texts
    _renames.counts = Counter()
    by_old: dict[str, list[tuple[str, int]]] = {}
    for (old, new), n in sorted(counts.items()):
        by_old.setdefault(old, []).append((new, n))
    return texts + [
        f"a log key that would be column {old!r} (a known or already used column) was kept as "
        f"{', '.join(repr(new) for new, _ in news[:5])}{' ...' if len(news) > 5 else ''} "
        f"({sum(n for _, n in news)} occurrence(s)); the known column is unchanged"
        for old, news in by_old.items()]


def check_int_columns(df: pl.DataFrame) -> pl.DataFrame:
    """Integer core columns given as floats: values that are not exact integers within Int64
    (``nan``, ``inf``, ``1.5``, ``1234.5``, ``1e30``) become null and flag the row ``_partial``
    (OR-ed into an existing flag). Never rounds. Columns without such a value are left as they are
    (no copy: the usual case of a big log)."""
    bad_of = {}
    for name in INT_COLUMNS:
        if name not in df.columns or not df.schema[name].is_float():
            continue
        x = pl.col(name)
        bad_of[name] = (x.is_not_null() & (x.is_nan() | x.is_infinite() | (x != x.floor()) | (x.abs() > 9.2e18))
                        ).fill_null(False)
    if not bad_of:
        return df
    counts = df.select([bad.sum().alias(name) for name, bad in bad_of.items()]).row(0, named=True)
    bad_exprs = [bad_of[name] for name, n in counts.items() if n]
    fixes = [pl.when(bad_of[name]).then(None).otherwise(pl.col(name)).alias(name) for name, n in counts.items() if n]
    if not bad_exprs:  # nothing to fix: the flag as the full check would leave it (nulls -> False)
        if PARTIAL_FLAG not in df.columns:
            return df.with_columns(pl.lit(False).alias(PARTIAL_FLAG))
        return df.with_columns(pl.col(PARTIAL_FLAG).fill_null(False)) if df[PARTIAL_FLAG].null_count() else df
    any_bad = pl.any_horizontal(*bad_exprs)
    flag = (pl.col(PARTIAL_FLAG).fill_null(False) | any_bad) if PARTIAL_FLAG in df.columns else any_bad
    return df.with_columns(flag.alias(PARTIAL_FLAG)).with_columns(fixes)


#: Internal column carrying per-record parse problems (e.g. truncated field); dropped before output.
PARTIAL_FLAG = "_partial"

_SNAKE_RE = re.compile(r"[^0-9a-zA-Z]+")


def snake_case(key: str) -> str:
    """``'energy per GPU (J/iter/GPU)'`` -> ``'energy_per_gpu_j_iter_gpu'``; ``'memory(GiB)'`` -> ``'memory_gib'``."""
    out = _SNAKE_RE.sub("_", key.strip()).strip("_").lower()
    if not out:
        return "field"
    if out[0].isdigit():
        out = "f_" + out
    return out


def empty_frame() -> pl.DataFrame:
    return pl.DataFrame(schema=CORE_SCHEMA)


def conform(df: pl.DataFrame) -> pl.DataFrame:
    """Add missing core columns as nulls, cast them to the core dtypes, core columns first.

    Extra columns (everything not in CORE_COLUMNS) are cast to Float64 when numeric so that
    frames from different formats concatenate with ``how="diagonal_relaxed"``.
    """
    exprs = []
    for name in CORE_COLUMNS:
        dtype = CORE_SCHEMA[name]
        if name in df.columns:
            col = pl.col(name)
            if df.schema[name] != dtype:
                col = col.cast(dtype, strict=False)
            exprs.append(col.alias(name))
        else:
            exprs.append(pl.lit(None, dtype=dtype).alias(name))
    extras = [c for c in df.columns if c not in CORE_SCHEMA]
    for name in extras:
        dt = df.schema[name]
        if dt.is_numeric() and dt != pl.Float64:
            exprs.append(pl.col(name).cast(pl.Float64))
        else:
            exprs.append(pl.col(name))
    return df.select(exprs)


def records_frame(records: list[dict]) -> pl.DataFrame:
    """Records (dicts of column -> value) -> a conformed frame; ``timestamp`` strings are parsed.
    Integer columns that are not exact integers are nulled and flagged (``check_int_columns``)."""
    df = check_int_columns(pl.from_dicts(records, infer_schema_length=None))
    if "kind" in df.columns:
        df = df.with_columns(pl.col("kind").cast(pl.Utf8).fill_null("train").cast(KIND_DTYPE))
    if "timestamp" in df.columns and df.schema["timestamp"] == pl.Utf8:
        df = df.with_columns(pl.col("timestamp").str.to_datetime("%Y-%m-%d %H:%M:%S%.f", strict=False, time_unit="us"))
    return conform(df)


def concat_records(frames: list[pl.DataFrame]) -> pl.DataFrame:
    """Concatenate conformed frames (different extra columns allowed), keeping core order."""
    frames = [f for f in frames if f.height]
    if not frames:
        return empty_frame()
    out = pl.concat([conform(f) for f in frames], how="diagonal_relaxed")
    extras = sorted(c for c in out.columns if c not in CORE_SCHEMA)
    return out.select([*CORE_COLUMNS, *extras])
