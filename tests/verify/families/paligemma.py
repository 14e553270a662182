"""PaliGemma 1 / 2 (transformers ``paligemma``; tower ``siglip``) measurement harness.

Tiny config: SigLIP tower at image_size 32, patch 4 -> 8x8 = 64 patches per image, no CLS, hidden 32, 2 layers,
2 heads, MLP 48, ``vision_use_head`` False (as the released PaliGemma configs); projector Linear(32 -> 64, bias).
LM ``gemma`` (PaliGemma 1): hidden 64, 4 heads of head_dim 16, 2 KV heads, GeGLU MLP 96, 2 layers; with
``text_model_type="gemma2"`` (PaliGemma 2): 3 layers ``[sliding, full, sliding]``, ``sliding_window`` 8 (eager
attention computes the whole square in every layer whatever the mask).

Inputs: transformers' own ``PaliGemmaProcessor`` (built offline: ``SiglipImageProcessorPil`` at 32x32 and a
word-level tokenizer over a tiny vocabulary) with a prompt and a ``suffix``: ``<image>*64`` per image, ``<bos>``, the
prompt, "\\n" (the prefix: ``token_type_ids`` 0), then the suffix and ``<eos>`` (``token_type_ids`` 1) -- the
prefix-LM mask of a training batch.
"""

from __future__ import annotations

from typing import Any, Sequence

from .common import VOCAB, FamilyHarness, eager, finish_model, random_images, register, rotary_modules

IMAGE_TOKEN = 7  # the id PaliGemmaProcessor gives <image> in the harness tokenizer
SIZE = 32


def tiny_config(text_model_type: str = "gemma", **over: Any):
    import transformers

    vision = dict(model_type="siglip_vision_model", hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                  num_attention_heads=2, image_size=SIZE, patch_size=4, vision_use_head=False)
    text = dict(model_type=text_model_type, vocab_size=VOCAB, hidden_size=64, intermediate_size=96,
                num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                max_position_embeddings=4096, pad_token_id=0, bos_token_id=2, eos_token_id=1)
    if text_model_type == "gemma2":
        text.update(num_hidden_layers=3, sliding_window=8, query_pre_attn_scalar=16,
                    layer_types=["sliding_attention", "full_attention", "sliding_attention"])
    vision.update(over.pop("vision", {}))
    text.update(over.pop("text", {}))
    kw = dict(vision_config=vision, text_config=text, image_token_index=IMAGE_TOKEN, projection_dim=64,
              hidden_size=64, vocab_size=VOCAB, tie_word_embeddings=True)
    kw.update(over)
    return transformers.PaliGemmaConfig(**kw)


def build_model(config, seed: int = 0):
    import torch
    import transformers

    eager(config)
    torch.manual_seed(seed)
    return finish_model(transformers.PaliGemmaForConditionalGeneration(config))


def part_modules(model) -> dict:
    inner = model.model
    return {"vision_tower": [inner.vision_tower], "projector": [inner.multi_modal_projector],
            "language_model": [inner.language_model, model.lm_head], "rope": rotary_modules(model)}


def processor(config):
    """transformers' own ``PaliGemmaProcessor``, built offline: ``SiglipImageProcessorPil`` (size and
    ``image_seq_length`` as a checkpoint's preprocessor_config.json states them) and a word-level tokenizer over a
    tiny vocabulary (the processor adds ``<image>`` as id 7, then the location / segmentation tokens)."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PaliGemmaProcessor, PreTrainedTokenizerFast
    from transformers.models.siglip.image_processing_pil_siglip import SiglipImageProcessorPil

    vocab = {"<pad>": 0, "<eos>": 1, "<bos>": 2, "<unk>": 3, "a": 4, "b": 5, "c": 6}
    words = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    words.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok = PreTrainedTokenizerFast(tokenizer_object=words, bos_token="<bos>", eos_token="<eos>", pad_token="<pad>",
                                  unk_token="<unk>")
    v = config.vision_config
    ip = SiglipImageProcessorPil(size={"height": v.image_size, "width": v.image_size},
                                 image_seq_length=(v.image_size // v.patch_size) ** 2)
    return PaliGemmaProcessor(image_processor=ip, tokenizer=tok)


def make_inputs(model, image_sizes: Sequence[tuple[int, int]] = (), video_sizes: Sequence = (), text_len: int = 8,
                seed: int = 1, suffix_len: int = 5):
    import torch

    if video_sizes:
        raise ValueError("paligemma has no video input")
    if not image_sizes:
        raise ValueError("PaliGemmaProcessor requires images")
    proc = processor(model.config)
    assert proc.image_token_id == IMAGE_TOKEN
    gen = torch.Generator().manual_seed(seed)
    words = lambda n: " ".join("abc"[i % 3] for i in torch.randint(0, 3, (n,), generator=gen).tolist())
    out = proc(images=[random_images(image_sizes, seed)], text=["<image>" * len(image_sizes) + words(text_len)],
               suffix=[words(suffix_len)], return_tensors="pt", input_data_format="channels_last")
    ids, types = out["input_ids"], out["token_type_ids"]
    media = {"images": int(out["pixel_values"].shape[0]), "visual_tokens": int((ids == IMAGE_TOKEN).sum()),
             "seq_len": int(ids.shape[1]), "prefix_len": int((types == 0).sum()),
             "pixel_values_shape": tuple(out["pixel_values"].shape)}
    inputs = dict(input_ids=ids, token_type_ids=types, attention_mask=out["attention_mask"],
                  pixel_values=out["pixel_values"].to(torch.float64), use_cache=False)
    return inputs, media


HARNESS = register(FamilyHarness("paligemma", tiny_config, build_model, part_modules, make_inputs))
