"""First-fit packing of samples into fixed-length sequences.

Samples arrive in stream order. The packer keeps at most ``open_bins`` partially filled
sequences of ``seq_length`` tokens; each sample goes into the first open sequence it fits in,
otherwise a new sequence is opened. When too many are open, the oldest is closed and emitted.
Every sample is its own causal sub-sequence (``seq_lens``); the row is padded to ``seq_length``.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Iterator

from .data import Sample


@dataclass
class Pack:
    """One packed row of ``capacity`` tokens."""

    capacity: int
    samples: list[Sample] = field(default_factory=list)
    used: int = 0

    def fits(self, sample: Sample) -> bool:
        return self.used + sample.tokens <= self.capacity

    def add(self, sample: Sample) -> None:
        self.samples.append(sample)
        self.used += sample.tokens

    @property
    def seq_lens(self) -> list[int]:
        return [s.tokens for s in self.samples]

    @property
    def image_grids(self) -> list[list[int]]:
        return [list(g) for s in self.samples for g in s.image_grids]

    @property
    def video_grids(self) -> list[list[int]]:
        return [list(g) for s in self.samples for g in s.video_grids]


class FirstFitPacker:
    """Iterator over closed packs drawn from a sample iterator."""

    def __init__(self, samples: Iterator[Sample], seq_length: int, open_bins: int = 16):
        self.samples, self.seq_length, self.open_bins = samples, seq_length, open_bins
        self._open: list[Pack] = []
        self._ready: deque[Pack] = deque()

    def __iter__(self):
        return self

    def __next__(self) -> Pack:
        while not self._ready:
            sample = next(self.samples)
            for pack in self._open:
                if pack.fits(sample):
                    pack.add(sample)
                    break
            else:
                pack = Pack(self.seq_length)
                pack.add(sample)
                self._open.append(pack)
            if len(self._open) > self.open_bins:
                self._ready.append(self._open.pop(0))
        return self._ready.popleft()

    def take(self, n: int) -> list[Pack]:
        return [next(self) for _ in range(n)]
