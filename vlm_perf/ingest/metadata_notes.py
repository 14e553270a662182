"""What the metadata reader tells about its input: `MetadataDiagnostics` (rows read, used, skipped by reason, the first
bad ``file:line``), the notes it adds (replayed rows, keys outside the schema, bounded statistics) and the bad-row
error.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

import polars as pl

from ..errors import SchemaError
from ..stats import DEFAULT_MERGE_SIZE
from .metadata_schema import SCHEMA


@dataclass
class MetadataDiagnostics:
    """What the reader saw; `to_dict()` is JSON-serialisable."""

    files: list[str] = field(default_factory=list)
    merge_size: int = DEFAULT_MERGE_SIZE
    window_side: int | None = None
    rows_read: int = 0
    rows_used: int = 0
    rows_skipped: dict[str, int] = field(default_factory=dict)  # "field: reason" -> rows
    bad_lines: list[str] = field(default_factory=list)  # first MAX_BAD_LINES "file:line: field: reason"
    iterations: int = 0
    rows_preaggregated_lm: int = 0
    rows_preaggregated_vision: int = 0
    rows_padded_tokens_only: int = 0
    extra_keys: list[str] = field(default_factory=list)  # top-level keys outside schema v1 (first lines)
    rows_media_in_pixels: int = 0  # rows whose grids were derived from schema v2 image_sizes / video_sizes
    rows_duplicate: int = 0  # repeated (iteration, microbatch, dp_rank) rows dropped (last one kept)
    decompressed: list[str] = field(default_factory=list)  # compressed shards (streamed, never to disk)
    cleaned: list[str] = field(default_factory=list)  # shards with lines the fast engine could not parse
    # rows with images of several samples of unequal lengths and no images_per_sample: the text x vision sums are the
    # longest sample's bound (counted) and the shortest sample's value (the exact sum lies between); totals of the run
    #: rows of an encoder-decoder model (Florence-2) without decoder_lens: decoder length taken as the encoder's
    rows_decoder_assumed: int = 0
    rows_cross_bound: int = 0
    cross_bound_patches: int = 0
    cross_bound_patches_low: int = 0
    cross_bound_frames: int = 0
    cross_bound_frames_low: int = 0
    cross_total_patches: int = 0
    cross_total_frames: int = 0
    #: vision tokens per frame a cross-attention layer adds (Mllama: T CLS tokens per image); None: the model has no
    #: cross-attention layers (the text x vision sums are then read by nothing and the bound is not noted)
    cross_kv_tokens_per_frame: int | None = None
    #: the sliding window the FLOPs read (None: no windowed attention block). Pre-aggregated LM rows with lm_tokens_sq > W² count
    #: those layers as full causal: their rows, Σ lm_tokens_sq (counted), the least windowed Σ their aggregates allow,
    #: and the run's windowed Σ (lm_tokens_sq - lm_tokens_sq_beyond_window) as counted
    lm_window: int | None = None
    rows_window_bound: int = 0
    window_bound_counted: int = 0
    window_bound_least: int = 0
    window_total: int = 0
    notes: list[str] = field(default_factory=list)

    @property
    def rows_skipped_total(self) -> int:
        return sum(self.rows_skipped.values())

    def to_dict(self) -> dict[str, Any]:
        from dataclasses import asdict

        out = asdict(self)
        out["rows_skipped_total"] = self.rows_skipped_total
        return out


def replayed_iterations(per_iteration: pl.DataFrame) -> tuple[list[int], str | None]:
    """Iterations whose keyed rows must repeat a (microbatch, dp_rank) key, and a note.

    Pigeonhole: an iteration with more keyed rows than (rank span) x (microbatch-index span) holds a
    key twice, which is what re-recording a replayed iteration does. When ``microbatch`` does not
    number the microbatches (one value for several rows per rank in most iterations), nothing is
    flagged and the note says so. Rows missing either key are never dropped.
    """
    keyed = per_iteration.filter(pl.col("_keyed") > 0)
    if keyed.height == 0:
        return [], None
    ranks = keyed["_rank_max"] - keyed["_rank_min"] + 1
    indexes = keyed["_mb_max"] - keyed["_mb_min"] + 1
    several_per_rank = keyed["_keyed"].cast(pl.Int64) > ranks
    constant_index = several_per_rank & (indexes == 1)
    if several_per_rank.sum() * 2 > keyed.height and constant_index.sum() * 2 > several_per_rank.sum():
        return [], ("microbatch does not number the microbatches of an iteration (one value for several rows), so "
                    "rows a resumed job recorded twice cannot be told apart: none dropped")
    flagged = keyed.filter(keyed["_keyed"].cast(pl.Int64) > ranks * indexes)["iteration"]
    return sorted(flagged.unique().to_list()), None


def unknown_key_note(unknown: Mapping[str, int]) -> str | None:
    import difflib

    suspects = []
    for key in sorted(unknown):
        close = difflib.get_close_matches(key, list(SCHEMA), n=1, cutoff=0.6)
        if close:  # free-form extras (loss, sample ids, ...) are fine; a near-miss of a schema key is not
            suspects.append(f"{key!r} (did you mean {close[0]!r}?)")
    return f"keys outside schema v1 are ignored: {', '.join(suspects)}" if suspects else None


def finish_notes(diag: MetadataDiagnostics) -> None:
    """The count-based notes (appended after the pass, from the final counts)."""
    if diag.rows_media_in_pixels:
        diag.notes.append(f"{diag.rows_media_in_pixels} row(s) give media in pixels (schema v2): grids derived "
                          "with the model family's processor rule")
    if diag.rows_preaggregated_vision:
        diag.notes.append(
            f"{diag.rows_preaggregated_vision} row(s) carry pre-aggregated vision statistics: per-item sums are "
            "taken equal to per-frame sums (a lower bound for video), the image/video split is unknown (counted "
            "as images)"
            + (", and the window statistic falls back to the per-frame sum (an upper bound)"
               if diag.window_side else ""))
    if diag.rows_padded_tokens_only:
        diag.notes.append(
            f"{diag.rows_padded_tokens_only} row(s) give padded_tokens only: each is taken as `samples` (default 1) "
            "unpacked sequences of equal length (real-token and per-document statistics unknown)")
    if diag.rows_duplicate:
        diag.notes.append(
            f"{diag.rows_duplicate} repeated (iteration, microbatch, dp_rank) row(s) dropped, the last one kept "
            "(a resumed job re-recording replayed iterations); they are not counted twice")
    if diag.rows_preaggregated_lm:
        diag.notes.append(f"{diag.rows_preaggregated_lm} row(s) carry pre-aggregated LM statistics")
    if diag.rows_decoder_assumed:
        diag.notes.append(
            f"assumed: {diag.rows_decoder_assumed} row(s) of an encoder-decoder model give no decoder_lens: each "
            "sample's decoder (label) length is taken equal to its encoder length (neither exact nor a bound; "
            "docs/metadata-schema.md); record decoder_lens for the decoder's exact FLOPs")
    for note in (cross_bound_note(diag), window_bound_note(diag)):
        if note:
            diag.notes.append(note)


def cross_bound_note(diag: MetadataDiagnostics) -> str | None:
    """The named longest-sample bound of the cross-attention core (None without such rows or cross-attention)."""
    t = diag.cross_kv_tokens_per_frame
    if not diag.rows_cross_bound or t is None:
        return None
    hi = diag.cross_bound_patches + t * diag.cross_bound_frames
    lo = diag.cross_bound_patches_low + t * diag.cross_bound_frames_low
    total = diag.cross_total_patches + t * diag.cross_total_frames
    share = (hi - lo) / total if total else 0.0
    return (f"upper bound: {diag.rows_cross_bound} row(s) have images in several samples of unequal lengths and no "
            "images_per_sample, so the cross-attention core counts the longest sample's length x the row's vision "
            f"tokens (Σ S·V = {hi:,} there; the shortest sample gives {lo:,}, the exact value lies between): the "
            f"run's cross-attention core may be over-counted by up to {share:.1%}; record images_per_sample for the "
            "exact value")


def window_bound_note(diag: MetadataDiagnostics) -> str | None:
    """The named full-causal bound of the sliding-window layers on pre-aggregated LM rows (None without such rows)."""
    w = diag.lm_window
    if not diag.rows_window_bound or not w:
        return None
    hi, lo = diag.window_bound_counted, diag.window_bound_least
    share = (hi - lo) / diag.window_total if diag.window_total else 0.0
    return (f"upper bound: {diag.rows_window_bound} row(s) carry pre-aggregated LM statistics (no seq_lens), so the "
            f"sliding-window layers (window {w:,}) count them as full causal attention (Σ s² = {hi:,} there; the "
            f"least windowed Σ their lm_tokens / lm_sequences allow is {lo:,}, the exact value lies between): the "
            f"run's sliding-window attention core may be over-counted by up to {share:.1%}; record seq_lens for the "
            "exact value")


#: what a bad-row error adds: the library names no flag (the CLI adds its own, see `vlm_perf.cli`)
BAD_ROW_HINT = "fix the row, or skip bad rows: they are then counted and reported"


def bad_row_error(message: str, source: str | None = None) -> SchemaError:
    """The error for the first bad metadata row; ``skippable`` tells a caller a skip-bad-rows option applies."""
    err = SchemaError(f"{message} ({BAD_ROW_HINT})", source=source)
    err.skippable = True  # type: ignore[attr-defined]
    return err
