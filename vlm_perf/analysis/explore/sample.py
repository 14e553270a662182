"""One training sample: its vision/LM FLOPs split, the MFU impact, and sweeps over the inputs."""

from __future__ import annotations

import itertools
from dataclasses import asdict, dataclass, field
from typing import Iterable, Sequence

import polars as pl

from ...arch.spec import ModelSpec
from ...errors import ConfigError
from ...flops import Breakdown, compute_flops
from ...stats import BatchStats
from .media import family_media, height_width, uses_own_rule, image_grid, merged_tokens, video_grid


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


def _item(spec: ModelSpec, kind: str, dims: Sequence[int], min_pixels: int | None,
          max_pixels: int | None) -> tuple[tuple, list, int, int | None]:
    """(display grid, every grid, LM placeholder tokens, projector rows or None) of one image / video.

    A family with its own processor rule gives what that rule derives: every grid of the item (MiniCPM-V: an
    overview plus slices of another shape), the placeholders its processor writes (fewer than the fold for
    LLaVA-OneVision's unpadding) and its projector rows where they are not the grid's fold (Phi-4-multimodal).
    Otherwise the Qwen resize with the bounds given: one grid, placeholders = its fold."""
    if uses_own_rule(spec, min_pixels, max_pixels):
        rule = family_media(spec)
        item = rule.image(spec, *dims) if kind == "image" else rule.video(spec, *dims)
        grids = [tuple(g) for g in item.grids]
        if item.merged_tokens is not None and (kind == "video" or len(grids) > 1):
            item.single_grid("explore")  # refuses: no per-grid projector rows for these
        return tuple(item.grid), grids, int(item.visual_tokens), item.merged_tokens
    grid = image_grid(*dims, spec, min_pixels, max_pixels) if kind == "image" else video_grid(*dims, spec)
    return grid, [grid], merged_tokens(grid, spec), None


def sample_stats(spec: ModelSpec, image_px: int | Sequence[int] | None = None, images_per_sample: int = 1,
                 text_tokens: int = 0, video: Sequence[int] | None = None, min_pixels: int | None = None,
                 max_pixels: int | None = None) -> tuple[BatchStats, tuple | None, tuple | None]:
    """(statistics, image grid, video grid) of one sample: ``images_per_sample`` images of ``image_px``
    (side or (height, width)), an optional video ``(frames, height_px, width_px)`` and ``text_tokens``
    of text, all in ONE causal LM sequence (visual tokens included in its length). The grids returned are each
    item's first grid (for display); the statistics hold every grid of every item."""
    if images_per_sample < 0 or text_tokens < 0:
        raise ConfigError("images_per_sample and text_tokens must be >= 0")
    img = vid = None
    image_grids: list = []
    image_rows: list = []
    video_grids: list = []
    visual = 0
    if image_px is not None and images_per_sample > 0:
        img, grids, tokens, rows = _item(spec, "image", height_width(image_px), min_pixels, max_pixels)
        image_grids = grids * images_per_sample
        image_rows = [rows] * images_per_sample if rows is not None else []
        visual += images_per_sample * tokens
    if video is not None:
        vid, video_grids, tokens, _ = _item(spec, "video", tuple(video), min_pixels, max_pixels)
        visual += tokens
    seq = text_tokens + visual
    if seq <= 0:
        raise ConfigError("the sample is empty: give text_tokens > 0 or at least one image / video")
    stats = BatchStats.from_batch(seq_len=seq, samples=1, image_grids=image_grids, video_grids=video_grids,
                                  spec=spec, image_merged_tokens=image_rows)
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
        raise ConfigError("give at least one convention")
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
            raise ConfigError(f"convention {name!r} not computed for this split; pass conventions=[...] including "
                             f"it to sample_split (have: {', '.join(split.breakdowns)})")
    if (before_tflops_per_gpu is None) == (step_time_s is None):
        raise ConfigError("give exactly one of before_tflops_per_gpu and step_time_s")
    if samples_per_step <= 0 or gpus <= 0:
        raise ConfigError("samples_per_step and gpus must be positive")
    f_before = split.total(before) * samples_per_step
    f_after = split.total(after) * samples_per_step
    if f_before <= 0:
        raise ConfigError(f"{before} counts no FLOPs for this sample")
    ratio = f_after / f_before
    if step_time_s is not None:
        if step_time_s <= 0:
            raise ConfigError("step_time_s must be positive")
        rate_before = f_before / (step_time_s * gpus * 1e12)
        t = step_time_s
    else:
        if before_tflops_per_gpu <= 0:
            raise ConfigError("before_tflops_per_gpu must be positive")
        rate_before = float(before_tflops_per_gpu)
        t = f_before / (rate_before * gpus * 1e12)
    rate_after = rate_before * ratio
    if peak_tflops is None and gpu is not None:
        from ...hardware import peak_flops

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
        h, w = height_width(res)
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
