"""Remote-code ``NemotronH_Nano_VL_V2`` configs (Nemotron-Nano-12B-v2-VL) read through the ``nemotron_h_omni``
family (vlm_perf/arch/families/nano_vl_v2.py).

Independent references: hand arithmetic from the dims the public sources give (vLLM
``vllm/transformers_utils/configs/radio.py`` VIT_TIMM_DIM_BY_NAME and ``models/radio.py`` ``ClsToken``;
Megatron-Bridge ``nemotron_vl_provider.py`` for the 12B-v2 LM and tower), transformers' own ``RadioModel`` on the
meta device, and the spec built from the equivalent transformers ``nemotron_h_omni`` config written by hand here.
"""

from __future__ import annotations

import pytest

from vlm_perf.arch import spec_from_config
from vlm_perf.arch.families.nano_vl_v2 import RADIO_TIMM_DIMS, prefix_tokens
from vlm_perf.arch.params import total_params
from vlm_perf.arch.parts import MERGER, VISION_TOWER
from vlm_perf.errors import ConfigError, UnsupportedModelError

# Nemotron-Nano-12B-v2 LM as Megatron-Bridge's NemotronNano12Bv2VLModelProvider states it (hybrid pattern, 5120,
# 40/8 heads x 128, MLP 20480, Mamba 128 heads x 80, state 128, 8 groups); conv 4 / chunk 128 / vocab 131072
# untied are the Nemotron-H values vlm-perf's other Nemotron-H tests use [vocab and tying not verified here].
PATTERN = "M-M-M-M*-M-M-M-M*-M-M-M-M*-M-M-M-M*-M-M-M-M*-M-M-M-M*-M-M-M-M-"
LLM = {"model_type": "nemotron_h", "hidden_size": 5120, "vocab_size": 131072, "num_attention_heads": 40,
       "num_key_value_heads": 8, "head_dim": 128, "intermediate_size": 20480, "mamba_num_heads": 128,
       "mamba_head_dim": 80, "ssm_state_size": 128, "n_groups": 8, "conv_kernel": 4, "chunk_size": 128,
       "hybrid_override_pattern": PATTERN, "num_hidden_layers": 62, "tie_word_embeddings": False}
ARGS = {"model": "vit_huge_patch16_224", "cls_token_per_teacher": True, "register_multiple": 10,
        "teachers": [{"name": "clip"}, {"name": "siglip"}, {"name": "dino_v2"}]}


def remote(**over):
    """A remote-layout config with the 12B-v2-VL shapes; its teachers / registers are illustrative (3 + 7, the
    transformers RadioConfig defaults), not the released checkpoint's (its config.json was not readable here)."""
    cfg = {"model_type": "NemotronH_Nano_VL_V2", "llm_config": dict(LLM), "force_image_size": 512,
           "downsample_ratio": 0.5, "projector_hidden_size": 20480, "vit_hidden_size": 1280,
           "vision_config": {"patch_size": 16, "args": dict(ARGS)}}
    cfg.update(over)
    return cfg


def part_params(spec, part):
    return sum(b.count * b.params() for b in spec.blocks if b.part == part)


def test_prefix_token_rule():
    # ClsToken: one class token per unique teacher name (or 1), then register_multiple - cls % register_multiple
    assert prefix_tokens(ARGS, "t") == (3, 7)
    assert prefix_tokens(dict(ARGS, teachers=ARGS["teachers"] + [{"name": "clip"}]), "t") == (3, 7)
    assert prefix_tokens(dict(ARGS, cls_token_per_teacher=False), "t") == (1, 9)
    assert prefix_tokens({"model": "x", "register_multiple": 8, "cls_token_per_teacher": True,
                          "teachers": [{"name": n} for n in "abcd"]}, "t") == (4, 4)
    assert prefix_tokens({"model": "x"}, "t") == (1, 0)


