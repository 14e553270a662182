"""Real checkpoint sizes: each family's HF processor on a preset config (no model built) against the hand
rules of the smoke tests with the real constants. These are the media an ``--image-size H,W`` implementation
must reproduce. Processor settings not in config.json are passed explicitly, as a checkpoint's
preprocessor_config.json would (InternVL max 12 tiles; GLM / Qwen image processor class defaults;
Mistral-Small-3.1 longest edge 1540)."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.measured
pytest.importorskip("torch")
pytest.importorskip("transformers")

from . import load_preset, processor_media  # noqa: E402
from .test_glm4v_harness import glm_grid_by_hand  # noqa: E402
from .test_internvl_harness import tiles_by_hand  # noqa: E402
from .test_llava_onevision_harness import anyres_by_hand  # noqa: E402
from .test_mistral3_harness import resize_by_hand  # noqa: E402
from .test_qwen3_5_harness import qwen_grid_by_hand  # noqa: E402

SIZES = [(448, 672), (1080, 1920), (1920, 1080), (300, 300), (2000, 500)]


@pytest.mark.parametrize("size", SIZES)
def test_internvl3_tiles(size):
    m = processor_media("internvl", load_preset("InternVL3-8B-hf"), image_sizes=[size], max_patches=12)
    tiles = tiles_by_hand(*size, lo=1, hi=12, tile=448)
    assert m["tiles"] == [tiles] and m["visual_tokens"] == 256 * tiles


@pytest.mark.parametrize("size", SIZES)
def test_glm41v_grid_with_class_default_bounds(size):
    m = processor_media("glm4v", load_preset("GLM-4.1V-9B-Thinking"), image_sizes=[size], pixels=None)
    bounds = {"min_pixels": 112 * 112, "max_pixels": 28 * 28 * 15000}  # Glm4vImageProcessor.size defaults
    assert m["image_grids"] == [(1, *glm_grid_by_hand(*size, f=28, p=14, pixels=bounds))]


@pytest.mark.parametrize("size", SIZES)
def test_gemma3_fixed_256_tokens(size):
    m = processor_media("gemma3", load_preset("gemma-3-4b-it"), image_sizes=[size])
    assert m["images_in_tower"] == 1 and m["visual_tokens"] == 256


@pytest.mark.parametrize("size", SIZES)
def test_llava_onevision_anyres_max_9(size):
    m = processor_media("llava_onevision", load_preset("llava-onevision-qwen2-7b-ov-hf"), image_sizes=[size])
    tiles, tokens = anyres_by_hand(*size, max_tiles=9, tile=384, side=27, grid=(1, 2, 3, 4, 5, 6))
    assert (m["tiles"], m["visual_tokens"]) == ([tiles], tokens)


@pytest.mark.parametrize("size", SIZES)
def test_qwen3_5_grid_with_class_default_bounds(size):
    m = processor_media("qwen3_5", load_preset("Qwen3.5-35B-A3B"), image_sizes=[size], pixels=None)
    bounds = {"min_pixels": 56 * 56, "max_pixels": 28 * 28 * 1280}  # Qwen2VLImageProcessor.size defaults
    assert m["image_grids"] == [(1, *qwen_grid_by_hand(*size, f=32, p=16, pixels=bounds))]


@pytest.mark.parametrize("size", SIZES)
def test_mistral_small_resize(size):
    m = processor_media("mistral3", load_preset("Mistral-Small-3.1-24B-Instruct-2503"), image_sizes=[size],
                        longest_edge=1540)
    h, w = resize_by_hand(*size, longest=1540, step=28)
    assert m["resized"] == [(h, w)] and m["visual_tokens"] == (h // 28) * (w // 28)
