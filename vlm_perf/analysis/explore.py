"""What-if exploration for the notebooks: image size -> grid -> vision/LM FLOPs split -> MFU impact.

Everything here is a thin layer over :func:`vlm_perf.flops.compute_flops` and
:meth:`vlm_perf.stats.BatchStats.from_batch`; the notebooks only call these functions and plot.

* :func:`smart_resize`, :func:`image_grid`, :func:`video_grid`: the Qwen processors' resize rule
  (each side rounded to a multiple of ``patch_size * spatial_merge_size``, the pixel count kept within
  ``[min_pixels, max_pixels]`` by rescaling both sides, aspect ratio kept as well as the rounding allows).
* :func:`sample_split`: FLOPs of ONE training sample (one causal sequence of text + visual tokens)
  under one or more conventions: vision, LM, vision share, per component.
* :func:`mfu_impact`: how TFLOP/s/GPU and MFU change when the same step is counted under another
  convention, either at a fixed step time or from a fixed logged "before" number.
* :func:`sweep`: a polars frame of splits over resolutions x images per sample x text lengths.
* :func:`ratio_table`, :func:`run_vision_profile`, :func:`components_by_convention`,
  :func:`deviation_table`: tables for the PR #2575 and conventions notebooks.

Units: FLOPs are training FLOPs of one sample/step (not TFLOPs) unless a name says otherwise;
rates are TFLOP/s per GPU; MFU is a fraction (0.42 = 42 %).
"""

from __future__ import annotations

import itertools
import math
from pathlib import Path
from dataclasses import asdict, dataclass, field
from typing import Iterable, Sequence

import polars as pl

from ..stats.resize import MAX_ASPECT, smart_resize  # noqa: F401  (re-exported)
from ..arch.spec import ModelSpec
from ..flops import COMPONENTS, CONVENTIONS, Breakdown, compute_flops, get_convention
from ..stats import BatchStats

# Default processor pixel bounds (min_pixels, max_pixels) per vision family, as the released
# checkpoints' preprocessor_config.json set them (Qwen2/2.5-VL: min_pixels 3136 = 56^2, max_pixels
# 12845056 = 28^2 * 16384; Qwen3-VL: size.shortest_edge 65536 = 256^2, size.longest_edge 16777216 =
# 4096^2). transformers' class default for Qwen2-VL is lower (max 28^2 * 1280); training recipes
# usually pass their own bounds, so every function takes min_pixels / max_pixels.
DEFAULT_PIXEL_BOUNDS: dict[str, tuple[int, int]] = {
    "qwen2_vl": (56 * 56, 28 * 28 * 16384),
    "qwen2_5_vl": (56 * 56, 28 * 28 * 16384),
    "qwen3_vl": (256 * 256, 4096 * 4096),
}
# Per-frame bounds of the video processors (Qwen2/2.5-VL video: 128..768 merged tokens per frame).
DEFAULT_VIDEO_PIXEL_BOUNDS: dict[str, tuple[int, int]] = {
    "qwen2_vl": (128 * 28 * 28, 768 * 28 * 28),
    "qwen2_5_vl": (128 * 28 * 28, 768 * 28 * 28),
    "qwen3_vl": (128 * 32 * 32, 768 * 32 * 32),
}


# ------------------------------------------------------------------------------------ resize
def _vision(spec: ModelSpec):
    if spec.vision is None:
        raise ValueError(f"{spec.name} has no vision tower: it takes no images")
    return spec.vision


def _bounds(spec: ModelSpec, table: dict, min_pixels: int | None, max_pixels: int | None) -> tuple[int, int]:
    lo, hi = table.get(_vision(spec).family, (None, None))
    lo = min_pixels if min_pixels is not None else lo
    hi = max_pixels if max_pixels is not None else hi
    if lo is None or hi is None:
        raise ValueError(f"no default pixel bounds for vision family {spec.vision.family!r}: "
                         "pass min_pixels and max_pixels")
    return lo, hi


