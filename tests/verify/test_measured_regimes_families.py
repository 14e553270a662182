"""Training regimes on GLM-4.xV, LLaVA (CLIP and Pixtral towers), LLaVA-NeXT(-Video), LLaVA-OneVision, Mistral 3,
Idefics3 / SmolVLM, Qwen3.5 (dense and MoE) and PaliGemma against FlopCounterMode, per part, to the FLOP.

Each family's own transformers class (tiny random config of the family harness, tests/verify/families, float64,
eager attention; one image through HF's own processor) runs forward + ``logits.mean().backward()``: wrapped by
``peft`` for the adapter regimes (the library reads the ``adapter_config.json`` PEFT itself saved), or with
``requires_grad`` set on hand-picked modules for partial freezing. The library counts the same batch with
``regime_flops`` (``causal="full"``: eager attention). The modules the library adapts must be exactly those PEFT
wrapped; a regime the callback would record (parameter names requiring grad) must give the same FLOPs.

Qwen3.5's sequence is a whole number of delta-rule chunks (64), so no chunk padding enters; its gated delta nets
stay frozen in every regime here (torch's grouped-conv weight-gradient count would otherwise need the harness
correction of tests/verify/families/common.py).
"""

from __future__ import annotations

import copy
import operator

import pytest

pytestmark = pytest.mark.measured
torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("peft")

from vlm_perf.arch.trainability import Trainability  # noqa: E402
from vlm_perf.errors import ConfigError, UnsupportedModelError  # noqa: E402
from vlm_perf.ingest.adapter_config import read_adapter_config  # noqa: E402

from .regimes import measure_regime, measured_parts, peft_adapted_names  # noqa: E402

FAMILIES = ["glm4v", "glm4v_moe", "glm46v", "llava", "llava_pixtral", "llava_next", "llava_next_video",
            "llava_onevision", "mistral3", "idefics3", "smolvlm", "qwen3_5", "qwen3_5_moe", "paligemma"]
MOE = {"glm4v_moe", "glm46v", "qwen3_5_moe"}

# where each transformers class keeps its tower layers and LM layers (read off the classes, not the library)
TOWER_LAYERS = {"glm4v": "model.visual.blocks", "qwen3_5": "model.visual.blocks",
                "llava_pixtral": "model.vision_tower.transformer.layers",
                "mistral3": "model.vision_tower.transformer.layers",
                "idefics3": "model.vision_model.encoder.layers", "smolvlm": "model.vision_model.encoder.layers"}
LM_LAYERS = {"idefics3": "model.text_model.layers", "smolvlm": "model.text_model.layers"}

# LoRA on the LM only: attention q/v and the dense MLP's down projection (GLM-4V's fused gate_up_proj too)
LM_ONLY = r"model\.(language_model|text_model)\.layers\.\d+\.(self_attn\.(q_proj|v_proj)|mlp\.(down_proj|gate_up_proj))"
# LoRA on LM + tower: every Linear except the head, or, where all-linear would reach MoE expert parameters
# (PEFT then adds target_parameters), the attention Linears of both plus every module named ``proj`` (GLM's Conv3d
# patch embed, tower attn.proj and merger.proj) and the Qwen tower MLP's linear_fc1
LM_AND_TOWER = {f: dict(target_modules="all-linear") for f in FAMILIES}
LM_AND_TOWER.update({f: dict(target_modules=["q_proj", "v_proj", "qkv", "proj", "linear_fc1"]) for f in MOE})


def _family_key(family: str) -> str:
    return "glm4v" if family.startswith("glm") else "qwen3_5" if family.startswith("qwen3_5") else family


def _tower_layers(model, family):
    return operator.attrgetter(TOWER_LAYERS.get(_family_key(family), "model.vision_tower.encoder.layers"))(model)


def _lm_layers(model, family):
    return operator.attrgetter(LM_LAYERS.get(family, "model.language_model.layers"))(model)


@pytest.fixture(scope="module", params=FAMILIES)
def case(request):
    from .regime_families import family_setup

    return request.param, family_setup(request.param)


def _measure(model, inputs, h, training=True):
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    return measured_parts(measure_regime(model, inputs, parts=h.part_modules(base), training=training), training)


def _observed(spec, stats, model, adapter=None):
    from vlm_perf.arch.observed import observed_trainability
    from vlm_perf.flops.regime import regime_flops

    names = [n for n, p in model.named_parameters() if p.requires_grad]
    return regime_flops(spec, stats, observed_trainability(spec, names, adapter=adapter).trainability,
                        causal="full").parts


def _lora(case, kwargs, tmp_path, mode="training"):
    from peft import LoraConfig, get_peft_model

    from vlm_perf.flops.regime import regime_flops

    family, (model, inputs, spec, stats, h) = case
    pm = get_peft_model(copy.deepcopy(model), LoraConfig(r=4, lora_alpha=8, **kwargs))
    measured = _measure(pm, inputs, h, training=mode == "training")
    pm.save_pretrained(tmp_path)
    adapter = read_adapter_config(tmp_path)
    lib = regime_flops(spec, stats, Trainability.build(adapter=adapter), causal="full", mode=mode)
    assert {a.name for a in lib.adapted} == peft_adapted_names(pm)
    assert lib.parts == measured
    if mode == "training":
        assert _observed(spec, stats, pm, adapter) == measured, "observed trainability"
    return lib, measured


