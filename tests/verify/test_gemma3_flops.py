"""Gemma 3 (transformers ``Gemma3ForConditionalGeneration``) against FlopCounterMode, per part.

Reference: the famverify harness (``tests/verify/families/gemma3.py``): a tiny random Gemma 3 (SigLIP 32 px,
patch 4, 2 layers; RMSNorm + matmul projector after a 2x2 average pool to 16 tokens; LM of 3 layers
[sliding, sliding, full] with window 8, head_dim 16, q/k norm, 4 norms per layer, tied head), eager
attention, float64, images through transformers' own ``Gemma3ImageProcessorPil`` with ``Gemma3Processor``'s
forced call kwargs (and ``do_pan_and_scan=True`` where a test asks for it), token layout and
``token_type_ids`` as ``Gemma3Processor`` writes them. The library starts from the SAME pixel sizes, derives
media with its own rule (``Gemma3Media``) and counts ``exact`` with ``causal="full"`` (eager computes the
whole square in every layer, sliding or not, image blocks included). Tolerance 0.5 % per part (all exact).

``--causal half`` cannot be measured by FlopCounterMode (no windowed kernel on CPU); it is checked against
the score entries of transformers' own attention masks for the same inputs (``test_causal_half_*``).
"""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.measured
torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from .families import measure_family  # noqa: E402
from .families.gemma3 import build_model, tiny_config  # noqa: E402

REL_TOL = 0.005
PROCESSOR = {"preprocessor_config.json": {"size": {"height": 32, "width": 32}, "do_pan_and_scan": None}}
SIZES = [[(30, 50), (64, 64)], [(7, 300)], [(100, 30), (32, 32), (40, 41)]]
PAS = dict(pan_and_scan_min_crop_size=8)  # the tiny analogue of the 256-px minimum crop


@pytest.fixture(scope="module")
def model():
    return build_model(tiny_config(), 0)


def _spec(model, processor=PROCESSOR):
    from vlm_perf.arch import spec_from_config

    return spec_from_config(model.config.to_dict(), name="tiny-gemma3", processor=processor)


def _library(model, measured, images, mode="forward", frozen=(), pan_and_scan=False, causal="full"):
    from vlm_perf.arch.families.gemma3 import Gemma3Media
    from vlm_perf.flops import compute_flops
    from vlm_perf.stats import BatchStats

    spec = _spec(model)
    rule = Gemma3Media(pan_and_scan=True, **PAS) if pan_and_scan else Gemma3Media()
    media = [rule.image(spec, h, w) for h, w in images]
    assert [m.detail["crops"] for m in media] == measured.media["crops"]  # the rule agrees with HF's processor
    assert sum(m.grid[0] for m in media) == measured.media["images_in_tower"]
    assert sum(m.visual_tokens for m in media) == measured.media["visual_tokens"]
    stats = BatchStats.from_batch(seq_lens=[measured.media["seq_len"]], image_grids=[m.grid for m in media],
                                  spec=spec)
    return compute_flops(spec, stats, mode=mode, causal=causal, frozen=frozen)


def _check(measured: dict, library: dict):
    bad = {p: (measured[p], library[p]) for p in measured
           if abs(library[p] - measured[p]) > REL_TOL * max(measured[p], 1)}
    assert not bad, bad


@pytest.mark.parametrize("images", SIZES, ids=lambda s: "+".join(f"{h}x{w}" for h, w in s))
def test_forward_per_part(model, images):
    m = measure_family("gemma3", model=model, image_sizes=images)
    _check(m.parts("forward"), _library(model, m, images).parts)


@pytest.mark.parametrize("images", [[(30, 90)], [(100, 30), (40, 200)]], ids=["30x90", "100x30+40x200"])
def test_forward_pan_and_scan(model, images):
    """Pan-and-scan (when the caller turns it on): every crop is one more image through tower + projector."""
    m = measure_family("gemma3", model=model, image_sizes=images, pan_and_scan=True, pan_and_scan_min_crop_size=8)
    assert sum(m.media["crops"]) > 0
    _check(m.parts("forward"), _library(model, m, images, pan_and_scan=True).parts)


@pytest.mark.parametrize("frozen", [(), ("vision_tower",), ("projector",), ("vision_tower", "projector")],
                         ids=["all-trainable", "frozen-tower", "frozen-projector", "frozen-vision"])
def test_training_per_part(model, frozen):
    images = [(30, 50), (64, 64)]
    m = measure_family("gemma3", model=model, image_sizes=images, mode="training", frozen=frozen)
    _check(m.parts("training"), _library(model, m, images, mode="training", frozen=frozen).parts)


def test_training_frozen_lm(model):
    images = [(50, 30)]
    m = measure_family("gemma3", model=model, image_sizes=images, mode="training", frozen=("language_model",))
    _check(m.parts("training"), _library(model, m, images, mode="training", frozen=("language_model",)).parts)


