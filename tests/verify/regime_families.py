"""Per-family setups for the regime checks of the families laid out after the Qwen / InternVL / Gemma 3 ones
(tests/verify/test_measured_regimes_families.py): a tiny transformers model from the family harness
(tests/verify/families), HF-processed inputs for one image, and the library's spec and statistics for the same
batch, derived with the library's own media rule from the processor settings each family's FLOPs test uses
(tests/verify/test_<family>_flops.py) or, for the Qwen-style families, from the grids HF's processor produced."""

from __future__ import annotations

from typing import Any

IMAGE = (30, 50)
# processor files each family's FLOPs test passes to spec_from_config (None: the config's own defaults)
_PROCESSORS: dict[str, Any] = {
    "idefics3": ("test_idefics3_flops", "PROCESSOR"), "smolvlm": ("test_idefics3_flops", "PROCESSOR"),
    "llava": ("test_llava_flops", "CLIP_PROCESSOR"), "llava_pixtral": ("test_llava_flops", "PIXTRAL_PROCESSOR"),
    "llava_next": ("test_llava_next_flops", "PROCESSOR"), "llava_onevision": ("test_llava_onevision_flops", "PROCESSOR"),
    "paligemma": ("test_paligemma_flops", "PROCESSOR"), "paligemma2": ("test_paligemma_flops", "PROCESSOR"), "mistral3": ("test_mistral3_flops", "PROCESSOR"),
    "qwen3_5": ("test_qwen3_5_flops", "PROCESSOR"), "qwen3_5_moe": ("test_qwen3_5_flops", "PROCESSOR"),
}


_INTERNVL = {"preprocessor_config.json": {"size": {"height": 32, "width": 32}, "min_patches": 1, "max_patches": 6,
                                          "crop_to_patches": False}}


def processor_files(family: str) -> dict | None:
    if family == "internvl_gpt_oss":
        return _INTERNVL
    import importlib

    where = _PROCESSORS.get(family)
    if where is None:
        return None
    return getattr(importlib.import_module(f"tests.verify.{where[0]}"), where[1])


def family_setup(family: str, seed: int = 0, image_sizes=(IMAGE,)):
    """(model, inputs, spec, stats, harness) for one forward over ``image_sizes``."""
    from vlm_perf.arch import spec_from_config
    from vlm_perf.arch.families import FAMILIES
    from vlm_perf.stats import BatchStats

    from .families import harness

    h = harness({"paligemma2": "paligemma", "internvl_gpt_oss": "internvl"}.get(family, family))
    if family == "paligemma2":
        config = h.tiny_config("gemma2")
    elif family == "internvl_gpt_oss":
        from .test_internvl_gpt_oss_flops import GPT_OSS

        config = h.tiny_config("gpt_oss", text=GPT_OSS)
    else:
        config = h.tiny_config()
    model = h.build_model(config, seed)
    text_len = 8
    if family.startswith("qwen3_5"):  # a whole number of delta-rule chunks (64): no chunk padding to account for
        _, bare = h.make_inputs(model, image_sizes=list(image_sizes), video_sizes=(), text_len=0, seed=seed + 1)
        text_len = (-bare["seq_len"]) % 64 + 64
    inputs, media = h.make_inputs(model, image_sizes=list(image_sizes), video_sizes=(), text_len=text_len,
                                  seed=seed + 1)
    proc = processor_files(family)
    spec = spec_from_config(model.config.to_dict(), name=f"tiny-{family}", **({"processor": proc} if proc else {}))
    if "image_grids" in media:
        grids = [tuple(g) for g in media["image_grids"]]
    else:
        rule = FAMILIES[spec.family].media
        lib_media = [rule.image(spec, hh, ww) for hh, ww in image_sizes]
        assert sum(m.visual_tokens for m in lib_media) == media["visual_tokens"]
        grids = [m.grid for m in lib_media]
    stats = BatchStats.from_batch(seq_lens=[media["seq_len"]], image_grids=grids, spec=spec)
    return model, inputs, spec, stats, h
