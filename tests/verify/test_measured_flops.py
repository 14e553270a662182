"""The library's exact FLOPs against torch's FlopCounterMode on tiny transformers Qwen-VL models.

Models: transformers' own Qwen2-VL, Qwen2.5-VL, Qwen3-VL and Qwen3-VL-MoE classes, randomly
initialised from tiny configs (``measure.tiny_config_kwargs``), float64, eager attention, eager
experts. Each case runs the whole ``<Family>ForConditionalGeneration`` forward (and, for the
training checks, ``logits.mean().backward()``) under ``measure.PartFlopCounter``, a
FlopCounterMode that also splits the count into parts:

    tower  = model.visual.patch_embed + model.visual.blocks.*
    merger = model.visual.merger + model.visual.deepstack_merger_list.*
    lm     = model.language_model + lm_head (logits over every position)

(backward FLOPs are attributed through autograd-node tags, see ``measure``'s docstring), and
compares each part with ``compute_flops(spec, stats, convention="exact", causal="full", ...)``
where tower = vision.{patch_embed,attn_proj,attn_core,mlp}, merger = vision.{merger,
deepstack_merger}, lm = every lm.* component. Eager attention materialises the full score
matrix, hence ``causal="full"``. Tolerance 0.5 % per part (in practice the match is exact).
"""

from __future__ import annotations

import pytest

from .measure import (FAMILIES, PARTS, build_model, hub_layout_config, library_flops, library_parts, make_batch,
                      measure, rel_err)

pytestmark = pytest.mark.measured
torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

REL_TOL = 0.005

# (family, image grids, video grids) in patches (t, h, w) before merging (merge size 2).
FORWARD_CASES = [
    ("qwen2_vl", [(1, 4, 4), (1, 10, 14)], [(2, 4, 6)]),
    ("qwen2_vl", [], [(3, 8, 10)]),
    # Qwen2.5-VL, window side 4 merged tokens: 10x14 patches = 5x7 merged, windows cut at both edges
    ("qwen2_5_vl", [(1, 10, 14)], []),
    ("qwen2_5_vl", [(1, 16, 16), (1, 4, 12)], []),  # 8x8 merged (exact multiple), 2x6 (one cut side)
    ("qwen2_5_vl", [(1, 6, 6)], [(2, 10, 14)]),  # t>1 video with edge windows in every frame
    ("qwen2_5_vl", [(1, 18, 2)], [(3, 8, 10)]),  # 9x1 merged: single column of cut windows
    ("qwen3_vl", [(1, 4, 4), (1, 6, 8)], [(2, 4, 6)]),
    ("qwen3_vl", [(1, 10, 14)], [(3, 8, 10)]),
    ("qwen3_vl_moe", [(1, 4, 4), (1, 6, 8)], [(2, 4, 6)]),
    ("qwen3_vl_moe", [(1, 10, 14)], [(3, 8, 10)]),
]

TRAINING_FROZEN = [(), ("vision_tower",), ("vision",), ("merger",), ("language_model",)]
TRAINING_GRIDS = ([(1, 4, 4), (1, 10, 14)], [(2, 4, 6)])


def _case_id(case):
    fam, imgs, vids = case
    grid = lambda gs: "+".join(f"{t}x{h}x{w}" for t, h, w in gs) or "none"
    return f"{fam}-img{grid(imgs)}-vid{grid(vids)}"


@pytest.fixture(scope="module")
def models():
    cache = {}

    def get(family, **over):
        key = (family, repr(sorted(over.items())))
        if key not in cache:
            cache[key] = build_model(family, **over)
        return cache[key]

    return get


def _compare(measured: dict, library: dict, what: str) -> list[str]:
    problems = []
    for part in PARTS:
        got, want = measured.get(part, 0), library[part]
        err = rel_err(got, want)
        if err > REL_TOL:
            problems.append(f"{what} {part}: measured {got:,} library {want:,.0f} "
                            f"(library - measured = {want - got:+,.0f}, {100 * (want - got) / max(got, 1):+.3f} %)")
    assert library.get("unmapped", 0) == 0, library
    return problems


