"""Independent FlopCounterMode references for the VLM families (one harness module per family).

Library entry point::

    from tests.verify.families import measure_family
    m = measure_family("internvl", image_sizes=[(48, 80)], text_len=8, mode="training", frozen=("vision_tower",))
    m.parts("training")   # {"vision_tower": F, "projector": F, "language_model": F}
    m.media               # tiles / patches / visual tokens the HF processor produced, seq_len

Each family module registers a :class:`common.FamilyHarness` in :data:`common.REGISTRY` when imported.
torch / transformers are imported lazily (inside the functions), so importing this package is cheap.
"""

from __future__ import annotations

from typing import Any, Sequence

from . import common
from .common import PARTS, REGISTRY, PartMeasurement

_FAMILY_MODULES = ("internvl", "glm4v", "gemma3", "llava_onevision", "qwen3_5", "mistral3", "idefics3", "llama4",
                  "llava", "paligemma", "llava_next", "llava_next_video", "mllama", "qwen_omni", "aya_vision",
                  "deepseek_vl", "kimi_k25", "got_ocr2", "deepseek_vl_hybrid", "janus", "minicpmv",
                  "phi4_multimodal", "blip_2", "ovis2", "ernie4_5_vl", "florence2")


# Representative media per family for per-part comparisons (keyword arguments of :func:`measure_family`):
# several shapes each, the family's special cases included (thumbnail / no thumbnail, upscaling, unpadding
# with and without the anyres shrink, multi-image samples, pan-and-scan, videos, joined Pixtral sequences).
CASES: dict[str, list[dict]] = {
    "internvl": [dict(image_sizes=[(48, 80)]), dict(image_sizes=[(32, 32), (100, 30)]), dict(image_sizes=[(64, 64)])],
    "glm4v": [dict(image_sizes=[(30, 50), (8, 8)]), dict(image_sizes=[(200, 120)]),
              dict(video_sizes=[(3, 20, 20)]), dict(video_sizes=[(4, 30, 18), (2, 8, 12)])],
    "glm4v_moe": [dict(image_sizes=[(30, 50), (8, 8)]), dict(video_sizes=[(3, 20, 20)])],
    "glm46v": [dict(image_sizes=[(30, 50)]), dict(video_sizes=[(3, 20, 20)])],
    "gemma3": [dict(image_sizes=[(30, 50)]), dict(image_sizes=[(64, 64), (7, 300)]),
               dict(image_sizes=[(30, 90)], pan_and_scan=True, pan_and_scan_min_crop_size=8)],
    "llava_onevision": [dict(image_sizes=[(30, 50)]), dict(image_sizes=[(70, 20)]), dict(image_sizes=[(72, 72)]),
                        dict(image_sizes=[(30, 50), (70, 20)], multi_image=True), dict(video_sizes=[(3, 24, 24)])],
    "qwen3_5": [dict(image_sizes=[(30, 50), (8, 8)]), dict(image_sizes=[(200, 120)]),
                dict(video_grids=[(2, 4, 6)]), dict(image_sizes=[(30, 50)], video_grids=[(3, 8, 10)])],
    "qwen3_5_moe": [dict(image_sizes=[(30, 50), (8, 8)]), dict(video_grids=[(2, 4, 6)])],
    "mistral3": [dict(image_sizes=[(30, 50)]), dict(image_sizes=[(30, 50), (70, 20)]), dict(image_sizes=[(200, 100)])],
    "idefics3": [dict(image_sizes=[(30, 50)]), dict(image_sizes=[(10, 10)]),
                 dict(image_sizes=[(30, 50)], do_image_splitting=False)],
    "smolvlm": [dict(image_sizes=[(30, 50)]), dict(image_sizes=[(300, 90)]), dict(video_sizes=[(3, 100, 200)])],
    "llama4": [dict(tiles=[5, 1]), dict(tiles=[1])],
    # --- llava ---
    "llava": [dict(image_sizes=[(30, 50)]), dict(image_sizes=[(70, 20), (32, 32)])],
    "llava_pixtral": [dict(image_sizes=[(30, 50)]), dict(image_sizes=[(200, 100)])],
    # --- paligemma --- llava_next ---
    "paligemma": [dict(image_sizes=[(30, 50)]), dict(image_sizes=[(70, 20), (32, 32)])],
    "llava_next": [dict(image_sizes=[(30, 50)]), dict(image_sizes=[(70, 20), (32, 32)]), dict(image_sizes=[(1, 300)])],
    "llava_next_video": [dict(image_sizes=[(30, 50)]), dict(video_sizes=[(3, 24, 24)]),
                         dict(image_sizes=[(70, 20)], video_sizes=[(2, 24, 24), (2, 24, 24)])],
    "mllama": [dict(image_sizes=[(30, 50)]), dict(image_sizes=[(70, 20), (16, 16)]),
               dict(samples=[[(30, 50)], [(100, 30)]])],
    # --- qwen_omni --- (every part runs: an image or video and an audio clip in each case)
    "qwen2_5_omni": [dict(image_sizes=[(30, 50)], audio_samples=[48077, 9000]),
                     dict(video_grids=[(2, 8, 12)], audio_samples=[5000])],
    "qwen3_omni_moe": [dict(image_sizes=[(30, 50)], audio_samples=[48077, 9000]),
                       dict(video_grids=[(2, 8, 12)], audio_samples=[20000])],
    # --- aya_vision ---
    "aya_vision": [dict(image_sizes=[(30, 50)]), dict(image_sizes=[(70, 20), (32, 32)]), dict(image_sizes=[(100, 100)])],
    "cohere2_vision": [dict(image_sizes=[(30, 50)]), dict(image_sizes=[(70, 20), (32, 32)])],
    "deepseek_vl": [dict(image_sizes=[(30, 50)]), dict(image_sizes=[(70, 20), (32, 32)])],
    # --- minicpmv --- (overview + slices of another shape; a small image upscaled to the overview)
    "minicpmv4_6": [dict(image_sizes=[(30, 50)]), dict(image_sizes=[(10, 12), (40, 20)])],
    "minicpmv4_7": [dict(image_sizes=[(30, 50)])],
    "minicpm_ocr": [dict(grids=[[(8, 8), (4, 6), (4, 6)]])],
    "kimi_k25": [dict(image_sizes=[(30, 50), (60, 90)]), dict(video_sizes=[(6, 40, 60)]),
                 dict(image_sizes=[(30, 50)], video_sizes=[(3, 28, 56)])],
    # --- got_ocr2 / deepseek_vl_hybrid / janus ---
    "got_ocr2": [dict(image_sizes=[(30, 50)]), dict(image_sizes=[(70, 20), (32, 32)], crop_to_patches=True)],
    "deepseek_vl_hybrid": [dict(image_sizes=[(30, 50)]), dict(image_sizes=[(70, 20), (32, 32)])],
    "janus": [dict(image_sizes=[(30, 50)]), dict(image_sizes=[(70, 20), (32, 32)])],
    # --- phi4_multimodal --- (aspect-ratio path past dynamic_hd 3, padding rows / columns, crops padded per call)
    "phi4_multimodal": [dict(image_sizes=[(100, 70)]), dict(image_sizes=[(40, 130), (64, 64)])],
    # --- blip_2 --- (one image per sample: several images are several samples, padded)
    "blip-2": [dict(image_sizes=[(30, 50)]), dict(image_sizes=[(70, 20), (32, 32), (9, 90)])],
    # --- ovis2 --- (one tile; a 3 x 2 split + thumbnail; several images of different splits)
    "ovis2": [dict(image_sizes=[(30, 30)]), dict(image_sizes=[(40, 90)]), dict(image_sizes=[(70, 20), (32, 32), (9, 90)])],
    # --- ernie4_5_vl_moe --- (videos as grids: the video processor needs torchvision)
    "ernie4_5_vl_moe": [dict(image_sizes=[(30, 50)]), dict(image_sizes=[(70, 20)], video_grids=[(2, 4, 6)])],
    # --- florence2 --- (one image per sample; texts and labels of different lengths, padded)
    "florence2": [dict(image_sizes=[(30, 50)]), dict(image_sizes=[(70, 20), (56, 56), (9, 90)])],
}


