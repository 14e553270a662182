"""Media rules: pixels -> the media a family's Hugging Face processor derives (pure, no I/O).

Interface every VLM family provides (``Family.media``), a :class:`MediaRule`:

* ``image(spec, height, width)`` -> :class:`DerivedMedia` for one image of ``height`` x ``width`` pixels;
* ``video(spec, frames, height, width)`` -> :class:`DerivedMedia` for ``frames`` sampled frames;
* ``settings(spec)`` -> the processor settings used and where each came from.

Settings come from the checkpoint's processor files (``spec.processor``: preprocessor_config.json,
processor_config.json, video_preprocessor_config.json merged by file name), else from the reference
checkpoint's defaults that the rule states. A processor CLASS default that transformers passes on every
call beats the files (e.g. ``InternVLProcessor`` always tiles): the rule applies it and says so.

:class:`DerivedMedia` is what the FLOPs need: ``grid`` = (frames or tiles, h, w) in patches -- each of the
``grid[0]`` slices is one attention sequence of the tower -- and ``visual_tokens`` = placeholder tokens the
LM sees for this item (part of ``--seq-len``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from ...errors import ConfigError, UnsupportedModelError
from ..resize import smart_resize, smart_resize_video


@dataclass(frozen=True)
class DerivedMedia:
    """One image or video after the family's processor: what the tower and the LM see."""

    kind: str  # "image" | "video"
    pixels: tuple[int, ...]  # as given: (H, W) or (T, H, W)
    resized: tuple[int, int]  # (H, W) in pixels after resizing (per tile for tiling families)
    grid: tuple[int, int, int]  # (slices, h, w) in patches: slices = temporal patches or tiles
    visual_tokens: int  # LM placeholder tokens for this item
    tiles: int | None = None  # tiling families: tiles incl. thumbnail
    detail: Mapping[str, Any] = field(default_factory=dict)
    # further grids of the same item whose slices differ in shape from ``grid`` (MiniCPM-V: overview + slices)
    extra_grids: tuple[tuple[int, int, int], ...] = ()

    @property
    def grids(self) -> tuple[tuple[int, int, int], ...]:
        """Every grid of the item (what the statistics consume): ``grid`` then ``extra_grids``."""
        return (tuple(self.grid),) + tuple(self.extra_grids)  # type: ignore[return-value]

    def single_grid(self, where: str) -> tuple[int, int, int]:
        """``grid``, refusing an item that is several grids of different shapes, or whose projector rows are not
        the grid's fold (a caller that keeps one grid per item would drop the others / bill the fold)."""
        if self.extra_grids:
            raise UnsupportedModelError(f"{where}: this family splits one {self.kind} into grids of different shapes "
                                        f"({list(self.grids)}); one grid per item cannot hold it: give the {self.kind} in "
                                        "pixels where every grid of an item is kept (the flops command, explore, the "
                                        "run estimate) or give the grids")
        if self.merged_tokens is not None:
            raise UnsupportedModelError(f"{where}: this family's projector rows ({self.merged_tokens}) are not the "
                                        f"grid {list(self.grid)}'s fold (separators, un-padded crops); one grid per "
                                        f"item cannot hold them: give the {self.kind} in pixels where the family's rows are "
                                        "kept (the flops command, explore, the run estimate)")
        return self.grid
    # projector rows when they are not the grid's m x m fold (Phi-4-multimodal); None: the fold
    merged_tokens: int | None = None

    def as_dict(self) -> dict:
        out = {"kind": self.kind, "pixels": list(self.pixels), "resized": list(self.resized),
               "grid": list(self.grid), "visual_tokens": self.visual_tokens}
        if self.extra_grids:
            out["extra_grids"] = [list(g) for g in self.extra_grids]
        if self.tiles is not None:
            out["tiles"] = self.tiles
        if self.merged_tokens is not None:
            out["merged_tokens"] = self.merged_tokens
        out.update(self.detail)
        return out


