"""Phi-4-multimodal (transformers ``phi4_multimodal``: ``Phi4MultimodalForCausalLM``) measurement harness.

Tiny config: SigLIP-like tower on 64-px crops, patch 2 -> 32 x 32 = 1024 patches per crop (the processor
hard-codes 256 + 16 global-view placeholders, i.e. 16 pooled tokens per side, so the patch grid must be 32),
hidden 16, 2 layers (``feature_layer`` -2: the last runs forward only), 1 head (time: the FLOPs do not depend
on the head count), MLP 24, pooling head;
projection Linear(16 -> 32) -> GELU -> Linear(32 -> 32); Phi-3 LM hidden 32, 2 heads, 1 KV head, SwiGLU 48,
2 layers, untied head; a 1-block conformer audio encoder (16 mel bins, width 16, 8 conv channels) fed by
transformers' own ``Phi4MultimodalFeatureExtractor`` (16 mel bins).

Inputs: transformers' own ``Phi4MultimodalImageProcessor`` logic, compiled from the installed
``image_processing_phi4_multimodal.py`` (this CPU venv has no torchvision, which the module imports at the
top): its ``_preprocess`` and every method of the class it calls (``dynamic_preprocess``,
``pad_to_max_num_crops``, ...; found in the source, so a version that splits them up is followed) run
unchanged; only torchvision's ``resize`` / ``pad`` and the
backend's ``resize`` / ``rescale_and_normalize`` are stood in by torch calls with the same output shapes
(the pixel values do not change the FLOPs). ``num_img_tokens`` placeholders per image, as
``Phi4MultimodalProcessor.replace_image_token`` writes them.
"""

from __future__ import annotations

from typing import Any, Sequence

from .common import VOCAB, FamilyHarness, eager, finish_model, register, rotary_modules, text_ids

IMAGE_TOKEN, AUDIO_TOKEN = 990, 991
SIZE, PATCH = 64, 2


def tiny_config(**over: Any):
    import transformers

    vision = dict(hidden_size=16, intermediate_size=24, num_hidden_layers=2, num_attention_heads=1,
                  image_size=SIZE, patch_size=PATCH, crop_size=SIZE, image_token_id=IMAGE_TOKEN, feature_layer=-2)
    audio = dict(hidden_size=16, intermediate_size=24, num_blocks=1, num_attention_heads=2, ext_pw_out_channel=16,
                 depthwise_separable_out_channel=16, nemo_conv_channels=8, input_size=16, time_reduction=8,
                 bias_max_distance=50, audio_token_id=AUDIO_TOKEN)
    vision.update(over.pop("vision", {}))
    audio.update(over.pop("audio", {}))
    kw = dict(vocab_size=VOCAB, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=2,
              num_key_value_heads=1, max_position_embeddings=8192, original_max_position_embeddings=4096,
              pad_token_id=0, bos_token_id=1, eos_token_id=2, vision_config=vision, audio_config=audio)
    kw.update(over)
    return transformers.Phi4MultimodalConfig(**kw)


def build_model(config, seed: int = 0):
    import torch
    import transformers

    eager(config)
    for sub in ("audio_config",):
        getattr(config, sub)._attn_implementation = "eager"
    torch.manual_seed(seed)
    return finish_model(transformers.Phi4MultimodalForCausalLM(config))


def part_modules(model) -> dict:
    inner = model.model
    image = inner.embed_tokens_extend.image_embed
    return {"vision_tower": [image.img_processor],
            "projector": [image.img_projection_up, image.img_projection_down],
            "language_model": [*inner.layers, inner.norm, inner.embed_tokens, model.lm_head],
            "audio": [inner.embed_tokens_extend.audio_embed], "rope": rotary_modules(model)}


def loose_params(model, part: str) -> list:
    """The learned separators (``sub_img_feature_extensor``, ``global_img_feature_extensor``) belong to the
    projector part (they are rows of the projection's input)."""
    image = model.model.embed_tokens_extend.image_embed
    return [image.sub_img_feature_extensor, image.global_img_feature_extensor] if part == "projector" else []


def hf_image_processor(size: int = SIZE, patch_size: int = PATCH, dynamic_hd: int = 3):
    """An object running transformers' own Phi4MultimodalImageProcessor methods (see the module docstring)."""
    import ast
    import importlib.util
    import math
    from pathlib import Path
    from types import SimpleNamespace

    import torch
    import torch.nn.functional as F
    from transformers.image_processing_utils import BatchFeature

    origin = importlib.util.find_spec("transformers.models.phi4_multimodal").origin
    path = Path(origin).parent / "image_processing_phi4_multimodal.py"
    tree = ast.parse(path.read_text())
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Phi4MultimodalImageProcessor")
    methods = _methods_reached(cls, "_preprocess", stand_ins={"resize", "rescale_and_normalize"})
    for fn in methods:  # annotations name backend types this namespace does not need
        fn.returns = None
        for arg in fn.args.args + fn.args.kwonlyargs:
            arg.annotation = None
        if fn.args.kwarg is not None:
            fn.args.kwarg.annotation = None
    shell = ast.ClassDef(name="HFPhi4Methods", bases=[], keywords=[], body=methods, decorator_list=[], type_params=[])
    module = ast.fix_missing_locations(ast.Module(body=[shell], type_ignores=[]))

    def resize(image, hw, **_):  # torchvision's resize: only the output shape matters here
        return F.interpolate(image[None].double(), size=tuple(int(v) for v in hw), mode="bilinear")[0]

    def pad(image, padding, fill=None):  # torchvision's pad(left, top, right, bottom)
        left, top, right, bottom = padding
        return F.pad(image, (left, right, top, bottom), value=1.0)

    namespace: dict = {"math": math, "torch": torch, "tvF": SimpleNamespace(resize=resize, pad=pad),
                       "BatchFeature": BatchFeature, "logger": None}
    exec(compile(module, str(path), "exec"), namespace)

    class Processor(namespace["HFPhi4Methods"]):
        def resize(self, image, size, **_):
            return resize(image, (size.height, size.width))

        def rescale_and_normalize(self, image, *_):
            return (image.double() / 255 - 0.5) / 0.5

        def __call__(self, images):
            return self._preprocess(images, do_resize=True, size=SimpleNamespace(height=size, width=size),
                                    resample=None, do_rescale=True, rescale_factor=1 / 255, do_normalize=True,
                                    image_mean=None, image_std=None, patch_size=patch_size, dynamic_hd=dynamic_hd,
                                    return_tensors=None)

    return Processor()


