"""Florence-2 (transformers ``florence2``: ``Florence2ForConditionalGeneration``) measurement harness.

Tiny config: a two-stage DaViT tower on 56 x 56 images (stage 0: conv 7x7/4, 3 -> 16 channels, 14 x 14, one block of 2
heads / 2 channel groups; stage 1: conv 3x3/2 pre-norm, 16 -> 32, 7 x 7, two blocks of 4 heads / 4 groups), window 3 (so
both grids are zero-padded to whole windows: 14 -> 15, 7 -> 9), MLP ratio 4; the projector (learned 2D positions of 20
entries, mean token + 49 positions, Linear(32 -> 48) + LayerNorm): 50 ``<image>`` tokens per image; a BART LM of width 48
(4 encoder heads, 2 decoder heads), 2 encoder layers (FFN 64), 3 decoder layers (FFN 80), vocabulary 1000, tied head.

Parts: ``vision_tower`` = ``model.vision_tower``; ``projector`` = ``model.multi_modal_projector``; ``language_model`` =
``model.language_model.encoder`` and ``.decoder`` (``Florence2Model`` calls them directly, never ``BartModel.forward``)
+ ``lm_head``.

Inputs: transformers' own ``Florence2Processor`` (built offline: ``CLIPImageProcessorPil`` resizing to 56 x 56 with
``image_seq_length`` 50, no crop, and a word-level tokenizer over a tiny vocabulary with ``<image>`` as id 7): per sample
one image and one text -> ``<image>`` x 50 ``<s>`` text ``</s>``, padded to the longest; labels of ``decoder_len`` + i
words per sample i, padded with -100 to the longest, so the decoder runs on the padded label length
(``shift_tokens_right``). The loss is the model's own (cross entropy on the labels).
"""

from __future__ import annotations

from typing import Any, Sequence

from .common import VOCAB, FamilyHarness, eager, finish_model, random_images, register

IMAGE_TOKEN = 7
SIZE = 56


def tiny_config(**over: Any):
    import transformers

    vision = dict(depths=[1, 2], patch_size=[7, 3], patch_stride=[4, 2], patch_padding=[3, 1],
                  patch_prenorm=[False, True], embed_dim=[16, 32], num_heads=[2, 4], num_groups=[2, 4], window_size=3,
                  projection_dim=48, max_position_embeddings=20, max_temporal_embeddings=10, drop_path_rate=0.0)
    text = dict(model_type="bart", vocab_size=VOCAB, d_model=48, encoder_layers=2, decoder_layers=3,
                encoder_ffn_dim=64, decoder_ffn_dim=80, encoder_attention_heads=4, decoder_attention_heads=2,
                max_position_embeddings=256, pad_token_id=0, bos_token_id=2, eos_token_id=1,
                decoder_start_token_id=1, dropout=0.0, attention_dropout=0.0, activation_dropout=0.0)
    vision.update(over.pop("vision", {}))
    text.update(over.pop("text", {}))
    kw = dict(vision_config=vision, text_config=text, image_token_id=IMAGE_TOKEN)
    kw.update(over)
    return transformers.Florence2Config(**kw)


def build_model(config, seed: int = 0):
    import torch
    import transformers

    eager(config)
    torch.manual_seed(seed)
    return finish_model(transformers.Florence2ForConditionalGeneration(config))


def part_modules(model) -> dict:
    return {"vision_tower": [model.model.vision_tower], "projector": [model.model.multi_modal_projector],
            "language_model": [model.model.language_model.encoder, model.model.language_model.decoder, model.lm_head],
            "rope": []}


def image_tokens(config) -> int:
    """s² + 1 for the last stage's s x s grid on a SIZE-pixel image (conv output sides in turn)."""
    side = SIZE
    v = config.vision_config
    for k, st, p in zip(v.patch_size, v.patch_stride, v.patch_padding):
        side = (side + 2 * p - k) // st + 1
    return side * side + 1


def processor(config):
    """transformers' own ``Florence2Processor``, built offline (``CLIPImageProcessorPil`` at SIZE x SIZE, no crop,
    ``image_seq_length`` s² + 1; a word-level tokenizer whose ``<image>`` is id 7)."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import Florence2Processor, PreTrainedTokenizerFast
    from transformers.models.clip.image_processing_pil_clip import CLIPImageProcessorPil

    vocab = {"<pad>": 0, "</s>": 1, "<s>": 2, "<unk>": 3, "a": 4, "b": 5, "c": 6, "<image>": 7}
    words = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    words.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok = PreTrainedTokenizerFast(tokenizer_object=words, bos_token="<s>", eos_token="</s>", pad_token="<pad>",
                                  unk_token="<unk>", extra_special_tokens={"image_token": "<image>"})
    ip = CLIPImageProcessorPil(size={"height": SIZE, "width": SIZE}, do_center_crop=False,
                               image_seq_length=image_tokens(config))
    return Florence2Processor(image_processor=ip, tokenizer=tok)


PROCESSOR_FILES = {"preprocessor_config.json": {"size": {"height": SIZE, "width": SIZE}}}


def make_inputs(model, image_sizes: Sequence[tuple[int, int]] = (), video_sizes: Sequence = (), text_len: int = 5,
                seed: int = 1, decoder_len: int = 4):
    """One sample per image: text of ``text_len`` + i words and labels of ``decoder_len`` + i words for sample i;
    texts padded by the processor, labels padded with -100 (the decoder runs on the longest label length)."""
    import torch

    if video_sizes:
        raise ValueError("florence2 has no video input")
    if not image_sizes:
        raise ValueError("Florence2Processor: the harness feeds images")
    proc = processor(model.config)
    gen = torch.Generator().manual_seed(seed)
    words = lambda n: " ".join("abc"[i % 3] for i in torch.randint(0, 3, (n,), generator=gen).tolist())  # noqa: E731
    texts = [words(text_len + i) for i in range(len(image_sizes))]
    out = proc(images=random_images(image_sizes, seed), text=texts, padding=True, return_tensors="pt",
               input_data_format="channels_last")
    ids = out["input_ids"]
    assert proc.tokenizer.convert_tokens_to_ids("<image>") == IMAGE_TOKEN
    dec = [decoder_len + i for i in range(len(image_sizes))]
    labels = torch.full((len(dec), max(dec)), -100, dtype=torch.long)
    for i, n in enumerate(dec):
        labels[i, :n] = torch.randint(8, VOCAB, (n,), generator=gen)
    media = {"images": int(out["pixel_values"].shape[0]), "visual_tokens": int((ids == IMAGE_TOKEN).sum()),
             "seq_len": int(ids.shape[1]), "batch": int(ids.shape[0]), "decoder_len": max(dec),
             "pixel_values_shape": tuple(out["pixel_values"].shape)}
    inputs = dict(input_ids=ids, attention_mask=out["attention_mask"], labels=labels,
                  pixel_values=out["pixel_values"].to(torch.float64), use_cache=False)
    return inputs, media


def run(model, inputs):
    """The model's own loss on the labels (a scalar: the harness's ``.mean().backward()`` is then the loss's)."""
    return model(**inputs).loss


HARNESS = register(FamilyHarness("florence2", tiny_config, build_model, part_modules, make_inputs, run=run))
