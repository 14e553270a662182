"""Training regimes on GLM-4.xV, LLaVA (CLIP and Pixtral towers), LLaVA-NeXT(-Video), LLaVA-OneVision, Mistral 3,
Idefics3 / SmolVLM, Qwen3.5 (dense and MoE), PaliGemma (1 and 2), InternVL over gpt-oss and gpt-oss against FlopCounterMode, per part, to the
FLOP; LoRA on fused MoE experts (PEFT target_parameters) on GLM-4.xV-MoE, Qwen3.5-MoE and Qwen3-VL-MoE.

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

from .regimes import measure_regime, measured_parts, peft_adapted_names, peft_trainable_params  # noqa: E402

FAMILIES = ["glm4v", "glm4v_moe", "glm46v", "llava", "llava_pixtral", "llava_next", "llava_next_video",
            "llava_onevision", "mistral3", "idefics3", "smolvlm", "qwen3_5", "qwen3_5_moe", "paligemma", "paligemma2", "internvl_gpt_oss"]
MOE = {"glm4v_moe", "glm46v", "qwen3_5_moe", "internvl_gpt_oss"}

# where each transformers class keeps its tower layers and LM layers (read off the classes, not the library)
TOWER_LAYERS = {"glm4v": "model.visual.blocks", "qwen3_5": "model.visual.blocks",
                "llava_pixtral": "model.vision_tower.transformer.layers",
                "mistral3": "model.vision_tower.transformer.layers",
                "idefics3": "model.vision_model.encoder.layers", "smolvlm": "model.vision_model.encoder.layers",
                "internvl_gpt_oss": "model.vision_tower.encoder.layer"}
LM_LAYERS = {"idefics3": "model.text_model.layers", "smolvlm": "model.text_model.layers"}

# LoRA on the LM only: attention q/v and the dense MLP's down projection (GLM-4V's fused gate_up_proj too)
LM_ONLY = r"model\.(language_model|text_model)\.layers\.\d+\.(self_attn\.(q_proj|v_proj)|mlp\.(down_proj|gate_up_proj))"
LM_ONLY_FOR = dict.fromkeys(FAMILIES, LM_ONLY)
# GLM-4.xV-MoE: PEFT's transformers-5 MoE conversion resolves a regex to the leaf names it matches, which then match
# anywhere (peft 0.22 keeps "down_proj" as a module target: the tower's and merger's down_proj too), so the LM-only
# adapter names attention only
LM_ONLY_FOR.update(dict.fromkeys(("glm4v_moe", "glm46v"), r"model\.language_model\.layers\.\d+\.self_attn\.(q_proj|v_proj)"))
# LoRA on LM + tower: every Linear except the head, or, where all-linear would reach MoE expert parameters
# (PEFT then adds target_parameters), the attention Linears of both plus every module named ``proj`` (GLM's Conv3d
# patch embed, tower attn.proj and merger.proj) and the Qwen tower MLP's linear_fc1
LM_AND_TOWER = {f: dict(target_modules="all-linear") for f in FAMILIES}
LM_AND_TOWER.update({f: dict(target_modules=["q_proj", "v_proj", "qkv", "proj", "linear_fc1"]) for f in MOE})
# Qwen3.5's gated delta nets take no adapter (refused, tested below): all-linear without them
LM_AND_TOWER["qwen3_5"] = dict(target_modules="all-linear", exclude_modules=r".*linear_attn.*")


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
    _check_adapted(lib, pm)
    assert lib.parts == measured
    if mode == "training":
        assert _observed(spec, stats, pm, adapter) == measured, "observed trainability"
    return lib, measured


def _check_adapted(lib, pm):
    """The Linears the library adapts are the modules PEFT wrapped; the parameters it wraps (target_parameters)
    are PEFT's ``targeted_parameter_names``; its adapter parameter count is PEFT's own (every trainable element of
    the wrapped model: low-rank pairs, DoRA magnitudes, expert-stack pairs)."""
    from peft.tuners.lora.layer import ParamWrapper

    base = pm.get_base_model()
    wrappers = {n for n, m in base.named_modules() if isinstance(m, ParamWrapper)}
    assert {a.name for a in lib.adapted if not a.parameter} == peft_adapted_names(pm) - wrappers
    assert {a.name for a in lib.adapted if a.parameter} == set(pm.base_model.targeted_parameter_names)
    assert lib.adapter_params == peft_trainable_params(pm), "adapter parameters: PEFT's own count"


def test_lora_on_the_lm(case, tmp_path):
    lib, measured = _lora(case, dict(target_modules=LM_ONLY_FOR[case[0]]), tmp_path)
    assert {a.stage for a in lib.adapted} == {"language_model"}
    assert lib.by_part["vision_tower"]["input_grad"] == 0  # nothing below the LM trains


def test_lora_on_lm_and_tower(case, tmp_path):
    lib, _ = _lora(case, LM_AND_TOWER[case[0]], tmp_path)
    assert {"vision_tower", "language_model"} <= {a.stage for a in lib.adapted}


def test_lora_on_lm_and_tower_forward(case, tmp_path):
    _lora(case, LM_AND_TOWER[case[0]], tmp_path, mode="forward")


def test_dora_on_lm_and_tower(case, tmp_path):
    kwargs = dict(LM_AND_TOWER[case[0]], use_dora=True)
    if case[0] in MOE:  # without "proj": DoRA on a convolution (the patch embed) is refused, tested below
        kwargs["target_modules"] = ["q_proj", "v_proj", "qkv", "linear_fc1"]
    _lora(case, kwargs, tmp_path)


def test_dora_magnitude_vectors_are_counted(tmp_path):
    """DoRA on q/v of PaliGemma (SigLIP's q/v too): PEFT trains a magnitude vector of ``out_features`` per adapted
    Linear beside lora_A / lora_B; the library's count is PEFT's own (``_check_adapted``) and is exactly that sum."""
    from .regime_families import family_setup

    lib, _ = _lora(("paligemma", family_setup("paligemma")), dict(target_modules=["q_proj", "v_proj"], use_dora=True),
                   tmp_path)
    assert lib.adapter_params == sum(m.rank * (m.n_in + m.n_out) + m.n_out for m in lib.adapted)
    assert {m.stage for m in lib.adapted} == {"vision_tower", "language_model"}


def test_dora_on_a_convolution_is_refused():
    from vlm_perf.arch.adapters import AdapterConfig

    with pytest.raises(UnsupportedModelError, match=r"DoRA on model\.visual\.patch_embed\.proj"):
        _count(_spec("glm4v"), AdapterConfig(r=4, target_modules=("proj",), use_dora=True))


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
    ("glm4v_moe", "gate", "model.language_model.layers.1.mlp.gate"),  # the router module (not an nn.Linear)
])
def test_adapter_inside_an_unlaid_block_is_refused_naming_it(family, target, module):
    from vlm_perf.arch.adapters import AdapterConfig

    with pytest.raises(UnsupportedModelError, match=module.replace(".", r"\.")):
        _count(_spec(family), AdapterConfig(r=4, target_modules=(target,)))


def test_target_parameters_on_a_linear_weight_is_refused():
    from vlm_perf.arch.adapters import AdapterConfig

    with pytest.raises(UnsupportedModelError, match=r"target_parameters wraps a parameter of .*mlp\.down_proj"):
        _count(_spec("glm4v_moe"), AdapterConfig(r=4, target_modules=None, target_parameters=("mlp.down_proj.weight",)))
    with pytest.raises(ConfigError, match="supports neither"):
        AdapterConfig(r=4, target_modules=None, target_parameters=("experts.down_proj",), use_dora=True)


# --------------------------------------------------------------------------- LoRA on fused MoE experts
# PEFT's target_parameters wraps transformers 5's fused expert stacks (experts.gate_up_proj (E, 2F, h),
# experts.down_proj (E, h, F)) and the router weight (gate.weight). The harnesses run the experts with
# transformers' "eager" experts implementation: a loop over the experts that received tokens, each on its routed
# tokens only, which FlopCounterMode measures as top-k routed work; the library counts the same.
MOE_EXPERT_CASES = {
    # PEFT's transformers-5 conversion turns "all-linear" into target_parameters on every expert stack and the
    # router (gate_up_proj at rank 2r) and drops their v4 names from target_modules (measured: the saved config)
    # (peft 0.21); peft 0.22 keeps those names as module targets too where they name nn.Linears (the dense MLP's and
    # the shared experts' gate/up/down_proj)
    "all-linear": dict(target_modules="all-linear"),
    # the v4 name down_proj becomes target_parameters ["down_proj"]; dense Linears named down_proj lose it (peft 0.21)
    # or keep it (peft 0.22: the dense MLP's and the shared experts' down_proj are adapted as well)
    "v4-name-down_proj": dict(target_modules=["q_proj", "down_proj"]),
    "experts-only": dict(target_modules=[], target_parameters=["experts.gate_up_proj", "experts.down_proj"]),
    # nothing earlier trains: down_proj's input gradient runs only to reach gate_up's weight gradient
    "gate_up-only": dict(target_modules=[], target_parameters=["experts.gate_up_proj"]),
    "router-only": dict(target_modules=[], target_parameters=["gate.weight"]),
    "experts+attention": dict(target_modules=["q_proj", "v_proj"], target_parameters=["experts.down_proj"]),
}


@pytest.fixture(scope="module", params=["glm4v_moe", "qwen3_5_moe"])
def moe_case(request):
    from .regime_families import family_setup

    return request.param, family_setup(request.param)


@pytest.mark.parametrize("mode", ["training", "forward"])
@pytest.mark.parametrize("name", sorted(MOE_EXPERT_CASES))
def test_lora_on_moe_experts(moe_case, name, mode, tmp_path):
    kwargs = dict(MOE_EXPERT_CASES[name])
    if moe_case[0] == "qwen3_5_moe" and name == "all-linear":
        # all-linear also reaches Qwen3.5-MoE's gated delta nets: refused (see above)
        kwargs["exclude_modules"] = r".*linear_attn.*"
    lib, measured = _lora(moe_case, kwargs, tmp_path, mode=mode)
    if "target_parameters" in kwargs or moe_case[0] != "qwen3_5_moe":
        assert any(a.parameter for a in lib.adapted)
    # else: PEFT 0.21 has no transformers-5 conversion for qwen3_5_moe, so all-linear / down_proj stay off the
    # experts (the library, reading the saved config, agrees: _check_adapted)


# LoRA on the shared expert's Linears, laid out inside the MoE block: GLM-4.xV-MoE's ``shared_experts`` (gate, up,
# down; summed with the routed experts' output) and Qwen3.5-MoE's ``shared_expert`` plus ``shared_expert_gate``
# (Linear h -> 1, whose sigmoid scales the shared output)
SHARED = {"glm4v_moe": "shared_experts", "qwen3_5_moe": "shared_expert"}
SHARED_CASES = {
    "shared-expert": lambda s: [f"{s}.gate_proj", f"{s}.up_proj", f"{s}.down_proj"],
    # nothing earlier trains: down_proj's adapter needs no input gradient, gate/up and everything below run forward
    # only
    "shared-down-only": lambda s: [f"{s}.down_proj"],
    "shared-expert+attention": lambda s: ["q_proj", f"{s}.gate_proj", f"{s}.up_proj", f"{s}.down_proj"]
    + (["shared_expert_gate"] if s == "shared_expert" else []),
}


@pytest.mark.parametrize("mode", ["training", "forward"])
@pytest.mark.parametrize("name", sorted(SHARED_CASES))
def test_lora_on_the_shared_expert(moe_case, name, mode, tmp_path):
    """The library adapts exactly the Linears PEFT wrapped and counts the step to the FLOP. Qwen3.5-MoE (no PEFT
    conversion): the shared expert's Linears carry the adapters on every PEFT version. GLM-4.xV-MoE: peft 0.21's
    transformers-5 conversion turns the v4 names gate_proj / up_proj / down_proj into the routed expert stacks
    (target_parameters) and leaves the shared experts bare; peft 0.22 keeps them on the shared experts' Linears
    (and wraps the routed stacks only where a routed parameter has that name)."""
    from peft import __version__ as peft_version

    family = moe_case[0]
    lib, _ = _lora(moe_case, dict(target_modules=SHARED_CASES[name](SHARED[family])), tmp_path, mode=mode)
    on_shared = {a.name for a in lib.adapted if f".{SHARED[family]}" in a.name}
    if family == "qwen3_5_moe" or tuple(int(x) for x in peft_version.split(".")[:2]) >= (0, 22):
        assert on_shared and all(not a.parameter for a in lib.adapted if a.name in on_shared)
    else:
        assert not on_shared


@pytest.mark.parametrize("what", ["shared-expert", "shared-gate-only"])
def test_partial_freezing_of_the_shared_expert(moe_case, what):
    """Only the shared expert's weights train (every MoE layer): its gate/up weight gradients need down's input
    gradient, nothing below needs any; Qwen3.5-MoE's shared_expert_gate alone: the gate's weight gradient only.
    Measured with requires_grad set on transformers' modules, counted from the observed parameter names."""
    family, (model, inputs, spec, stats, h) = moe_case
    if what == "shared-gate-only" and family != "qwen3_5_moe":
        pytest.skip("GLM-4.xV-MoE's shared experts have no gate")
    m = copy.deepcopy(model)
    m.requires_grad_(False)
    for layer in _lm_layers(m, family):
        shared = getattr(layer.mlp, SHARED[family], None)
        if shared is not None:
            (layer.mlp.shared_expert_gate if what == "shared-gate-only" else shared).requires_grad_(True)
    measured = _measure(m, inputs, h)
    assert _observed(spec, stats, m) == measured
    assert measured["vision_tower"] == _measure(m, inputs, h, training=False)["vision_tower"]  # forward only


def test_lora_on_qwen3_vl_moe_experts(tmp_path):
    """Qwen3-VL-MoE (tests/verify/measure.py harness, eager experts): PEFT 0.21 does not convert all-linear to
    expert parameters for this model type (measured), so the experts and router are named explicitly."""
    from peft import LoraConfig, get_peft_model

    from .measure import build_model, make_batch
    from .regimes import library_regime

    model = build_model("qwen3_vl_moe")
    batch = make_batch(model, [(1, 4, 4), (1, 10, 14)], [(2, 4, 6)])
    pm = get_peft_model(copy.deepcopy(model), LoraConfig(r=4, target_modules="all-linear", target_parameters=[
        "experts.gate_up_proj", "experts.down_proj", "gate.weight"]))
    measured = measured_parts(measure_regime(pm, batch.inputs))
    pm.save_pretrained(tmp_path)
    adapter = read_adapter_config(tmp_path)
    assert adapter.target_parameters
    lib = library_regime(model.config.to_dict(), batch.seq_lens, batch.image_grids,
                         Trainability.build(adapter=adapter), video_grids=batch.video_grids)
    _check_adapted(lib, pm)
    assert lib.parts == measured


def test_lora_on_qwen3_moe_lm_experts(tmp_path):
    """LM-only Qwen3-MoE (transformers ``Qwen3MoeForCausalLM``, eager experts, random router): all-linear ->
    attention Linears + expert stacks + router, and expert stacks alone; whole model, to the FLOP (the rotary
    table's matmul is not a model FLOP and is attributed apart)."""
    import transformers
    from peft import LoraConfig, get_peft_model

    from vlm_perf.arch import spec_from_config
    from vlm_perf.flops.regime import regime_flops
    from vlm_perf.stats import BatchStats

    config = transformers.Qwen3MoeConfig(vocab_size=300, hidden_size=32, intermediate_size=48,
                                         moe_intermediate_size=16, num_hidden_layers=2, num_attention_heads=4,
                                         num_key_value_heads=2, head_dim=8, num_experts=6, num_experts_per_tok=2,
                                         decoder_sparse_step=1, max_position_embeddings=128)
    config._attn_implementation = "eager"
    config._experts_implementation = "eager"
    torch.manual_seed(0)
    model = transformers.Qwen3MoeForCausalLM(config).double().eval()
    with torch.no_grad():
        for layer in model.model.layers:
            layer.mlp.gate.weight.normal_(0, 0.5)
    spec = spec_from_config(model.config.to_dict(), name="tiny-qwen3-moe")
    stats = BatchStats.from_batch(seq_lens=[24], spec=spec)
    inputs = {"input_ids": torch.randint(0, 300, (1, 24))}
    for i, kwargs in enumerate([dict(target_modules="all-linear"),
                                dict(target_modules=[], target_parameters=["experts.gate_up_proj",
                                                                           "experts.down_proj"])]):
        for mode in ("training", "forward"):
            pm = get_peft_model(copy.deepcopy(model), LoraConfig(r=4, lora_alpha=8, **kwargs))
            base = pm.get_base_model()
            parts = {"lm": [base.model.embed_tokens, *base.model.layers, base.model.norm, base.lm_head],
                     "rope": [base.model.rotary_emb]}
            measured = measured_parts(measure_regime(pm, inputs, parts=parts, training=mode == "training"),
                                      mode == "training")
            pm.save_pretrained(tmp_path / f"{i}{mode}")
            adapter = read_adapter_config(tmp_path / f"{i}{mode}")
            lib = regime_flops(spec, stats, Trainability.build(adapter=adapter), causal="full", mode=mode)
            _check_adapted(lib, pm)
            assert lib.total == measured["language_model"], (kwargs, mode)


@pytest.fixture(scope="module")
def gpt_oss():
    """The tiny gpt-oss, built once for the tests below (each deep-copies it before wrapping or freezing)."""
    from .test_gpt_oss_flops import _model

    return _model()


def _lm_only_case(model, kwargs, mode, tmp_path, select=None):
    """(library, measured) whole-model FLOPs of an LM-only causal LM: PEFT-wrapped with ``kwargs``, or with
    ``select(model)`` naming the parameters that train."""
    from peft import LoraConfig, get_peft_model

    from vlm_perf.arch import spec_from_config
    from vlm_perf.arch.observed import observed_trainability
    from vlm_perf.flops.regime import regime_flops
    from vlm_perf.stats import BatchStats

    spec = spec_from_config(model.config.to_dict(), name="tiny-lm")
    stats = BatchStats.from_batch(seq_lens=[40], spec=spec)
    torch.manual_seed(1)
    inputs = {"input_ids": torch.randint(0, 300, (1, 40)), "use_cache": False}
    adapter = None
    if select is None:
        m = get_peft_model(copy.deepcopy(model), LoraConfig(r=4, lora_alpha=8, **kwargs))
        base = m.get_base_model()
    else:
        m = base = copy.deepcopy(model)
        m.requires_grad_(False)
        for p in select(m):
            p.requires_grad_(True)
    parts = {"lm": [base.model.embed_tokens, *base.model.layers, base.model.norm, base.lm_head],
             "rope": [base.model.rotary_emb]}
    measured = measured_parts(measure_regime(m, inputs, parts=parts, training=mode == "training"),
                              mode == "training")["language_model"]
    if select is None:
        m.save_pretrained(tmp_path)
        adapter = read_adapter_config(tmp_path)
    names = [n for n, p in m.named_parameters() if p.requires_grad]
    regime = observed_trainability(spec, names, adapter=adapter).trainability
    lib = regime_flops(spec, stats, regime, causal="full", mode=mode)
    if select is None:
        _check_adapted(lib, m)
    return lib, measured


@pytest.mark.parametrize("mode", ["training", "forward"])
@pytest.mark.parametrize("name, kwargs", [
    ("all-linear", dict(target_modules="all-linear")),
    ("attention", dict(target_modules=["q_proj", "k_proj", "v_proj", "o_proj"])),
    ("experts+router", dict(target_modules=[], target_parameters=["experts.gate_up_proj", "experts.down_proj",
                                                                  "router.weight"])),
])
def test_lora_on_gpt_oss(gpt_oss, name, kwargs, mode, tmp_path):
    """gpt-oss (GptOssForCausalLM, eager experts, sinks, sliding / full layers): q/k/v/o Linears with biases laid out,
    the sinks a weight inside the softmax, the fused experts and the router wrapped via target_parameters."""
    lib, measured = _lm_only_case(gpt_oss, kwargs, mode, tmp_path)
    assert lib.total == measured


@pytest.mark.parametrize("what", ["sinks-only", "layer-1-attention", "mlp"])
def test_partial_freezing_gpt_oss(gpt_oss, what):
    """Training only the sinks of layer 1 still runs dP through that layer's core (their gradient is the softmax
    gradient); layer 1's attention (q/k/v/o + sinks); every MoE MLP (experts and router)."""
    select = {"sinks-only": lambda m: [m.model.layers[1].self_attn.sinks],
              "layer-1-attention": lambda m: list(m.model.layers[1].self_attn.parameters()),
              "mlp": lambda m: [p for layer in m.model.layers for p in layer.mlp.parameters()]}[what]
    lib, measured = _lm_only_case(gpt_oss, {}, "training", None, select=select)
    assert lib.total == measured


# --------------------------------------------------------------------------- DeepSeek-V3 (LM only): MLA + shared experts
# transformers' DeepseekV3ForCausalLM (the Kimi K2.5 harness's LM): layer 0 dense MLP, layer 1 MoE with 4 routed experts
# top-2 and one shared expert (``DeepseekV3MoE.shared_experts``, summed with the routed output), MLA attention laid
# out whole; no MTP module (transformers runs none: num_nextn_predict_layers 0), eager experts, random router
DEEPSEEK_V3 = dict(vocab_size=300, hidden_size=64, intermediate_size=96, moe_intermediate_size=24, num_hidden_layers=2,
                   num_attention_heads=4, num_key_value_heads=4, kv_lora_rank=16, q_lora_rank=24, qk_nope_head_dim=8,
                   qk_rope_head_dim=8, v_head_dim=16, n_shared_experts=1, n_routed_experts=4, num_experts_per_tok=2,
                   first_k_dense_replace=1, n_group=1, topk_group=1, num_nextn_predict_layers=0,
                   max_position_embeddings=128, bos_token_id=None, eos_token_id=None, pad_token_id=None)


@pytest.fixture(scope="module")
def deepseek_v3():
    import transformers

    config = transformers.DeepseekV3Config(**DEEPSEEK_V3)
    config._attn_implementation = "eager"
    config._experts_implementation = "eager"
    torch.manual_seed(0)
    model = transformers.DeepseekV3ForCausalLM(config).double().eval()
    with torch.no_grad():  # zero-initialised routers tie every score; random ones make routing non-trivial
        for layer in model.model.layers:
            if hasattr(layer.mlp, "shared_experts"):
                layer.mlp.gate.weight.normal_(0, 0.5)
    return model


def _deepseek_shared(m):
    return [p for layer in m.model.layers if hasattr(layer.mlp, "shared_experts")
            for p in layer.mlp.shared_experts.parameters()]


@pytest.mark.parametrize("mode", ["training", "forward"])
@pytest.mark.parametrize("name, kwargs", [
    ("shared-experts", dict(target_modules=["shared_experts.gate_proj", "shared_experts.up_proj",
                                            "shared_experts.down_proj"])),
    # every MLP Linear (dense layer, shared experts; the routed stacks and router through PEFT's conversion)
    ("all-linear-but-attention", dict(target_modules="all-linear", exclude_modules=r".*self_attn.*")),
])
def test_lora_on_deepseek_v3_shared_experts(deepseek_v3, name, kwargs, mode, tmp_path):
    """To the FLOP, whole model; the library adapts what PEFT wrapped (peft 0.21 converts the v4 names gate_proj /
    up_proj / down_proj to the routed stacks only; peft 0.22 keeps them on the shared experts' and the dense MLP's
    Linears)."""
    lib, measured = _lm_only_case(deepseek_v3, kwargs, mode, tmp_path)
    assert lib.total == measured


def test_partial_freezing_of_deepseek_v3_shared_experts(deepseek_v3):
    lib, measured = _lm_only_case(deepseek_v3, {}, "training", None, select=_deepseek_shared)
    assert lib.total == measured


def test_an_adapter_inside_deepseek_v3_mla_is_refused_naming_it():
    from vlm_perf.arch import spec_from_config
    from vlm_perf.arch.adapters import AdapterConfig

    spec = spec_from_config(dict(DEEPSEEK_V3, model_type="deepseek_v3"), name="tiny-deepseek-v3")
    with pytest.raises(UnsupportedModelError, match=r"model\.layers\.0\.self_attn\.q_a_proj"):
        _count(spec, AdapterConfig(r=4, target_modules=("q_a_proj",)))
