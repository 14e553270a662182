"""LLaVA-NeXT / LLaVA-1.6 (transformers ``llava_next``; tower ``clip_vision_model``) measurement harness.

Tiny config: CLIP at image_size 24, patch 4 -> 6x6 = 36 patches + 1 CLS per tile, hidden 32, 2 layers, 2 heads,
MLP 48, ``vision_feature_layer`` -2 (LlavaNextConfig's default: the last layer runs forward only) and "default"
(CLS dropped before the projector); projector Linear(32 -> 64) -> GELU -> Linear(64 -> 64), bias; LM llama hidden
64 (or ``text_model_type="mistral"``). ``image_grid_pinpoints`` = the released list scaled from 336 to 24 px:
[[24, 48], [48, 24], [48, 48], [72, 24], [24, 72]].

Inputs: transformers' own ``LlavaNextProcessor`` built offline (``LlavaNextImageProcessorPil`` with shortest edge /
crop 24 and the pinpoints above, a word-level tokenizer over a tiny vocabulary holding ``<image>``): HF's own tile
split (base + grid tiles, a multi-image batch zero-padded to the most tiles) and placeholder count (unpadding, one
newline per row).
"""

from __future__ import annotations

from typing import Any, Sequence

from .common import VOCAB, FamilyHarness, eager, finish_model, random_images, register, rotary_modules

IMAGE_TOKEN = 7  # "<image>" in the harness tokenizer
TILE = 24
PINPOINTS = [[24, 48], [48, 24], [48, 48], [72, 24], [24, 72]]


def tiny_config(text_model_type: str = "llama", **over: Any):
    import transformers

    vision = dict(model_type="clip_vision_model", hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                  num_attention_heads=2, image_size=TILE, patch_size=4, projection_dim=16)
    text = dict(model_type=text_model_type, vocab_size=VOCAB, hidden_size=64, intermediate_size=96,
                num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=4096,
                bos_token_id=None, eos_token_id=None, pad_token_id=None)
    if text_model_type == "mistral":
        text["sliding_window"] = None
    vision.update(over.pop("vision", {}))
    text.update(over.pop("text", {}))
    kw = dict(vision_config=vision, text_config=text, image_token_index=IMAGE_TOKEN, vision_feature_layer=-2,
              vision_feature_select_strategy="default", image_grid_pinpoints=PINPOINTS, tie_word_embeddings=False)
    kw.update(over)
    return transformers.LlavaNextConfig(**kw)


def build_model(config, seed: int = 0):
    import torch
    import transformers

    eager(config)
    torch.manual_seed(seed)
    return finish_model(transformers.LlavaNextForConditionalGeneration(config))


def part_modules(model) -> dict:
    inner = model.model
    return {"vision_tower": [inner.vision_tower], "projector": [inner.multi_modal_projector],
            "language_model": [inner.language_model, model.lm_head], "rope": rotary_modules(model)}


def processor(config):
    """``LlavaNextProcessor`` as a checkpoint ships it (processor_config.json: patch_size, one additional image
    token for the CLS, "default"), over a word-level tokenizer."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import LlavaNextProcessor, PreTrainedTokenizerFast
    from transformers.models.llava_next.image_processing_pil_llava_next import LlavaNextImageProcessorPil

    vocab = {"<pad>": 0, "<eos>": 1, "<bos>": 2, "<unk>": 3, "a": 4, "b": 5, "c": 6, "<image>": IMAGE_TOKEN}
    words = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    words.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok = PreTrainedTokenizerFast(tokenizer_object=words, bos_token="<bos>", eos_token="<eos>", pad_token="<pad>",
                                  unk_token="<unk>", extra_special_tokens={"image_token": "<image>"})
    v = config.vision_config
    ip = LlavaNextImageProcessorPil(size={"shortest_edge": v.image_size},
                                    crop_size={"height": v.image_size, "width": v.image_size},
                                    image_grid_pinpoints=config.image_grid_pinpoints)
    return LlavaNextProcessor(image_processor=ip, tokenizer=tok, patch_size=v.patch_size,
                              vision_feature_select_strategy="default", num_additional_image_tokens=1)


def make_inputs(model, image_sizes: Sequence[tuple[int, int]] = (), video_sizes: Sequence = (), text_len: int = 8,
                seed: int = 1):
    import torch

    if video_sizes:
        raise ValueError("llava_next has no video input")
    if not image_sizes:
        raise ValueError("llava_next harness: give at least one image")
    from transformers.models.llava_next.modeling_llava_next import image_size_to_num_patches

    cfg = model.config
    proc = processor(cfg)
    gen = torch.Generator().manual_seed(seed)
    words = lambda n: " ".join("abc"[i % 3] for i in torch.randint(0, 3, (n,), generator=gen).tolist())
    text = words(text_len) + "".join(" <image> " + words(2) for _ in image_sizes)
    out = proc(images=random_images(image_sizes, seed), text=[text], return_tensors="pt",
               input_data_format="channels_last")
    ids = out["input_ids"]
    tiles = [image_size_to_num_patches((int(h), int(w)), cfg.image_grid_pinpoints, cfg.vision_config.image_size)
             for h, w in out["image_sizes"].tolist()]
    media = {"tiles": tiles, "visual_tokens": int((ids == IMAGE_TOKEN).sum()), "seq_len": int(ids.shape[1]),
             "pixel_values_shape": tuple(out["pixel_values"].shape)}
    inputs = dict(input_ids=ids, attention_mask=out["attention_mask"], image_sizes=out["image_sizes"],
                  pixel_values=out["pixel_values"].to(torch.float64), use_cache=False)
    return inputs, media


HARNESS = register(FamilyHarness("llava_next", tiny_config, build_model, part_modules, make_inputs))
