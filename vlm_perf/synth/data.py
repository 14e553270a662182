"""Synthetic SFT samples: text lengths, image sizes (Qwen smart-resize), video clips.

A sample is its LM length (text tokens + merged visual tokens + vision start/end tokens) and its
``[t, h, w]`` grids in patches before merging, exactly what the metadata schema v1 records.

Images: the source side sqrt(H*W) follows a log-normal mixture (``ResolutionMode``), the aspect
ratio a log-normal around the mode's ratio; the image is then resized as Qwen's processors do
(``smart_resize``): each side rounded to a multiple of ``factor`` = patch x merge px (28 for
Qwen2/2.5-VL, 32 for Qwen3-VL), scaled down/up to stay within [min_pixels, max_pixels]. An image
is one temporal slice (t = 1: the processor repeats the frame to fill the temporal patch of 2).

Videos: duration log-normal, frames = duration x fps rounded to an even count (temporal patch 2),
t = frames / 2; each frame resized with a per-frame budget min(frame_max_pixels, total_pixels /
frames), never below frame_min_pixels.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..stats.resize import MAX_ASPECT, smart_resize  # noqa: F401  (re-exported)
from .spec import DataMix, ImageDist, TextDist, VideoDist



@dataclass(frozen=True)
class Sample:
    """One training sample: LM length and its media grids (patches before merging)."""

    tokens: int
    text_tokens: int
    image_grids: tuple[tuple[int, int, int], ...] = ()
    video_grids: tuple[tuple[int, int, int], ...] = ()

    @property
    def kind(self) -> str:
        return "video" if self.video_grids else "image" if self.image_grids else "text"


def _lognormal_int(rng: np.random.Generator, dist: TextDist) -> int:
    value = rng.lognormal(math.log(dist.median_tokens), dist.sigma)
    return int(min(max(round(value), dist.min_tokens), dist.max_tokens))


def image_grid(rng: np.random.Generator, dist: ImageDist, patch: int, merge: int) -> tuple[int, int, int]:
    weights = np.array([m.weight for m in dist.modes], dtype=float)
    mode = dist.modes[int(rng.choice(len(dist.modes), p=weights / weights.sum()))]
    side = rng.lognormal(math.log(mode.median_side), mode.sigma)
    aspect = min(max(rng.lognormal(math.log(mode.aspect), mode.aspect_sigma), 1 / 8), 8)
    height, width = side / math.sqrt(aspect), side * math.sqrt(aspect)
    h, w = smart_resize(height, width, patch * merge, dist.min_pixels, dist.max_pixels)
    return (1, h // patch, w // patch)


def video_grid(rng: np.random.Generator, dist: VideoDist, patch: int, merge: int,
               temporal_patch: int = 2) -> tuple[int, int, int]:
    seconds = rng.lognormal(math.log(dist.median_seconds), dist.sigma)
    frames = int(round(seconds * dist.fps / temporal_patch)) * temporal_patch
    frames = min(max(frames, dist.min_frames), dist.max_frames)
    budget = max(min(dist.frame_max_pixels, dist.total_pixels / frames), dist.frame_min_pixels)
    h, w = smart_resize(dist.height, dist.width, patch * merge, dist.frame_min_pixels, int(budget))
    return (frames // temporal_patch, h // patch, w // patch)


def merged_tokens(grid: tuple[int, int, int], merge: int) -> int:
    t, h, w = grid
    return t * (h // merge) * (w // merge)


class SampleStream:
    """Endless seeded stream of samples that fit in ``seq_length`` (longer ones are dropped, as SFT
    pipelines drop over-long examples; ``dropped`` counts them)."""

    def __init__(self, mix: DataMix, rng: np.random.Generator, seq_length: int, patch: int, merge: int):
        self.rng, self.seq_length, self.patch, self.merge = rng, seq_length, patch, merge
        self.set_mix(mix)
        self.dropped = 0

    def set_mix(self, mix: DataMix) -> None:
        """Draw from ``mix`` from now on (samples already in open packs stay)."""
        if (mix.image and mix.images is None) or (mix.video and mix.videos is None):
            raise ValueError("data mix has image/video samples but no image/video distribution")
        self.mix = mix
        probs = np.array([mix.text_only, mix.image, mix.video], dtype=float)
        self.probs = probs / probs.sum()

    def _draw(self) -> Sample:
        mix, rng = self.mix, self.rng
        kind = int(rng.choice(3, p=self.probs))
        if kind == 0:
            text = _lognormal_int(rng, mix.text)
            return Sample(tokens=text, text_tokens=text)
        text = _lognormal_int(rng, mix.media_text)
        images: list[tuple[int, int, int]] = []
        videos: list[tuple[int, int, int]] = []
        if kind == 1:
            count = min(1 + int(rng.poisson(mix.images.extra_images_mean)), mix.images.max_images)
            images = [image_grid(rng, mix.images, self.patch, self.merge) for _ in range(count)]
        else:
            videos = [video_grid(rng, mix.videos, self.patch, self.merge)]
        visual = sum(merged_tokens(g, self.merge) + mix.media_wrap_tokens for g in images + videos)
        return Sample(tokens=text + visual, text_tokens=text, image_grids=tuple(images), video_grids=tuple(videos))

    def __iter__(self):
        return self

    def __next__(self) -> Sample:
        while True:
            sample = self._draw()
            if sample.tokens <= self.seq_length:
                return sample
            self.dropped += 1
