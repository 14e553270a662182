"""InternVL inventory parameters vs transformers' own model (meta device, no weights) over config switches.

Seeded, bounded fuzz over the switches that change stored tensors: q/k norm, attention bias, norm type,
mean pooling (final LayerNorm), mask token, absolute positions, tile/patch size, downsample ratio, LM family
(Qwen2 / Qwen3 / Qwen3-MoE) and tied embeddings. Each part must match: vision_tower, projector, LM.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from vlm_perf.arch import spec_from_config  # noqa: E402
from vlm_perf.arch.params import count_params  # noqa: E402


@settings(derandomize=True, deadline=None, max_examples=15)
@given(qk_norm=st.booleans(), bias=st.booleans(), norm=st.sampled_from(["layer_norm", "rms_norm"]),
       mean_pool=st.booleans(), mask=st.booleans(), pos=st.booleans(), tile_patch=st.sampled_from([(32, 4), (56, 7)]),
       ratio=st.sampled_from([0.5, 0.25]), lm=st.sampled_from(["qwen2", "qwen3", "qwen3_moe"]), tie=st.booleans())
def test_internvl_params_equal_transformers(qk_norm, bias, norm, mean_pool, mask, pos, tile_patch, ratio, lm, tie):
    tile, patch = tile_patch
    side = tile // patch
    if side % round(1 / ratio):
        return
    vision = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=48,
                  image_size=[tile, tile], patch_size=[patch, patch], attention_bias=bias, use_qk_norm=qk_norm,
                  norm_type=norm, use_mean_pooling=mean_pool, use_mask_token=mask,
                  use_absolute_position_embeddings=pos)
    text = dict(model_type=lm, vocab_size=100, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=tie)
    if lm == "qwen3_moe":
        text.update(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=16)
    cfg = transformers.InternVLConfig(vision_config=vision, text_config=text, downsample_ratio=ratio,
                                      image_seq_length=int(side * ratio) ** 2, tie_word_embeddings=tie)
    with torch.device("meta"):
        model = transformers.InternVLForConditionalGeneration(cfg)
    numel = lambda mod: sum(p.numel() for p in mod.parameters())
    c = count_params(spec_from_config(cfg.to_dict()))
    assert (c.vision_tower, c.merger, c.lm, c.total) == (
        numel(model.model.vision_tower), numel(model.model.multi_modal_projector),
        numel(model.model.language_model) + (0 if tie else numel(model.lm_head)), numel(model))
