"""Training regimes (LoRA, DoRA, modules_to_save, partial freezing, input-grad hook) against FlopCounterMode.

transformers' own Qwen-VL classes (tiny random configs of ``measure``), wrapped by ``peft`` where the regime is
an adapter, run forward + ``logits.mean().backward()`` under FlopCounterMode split by part; the library counts
the same batch with ``regime_flops`` (``causal="full"``: eager attention) from the adapter config PEFT itself
saved (``save_pretrained`` -> ``adapter_config.json`` -> ``read_adapter_config``). Every part must match TO THE
FLOP, and the modules the library adapts must be exactly those PEFT wrapped.
"""

from __future__ import annotations

import copy

import pytest

pytestmark = pytest.mark.measured
torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
peft = pytest.importorskip("peft")

from vlm_perf.arch.trainability import Trainability  # noqa: E402
from vlm_perf.ingest.adapter_config import read_adapter_config  # noqa: E402

from .measure import build_model, make_batch  # noqa: E402
from .regimes import (library_regime, measure_regime, measured_parts, peft_adapted_names,  # noqa: E402
                      peft_trainable_params)

GRIDS = ([(1, 4, 4), (1, 10, 14)], [(2, 4, 6)])
LM_ALL = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]

LORA_CASES = {
    # LM-style short names: on Qwen2.5-VL gate/up/down_proj also hit the tower MLP (PEFT matches suffixes)
    "lm-names": dict(target_modules=LM_ALL),
    "q-v-only": dict(target_modules=["q_proj", "v_proj"]),
    "all-linear": dict(target_modules="all-linear"),
    "lm-only-regex": dict(target_modules=r"model\.language_model\..*\.(q_proj|k_proj|v_proj|o_proj|gate_proj|up_proj|down_proj)"),
    "lm-and-tower-regex": dict(target_modules=r".*\.(qkv|attn\.proj|q_proj|v_proj|down_proj)"),
    "dora": dict(target_modules=["q_proj", "v_proj", "qkv"], use_dora=True),
    # DoRA with dropout recomputes the base matmul on the dropped-out input (and its input gradient)
    "dora-dropout": dict(target_modules=["q_proj", "v_proj", "qkv", "down_proj"], use_dora=True, lora_dropout=0.1),
    "lora-dropout": dict(target_modules=["q_proj", "v_proj"], lora_dropout=0.1),  # dropout itself: no matmul
    "modules-to-save-head": dict(target_modules=["q_proj", "v_proj"], modules_to_save=["lm_head"]),
    "modules-to-save-merger": dict(target_modules=["q_proj", "v_proj"], modules_to_save=["merger"]),
    "layers-to-transform": dict(target_modules=["q_proj", "v_proj", "qkv"], layers_to_transform=[1, 3]),
    "rank-pattern": dict(target_modules=LM_ALL, rank_pattern={"o_proj": 2, r"layers\.1\.mlp\.down_proj": 6}),
    "conv-patch-embed": dict(target_modules=["proj"]),  # hits the Conv3d patch embed and the tower's attn.proj
    "bias-all": dict(target_modules=[r"model.language_model.layers.1.self_attn.q_proj"], bias="all"),
}


@pytest.fixture(scope="module")
def qwen25():
    model = build_model("qwen2_5_vl")
    return model, make_batch(model, *GRIDS)


def _peft_case(model, batch, kwargs, tmp_path, input_require_grads=False, trainable=()):
    from peft import LoraConfig, get_peft_model

    pm = get_peft_model(copy.deepcopy(model), LoraConfig(**{"r": 4, "lora_alpha": 8, "lora_dropout": 0.0, **kwargs}))
    if input_require_grads:
        pm.enable_input_require_grads()
    measured = measured_parts(measure_regime(pm, batch.inputs))
    pm.save_pretrained(tmp_path)
    adapter = read_adapter_config(tmp_path)
    lib = library_regime(model.config.to_dict(), batch.seq_lens, batch.image_grids,
                         Trainability.build(trainable, adapter=adapter, input_require_grads=input_require_grads),
                         video_grids=batch.video_grids)
    _check_observed(model.config.to_dict(), pm, batch, measured, adapter, input_require_grads)
    assert lib.adapter_params == peft_trainable_params(pm), "adapter parameters: PEFT's own count"
    return pm, measured, lib


def _check_observed(config, model, batch, measured, adapter=None, input_require_grads=False):
    """What a callback would record (names of parameters requiring grad) gives the same FLOPs."""
    from vlm_perf.arch import spec_from_config
    from vlm_perf.arch.observed import observed_trainability

    spec = spec_from_config(config, name="tiny")
    names = [n for n, p in model.named_parameters() if p.requires_grad]
    observed = observed_trainability(spec, names, adapter=adapter, input_require_grads=input_require_grads)
    lib = library_regime(config, batch.seq_lens, batch.image_grids, observed.trainability,
                         video_grids=batch.video_grids)
    assert lib.parts == measured, "observed trainability"