def test_tower_params_by_hand_vit_huge():
    spec = spec_from_config(remote())
    d, layers, mlp, patch = 1280, 32, 5120, 16
    per_layer = (2 * 2 * d                  # norm1, norm2 (weight + bias)
                 + d * 3 * d + 3 * d        # qkv with bias
                 + d * d + d                # proj with bias
                 + d * mlp + mlp            # fc1
                 + mlp * d + d              # fc2
                 + 2 * d)                   # ls1, ls2
    tower = (layers * per_layer
             + 3 * patch * patch * d        # patch projection, no bias; no video projection (temporal patch 1)
             + (2048 // patch) ** 2 * d     # position table of cpe_max_size 2048
             + (3 + 7) * d)                 # class + register tokens
    assert part_params(spec, VISION_TOWER) == tower == 651_727_360
    # projector: RMSNorm(4d) -> Linear(4d -> 20480) -> relu² -> Linear(20480 -> 5120), no biases
    assert part_params(spec, MERGER) == 4 * d + 4 * d * 20480 + 20480 * 5120 == 209_720_320


def test_tower_params_equal_transformers_radio_meta():
    torch = pytest.importorskip("torch")
    radio = pytest.importorskip("transformers.models.radio.modeling_radio")
    from transformers.models.radio.configuration_radio import RadioConfig

    # RadioConfig written by hand from the name table's ViT-H row (no video projection: temporal patch None)
    with torch.device("meta"):
        model = radio.RadioModel(RadioConfig(hidden_size=1280, num_hidden_layers=32, num_attention_heads=16,
                                             mlp_ratio=4.0, patch_size=16, max_img_size=2048, num_cls_tokens=3,
                                             num_registers=7))
    hf = sum(p.numel() for n, p in model.named_parameters() if "input_conditioner" not in n)
    assert part_params(spec_from_config(remote()), VISION_TOWER) == hf


def test_total_near_published_12_6b():
    total = total_params(spec_from_config(remote()))
    d = 5120
    mamba = (d * (2 * 10240 + 2 * 8 * 128 + 128)            # in_proj: z, x, B, C, dt
             + 12288 * 4 + 12288                             # conv1d over x, B, C (+ bias)
             + 3 * 128 + 10240 + 10240 * d + d)              # dt_bias, A_log, D; gated norm; out_proj; layer norm
    attention = d * (40 + 2 * 8) * 128 + 40 * 128 * d + d
    mlp = 2 * d * 20480 + d
    lm = 28 * mamba + 6 * attention + 28 * mlp + 2 * 131072 * d + d
    assert total == lm + 651_727_360 + 209_720_320 == 13_171_448_832
    # The model card states 12.6B; this is 4.5 % above it. The LM alone is 12.31 B, of which 1.34 B are the
    # untied embedding and head (tying and vocab not verified); counted once, the total would be 12.50 B.
    assert abs(total / 12.6e9 - 1) < 0.05


def test_equal_to_transformers_layout_spec():
    omni = {"model_type": "nemotron_h_omni", "text_config": dict(LLM), "vision_hidden_size": 1280,
            "projector_hidden_size": 20480, "downsample_ratio": 0.5, "video_temporal_patch_size": 2,
            "vision_config": {"model_type": "radio", "hidden_size": 1280, "num_hidden_layers": 32,
                              "num_attention_heads": 16, "mlp_ratio": 4.0, "patch_size": 16, "max_img_size": 2048,
                              "num_cls_tokens": 3, "num_registers": 7}}
    a, b = spec_from_config(remote()), spec_from_config(omni)
    assert a.lm == b.lm and a.vision == b.vision and a.audio is None
    # the one difference: the omni layout's video tubelet projection (2 frames), absent from the 12B-v2-VL layout
    assert [x for x in a.blocks if x.kind != "image_video_patch_embed"] == \
        [x for x in b.blocks if x.kind != "image_video_patch_embed"]
    assert total_params(b) - total_params(a) == 2 * 3 * 16 * 16 * 1280
    remote_tp2 = remote(vision_config={"patch_size": 16, "video_temporal_patch_size": 2, "args": dict(ARGS)})
    assert spec_from_config(remote_tp2).blocks == b.blocks


@pytest.mark.parametrize("name", sorted(RADIO_TIMM_DIMS))
def test_every_table_name_builds(name):
    width, depth, heads, mlp, _ = RADIO_TIMM_DIMS[name]
    spec = spec_from_config(remote(vit_hidden_size=width, vision_config={"args": dict(ARGS, model=name)}))
    v = spec.vision
    assert (v.hidden_size, v.depth, v.num_heads, v.intermediate_size) == (width, depth, heads, mlp)


def test_refusals():
    with pytest.raises(UnsupportedModelError, match="known: vit_small_patch16_224, .*vit_huge_patch16_224"):
        spec_from_config(remote(vision_config={"args": dict(ARGS, model="vit_giant_patch14_224")}))
    with pytest.raises(UnsupportedModelError, match="`version` name without `args`"):
        spec_from_config(remote(vision_config={"version": "radio_v2.5-h", "patch_size": 16}))
    with pytest.raises(UnsupportedModelError, match="qk_normalization"):
        spec_from_config(remote(vision_config={"args": dict(ARGS, qk_normalization=True)}))
    with pytest.raises(ConfigError, match="vision_hidden_size 1024 differs"):
        spec_from_config(remote(vit_hidden_size=1024))
    with pytest.raises(ConfigError, match="llm_config"):
        spec_from_config({k: v for k, v in remote().items() if k != "llm_config"})


def test_media_refused_for_static_tiling():
    from vlm_perf.arch.families import family_for

    spec = spec_from_config(remote())
    assert spec.extra["image_tiling"] == "static tiles of 512 px"
    media = family_for("NemotronH_Nano_VL_V2").media
    with pytest.raises(UnsupportedModelError, match="InternVL-style"):
        media.image(spec, 1024, 768)
    with pytest.raises(UnsupportedModelError, match="videos of the remote-code"):
        media.video(spec, 8, 512, 512)
