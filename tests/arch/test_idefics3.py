"""Idefics3 / SmolVLM family: the image-splitting rule against transformers' own image-processor functions
(hand cases + seeded bounded fuzz; pixels replaced by zero-stride arrays so only shapes are computed), the
SmolVLM2 preset against transformers' meta-device count, and clear errors."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from vlm_perf.arch import load_model, preset_config, spec_from_config
from vlm_perf.arch.families import FAMILIES
from vlm_perf.arch.params import count_params
from vlm_perf.errors import ConfigError, UnsupportedModelError


def _spec(longest=None, tile=None, split=True):
    pre = {"do_image_splitting": split}
    if longest:
        pre["size"] = {"longest_edge": longest}
    if tile:
        pre["max_image_size"] = {"longest_edge": tile}
    return spec_from_config(preset_config("smolvlm2-500m"), processor={"preprocessor_config.json": pre})


def _hf_tiles(h: int, w: int, longest: int, tile: int, smolvlm: bool) -> tuple[int, int, int]:
    """(rows, cols, images into the tower) by transformers' own processor methods on a shape-only image."""
    if smolvlm:
        from transformers.models.smolvlm import image_processing_pil_smolvlm as mod
        proc = mod.SmolVLMImageProcessorPil()
    else:
        from transformers.models.idefics3 import image_processing_pil_idefics3 as mod
        proc = mod.Idefics3ImageProcessorPil()
    blank = lambda hh, ww: np.broadcast_to(np.zeros(1, np.float32), (3, hh, ww))
    proc.resize = lambda image, size, resample=None, **kw: blank(size.height, size.width)
    nh, nw = mod.get_resize_output_image_size(blank(h, w), resolution_max_side=longest)
    image = proc.resize_for_vision_encoder(blank(nh, nw), tile)
    frames, rows, cols = proc.split_images(image, max_image_size={"longest_edge": tile})
    return rows, cols, len(frames)


@pytest.mark.parametrize("size,canvas,tiles", [
    ((30, 50), (3, 4), 13),     # width 2048, height int(2048 * 30 / 50) = 1228 (even) -> up to 1536 = 3 x 512
    ((10, 10), (4, 4), 17),     # upscaled: 2048 x 2048 = 4 x 4 tiles + global
    ((512, 512), (4, 4), 17),
    ((100, 1000), (1, 4), 5),   # 2048 wide, 204.8 -> 204 -> up to 512
])
def test_split_by_hand(size, canvas, tiles):
    spec = _spec()
    m = FAMILIES["smolvlm"].media.image(spec, *size)
    assert tuple(m.detail["canvas"]) == canvas and m.tiles == tiles
    assert m.grid == (tiles, 32, 32)  # 512 / 16 patches per tile side
    assert m.visual_tokens == tiles * (32 // 4) ** 2  # scale_factor 4: 64 tokens per tile
    assert _hf_tiles(*size, 2048, 512, smolvlm=True) == (*canvas, tiles)


def test_unsplit_is_one_tile():
    m = FAMILIES["smolvlm"].media.image(_spec(split=False), 3000, 77)
    assert m.tiles == 1 and m.visual_tokens == 64


@settings(derandomize=True, deadline=None, max_examples=120)
@given(h=st.integers(1, 6000), w=st.integers(1, 6000), tile=st.sampled_from([32, 364, 512]),
       k=st.integers(1, 5), smol=st.booleans())
def test_split_fuzz_against_transformers(h, w, tile, k, smol):
    longest = k * tile
    family = "smolvlm" if smol else "idefics3"
    cfg = dict(preset_config("smolvlm2-500m"), model_type=family, scale_factor=1)  # any tile side shuffles
    cfg["vision_config"] = dict(cfg["vision_config"], patch_size=4, image_size=tile, model_type=f"{family}_vision")
    spec = spec_from_config(cfg, processor={"preprocessor_config.json": {
        "size": {"longest_edge": longest}, "max_image_size": {"longest_edge": tile}}})
    m = FAMILIES[family].media.image(spec, h, w)
    rows, cols, images = _hf_tiles(h, w, longest, tile, smol)
    assert tuple(m.detail["canvas"]) == (rows, cols)
    assert m.tiles == images


def test_preset_matches_transformers_meta_count():
    torch = pytest.importorskip("torch")
    import transformers

    spec = load_model("smolvlm2-500m")
    c = count_params(spec)
    assert c.total == 460_173_504  # tied head; the name's "500M" does not decide the tie (see the preset note)
    cfg = {k: v for k, v in preset_config("smolvlm2-500m").items() if not k.startswith("_vlm_perf")}
    with torch.device("meta"):
        model = transformers.SmolVLMForConditionalGeneration(transformers.AutoConfig.for_model(**cfg))
    numel = lambda mod: sum(p.numel() for p in mod.parameters())
    assert c.total == numel(model)
    assert c.vision_tower == numel(model.model.vision_model)
    assert c.merger == numel(model.model.connector)


def test_errors_are_one_line():
    cfg = preset_config("smolvlm2-500m")
    with pytest.raises(ConfigError, match="scale_factor"):
        spec_from_config(dict(cfg, scale_factor=3))
    with pytest.raises(UnsupportedModelError, match="text_config.model_type"):
        spec_from_config(dict(cfg, text_config=dict(cfg["text_config"], model_type="qwen2")))
    with pytest.raises(UnsupportedModelError, match="takes no videos"):
        FAMILIES["idefics3"].media.video(_spec(), 4, 100, 100)
    with pytest.raises(UnsupportedModelError, match="video frame"):
        FAMILIES["smolvlm"].media.video(_spec(tile=100), 4, 100, 100)
    with pytest.raises(UnsupportedModelError, match="tile"):
        FAMILIES["smolvlm"].media.image(_spec(tile=100), 100, 100)


def test_smolvlm_video_frames_are_square_tiles_by_hand():
    """SmolVLM2-500M: every sampled frame becomes one 512 x 512 tile (SmolVLMVideoProcessor.resize ends with the
    square max_image_size), 32 x 32 patches, pixel shuffle 4 -> 64 placeholders per frame, whatever the aspect."""
    spec = _spec()
    v = FAMILIES["smolvlm"].media.video(spec, 16, 1080, 1920)
    assert (v.grid, v.visual_tokens, v.resized, v.tiles) == ((16, 32, 32), 16 * 64, (512, 512), 16)