@pytest.mark.parametrize("case", sorted(LORA_CASES))
def test_lora_qwen2_5_vl_per_part_to_the_flop(qwen25, case, tmp_path):
    model, batch = qwen25
    pm, measured, lib = _peft_case(model, batch, LORA_CASES[case], tmp_path)
    assert {a.name for a in lib.adapted} == peft_adapted_names(pm)
    assert lib.parts == measured


def test_lora_with_gradient_checkpointing_hook(qwen25, tmp_path):
    """``enable_input_require_grads`` (what HF/PEFT call under gradient checkpointing) makes the frozen tower and
    projector compute input gradients nobody uses; ``input_require_grads=True`` counts them."""
    model, batch = qwen25
    kwargs = LORA_CASES["lm-only-regex"]
    pm, measured, lib = _peft_case(model, batch, kwargs, tmp_path / "a", input_require_grads=True)
    assert lib.parts == measured
    _, plain, _ = _peft_case(model, batch, kwargs, tmp_path / "b")
    assert measured["vision_tower"] > plain["vision_tower"]  # the hook is not free


def test_lora_with_an_unfrozen_base_layer(qwen25, tmp_path):
    """LoRA on q/v plus every LM weight of layer 1 unfrozen (its q/v base weights too, under their adapters)."""
    from peft import LoraConfig, get_peft_model

    model, batch = qwen25
    pm = get_peft_model(copy.deepcopy(model), LoraConfig(r=4, target_modules=["q_proj", "v_proj"]))
    adapter_only = peft_trainable_params(pm)  # PEFT's count before the base layer is unfrozen by hand
    pm.get_base_model().model.language_model.layers[1].requires_grad_(True)
    for name, p in pm.named_parameters():
        if "lora_" in name:
            assert p.requires_grad
    measured = measured_parts(measure_regime(pm, batch.inputs))
    pm.save_pretrained(tmp_path)
    adapter = read_adapter_config(tmp_path)
    lib = library_regime(model.config.to_dict(), batch.seq_lens, batch.image_grids,
                         Trainability.build(["lm[1].attention+mlp+norms"], adapter=adapter),
                         video_grids=batch.video_grids)
    assert lib.parts == measured
    assert lib.adapter_params == adapter_only
    _check_observed(model.config.to_dict(), pm, batch, measured, adapter)


def test_lora_forward_only(qwen25, tmp_path):
    from peft import LoraConfig, get_peft_model

    model, batch = qwen25
    pm = get_peft_model(copy.deepcopy(model), LoraConfig(r=4, target_modules="all-linear", use_dora=True))
    measured = measured_parts(measure_regime(pm, batch.inputs, training=False), training=False)
    pm.save_pretrained(tmp_path)
    lib = library_regime(model.config.to_dict(), batch.seq_lens, batch.image_grids,
                         Trainability.build(adapter=read_adapter_config(tmp_path)), video_grids=batch.video_grids,
                         mode="forward")
    assert lib.parts == measured
    assert lib.adapter_params == peft_trainable_params(pm)  # DoRA: low-rank pairs + one magnitude per out feature


def _freeze_case(model, batch, select, trainable):
    """``select(model)``: the modules whose parameters train (everything else frozen)."""
    m = copy.deepcopy(model)
    m.requires_grad_(False)
    for mod in select(m):
        mod.requires_grad_(True)
    measured = measured_parts(measure_regime(m, batch.inputs))
    lib = library_regime(model.config.to_dict(), batch.seq_lens, batch.image_grids, Trainability.build(trainable),
                         video_grids=batch.video_grids)
    _check_observed(model.config.to_dict(), m, batch, measured)
    return measured, lib


FREEZE_CASES = {
    "tower-last-2-layers+projector+lm": (lambda m: [*m.model.visual.blocks[-2:], m.model.visual.merger,
                                                    m.model.language_model, m.lm_head],
                                         ["vision_tower[-2:]", "projector", "lm"]),
    "tower-last-layer-only": (lambda m: [m.model.visual.blocks[-1]], ["vision_tower[-1]"]),
    "projector-only": (lambda m: [m.model.visual.merger], ["projector"]),
    "lm-layer-1-mlp": (lambda m: [m.model.language_model.layers[1].mlp], ["lm[1:].mlp"]),
    "lm-attention": (lambda m: [layer.self_attn for layer in m.model.language_model.layers], ["lm.attention"]),
    "lm-norms": (lambda m: [mod for layer in m.model.language_model.layers
                            for mod in (layer.input_layernorm, layer.post_attention_layernorm)], ["lm.norms"]),
    "lm-head-only": (lambda m: [m.lm_head], ["lm.head"]),
    "tower-mlp-layers-1-2": (lambda m: [b.mlp for b in m.model.visual.blocks[1:3]], ["vision_tower[1:3].mlp"]),
}


