"""GLM-4.1V / GLM-4.5V / GLM-4.6V exact FLOPs and parameters per part vs transformers' own classes.

Reference: FlopCounterMode on ``Glm4vForConditionalGeneration`` / ``Glm4vMoeForConditionalGeneration`` /
``Glm46VForConditionalGeneration`` built from tiny random configs (``tests/verify/families/glm4v.py``), eager
attention, images through transformers' ``Glm4vImageProcessorPil`` and videos sized by
``Glm4vVideoProcessor``'s own arithmetic. The library side sees only the config dict and the grids the
processor produced (eager attention computes the full LM square: ``causal="full"``).
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

pytestmark = pytest.mark.measured
torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from vlm_perf.arch import spec_from_config  # noqa: E402
from vlm_perf.arch.blocks import inventory_params  # noqa: E402
from vlm_perf.arch.parts import LANGUAGE_MODEL, MERGER, VISION_TOWER  # noqa: E402
from vlm_perf.flops import compute_flops  # noqa: E402
from vlm_perf.stats import BatchStats  # noqa: E402

from .families import measure_family  # noqa: E402
from .families.glm4v import build_model, part_modules, tiny_config  # noqa: E402

TOWER = ("vision.patch_embed", "vision.attn_proj", "vision.attn_core", "vision.mlp")
PROJECTOR = ("vision.merger", "vision.deepstack_merger")
TOL = 0.005

IMAGE_CASES = [[(30, 50), (8, 8)], [(200, 120)], [(3, 40), (57, 31), (16, 16)]]
VIDEO_CASES = [[(3, 20, 20)], [(4, 16, 24)]]


def glm46v_config(moe: bool = False):
    """The same tiny model as a ``glm46v`` config (sub-configs picked by their own model_type)."""
    base = tiny_config(moe=moe)
    d = base.to_dict()
    vision, text = dict(d["vision_config"]), dict(d["text_config"])
    vision["model_type"] = "glm4v_vision"
    text["model_type"] = "glm4v_moe_text" if moe else "glm4v_text"
    keys = ("image_token_id", "video_token_id", "image_start_token_id", "image_end_token_id",
            "video_start_token_id", "video_end_token_id", "tie_word_embeddings")
    return transformers.Glm46VConfig(vision_config=vision, text_config=text, **{k: d[k] for k in keys})


def build_glm46v(config, seed: int = 0):
    from .families.common import eager, finish_model

    moe = config.text_config.model_type == "glm4v_moe_text"
    eager(config, experts=moe)
    torch.manual_seed(seed)
    model = finish_model(transformers.Glm46VForConditionalGeneration(config))
    if moe:
        with torch.no_grad():
            for layer in model.model.language_model.layers:
                gate = getattr(layer.mlp, "gate", None)
                if gate is not None:
                    gate.weight.normal_(0, 0.5)
    return model


@pytest.fixture(scope="module")
def models():
    return {"glm4v": build_model(tiny_config(), 0), "glm4v_moe": build_model(tiny_config(moe=True), 0),
            "glm46v": build_glm46v(glm46v_config(), 0), "glm46v_moe": build_glm46v(glm46v_config(moe=True), 0)}


def library_parts(model, media, mode="forward", frozen=(), causal="full") -> dict:
    spec = spec_from_config(model.config.to_dict(), name="tiny")
    stats = BatchStats.from_batch(seq_lens=[media["seq_len"]], image_grids=media["image_grids"],
                                  video_grids=media["video_grids"], spec=spec)
    comps = compute_flops(spec, stats, mode=mode, causal=causal, frozen=tuple(frozen)).components
    parts = {"vision_tower": sum(comps.get(k, 0) for k in TOWER),
             "projector": sum(comps.get(k, 0) for k in PROJECTOR),
             "language_model": sum(v for k, v in comps.items() if k.startswith("lm."))}
    assert sum(parts.values()) == sum(comps.values())  # nothing unmapped
    return parts


def _assert_close(measured: dict, lib: dict, what) -> None:
    for part, got in measured.items():
        want = lib[part]
        err = abs(want - got) / got if got else (0.0 if want == 0 else float("inf"))
        assert err <= TOL, (what, part, got, want)


def _family_of(key: str) -> str:
    return "glm4v_moe" if key in ("glm4v_moe", "glm46v_moe") else "glm4v"


@pytest.mark.parametrize("key", ["glm4v", "glm4v_moe", "glm46v", "glm46v_moe"])
@pytest.mark.parametrize("images", IMAGE_CASES, ids=lambda c: "img" + "_".join(f"{h}x{w}" for h, w in c))
def test_forward_images_per_part(models, key, images):
    m = measure_family(_family_of(key), model=models[key], image_sizes=images, text_len=8)
    lib = library_parts(models[key], m.media)
    _assert_close(m.parts("forward"), lib, (key, images))
    assert m.parts("forward") == {k: int(v) for k, v in lib.items()}  # exact to the FLOP


@pytest.mark.parametrize("key", ["glm4v", "glm4v_moe"])
@pytest.mark.parametrize("videos", VIDEO_CASES, ids=lambda c: "vid" + "_".join("x".join(map(str, v)) for v in c))
def test_forward_videos_per_part(models, key, videos):
    m = measure_family(key, model=models[key], video_sizes=videos, text_len=8)
    lib = library_parts(models[key], m.media)
    assert m.parts("forward") == {k: int(v) for k, v in lib.items()}, (key, videos)


TRAINING = [
    ("glm4v", (), [(30, 50), (8, 8)], ()),
    ("glm4v", ("vision_tower",), [(30, 50), (8, 8)], ()),
    ("glm4v", ("vision_tower",), (), [(3, 20, 20)]),
    ("glm4v", ("language_model",), [(200, 120)], ()),
    ("glm4v", ("vision_tower", "projector"), [(57, 31)], ()),
    ("glm4v", ("projector",), [(57, 31)], ()),
    ("glm4v_moe", (), [(30, 50)], ()),
    ("glm4v_moe", ("vision_tower",), [(3, 40), (16, 16)], ()),
    ("glm4v_moe", (), (), [(4, 16, 24)]),
    ("glm46v", ("vision_tower",), [(30, 50)], ()),
    ("glm46v_moe", (), [(8, 8)], ()),
]


@pytest.mark.parametrize("key, frozen, images, videos", TRAINING)
def test_training_per_part(models, key, frozen, images, videos):
    m = measure_family(_family_of(key), model=models[key], image_sizes=images, video_sizes=videos, text_len=8,
                       mode="training", frozen=frozen)
    lib = library_parts(models[key], m.media, mode="training", frozen=frozen)
    assert m.parts("training") == {k: int(v) for k, v in lib.items()}, (key, frozen, images, videos)


@pytest.mark.parametrize("key", ["glm4v", "glm4v_moe", "glm46v", "glm46v_moe"])
def test_parameters_per_part_equal_transformers(models, key):
    model = models[key]
    spec = spec_from_config(model.config.to_dict(), name="tiny")
    mods = part_modules(model)
    state = model.state_dict(keep_vars=True)

    def stored(modules):  # parameters + persistent buffers (what a checkpoint stores)
        n = sum(p.numel() for mod in modules for p in mod.parameters())
        ids = {id(t) for t in state.values()}
        return n + sum(b.numel() for mod in modules for b in mod.buffers() if id(b) in ids)

    assert inventory_params(spec.blocks, VISION_TOWER) == stored(mods["vision_tower"])
    assert inventory_params(spec.blocks, MERGER) == stored(mods["projector"])
    assert inventory_params(spec.blocks, LANGUAGE_MODEL) == stored(mods["language_model"])
    # and nothing of the model lies outside the three parts
    assert inventory_params(spec.blocks) == (sum(p.numel() for p in model.parameters())
                                             + sum(b.numel() for k, b in model.named_buffers() if k in state))


def test_causal_half_is_half_the_eager_square(models):
    """GLM LMs have no sliding-window layers: --causal half bills half the square the eager kernel computes."""
    m = measure_family("glm4v", model=models["glm4v"], image_sizes=[(30, 50)], text_len=8)
    spec = spec_from_config(models["glm4v"].config.to_dict(), name="tiny")
    stats = BatchStats.from_batch(seq_lens=[m.media["seq_len"]], image_grids=m.media["image_grids"], spec=spec)
    full = compute_flops(spec, stats, mode="forward", causal="full").components["lm.attn_core"]
    half = compute_flops(spec, stats, mode="forward", causal="half").components["lm.attn_core"]
    s = m.media["seq_len"]
    assert full == 2 * 2 * 2 * 64 * s * s  # 2 layers x (QK^T + AV) x 2 FLOPs x q width 64 x S^2
    assert half == full / 2


@settings(derandomize=True, deadline=None, max_examples=8)
@given(vbias=st.booleans(), patch_merge=st.sampled_from([(2, 2), (4, 1), (2, 3)]), tp=st.sampled_from([1, 2]),
       moe=st.booleans(), first_dense=st.integers(0, 2), shared=st.integers(1, 2), head_dim=st.sampled_from([None, 32]),
       image=st.tuples(st.integers(5, 90), st.integers(5, 90)), training=st.booleans(), frozen_tower=st.booleans())
def test_config_switches_per_part(vbias, patch_merge, tp, moe, first_dense, shared, head_dim, image, training,
                                  frozen_tower):
    """Seeded fuzz over the switches that change shapes: vision qkv bias, patch / merge size, temporal patch,
    dense vs MoE LM, first dense layers, shared experts, explicit head_dim; forward or training."""
    patch, merge = patch_merge
    vision = dict(attention_bias=vbias, patch_size=patch, spatial_merge_size=merge, temporal_patch_size=tp,
                  image_size=4 * patch)
    text = dict(first_k_dense_replace=first_dense, n_shared_experts=shared) if moe else {}
    if moe and head_dim:  # M-RoPE sections must cover head_dim * partial_rotary_factor / 2 = 8
        text.update(head_dim=head_dim, rope_parameters={"rope_type": "default", "rope_theta": 10000.0,
                                                        "mrope_section": [2, 2, 4], "partial_rotary_factor": 0.5})
    model = build_model(tiny_config(moe=moe, vision=vision, text=text), 0)
    mode = "training" if training else "forward"
    frozen = ("vision_tower",) if training and frozen_tower else ()
    m = measure_family("glm4v_moe" if moe else "glm4v", model=model, image_sizes=[image], text_len=8, mode=mode,
                       frozen=frozen)
    lib = library_parts(model, m.media, mode=mode, frozen=frozen)
    assert m.parts(mode) == {k: int(v) for k, v in lib.items()}, (m.media, frozen)
