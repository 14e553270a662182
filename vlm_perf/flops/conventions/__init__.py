"""Registry of FLOPs conventions. ``exact`` is the default; the others reproduce other tools' numbers.

Each convention module registers its conventions beside their definitions (:func:`register_convention`);
importing this package imports every module in it (built-in ones first, in the order below), so a new
convention module registers by existing. A plugin registers more at any time and every lookup
(:func:`get_convention`, :func:`names`, ``CONVENTIONS``, the CLI) sees them.
"""

from __future__ import annotations

from ..._modules import import_submodules
from . import exact, megatron, others, hf  # noqa: F401  (the built-in conventions, registered in this order)
from .base import (CONVENTIONS, X3, Convention, ConventionRegistryError, Pin, get_convention, names,
                   register_convention, variants)
from .exact import EXACT
from .megatron import MBRIDGE_PR2575, MEGATRON_BRIDGE, MEGATRON_LM
from .others import SIX_ND, TORCHTITAN, VERL

import_submodules(__name__, __path__)  # any other module of this package registers too (no list to edit)

__all__ = ["CONVENTIONS", "Convention", "ConventionRegistryError", "EXACT", "MBRIDGE_PR2575", "MEGATRON_BRIDGE",
           "MEGATRON_LM", "Pin", "SIX_ND", "TORCHTITAN", "VERL", "X3", "get_convention", "names",
           "register_convention", "variants"]