def pixel_bounds(spec: ModelSpec, video: bool = False) -> tuple[int, int]:
    """Default (min_pixels, max_pixels) of the model's processor (images, or video per frame)."""
    return _bounds(spec, DEFAULT_VIDEO_PIXEL_BOUNDS if video else DEFAULT_PIXEL_BOUNDS, None, None)


def _hw(image_px: int | Sequence[int]) -> tuple[int, int]:
    if isinstance(image_px, (int, float)):
        return int(image_px), int(image_px)
    h, w = image_px
    return int(h), int(w)


def image_grid(height_px: int, width_px: int, spec: ModelSpec, min_pixels: int | None = None,
               max_pixels: int | None = None) -> tuple[int, int, int]:
    """``image_grid_thw`` row (1, h, w) in patches for an image of ``height_px`` x ``width_px``.

    448x448 on Qwen2.5-VL (patch 14, merge 2, factor 28): 448 = 16 x 28 -> (1, 32, 32), 256 merged tokens.
    """
    v = _vision(spec)
    lo, hi = _bounds(spec, DEFAULT_PIXEL_BOUNDS, min_pixels, max_pixels)
    h, w = smart_resize(height_px, width_px, v.patch_size * v.spatial_merge_size, lo, hi)
    return 1, h // v.patch_size, w // v.patch_size


