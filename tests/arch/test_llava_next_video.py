"""LLaVA-NeXT-Video family (``llava_next_video``): video tokens and FLOPs rows by hand, the tie rule, one-line errors."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from vlm_perf.arch import spec_from_config
from vlm_perf.arch.families import FAMILIES
from vlm_perf.errors import UnsupportedModelError

RULE = FAMILIES["llava_next_video"].media
PRESETS = Path(__file__).parents[1] / "verify" / "families" / "presets"
# LLaVA-NeXT-Video shares LLaVA-NeXT's tower, projector and LM shapes; the video fields are LlavaNextVideoConfig's
BASE = json.loads((PRESETS / "llava-v1.6-mistral-7b-hf.json").read_text())
VIDEO = {**BASE, "model_type": "llava_next_video", "architectures": ["LlavaNextVideoForConditionalGeneration"],
         "spatial_pool_mode": "average", "spatial_pool_stride": 2, "video_token_index": 32000,
         "image_token_index": 32001}


def _spec(config=VIDEO):
    return spec_from_config(copy.deepcopy(config), name="lnv-test")


def test_video_tokens_and_projector_rows_by_hand():
    """336 px frames, patch 14: 24 x 24 patches (+ CLS in the tower), pooled to 12 x 12 = 144 rows / tokens."""
    from vlm_perf.flops import compute_flops
    from vlm_perf.stats import BatchStats

    spec = _spec()
    v = RULE.video(spec, 8, 480, 640)
    assert (v.grid, v.visual_tokens, v.resized) == ((8, 24, 24), 8 * 144, (336, 336))
    stats = BatchStats.from_batch(seq_lens=[2000], video_grids=[v.grid], spec=spec)
    proj = compute_flops(spec, stats, mode="forward").parts["projector"]
    assert proj == 2 * 8 * 144 * (1024 * 4096 + 4096 * 4096)
    assert stats.vision_cls_tokens == 8  # every frame runs CLIP with its CLS
    image = RULE.image(spec, 672, 672)
    assert (image.tiles, image.visual_tokens) == (5, 576 + 48 * 48 + 48)  # images as LLaVA-NeXT


def test_tie_rule_is_llavas():
    """LlavaNextVideoConfig forwards text_config's true tie_word_embeddings (LlavaNextConfig does not)."""
    cfg = copy.deepcopy(VIDEO)
    cfg["text_config"]["tie_word_embeddings"] = True
    assert _spec(cfg).lm.tie_word_embeddings is True


@pytest.mark.parametrize("change,match", [
    ({"spatial_pool_mode": "conv"}, "only 'average' / 'max'"),
    ({"spatial_pool_stride": 3}, "spatial_pool_stride 3"),
])
def test_unmodelled_pooling_is_refused(change, match):
    with pytest.raises(UnsupportedModelError, match=match) as exc:
        _spec({**VIDEO, **change})
    assert "\n" not in str(exc.value)
