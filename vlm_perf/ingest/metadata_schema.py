"""Per-microbatch metadata, schemas v1 and v2: the explicit polars schema and the row expressions.

Schema v2 adds media in pixels (``image_sizes`` [[H, W], ...], ``video_sizes`` [[T, H, W], ...]) and
``image_tiles`` (tiles per image); `vlm_perf.ingest.metadata_media` turns them into grids with the
model family's own `MediaRule` before the expressions here run, so v1 rows are read exactly as before.

Everything here builds polars *expressions* (no I/O, no Python loop per row): the validity code of
a row and its `BatchStats` sufficient statistics. The grid arithmetic is
`vlm_perf.stats.vision.grid_row_stats`, evaluated on list columns (polars list arithmetic applies
it element-wise to every grid row of a microbatch at once); see ``docs/metadata-schema.md``.
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from ..stats import BatchStats, grid_row_stats
from ..stats.lm import beyond_chunks_sq, beyond_window_sq

SCHEMA_VERSION = 2  # the newest version written
SCHEMA_VERSIONS = (1, 2)  # versions this reader understands

_INT = pl.Int64
_INTS = pl.List(pl.Int64)
_GRIDS = pl.List(pl.List(pl.Int64))

#: The explicit schema handed to ``pl.scan_ndjson``. Keys not listed here are ignored.
SCHEMA: dict[str, pl.DataType] = {
    "schema_version": _INT,
    "iteration": _INT,
    "microbatch": _INT,
    "dp_rank": _INT,
    # raw per-microbatch fields
    "seq_lens": _INTS,
    "padded_tokens": _INT,
    "samples": _INT,
    "image_grid_thw": _GRIDS,
    "video_grid_thw": _GRIDS,
    # schema v2: media in pixels, converted to grids by the family's MediaRule
    "image_sizes": _GRIDS,
    "video_sizes": _GRIDS,
    "image_tiles": _INTS,
    # which sample (entry of seq_lens) each image belongs to: images per sample, in order
    "images_per_sample": _INTS,
    # schema v2: audio clips of the microbatch (one audio-encoder call), mel frames each (models with an audio encoder)
    "audio_frames": _INTS,
    # encoder-decoder LMs (Florence-2): the decoder (label) length of each sample, one per entry of seq_lens
    "decoder_lens": _INTS,
    # pre-aggregated fields (lossy; see the schema document)
    "lm_tokens": _INT,
    "lm_tokens_sq": _INT,
    "lm_sequences": _INT,
    "vision_patches": _INT,
    "vision_patches_sq": _INT,
    "vision_merged_tokens": _INT,
    "vision_frames": _INT,
    "vision_items": _INT,
}

INT_FIELDS = tuple(k for k, v in SCHEMA.items() if v == _INT)
INT_LIST_FIELDS = ("seq_lens", "image_tiles", "images_per_sample", "audio_frames", "decoder_lens")
GRID_FIELDS = ("image_grid_thw", "video_grid_thw", "image_sizes", "video_sizes")  # lists of int rows

#: Row codes: 0 = valid; every other code names the first rule a row breaks (field, message).
REASONS: dict[int, tuple[str, str]] = {
    1: ("iteration", "missing or negative"),
    2: ("microbatch", "negative"),
    3: ("dp_rank", "negative"),
    4: ("schema_version", "unsupported (this reader understands 1 and 2)"),
    5: ("seq_lens", "must be a non-empty list of positive integers"),
    6: ("samples", "must be a positive integer"),
    7: ("padded_tokens", "must be positive and >= sum(seq_lens) / lm_tokens"),
    8: ("image_grid_thw", "a grid row is not 3 integers [t, h, w]"),
    9: ("image_grid_thw", "t, h, w must be positive"),
    10: ("image_grid_thw", "h and w must be divisible by spatial_merge_size"),
    11: ("video_grid_thw", "a grid row is not 3 integers [t, h, w]"),
    12: ("video_grid_thw", "t, h, w must be positive"),
    13: ("video_grid_thw", "h and w must be divisible by spatial_merge_size"),
    14: ("lm_tokens", "need seq_lens, padded_tokens or lm_tokens+lm_tokens_sq (not seq_lens and lm_tokens both);"
                      " pre-aggregated values must be non-negative"),
    15: ("vision_patches", "pre-aggregated vision needs vision_patches, vision_patches_sq and vision_merged_tokens"
                           " together, non-negative, and no grids in the same row"),
    16: ("image_grid_thw", "a grid row exceeds the bound (t, h, w <= 2^20 and t*h*w <= 2^26 patches; beyond it the "
                           "squared statistics overflow Int64)"),
    17: ("video_grid_thw", "a grid row exceeds the bound (t, h, w <= 2^20 and t*h*w <= 2^26 patches; beyond it the "
                           "squared statistics overflow Int64)"),
    18: ("seq_lens", "a length exceeds 2^26 tokens (beyond it the squared statistics overflow Int64)"),
    19: ("padded_tokens", "exceeds 2^31 tokens (beyond it the squared statistics overflow Int64)"),
    # schema v2 (media in pixels); set by vlm_perf.ingest.metadata_media
    20: ("image_sizes", f"an entry is not 2 positive integers [H, W] (each <= {1 << 20} pixels)"),
    21: ("video_sizes", f"an entry is not 3 positive integers [T, H, W] (each <= {1 << 20})"),
    22: ("image_sizes", "give image_sizes or image_grid_thw in a row, not both"),
    23: ("video_sizes", "give video_sizes or video_grid_thw in a row, not both"),
    24: ("image_tiles", "must hold one positive integer per image (as many entries as image_sizes / image_grid_thw)"),
    25: ("image_tiles", "differs from the tiles the model family's processor rule derives for the image (check the "
                        "processor files given with the config)"),
    26: ("image_sizes", "media in pixels need a model whose family converts them (the config of a VLM family with a "
                        "pixel rule); give image_grid_thw instead"),
    27: ("video_sizes", "media in pixels need a model whose family converts them (the config of a VLM family with a "
                        "pixel rule); give video_grid_thw instead"),
    28: ("image_tiles", "given without image_sizes or image_grid_thw"),
    29: ("image_sizes", "the model family's processor rule rejects a size (e.g. Qwen-VL: aspect ratio over 200)"),
    30: ("video_sizes", "the model family's processor rule rejects a size (e.g. Qwen-VL: aspect ratio over 200)"),
    # metadata vs the model's config
    31: ("image_grid_thw", "the row's media give more visual tokens than the row has LM tokens (seq_lens / "
                           "lm_tokens / padded_tokens count every visual placeholder): a grid or a length is wrong, "
                           "or the metadata belongs to a model with another merge size"),
    32: ("media", "the row has images or videos but the model has no vision tower (a text-only config); "
                           "give the VLM's config, or drop the media"),
    33: ("images_per_sample", "must hold one non-negative integer per entry of seq_lens, summing to the number of "
                              "images"),
    # audio (schema v2, models with an audio encoder: Omni thinkers)
    34: ("audio_frames", f"must be a list of positive integers, mel frames per audio clip (each <= {1 << 26})"),
    35: ("audio_frames", "the row has audio clips but the model has no audio encoder (or no model config was given); "
                         "give an Omni thinker's config, or drop the audio"),
    # a family whose projector rows are not the grid's fold (Phi-4-multimodal: separators, un-padded crops,
    # crops padded to the call's largest image)
    36: ("image_grid_thw", "the model's image tokens and tower crops are not derivable from per-image grids "
                           "(Phi-4-multimodal); give pre-aggregated vision statistics (vision_patches, "
                           "vision_patches_sq, vision_merged_tokens, vision_frames) instead"),
    # a tower that runs fixed-size tiles only (spec.extra fixed_grid_side: GOT-OCR2, DeepSeek-VL(-hybrid), Janus,
    # PaliGemma, Gemma 3, Aya Vision, LLaVA / LLaVA-NeXT with CLIP, LLaVA-OneVision, Llama 4, Mllama);
    # BatchStats.from_batch refuses the same grids
    37: ("image_grid_thw", "the model's tower runs fixed-size tiles only: every grid row must be [tiles, side, side] "
                           "with the tower's tile side in patches (Mllama: [1, tiles x side, side]; another grid is a "
                           "tile it cannot run)"),
    38: ("video_grid_thw", "the model's tower runs fixed-size tiles only: every grid row must be [tiles, side, side] "
                           "with the tower's tile side in patches (another grid is a tile it cannot run)"),
    # a family with an audio encoder whose geometry vlm-perf does not model (spec.audio None; `flops` refuses too)
    39: ("audio_frames", "the model's audio encoder geometry is not modelled (e.g. Phi-4-multimodal's time_reduction "
                         "other than 8): its clips cannot be counted; drop the audio or use a modelled config"),
    # encoder-decoder LMs (spec.extra encoder_decoder: Florence-2)
    40: ("decoder_lens", f"must hold one positive integer (<= {1 << 26}) per sample: per entry of seq_lens, or "
                         "`samples` entries for a padded_tokens row; pre-aggregated LM rows cannot pair them with "
                         "encoder lengths"),
    41: ("decoder_lens", "the model has no encoder-decoder language model (or no model config was given): nothing "
                         "reads a decoder length; drop it or give the encoder-decoder model's config"),
}
#: Sane bounds that keep every Int64 statistic of a row (and sums of many rows) exact.
GRID_SIDE_MAX = 1 << 20
GRID_PATCHES_MAX = 1 << 26
SEQ_LEN_MAX = 1 << 26
PADDED_TOKENS_MAX = 1 << 31
#: Code for lines polars cannot parse against the schema (not JSON, not an object, wrong types).
JSON_CODE = 99
REASON_JSON = ("json", "not a JSON object matching schema v1 types")


def reason_key(code: int, merge_size: int | None = None) -> str:
    """``"field: message"`` for a row code (used as the diagnostics key)."""
    field, message = REASON_JSON if code == JSON_CODE else REASONS[code]
    if merge_size is not None and "merge_size" in message:
        message = f"{message}={merge_size}"
    return f"{field}: {message}"


@dataclass(frozen=True)
class RowExprs:
    """Per-row expressions: validity code, BatchStats fields and provenance flags."""

    code: pl.Expr
    stats: BatchStats
    pre_lm: pl.Expr
    pre_vision: pl.Expr
    padded_only: pl.Expr
    stage1: tuple[pl.Expr, ...] = ()  # intermediate columns (``__*``) the other expressions refer to
    #: (rows, lm_x_vision_patches counted, with the shortest sample, lm_x_vision_frames counted, shortest) of rows
    #: whose text x vision sums are the longest-sample bound over samples of unequal lengths (see `_cross_parts`)
    cross_bound: tuple[pl.Expr, ...] = ()
    #: (rows, their lm_tokens_sq counted, the least windowed Σ their aggregates allow) of pre-aggregated LM rows whose
    #: sliding-window statistic is unknown (0: sliding layers counted as full causal; see `row_exprs`)
    window_bound: tuple[pl.Expr, ...] = ()
    checks: tuple[tuple[pl.Expr, int], ...] = ()
    #: rows of an encoder-decoder model without decoder_lens (each decoder length taken as the encoder's)
    decoder_assumed: pl.Expr = pl.lit(False)

    def apply(self, lf: pl.LazyFrame) -> pl.LazyFrame:
        """``lf`` with the intermediate columns added (select the other expressions from it)."""
        return lf.with_columns(self.stage1)


# per-grid-row problem codes, ordered so that the max over a row's grids is the first rule broken
_GRID_OK, _GRID_MERGE, _GRID_BIG, _GRID_NONPOS, _GRID_SHAPE = 0, 1, 2, 3, 4


def _grid_parts(col: str, merge_size: int, window_side: int | None,
                cls_per_frame: int = 0, temporal_chunk: int = 0) -> tuple[dict[str, pl.Expr], pl.Expr]:
    """Summed per-row vision statistics of one grid column, and its worst grid-row problem code.

    Inside ``list.eval`` the element is one ``[t, h, w]`` row; `grid_row_stats` runs on the flat
    t/h/w columns of all grid rows at once and ``list.sum`` folds the result back per microbatch.
    """
    grids = pl.col(col)
    el = pl.element()
    t, h, w = (el.list.get(i, null_on_oob=True) for i in range(3))
    row = grid_row_stats(t, h, w, merge_size, window_side, cls_per_frame=cls_per_frame, temporal_chunk=temporal_chunk)
    if not cls_per_frame:  # always 0 then: not evaluated (v1 rows of CLS-free towers read exactly as before)
        row.pop("cls_tokens")
    if not window_side:  # grid_row_stats's window statistic is then the per-frame sum: evaluate it once
        row.pop("window_patches_sq")
    sums = {key: grids.list.eval(expr).list.sum().fill_null(0) for key, expr in row.items()}
    sums.setdefault("window_patches_sq", sums["patches_sq_per_frame"])
    sums["items"] = grids.list.len().fill_null(0)
    shape = (el.list.len() != 3).fill_null(True) | t.is_null() | h.is_null() | w.is_null()
    problem = (pl.when(shape).then(_GRID_SHAPE)
               .when((t <= 0) | (h <= 0) | (w <= 0)).then(_GRID_NONPOS)
               # sides first: t*h*w of sides <= 2^20 cannot overflow (<= 2^60)
               .when((t > GRID_SIDE_MAX) | (h > GRID_SIDE_MAX) | (w > GRID_SIDE_MAX)
                     | (t * h * w > GRID_PATCHES_MAX)).then(_GRID_BIG)
               .when((h % merge_size != 0) | (w % merge_size != 0)).then(_GRID_MERGE)
               .otherwise(_GRID_OK))
    worst = grids.list.eval(problem).list.max().fill_null(_GRID_OK)
    return sums, worst


def _cross_parts() -> dict[str, pl.Expr]:
    """Per-sample text x vision sums of a row's images (``BatchStats.lm_x_vision_*``), vectorised.

    With ``images_per_sample`` (c_s images for entry s of ``seq_lens``, in order): the images' patches and frames
    are cumulated, gathered at each sample's end and start (``Σ_{j<end} - Σ_{j<start}``) and multiplied by the
    sample's length; ``__x_ok`` says whether the counts are consistent. Without it: the longest sequence (or the
    uniform length of a padded_tokens-only row, or the pre-aggregated lm_tokens) times the row's totals, an upper
    bound that is exact for one sample or equal lengths. Videos carry no sample association: always the bound.
    """
    c, el = pl.col, pl.element()
    grids, counts, seq = c("image_grid_thw"), c("images_per_sample"), c("seq_lens")
    per_image = {"patches": grids.list.eval(el.list.get(0, null_on_oob=True) * el.list.get(1, null_on_oob=True)
                                            * el.list.get(2, null_on_oob=True)),
                 "frames": grids.list.eval(el.list.get(0, null_on_oob=True))}
    ends = counts.list.eval(el.cum_sum())
    starts = ends - counts
    n_images = grids.list.len().fill_null(0)
    ok = ((counts.list.len() == seq.list.len()) & (counts.list.sum() == n_images)
          & ~counts.list.eval(el.is_null() | (el < 0)).list.any())
    longest = pl.coalesce(seq.list.max(), c("padded_tokens") // c("samples").fill_null(1), c("lm_tokens"),
                          c("padded_tokens"), pl.lit(0, _INT))
    video = c("video_grid_thw")
    video_parts = {"patches": video.list.eval(el.list.get(0, null_on_oob=True) * el.list.get(1, null_on_oob=True)
                                              * el.list.get(2, null_on_oob=True)).list.sum().fill_null(0),
                   "frames": video.list.eval(el.list.get(0, null_on_oob=True)).list.sum().fill_null(0)}
    out = {"__x_ok": ok.fill_null(False) | counts.is_null()}
    # the longest-sample bound on images of several samples of unequal lengths: flagged, with the shortest sample's
    # value (the exact sum lies between the two) for the diagnostics
    bounded = (~(counts.is_not_null() & seq.is_not_null() & ok).fill_null(False) & (n_images > 0)
               & (seq.list.len() > 1) & (seq.list.max() != seq.list.min())).fill_null(False)
    out["__xb_rows"] = bounded.cast(_INT)
    for key, values in per_image.items():
        total = values.list.sum().fill_null(0)
        out[f"__xb_hi_{key}"] = pl.when(bounded).then(seq.list.max() * total).otherwise(0)
        out[f"__xb_lo_{key}"] = pl.when(bounded).then(seq.list.min() * total).otherwise(0)
    consistent = counts.is_not_null() & seq.is_not_null() & ok
    # only consistent rows reach the element-wise product: polars may evaluate both branches of the when below on
    # every row (it does with one thread), and a count list of another length than seq_lens is a ShapeError there
    seq_consistent = pl.when(consistent).then(seq)
    for key, values in per_image.items():
        cum = pl.concat_list([pl.lit([0], dtype=_INTS), values.list.eval(el.cum_sum())])
        per_sample = cum.list.gather(ends, null_on_oob=True) - cum.list.gather(starts, null_on_oob=True)
        exact = (seq_consistent * pl.when(consistent).then(per_sample)).list.sum()
        bound = longest * values.list.sum().fill_null(0)
        out[f"__x_{key}"] = (pl.when(consistent).then(exact).otherwise(bound)
                             .fill_null(0) + longest * video_parts[key])
    return out
def _audio_parts(audio) -> dict[str, pl.Expr]:
    """Per-row audio statistics of ``audio_frames`` (one encoder call per row: `vlm_perf.stats.audio`). The chunk
    padding depends on the row's longest clip, so the rule runs per row (Python, over rows that carry audio)."""
    from ..stats.audio import AUDIO_FIELDS, audio_call_stats

    def one(frames: list) -> dict:
        try:
            return audio_call_stats(audio, list(frames))
        except Exception:  # noqa: BLE001 - a bad entry: the row is refused by code 34
            return dict.fromkeys(AUDIO_FIELDS, 0)

    struct = pl.col("audio_frames").map_elements(one, return_dtype=pl.Struct({k: pl.Int64 for k in AUDIO_FIELDS}))
    return {f"__audio_{k}": struct.struct.field(k).fill_null(0) for k in AUDIO_FIELDS}


