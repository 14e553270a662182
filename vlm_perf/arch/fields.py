"""Config field reader that names the missing or bad key (with its config section) in the error."""

from __future__ import annotations

import builtins
import math
from typing import Any, Mapping

from ..errors import ConfigError, UnsupportedModelError
from .validate import bounded


class Fields:
    """Read required / optional fields of one config section (``""`` top level, ``vision_config``, ...)."""

    def __init__(self, data: Mapping[str, Any], section: str, source: str):
        self.data, self.section, self.source = data, section, source

    def name_of(self, key: str) -> str:
        """``section.key`` as error messages name it."""
        return f"{self.section}.{key}" if self.section else key

    def req(self, *keys: str) -> Any:
        for key in keys:
            value = self.data.get(key)
            if value is not None:
                return value
        raise ConfigError(f"{self.source}: config lacks required field {' or '.join(self.name_of(k) for k in keys)}")

    def opt(self, key: str, default: Any = None) -> Any:
        value = self.data.get(key)
        return default if value is None else value

    # ``builtins.int`` in the annotations below: inside the class body ``int`` names this method
    def int(self, *keys: str) -> builtins.int:
        value = self.req(*keys)
        if (isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value)
                or int(value) != value or value < 0):
            raise ConfigError(f"{self.source}: field {self.name_of(keys[0])} must be a non-negative integer, "
                              f"got {bounded(value)}")
        return int(value)

    def square(self, key: str, default: Any = None) -> builtins.int:
        """A positive side length given as ``n`` or ``[n, n]`` (image/tile/patch size); a non-square
        pair is refused (only square tiles/patches are modelled). ``default`` when the key is absent;
        without one the key is required."""
        value = self.req(key) if default is None else self.opt(key, default)
        if isinstance(value, (list, tuple)):
            if len(value) != 2 or value[0] != value[1]:
                raise UnsupportedModelError(f"{self.source}: {self.name_of(key)} {bounded(value)}: only square "
                                            "tiles/patches are modelled")
            value = value[0]
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise ConfigError(f"{self.source}: field {self.name_of(key)} must be a positive integer, got {bounded(value)}")
        return value

    def int_list(self, key: str, default: Any = None) -> tuple[builtins.int, ...]:
        value = self.opt(key, default)
        if value is None:
            value = self.req(key)
        if not isinstance(value, (list, tuple)) or any(isinstance(v, bool) or not isinstance(v, int) for v in value):
            raise ConfigError(f"{self.source}: field {self.name_of(key)} must be a list of integers, got {bounded(value)}")
        return tuple(value)


def layer_index_note(name: str, indexes: "tuple[builtins.int, ...] | list[builtins.int]", count: builtins.int,
                     what: str = "layers") -> str | None:
    """What is wrong with a config's list of layer indexes (``name``: ``section.key``) against the ``count``
    layers it indexes: entries outside ``0..count-1`` name no layer. transformers tests ``i in indexes`` per layer, so
    such entries change nothing it runs (they are counted as it runs them); the note names them and the layer count
    (a config cut down from a deeper model, or one field edited without the other). None when every entry fits."""
    outside = sorted({i for i in indexes if not 0 <= i < count})
    if not outside:
        return None
    shown = ", ".join(map(str, outside[:8])) + (f" (+{len(outside) - 8} more)" if len(outside) > 8 else "")
    return (f"{name} names {what} {shown} but there are {count} {what} (0..{count - 1}): those entries select no "
            "layer (transformers ignores them; so does the count)")


#: config keys that list layer indexes -> the keys of the same section that give the layer count (first present)
LAYER_INDEX_KEYS: dict[str, tuple[str, ...]] = {
    "fullatt_block_indexes": ("depth", "num_hidden_layers"),  # Qwen2.5-VL / Omni towers
    "deepstack_visual_indexes": ("depth", "num_hidden_layers"),  # Qwen3-VL towers
    "global_attn_indexes": ("num_hidden_layers",),  # SAM encoders (GOT-OCR2, DeepSeek-VL-hybrid)
    "mlp_only_layers": ("num_hidden_layers",),  # Qwen MoE decoders
    "moe_layers": ("num_hidden_layers",),  # Llama 4
    "cross_attention_layers": ("num_hidden_layers",),  # Mllama
}


def layer_index_notes(config: Mapping[str, Any], source: str, section: str = "", depth: builtins.int = 0) -> list[str]:
    """One note per index list of ``config`` (any section, nested configs included) with entries outside the
    layer count its own section states (:func:`layer_index_note`); lists whose section states no count are left to
    the family's defaults. Non-integer entries are the family reader's to refuse."""
    notes: list[str] = []
    if depth > 4:
        return notes
    for key, count_keys in LAYER_INDEX_KEYS.items():
        indexes = config.get(key)
        count = next((config[k] for k in count_keys if k in config), None)
        if (not isinstance(indexes, (list, tuple)) or isinstance(count, bool) or not isinstance(count, builtins.int)
                or any(isinstance(i, bool) or not isinstance(i, builtins.int) for i in indexes)):
            continue
        note = layer_index_note(f"{section}.{key}" if section else key, indexes, count)
        if note:
            notes.append(f"{source}: {note}")
    for key, value in config.items():
        if isinstance(value, Mapping) and key.endswith("config"):
            notes += layer_index_notes(value, source, f"{section}.{key}" if section else key, depth + 1)
    return notes


def text_section(config: Mapping[str, Any]) -> tuple[dict, str]:
    """The LM fields: flat at the top level (released Qwen2/2.5-VL) or nested under ``text_config``
    (top-level keys fill gaps only); the top-level ``tie_word_embeddings`` is authoritative."""
    text = {k: v for k, v in config.items() if k != "vision_config"}
    section = ""
    if isinstance(config.get("text_config"), dict):
        text = {**{k: v for k, v in config.items() if k not in ("text_config", "vision_config")},
                **config["text_config"]}
        section = "text_config"
    if "tie_word_embeddings" in config:
        text["tie_word_embeddings"] = config["tie_word_embeddings"]
    return text, section
