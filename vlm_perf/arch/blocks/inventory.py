"""Sums over a whole inventory (every kind): stored parameters per part."""

from __future__ import annotations

from .heads import MTPModules


def inventory_params(blocks, part: str | None = None) -> int:
    """Stored parameters of an inventory (optionally of one part): sum of count x params()."""
    return sum(b.count * b.params() for b in blocks if part is None or b.part == part
               if not isinstance(b, MTPModules))
