"""Kimi K2.5 (transformers ``kimi_k25``: ``Kimi_K25ForConditionalGeneration``) measurement harness.

Tiny config: MoonViT3d tower with the processor's real patch 14 (Conv2d 588 -> 32, bias), learned 8x8 position
grid (bicubic ``embedding_bag``), sinusoidal time table of ``pos_emb_time`` 4 rows, 2 layers hidden 32, 2 heads,
MLP 48 (GELU-tanh), axial 2D RoPE; ``temporal_merge`` (mean over the frames of each grid row, then 2x2 fold);
``mm_projector`` = LayerNorm(32) -> Linear(128 -> 128) -> GELU -> Linear(128 -> 64). LM: DeepSeek-V3 of 2 layers
hidden 64 (MLA: q LoRA 24, kv LoRA 16, nope 8 + rope 8, v 16; 4 heads), layer 0 dense MLP 96, layer 1 MoE with 4
routed experts of 24 top-2 + 1 shared expert (eager experts: each expert runs on its routed tokens only).

Parts: vision_tower = ``vision_tower`` (patch embed + positions, layers, final norm, temporal pooling);
projector = ``mm_projector``; language_model = LM + lm_head.

Inputs: ``Kimi_K25ImageProcessor`` / ``Kimi_K25VideoProcessor`` are torchvision-backend classes and torchvision is
not in the environment (installing it would switch other families' processors to their torchvision backends),
so transformers' own ``_preprocess`` of each class runs with torch stand-ins for ``resize`` / ``pad`` /
``rescale_and_normalize`` (pixel values do not change a FLOP): the chunking of a video into
``temporal_patch_size``-frame chunks, ``navit_resize``, the padding to multiples of patch x merge, ``patchify``
and the ``grid_thw`` rows are the processor's code. Placeholder counts come from ``Kimi_K25Processor``'s own
``replace_image_token`` / ``replace_video_token`` (one frame's merged tokens per chunk).
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, Sequence

from .common import VOCAB, FamilyHarness, eager, finish_model, register, rotary_modules, text_ids

IMAGE_TOKEN, VIDEO_TOKEN, BEGIN, END = 990, 991, 992, 993


def tiny_config(**over: Any):
    import transformers

    vision = dict(patch_size=14, hidden_size=32, num_attention_heads=2, num_hidden_layers=2, intermediate_size=48,
                  pos_emb_height=8, pos_emb_width=8, pos_emb_time=4, merge_kernel_size=[2, 2],
                  rope_parameters={"rope_type": "axial", "rope_theta": 10000.0})
    text = dict(model_type="deepseek_v3", vocab_size=VOCAB, hidden_size=64, intermediate_size=96,
                moe_intermediate_size=24, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4,
                kv_lora_rank=16, q_lora_rank=24, qk_nope_head_dim=8, qk_rope_head_dim=8, v_head_dim=16,
                n_shared_experts=1, n_routed_experts=4, num_experts_per_tok=2, first_k_dense_replace=1, n_group=1,
                topk_group=1, bos_token_id=None, eos_token_id=None, pad_token_id=None)
    vision.update(over.pop("vision", {}))
    text.update(over.pop("text", {}))
    kw = dict(vision_config=vision, text_config=text, projection_hidden_size=vision["hidden_size"],
              image_token_id=IMAGE_TOKEN, video_token_id=VIDEO_TOKEN, vision_start_token_id=BEGIN,
              vision_end_token_id=END, tie_word_embeddings=False)
    kw.update(over)
    return transformers.Kimi_K25Config(**kw)


def build_model(config, seed: int = 0):
    import torch
    import transformers

    eager(config, experts=True)
    torch.manual_seed(seed)
    model = finish_model(transformers.Kimi_K25ForConditionalGeneration(config))
    with torch.no_grad():  # zero-initialised routers tie every score; random ones make routing non-trivial
        for layer in model.model.language_model.layers:
            gate = getattr(layer.mlp, "gate", None)
            if gate is not None:
                gate.weight.normal_(0, 0.5)
    return model


def part_modules(model) -> dict:
    m = model.model
    return {"vision_tower": [m.vision_tower], "projector": [m.mm_projector],
            "language_model": [m.language_model, model.lm_head], "rope": rotary_modules(model)}


def processor_module(name: str) -> dict:
    """transformers' ``models/kimi_k25/<name>.py`` executed from its source with the one ``torchvision`` import
    left out (``tvF`` only appears in quoted annotations), its relative imports made absolute and the
    ``@auto_docstring`` decorators (documentation only) dropped: the classes'
    own code, importable without torchvision."""
    import re
    from pathlib import Path

    import transformers.models.kimi_k25 as pkg

    src = (Path(pkg.__file__).parent / f"{name}.py").read_text()
    src = re.sub(r"^(from torchvision|import torchvision)[^\n]*\n", "", src, flags=re.M)
    src = re.sub(r"^\s*@auto_docstring\n", "", src, flags=re.M)  # docstring generation only
    src = re.sub(r"^from \.\.\.", "from transformers.", src, flags=re.M)
    src = re.sub(r"^from \.\.", "from transformers.models.", src, flags=re.M)
    ns: dict = {"__name__": f"kimi_k25_{name}"}
    exec(compile(src, f"transformers/models/kimi_k25/{name}.py", "exec"), ns)
    return ns


class _TorchStandIns:
    """``resize`` / ``pad`` / ``rescale_and_normalize`` in plain torch (shapes as the torchvision backend gives
    them); every other step is the processor class's own method."""

    def __init__(self, cls):
        self._cls = cls
        self.patchify = cls.patchify.__get__(self)

    @staticmethod
    def resize(images, size, resample=None, **_):
        import torch.nn.functional as F

        lead = images.shape[:-3]
        flat = images.reshape(-1, *images.shape[-3:]).double()
        out = F.interpolate(flat, size=(size.height, size.width), mode="bilinear", align_corners=False)
        return out.reshape(*lead, *out.shape[-3:])

    @staticmethod
    def pad(images, pad_size, **_):
        import torch.nn.functional as F

        h, w = images.shape[-2:]  # the backend returns the padded items as a list
        return list(F.pad(images, (0, pad_size.width - w, 0, pad_size.height - h)))

    @staticmethod
    def rescale_and_normalize(images, *args, **_):
        return images.double() / 255.0


