"""Per-rank timing lines of training logs: Megatron timers, straggler detectors, rank-prefixed steps.

Extracted shapes (all vectorised polars regex over the log's lines; every matched line is counted):

* Megatron timers (``megatron/core/timers.py``, ``--timing-log-option minmax|max``), printed after
  an iteration line, values in ms per iteration (normalised by the log interval)::

      (min, max) time across ranks (ms):
          forward-backward ...............................: (2283.43, 2283.81)
      max time across ranks (ms):
          optimizer ......................................: 40.10

  also inline (``... [ t 1/1, p 1/1 ] (min, max) time across ranks (ms): save-checkpoint ....: (a, b)``).
  A block is attached to the last iteration line above it; blocks before the first iteration
  (setup timers) have no iteration and are counted apart.
* Megatron ``StragglerDetector`` (``--log-straggler``) report lines::

      | MnRtt/Rnk: 3453.08ms/8 | MxRtt/Rnk: 3468.20ms/0 | ... | MnEtpt/Rnk: 296.02TF/0 | MxEtpt/Rnk: 297.32TF/8

* NVIDIA Resiliency Extension straggler-detection reports (NeMo ``StragglerDetectionCallback``)::

      GPU relative performance:
       Worst performing 5/512 ranks:
        Rank=76 Node=h100-001-253-012 Score=0.94

* Rank-prefixed iteration lines, when every rank prints (``63: `` srun prefixes give the global
  rank; ``[default7]:`` torchrun prefixes a per-node local rank)::

      63:  [2025-09-14 08:02:37] iteration  5/ 200 | ... | elapsed time per iteration (ms): 2728.9 | ...
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable

import polars as pl

from ...remote import as_path
from .reader import line_frames

__all__ = ["RankTiming", "TimingCollector", "extract_rank_timing", "read_rank_timing"]

_PREFIX = r"^\s*(?:(?P<srun>\d+): |\[(?:[A-Za-z_]*?)(?P<torchrun>\d+)\]:)?"
_ITER = r"\biteration\s+(\d+)\s*/\s*\d+"
_ELAPSED = r"elapsed time per iteration \(ms\):\s*([\d.]+)"
_DETECTOR_FIELD = r"(Mn|Mx)(\w+)/Rnk:\s*(-?[\d.]+)([A-Za-z%]*)/(\d+)"
_NVRX_KIND = r"GPU (relative|individual) performance:"
_NVRX_GROUP = r"(Worst|Best) performing \d+/\d+ ranks:"
_NVRX_RANK = r"Rank=(\d+)\s+Node=(\S+)\s+Score=(-?[\d.]+)"
_ANY = "|".join(f"(?:{p})" for p in (r"\biteration\s", r"time across ranks", r"\.: ", r"MnRtt/Rnk:",
                                      r" performance:", r" performing ", r"Score="))
#: The literals of ``_ANY`` other than the iteration: a line holding one can be (or change the state
#: of) a timer, detector or NVRx line. Every test of `extract_rank_timing` but the iteration regex is
#: one of these literals (or a longer string containing one).
_STATE_LITERALS = ["time across ranks", ".: ", "MnRtt/Rnk:", " performance:", " performing ", "Score="]
#: (as one regex alternation: measured ~6x faster than ``str.contains_any`` here)
_STATE_RE = "|".join(re.escape(lit) for lit in _STATE_LITERALS)
#: An iteration number that may not fit Int64 (then `_iter_expr` is null although `_ITER` matches).
_ITER_LONG = r"\biteration\s+\d{19}"
#: A line that `_PREFIX` gives a rank (srun ``N: `` or torchrun ``[name N]:``), without captures.
_RANKED = r"^\s*(?:\d+: |\[[A-Za-z_]*?\d+\]:)"
_STEP_LITERAL = "elapsed time per iteration (ms):"


@dataclass
class RankTiming:
    """Frames of per-rank timing facts (empty frames when a log has none) and line counts."""

    timers: pl.DataFrame  # file, line, iteration (null: before training), timer, min_ms, max_ms (min null: max-only)
    detector: pl.DataFrame  # file, line, iteration, metric, unit, min_value, min_rank, max_value, max_rank
    nvrx: pl.DataFrame  # file, line, kind (relative|individual), group (worst|best), rank, node, score
    rank_steps: pl.DataFrame  # file, line, rank, rank_kind (global|local), iteration, elapsed_ms
    counts: dict = field(default_factory=dict)

    @property
    def empty(self) -> bool:
        return not (self.timers.height or self.detector.height or self.nvrx.height or self.rank_steps.height)


def _lit(text: pl.Expr, needle: str) -> pl.Expr:
    return text.str.contains(needle, literal=True)


def _timer_rows(cand: pl.DataFrame, sep: str, minmax: bool) -> pl.DataFrame:
    """``name ....: (min, max)`` / ``name ....: max`` by literal splits (no regex per line): the name is
    the part before the dot leader, the values must parse as numbers, anything else is not a timer."""
    parts = pl.col("_body").str.split_exact(sep, 1)
    left, right = parts.struct.field("field_0"), parts.struct.field("field_1")
    name = left.str.strip_chars_end(". ").str.strip_chars()
    out = cand.with_columns(name.alias("timer"), (left.str.ends_with(".") & left.str.strip_chars_end(".").str.ends_with(" ")).alias("_lead"),
                            right.str.strip_chars().str.strip_chars_end(")").alias("_v"))
    if minmax:
        vals = pl.col("_v").str.split_exact(",", 1)
        out = out.with_columns(vals.struct.field("field_0").str.strip_chars().cast(pl.Float64, strict=False)
                               .alias("min_ms"),
                               vals.struct.field("field_1").str.strip_chars().cast(pl.Float64, strict=False)
                               .alias("max_ms"))
        ok = pl.col("min_ms").is_not_null() & pl.col("max_ms").is_not_null()
    else:
        out = out.with_columns(pl.lit(None, dtype=pl.Float64).alias("min_ms"),
                               pl.col("_v").cast(pl.Float64, strict=False).alias("max_ms"))
        ok = pl.col("max_ms").is_not_null()
    return (out.filter(ok & pl.col("_lead") & (pl.col("timer").str.len_chars() > 0))
            .select("file", "line", "iteration", "timer", "min_ms", "max_ms"))


def _rank_steps(m: pl.DataFrame) -> pl.DataFrame:
    """Rank-prefixed iteration lines of ``m`` (``file, line, text, _iter``), row by row."""
    text = pl.col("text")
    prefix = text.str.extract_groups(_PREFIX)
    return (m.filter(pl.col("_iter").is_not_null() & _lit(text, _STEP_LITERAL) & text.str.contains(_RANKED))
            .with_columns(prefix.struct.field("srun").cast(pl.Int64, strict=False).alias("_srun"),
                          prefix.struct.field("torchrun").cast(pl.Int64, strict=False).alias("_local"))
            .filter(pl.col("_srun").is_not_null() | pl.col("_local").is_not_null())
            .select("file", "line", pl.coalesce("_srun", "_local").alias("rank"),
                    pl.when(pl.col("_srun").is_not_null()).then(pl.lit("global")).otherwise(pl.lit("local"))
                    .alias("rank_kind"),
                    pl.col("_iter").alias("iteration"),
                    text.str.extract(_ELAPSED, 1).cast(pl.Float64).alias("elapsed_ms")))


def _iter_expr() -> pl.Expr:
    return pl.col("text").str.extract(_ITER, 1).cast(pl.Int64, strict=False)


def extract_rank_timing(lines: pl.DataFrame, rank_steps: pl.DataFrame | None = None) -> RankTiming:
    """From a frame of ``file, line, text`` (all lines of the logs, in order) to `RankTiming`.

    One regex over all lines (the iteration number, forward-filled per file); every other pattern
    runs only on the few lines a literal pre-filter keeps. ``rank_steps``: the rank-prefixed
    iteration lines already extracted (`TimingCollector` does it frame by frame, with `_rank_steps`),
    instead of extracting them from ``lines``.
    """
    if lines.height == 0:
        lines = pl.DataFrame(schema={"file": pl.Utf8, "line": pl.Int64, "text": pl.Utf8})
    text = pl.col("text")
    m = lines.with_columns(_iter_expr().alias("_iter")).with_columns(
        pl.col("_iter").forward_fill().over("file").alias("iteration"))
    # timers: block state (minmax / max / after an iteration line) forward-filled over the candidate lines
    header = _lit(text, "time across ranks (ms):")
    cand = m.filter(header | _lit(text, ".: ") | pl.col("_iter").is_not_null()).with_columns(
        pl.when(header & _lit(text, "(min, max)")).then(pl.lit("minmax"))
        .when(header).then(pl.lit("max"))
        .when(pl.col("_iter").is_not_null()).then(pl.lit("iteration")).alias("_block"))
    cand = cand.with_columns(pl.col("_block").forward_fill().over("file").alias("_in")).filter(_lit(text, ".: "))
    # the timer text after an inline header ("... (min, max) time across ranks (ms): name ....: (a, b)")
    inline = _lit(text, "time across ranks (ms):")
    cand = pl.concat([cand.filter(~inline).with_columns(text.alias("_body")),
                      cand.filter(inline).with_columns(text.str.split("time across ranks (ms):").list.last()
                                                       .alias("_body"))])
    mm = _timer_rows(cand.filter(pl.col("_in") == "minmax"), ".: (", minmax=True)
    mx = _timer_rows(cand.filter(pl.col("_in") == "max"), ".: ", minmax=False)
    timers = pl.concat([mm, mx]).sort("file", "line")
    det = (m.filter(_lit(text, "MnRtt/Rnk:"))
           .with_columns(text.str.extract_all(_DETECTOR_FIELD).alias("_f")).explode("_f")
           .with_columns(pl.col("_f").str.extract_groups(_DETECTOR_FIELD).alias("_g"))
           .select("file", "line", "iteration", pl.col("_g").struct.field("1").alias("_mnmx"),
                   pl.col("_g").struct.field("2").alias("metric"), pl.col("_g").struct.field("4").alias("unit"),
                   pl.col("_g").struct.field("3").cast(pl.Float64).alias("value"),
                   pl.col("_g").struct.field("5").cast(pl.Int64).alias("rank")))
    detector = (det.filter(pl.col("_mnmx") == "Mn").drop("_mnmx").rename({"value": "min_value", "rank": "min_rank"})
                .join(det.filter(pl.col("_mnmx") == "Mx").select("file", "line", "metric",
                                                                 pl.col("value").alias("max_value"),
                                                                 pl.col("rank").alias("max_rank")),
                      on=["file", "line", "metric"], how="left").sort("file", "line"))
    # NVRx: its report lines are contiguous, so kind / group forward-fill within the candidate lines
    nv = (m.filter(_lit(text, " performance:") | _lit(text, " performing ") | _lit(text, "Score="))
          .with_columns(text.str.extract(_NVRX_KIND, 1).alias("_k"),
                        text.str.extract(_NVRX_GROUP, 1).str.to_lowercase().alias("_gr"))
          .with_columns(pl.col("_k").forward_fill().over("file"), pl.col("_gr").forward_fill().over("file")))
    nvrx = (nv.filter(text.str.contains(_NVRX_RANK) & pl.col("_k").is_not_null())
            .with_columns(text.str.extract_groups(_NVRX_RANK).alias("_g"))
            .select("file", "line", pl.col("_k").alias("kind"), pl.col("_gr").alias("group"),
                    pl.col("_g").struct.field("1").cast(pl.Int64).alias("rank"),
                    pl.col("_g").struct.field("2").alias("node"),
                    pl.col("_g").struct.field("3").cast(pl.Float64).alias("score")))
    steps = _rank_steps(m) if rank_steps is None else rank_steps
    counts = {"timer_lines": timers.height, "timer_lines_before_training": int(timers["iteration"].null_count()),
              "straggler_detector_lines": int(detector["line"].n_unique()) if detector.height else 0,
              "nvrx_rank_lines": nvrx.height, "rank_prefixed_iteration_lines": steps.height}
    return RankTiming(timers, detector, nvrx, steps, counts)


def _is_text_log(path: Path) -> bool:
    name = path.name
    return path.is_file() and not name.startswith("events.out.tfevents") and not name.endswith((".json", ".jsonl"))


class TimingCollector:
    """`RankTiming` of text logs gathered frame by frame while they are read once (`parse_logs` feeds
    it the same frames it parses), with memory bounded by the timing facts, not the log size.

    Per frame, each line's iteration (``_ITER``) and the literals of ``_STATE_LITERALS`` are tested;
    rank-prefixed iteration lines become typed `rank_steps` rows at once (they depend on their own
    line only). Of the other lines only those that can matter to `extract_rank_timing` keep their
    text: every line holding a state literal, and an iteration line only when the next such-or-
    iteration line holds a state literal (or ends the frame). An iteration line followed by another
    iteration line is superseded there: the forward-filled iteration and the timer block state are
    the later line's on every line after it. So ``result()`` equals `extract_rank_timing` of all the
    lines (tests/ingest/test_logs_timers.py checks it, fuzzed) without keeping every iteration line.
    """

    def __init__(self) -> None:
        self._lines: list[pl.DataFrame] = []
        self._steps: list[pl.DataFrame] = []
        self._file: str | None = None

    @classmethod
    def merged(cls, parts: "list[TimingCollector | None]") -> "TimingCollector | None":
        """The collector of consecutive files (in order) from theirs; None if one is missing."""
        if any(part is None for part in parts):
            return None
        out = cls()
        for part in parts:
            out._lines += part._lines
            out._steps += part._steps
        return out

    def start_file(self, path: str | Path) -> None:
        self._file = str(path)

    def feed(self, frame: pl.DataFrame) -> None:
        """``frame``: consecutive lines (``line``, ``text``) of the current file, in order."""
        if not frame.height:
            return
        text = pl.col("text")
        m = (frame.select("line", "text", text.str.contains(_STATE_RE).alias("_state"),
                          text.str.contains(_ITER).alias("_it"))
             .filter(pl.col("_state") | pl.col("_it")))
        if not m.height:
            return
        risky = text.str.contains(_ITER_LONG) | (text.str.len_bytes() != text.str.len_chars())
        if m.select(risky.any()).item():
            # a number of 19+ digits may not fit Int64, and ``\d`` also matches non-ASCII digits that
            # do not cast (the extracted iteration is then null although `_ITER` matches): exact test
            m = m.with_columns(_iter_expr().is_not_null().alias("_it")).filter(pl.col("_state") | pl.col("_it"))
        m = m.with_columns(pl.lit(self._file).alias("file"))
        # rank-prefixed iteration lines: the (costly) extraction only on the lines that can be one
        steps = _rank_steps(m.filter(pl.col("_it") & _lit(text, _STEP_LITERAL) & text.str.contains(_RANKED))
                            .with_columns(_iter_expr().alias("_iter")))
        if steps.height:
            self._steps.append(steps)
        keep = pl.col("_state") | pl.col("_state").shift(-1).fill_null(True)
        kept = m.filter(keep)
        if kept.height:
            # a filtered string column is views into the whole frame's text buffers (rechunk keeps
            # them too): build new strings, or every frame's text stays alive (+700 MB measured on
            # the 726 MB benchmark log)
            self._lines.append(kept.select("file", "line", pl.concat_str([pl.col("text"), pl.lit("")])
                                           .alias("text")))

    def result(self) -> RankTiming:
        lines = pl.concat(self._lines) if self._lines else pl.DataFrame(
            schema={"file": pl.Utf8, "line": pl.Int64, "text": pl.Utf8})
        steps = pl.concat(self._steps) if self._steps else None
        if steps is None:
            empty = pl.DataFrame(schema={"file": pl.Utf8, "line": pl.Int64, "text": pl.Utf8,
                                         "_iter": pl.Int64})
            steps = _rank_steps(empty)
        return extract_rank_timing(lines, rank_steps=steps)


def is_text_log(path: Path) -> bool:
    """A file `read_rank_timing` reads: not TensorBoard events, not JSON / JSONL."""
    name = path.name
    return path.is_file() and not name.startswith("events.out.tfevents") and not name.endswith((".json", ".jsonl"))


_is_text_log = is_text_log  # (kept for callers of the old private name)


def read_rank_timing(paths: Iterable[str | Path]) -> RankTiming:
    """Read text logs (plain / .gz / .zst) and extract their per-rank timing lines.

    Lines are read in bounded frames (`reader.line_frames`) and reduced by a `TimingCollector`, so
    memory stays bounded by the timing facts, not the log size. `parse_logs` collects the same
    `RankTiming` during its own read (``ParseResult.rank_timing``): use that instead of reading the
    logs a second time.
    """
    collector = TimingCollector()
    for p in paths:
        path = as_path(p)
        if not is_text_log(path):
            continue
        collector.start_file(path)
        for frame in line_frames(path):
            collector.feed(frame)
    return collector.result()
