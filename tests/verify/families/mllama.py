"""Mllama / Llama 3.2 Vision (transformers ``mllama``) measurement harness.

Tiny config: tiles of 16 px, patch 4 -> 16 patches + CLS = 17 positions, padded to 24 per tile; ``max_num_tiles`` 4
(the processor's default aspect ratios), vision hidden 32, 2 heads, MLP 48, 2 local layers + 1 gated global layer,
``intermediate_layers_indices`` [0] -> output 64; projector Linear(64 -> 64, bias). LM: 4 layers hidden 64, 4 heads
x 16, 2 KV heads, MLP 96, cross-attention layers [1, 3] (layer 0 is text only), vocab 1000 (+8 embedding rows).

Inputs: transformers' own ``MllamaProcessor`` (built offline: ``MllamaImageProcessorPil`` at 16 px, 4 tiles, and a
word-level tokenizer with ``<|image|>`` as a special token, id 7): ``<|image|>`` per image, ``<|begin_of_text|>``, the
text. ``image_sizes`` is one sample's images; ``samples`` (a list of image-size lists, one per sample) builds a batch
of several samples (``text_lens``: words per sample; rows of equal length, so no padding).
"""

from __future__ import annotations

from typing import Any, Sequence

from .common import VOCAB, FamilyHarness, eager, finish_model, random_images, register, rotary_modules

IMAGE_TOKEN = 7  # the id the harness tokenizer gives <|image|>
TILE = 16


def tiny_config(**over: Any):
    import transformers

    vision = dict(hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_global_layers=1, attention_heads=2,
                  image_size=TILE, patch_size=4, max_num_tiles=4, intermediate_layers_indices=[0],
                  vision_output_dim=64)
    text = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=96, num_hidden_layers=4, num_attention_heads=4,
                num_key_value_heads=2, cross_attention_layers=[1, 3], bos_token_id=2, eos_token_id=1, pad_token_id=0,
                max_position_embeddings=4096)
    vision.update(over.pop("vision", {}))
    text.update(over.pop("text", {}))
    kw = dict(vision_config=vision, text_config=text, image_token_index=IMAGE_TOKEN)
    kw.update(over)
    return transformers.MllamaConfig(**kw)


def build_model(config, seed: int = 0):
    import torch
    import transformers

    eager(config)
    torch.manual_seed(seed)
    model = transformers.MllamaForConditionalGeneration(config)
    for name, p in model.named_parameters():  # gates start at 0 (tanh 0 = 0): random values so every path matters
        if "gate" in name:
            with torch.no_grad():
                p.uniform_(0.1, 0.5)
    return finish_model(model)


def part_modules(model) -> dict:
    inner = model.model
    return {"vision_tower": [inner.vision_model], "projector": [inner.multi_modal_projector],
            "language_model": [inner.language_model, model.lm_head], "rope": rotary_modules(model)}


def processor(config):
    """transformers' own ``MllamaProcessor``, built offline (``MllamaImageProcessorPil`` with the tower's tile size and
    tile count, a word-level tokenizer over a tiny vocabulary with ``<|image|>`` / ``<|python_tag|>`` added)."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import MllamaProcessor, PreTrainedTokenizerFast
    from transformers.models.mllama.image_processing_pil_mllama import MllamaImageProcessorPil

    vocab = {"<pad>": 0, "<|end_of_text|>": 1, "<|begin_of_text|>": 2, "<unk>": 3, "a": 4, "b": 5, "c": 6}
    words = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    words.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok = PreTrainedTokenizerFast(tokenizer_object=words, bos_token="<|begin_of_text|>", eos_token="<|end_of_text|>",
                                  pad_token="<pad>", unk_token="<unk>")
    tok.add_special_tokens({"additional_special_tokens": ["<|image|>", "<|python_tag|>"]})
    v = config.vision_config
    ip = MllamaImageProcessorPil(size={"height": v.image_size, "width": v.image_size}, max_image_tiles=v.max_num_tiles)
    return MllamaProcessor(image_processor=ip, tokenizer=tok)


def make_inputs(model, image_sizes: Sequence[tuple[int, int]] = (), video_sizes: Sequence = (), text_len: int = 8,
                seed: int = 1, samples: Sequence[Sequence[tuple[int, int]]] | None = None,
                text_lens: Sequence[int] | None = None):
    import torch

    if video_sizes:
        raise ValueError("mllama has no video input")
    batch = [list(image_sizes)] if samples is None else [list(s) for s in samples]
    if not all(batch):
        raise ValueError("every sample needs at least one image (MllamaProcessor pairs images with <|image|> tokens)")
    proc = processor(model.config)
    assert proc.image_token_id == IMAGE_TOKEN
    gen = torch.Generator().manual_seed(seed)
    words = lambda n: " ".join("abc"[i % 3] for i in torch.randint(0, 3, (n,), generator=gen).tolist())
    lens = list(text_lens) if text_lens is not None else [text_len] * len(batch)
    texts = ["<|image|>" * len(s) + words(n) for s, n in zip(batch, lens)]
    out = proc(images=[random_images(s, seed + i) for i, s in enumerate(batch)], text=texts, return_tensors="pt",
               input_data_format="channels_last")
    ids = out["input_ids"]
    media = {"images": [len(s) for s in batch], "visual_tokens": int((ids == IMAGE_TOKEN).sum()),
             "seq_len": int(ids.shape[1]), "seq_lens": [int(n) for n in out["attention_mask"].sum(1)],
             "pixel_values_shape": tuple(out["pixel_values"].shape),
             "tiles": [[int(m.sum()) for m in row[:len(s)]] for row, s in zip(out["aspect_ratio_mask"], batch)]}
    inputs = dict(input_ids=ids, attention_mask=out["attention_mask"], pixel_values=out["pixel_values"].to(torch.float64),
                  aspect_ratio_ids=out["aspect_ratio_ids"], aspect_ratio_mask=out["aspect_ratio_mask"],
                  cross_attention_mask=out["cross_attention_mask"], use_cache=False)
    return inputs, media


def loose_params(model, part: str) -> list:
    return []


HARNESS = register(FamilyHarness("mllama", tiny_config, build_model, part_modules, make_inputs,
                                 loose_params=loose_params))