# --------------------------------------------------------------------------- harness sanity
@pytest.mark.parametrize("family", FAMILIES)
def test_part_split_agrees_with_flopcountermode_module_table(models, family):
    """The forward part split equals FlopCounterMode's own per-module (FQN) breakdown."""
    model = models(family)
    batch = make_batch(model, *TRAINING_GRIDS)
    m = measure(model, batch)
    m.check_consistency()
    root = type(model).__name__
    mc = {k: sum(v.values()) for k, v in m.module_counts.items()}
    visual = f"{root}.model.visual"
    tower = mc.get(f"{visual}.patch_embed", 0) + sum(
        v for k, v in mc.items() if k.startswith(f"{visual}.blocks.") and k.count(".") == visual.count(".") + 2)
    merger = mc.get(f"{visual}.merger", 0) + sum(
        v for k, v in mc.items()
        if k.startswith(f"{visual}.deepstack_merger_list.") and k.count(".") == visual.count(".") + 2)
    lm = mc[f"{root}.model.language_model"] + mc[f"{root}.lm_head"]
    assert {"tower": tower, "merger": merger, "lm": lm} == {p: m.forward.get(p, 0) for p in PARTS}
    assert m.total == tower + merger + lm + m.forward.get("rope", 0)


def test_backward_attribution_is_complete(models):
    """Every backward FLOP lands in a part, and a frozen tower really has no backward FLOPs."""
    model = models("qwen3_vl")
    batch = make_batch(model, *TRAINING_GRIDS)
    full = measure(model, batch, training=True)
    full.check_consistency()
    frozen = measure(model, batch, training=True, frozen=("vision_tower",))
    frozen.check_consistency()
    assert frozen.backward.get("tower", 0) == 0
    assert frozen.forward == full.forward
    assert frozen.backward["lm"] == full.backward["lm"]
    # NB: the merger backward is NOT smaller: see test_merger_pre_norm_forces_fc1_input_gradient
    assert frozen.backward["merger"] == full.backward["merger"]


@pytest.mark.parametrize("family", FAMILIES)
def test_merger_pre_norm_forces_fc1_input_gradient(models, family):
    """Why a frozen tower does not save the first merger GEMM's input gradient.

    Every merger (and deepstack merger) starts with a LayerNorm/RMSNorm whose affine weights belong
    to the merger; when the merger is trainable, autograd needs d(norm output) to reach those
    weights, so linear_fc1 / mlp.0 computes its input gradient even though the tower is frozen.
    Freezing the merger norms as well removes exactly that: one forward of every merger fc1.
    """
    model = models(family)
    batch = make_batch(model, *TRAINING_GRIDS)
    visual = model.model.visual
    mergers = [visual.merger, *getattr(visual, "deepstack_merger_list", [])]
    fc1 = [mod.linear_fc1 if hasattr(mod, "linear_fc1") else mod.mlp[0] for mod in mergers]
    fc1_forward = sum(2 * batch_merged_tokens(batch, visual) * lin.in_features * lin.out_features for lin in fc1)

    frozen = measure(model, batch, training=True, frozen=("vision_tower",))
    norms = [mod.norm if hasattr(mod, "norm") else mod.ln_q for mod in mergers]
    norm_params = [p for norm in norms for p in norm.parameters()]
    assert norm_params and all(p.requires_grad for p in norm_params)
    m = measure(model, batch, training=True, frozen=("vision_tower",), also_frozen=norm_params)
    assert frozen.backward["merger"] - m.backward["merger"] == fc1_forward
    assert frozen.backward["lm"] == m.backward["lm"]


def batch_merged_tokens(batch, visual) -> int:
    merge_unit = visual.spatial_merge_size**2
    return sum(t * h * w for t, h, w in batch.image_grids + batch.video_grids) // merge_unit


