"""Llama 4 (transformers ``llama4``) measurement harness: tower and projector per tile; LM as HF computes it.

Tiny config: tiles of 32 px, patch 4 -> 64 patches; ``Llama4UnfoldConvolution`` (unfold + Linear(48 -> 32, no
bias)), CLS appended **last** (``class_embedding``), learned positions, 2D RoPE, 2 layers hidden 32, 2 heads,
MLP 128 (bias; = 4 x hidden, which ``Llama4VisionMLP2`` also reads as its input width); ``vision_adapter`` =
pixel shuffle 0.5 (CLS dropped) -> Llama4VisionMLP2 fc1 Linear(128 -> 48) -> GELU -> fc2 Linear(48 -> 48) -> GELU
(no bias); ``multi_modal_projector.linear_1`` Linear(48 -> 64, no bias).
LM: 2 layers hidden 64, 4 heads x 16, 2 KV heads, ``attention_chunk_size`` 16, ``no_rope_layers`` [1, 0] (a
chunked RoPE layer and a global NoPE layer), layer 1 MoE with 4 experts top-1 + a shared expert.

Not like the other harnesses, on two counts (both documented in docs/families-notes.md):
- the image processor (``image_processing_llama4.py``) is torchvision-only, so media are given as **tiles**
  (``tiles=[n, ...]``, one entry per image, n including the global tile) with random pixel values; the token
  layout is ``<|image_start|>`` + per tile 16 ``<|patch|>`` + 1 separator + ``<|image_end|>``;
- ``Llama4TextMoe`` runs every token through every expert densely (``repeat(num_experts, 1)`` + bmm), so the
  measured MoE LM FLOPs are E x the routed cost by construction: only the vision parts and the dense layers are
  meaningful references.
"""

from __future__ import annotations

from typing import Any, Sequence

from .common import VOCAB, FamilyHarness, eager, finish_model, register, rotary_modules, text_ids

IMAGE_TOKEN, BOI, EOI, TILE_SEP = 990, 991, 992, 993
TILE = 32


def tiny_config(**over: Any):
    import transformers

    # intermediate_size doubles as the pixel-shuffled width (4 * hidden), as in the released 1408 -> 5632
    vision = dict(hidden_size=32, intermediate_size=128, num_hidden_layers=2, num_attention_heads=2, image_size=TILE,
                  patch_size=4, pixel_shuffle_ratio=0.5, projector_input_dim=48, projector_output_dim=48,
                  vision_output_dim=48, rope_theta=10000, vision_feature_layer=-1,
                  vision_feature_select_strategy="default")
    text = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=32, intermediate_size_mlp=96, num_hidden_layers=2,
                num_attention_heads=4, num_key_value_heads=2, head_dim=16, num_local_experts=4, num_experts_per_tok=1,
                interleave_moe_layer_step=2, attention_chunk_size=16, no_rope_layers=[1, 0], bos_token_id=None,
                eos_token_id=None, pad_token_id=None)
    vision.update(over.pop("vision", {}))
    text.update(over.pop("text", {}))
    kw = dict(vision_config=vision, text_config=text, image_token_index=IMAGE_TOKEN, boi_token_index=BOI,
              eoi_token_index=EOI, tie_word_embeddings=False)
    kw.update(over)
    return transformers.Llama4Config(**kw)


def build_model(config, seed: int = 0):
    import torch
    import transformers

    eager(config)
    torch.manual_seed(seed)
    return finish_model(transformers.Llama4ForConditionalGeneration(config))


def part_modules(model) -> dict:
    v = model.vision_model
    return {"vision_tower": [v.patch_embedding, v.layernorm_pre, v.model, v.layernorm_post],
            "projector": [v.vision_adapter, model.multi_modal_projector],
            "language_model": [model.language_model], "rope": rotary_modules(model)}


def make_inputs(model, image_sizes: Sequence = (), video_sizes: Sequence = (), text_len: int = 8, seed: int = 1,
                tiles: Sequence[int] = ()):
    import torch

    if image_sizes or video_sizes:
        raise NotImplementedError("llama4 harness: the Llama 4 image processor is torchvision-only; pass tiles=[n]")
    vc = model.config.vision_config
    per_tile = int((vc.image_size // vc.patch_size) ** 2 * vc.pixel_shuffle_ratio**2)
    gen = torch.Generator().manual_seed(seed)
    ids = text_ids(text_len, gen)
    for n in tiles:
        ids.append(BOI)
        for _ in range(n):
            ids += [IMAGE_TOKEN] * per_tile + [TILE_SEP]
        ids += [EOI] + text_ids(2, gen)
    inputs: dict = {}
    if tiles:
        inputs["pixel_values"] = torch.randn(sum(tiles), 3, vc.image_size, vc.image_size, generator=gen,
                                             dtype=torch.float64)
    media = {"tiles": list(tiles), "visual_tokens": per_tile * sum(tiles), "seq_len": len(ids)}
    inputs.update(input_ids=torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                  use_cache=False)
    return inputs, media


def run(model, inputs: dict):
    """Logits of ``model(**inputs)``, working around a transformers 5.24 bug.

    ``Llama4ForConditionalGeneration.forward`` builds its output with ``outputs.image_outputs`` read from the
    LM's ``MoeCausalLMOutputWithPast`` (no such field) and raises AttributeError *after* every computation;
    the LM's logits are taken from a forward hook on ``model.language_model`` instead (same tensor the model
    would have returned). Any other error propagates.
    """
    captured = {}
    handle = model.language_model.register_forward_hook(lambda mod, args, out: captured.update(logits=out.logits))
    try:
        return model(**inputs).logits
    except AttributeError as exc:
        if "image_outputs" not in str(exc) or "logits" not in captured:
            raise
        return captured["logits"]
    finally:
        handle.remove()


def loose_params(model, part: str) -> list:
    """The CLS embedding and position table are parameters of ``vision_model`` itself (outside the hooked
    tower modules); they belong to the tower."""
    v = model.vision_model
    return [v.class_embedding, v.positional_embedding_vlm] if part == "vision_tower" else []


HARNESS = register(FamilyHarness("llama4", tiny_config, build_model, part_modules, make_inputs, run=run,
                                 loose_params=loose_params))
