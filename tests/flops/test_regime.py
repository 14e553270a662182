"""regime_flops: whole-part freezing reproduces compute_flops on every preset; LoRA / partial freezing by hand."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from vlm_perf.arch import load_model, spec_from_config
from vlm_perf.arch.adapters import AdapterConfig, adapter_from_dict, layer_index
from vlm_perf.arch.trainability import Trainability, parse_selector, parse_selectors
from vlm_perf.errors import ConfigError, InputError, UnsupportedModelError
from vlm_perf.flops import compute_flops
from vlm_perf.flops.regime import regime_flops
from vlm_perf.ingest.adapter_config import find_adapter_config, read_adapter_config
from vlm_perf.stats import BatchStats

PRESETS = sorted(p.stem for p in (Path(__file__).parents[2] / "vlm_perf" / "arch" / "presets").glob("*.json"))
FROZEN = [(), ("vision_tower",), ("vision",), ("merger",), ("language_model",), ("vision_tower", "language_model"),
          ("merger", "language_model")]


@pytest.mark.parametrize("name", PRESETS)
def test_whole_part_freezing_equals_compute_flops_on_every_preset(name):
    """Trainability.from_frozen(parts) moves no number: every component, both causal rules, both modes."""
    spec = load_model(name)
    side = spec.extra.get("fixed_grid_side") or 64  # a fixed-tile tower runs its tile (PaliGemma 16 x 16 patches)
    height = spec.extra.get("fixed_grid_height") or side  # Mllama stacks its tiles: 1 x (tiles x side) x side
    stats = BatchStats.from_batch(seq_lens=[3000, 1096], image_grids=[(1, height, side)] if spec.is_vlm else [],
                                  spec=spec)
    for frozen in FROZEN if spec.is_vlm else [()]:
        for causal in ("half", "full"):
            for mode in ("training", "forward"):
                try:
                    old = compute_flops(spec, stats, "exact", mode=mode, causal=causal, frozen=frozen)
                except ConfigError:
                    with pytest.raises(ConfigError):
                        regime_flops(spec, stats, Trainability.from_frozen(frozen), causal=causal, mode=mode)
                    continue
                new = regime_flops(spec, stats, Trainability.from_frozen(frozen), causal=causal, mode=mode)
                assert new.breakdown.components == old.components, (frozen, causal, mode)


# --------------------------------------------------------------------------- by hand on a tiny Qwen2 LM
TINY = {"model_type": "qwen2", "hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 1000, "tie_word_embeddings": False,
        "max_position_embeddings": 4096}
T = 10
# forward FLOPs per layer, written out: q/o 2*T*64*64, k/v 2*T*64*32, core 2*H*2d*T^2 (eager square), MLP 3*2*T*64*96
Q = OUT = 2 * T * 64 * 64
K = V = 2 * T * 64 * 32
CORE = 2 * 4 * 2 * 16 * T * T
MLP = 3 * 2 * T * 64 * 96
HEAD = 2 * T * 64 * 1000
LAYER = Q + K + V + OUT + CORE + MLP
FORWARD = 2 * LAYER + HEAD


def _tiny():
    spec = spec_from_config(TINY, name="tiny-qwen2")
    return spec, BatchStats.from_batch(seq_lens=[T], spec=spec)


def test_lora_on_one_q_proj_by_hand():
    spec, stats = _tiny()
    adapter = AdapterConfig(r=4, target_modules=("q_proj",), layers_to_transform=(1,))
    got = regime_flops(spec, stats, Trainability(trainable=(), adapter=adapter), causal="full")
    a_fwd, b_fwd = 2 * T * 64 * 4, 2 * T * 4 * 64
    expected = (FORWARD
                + a_fwd + b_fwd  # adapter forward
                + 2 * b_fwd + a_fwd  # B weight + input gradient, A weight gradient (layer-1 input needs none)
                + CORE  # eager core with only q requiring grad: dP and dQ, two halves
                + OUT + MLP + HEAD)  # input gradients above the adapter
    assert got.total == expected
    assert [m.name for m in got.adapted] == ["model.layers.1.self_attn.q_proj"]
    assert got.adapter_params == 4 * (64 + 64)
    # a fused kernel (causal half) computes dQ, dK, dV together: 2x its (halved) forward
    half = regime_flops(spec, stats, Trainability(trainable=(), adapter=adapter), causal="half")
    forward_cores_halved = -2 * CORE + 2 * (CORE // 2)
    assert half.total == expected + forward_cores_halved - CORE + 2 * (CORE // 2)


@pytest.mark.parametrize("kwargs, expected", [
    # q (64 -> 64) and v (64 -> 32) in both layers, r = 4: lora_A r x n_in, lora_B n_out x r
    (dict(target_modules=("q_proj", "v_proj")), 2 * (4 * (64 + 64) + 4 * (64 + 32))),
    # DoRA adds its magnitude vector, one value per output feature (peft/tuners/lora/dora.py)
    (dict(target_modules=("q_proj", "v_proj"), use_dora=True), 2 * (4 * (64 + 64) + 64 + 4 * (64 + 32) + 32)),
    # modules_to_save trains PEFT's copy of the whole head (untied, no bias): 64 x 1000
    (dict(target_modules=("q_proj",), modules_to_save=("lm_head",)), 2 * 4 * (64 + 64) + 64 * 1000),
    # bias "all": Qwen2's q/k/v biases (64 + 32 + 32 per layer); RMSNorms have none
    (dict(target_modules=("o_proj",), bias="all"), 2 * 4 * (64 + 64) + 2 * (64 + 32 + 32)),
    # bias "lora_only": the biases of the adapted Linears only (q's and v's)
    (dict(target_modules=("q_proj", "v_proj"), bias="lora_only"), 2 * (4 * (64 + 64) + 64 + 4 * (64 + 32) + 32)),
    # a saved layer: every weight of layer 1 (q/k/v with bias, o, gate/up/down, two RMSNorms)
    (dict(target_modules=("q_proj",), modules_to_save=("layers.1",)),
     4 * (64 + 64) + (64 * 64 + 64) + 2 * (64 * 32 + 32) + 64 * 64 + 3 * 64 * 96 + 2 * 64),
])
def test_adapter_parameters_by_hand(kwargs, expected):
    """What PEFT makes trainable (its ``print_trainable_parameters`` count); measured against PEFT itself in
    tests/verify/test_measured_regimes*.py."""
    spec, stats = _tiny()
    got = regime_flops(spec, stats, Trainability.build(adapter=AdapterConfig(r=4, **kwargs)), causal="full")
    assert got.adapter_params == expected
    assert not any("lower bound" in n for n in got.notes)


def test_last_layer_mlp_unfrozen_by_hand():
    spec, stats = _tiny()
    got = regime_flops(spec, stats, Trainability.build(["lm[-1].mlp"]), causal="full")
    # layer 1's MLP: weight gradients of gate/up/down; its input needs no gradient, but gate/up's weight
    # gradients need the gradient of their outputs, i.e. down_proj's input gradient; the head: input gradient
    assert got.total == FORWARD + MLP + 2 * T * 96 * 64 + HEAD
    assert got.full_training is not None and got.full_training.total == 3 * FORWARD  # every weight trains


def test_dora_adds_the_weight_norm_term_per_forward_call():
    spec, stats = _tiny()
    lora = AdapterConfig(r=4, target_modules=("o_proj",))
    dora = AdapterConfig(r=4, target_modules=("o_proj",), use_dora=True)
    a = regime_flops(spec, stats, Trainability(trainable=(), adapter=lora), causal="full").total
    b = regime_flops(spec, stats, Trainability(trainable=(), adapter=dora), causal="full").total
    assert b - a == 2 * (2 * 64 * 64 * 4 + 2 * 64 * 4 * 64)  # identity (64 x 64) through A then B, 2 layers
    b3 = regime_flops(spec, stats, Trainability(trainable=(), adapter=dora), causal="full", forward_calls=3).total
    assert b3 - a == 3 * (b - a)


def test_input_require_grads_hook_runs_input_gradients_from_the_embedding():
    spec, stats = _tiny()
    adapter = AdapterConfig(r=4, target_modules=("q_proj",), layers_to_transform=(1,))
    plain = regime_flops(spec, stats, Trainability(trainable=(), adapter=adapter), causal="full").total
    hooked = regime_flops(spec, stats, Trainability(trainable=(), adapter=adapter, input_require_grads=True),
                          causal="full").total
    # layer 0 gains every input gradient (q, k, v, o, MLP, full core); layer 1 q/k/v base, the rest of its core, A
    assert hooked - plain == (Q + K + V + OUT + 2 * CORE + MLP) + (Q + K + V + CORE) + 2 * T * 64 * 4


def test_nothing_trainable_is_refused_in_training_only():
    spec, stats = _tiny()
    with pytest.raises(ConfigError, match="nothing trains"):
        regime_flops(spec, stats, Trainability(trainable=()))
    assert regime_flops(spec, stats, Trainability(trainable=()), mode="forward", causal="full").total == FORWARD


def test_fine_selectors_on_an_opaque_stage_are_refused():
    # a hybrid LM whose layer types are unknown (the spec without Qwen3.5's layer_types): no per-layer layout
    spec = dataclasses.replace(load_model("qwen3.5-35b-a3b"), extra={})
    stats = BatchStats.from_batch(seq_lens=[512], spec=spec)
    with pytest.raises(UnsupportedModelError, match="as a whole"):
        regime_flops(spec, stats, Trainability.build(["lm[-2:]"]))
    assert regime_flops(spec, stats, Trainability.build(["lm"])).total == compute_flops(spec, stats).total


# --------------------------------------------------------------------------- selectors
def test_selector_parsing_and_matching():
    s = parse_selector("vision_tower[-4:]")
    assert [i for i in range(32) if s.matches("vision_tower", i, "mlp", 32)] == [28, 29, 30, 31]
    assert not s.matches("vision_tower", None, "embeddings", 32)  # a layer range never covers the patch embed
    k = parse_selector("lm.attention+mlp")
    assert k.matches("language_model", 3, "attention", 28) and not k.matches("language_model", 3, "norms", 28)
    one = parse_selector("lm[-1]")
    assert [i for i in range(4) if one.matches("language_model", i, "mlp", 4)] == [3]
    assert [str(x) for x in parse_selectors(["vision_tower[2:4],projector", "lm.head"])] == [
        "vision_tower[2:4]", "projector", "lm.head"]
    for bad, msg in (("tower", "unknown part"), ("lm.qkv", "unknown module kind"), ("lm[1:2:3]", "no step"),
                     ("lm[a]", "not an integer"), ("lm[", "expected")):
        with pytest.raises(ConfigError, match=msg):
            parse_selector(bad)


# --------------------------------------------------------------------------- adapter matching (PEFT rules)
def test_adapter_target_matching_rules():
    lm_q = "model.language_model.layers.3.self_attn.q_proj"
    a = AdapterConfig(target_modules=("q_proj",))
    assert a.targets(lm_q) and not a.targets("model.language_model.layers.3.self_attn.q_proj_extra")
    assert not AdapterConfig(target_modules="q_proj").targets(lm_q)  # a string is a regex over the whole name
    assert AdapterConfig(target_modules=r".*\.q_proj").targets(lm_q)
    assert AdapterConfig(target_modules="all-linear").targets(lm_q)
    assert not AdapterConfig(target_modules="all-linear").targets("lm_head", is_head=True)
    layers = AdapterConfig(target_modules=("qkv", "mlp.0", "q_proj"), layers_to_transform=(3,))
    assert layers.targets("model.visual.blocks.3.attn.qkv") and layers.targets(lm_q)
    assert not layers.targets("model.visual.merger.mlp.0")  # no layer index in the name: not adapted
    pattern = AdapterConfig(target_modules=("qkv", "q_proj"), layers_to_transform=(3,), layers_pattern=("layers",))
    assert pattern.targets(lm_q) and not pattern.targets("model.visual.blocks.3.attn.qkv")
    assert layer_index("model.language_model.layers.12.mlp.experts.3.up_proj") == 12
    saved = AdapterConfig(target_modules=("q_proj", "lm_head"), modules_to_save=("lm_head",))
    assert saved.saves("lm_head") and not saved.targets("lm_head")
    excl = AdapterConfig(target_modules=("q_proj",), exclude_modules=r".*visual.*")
    assert not excl.targets("model.visual.blocks.0.attn.q_proj") and excl.targets(lm_q)
    ranks = AdapterConfig(r=8, target_modules=("q_proj", "o_proj"), rank_pattern={"o_proj": 2, r"layers\.3\.self_attn\.q_proj": 6})
    assert ranks.rank("model.language_model.layers.1.self_attn.o_proj") == 2
    assert ranks.rank(lm_q) == 6 and ranks.rank("model.language_model.layers.1.self_attn.q_proj") == 8


@pytest.mark.parametrize("data, msg", [
    ({"peft_type": "IA3", "target_modules": ["q"]}, "IA3 is not modelled"),
    ({"r": 0, "target_modules": ["q"]}, "rank r must be > 0"),
    ({"r": "8", "target_modules": ["q"]}, "r must be a number"),
    ({"target_modules": ["q"], "bias": "some"}, "bias must be one of"),
    ({"target_modules": 5}, "target_modules must be"),
    ({"target_parameters": "experts.gate_up_proj"}, "target_parameters must be a list"),
    ({"target_parameters": ["experts.gate_up_proj"], "use_dora": True}, "supports neither"),
    ({"r": 8}, "neither target_modules nor target_parameters"),
    ({"target_modules": ["q"], "layers_to_transform": "0"}, "layers_to_transform must be"),
])
def test_bad_adapter_configs_are_one_line_errors(data, msg):
    with pytest.raises(ConfigError, match=msg):
        adapter_from_dict(data, source="x/adapter_config.json")


def test_adapter_config_files(tmp_path):
    run = tmp_path / "run"
    for step in (20, 100):
        (run / f"checkpoint-{step}").mkdir(parents=True)
        (run / f"checkpoint-{step}" / "adapter_config.json").write_text(
            json.dumps({"peft_type": "LORA", "r": step, "target_modules": ["q_proj"], "lora_alpha": 16}))
    assert find_adapter_config(run) == run / "checkpoint-100" / "adapter_config.json"
    assert read_adapter_config(run).r == 100
    assert read_adapter_config(run / "checkpoint-20" / "adapter_config.json").r == 20
    bad = tmp_path / "bad.json"
    bad.write_text('{"r": 8,\n "target_modules": [}')
    with pytest.raises(InputError, match=r"bad.json:2"):
        read_adapter_config(bad)
    (tmp_path / "empty").mkdir()
    with pytest.raises(InputError, match="no adapter_config.json"):
        read_adapter_config(tmp_path / "empty")
    with pytest.raises(InputError, match="not found"):
        read_adapter_config(tmp_path / "missing.json")


def test_adapter_on_a_family_without_names_is_refused():
    spec = load_model("kimi-vl-a3b-instruct")  # a VLM over a DeepSeek-V3 LM: no module-name table
    stats = BatchStats.from_batch(seq_lens=[512], spec=spec)
    with pytest.raises(UnsupportedModelError, match="module names"):
        regime_flops(spec, stats, Trainability(trainable=(), adapter=AdapterConfig(target_modules="all-linear")))


def test_all_linear_on_deepseek_v3_reaches_its_mla_and_is_refused_naming_the_module():
    spec = load_model("deepseek-v3")  # LM-only names laid out; MLA attention laid out whole
    stats = BatchStats.from_batch(seq_lens=[512], spec=spec)
    with pytest.raises(UnsupportedModelError, match=r"model\.layers\.0\.self_attn\.q_a_proj, inside a mla_attention"):
        regime_flops(spec, stats, Trainability(trainable=(), adapter=AdapterConfig(target_modules="all-linear")))


def test_lora_on_an_embedding_table_is_refused_not_dropped():
    spec, stats = _tiny()
    adapter = AdapterConfig(target_modules=("embed_tokens", "q_proj"))
    with pytest.raises(UnsupportedModelError, match="embedding table"):
        regime_flops(spec, stats, Trainability(trainable=(), adapter=adapter))


# --------------------------------------------------------------------------- observed trainability
def test_observed_trainability_from_parameter_names():
    from vlm_perf.arch.observed import canonical, observed_trainability

    spec, stats = _tiny()
    assert canonical("base_model.model.model.layers.1.mlp.down_proj.modules_to_save.default.weight") == \
        "model.layers.1.mlp.down_proj.weight"
    assert canonical("module._orig_mod.model.layers.0.self_attn.q_proj.base_layer.weight") == \
        "model.layers.0.self_attn.q_proj.weight"
    names = ["model.layers.1.mlp.gate_proj.weight", "model.layers.1.mlp.up_proj.weight",
             "module.model.layers.1.mlp.down_proj.weight"]
    observed = observed_trainability(spec, names).trainability
    assert regime_flops(spec, stats, observed, causal="full").total == \
        regime_flops(spec, stats, Trainability.build(["lm[-1].mlp"]), causal="full").total
    with pytest.raises(UnsupportedModelError, match="belongs to no module"):
        observed_trainability(spec, ["model.layers.1.mlp.secret_gate.weight"])
    with pytest.raises(UnsupportedModelError, match="no adapter config"):
        observed_trainability(spec, ["base_model.model.model.layers.0.self_attn.q_proj.lora_A.default.weight"])
    lora = observed_trainability(spec, ["base_model.model.model.layers.0.self_attn.q_proj.lora_A.default.weight"],
                                 adapter=AdapterConfig(r=4, target_modules=("q_proj",)))
    assert lora.adapter_tensors == 1 and not lora.trainability.modules


def test_polars_expression_statistics_give_the_numbers_row_by_row():
    pl = pytest.importorskip("polars")
    spec = load_model("qwen2.5-vl-7b")
    rows = [BatchStats.from_batch(seq_lens=[4096], image_grids=[(1, 64, 64)], spec=spec),
            BatchStats.from_batch(seq_lens=[2000, 2096], image_grids=[(1, 32, 48)], video_grids=[(4, 32, 32)],
                                  spec=spec),
            BatchStats.from_batch(seq_lens=[1024], spec=spec)]
    frame = pl.DataFrame([r.as_dict() for r in rows])
    regime = Trainability.build(["vision_tower[-4:]"], adapter=AdapterConfig(r=16, target_modules="all-linear",
                                                                            use_dora=True))
    exprs = regime_flops(spec, BatchStats.columns(), regime).breakdown.as_exprs()
    assert frame.select(exprs)["flops_total"].to_list() == [float(regime_flops(spec, r, regime).total) for r in rows]


def test_frame_flops_of_a_lora_regime_equal_the_scalar_count_per_component():
    """``with_flops`` (the report's frame path) under a LoRA regime: every component column equals the scalar
    ``regime_flops`` of that row (Python integers), and each column's expression stays small: identical layers add
    the same term, which enters the expression once with its count instead of once per layer."""
    pl = pytest.importorskip("polars")
    from vlm_perf.analysis.flops_frame import flops_columns, with_flops

    spec = load_model("qwen2.5-vl-7b")
    rows = [BatchStats.from_batch(seq_lens=[4096], image_grids=[(1, 64, 64)], spec=spec),
            BatchStats.from_batch(seq_lens=[2000, 2096], image_grids=[(1, 32, 48)], video_grids=[(4, 32, 32)],
                                  spec=spec),
            BatchStats.from_batch(seq_lens=[1024], spec=spec)]
    regime = Trainability(trainable=(), adapter=AdapterConfig(r=16, target_modules="all-linear"))
    got = with_flops(pl.DataFrame([r.as_dict() for r in rows]), spec, ["exact"], regime)
    for i, r in enumerate(rows):
        want = regime_flops(spec, r, regime).breakdown
        assert got["exact_total"][i] == float(want.total)
        assert {k: got[f"flops.{k}"][i] for k in want.components} == {k: float(v) for k, v in want.components.items()}
    # one term per distinct (rows, shape) of each component, not one per layer: 28 LM layers x 7 Linears x 3
    # categories made ~300,000 characters per column before
    assert max(len(str(e)) for e in flops_columns(spec, ["exact"], regime)) < 30_000


@pytest.mark.parametrize("selector", ["lm[5:]", "lm[2]", "lm[-3]", "lm[0:0]"])
def test_a_selector_that_names_nothing_is_an_error(selector):
    spec, stats = _tiny()  # an LM-only model with 2 layers
    with pytest.raises(ConfigError, match="matches no weight"):
        regime_flops(spec, stats, Trainability.build([selector]))


def test_selectors_on_every_part_of_a_vlm_are_accepted():
    spec = load_model("qwen3-vl-8b")
    stats = BatchStats.from_batch(seq_lens=[2048], image_grids=[(1, 32, 32)], spec=spec)
    for sel in ("vision_tower[-2:]", "projector", "deepstack_merger", "lm.head",
                "vision_tower.embeddings", "lm[0].norms"):
        assert regime_flops(spec, stats, Trainability.build([sel])).total > 0
    with pytest.raises(ConfigError, match="matches no weight"):
        regime_flops(spec, stats, Trainability.build(["projector.attention"]))


def test_literal_all_linear_leaves_convolutions_alone():
    """PEFT's all-linear wraps nn.Linear only: not the Conv3d patch embed (nor GLM's downsample conv)."""
    for name in ("qwen2.5-vl-7b", "glm-4.1v-9b-thinking"):
        spec = load_model(name)
        stats = BatchStats.from_batch(seq_lens=[256], image_grids=[(1, 8, 8)], spec=spec)
        r = regime_flops(spec, stats, Trainability.build(adapter=AdapterConfig(target_modules="all-linear")))
        adapted = {a.name for a in r.adapted}
        assert "model.visual.patch_embed.proj" not in adapted and "model.visual.downsample" not in adapted
        assert any(n.endswith("attn.proj") for n in adapted)