# --------------------------------------------------------------------------- config layouts
@pytest.mark.parametrize("family", FAMILIES)
def test_spec_from_saved_and_hub_layout(models, family):
    from vlm_perf.arch import spec_from_config

    model = models(family)
    saved = spec_from_config(model.config.to_dict(), name="tiny")
    hub = spec_from_config(hub_layout_config(family), name="tiny")
    assert saved.vision == hub.vision
    assert saved.lm == hub.lm
    v, lm = saved.vision, saved.lm
    vc, tc = model.config.vision_config, model.config.text_config
    # widths as the modules were actually built
    blk = model.model.visual.blocks[0]
    assert v.hidden_size == blk.norm1.weight.shape[0]
    assert v.depth == len(model.model.visual.blocks)
    assert v.out_hidden_size == lm.hidden_size == tc.hidden_size
    assert lm.vocab_size == model.lm_head.out_features
    assert v.patch_volume == model.model.visual.patch_embed.proj.weight[0].numel()
    if family == "qwen2_vl":
        assert (v.hidden_size, v.intermediate_size, v.mlp_gated) == (vc.embed_dim, blk.mlp.fc1.out_features, False)
    if family == "qwen2_5_vl":
        assert v.window_side_merged == 4 and v.fullatt_block_indexes == (1, 3) and v.mlp_gated
    if family.startswith("qwen3_vl"):
        assert v.deepstack_visual_indexes == (0, 1)
        assert lm.head_dim == 16
    if family == "qwen3_vl_moe":
        assert lm.moe is not None and (lm.moe.num_experts, lm.moe.top_k, lm.moe.expert_intermediate_size) == (8, 2, 32)
        assert lm.moe_layers == (0, 1)


# --------------------------------------------------------------------------- forward
@pytest.mark.parametrize("case", FORWARD_CASES, ids=_case_id)
def test_forward_flops_match_per_part(models, case):
    family, images, videos = case
    model = models(family)
    batch = make_batch(model, images, videos)
    m = measure(model, batch)
    m.check_consistency()
    lib = library_parts(library_flops(model.config.to_dict(), batch, mode="forward"))
    problems = _compare(m.forward, lib, "forward")
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("family", FAMILIES)
def test_forward_from_hub_layout_config(models, family):
    model = models(family)
    batch = make_batch(model, *TRAINING_GRIDS)
    m = measure(model, batch)
    lib = library_parts(library_flops(hub_layout_config(family), batch, mode="forward"))
    problems = _compare(m.forward, lib, "forward(hub layout)")
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("family", ["qwen2_5_vl", "qwen3_vl_moe"])
def test_forward_two_rows(models, family):
    """A batch of two unpadded sequences: seq_lens=[L, L], grids of both rows."""
    model = models(family)
    batch = make_batch(model, [(1, 10, 14)], [(2, 4, 6)], rows=2)
    assert batch.inputs["input_ids"].shape[0] == 2 and len(batch.seq_lens) == 2
    m = measure(model, batch)
    m.check_consistency()
    lib = library_parts(library_flops(model.config.to_dict(), batch, mode="forward"))
    problems = _compare(m.forward, lib, "forward")
    assert not problems, "\n".join(problems)


def test_forward_moe_with_dense_layer(models):
    """Qwen3-VL-MoE with ``mlp_only_layers=[0]``: one dense MLP layer, one MoE layer."""
    model = models("qwen3_vl_moe", text={"mlp_only_layers": [0]})
    batch = make_batch(model, *TRAINING_GRIDS)
    m = measure(model, batch)
    lib = library_parts(library_flops(model.config.to_dict(), batch, mode="forward"))
    problems = _compare(m.forward, lib, "forward")
    assert not problems, "\n".join(problems)


# --------------------------------------------------------------------------- training
@pytest.mark.parametrize("frozen", TRAINING_FROZEN, ids=lambda f: "+".join(f) or "all_trainable")
@pytest.mark.parametrize("family", FAMILIES)
def test_training_flops_match_per_part(models, family, frozen):
    """forward + backward (loss = logits.mean()) vs mode="training", causal="full", per part."""
    model = models(family)
    batch = make_batch(model, *TRAINING_GRIDS)
    m = measure(model, batch, training=True, frozen=frozen)
    m.check_consistency()
    lib = library_parts(library_flops(model.config.to_dict(), batch, mode="training", frozen=frozen))
    problems = _compare(m.training(), lib, f"training frozen={frozen}")
    assert not problems, "\n".join(problems)
