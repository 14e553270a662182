"""Media rules against transformers' own processors: the same pixels must give the same grids / tiles.

Seeded, bounded hypothesis fuzz compares the rule functions with transformers' functions on thousands of
sizes; a few end-to-end cases run HF's image processors (PIL backend) on real arrays.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

pytest.importorskip("transformers")

from vlm_perf.arch import load_model, preset_config, spec_from_config  # noqa: E402
from vlm_perf.arch.families import FAMILIES  # noqa: E402
from vlm_perf.arch.families.internvl import tiled_canvas  # noqa: E402
from vlm_perf.arch.resize import smart_resize  # noqa: E402

FUZZ = settings(derandomize=True, deadline=None, max_examples=400)
sizes = st.integers(min_value=8, max_value=6000)


@FUZZ
@given(h=sizes, w=sizes, lo=st.integers(1, 6), hi=st.integers(1, 16))
def test_internvl_canvas_equals_got_ocr2(h, w, lo, hi):
    from transformers.models.got_ocr2.image_processing_pil_got_ocr2 import get_optimal_tiled_canvas

    lo, hi = min(lo, hi), max(lo, hi)
    assert tiled_canvas(h, w, 448, lo, hi) == get_optimal_tiled_canvas((h, w), (448, 448), lo, hi)


@FUZZ
@given(h=sizes, w=sizes, factor=st.sampled_from([28, 32]), lo=st.sampled_from([56 * 56, 256 * 256, 3136]),
       hi=st.sampled_from([28 * 28 * 1280, 28 * 28 * 16384, 4096 * 4096, 28 * 28 * 256]))
def test_qwen_smart_resize_equals_transformers(h, w, factor, lo, hi):
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import smart_resize as hf_smart_resize

    if max(h, w) / min(h, w) > 200:
        return
    assert smart_resize(h, w, factor, lo, hi) == hf_smart_resize(h, w, factor, lo, hi)


def _image(h, w):
    import numpy as np

    return np.random.default_rng(0).integers(0, 256, size=(h, w, 3), dtype=np.uint8)


@pytest.mark.parametrize("size", [(1080, 1920), (333, 517), (64, 2000)])
def test_qwen2_5_vl_image_rule_equals_hf_processor(size):
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    processor = {"preprocessor_config.json": {"min_pixels": 3136, "max_pixels": 28 * 28 * 1024}}
    cfg = {k: v for k, v in preset_config("qwen2.5-vl-7b").items() if not k.startswith("_")}
    spec = spec_from_config(cfg, processor=processor)
    hf = Qwen2VLImageProcessorPil(min_pixels=3136, max_pixels=28 * 28 * 1024, patch_size=14, merge_size=2,
                                  temporal_patch_size=2)
    out = hf(images=[_image(*size)], return_tensors="np")
    derived = FAMILIES["qwen2_5_vl"].media.image(spec, *size)
    assert list(derived.grid) == out["image_grid_thw"][0].tolist()


@pytest.mark.parametrize("size", [(1080, 1920), (448, 448), (300, 2000), (2000, 300)])
def test_internvl_image_rule_equals_hf_processor(size):
    from transformers import InternVLProcessor
    from transformers.models.got_ocr2.image_processing_pil_got_ocr2 import GotOcr2ImageProcessorPil

    spec = load_model("internvl3-8b")
    hf = GotOcr2ImageProcessorPil(size={"height": 448, "width": 448}, min_patches=1, max_patches=12,
                                  crop_to_patches=False)  # as the -hf checkpoints ship it
    out = hf(images=[_image(*size)], return_tensors="np", **InternVLProcessor.images_kwargs)
    derived = FAMILIES["internvl"].media.image(spec, *size)
    assert derived.tiles == int(out["num_patches"][0]) == out["pixel_values"].shape[0]
    assert derived.visual_tokens == 256 * derived.tiles


@pytest.fixture(scope="module")
def qwen3_video_processors():
    from transformers.models.qwen3_vl.video_processing_qwen3_vl import Qwen3VLVideoProcessor

    kw = dict(size={"shortest_edge": 4096, "longest_edge": 25165824}, patch_size=16, merge_size=2,
              temporal_patch_size=2)  # as the Qwen3-VL checkpoints' video_preprocessor_config.json ship it
    return {cap: Qwen3VLVideoProcessor(**kw, cap_pixels_per_frame=cap) for cap in (False, True)}


@settings(derandomize=True, deadline=None, max_examples=200)
@given(frames=st.integers(2, 256), h=st.integers(16, 2160), w=st.integers(16, 3840), cap=st.booleans())
def test_qwen3_video_rule_equals_hf_video_processor(qwen3_video_processors, frames, h, w, cap):
    if max(h, w) / min(h, w) > 100:
        return
    spec = load_model("qwen3-vl-8b")
    spec = spec.__class__(**{**spec.__dict__, "processor": {"video_preprocessor_config.json": {
        "size": {"shortest_edge": 4096, "longest_edge": 25165824}, "cap_pixels_per_frame": cap}}})
    derived = FAMILIES["qwen3_vl"].media.video(spec, frames, h, w)
    t, gh, gw = derived.grid
    assert t * gh * gw == qwen3_video_processors[cap].get_num_of_video_patches(frames, h, w)
    assert t == -(-frames // 2) and derived.visual_tokens == t * gh * gw // 4


@FUZZ
@given(h=sizes, w=sizes, tiles=st.integers(1, 8), tile=st.sampled_from([16, 448, 560]))
def test_mllama_canvas_equals_mllama_image_processor(h, w, tiles, tile):
    """Mllama's tile arrangement against ``MllamaImageProcessorPil``'s own ``get_optimal_tiled_canvas``."""
    from transformers.models.mllama.image_processing_pil_mllama import get_optimal_tiled_canvas

    from vlm_perf.arch.families.mllama import best_canvas

    rows, cols = best_canvas(h, w, tiles, tile)
    assert (rows * tile, cols * tile) == tuple(int(x) for x in get_optimal_tiled_canvas(h, w, tiles, tile))
