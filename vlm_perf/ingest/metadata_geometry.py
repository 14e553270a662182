"""What the metadata reader needs to know of the model: tower geometry (patch and merge sizes, CLS positions, windows,
cross-attention keys) and whether per-image grids give its vision statistics. Reads a `ModelSpec`; no I/O.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..stats import DEFAULT_MERGE_SIZE

if TYPE_CHECKING:  # pragma: no cover
    from ..arch.spec import ModelSpec


def geometry(spec: "ModelSpec | None") -> tuple[int, int | None]:
    """(spatial merge size, window side in merged tokens) of the model's vision tower."""
    vision = spec.vision if spec is not None else None
    if vision is None:
        return DEFAULT_MERGE_SIZE, None
    return int(vision.spatial_merge_size), vision.window_side_merged


def cls_per_frame(spec: "ModelSpec | None") -> int:
    """CLS tokens the tower prepends to each frame/tile sequence (InternViT: 1; 0 without a tower)."""
    vision = spec.vision if spec is not None else None
    return int(getattr(vision, "cls_per_frame", 0) or 0) if vision is not None else 0


def lm_window(spec: "ModelSpec | None") -> int | None:
    """The LM's sliding window in tokens (None: no sliding-window layers; one window per model, as `LMSpec` holds)."""
    return getattr(getattr(spec, "lm", None), "sliding_window", None) or None


def windowed_attention(spec: "ModelSpec | None") -> int | None:
    """The sliding window the model's FLOPs read (an attention block with a window), else None: PaliGemma 2 has
    sliding layers but is billed as the eager square, so nothing reads the statistic and no bound is noted."""
    from ..arch.blocks import DecoderAttention

    found = [b.window for b in getattr(spec, "blocks", ()) if isinstance(b, DecoderAttention) and b.window]
    return int(found[0]) if found else None


def cross_kv_tokens_per_frame(spec: "ModelSpec | None") -> int | None:
    """Vision tokens per frame of the model's cross-attention layers (Mllama: its tiles' CLS tokens); None without."""
    from ..arch.blocks import CrossAttention

    found = [b for b in getattr(spec, "blocks", ()) if isinstance(b, CrossAttention)]
    return int(found[0].kv_tokens_per_frame) if found else None


def grids_exact(spec) -> bool:
    """Whether per-image grids give the model's vision statistics: not for a family whose media rule needs the
    whole call (``one_call``: Phi-4-multimodal's separators and padded crops); its grid rows are refused (code 36)."""
    if getattr(spec, "vision", None) is None:
        return True
    from ..arch.families import FAMILIES

    family = FAMILIES.get(getattr(spec, "family", ""))
    return not (family is not None and hasattr(family.media, "one_call"))


def audio_unmodelled(spec) -> bool:
    """Whether the model has an audio encoder (audio blocks in its inventory) whose geometry is not modelled
    (``spec.audio`` None: Phi-4-multimodal with another time_reduction); a model without one gives False."""
    if spec is None or getattr(spec, "audio", None) is not None:
        return False
    from ..arch.parts import AUDIO

    return any(getattr(b, "part", None) == AUDIO for b in getattr(spec, "blocks", ()))