@pytest.mark.parametrize("case", sorted(FREEZE_CASES))
def test_partial_freezing_qwen2_5_vl_per_part_to_the_flop(qwen25, case):
    model, batch = qwen25
    select, trainable = FREEZE_CASES[case]
    measured, lib = _freeze_case(model, batch, select, trainable)
    assert lib.parts == measured


@pytest.mark.parametrize("family", ["qwen2_vl", "qwen3_vl", "qwen3_vl_moe"])
def test_lora_and_partial_freezing_other_qwen_families(family, tmp_path):
    model = build_model(family)
    batch = make_batch(model, *GRIDS)
    pm, measured, lib = _peft_case(model, batch, dict(target_modules="all-linear"), tmp_path)
    assert {a.name for a in lib.adapted} == peft_adapted_names(pm)
    assert lib.parts == measured
    measured, lib = _freeze_case(model, batch, lambda m: [m.model.visual.blocks[-1], m.model.language_model],
                                 ["vision_tower[-1:]", "lm.attention+mlp+norms+embeddings"])
    assert lib.parts == measured


# --------------------------------------------------------------------------- InternVL and Gemma 3
PROCESSORS = {
    "internvl": {"preprocessor_config.json": {"size": {"height": 32, "width": 32}, "min_patches": 1, "max_patches": 6,
                                              "crop_to_patches": False}},
    "gemma3": {"preprocessor_config.json": {"size": {"height": 32, "width": 32}, "do_pan_and_scan": None}},
}
FAMILY_LORA = {
    "all-linear": dict(target_modules="all-linear"),
    "q-v": dict(target_modules=["q_proj", "v_proj"]),  # LM-style names also hit InternViT / SigLIP q/v
    "lm-only": dict(target_modules=r"model\.language_model\..*\.(q_proj|v_proj|down_proj)"),
    "dora": dict(target_modules=["q_proj", "v_proj", "fc1"], use_dora=True),
    "modules-to-save": dict(target_modules=["o_proj"], modules_to_save=["lm_head"]),
}
FAMILY_FREEZE = {
    "tower-last-layer+projector+lm": (["vision_tower[-1]", "projector", "lm"],
                                      lambda m, tower: [tower[-1], m.model.multi_modal_projector,
                                                        m.model.language_model, m.lm_head]),
    "projector-only": (["projector"], lambda m, tower: [m.model.multi_modal_projector]),
    "lm-head": (["lm.head"], lambda m, tower: [m.lm_head]),  # Gemma 3: tied, so the embedding trains too
}


def _tower_layers(model):
    enc = model.model.vision_tower.encoder
    return enc.layers if hasattr(enc, "layers") else enc.layer


@pytest.fixture(scope="module", params=["internvl", "gemma3"])
def family(request):
    from .regimes import family_case

    return request.param, family_case(request.param, [(48, 80), (32, 32)], PROCESSORS[request.param])


@pytest.mark.parametrize("case", sorted(FAMILY_LORA))
def test_lora_internvl_gemma3_per_part_to_the_flop(family, case, tmp_path):
    from peft import LoraConfig, get_peft_model

    from vlm_perf.flops.regime import regime_flops

    _, (model, inputs, spec, stats, h) = family
    pm = get_peft_model(copy.deepcopy(model), LoraConfig(r=4, lora_alpha=8, **FAMILY_LORA[case]))
    measured = measured_parts(measure_regime(pm, inputs, parts=h.part_modules(pm.get_base_model())))
    pm.save_pretrained(tmp_path)
    adapter = read_adapter_config(tmp_path)
    lib = regime_flops(spec, stats, Trainability.build(adapter=adapter), causal="full")
    assert {a.name for a in lib.adapted} == peft_adapted_names(pm)
    assert lib.parts == measured
    assert lib.adapter_params == peft_trainable_params(pm), "adapter parameters: PEFT's own count"
    _check_family_observed(spec, stats, pm, measured, adapter)


def _check_family_observed(spec, stats, model, measured, adapter=None):
    from vlm_perf.arch.observed import observed_trainability
    from vlm_perf.flops.regime import regime_flops

    names = [n for n, p in model.named_parameters() if p.requires_grad]
    regime = observed_trainability(spec, names, adapter=adapter).trainability
    assert regime_flops(spec, stats, regime, causal="full").parts == measured, "observed trainability"


@pytest.mark.parametrize("case", sorted(FAMILY_FREEZE))
def test_partial_freezing_internvl_gemma3_per_part_to_the_flop(family, case):
    from vlm_perf.flops.regime import regime_flops

    _, (model, inputs, spec, stats, h) = family
    trainable, select = FAMILY_FREEZE[case]
    m = copy.deepcopy(model)
    m.requires_grad_(False)
    for mod in select(m, _tower_layers(m)):
        mod.requires_grad_(True)
    measured = measured_parts(measure_regime(m, inputs, parts=h.part_modules(m)))
    assert regime_flops(spec, stats, Trainability.build(trainable), causal="full").parts == measured
    _check_family_observed(spec, stats, m, measured)