def test_parameters_per_part(model):
    from vlm_perf.arch.params import count_params

    numel = lambda mod: sum(p.numel() for p in mod.parameters())  # noqa: E731
    c = count_params(_spec(model))
    assert c.vision_tower == numel(model.model.vision_tower)
    assert c.merger == numel(model.model.multi_modal_projector)
    assert c.lm == numel(model.model.language_model)  # lm_head tied: stored once
    assert c.total == numel(model)


def _mask_entries(model, images):
    """Allowed score entries per layer type of the masks transformers builds for these inputs."""
    from transformers.models.gemma3.modeling_gemma3 import create_masks_for_vision_model, \
        get_block_sequence_ids_for_mask

    from .families.gemma3 import make_inputs

    inputs, media = make_inputs(model, image_sizes=images, text_len=40)
    embeds = model.get_input_embeddings()(inputs["input_ids"])
    ids = get_block_sequence_ids_for_mask(inputs["token_type_ids"])
    pos = torch.arange(embeds.shape[1])[None]
    masks = create_masks_for_vision_model(config=model.config.get_text_config(), inputs_embeds=embeds,
                                          attention_mask=inputs["attention_mask"], cache=None, position_ids=pos,
                                          block_sequence_ids=ids)
    count = {}
    for kind, mask in masks.items():
        allowed = mask if mask.dtype == torch.bool else mask == 0
        count[kind] = int(allowed.sum())
    return count, media


def test_causal_half_counts_the_masks_score_entries(model):
    """--causal half = the continuous count of what transformers' masks keep: sum over layers of s^2/2 (full
    layers) or s^2/2 - (s-W)^2/2 (sliding), plus n^2/2 per image block (bidirectional). The discrete masks
    keep the diagonal too (+ s/2 full, + W/2 sliding with s > W) and a block re-opens n(n-1)/2 entries;
    both the masks and the library are checked exactly against that arithmetic here."""
    from vlm_perf.flops.blocks import FlopsContext, inventory_terms
    from vlm_perf.stats import BatchStats

    images = [(30, 50), (64, 64)]
    entries, media = _mask_entries(model, images)
    s, n, blocks, window = media["seq_len"], 16, media["images_in_tower"], 8
    assert entries["full_attention"] == s * s / 2 + s / 2 + blocks * (n * n - n) / 2
    assert entries["sliding_attention"] == (s * window - window * window / 2 + window / 2
                                            + blocks * (n * n - n) / 2)
    spec = _spec(model)
    stats = BatchStats.from_batch(seq_lens=[s], image_grids=[(1, 8, 8)] * blocks, spec=spec)
    core = sum(t.forward for t in inventory_terms(spec.blocks, stats, FlopsContext("half"))
               if t.component == "lm.attn_core")
    per_entry = 2 * 4 * 2 * 16  # 2 FLOPs x heads x (QK^T + AV) x head_dim
    # discrete -> continuous: the causal diagonal adds s/2 (W/2 windowed); a block's n(n-1)/2 is n^2/2 - n/2
    continuous = (entries["full_attention"] - s / 2 + blocks * n / 2) \
        + 2 * (entries["sliding_attention"] - window / 2 + blocks * n / 2)
    assert core == per_entry * continuous


def test_causal_full_counts_the_square_in_every_layer(model):
    from vlm_perf.flops.blocks import FlopsContext, inventory_terms
    from vlm_perf.stats import BatchStats

    spec = _spec(model)
    stats = BatchStats.from_batch(seq_lens=[100], image_grids=[(1, 8, 8)] * 3, spec=spec)
    core = sum(t.forward for t in inventory_terms(spec.blocks, stats, FlopsContext("full"))
               if t.component == "lm.attn_core")
    assert core == 3 * 2 * 4 * 2 * 16 * 100 * 100


@pytest.mark.parametrize("mode,frozen", [("forward", ()), ("training", ()), ("training", ("vision_tower",))],
                         ids=["forward", "training", "training-frozen-tower"])
def test_siglip_pooling_head(mode, frozen):
    """vision_use_head=True (SigLIP's class default): the head runs on every image, its output is discarded, so
    training adds no backward for it."""
    head_model = build_model(tiny_config(vision={"vision_use_head": True}), 0)
    images = [(30, 50), (64, 64)]
    m = measure_family("gemma3", model=head_model, image_sizes=images, mode=mode, frozen=frozen)
    _check(m.parts(mode), _library(head_model, m, images, mode=mode, frozen=frozen).parts)
    from vlm_perf.arch.params import count_params

    tower = head_model.model.vision_tower
    assert count_params(_spec(head_model)).vision_tower == sum(p.numel() for p in tower.parameters())
