"""Idefics3 (``idefics3``) and SmolVLM (``smolvlm``) measurement harnesses.

Tiny config: SigLIP-like tower (``idefics3_vision`` / ``smolvlm_vision``) at 32-px tiles, patch 4 -> 8x8 = 64
patches, hidden 32, 2 layers, 2 heads, MLP 48; connector = pixel shuffle by ``scale_factor`` (2 -> 16 tokens
per tile; SmolVLM's small models use 4 -> 4 tokens) + Linear(32*s^2 -> 64, no bias). LM: Llama, hidden 64.

Inputs: ``Idefics3ImageProcessorPil`` / ``SmolVLMImageProcessorPil`` built locally with ``size.longest_edge``
4*32 and ``max_image_size.longest_edge`` 32 (the tiny analogues of 4*364 / 364), ``do_image_splitting`` on as
the class default: the image is resized so that its longest side is 128 px (up or down: small images are
upscaled), sides rounded up to multiples of 32, cut into rows x cols tiles plus one global 32x32 image; all
through tower and connector (the model drops only all-zero padding images). Tokens as
``Idefics3Processor.replace_image_token``: per tile ``<fake> <row_i_col_j> <image>*n``, a newline per row,
then ``\\n <fake> <global-img> <image>*n <fake>``; unsplit: ``<fake> <global-img> <image>*n <fake>``.
"""

from __future__ import annotations

from typing import Any, Sequence

from .common import VOCAB, FamilyHarness, eager, finish_model, random_images, register, rotary_modules, text_ids

IMAGE_TOKEN, FAKE, GLOBAL, NEWLINE, ROW_COL = 990, 991, 992, 993, 950  # <row_i_col_j> = 950 + 6*(i-1) + (j-1)
TILE = 32


def tiny_config(smolvlm: bool = False, scale_factor: int | None = None, **over: Any):
    import transformers

    prefix = "smolvlm" if smolvlm else "idefics3"
    vision = dict(model_type=f"{prefix}_vision", hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                  num_attention_heads=2, image_size=TILE, patch_size=4, num_channels=3)
    text = dict(model_type="llama", vocab_size=VOCAB, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=4096, bos_token_id=None,
                eos_token_id=None, pad_token_id=None)
    vision.update(over.pop("vision", {}))
    text.update(over.pop("text", {}))
    kw = dict(vision_config=vision, text_config=text, image_token_id=IMAGE_TOKEN,
              scale_factor=scale_factor or (4 if smolvlm else 2), tie_word_embeddings=False)
    kw.update(over)
    return (transformers.SmolVLMConfig if smolvlm else transformers.Idefics3Config)(**kw)


def build_model(config, seed: int = 0):
    import torch
    import transformers

    eager(config)
    torch.manual_seed(seed)
    cls = (transformers.SmolVLMForConditionalGeneration if config.model_type == "smolvlm"
           else transformers.Idefics3ForConditionalGeneration)
    return finish_model(cls(config))


def part_modules(model) -> dict:
    inner = model.model
    return {"vision_tower": [inner.vision_model], "projector": [inner.connector],
            "language_model": [inner.text_model, model.lm_head], "rope": rotary_modules(model)}


def image_processor(config, do_image_splitting: bool = True):
    """Tile = ``vision_config.image_size``; longest edge 4 tiles (the class default ratio 4*364 : 364)."""
    if config.model_type == "smolvlm":
        from transformers.models.smolvlm.image_processing_pil_smolvlm import SmolVLMImageProcessorPil as cls
    else:
        from transformers.models.idefics3.image_processing_pil_idefics3 import Idefics3ImageProcessorPil as cls
    tile = config.vision_config.image_size
    return cls(size={"longest_edge": 4 * tile}, max_image_size={"longest_edge": tile},
               do_image_splitting=do_image_splitting)