def row_exprs(merge_size: int, window_side: int | None, cls_per_frame: int = 0, text_only: bool = False,
              with_model: bool = False, audio=None, lm_chunk: int | None = None,
              lm_window: int | None = None, temporal_chunk: int = 0, grids_exact: bool = True,
              fixed_side: int = 0, audio_unmodelled: bool = False, fixed_height: int = 0,
              encoder_decoder: bool = False) -> RowExprs:
    """Expressions over a frame scanned with `SCHEMA` (one row per microbatch line).

    Against the model's config (``with_model``: a spec was given, so the merge size is the model's, not a
    default): a row whose visual tokens (merged grid tokens or the pre-aggregated
    ``vision_merged_tokens``) exceed its LM tokens is refused (code 31; rows with media in pixels are
    exempt: their processor's placeholder count may be below the merged grid tokens); ``text_only``: the
    model has no vision tower, so a row with media is refused (code 32) instead of its vision being
    dropped silently.

    ``cls_per_frame``: CLS tokens the tower prepends to every frame/tile sequence (InternViT: 1);
    the squared sums then count each sequence as h*w + cls positions and ``vision_cls_tokens`` is
    cls x frames (pre-aggregated rows: cls x ``vision_frames``; their squared sums must include it).

    ``audio``: the model's `AudioSpec` (None: no audio encoder): ``audio_frames`` rows fill the ``audio_*``
    statistics; without one, a row with audio clips is refused (code 34), never silently counted as text.

    ``lm_chunk``: the LM's attention chunk (Llama 4); ``lm_tokens_sq_beyond_chunks`` is then summed per document of
    ``seq_lens`` (chunks start at each document's first token, as transformers' chunked mask aligns them), or taken
    over the uniform sequences of a ``padded_tokens``-only row; pre-aggregated LM rows give 0 (full causal: an upper
    bound). ``lm_tokens_no_vision``: the row's LM tokens when it has no image or video, else 0.

    ``audio_unmodelled``: the model's family has an audio encoder but ``spec.audio`` is None (its geometry is not
    modelled): audio rows are refused with that reason (code 39) instead of code 35.

    ``fixed_side``: the tower runs only fixed ``side x side``-patch tiles (``spec.extra["fixed_grid_side"]``); a
    grid row of another h or w is refused (codes 37 / 38), as ``BatchStats.from_batch`` refuses it; ``fixed_height``:
    the h those rows must have when it is not ``side`` (Mllama stacks its tiles: h = tiles x side).

    ``temporal_chunk``: Kimi K2.5's tower attends over all frames of a video chunk jointly and averages them into
    one frame's merged tokens (``grid_row_stats``); a grid row of more frames counts as consecutive chunks.
    Pre-aggregated ``vision_patches_sq`` is then read as the per-sequence sum (images: the same value).

    ``encoder_decoder``: the LM is an encoder-decoder (Florence-2): the ``lm_*`` statistics are the encoder's and
    ``decoder_lens`` (one per sample) gives ``lm_decoder_tokens`` / ``_sq`` / ``_x_encoder`` (Σ d·e per sample against
    the ``seq_lens`` entry, or the uniform ``padded_tokens / samples`` length); a row without it takes every decoder
    length equal to its encoder length (``BatchStats.from_batch``'s stand-in). Without the flag ``decoder_lens`` is
    refused (code 41); a bad list, or one on a pre-aggregated LM row, is code 40.

    ``lm_window``: the LM's sliding window W (Gemma 3, gpt-oss, Mistral, Qwen2 with ``use_sliding_window``);
    ``lm_tokens_sq_beyond_window`` (Σ max(s - W, 0)²) is then summed per document of ``seq_lens`` (transformers'
    sliding mask, under packing, is intersected with the per-document mask and measured in each document's own
    positions, so every document is its own window sequence), or taken over the uniform sequences of a
    ``padded_tokens``-only row. Pre-aggregated LM rows give 0 (full causal: an upper bound) unless
    ``lm_tokens_sq <= W²`` (then no document exceeds W and 0 is exact); the others are flagged in ``window_bound``
    with the least windowed Σ (s² - max(s - W, 0)²) their aggregates allow: max(T, 2·W·T - W²·n) (T tokens, n
    ``lm_sequences`` when given; exact when every document exceeds W), capped at ``lm_tokens_sq``."""
    c = pl.col
    # stage 1: every list traversal once, into named intermediate columns (polars does not reliably
    # share a list.eval between a when/then chain and the statistics)
    seq = c("seq_lens")
    stage1: dict[str, pl.Expr] = {
        "__seq_tokens": seq.list.sum(),
        "__seq_sq": (seq * seq).list.sum(),
        "__seq_count": seq.list.len(),
        "__seq_bad": seq.list.eval(pl.element().is_null() | (pl.element() <= 0)).list.any(),
        "__seq_big": seq.list.max() > SEQ_LEN_MAX,
    }
    if lm_window:
        stage1["__seq_window"] = seq.list.eval(beyond_window_sq(pl.element(), lm_window)).list.sum()
    if lm_chunk:
        stage1["__seq_chunks"] = seq.list.eval(beyond_chunks_sq(pl.element(), lm_chunk)).list.sum()
    for prefix, col in (("__img_", "image_grid_thw"), ("__vid_", "video_grid_thw")):
        sums, worst = _grid_parts(col, merge_size, window_side, cls_per_frame, temporal_chunk)
        stage1.update({prefix + key: expr for key, expr in sums.items()})
        stage1[prefix + "worst"] = worst
    stage1.update(_cross_parts())
    if audio is not None:
        stage1.update(_audio_parts(audio))
    img = {key[len("__img_"):]: c(key) for key in stage1 if key.startswith("__img_")}
    vid = {key[len("__vid_"):]: c(key) for key in stage1 if key.startswith("__vid_")}
    img_worst, vid_worst = img.pop("worst"), vid.pop("worst")

    has_seq = seq.is_not_null()
    seq_tokens, seq_sq, seq_count = c("__seq_tokens"), c("__seq_sq"), c("__seq_count")
    seq_bad = has_seq & ((seq_count == 0) | c("__seq_bad"))

    has_pre_lm = c("lm_tokens").is_not_null() | c("lm_tokens_sq").is_not_null() | c("lm_sequences").is_not_null()
    pre_lm_ok = (c("lm_tokens").is_not_null() & c("lm_tokens_sq").is_not_null()
                 & (c("lm_tokens") >= 0) & (c("lm_tokens_sq") >= 0) & (c("lm_sequences").fill_null(0) >= 0))
    padded = c("padded_tokens")
    samples = c("samples")
    padded_only = ~has_seq & ~has_pre_lm & padded.is_not_null()

    lm_tokens = pl.coalesce(seq_tokens, c("lm_tokens"), padded)
    # padded_tokens only: `samples` (default 1) unpacked sequences of padded/samples tokens each
    n_uniform = samples.fill_null(1)
    lm_tokens_sq = pl.coalesce(seq_sq, c("lm_tokens_sq"), (padded * padded) // n_uniform)
    lm_sequences = pl.coalesce(seq_count, c("lm_sequences"), samples, pl.lit(1, _INT))
    lm_samples = pl.coalesce(samples, seq_count, c("lm_sequences"), pl.lit(1, _INT))
    lm_padded = pl.coalesce(padded, lm_tokens)
    if lm_chunk:  # pre-aggregated LM rows: unknown (0, counted as full causal)
        uniform_len = padded // n_uniform
        lm_chunks = pl.when(has_pre_lm).then(0).otherwise(
            pl.coalesce(c("__seq_chunks"), beyond_chunks_sq(uniform_len, lm_chunk) * n_uniform)).fill_null(0)
    else:
        lm_chunks = pl.lit(0, _INT)
    if lm_window:  # pre-aggregated LM rows: unknown (0, counted as full causal; flagged below unless exact)
        uniform_len = padded // n_uniform
        lm_window_sq = pl.when(has_pre_lm).then(0).otherwise(
            pl.coalesce(c("__seq_window"), beyond_window_sq(uniform_len, lm_window) * n_uniform)).fill_null(0)
        pre_sq, pre_tokens = c("lm_tokens_sq").fill_null(0), c("lm_tokens").fill_null(0)
        flagged = (has_pre_lm & (pre_sq > lm_window * lm_window)).fill_null(False)
        n_docs = c("lm_sequences")  # without it only w(s) >= s is known
        least = pl.when(n_docs.is_not_null()).then(pl.max_horizontal(
            pre_tokens, 2 * lm_window * pre_tokens - lm_window * lm_window * n_docs)).otherwise(pre_tokens)
        window_bound = (flagged.cast(_INT), pl.when(flagged).then(pre_sq).otherwise(0),
                        pl.when(flagged).then(pl.min_horizontal(least, pre_sq)).otherwise(0))
    else:
        lm_window_sq = pl.lit(0, _INT)
        window_bound = (pl.lit(0, _INT),) * 3

    lm_bad = (~has_seq & ~has_pre_lm & padded.is_null()) | (has_seq & has_pre_lm) | (has_pre_lm & ~pre_lm_ok)
    padded_bad = padded.is_not_null() & ((padded <= 0) | (padded < lm_tokens))

    pre_vis_cols = ("vision_patches", "vision_patches_sq", "vision_merged_tokens", "vision_frames", "vision_items")
    has_pre_vis = pl.any_horizontal(*(c(k).is_not_null() for k in pre_vis_cols))
    has_grids = (img["items"] + vid["items"]) > 0
    pre_vis_ok = (pl.all_horizontal(*(c(k).is_not_null() for k in pre_vis_cols[:3]))
                  & pl.all_horizontal(*(c(k).fill_null(0) >= 0 for k in pre_vis_cols)))
    vis_bad = has_pre_vis & (has_grids | ~pre_vis_ok)

    has_media = has_grids | (c("vision_patches").fill_null(0) > 0) | (c("vision_merged_tokens").fill_null(0) > 0)

    def pick(pre: str | None, key: str) -> pl.Expr:
        grid_sum = img[key] + vid[key]
        if pre is None:
            return pl.when(has_pre_vis).then(0).otherwise(grid_sum)
        return pl.coalesce(c(pre), grid_sum)

    dec = c("decoder_lens")
    has_dec = dec.is_not_null()
    el0 = pl.element()
    uniform_len = padded // n_uniform
    dec_bad = has_dec & (
        has_pre_lm | dec.list.eval(el0.is_null() | (el0 <= 0) | (el0 > SEQ_LEN_MAX)).list.any()
        | pl.when(has_seq).then(dec.list.len() != seq_count).otherwise(dec.list.len() != n_uniform))
    decoder: dict[str, pl.Expr] = {}
    if encoder_decoder:
        ok_dec = has_dec & ~dec_bad.fill_null(True)
        paired = pl.when(ok_dec & has_seq).then(seq)
        x_seq = (paired * pl.when(ok_dec & has_seq).then(dec)).list.sum()
        decoder = dict(
            lm_decoder_tokens=pl.when(ok_dec).then(dec.list.sum()).otherwise(lm_tokens),
            lm_decoder_tokens_sq=pl.when(ok_dec).then((dec * dec).list.sum()).otherwise(lm_tokens_sq),
            lm_decoder_x_encoder=pl.when(ok_dec & has_seq).then(x_seq)
            .when(ok_dec).then(dec.list.sum() * uniform_len).otherwise(lm_tokens_sq))
    stats = BatchStats(
        **decoder,
        lm_tokens=lm_tokens, lm_tokens_sq=lm_tokens_sq, lm_sequences=lm_sequences, lm_samples=lm_samples,
        lm_padded_tokens=lm_padded,
        vision_patches=pick("vision_patches", "patches"),
        vision_patches_sq_frame=pick("vision_patches_sq", "patches_sq_per_frame"),
        # per-item sums are unknown for pre-aggregated rows: per-frame value (exact for images, a lower bound)
        vision_patches_sq_item=pl.coalesce(c("vision_patches_sq"), img["patches_sq_per_item"] + vid["patches_sq_per_item"]),
        vision_merged_tokens=pick("vision_merged_tokens", "merged_tokens"),
        # window sums need grids: pre-aggregated rows fall back to the per-frame sum (an upper bound)
        vision_window_sq=pl.coalesce(c("vision_patches_sq"), img["window_patches_sq"] + vid["window_patches_sq"]),
        vision_frames=pl.coalesce(c("vision_frames"), pick(None, "frames")),
        vision_items=pl.coalesce(c("vision_items"), pick(None, "items")),
        video_patches=vid["patches"], video_patches_sq_frame=vid["patches_sq_per_frame"],
        video_merged_tokens=vid["merged_tokens"],
        lm_x_vision_patches=pl.when(has_pre_vis).then(lm_tokens * c("vision_patches")).otherwise(c("__x_patches")),
        lm_x_vision_frames=pl.when(has_pre_vis).then(lm_tokens * pl.coalesce(c("vision_frames"), c("vision_patches")))
        .otherwise(c("__x_frames")),
        vision_cls_tokens=(pl.when(has_pre_vis).then(c("vision_frames").fill_null(0) * cls_per_frame)
                           .otherwise(img["cls_tokens"] + vid["cls_tokens"]) if cls_per_frame else 0),
        **({key[len("__audio_"):]: c(key) for key in stage1 if key.startswith("__audio_")} if audio is not None else {}),
        lm_tokens_sq_beyond_chunks=lm_chunks,
        lm_tokens_sq_beyond_window=lm_window_sq,
        lm_tokens_no_vision=pl.when(has_media).then(0).otherwise(lm_tokens),
    )
    it = c("iteration")
    checks = [
        (it.is_null() | (it < 0), 1),
        (c("microbatch").fill_null(0) < 0, 2),
        (~c("schema_version").fill_null(1).is_in(list(SCHEMA_VERSIONS)), 4),
        (c("dp_rank").fill_null(0) < 0, 3),
        (seq_bad, 5),
        (c("__seq_big"), 18),
        (samples.fill_null(1) <= 0, 6),
        (lm_bad, 14),
        (padded.fill_null(0) > PADDED_TOKENS_MAX, 19),
        (padded_bad, 7),
        (img_worst == _GRID_SHAPE, 8), (img_worst == _GRID_NONPOS, 9), (img_worst == _GRID_BIG, 16),
        (img_worst == _GRID_MERGE, 10),
        (vid_worst == _GRID_SHAPE, 11), (vid_worst == _GRID_NONPOS, 12), (vid_worst == _GRID_BIG, 17),
        (vid_worst == _GRID_MERGE, 13),
        (vis_bad, 15),
        (~c("__x_ok"), 33),
    ]
    checks.append((dec_bad, 40) if encoder_decoder else (has_dec, 41))
    clips = c("audio_frames")
    el = pl.element()
    audio_bad = clips.is_not_null() & clips.list.eval(el.is_null() | (el <= 0) | (el > (1 << 26))).list.any()
    checks.append((audio_bad, 34))
    if audio is None:  # 39: the family has an encoder whose geometry is not modelled; 35: no encoder
        checks.append((clips.list.len().fill_null(0) > 0, 39 if audio_unmodelled else 35))
    visual_tokens = pick("vision_merged_tokens", "merged_tokens")
    in_pixels = c("image_sizes").is_not_null() | c("video_sizes").is_not_null()
    if not grids_exact:
        checks.append((has_grids, 36))
    if fixed_side:  # a fixed-tile tower: any other grid row is refused (from_batch's rule)
        for col, value in (("image_grid_thw", 37), ("video_grid_thw", 38)):
            other = c(col).list.eval((el.list.get(1, null_on_oob=True) != (fixed_height or fixed_side))
                                     | (el.list.get(2, null_on_oob=True) != fixed_side)).list.any()
            checks.append((other, value))
    if text_only:
        checks.append((has_media, 32))
    elif with_model:
        checks.append((~in_pixels & (visual_tokens > lm_tokens), 31))
    code = pl.when(checks[0][0]).then(pl.lit(checks[0][1], pl.UInt8))
    for cond, value in checks[1:]:
        code = code.when(cond.fill_null(False)).then(pl.lit(value, pl.UInt8))
    code = code.otherwise(pl.lit(0, pl.UInt8))
    cross_bound = tuple(c(f"__xb_{k}") for k in ("rows", "hi_patches", "lo_patches", "hi_frames", "lo_frames"))
    return RowExprs(code=code, stats=stats, pre_lm=has_pre_lm, pre_vision=has_pre_vis, padded_only=padded_only,
                    decoder_assumed=~has_dec if encoder_decoder else pl.lit(False),
                    stage1=tuple(expr.alias(name) for name, expr in stage1.items()), checks=tuple(checks),
                    cross_bound=cross_bound, window_bound=window_bound)