class MediaRule:
    """Base class: a family's processor rule. Override ``image`` / ``video`` / ``settings``."""

    family: str = ""

    def settings(self, spec) -> dict:
        return {}

    def image(self, spec, height: int, width: int) -> DerivedMedia:
        raise UnsupportedModelError(f"{self.family}: images in pixels are not modelled; give the image grid (t, h, w patches) instead")

    def video(self, spec, frames: int, height: int, width: int) -> DerivedMedia:
        raise UnsupportedModelError(f"{self.family}: videos in pixels are not modelled; give the video grid (t, h, w patches) instead")

    def audio(self, spec, samples: int) -> "DerivedAudio":
        raise UnsupportedModelError(f"{self.family or spec.family}: the model has no audio encoder; audio clips cannot be counted")


def no_video(name: str, processor: str, model: str, instead: str = "") -> UnsupportedModelError:
    """The refusal for a family whose transformers processor takes no videos (no ``video_processor``: the generic
    ``ProcessorMixin.__call__`` drops a ``videos=`` argument) and whose model has no video input."""
    also = f", or {instead}" if instead else ""
    return UnsupportedModelError(f"{name}: {processor} takes no videos (transformers 5.24: no video processor, and "
                                 f"{model} has no video input); count the sampled frames as images, one image per "
                                 f"frame{also}")


@dataclass(frozen=True)
class DerivedAudio:
    """One audio clip after the family's feature extractor: ``samples`` (at the processor's sampling rate) ->
    ``mel_frames`` (what the encoder reads; the batch-level statistics take these) -> ``encoder_tokens``
    (encoder positions) -> ``audio_tokens`` (LM placeholder tokens: part of ``--seq-len``)."""

    samples: int
    mel_frames: int
    encoder_tokens: int
    audio_tokens: int
    detail: Mapping[str, Any] = field(default_factory=dict)
    kind: str = "audio"

    def as_dict(self) -> dict:
        return {"kind": self.kind, "samples": self.samples, "mel_frames": self.mel_frames,
                "encoder_tokens": self.encoder_tokens, "audio_tokens": self.audio_tokens, **self.detail}


def positive(values, what: str) -> tuple[int, ...]:
    out = []
    for v in values:
        if isinstance(v, bool) or not isinstance(v, (int, float)) or int(v) != v or v <= 0:
            raise ConfigError(f"{what}: sizes must be positive integers, got {list(values)!r}")
        out.append(int(v))
    return tuple(out)


# ------------------------------------------------------------------------------------ Qwen-VL

# Reference checkpoints' preprocessor_config.json pixel bounds (min_pixels, max_pixels): Qwen2/2.5-VL
# min 56^2, max 28^2 * 16384 (transformers' class default is lower: 28^2 * 1280); Qwen3-VL
# size.shortest_edge 256^2, size.longest_edge 4096^2. Video (per frame, Qwen2/2.5-VL): 128..768 merged tokens.
QWEN_IMAGE_BOUNDS = {"qwen2_vl": (56 * 56, 28 * 28 * 16384), "qwen2_5_vl": (56 * 56, 28 * 28 * 16384),
                     "qwen3_vl": (256 * 256, 4096 * 4096), "qwen3_vl_moe": (256 * 256, 4096 * 4096)}
QWEN_VIDEO_BOUNDS = {"qwen2_vl": (128 * 28 * 28, 768 * 28 * 28), "qwen2_5_vl": (128 * 28 * 28, 768 * 28 * 28)}
# Qwen3-VL video_preprocessor_config.json (released checkpoints): size.shortest_edge 4096, longest_edge 25165824
# over the whole clip (t_bar * h * w); transformers' class default is smaller (128*32*32 .. 768*32*32).
QWEN3_VIDEO_BOUNDS = (4096, 25165824)
QWEN3_MAX_VIDEO_TOKENS = 768  # Qwen3VLVideoProcessor.max_video_tokens (used only with cap_pixels_per_frame)


