"""The base of every block kind: :class:`Block` (a part and a count of identical copies), the parameter arithmetic
shared by all kinds (``linear_params``, ``norm_params``) and :func:`inventory_params`. Pure, no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ...errors import ConfigError
from ..parts import DEEPSTACK_MERGER, LANGUAGE_MODEL, MERGER, STAGES, VISION_TOWER


def linear_params(n_in: int, n_out: int, bias: bool) -> int:
    """nn.Linear(n_in, n_out): weight (+ bias)."""
    return n_in * n_out + (n_out if bias else 0)


def norm_params(width: int, kind: str) -> int:
    """``layernorm``: weight + bias; ``rmsnorm``: weight; ``none``: 0."""
    if kind == "layernorm":
        return 2 * width
    if kind == "rmsnorm":
        return width
    if kind == "none":
        return 0
    raise ValueError(f"unknown norm kind {kind!r}")


@dataclass(frozen=True)
class Block:
    """Base class of every block kind: ``part`` (stage) and ``count`` identical copies."""

    kind: ClassVar[str] = "block"
    part: str
    count: int

    def __post_init__(self) -> None:
        if self.part not in STAGES:
            raise ValueError(f"{type(self).__name__}: part must be one of {', '.join(STAGES)}, got {self.part!r}")
        if self.count < 0:
            raise ConfigError(f"{type(self).__name__}: count must be >= 0, got {self.count}")

    def params(self) -> int:
        """Stored parameters of ONE copy."""
        raise NotImplementedError

    def describe(self) -> str:
        """One line for docs/families.md (generated from the inventory)."""
        raise NotImplementedError


# every stage a block may belong to, re-exported for family modules
PARTS = (VISION_TOWER, MERGER, DEEPSTACK_MERGER, LANGUAGE_MODEL)
