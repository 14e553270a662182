"""TensorBoard event files through the optional ``tensorboard`` extra (tbparse, imported lazily).

Tags are mapped to the core columns; duplicates from restarts are resolved by keeping the latest
``wall_time`` per (tag, step), as NVIDIA/cloudai does.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl

from ...remote import local_copy, open_binary
from ...errors import InputError
from ...extras import install_hint
from .diagnostics import Diagnostics
from .formats import LogFormat, register
from .schema import check_int_columns, conform, snake_case
from .segments import FILE_SCALE

TAG_MAP = {
    "iteration-time": ("elapsed_s", 1.0),
    "lm loss": ("loss", 1.0),
    "throughput": ("tflops_per_gpu_logged", 1.0),
    "throughput/tflops/device": ("tflops_per_gpu_logged", 1.0),
    "learning-rate": ("lr", 1.0),
    "grad-norm": ("grad_norm", 1.0),
    "batch-size": ("global_batch_size", 1.0),
    "reduced_train_loss": ("loss", 1.0),
    "train_step_timing in s": ("elapsed_s", 1.0),
    "TFLOPS_per_GPU": ("tflops_per_gpu_logged", 1.0),
    "lr": ("lr", 1.0),
    "loss_metrics/global_avg_loss": ("loss", 1.0),
    "grad_norm": ("grad_norm", 1.0),
    "throughput(tps)": ("tokens_per_s", 1.0),
    "tflops": ("tflops_per_gpu_logged", 1.0),
    "mfu(%)": ("mfu_logged", 0.01),
    "time_metrics/end_to_end(s)": ("elapsed_s", 1.0),
    "train/loss": ("loss", 1.0),
    "train/learning_rate": ("lr", 1.0),
    "train/grad_norm": ("grad_norm", 1.0),
}


#: Event-file bytes whose record payloads are CRC-checked (pure-Python CRC32C, ~5 MB/s); beyond it
#: only the record framing and the length CRCs are checked (and a note says so).
DATA_CRC_BYTES = 32 << 20


def validate_event_file(path: Path, diag: Diagnostics | None = None) -> int:
    """Walk the TFRecord framing of one event file (``uint64 length, masked CRC32C of it, payload,
    masked CRC32C of the payload``). A truncated record or a CRC mismatch raises ``InputError``
    naming the record and byte offset: TensorBoard's own reader stops at such a record with a log
    warning, which would silently truncate the run. Returns the number of records."""
    import struct

    from tensorboard.compat.tensorflow_stub.pywrap_tensorflow import masked_crc32c

    from ...errors import InputError

    check_data = path.stat().st_size <= DATA_CRC_BYTES
    if not check_data and diag is not None:
        diag.note(f"{path}: larger than {DATA_CRC_BYTES >> 20} MiB, only record framing and length checksums verified")
    n = 0
    with open_binary(path) as fh:
        while True:
            offset = fh.tell()
            header = fh.read(12)
            if not header:
                return n
            if len(header) < 12:
                raise InputError(f"truncated event record {n + 1} at byte {offset} (corrupt or still being written)",
                                 source=str(path))
            (length,), (len_crc,) = struct.unpack("<Q", header[:8]), struct.unpack("<I", header[8:])
            if masked_crc32c(header[:8]) != len_crc:
                raise InputError(f"event record {n + 1} at byte {offset}: length checksum mismatch (corrupt file)",
                                 source=str(path))
            payload = fh.read(length)
            footer = fh.read(4)
            if len(payload) < length or len(footer) < 4:
                raise InputError(f"truncated event record {n + 1} at byte {offset} (corrupt or still being written)",
                                 source=str(path))
            if check_data and masked_crc32c(payload) != struct.unpack("<I", footer)[0]:
                raise InputError(f"event record {n + 1} at byte {offset}: data checksum mismatch (corrupt file)",
                                 source=str(path))
            n += 1


def parse_tensorboard(path: Path, ord_base: int, diag: Diagnostics) -> pl.DataFrame:
    try:
        from tbparse import SummaryReader
    except ImportError as exc:  # optional extra
        raise InputError(
            f"{path}: reading TensorBoard event files needs the optional extra: {install_hint('tensorboard')}"
        ) from exc
    files = sorted(p for p in path.iterdir() if p.is_file() and "tfevents" in p.name) if path.is_dir() else [path]
    for f in files:
        validate_event_file(f, diag)
    with local_copy(path) as local:  # tbparse reads local files: a URL's event files are copied for the read
        scalars = SummaryReader(str(local), pivot=False, extra_columns={"wall_time"}).scalars
    if scalars is None or len(scalars) == 0:
        return conform(pl.DataFrame({"iteration": pl.Series([], dtype=pl.Int64)}))
    long = pl.from_pandas(scalars[["step", "tag", "value", "wall_time"]])
    diag.lines_read += long.height
    before = long.height
    long = long.sort("wall_time").unique(subset=["tag", "step"], keep="last")
    diag.duplicates += before - long.height
    names = {tag: TAG_MAP.get(tag, (snake_case(tag), 1.0)) for tag in long.get_column("tag").unique().to_list()}
    long = long.with_columns(
        pl.col("tag").replace_strict({t: n for t, (n, _) in names.items()}).alias("name"),
        (pl.col("value") * pl.col("tag").replace_strict({t: m for t, (_, m) in names.items()}, return_dtype=pl.Float64)).alias("value"),
    )
    kinds = _step_kinds(long)
    wide = long.pivot(on="name", index="step", values="value", aggregate_function="first").sort("step")
    if kinds is not None:
        wide = wide.join(kinds, on="step", how="left")
    times = long.group_by("step").agg(pl.col("wall_time").max().alias("_wt"))
    wide = wide.join(times, on="step", how="left").sort("step")
    wide = wide.with_columns(
        pl.col("step").cast(pl.Int64).alias("iteration"),
        pl.from_epoch((pl.col("_wt") * 1e6).cast(pl.Int64), time_unit="us").alias("timestamp"),
        pl.lit("tensorboard").alias("framework"),
        pl.lit(str(path)).alias("file"),
        pl.lit(None, pl.Utf8).alias("rank_label"),
        pl.int_range(1, pl.len() + 1, dtype=pl.Int64).alias("line"),
    ).drop("step", "_wt")
    diag.saw("tensorboard", wide.height)
    out = conform(check_int_columns(wide))
    return out.with_columns((pl.lit(ord_base, pl.Int64) + pl.col("line") * 1000).alias("_ord"))


def _step_kinds(long: pl.DataFrame) -> pl.DataFrame | None:
    """(step, kind) from the tags logged at each step (``vocab.record_kind``): a step holding only
    evaluation tags (``eval/loss`` at step 0) is an evaluation, one with an end-of-run tag
    (``train/train_runtime``) a summary; None when every step is a training iteration."""
    from .schema import KIND_DTYPE
    from .vocab import record_kind

    tags = long.get_column("tag").unique().to_list()
    cls = {t: record_kind([t.removeprefix("train/") if t.startswith("train/train_") else t]) for t in tags}
    if all(k == "train" for k in cls.values()):
        return None
    c = pl.col("tag").replace_strict(cls, return_dtype=pl.Utf8)
    per = long.group_by("step").agg((c == "summary").any().alias("s"), (c == "train").any().alias("t"),
                                     (c == "eval").any().alias("e"))
    kind = (pl.when(pl.col("s")).then(pl.lit("summary")).when(pl.col("t")).then(pl.lit("train"))
            .when(pl.col("e")).then(pl.lit("eval")).otherwise(pl.lit("other")))
    return per.select("step", kind.cast(KIND_DTYPE).alias("kind"))


# ---- registration ------------------------------------------------------------------------------

def is_tensorboard(path: Path) -> bool:
    """An event file, or a folder holding event files directly (never a search of the whole tree)."""
    if path.is_dir():
        return any(p.name.startswith("events.out.tfevents") for p in path.iterdir() if p.is_file())
    return "tfevents" in path.name


register(LogFormat(
    name="tensorboard",
    source="TensorBoard event files or directories, via the optional `tensorboard` extra (tbparse, imported lazily)",
    example="",
    notes="binary (no example line); duplicates per (tag, step) resolved by latest `wall_time`; `line` is the row "
          "ordinal; tags mapped as in `TAG_MAP` (`iteration-time`, `lm loss`, `throughput/tflops/device`, ...)",
    order=10,
    sniff=is_tensorboard,
    read=lambda path, file_idx, diag: parse_tensorboard(path, file_idx * FILE_SCALE, diag),
))