def test_lora_on_the_lm(case, tmp_path):
    lib, measured = _lora(case, dict(target_modules=LM_ONLY), tmp_path)
    assert {a.stage for a in lib.adapted} == {"language_model"}
    assert lib.by_part["vision_tower"]["input_grad"] == 0  # nothing below the LM trains


def test_lora_on_lm_and_tower(case, tmp_path):
    lib, _ = _lora(case, LM_AND_TOWER[case[0]], tmp_path)
    assert {"vision_tower", "language_model"} <= {a.stage for a in lib.adapted}


def test_lora_on_lm_and_tower_forward(case, tmp_path):
    _lora(case, LM_AND_TOWER[case[0]], tmp_path, mode="forward")


def test_dora_on_lm_and_tower(case, tmp_path):
    _lora(case, dict(LM_AND_TOWER[case[0]], use_dora=True), tmp_path)


def test_partial_freezing(case):
    """The last tower layer, the projector and every LM MLP train; nothing else (LLaVA's CLIP: the last layer is
    past vision_feature_layer, so it runs forward only and its weights get no gradient at all)."""
    from vlm_perf.flops.regime import regime_flops

    family, (model, inputs, spec, stats, h) = case
    m = copy.deepcopy(model)
    m.requires_grad_(False)
    for mod in [_tower_layers(m, family)[-1], *h.part_modules(m)["projector"],
                *(layer.mlp for layer in _lm_layers(m, family))]:
        mod.requires_grad_(True)
    for name, p in m.named_parameters():  # LLaVA-NeXT's image_newline sits on the model, not in a module
        if name.endswith("image_newline"):
            p.requires_grad_(True)
    measured = _measure(m, inputs, h)
    lib = regime_flops(spec, stats, Trainability.build(["vision_tower[-1]", "projector", "lm.mlp"]), causal="full")
    assert lib.parts == measured
    assert _observed(spec, stats, m) == measured, "observed trainability"


def test_frozen_tower_full_lm_and_projector(case):
    from vlm_perf.flops.regime import regime_flops

    family, (model, inputs, spec, stats, h) = case
    if family.startswith("qwen3_5"):
        pytest.skip("trains the gated delta nets (grouped-conv weight gradient: see the module docstring)")
    m = copy.deepcopy(model)
    m.requires_grad_(True)
    for mod in h.part_modules(m)["vision_tower"]:
        mod.requires_grad_(False)
    measured = _measure(m, inputs, h)
    assert regime_flops(spec, stats, Trainability.build(["projector", "lm"]), causal="full").parts == measured


# --------------------------------------------------------------------------- refusals (typed, naming the module)
def _spec(family):
    from vlm_perf.arch import spec_from_config

    from .families import harness

    return spec_from_config(harness(family).tiny_config().to_dict(), name=f"tiny-{family}")


def _count(spec, adapter):
    from vlm_perf.flops.regime import regime_flops
    from vlm_perf.stats import BatchStats

    stats = BatchStats.from_batch(seq_lens=[64], spec=spec)
    return regime_flops(spec, stats, Trainability.build(adapter=adapter), causal="full")


@pytest.mark.parametrize("family, target, module", [
    ("qwen3_5", "in_proj_qkv", "model.language_model.layers.0.linear_attn.in_proj_qkv"),
    ("qwen3_5_moe", "shared_expert.gate_proj", "model.language_model.layers.0.mlp.shared_expert.gate_proj"),
    ("glm4v_moe", "shared_experts.down_proj", "model.language_model.layers.1.mlp.shared_experts.down_proj"),
])
def test_adapter_inside_an_unlaid_block_is_refused_naming_it(family, target, module):
    from vlm_perf.arch.adapters import AdapterConfig

    with pytest.raises(UnsupportedModelError, match=module.replace(".", r"\.")):
        _count(_spec(family), AdapterConfig(r=4, target_modules=(target,)))


def test_all_linear_on_moe_reaches_expert_parameters(tmp_path):
    """PEFT 0.21 turns ``all-linear`` on a fused-expert MoE into ``target_parameters`` on the experts and the
    router (measured here): the saved config names them, and the library reads it (see the MoE expert tests)."""
    import json

    from peft import LoraConfig, get_peft_model

    from .families import harness

    h = harness("glm4v_moe")
    pm = get_peft_model(h.build_model(h.tiny_config(), 0), LoraConfig(r=4, target_modules="all-linear"))
    pm.save_pretrained(tmp_path)
    saved = json.loads((tmp_path / "adapter_config.json").read_text())
    assert set(saved["target_parameters"]) == {"gate_up_proj", "down_proj", "gate.weight"}
    try:
        read_adapter_config(tmp_path)
    except ConfigError as exc:
        assert "target_parameters" in str(exc)
