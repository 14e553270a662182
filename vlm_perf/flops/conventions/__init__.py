"""Registry of FLOPs conventions. ``exact`` is the default; the others reproduce other tools' numbers.

Each convention module registers its conventions beside their definitions (:func:`register_convention`);
importing this package registers the built-in ones. A plugin registers more at any time and every lookup
(:func:`get_convention`, :func:`names`, ``CONVENTIONS``, the CLI) sees them.
"""

from __future__ import annotations

from .base import (CONVENTIONS, X3, Convention, ConventionRegistryError, Pin, get_convention, names,
                   register_convention, variants)
from . import exact, megatron, others, hf  # noqa: E402,F401  (register the built-in conventions, in this order)
from ..._modules import import_submodules  # noqa: E402

import_submodules(__name__, __path__)  # any other module of this package registers too (no list to edit)
from .exact import EXACT
from .megatron import MBRIDGE_PR2575, MEGATRON_BRIDGE, MEGATRON_LM
from .others import SIX_ND, TORCHTITAN, VERL

__all__ = ["CONVENTIONS", "Convention", "ConventionRegistryError", "EXACT", "MBRIDGE_PR2575", "MEGATRON_BRIDGE",
           "MEGATRON_LM", "Pin", "SIX_ND", "TORCHTITAN", "VERL", "X3", "get_convention", "names",
           "register_convention", "variants"]