def process_images(image_sizes: Sequence[tuple[int, int]], seed: int = 0, **kw: Any) -> dict:
    """``Kimi_K25ImageProcessor._preprocess`` on random images of the given (H, W) pixels (class defaults unless
    ``kw`` overrides ``size`` / ``max_patches``): {"pixel_values", "image_grid_thw"}."""
    import torch
    from transformers.image_utils import SizeDict

    P = processor_module("image_processing_kimi_k25")["Kimi_K25ImageProcessor"]

    gen = torch.Generator().manual_seed(seed)
    images = [torch.randint(0, 256, (3, h, w), generator=gen, dtype=torch.uint8) for h, w in image_sizes]
    side = kw.get("size", P.size["max_height"])
    return P._preprocess(_TorchStandIns(P), images, do_resize=True, size=SizeDict(max_height=side, max_width=side),
                         resample=None, do_rescale=True, rescale_factor=1 / 255, do_normalize=True, image_mean=None,
                         image_std=None, patch_size=kw.get("patch_size", P.patch_size),
                         merge_size=kw.get("merge_size", P.merge_size),
                         max_patches=kw.get("max_patches", P.max_patches), disable_grouping=None,
                         return_tensors=None)


def process_videos(video_sizes: Sequence[tuple[int, int, int]], seed: int = 0, **kw: Any) -> dict:
    """``Kimi_K25VideoProcessor._preprocess`` on random videos of (T sampled frames, H, W) pixels:
    {"pixel_values_videos", "video_grid_thw" (one row per chunk), "num_chunks_per_video"}."""
    import torch
    from transformers.image_utils import SizeDict

    P = processor_module("video_processing_kimi_k25")["Kimi_K25VideoProcessor"]

    gen = torch.Generator().manual_seed(seed)
    videos = [torch.randint(0, 256, (t, 3, h, w), generator=gen, dtype=torch.uint8) for t, h, w in video_sizes]
    side = kw.get("size", P.size["max_height"])
    return P._preprocess(_TorchStandIns(P), videos, do_resize=True, size=SizeDict(max_height=side, max_width=side),
                         resample=None, do_rescale=True, rescale_factor=1 / 255, do_normalize=True, image_mean=None,
                         image_std=None, patch_size=kw.get("patch_size", P.patch_size),
                         temporal_patch_size=kw.get("temporal_patch_size", P.temporal_patch_size),
                         merge_size=kw.get("merge_size", P.merge_size),
                         max_patches=kw.get("video_max_patches", P.max_patches), return_tensors=None)


