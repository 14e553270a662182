"""Llama 4 (transformers ``Llama4ForConditionalGeneration``) against FlopCounterMode, per part, and its media rule
against transformers' own canvas and prompt functions.

Reference: the famverify harness (``tests/verify/families/llama4.py``): a tiny random Llama 4 (32-px tiles, patch 4:
64 patches + a trailing CLS; 2 layers; pixel shuffle 0.5 -> 16 tokens of 128 per tile; adapter 128 -> 48 -> 48,
projector 48 -> 64; LM of 2 layers: layer 0 chunked RoPE attention + dense MLP 96, layer 1 global NoPE attention + MoE
of 4 experts top-1 + a shared expert of 32), eager attention, float64; media given as tiles (the image processor is
torchvision-only). Tower and projector are exact to the FLOP, forward and training, every frozen combination. The LM
differs from transformers' by exactly what ``Llama4TextMoe``'s dense reference computes beyond the routed experts:
every token through all E experts, (E - k) x 2·S·3·h·F more per MoE layer forward (x3 in training with the LM
trainable, x2 with it frozen) -- hand arithmetic written here, not the library's number.
"""

from __future__ import annotations

import ast
import math
from collections import defaultdict
from functools import lru_cache
from pathlib import Path

import pytest

pytestmark = pytest.mark.measured
torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from .families import load_preset, measure_family  # noqa: E402
from .families.llama4 import build_model, tiny_config  # noqa: E402

E, K, H, F = 4, 1, 64, 32  # tiny MoE: experts, top-k, hidden, expert width
FROZEN = [(), ("vision_tower",), ("vision_tower", "projector"), ("language_model",), ("language_model", "projector")]


@pytest.fixture(scope="module")
def model():
    return build_model(tiny_config(), 0)


def _spec(model):
    from vlm_perf.arch import spec_from_config

    return spec_from_config(model.config.to_dict(), name="tiny-llama4")


def _library(model, measured, tiles, mode="forward", frozen=(), causal="full"):
    from vlm_perf.flops import compute_flops
    from vlm_perf.stats import BatchStats

    stats = BatchStats.from_batch(seq_lens=[measured.media["seq_len"]], image_grids=[(n, 8, 8) for n in tiles],
                                  spec=_spec(model))
    return compute_flops(spec=_spec(model), stats=stats, mode=mode, causal=causal, frozen=frozen).parts


@pytest.mark.parametrize("tiles", [[5, 1], [1], [2, 2, 1]], ids=str)
def test_forward_per_part(model, tiles):
    m = measure_family("llama4", model=model, tiles=tiles)
    got, measured = _library(model, m, tiles), m.parts("forward")
    assert got["vision_tower"] == measured["vision_tower"]
    assert got["projector"] == measured["projector"]
    s = m.media["seq_len"]
    assert measured["language_model"] - got["language_model"] == (E - K) * 2 * s * 3 * H * F


@pytest.mark.parametrize("frozen", FROZEN, ids=lambda f: "+".join(f) or "all-trainable")
def test_training_per_part(model, frozen):
    tiles = [5, 1]
    m = measure_family("llama4", model=model, tiles=tiles, mode="training", frozen=frozen)
    got, measured = _library(model, m, tiles, "training", frozen), m.parts("training")
    assert got["vision_tower"] == measured["vision_tower"]
    assert got["projector"] == measured["projector"]
    s = m.media["seq_len"]
    extra = (2 if "language_model" in frozen else 3) * (E - K) * 2 * s * 3 * H * F
    assert measured["language_model"] - got["language_model"] == extra


def test_parameters_per_part(model):
    from vlm_perf.arch.params import count_params

    numel = lambda mod: sum(p.numel() for p in mod.parameters())
    c = count_params(_spec(model))
    v = model.vision_model
    assert c.vision_tower == numel(v) - numel(v.vision_adapter)
    assert c.merger == numel(v.vision_adapter) + numel(model.multi_modal_projector)
    assert c.lm == numel(model.language_model)
    assert c.total == numel(model)


def test_scout_preset_equals_transformers_count_and_the_published_total():
    from vlm_perf.arch import load_model
    from vlm_perf.arch.params import count_params

    import transformers

    cfg = load_preset("Llama-4-Scout-17B-16E-Instruct")
    with torch.device("meta"):
        meta = transformers.Llama4ForConditionalGeneration(transformers.AutoConfig.for_model(**cfg))
    total = sum(p.numel() for p in meta.parameters())
    assert count_params(load_model("llama4-scout-17b-16e")).total == total == 108_641_793_536
    assert abs(total - 109e9) < 0.5e9  # "109B total" (Meta's model card)


