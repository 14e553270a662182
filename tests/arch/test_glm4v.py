"""GLM-4.1V / GLM-4.5V: presets vs published totals, the media rule vs transformers' own GLM processors,
and what each named convention counts (hand arithmetic written here)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vlm_perf.arch import load_model, preset_config, spec_from_config
from vlm_perf.arch.blocks import inventory_params
from vlm_perf.arch.families import FAMILIES
from vlm_perf.arch.params import total_params
from vlm_perf.arch.parts import MERGER, VISION_TOWER
from vlm_perf.errors import ConfigError, ConventionNotDefined
from vlm_perf.flops import compute_flops
from vlm_perf.stats import BatchStats
from tests.support import run_main  # the CLI entry point in-process (same exit statuses, one-line errors)

VERIFY_PRESETS = Path(__file__).parents[1] / "verify" / "families" / "presets"
SIDECAR = json.loads((VERIFY_PRESETS / "presets.json").read_text())
PRESETS = {"glm-4.1v-9b-thinking": "GLM-4.1V-9B-Thinking", "glm-4.5v": "GLM-4.5V"}


# --------------------------------------------------------------------------- presets


@pytest.mark.parametrize("preset, published", PRESETS.items())
def test_preset_total_equals_published_checkpoint_total(preset, published):
    entry = SIDECAR[published]
    got = total_params(load_model(preset))
    assert got == entry["transformers_checkpoint_tensors"]  # transformers' meta-device count (+ stored buffers)
    assert abs(got - entry["published_total"]) <= entry["published_tolerance"], (got, entry["published_label"])


def test_glm_4_5v_total_to_the_parameter():
    # third-party checkpoint tabulation quoted in vlm-architectures.md: 107,710,933,120
    assert total_params(load_model("glm-4.5v")) == 107_710_933_120


@pytest.mark.parametrize("preset, published", PRESETS.items())
def test_preset_is_the_verified_hub_config(preset, published):
    ours = {k: v for k, v in preset_config(preset).items() if not k.startswith("_vlm_perf")}
    ours["text_config"] = {k: v for k, v in ours["text_config"].items() if k != "torch_dtype"}
    assert ours == json.loads((VERIFY_PRESETS / f"{published}.json").read_text())


def test_vision_tower_and_projector_by_hand():
    """GLM ViT 1536 wide, 12 heads, 24 blocks, gated MLP of out_hidden_size 4096 (no biases), RMSNorms."""
    h, d, depth = 1536, 4096, 24
    block = 2 * h + h * 3 * h + h * h + 3 * h * d  # 2 RMSNorms, fused qkv, proj, gate/up/down
    tower = (3 * 2 * 14 * 14 * h + h) + 24 * 24 * h + 2 * h + depth * block  # conv3d + bias, 576 positions, 2 norms
    for preset, ctx in (("glm-4.1v-9b-thinking", 13696), ("glm-4.5v", 10944)):
        spec = load_model(preset)
        assert inventory_params(spec.blocks, VISION_TOWER) == tower
        projector = (4 * h * d + d) + d * d + 2 * d + 3 * d * ctx  # downsample conv + bias, proj, LayerNorm, MLP
        assert inventory_params(spec.blocks, MERGER) == projector


def test_lm_shapes():
    lm = load_model("glm-4.5v").lm
    assert (lm.num_heads * lm.head_dim, lm.num_moe_layers, lm.num_dense_layers) == (12288, 45, 1)
    assert (lm.moe.num_experts, lm.moe.top_k, lm.moe.expert_intermediate_size) == (128, 8, 1408)
    dense = load_model("glm-4.1v-9b-thinking").lm
    assert dense.moe is None and dense.head_dim == 128 and dense.qkv_bias


def test_missing_vision_field_names_it():
    cfg = preset_config("glm-4.5v")
    del cfg["vision_config"]["out_hidden_size"]
    with pytest.raises(ConfigError, match=r"vision_config\.out_hidden_size"):
        spec_from_config(cfg)


def test_out_hidden_size_must_match_lm_width():
    cfg = preset_config("glm-4.1v-9b-thinking")
    cfg["vision_config"]["out_hidden_size"] = 2048
    with pytest.raises(ConfigError, match="out_hidden_size 2048 must equal the LM hidden_size 4096"):
        spec_from_config(cfg)


def test_glm46v_dispatches_on_the_text_model_type():
    cfg = preset_config("glm-4.5v")
    cfg["model_type"] = "glm46v"
    assert total_params(spec_from_config(cfg)) == total_params(load_model("glm-4.5v"))
    cfg["text_config"]["model_type"] = "llama"
    with pytest.raises(Exception, match="glm46v with text_config.model_type 'llama' is not modelled"):
        spec_from_config(cfg)


# --------------------------------------------------------------------------- media vs transformers' processors

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")


def _image_processor(**kw):
    from transformers.models.glm4v.image_processing_pil_glm4v import Glm4vImageProcessorPil

    return Glm4vImageProcessorPil(**kw)


def _spec(preset="glm-4.1v-9b-thinking", processor=None):
    spec = load_model(preset)
    if processor:
        object.__setattr__(spec, "processor", processor)
    return spec


@pytest.mark.parametrize("size", [(224, 224), (1080, 1920), (10, 10), (27, 500), (4000, 3000), (333, 777)])
def test_image_rule_equals_the_processor_output(size):
    import numpy as np

    image = np.random.default_rng(0).integers(0, 255, (*size, 3), dtype=np.uint8)
    out = _image_processor()(images=[image], return_tensors="pt", input_data_format="channels_last")
    media = FAMILIES["glm4v"].media.image(_spec(), *size)
    assert [media.grid] == [tuple(int(x) for x in g) for g in out["image_grid_thw"]]
    assert media.visual_tokens == int(out["image_grid_thw"][0].prod()) // 4
    assert media.resized == (media.grid[1] * 14, media.grid[2] * 14)


def test_processor_files_bounds_are_used():
    size = {"shortest_edge": 12544, "longest_edge": 28 * 28 * 1000}
    spec = _spec(processor={"preprocessor_config.json": {"size": size, "patch_size": 14}})
    rule = FAMILIES["glm4v"].media
    assert rule.settings(spec)["max_pixels"] == 28 * 28 * 1000
    proc = _image_processor(size=size)
    for h, w in ((1080, 1920), (300, 300)):
        want = proc.get_number_of_image_patches(h, w, {})
        assert rule.image(spec, h, w).grid[1] * rule.image(spec, h, w).grid[2] == want
    bad = _spec(processor={"preprocessor_config.json": {"patch_size": 16}})
    with pytest.raises(ConfigError, match="patch_size 16 differs from the model's 14"):
        rule.image(bad, 100, 100)


def test_extreme_aspect_ratio_refused_like_transformers():
    with pytest.raises(ConfigError, match="aspect ratio .* above 200"):
        FAMILIES["glm4v"].media.image(_spec(), 28, 28 * 300)


@settings(derandomize=True, deadline=None, max_examples=150)
@given(h=st.integers(1, 6000), w=st.integers(1, 6000))
def test_image_rule_fuzz_against_processor_arithmetic(h, w):
    if max(h, w) / min(h, w) > 150:  # keep clear of the 200 refusal after the upscale
        return
    want = _image_processor().get_number_of_image_patches(h, w, {})
    media = FAMILIES["glm4v_moe"].media.image(_spec("glm-4.5v"), h, w)
    assert media.grid[0] == 1 and media.grid[1] * media.grid[2] == want
    assert media.visual_tokens * 4 == want


@settings(derandomize=True, deadline=None, max_examples=80)
@given(t=st.integers(2, 64), h=st.integers(28, 2000), w=st.integers(28, 2000))
def test_video_rule_fuzz_against_video_processor(t, h, w):
    from transformers.models.glm4v.video_processing_glm4v import Glm4vVideoProcessor, smart_resize

    vp = Glm4vVideoProcessor()
    media = FAMILIES["glm4v"].media.video(_spec(), t, h, w)
    rh, rw = smart_resize(num_frames=t, height=h, width=w, temporal_factor=2, factor=28,
                          min_pixels=vp.size["shortest_edge"], max_pixels=vp.size["longest_edge"])
    assert media.grid == (-(-t // 2), rh // 14, rw // 14)
    assert media.grid[0] * media.grid[1] * media.grid[2] == vp.get_num_of_video_patches(t, h, w)
    assert media.visual_tokens == media.grid[0] * media.grid[1] * media.grid[2] // 4


def test_one_frame_video_refused():
    with pytest.raises(ConfigError, match="fewer than temporal_patch_size 2"):
        FAMILIES["glm4v"].media.video(_spec(), 1, 448, 448)


# --------------------------------------------------------------------------- conventions


def _stats(spec, grids=((1, 32, 48), (2, 20, 20)), seq_len=2048):
    return BatchStats.from_batch(seq_len=seq_len, samples=1, image_grids=[grids[0]], video_grids=[grids[1]],
                                 spec=spec)


def test_megatron_bridge_reproduces_its_qwen_formula_on_glm_4_5v():
    """Bridge's vit_flops reads vision_config.{depth, hidden_size, intermediate_size, spatial_merge_size,
    out_hidden_size}: 3 * [L * (8h^2 P + 4h P2 + 4h i P) + M * (2 (4h)^2 + 2 (4h) d)], i = 10944 here."""
    spec = load_model("glm-4.5v")
    s = _stats(spec)
    P = 32 * 48 + 2 * 400
    P2 = (32 * 48) ** 2 + 2 * 400**2
    M = P // 4
    h, i, d, L = 1536, 10944, 4096, 24
    vit = 3 * (L * (8 * h * h * P + 4 * h * P2 + 4 * h * i * P) + M * (2 * (4 * h) ** 2 + 2 * 4 * h * d))
    c = compute_flops(spec, s, convention="megatron-bridge").components
    got = sum(c[k] for k in ("vision.patch_embed", "vision.attn_proj", "vision.attn_core", "vision.mlp",
                             "vision.merger", "vision.deepstack_merger"))
    assert got == vit
    # exact gated MLP: 3 matrices of out_hidden_size -> Bridge's MLP term is 4*10944 / (6*4096) = 1.78x
    exact = compute_flops(spec, s, convention="exact").components
    assert c["vision.mlp"] / exact["vision.mlp"] == pytest.approx(4 * i / (6 * d))


@pytest.mark.parametrize("convention", ["megatron-bridge", "mbridge-pr2575", "megatron-lm", "torchtitan"])
def test_conventions_not_defined_for_glm_4_1v(convention):
    spec = load_model("glm-4.1v-9b-thinking")
    with pytest.raises(ConventionNotDefined, match="not defined for glm4v"):
        compute_flops(spec, _stats(spec), convention=convention)


@pytest.mark.parametrize("convention", ["verl", "megatron-lm", "torchtitan"])
def test_conventions_not_defined_for_glm_4_5v(convention):
    spec = load_model("glm-4.5v")
    with pytest.raises(ConventionNotDefined, match="not defined for glm4v_moe"):
        compute_flops(spec, _stats(spec), convention=convention)


@pytest.mark.parametrize("convention", ["verl", "verl@v0.7.1"])
def test_verl_refuses_glm_4_1v_as_verl_raises_on_its_nested_config(convention):
    """veRL routes model_type glm4v to _estimate_qwen2_flops, which reads config.hidden_size; GLM-4.1V's config keeps
    the text fields under text_config, so veRL itself raises AttributeError (tests/flops/test_framework_conventions.py
    runs veRL's own function on it) and prints no number: the convention refuses with that reason."""
    spec = load_model("glm-4.1v-9b-thinking")
    with pytest.raises(ConventionNotDefined, match="AttributeError.*hidden_size"):
        compute_flops(spec, _stats(spec, seq_len=3000), convention=convention)


# --------------------------------------------------------------------------- parameters vs transformers (meta)


@settings(derandomize=True, deadline=None, max_examples=20)
@given(depth=st.integers(1, 3), heads=st.sampled_from([1, 2, 4]), vbias=st.booleans(),
       patch_merge=st.sampled_from([(2, 2), (4, 1), (2, 3)]), tp=st.sampled_from([1, 2]), image=st.sampled_from([8, 12]),
       moe=st.booleans(), first_dense=st.integers(0, 3), shared=st.integers(0, 2), qkv_bias=st.booleans(),
       head_dim=st.sampled_from([None, 24]), tie=st.booleans())
def test_params_equal_transformers_over_config_switches(depth, heads, vbias, patch_merge, tp, image, moe, first_dense,
                                                        shared, qkv_bias, head_dim, tie):
    patch, merge = patch_merge
    vision = dict(depth=depth, hidden_size=32, num_heads=heads, patch_size=patch, spatial_merge_size=merge,
                  temporal_patch_size=tp, image_size=image, out_hidden_size=64, intermediate_size=40,
                  attention_bias=vbias, in_channels=3)
    text = dict(vocab_size=120, hidden_size=64, intermediate_size=72, num_hidden_layers=3, num_attention_heads=4,
                num_key_value_heads=2, tie_word_embeddings=tie)
    if moe:
        text.update(moe_intermediate_size=16, n_routed_experts=4, num_experts_per_tok=2, n_shared_experts=shared,
                    first_k_dense_replace=first_dense, attention_bias=qkv_bias, n_group=1, topk_group=1)
        if head_dim:
            text["head_dim"] = head_dim
        cfg = transformers.Glm4vMoeConfig(vision_config=vision, text_config=text, tie_word_embeddings=tie)
        cls = transformers.Glm4vMoeForConditionalGeneration
    else:
        cfg = transformers.Glm4vConfig(vision_config=vision, text_config=text, tie_word_embeddings=tie)
        cls = transformers.Glm4vForConditionalGeneration
    if moe and not shared:
        return  # transformers builds a zero-width shared MLP; no released config has one
    with torch.device("meta"):
        model = cls(cfg)
    spec = spec_from_config(cfg.to_dict())
    state = model.state_dict()
    stored = lambda mod, prefix: (sum(p.numel() for p in mod.parameters())  # noqa: E731
                                  + sum(b.numel() for k, b in mod.named_buffers() if f"{prefix}.{k}" in state))
    v = model.model.visual
    projector = stored(v.downsample, "model.visual.downsample") + stored(v.merger, "model.visual.merger")
    assert inventory_params(spec.blocks, VISION_TOWER) == stored(v, "model.visual") - projector
    assert inventory_params(spec.blocks, MERGER) == projector
    assert total_params(spec) == sum(p.numel() for p in model.parameters()) + sum(
        b.numel() for k, b in model.named_buffers() if k in state)


# --------------------------------------------------------------------------- CLI


def test_cli_checkpoint_directory_with_glm_processor_files(tmp_path):

    cfg = {k: v for k, v in preset_config("glm-4.5v").items() if not k.startswith("_")}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    (tmp_path / "preprocessor_config.json").write_text(json.dumps(
        {"size": {"shortest_edge": 12544, "longest_edge": 28 * 28 * 2 * 1000}, "patch_size": 14, "merge_size": 2}))
    r = run_main("flops", "--model", str(tmp_path), "--seq-len", "8192",
                 "--image-size", "1080,1920", "--frozen", "vision_tower", "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    (m,) = out["media"]
    # 2*1092*1932 > 2*784*1000 -> beta = sqrt(2*1080*1920 / (2*784*1000)) = 1.626;
    # floor(1080/beta/28)*28 = 23*28 = 644, floor(1920/beta/28)*28 = 42*28 = 1176
    assert m["resized"] == [644, 1176]
    want = _image_processor(size={"shortest_edge": 12544, "longest_edge": 28 * 28 * 2 * 1000})(
        images=[__import__("numpy").zeros((1080, 1920, 3), dtype="uint8")], return_tensors="pt",
        input_data_format="channels_last")["image_grid_thw"][0].tolist()
    assert m["grid"] == want and m["visual_tokens"] == want[1] * want[2] // 4
    spec = load_model(str(tmp_path))
    stats = BatchStats.from_batch(seq_len=8192, samples=1, image_grids=[tuple(want)], spec=spec)
    assert out["parts"] == compute_flops(spec, stats, frozen=["vision_tower"]).parts


# --------------------------------------------------------------------------- vectorised path


@pytest.mark.parametrize("preset", list(PRESETS))
@pytest.mark.parametrize("frozen", [(), ("vision_tower",)])
def test_polars_frame_equals_scalar_path(preset, frozen):
    """The GLM block formulas are plain arithmetic: a frame of microbatches gives each row's scalar FLOPs."""
    import polars as pl

    from vlm_perf.analysis.flops_frame import with_flops

    spec = load_model(preset)
    batches = [dict(seq_lens=[4096, 1000], image_grids=[(1, 78, 138)], video_grids=[]),
               dict(seq_lens=[8192], image_grids=[(1, 32, 32)], video_grids=[(8, 52, 92)]),
               dict(seq_lens=[512], image_grids=[], video_grids=[])]
    stats = [BatchStats.from_batch(spec=spec, **b) for b in batches]
    out = with_flops(pl.DataFrame([s.as_dict() for s in stats]), spec, ["exact", "megatron-bridge"]
                     if preset == "glm-4.5v" else ["exact"], frozen=frozen)
    for row, s in zip(out.iter_rows(named=True), stats):
        want = compute_flops(spec, s, frozen=frozen)
        assert row["exact_total"] == pytest.approx(want.total, rel=1e-12)
        assert row["exact_vision"] == pytest.approx(want.vision, rel=1e-12)
        if preset == "glm-4.5v":
            assert row["megatron-bridge_total"] == pytest.approx(
                compute_flops(spec, s, convention="megatron-bridge").total, rel=1e-12)