def _load_all() -> None:
    import importlib

    for name in _FAMILY_MODULES:
        try:
            importlib.import_module(f"{__name__}.{name}")
        except ModuleNotFoundError as exc:  # a family module not written yet
            if exc.name != f"{__name__}.{name}":
                raise


def harness(family: str) -> common.FamilyHarness:
    _load_all()
    if family not in REGISTRY:
        raise KeyError(f"no measurement harness for {family!r}; have {sorted(REGISTRY)}")
    return REGISTRY[family]


def measure_family(family: str, config: Any = None, image_sizes: Sequence[tuple[int, int]] = (),
                   video_sizes: Sequence[tuple[int, int, int]] = (), text_len: int = 8, mode: str = "forward",
                   frozen: Sequence[str] = (), seed: int = 0, model: Any = None, **input_kw: Any) -> PartMeasurement:
    """FlopCounterMode FLOPs per part of one tiny ``family`` model on HF-processed media.

    ``config``: a transformers config (default: the family's tiny config); ``model``: reuse a built model.
    ``image_sizes``: (height, width) pixels; ``video_sizes``: (frames, height, width); ``text_len``: plain
    text tokens besides the media runs. ``mode``: "forward" (no grad) or "training" (forward + backward of
    ``logits.mean()``), ``frozen``: parts without gradients. Returns the measurement with ``media`` filled.
    """
    if mode not in ("forward", "training"):
        raise ValueError(f"mode must be 'forward' or 'training', not {mode!r}")
    h = harness(family)
    if model is None:
        model = h.build_model(config if config is not None else h.tiny_config(), seed)
    inputs, media = h.make_inputs(model, image_sizes=image_sizes, video_sizes=video_sizes, text_len=text_len,
                                  seed=seed + 1, **input_kw)
    m = common.count(model, inputs, h.part_modules(model), training=mode == "training", frozen=frozen, run=h.run,
                     loose_params=h.loose_params)
    m.media = media
    m.check()
    return m


def load_preset(name: str) -> dict:
    """``presets/<name>.json`` as a dict (config.json-shaped; see presets/presets.json for sources)."""
    import json
    from pathlib import Path

    return json.loads((Path(__file__).parent / "presets" / f"{name}.json").read_text())


def processor_media(family: str, config: Any, image_sizes: Sequence[tuple[int, int]] = (),
                    video_sizes: Sequence[tuple[int, int, int]] = (), text_len: int = 0, **input_kw: Any) -> dict:
    """The media (tiles / grids / visual tokens / seq_len) ``family``'s own HF processor gives for ``config``
    (a transformers config or a config.json dict, e.g. :func:`load_preset`), without building the model.

    Processor settings not in config.json are the harness's keyword arguments (``max_patches``, ``pixels``,
    ``longest_edge``, ``pan_and_scan``...); pass the checkpoint's preprocessor values for real sizes.
    """
    import types

    if isinstance(config, dict):
        import transformers

        config = transformers.AutoConfig.for_model(**config)
    _, media = harness(family).make_inputs(types.SimpleNamespace(config=config), image_sizes=image_sizes,
                                           video_sizes=video_sizes, text_len=text_len, **input_kw)
    return media


__all__ = ["CASES", "PARTS", "REGISTRY", "harness", "load_preset", "measure_family", "processor_media"]