def _methods_reached(cls, start: str, stand_ins: set[str]) -> list:
    """The methods of the class definition ``cls`` (an ``ast.ClassDef``) that ``start`` calls on ``self``,
    transitively (5.24: find_closest_aspect_ratio, dynamic_preprocess, pad_to_max_num_crops,
    pad_mask_to_max_num_crops; 5.25 split dynamic_preprocess into _get_crop_layout, _get_crop_attention_mask and
    _get_num_image_tokens). A call to a method neither defined there nor stood in here is an error naming it."""
    import ast

    defined = {n.name: n for n in cls.body if isinstance(n, ast.FunctionDef)}
    reached, todo = [], [start]
    while todo:
        name = todo.pop()
        if name in stand_ins or any(m.name == name for m in reached):
            continue
        if name not in defined:
            raise AssertionError(f"Phi4MultimodalImageProcessor.{name} is called by the processor but neither "
                                 "defined in its class nor stood in by this harness (transformers changed it)")
        reached.append(defined[name])
        for node in ast.walk(defined[name]):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and isinstance(node.func.value, ast.Name) and node.func.value.id == "self"):
                todo.append(node.func.attr)
    return reached


def random_image_tensors(sizes: Sequence[tuple[int, int]], seed: int = 0) -> list:
    import torch

    gen = torch.Generator().manual_seed(seed)
    return [torch.randint(0, 256, (3, h, w), generator=gen, dtype=torch.uint8) for h, w in sizes]


def feature_extractor(config):
    """transformers' own ``Phi4MultimodalFeatureExtractor`` with the tiny encoder's mel bins."""
    from transformers.models.phi4_multimodal.feature_extraction_phi4_multimodal import Phi4MultimodalFeatureExtractor

    return Phi4MultimodalFeatureExtractor(feature_size=config.audio_config.input_size)


def make_inputs(model, image_sizes: Sequence[tuple[int, int]] = (), video_sizes: Sequence = (), text_len: int = 8,
                seed: int = 1, dynamic_hd: int = 3, audio_samples: Sequence[int] = ()):
    import numpy as np
    import torch

    if video_sizes:
        raise ValueError("phi4_multimodal has no video input")
    cfg = model.config
    gen = torch.Generator().manual_seed(seed)
    ids = text_ids(text_len, gen)
    media: dict = {"crops": [], "visual_tokens": 0, "num_img_tokens": []}
    inputs: dict = {}
    if image_sizes:
        v = cfg.vision_config
        out = hf_image_processor(v.crop_size, v.patch_size, dynamic_hd)(random_image_tensors(image_sizes, seed))
        tokens = [int(n) for n in out["num_img_tokens"]]
        for n in tokens:
            ids += [IMAGE_TOKEN] * n + text_ids(2, gen)
        pixels = out["image_pixel_values"]
        media["crops_in_tower"] = int(pixels.shape[0] * pixels.shape[1])
        media["num_img_tokens"] = tokens
        media["visual_tokens"] = sum(tokens)
        inputs.update(image_pixel_values=pixels.to(torch.float64), image_sizes=out["image_sizes"],
                      image_attention_mask=out["image_attention_mask"])
    if audio_samples:  # one feature-extractor call: every clip padded to the longest
        rng = np.random.default_rng(seed)
        out = feature_extractor(cfg)([rng.standard_normal(n).astype(np.float32) for n in audio_samples],
                                     sampling_rate=16000, return_tensors="pt")
        sizes = [int(n) for n in out["audio_embed_sizes"]]
        for n in sizes:
            ids += [AUDIO_TOKEN] * n + text_ids(2, gen)
        media["audio_tokens"] = sizes
        media["audio_frames_padded"] = int(out["audio_input_features"].shape[1])
        inputs.update(audio_input_features=out["audio_input_features"].to(torch.float64),
                      audio_embed_sizes=out["audio_embed_sizes"])
        if "audio_attention_mask" in out:
            inputs["audio_attention_mask"] = out["audio_attention_mask"]
    media["seq_len"] = len(ids)
    inputs.update(input_ids=torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                  use_cache=False)
    return inputs, media


HARNESS = register(FamilyHarness("phi4_multimodal", tiny_config, build_model, part_modules, make_inputs,
                                 loose_params=loose_params))