def make_inputs(model, image_sizes: Sequence[tuple[int, int]] = (), video_sizes: Sequence = (), text_len: int = 8,
                seed: int = 1, do_image_splitting: bool = True):
    import torch

    cfg = model.config
    if video_sizes and cfg.model_type != "smolvlm":
        raise ValueError("Idefics3Processor takes no videos")
    vc = cfg.vision_config
    per_tile = (vc.image_size // vc.patch_size) ** 2 // cfg.scale_factor**2
    gen = torch.Generator().manual_seed(seed)
    ids = text_ids(text_len, gen)
    media: dict = {"grids": [], "images_in_tower": 0, "visual_tokens": 0}
    inputs: dict = {}
    if image_sizes:
        out = image_processor(cfg, do_image_splitting)([random_images(image_sizes, seed)], return_tensors="pt",
                                                       input_data_format="channels_last", return_row_col_info=True)
        grids = list(zip(out["rows"][0], out["cols"][0], strict=True))
        for rows, cols in grids:
            if rows == 0 and cols == 0:
                ids += [FAKE, GLOBAL] + [IMAGE_TOKEN] * per_tile + [FAKE]
                media["images_in_tower"] += 1
            else:
                for i in range(rows):
                    for j in range(cols):
                        ids += [FAKE, ROW_COL + 6 * i + j] + [IMAGE_TOKEN] * per_tile
                    ids.append(NEWLINE)
                ids += [NEWLINE, FAKE, GLOBAL] + [IMAGE_TOKEN] * per_tile + [FAKE]
                media["images_in_tower"] += rows * cols + 1
            ids += text_ids(2, gen)
        media["grids"] = [(int(r), int(c)) for r, c in grids]
        media["visual_tokens"] = per_tile * media["images_in_tower"]
        inputs.update(pixel_values=out["pixel_values"].to(torch.float64),
                      pixel_attention_mask=out["pixel_attention_mask"])
    if video_sizes:
        # SmolVLM video: the video processor (torchvision, not installed) resizes every frame to the square tile;
        # frames go to the model as images (T random tiles, batch dim 1); per frame the placeholders of
        # transformers' own _prompt_single_image, after a timestamp (text)
        from transformers.models.smolvlm.processing_smolvlm import _prompt_single_image

        if image_sizes:
            raise ValueError("smolvlm harness: images and videos in one sample are not built")
        frames = [int(t) for t, _, _ in video_sizes]
        if len(frames) != 1:
            raise ValueError("smolvlm harness: one video per sample")
        tile = vc.image_size
        marks = {"<fake>": FAKE, "<global>": GLOBAL, "<image>": IMAGE_TOKEN}
        for _ in range(frames[0]):
            ids += text_ids(3, gen)  # "Frame from mm:ss:"
            prompt = _prompt_single_image(per_tile, fake_token_around_image="<fake>", image_token="<image>",
                                          global_image_token="<global>")
            ids += [marks[t] for t in prompt.replace("><", "> <").split()]
        media["visual_tokens"] = per_tile * frames[0]
        media["images_in_tower"] = frames[0]
        inputs.update(pixel_values=torch.randn(1, frames[0], 3, tile, tile, generator=gen, dtype=torch.float64),
                      pixel_attention_mask=torch.ones(1, frames[0], tile, tile, dtype=torch.bool))
    media["seq_len"] = len(ids)
    inputs.update(input_ids=torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                  use_cache=False)
    return inputs, media


def _smolvlm_config(**over):
    return tiny_config(smolvlm=True, **over)


HARNESS = register(FamilyHarness("idefics3", tiny_config, build_model, part_modules, make_inputs))
HARNESS_SMOLVLM = register(FamilyHarness("smolvlm", _smolvlm_config, build_model, part_modules, make_inputs))


def make_batch(model, samples: Sequence[dict], text_len: int = 8, seed: int = 1):
    """Several samples in one batch, each built by :func:`make_inputs` (``dict(image_sizes=...)`` or
    ``dict(video_sizes=[(T, H, W)])``): ``pixel_values`` padded with all-zero images to the longest sample (as
    the image and video processors pad; the model drops all-zero images), masks padded with zeros, and the
    shorter token sequences lengthened with text so every row has the same length (no LM padding)."""
    import torch

    from .common import text_ids

    built = [make_inputs(model, text_len=text_len, seed=seed + i, **s) for i, s in enumerate(samples)]
    longest = max(len(inp["input_ids"][0]) for inp, _ in built)
    n_img = max(inp["pixel_values"].shape[1] for inp, _ in built)
    gen = torch.Generator().manual_seed(seed)
    ids, pixels, masks = [], [], []
    for inp, _ in built:
        row = inp["input_ids"][0].tolist()
        ids.append(row + text_ids(longest - len(row), gen))
        pv, pm = inp["pixel_values"], inp["pixel_attention_mask"].to(torch.bool)
        pad = n_img - pv.shape[1]
        pixels.append(torch.cat([pv, pv.new_zeros(1, pad, *pv.shape[2:])], dim=1))
        masks.append(torch.cat([pm, pm.new_zeros(1, pad, *pm.shape[2:])], dim=1))
    inputs = dict(input_ids=torch.tensor(ids), attention_mask=torch.ones(len(ids), longest, dtype=torch.long),
                  pixel_values=torch.cat(pixels), pixel_attention_mask=torch.cat(masks), use_cache=False)
    return inputs, {"seq_len": longest, "samples": [m for _, m in built]}
