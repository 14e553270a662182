"""InternVL over a gpt-oss LM (InternVL3.5-GPT-OSS layout: ``text_config.model_type`` gpt_oss) against
FlopCounterMode, per part, to the FLOP.

The InternVL harness (``tests/verify/families/internvl.py``) with its tiny tower and a tiny gpt-oss LM: 2 layers
[sliding (window 8), full], hidden 64, 4 q / 2 kv heads x 16, sinks, 4 experts of width 24, top-2, eager
attention and eager experts (top-k gathered per expert: tests/verify/test_gpt_oss_flops.py). Images through
transformers' own processor; the library derives the tiles with its own rule and counts ``exact`` with
``causal="full"`` (eager computes the whole square, the window is a mask).
"""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.measured
torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from .families import measure_family  # noqa: E402
from .families.internvl import build_model, tiny_config  # noqa: E402
from .test_measured_internvl import PROCESSOR, spec_media  # noqa: E402

GPT_OSS = dict(intermediate_size=24, head_dim=16, num_local_experts=4, num_experts_per_tok=2, sliding_window=8,
               layer_types=["sliding_attention", "full_attention"],
               rope_parameters={"rope_type": "default", "rope_theta": 10000.0})
SIZES = [[(48, 80), (32, 32)], [(100, 30)], [(64, 64), (20, 200), (32, 32)]]
FROZEN = [(), ("vision_tower",), ("vision_tower", "projector"), ("language_model",)]


@pytest.fixture(scope="module")
def model():
    return build_model(tiny_config("gpt_oss", text=GPT_OSS), 0)


def _library(model, measured, images, mode="forward", frozen=()):
    from vlm_perf.arch import spec_from_config
    from vlm_perf.flops import compute_flops
    from vlm_perf.stats import BatchStats

    spec = spec_from_config(model.config.to_dict(), name="tiny-internvl-gpt-oss", processor=PROCESSOR)
    media = [spec_media(spec, h, w) for h, w in images]
    assert [m.tiles for m in media] == measured.media["tiles"]
    assert sum(m.visual_tokens for m in media) == measured.media["visual_tokens"]
    stats = BatchStats.from_batch(seq_lens=[measured.media["seq_len"]], image_grids=[m.grid for m in media],
                                  spec=spec)
    return compute_flops(spec, stats, mode=mode, causal="full", frozen=frozen)


def test_spec_reads_the_gpt_oss_lm(model):
    from vlm_perf.arch import spec_from_config
    from vlm_perf.arch.blocks import BiasedMoEMLP, SinkDecoderAttention

    spec = spec_from_config(model.config.to_dict())
    assert spec.family == "internvl" and spec.lm.family == "gpt_oss"
    assert spec.lm.sliding_layers == (0,) and spec.lm.sliding_window == 8
    kinds = {type(b) for b in spec.blocks}
    assert {SinkDecoderAttention, BiasedMoEMLP} <= kinds


@pytest.mark.parametrize("images", SIZES, ids=lambda s: "+".join(f"{h}x{w}" for h, w in s))
def test_forward_per_part_exact(model, images):
    m = measure_family("internvl", model=model, image_sizes=images)
    lib = _library(model, m, images)
    assert m.parts("forward") == {p: lib.parts[p] for p in m.parts("forward")}


@pytest.mark.parametrize("frozen", FROZEN, ids=lambda f: "+".join(f) or "all-trainable")
def test_training_per_part_exact(model, frozen):
    images = [(48, 80), (32, 32)]
    m = measure_family("internvl", model=model, image_sizes=images, mode="training", frozen=frozen)
    lib = _library(model, m, images, mode="training", frozen=frozen)
    assert m.parts("training") == {p: lib.parts[p] for p in m.parts("training")}


def test_parameters_per_part(model):
    from vlm_perf.arch import spec_from_config
    from vlm_perf.arch.params import count_params

    spec = spec_from_config(model.config.to_dict())
    numel = lambda mod: sum(p.numel() for p in mod.parameters())  # noqa: E731
    c = count_params(spec)
    assert c.vision_tower == numel(model.model.vision_tower)
    assert c.merger == numel(model.model.multi_modal_projector)
    assert c.lm == numel(model.model.language_model) + numel(model.lm_head)
    assert c.total == numel(model)