def pixel_bounds(files: Mapping[str, Any], default: tuple[int, int], origin: str) -> tuple[int, int, str]:
    """(min_pixels, max_pixels, where from): ``min_pixels``/``max_pixels`` beat ``size`` (as in transformers)."""
    raw_size = files.get("size")
    size: Mapping[str, Any] = raw_size if isinstance(raw_size, dict) else {}
    lo = files.get("min_pixels", size.get("shortest_edge"))
    hi = files.get("max_pixels", size.get("longest_edge"))
    if lo is None and hi is None:
        return default[0], default[1], origin
    return (int(lo) if lo is not None else default[0]), (int(hi) if hi is not None else default[1]), "processor files"


class QwenMedia(MediaRule):
    """Qwen2-VL-family ``smart_resize`` (factor = patch x merge, pixel bounds on h x w); grid (1, h/p, w/p)
    per image, LM tokens = grid / merge^2. Video: Qwen2/2.5-VL resize each frame with the video bounds and
    pad the frames to a multiple of ``temporal_patch_size``; Qwen3-VL (``Qwen3VLVideoProcessor``) compares
    the bounds with t_bar x h x w over the whole clip (``smart_resize_video``) and, only with
    ``cap_pixels_per_frame`` (unset, i.e. off, in transformers 5.24), caps each frame at
    min(max_video_tokens x factor^2, longest_edge / frames), floored at 1.05 x shortest_edge. Frames are the
    sampled ones (fps sampling happens before)."""

    def __init__(self, family: str):
        self.family = family

    def settings(self, spec) -> dict:
        pre = spec.processor.get("preprocessor_config.json", {})
        lo, hi, origin = pixel_bounds(pre, QWEN_IMAGE_BOUNDS[self.family], "reference checkpoint default")
        out = {"min_pixels": lo, "max_pixels": hi, "source": origin}
        vid = spec.processor.get("video_preprocessor_config.json", {})
        if self.family in QWEN_VIDEO_BOUNDS:
            vlo, vhi, vorigin = pixel_bounds(vid, QWEN_VIDEO_BOUNDS[self.family], "reference checkpoint default")
            out["video"] = {"min_pixels": vlo, "max_pixels": vhi, "source": vorigin}
        else:
            vlo, vhi, vorigin = pixel_bounds(vid, QWEN3_VIDEO_BOUNDS, "reference checkpoint default")
            out["video"] = {"min_pixels": vlo, "max_pixels": vhi, "source": vorigin,
                            "cap_pixels_per_frame": bool(vid.get("cap_pixels_per_frame", False)),
                            "max_video_tokens": int(vid.get("max_video_tokens", QWEN3_MAX_VIDEO_TOKENS))}
        return out

    def image(self, spec, height: int, width: int) -> DerivedMedia:
        height, width = positive((height, width), "image size (H, W pixels)")
        v, s = spec.vision, self.settings(spec)
        h, w = smart_resize(height, width, v.patch_size * v.spatial_merge_size, s["min_pixels"], s["max_pixels"])
        grid = (1, h // v.patch_size, w // v.patch_size)
        return DerivedMedia("image", (height, width), (h, w), grid, grid[1] * grid[2] // v.merge_unit)

    def video(self, spec, frames: int, height: int, width: int) -> DerivedMedia:
        frames, height, width = positive((frames, height, width), "video size (T frames, H, W pixels)")
        v, s = spec.vision, self.settings(spec)["video"]
        factor = v.patch_size * v.spatial_merge_size
        if self.family in QWEN_VIDEO_BOUNDS:
            h, w = smart_resize(height, width, factor, s["min_pixels"], s["max_pixels"])
        else:
            max_pixels = s["max_pixels"]
            if s["cap_pixels_per_frame"]:
                per_frame = max(min(s["max_video_tokens"] * factor * factor, max_pixels // frames),
                                int(s["min_pixels"] * 1.05))
                max_pixels = per_frame * frames
            h, w = smart_resize_video(frames, height, width, v.temporal_patch_size, factor, s["min_pixels"],
                                      max_pixels)
        t = -(-frames // v.temporal_patch_size)
        grid = (t, h // v.patch_size, w // v.patch_size)
        return DerivedMedia("video", (frames, height, width), (h, w), grid, t * grid[1] * grid[2] // v.merge_unit)


def qwen_media(family: str) -> QwenMedia:
    return QwenMedia(family)