def placeholder_counts(images: dict | None, videos: dict | None, **kw: Any) -> tuple[list[int], list[list[int]]]:
    """LM placeholder tokens per image, and per chunk of each video, as ``Kimi_K25Processor`` writes them."""
    from transformers.models.kimi_k25.processing_kimi_k25 import Kimi_K25Processor as P

    merge = kw.get("merge_size", 2)
    tp = kw.get("temporal_patch_size", 4)
    proc = SimpleNamespace(image_processor=SimpleNamespace(merge_size=merge),
                           video_processor=SimpleNamespace(merge_size=merge, temporal_patch_size=tp),
                           image_token="<I>", video_token="<V>")
    per_image = []
    if images is not None:
        for i in range(len(images["image_grid_thw"])):
            per_image.append(P.replace_image_token(proc, images, i).count("<I>"))
    per_video: list[list[int]] = []
    if videos is not None:
        chunks = videos["num_chunks_per_video"]
        stamps = [SimpleNamespace(fps=2.0, timestamps=[k / 2 for k in range(n * tp)]) for n in chunks]
        inputs = dict(videos, video_metadata=stamps)
        for v in range(len(chunks)):
            text = P.replace_video_token(proc, inputs, v)
            per_video.append([part.count("<V>") for part in text.split("<|media_end|>")[:-1]])
    return per_image, per_video


def _sample_ids(per_image: Sequence[int], per_video: Sequence[Sequence[int]], text_len: int, gen) -> list[int]:
    ids = text_ids(text_len, gen)
    for n in per_image:
        ids += [BEGIN] + [IMAGE_TOKEN] * n + [END] + text_ids(2, gen)
    for chunks in per_video:
        for n in chunks:
            ids += text_ids(3, gen) + [BEGIN] + [VIDEO_TOKEN] * n + [END]
    return ids


def make_inputs(model, image_sizes: Sequence = (), video_sizes: Sequence = (), text_len: int = 8, seed: int = 1,
                samples: Sequence[dict] = (), **kw: Any):
    """One sample with ``image_sizes`` / ``video_sizes``, or a padded batch: ``samples`` = one dict per row with its
    own ``image_sizes`` / ``video_sizes`` (rows right-padded to the longest with attention_mask 0)."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    rows = list(samples) or [dict(image_sizes=image_sizes, video_sizes=video_sizes)]
    all_images = [s for row in rows for s in row.get("image_sizes", ())]
    all_videos = [s for row in rows for s in row.get("video_sizes", ())]
    images = process_images(all_images, seed, **kw) if all_images else None
    videos = process_videos(all_videos, seed, **kw) if all_videos else None
    per_image, per_video = placeholder_counts(images, videos, **kw)
    seqs, i, v = [], 0, 0
    for row in rows:
        n_img, n_vid = len(row.get("image_sizes", ())), len(row.get("video_sizes", ()))
        seqs.append(_sample_ids(per_image[i:i + n_img], per_video[v:v + n_vid], text_len, gen))
        i, v = i + n_img, v + n_vid
    longest = max(len(ids) for ids in seqs)
    input_ids = torch.tensor([ids + [0] * (longest - len(ids)) for ids in seqs])
    mask = torch.tensor([[1] * len(ids) + [0] * (longest - len(ids)) for ids in seqs])
    inputs: dict = {"input_ids": input_ids, "attention_mask": mask, "use_cache": False}
    image_grids: list = []
    video_grids: list = []
    if images is not None:
        inputs.update(pixel_values=images["pixel_values"].double(), image_grid_thw=images["image_grid_thw"])
        image_grids = [tuple(int(x) for x in r) for r in images["image_grid_thw"].tolist()]
    if videos is not None:
        inputs.update(pixel_values_videos=videos["pixel_values_videos"].double(),
                      video_grid_thw=videos["video_grid_thw"])
        video_grids = [tuple(int(x) for x in r) for r in videos["video_grid_thw"].tolist()]
    media = {"image_grids": image_grids, "video_grids": video_grids, "seq_len": longest, "samples": len(rows),
             "seq_lens": [len(ids) for ids in seqs],
             "visual_tokens": sum(per_image) + sum(map(sum, per_video)), "image_tokens": per_image,
             "video_chunk_tokens": per_video,
             "num_chunks_per_video": list(videos["num_chunks_per_video"]) if videos is not None else []}
    return inputs, media


HARNESS = register(FamilyHarness("kimi_k25", tiny_config, build_model, part_modules, make_inputs))