def test_maverick_preset_equals_transformers_count_and_the_published_sizes():
    """Maverick (cited copies of its config.json: see the preset note): MoE on every second layer (24 of 48),
    the others a dense gated MLP of 16384. vlm-perf's count = transformers' meta-device count. Published "400B
    total / 17B active": active = total - the 127 unused experts of each MoE layer (3 x 5120 x 8192 each), by hand,
    minus the vision tower and projector -> 17.2B LM parameters per token, "17B"."""
    from vlm_perf.arch import load_model
    from vlm_perf.arch.params import count_params

    import transformers

    cfg = load_preset("Llama-4-Maverick-17B-128E-Instruct")
    with torch.device("meta"):
        meta = transformers.Llama4ForConditionalGeneration(transformers.AutoConfig.for_model(**cfg))
    total = sum(p.numel() for p in meta.parameters())
    c = count_params(load_model("llama4-maverick-17b-128e"))
    assert c.total == total == 401_583_781_376
    assert c.vision_tower + c.merger == sum(p.numel() for p in meta.vision_model.parameters()) + sum(
        p.numel() for p in meta.multi_modal_projector.parameters())  # vlm-perf bills the pixel-shuffle MLP as merger
    assert c.lm == sum(p.numel() for p in meta.language_model.parameters())
    assert abs(total - 400e9) < 5e9  # "400B total" (Meta's model card), a round figure
    moe_layers, experts, expert = 48 // 2, 128, 3 * 5120 * 8192
    active_lm = c.lm - moe_layers * (experts - 1) * expert
    assert abs(active_lm - 17e9) < 0.5e9, active_lm  # "17B active"


def test_chunked_layers_under_causal_half_by_hand():
    """A chunk of C = 16 (tiny config): a sequence of 40 tokens = chunks 16 + 16 + 8, so a chunked causal kernel
    computes (16² + 16² + 8²)/2 = 288 score entries per head-dim unit; the NoPE layer 40²/2 = 800; eager both 1600."""
    from vlm_perf.arch import spec_from_config
    from vlm_perf.flops import compute_flops
    from vlm_perf.stats import BatchStats

    spec = spec_from_config(tiny_config().to_dict(), name="tiny-llama4")
    stats = BatchStats.from_batch(seq_lens=[40], spec=spec)
    assert stats.lm_tokens_sq_beyond_chunks == 40 * 40 - (16 * 16 + 16 * 16 + 8 * 8)
    per_sq = 2 * 4 * 2 * 16  # 2·H·(d_qk + d_v), 4 heads x 16
    half = compute_flops(spec, stats, mode="forward", causal="half").components["lm.attn_core"]
    full = compute_flops(spec, stats, mode="forward", causal="full").components["lm.attn_core"]
    assert half == per_sq * (288 + 800) and full == per_sq * 2 * 1600


def test_hf_trainer_convention_is_transformers_own(model):
    from types import SimpleNamespace

    import transformers
    from vlm_perf.flops import compute_flops
    from vlm_perf.stats import BatchStats

    stats = BatchStats.from_batch(seq_len=12, samples=2, image_grids=[(1, 8, 8)], spec=_spec(model))
    trainer = transformers.Trainer.floating_point_ops(SimpleNamespace(model=model),
                                                      {"input_ids": torch.zeros((2, 12), dtype=torch.long)})
    assert compute_flops(_spec(model), stats, "hf-trainer").total == trainer


# --------------------------------------------------------------------------- media rule vs transformers' functions
def _hf_canvas_functions() -> dict:
    """``find_supported_resolutions`` and ``get_best_fit`` from transformers' ``image_processing_llama4.py``, compiled
    from its source (the module imports torchvision, absent here; these two functions need only torch)."""
    import transformers.models.llama4 as pkg

    tree = ast.parse((Path(pkg.__file__).parent / "image_processing_llama4.py").read_text())
    keep = [n for n in tree.body if isinstance(n, ast.FunctionDef)
            and n.name in ("get_factors", "find_supported_resolutions", "get_best_fit")]
    ns = {"torch": torch, "math": math, "defaultdict": defaultdict, "lru_cache": lru_cache, "SizeDict": object}
    exec(compile(ast.Module(body=keep, type_ignores=[]), "image_processing_llama4.py", "exec"), ns)
    return ns


def _hf_prompt_tokens(rows: int, cols: int, per_tile: int) -> int:
    """Tokens of ``Llama4Processor._prompt_split_image`` (every ``<|...|>`` is one special token)."""
    from types import SimpleNamespace

    from transformers.models.llama4.processing_llama4 import Llama4Processor

    text = Llama4Processor._prompt_split_image(SimpleNamespace(), (rows, cols), per_tile)
    return text.count("<|")


hyp = pytest.importorskip("hypothesis")
from hypothesis import given, settings, strategies as st  # noqa: E402


@settings(derandomize=True, deadline=None, max_examples=60)
@given(size=st.tuples(st.integers(1, 6000), st.integers(1, 6000)), tiles=st.sampled_from([1, 4, 16]))
def test_media_rule_fuzzed_against_transformers(size, tiles):
    from transformers.image_utils import SizeDict

    from vlm_perf.arch import load_model
    from vlm_perf.arch.families import FAMILIES
    from vlm_perf.arch.families.llama4 import supported_canvases

    hf = _hf_canvas_functions()
    canvases = hf["find_supported_resolutions"](tiles, SizeDict(height=336, width=336))
    assert supported_canvases(tiles, 336) == canvases
    h, w = (int(x) for x in hf["get_best_fit"](size, torch.tensor(canvases)))
    spec = load_model("llama4-scout-17b-16e")
    spec.processor["preprocessor_config.json"] = {"size": {"height": 336, "width": 336}, "max_patches": tiles}
    media = FAMILIES["llama4"].media.image(spec, *size)
    rows, cols = h // 336, w // 336
    assert (media.detail["tile_rows"], media.detail["tile_cols"]) == (rows, cols)
    assert media.grid == (rows * cols + (1 if rows * cols > 1 else 0), 24, 24)  # global tile when tiled
    assert media.visual_tokens == _hf_prompt_tokens(rows, cols, 144)
