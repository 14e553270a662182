"""Registry of FLOPs conventions. ``exact`` is the default; the others reproduce other tools."""

from __future__ import annotations

import difflib

from .base import Convention
from .exact import EXACT
from .megatron import MBRIDGE_PR2575, MEGATRON_BRIDGE, MEGATRON_LM
from .others import SIX_ND, TORCHTITAN, VERL

CONVENTIONS: dict[str, Convention] = {c.name: c for c in (
    EXACT, MEGATRON_LM, MEGATRON_BRIDGE, MBRIDGE_PR2575, TORCHTITAN, VERL, SIX_ND)}


def get_convention(name: str) -> Convention:
    key = name.strip().lower()
    if key not in CONVENTIONS:
        close = difflib.get_close_matches(key, CONVENTIONS, n=2, cutoff=0.4)
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        raise ValueError(f"unknown convention {name!r}{hint} (known: {', '.join(CONVENTIONS)})")
    return CONVENTIONS[key]


__all__ = ["CONVENTIONS", "Convention", "get_convention"]