def video_grid(frames: int, height_px: int, width_px: int, spec: ModelSpec, min_pixels: int | None = None,
               max_pixels: int | None = None) -> tuple[int, int, int]:
    """``video_grid_thw`` row (t, h, w) for ``frames`` sampled frames of ``height_px`` x ``width_px``.

    Each frame is resized with per-frame bounds (the Qwen2/2.5-VL video processor rule); frames are
    padded up to a multiple of ``temporal_patch_size`` (t = ceil(frames / T_p)). Qwen3-VL's video
    processor instead spreads one pixel budget over all frames: pass ``max_pixels`` per frame to model it.
    """
    v = _vision(spec)
    if frames <= 0:
        raise ValueError(f"frames must be positive, got {frames}")
    lo, hi = _bounds(spec, DEFAULT_VIDEO_PIXEL_BOUNDS, min_pixels, max_pixels)
    h, w = smart_resize(height_px, width_px, v.patch_size * v.spatial_merge_size, lo, hi)
    return -(-frames // v.temporal_patch_size), h // v.patch_size, w // v.patch_size


def merged_tokens(grid: Sequence[int], spec: ModelSpec) -> int:
    """LM (visual placeholder) tokens of one grid row: t * h * w / merge^2."""
    t, h, w = grid
    return t * h * w // _vision(spec).merge_unit


# ------------------------------------------------------------------------------------ one sample
@dataclass(frozen=True)
class SampleSplit:
    """FLOPs of one training sample (one causal sequence) under one or more conventions.

    ``vision_flops`` / ``lm_flops`` / ``vision_share`` / ``components`` refer to ``convention``
    (the first one asked for); :meth:`total`, :meth:`vision`, :meth:`language` take any other.
    """

    model: str
    convention: str
    image_grid: tuple[int, int, int] | None
    images_per_sample: int
    video_grid: tuple[int, int, int] | None
    visual_tokens: int  # merged tokens (images + video) placed in the LM sequence
    text_tokens: int
    seq_len: int  # visual + text tokens: one causal sequence
    patches: int  # ViT patches (pre-merge) of the sample
    frozen: tuple[str, ...]
    stats: BatchStats
    breakdowns: dict[str, Breakdown] = field(repr=False)

    # --- primary convention ------------------------------------------------------------
    @property
    def vision_flops(self) -> float:
        return self.vision(self.convention)

    @property
    def lm_flops(self) -> float:
        return self.language(self.convention)

    @property
    def total_flops(self) -> float:
        return self.total(self.convention)

    @property
    def vision_share(self) -> float:
        return self.share(self.convention)

    @property
    def components(self) -> dict[str, float]:
        return dict(self.breakdowns[self.convention].components)

    # --- any convention ----------------------------------------------------------------
    def vision(self, convention: str) -> float:
        return float(self.breakdowns[convention].vision)

    def language(self, convention: str) -> float:
        return float(self.breakdowns[convention].language)

    def total(self, convention: str) -> float:
        return float(self.breakdowns[convention].total)

    def share(self, convention: str) -> float:
        total = self.total(convention)
        return self.vision(convention) / total if total else 0.0

    @property
    def visual_token_share(self) -> float:
        """Share of the LM sequence that is visual tokens."""
        return self.visual_tokens / self.seq_len if self.seq_len else 0.0

    def table(self) -> pl.DataFrame:
        """One row per convention: vision, LM, total FLOPs and vision share."""
        return pl.DataFrame([{"convention": c, "vision_flops": self.vision(c), "lm_flops": self.language(c),
                              "total_flops": self.total(c), "vision_share": self.share(c)}
                             for c in self.breakdowns])

    def to_dict(self) -> dict:
        out = {k: v for k, v in asdict(self).items() if k not in ("stats", "breakdowns")}
        out.update(vision_flops=self.vision_flops, lm_flops=self.lm_flops, total_flops=self.total_flops,
                   vision_share=self.vision_share, components=self.components)
        return out


def sample_stats(spec: ModelSpec, image_px: int | Sequence[int] | None = None, images_per_sample: int = 1,
                 text_tokens: int = 0, video: Sequence[int] | None = None, min_pixels: int | None = None,
                 max_pixels: int | None = None) -> tuple[BatchStats, tuple | None, tuple | None]:
    """(statistics, image grid, video grid) of one sample: ``images_per_sample`` images of ``image_px``
    (side or (height, width)), an optional video ``(frames, height_px, width_px)`` and ``text_tokens``
    of text, all in ONE causal LM sequence (visual tokens included in its length)."""
    if images_per_sample < 0 or text_tokens < 0:
        raise ValueError("images_per_sample and text_tokens must be >= 0")
    img = None
    if image_px is not None and images_per_sample > 0:
        img = image_grid(*_hw(image_px), spec, min_pixels, max_pixels)
    vid = video_grid(*video, spec) if video is not None else None
    visual = (images_per_sample * merged_tokens(img, spec) if img else 0) + (merged_tokens(vid, spec) if vid else 0)
    seq = text_tokens + visual
    if seq <= 0:
        raise ValueError("the sample is empty: give text_tokens > 0 or at least one image / video")
    stats = BatchStats.from_batch(seq_len=seq, samples=1, image_grids=[img] * images_per_sample if img else [],
                                  video_grids=[vid] if vid else [], spec=spec)
    return stats, img, vid


def sample_split(spec: ModelSpec, image_px: int | Sequence[int] | None = 448, images_per_sample: int = 1,
                 text_tokens: int = 1024, video: Sequence[int] | None = None, frozen: Iterable[str] = (),
                 conventions: Sequence[str] | str = ("exact",), min_pixels: int | None = None,
                 max_pixels: int | None = None, mode: str = "training") -> SampleSplit:
    """Vision / LM FLOPs of one sample (see :func:`sample_stats`) under ``conventions``.

    ``frozen`` (e.g. ``("vision_tower",)``) changes ``exact`` only; named conventions count every part as
    trainable and say so in their Breakdown notes.
    """
    convs = [conventions] if isinstance(conventions, str) else list(dict.fromkeys(conventions))
    if not convs:
        raise ValueError("give at least one convention")
    stats, img, vid = sample_stats(spec, image_px, images_per_sample, text_tokens, video, min_pixels, max_pixels)
    frozen = tuple(frozen)
    breakdowns = {c: compute_flops(spec, stats, c, mode=mode, frozen=frozen) for c in convs}
    return SampleSplit(model=spec.name, convention=convs[0], image_grid=img,
                       images_per_sample=images_per_sample if img else 0, video_grid=vid,
                       visual_tokens=int(stats.vision_merged_tokens), text_tokens=int(text_tokens),
                       seq_len=int(stats.lm_tokens), patches=int(stats.vision_patches), frozen=frozen, stats=stats,
                       breakdowns=breakdowns)


# ------------------------------------------------------------------------------------ MFU impact
@dataclass(frozen=True)
class MFUImpact:
    """TFLOP/s/GPU and MFU of the same steps counted two ways (``before`` and ``after``)."""

    before_convention: str
    after_convention: str
    before_tflops_per_gpu: float
    after_tflops_per_gpu: float
    ratio: float  # after / before = F_after / F_before
    step_time_s: float | None  # per step (None when only the before-number was given and no step size)
    peak_tflops: float | None
    before_mfu: float | None
    after_mfu: float | None

    @property
    def delta_tflops_per_gpu(self) -> float:
        return self.after_tflops_per_gpu - self.before_tflops_per_gpu

    @property
    def delta_mfu_points(self) -> float | None:
        """Change in MFU, in percentage points."""
        if self.before_mfu is None or self.after_mfu is None:
            return None
        return 100 * (self.after_mfu - self.before_mfu)

    def to_dict(self) -> dict:
        return {**asdict(self), "delta_tflops_per_gpu": self.delta_tflops_per_gpu,
                "delta_mfu_points": self.delta_mfu_points}


def mfu_impact(split: SampleSplit, *, before: str = "megatron-lm", after: str = "exact",
               before_tflops_per_gpu: float | None = None, step_time_s: float | None = None,
               samples_per_step: int = 1, gpus: int = 1, peak_tflops: float | None = None,
               gpu: str | None = None, dtype: str = "bf16") -> MFUImpact:
    """How the reported rate changes when a step of ``samples_per_step`` copies of ``split``'s sample is
    counted under ``after`` instead of ``before``.

    Give exactly one of:

    * ``before_tflops_per_gpu``: the number a log printed under ``before`` (step time unchanged, so
      after = before x F_after / F_before); the implied step time is F_before x samples / (rate x GPUs);
    * ``step_time_s``: seconds per step on ``gpus`` GPUs; each rate = F x samples / (t x GPUs x 1e12).

    The peak (for MFU) is ``peak_tflops`` or looked up from ``gpu`` / ``dtype``. Both conventions must be
    in ``split`` (pass them to :func:`sample_split`).
    """
    for name in (before, after):
        if name not in split.breakdowns:
            raise ValueError(f"convention {name!r} not computed for this split; pass conventions=[...] including "
                             f"it to sample_split (have: {', '.join(split.breakdowns)})")
    if (before_tflops_per_gpu is None) == (step_time_s is None):
        raise ValueError("give exactly one of before_tflops_per_gpu and step_time_s")
    if samples_per_step <= 0 or gpus <= 0:
        raise ValueError("samples_per_step and gpus must be positive")
    f_before = split.total(before) * samples_per_step
    f_after = split.total(after) * samples_per_step
    if f_before <= 0:
        raise ValueError(f"{before} counts no FLOPs for this sample")
    ratio = f_after / f_before
    if step_time_s is not None:
        if step_time_s <= 0:
            raise ValueError("step_time_s must be positive")
        rate_before = f_before / (step_time_s * gpus * 1e12)
        t = step_time_s
    else:
        if before_tflops_per_gpu <= 0:
            raise ValueError("before_tflops_per_gpu must be positive")
        rate_before = float(before_tflops_per_gpu)
        t = f_before / (rate_before * gpus * 1e12)
    rate_after = rate_before * ratio
    if peak_tflops is None and gpu is not None:
        from ..hardware import peak_flops

        peak_tflops = peak_flops(gpu, dtype) / 1e12
    mfu = (lambda r: r / peak_tflops) if peak_tflops else (lambda r: None)
    return MFUImpact(before, after, rate_before, rate_after, ratio, t, peak_tflops, mfu(rate_before),
                     mfu(rate_after))


# ------------------------------------------------------------------------------------ sweeps
SWEEP_COLUMNS = ("model", "convention", "frozen", "image_h_px", "image_w_px", "grid_h", "grid_w", "images_per_sample",
                 "visual_tokens", "text_tokens", "seq_len", "patches", "visual_token_share", "vision_flops",
                 "lm_flops", "total_flops", "vision_share", "vision_to_lm")


def sweep(spec: ModelSpec, resolutions: Iterable[int | Sequence[int]] = (224, 448, 672, 896, 1344),
          images_per_sample: Iterable[int] = (1,), text_tokens: Iterable[int] = (1024,),
          conventions: Sequence[str] = ("exact",), frozen: Iterable[str] = (), min_pixels: int | None = None,
          max_pixels: int | None = None) -> pl.DataFrame:
    """One row per (resolution, images per sample, text length, convention) with :data:`SWEEP_COLUMNS`.

    ``resolutions``: square sides in px, or (height, width) pairs. ``vision_to_lm`` = vision / LM FLOPs,
    the relative TFLOP/s increase counting vision adds at unchanged step time (when the LM is counted alike).
    """
    rows = []
    frozen = tuple(frozen)
    for res, n_img, text in itertools.product(list(resolutions), list(images_per_sample), list(text_tokens)):
        split = sample_split(spec, res, n_img, text, frozen=frozen, conventions=conventions,
                             min_pixels=min_pixels, max_pixels=max_pixels)
        h, w = _hw(res)
        for conv in split.breakdowns:
            lm = split.language(conv)
            rows.append({
                "model": spec.name, "convention": conv, "frozen": ",".join(frozen), "image_h_px": h, "image_w_px": w,
                "grid_h": split.image_grid[1] if split.image_grid else 0,
                "grid_w": split.image_grid[2] if split.image_grid else 0,
                "images_per_sample": split.images_per_sample, "visual_tokens": split.visual_tokens,
                "text_tokens": split.text_tokens, "seq_len": split.seq_len, "patches": split.patches,
                "visual_token_share": split.visual_token_share, "vision_flops": split.vision(conv), "lm_flops": lm,
                "total_flops": split.total(conv), "vision_share": split.share(conv),
                "vision_to_lm": split.vision(conv) / lm if lm else None,
            })
    return pl.DataFrame(rows, schema_overrides={"vision_to_lm": pl.Float64}).select(SWEEP_COLUMNS)


# ------------------------------------------------------------------------------------ PR #2575 helpers
def ratio_table(spec: ModelSpec, seq_len: int = 4096, patches_per_frame: Iterable[int] = (256, 1024, 4096),
                convention: str = "megatron-bridge", lm_convention: str = "megatron-lm") -> pl.DataFrame:
    """Per-visual-token cost ratio against the parameter ratio, per frame size.

    For one square frame of ``p`` patches (side = sqrt(p), a multiple of the merge size):
    ``vision_flops_per_visual_token`` = vision FLOPs of the frame under ``convention`` / its merged tokens;
    ``lm_flops_per_token`` = LM FLOPs per token of a ``seq_len`` sequence under ``lm_convention``;
    ``cost_ratio`` = their quotient, the most counting vision can add (every token visual);
    ``param_ratio`` = (vision tower + mergers) / active LM parameters: the "about 1/6" figure.
    """
    from ..arch import params

    v = _vision(spec)
    m = v.spatial_merge_size
    lm_per_token = compute_flops(spec, BatchStats.from_batch(seq_len=seq_len, spec=spec), lm_convention).total / seq_len
    param_ratio = (params.vision_tower_params(spec) + params.merger_params(spec)) / params.lm_active_params(spec)
    rows = []
    for p in patches_per_frame:
        side = max(m, round(math.sqrt(p) / m) * m)
        frame = BatchStats.from_batch(seq_len=max(seq_len, side * side // v.merge_unit), image_grids=[(1, side, side)],
                                      spec=spec)
        per_visual = compute_flops(spec, frame, convention).vision / frame.vision_merged_tokens
        rows.append({"patches_per_frame": side * side, "frame_px": side * v.patch_size,
                     "vision_flops_per_visual_token": float(per_visual), "lm_flops_per_token": float(lm_per_token),
                     "cost_ratio": float(per_visual / lm_per_token), "param_ratio": float(param_ratio),
                     "cost_over_param_ratio": float(per_visual / lm_per_token / param_ratio)})
    return pl.DataFrame(rows)


def run_vision_profile(per_iteration: pl.DataFrame) -> dict:
    """Token and patch profile of a run from its per-iteration statistics (``RunAnalysis.per_iteration``).

    visual_token_share = sum(merged visual tokens) / sum(LM tokens); patches_per_lm_token = sum(patches) /
    sum(LM tokens); patches_per_frame = sum(t*(h*w)^2) / sum(t*h*w), the patch-weighted frame size that
    sets the ViT attention cost; exact_vision_share = exact vision / exact total FLOPs (if computed).
    """
    s = per_iteration
    tokens = float(s["lm_tokens"].sum())
    patches = float(s["vision_patches"].sum())
    out = {"iterations": s.height, "lm_tokens": tokens, "visual_tokens": float(s["vision_merged_tokens"].sum()),
           "patches": patches}
    out["visual_token_share"] = out["visual_tokens"] / tokens if tokens else None
    out["patches_per_lm_token"] = patches / tokens if tokens else None
    out["patches_per_frame"] = float(s["vision_patches_sq_frame"].sum()) / patches if patches else None
    if "exact_total" in s.columns:
        total = float(s["exact_total"].sum())
        out["exact_vision_share"] = float(s["exact_vision"].sum()) / total if total else None
    return out


# ------------------------------------------------------------------------------------ conventions
def components_by_convention(spec: ModelSpec, per_iteration: pl.DataFrame, conventions: Iterable[str] | None = None,
                             frozen: Iterable[str] = ()) -> pl.DataFrame:
    """Training FLOPs per (convention, component), summed over the rows of ``per_iteration``.

    Each convention is evaluated row by row (iteration by iteration) and then summed, exactly as
    :func:`vlm_perf.analysis.analyze_run` does for totals; ``frozen`` applies to ``exact`` only (the
    named conventions ignore it, as the run analysis does). Long format: convention, component, part
    (vision|language), flops.
    """
    convs = list(conventions) if conventions is not None else list(CONVENTIONS)
    cols = BatchStats.columns()
    frame = per_iteration.with_columns([pl.lit(0).alias(c) for c in BatchStats.field_names()
                                        if c not in per_iteration.columns])
    frame = frame.with_columns([pl.col(c).cast(pl.Float64) for c in BatchStats.field_names()])
    rows = []
    for conv in convs:
        if spec.lm.family in get_convention(conv).unsupported:
            continue
        b = compute_flops(spec, cols, conv, frozen=tuple(frozen) if conv == "exact" else ())
        exprs = [(v if isinstance(v, pl.Expr) else pl.lit(v)).cast(pl.Float64).sum().alias(k)
                 for k, v in b.components.items()]
        sums = frame.select(exprs).row(0, named=True)
        for comp in COMPONENTS:
            if comp in sums:
                rows.append({"convention": conv, "component": comp,
                             "part": "vision" if comp.startswith("vision.") else "language",
                             "flops": float(sums[comp] or 0.0)})
    return pl.DataFrame(rows)


def components_vs_reference(frame: pl.DataFrame, reference: str = "exact") -> pl.DataFrame:
    """Each (convention, component) of :func:`components_by_convention` next to ``reference``'s value:
    adds ``reference_flops``, ``delta`` (= flops - reference_flops) and ``ratio`` (null where the
    reference counts nothing). Sorted by convention, then largest absolute delta first."""
    ref = frame.filter(pl.col("convention") == reference).select("component", pl.col("flops").alias("reference_flops"))
    if ref.height == 0:
        raise ValueError(f"reference convention {reference!r} is not in the frame")
    # every (convention, component) pair that either side counts; a component a convention leaves out is 0
    pairs = frame.select("convention").unique().join(frame.select("component", "part").unique(), how="cross")
    out = (pairs.join(frame.select("convention", "component", "flops"), on=["convention", "component"], how="left")
           .join(ref, on="component", how="left")
           .with_columns(pl.col("flops").fill_null(0.0), pl.col("reference_flops").fill_null(0.0)))
    out = out.with_columns((pl.col("flops") - pl.col("reference_flops")).alias("delta"),
                           pl.when(pl.col("reference_flops") > 0).then(pl.col("flops") / pl.col("reference_flops"))
                           .otherwise(None).alias("ratio"))
    order = {c: i for i, c in enumerate(dict.fromkeys(frame["convention"].to_list()))}
    return (out.with_columns(pl.col("convention").replace_strict(order, return_dtype=pl.Int64).alias("_o"),
                             pl.col("delta").abs().alias("_a"))
            .sort(["_o", "_a"], descending=[False, True]).drop("_o", "_a"))


def convention_summary_frame(run) -> pl.DataFrame:
    """``RunAnalysis.convention_summary()`` as a frame: convention, counts_vision, mean TFLOP/s/GPU, MFU,
    total FLOPs of the run, and the ratio of each rate to the LM-only ``megatron-lm`` one."""
    summary = run.convention_summary()
    base = (summary.get("megatron-lm") or {}).get("tflops_per_gpu_mean")
    rows = []
    for conv, entry in summary.items():
        rate = entry["tflops_per_gpu_mean"]
        rows.append({"convention": conv, "counts_vision": get_convention(conv).counts_vision,
                     "tflops_per_gpu_mean": rate, "mfu_mean": entry["mfu_mean"],
                     "flops_total": entry["flops_total"],
                     "vs_megatron_lm": rate / base if rate is not None and base else None})
    return pl.DataFrame(rows, schema_overrides={"tflops_per_gpu_mean": pl.Float64, "mfu_mean": pl.Float64,
                                                "vs_megatron_lm": pl.Float64})


def sample_run_dir(name: str, start: str | Path | None = None) -> Path:
    """``sample_logs/<name>`` of the repository, found by walking up from ``start`` (default: the
    working directory), so a notebook finds it whether it runs from ``notebooks/`` or the repo root."""
    here = Path(start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        candidate = folder / "sample_logs" / name
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError(f"sample_logs/{name} not found in {here} or any parent directory; run from inside "
                            "the vlm-perf repository")


def deviation_table(conventions: Iterable[str] | None = None) -> pl.DataFrame:
    """Name, source, formula and the stated deviations from ``exact`` of each convention."""
    convs = list(conventions) if conventions is not None else list(CONVENTIONS)
    return pl.DataFrame([{"convention": c.name, "counts_vision": c.counts_vision, "source": c.source,
                          "formula": c.formula,
                          "deviations": "; ".join(c.deviations) if c.deviations else "(reference)"}
                         for c in (get_convention(n) for n in convs)])


__all__ = ["DEFAULT_PIXEL_BOUNDS", "DEFAULT_VIDEO_PIXEL_BOUNDS", "MFUImpact", "SWEEP_COLUMNS", "SampleSplit",
           "components_by_convention", "components_vs_reference", "convention_summary_frame", "deviation_table", "image_grid", "merged_tokens", "mfu_impact",
           "pixel_bounds", "ratio_table", "run_vision_profile", "sample_run_dir", "sample_split", "sample_stats", "smart_resize",
           "sweep", "video_grid"]
