"""BLIP-2 (transformers ``blip-2``: ``Blip2ForConditionalGeneration``, OPT LM) measurement harness.

Tiny config: BLIP-2 tower at image_size 32, patch 8 -> 4x4 = 16 patches + CLS per image, hidden 32, 2 layers, 2 heads,
MLP 48, ``qkv_bias``; Q-Former hidden 24, 3 layers of 2 heads, FFN 40, ``cross_attention_frequency`` 2 (cross-attention
in layers 0 and 2), 6 learned queries; ``language_projection`` Linear(24 -> 64); OPT LM hidden 64, 4 heads, 2 layers,
``ffn_dim`` 96, tied head.

Parts: ``vision_tower`` = ``vision_model``; ``projector`` = ``qformer`` + ``language_projection`` (+ the loose
``query_tokens`` parameter, frozen with them); ``language_model`` = ``language_model`` (OPTForCausalLM, head included).

Inputs: transformers' own ``Blip2Processor`` (built offline: ``BlipImageProcessorPil`` at 32x32, ``num_query_tokens``
6 and a word-level tokenizer over a tiny vocabulary, to which the processor adds ``<image>`` as id 7): one image per
sample, its 6 image tokens prepended to the sample's text; several samples padded into one batch.
"""

from __future__ import annotations

from typing import Any, Sequence

from .common import VOCAB, FamilyHarness, eager, finish_model, random_images, register

IMAGE_TOKEN = 7  # the id Blip2Processor gives <image> in the harness tokenizer
SIZE = 32
QUERIES = 6


def tiny_config(**over: Any):
    import transformers

    vision = dict(hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=2, image_size=SIZE,
                  patch_size=8, qkv_bias=True)
    qformer = dict(hidden_size=24, num_hidden_layers=3, num_attention_heads=2, intermediate_size=40,
                   cross_attention_frequency=2)
    text = dict(model_type="opt", vocab_size=VOCAB, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                ffn_dim=96, max_position_embeddings=512, word_embed_proj_dim=64, pad_token_id=0, bos_token_id=2,
                eos_token_id=1)
    vision.update(over.pop("vision", {}))
    qformer.update(over.pop("qformer", {}))
    text.update(over.pop("text", {}))
    kw = dict(vision_config=vision, qformer_config=qformer, text_config=text, num_query_tokens=QUERIES,
              image_token_index=IMAGE_TOKEN)
    kw.update(over)
    return transformers.Blip2Config(**kw)


def build_model(config, seed: int = 0):
    import torch
    import transformers

    eager(config)
    for sub in (config.vision_config, config.qformer_config):
        sub._attn_implementation = "eager"
    torch.manual_seed(seed)
    model = finish_model(transformers.Blip2ForConditionalGeneration(config))
    with torch.no_grad():  # zeros at init: random queries so that nothing is degenerate
        model.query_tokens.normal_()
    return model


def part_modules(model) -> dict:
    return {"vision_tower": [model.vision_model], "projector": [model.qformer, model.language_projection],
            "language_model": [model.language_model], "rope": []}


def loose_params(model, part: str) -> list:
    return [model.query_tokens] if part == "projector" else []


def processor(config):
    """transformers' own ``Blip2Processor``, built offline (``BlipImageProcessorPil`` at the tower's image_size, a
    word-level tokenizer; the processor adds ``<image>``, id 7)."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import Blip2Processor, PreTrainedTokenizerFast
    from transformers.models.blip.image_processing_pil_blip import BlipImageProcessorPil

    vocab = {"<pad>": 0, "</s>": 1, "<s>": 2, "<unk>": 3, "a": 4, "b": 5, "c": 6}
    words = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    words.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok = PreTrainedTokenizerFast(tokenizer_object=words, bos_token="<s>", eos_token="</s>", pad_token="<pad>",
                                  unk_token="<unk>")
    size = config.vision_config.image_size
    ip = BlipImageProcessorPil(size={"height": size, "width": size})
    return Blip2Processor(image_processor=ip, tokenizer=tok, num_query_tokens=config.num_query_tokens)


def make_inputs(model, image_sizes: Sequence[tuple[int, int]] = (), video_sizes: Sequence = (), text_len: int = 8,
                seed: int = 1):
    """One sample per image (``Blip2Processor`` prepends the query tokens once per text), texts of ``text_len``,
    ``text_len`` + 1, ... words, padded to the longest (the LM runs on the padded batch)."""
    import torch

    if video_sizes:
        raise ValueError("blip-2 has no video input")
    if not image_sizes:
        raise ValueError("Blip2Processor: the harness feeds images")
    proc = processor(model.config)
    gen = torch.Generator().manual_seed(seed)
    words = lambda n: " ".join("abc"[i % 3] for i in torch.randint(0, 3, (n,), generator=gen).tolist())
    texts = [words(text_len + i) for i in range(len(image_sizes))]
    out = proc(images=random_images(image_sizes, seed), text=texts, padding=True, return_tensors="pt",
               input_data_format="channels_last")
    ids = out["input_ids"]
    assert proc.tokenizer.convert_tokens_to_ids("<image>") == IMAGE_TOKEN
    media = {"images": int(out["pixel_values"].shape[0]), "visual_tokens": int((ids == IMAGE_TOKEN).sum()),
             "seq_len": int(ids.shape[1]), "batch": int(ids.shape[0]),
             "pixel_values_shape": tuple(out["pixel_values"].shape)}
    inputs = dict(input_ids=ids, attention_mask=out["attention_mask"],
                  pixel_values=out["pixel_values"].to(torch.float64), use_cache=False)
    return inputs, media


HARNESS = register(FamilyHarness("blip-2", tiny_config, build_model, part_modules, make_inputs,
                                 loose_params=loose_params))
