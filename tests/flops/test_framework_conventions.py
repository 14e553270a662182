"""Named conventions against the frameworks' own FLOPs functions (where they import on CPU) and against hand
arithmetic written from the cited source lines (where they do not).

The frameworks' FLOPs modules are read from the pinned release (``verl`` 0.9.0, whose flops_counter.py equals main
1dda039b9c63; ``veomni`` 0.1.12; ``nemo_automodel`` 0.7.0): from the installed package when its version is the
pinned one, else from the pinned wheel that ``python dev.py test`` downloads (``pip download --no-deps``, about
7 MB, into ``.venv/framework-wheels``; nothing is installed: veRL's wheel ships top-level ``tests`` and ``scripts``
packages that would shadow this repository's). Each module is loaded on its own by path, its imports of the rest of
its package stubbed (named in each fixture). Without either source the tests skip; the recorded outputs of
tests/flops/test_framework_record.py still run.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import sys
import types
import zipfile
from pathlib import Path

import pytest

from vlm_perf.arch import load_model
from vlm_perf.arch.presets_loader import preset_config
from vlm_perf.errors import ConventionNotDefined
from vlm_perf.flops import compute_flops
from vlm_perf.stats import BatchStats

ROOT = Path(__file__).resolve().parents[2]


def _pinned() -> dict[str, str]:
    """package -> pinned version, from dev.py's FRAMEWORK_WHEELS (what ``python dev.py test`` downloads)."""
    spec = importlib.util.spec_from_file_location("_vlm_perf_dev", ROOT / "dev.py")
    dev = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(dev)
    return dict(pin.split("==") for pin in dev.FRAMEWORK_WHEELS)


PINNED = _pinned()


def framework_file(package: str, relpath: str, tmp_path_factory) -> Path:
    """``relpath`` (inside the package) of the pinned release: the installed package when its version matches
    (unless VLM_PERF_FRAMEWORK_SOURCE=wheel), else the pinned wheel's copy, extracted to a scratch folder."""
    version = PINNED[package]
    if os.environ.get("VLM_PERF_FRAMEWORK_SOURCE") != "wheel":
        try:
            installed = importlib.metadata.version(package.replace("_", "-"))
        except importlib.metadata.PackageNotFoundError:
            installed = None
        spec = importlib.util.find_spec(package) if installed == version else None
        if spec is not None and spec.submodule_search_locations:
            return Path(spec.submodule_search_locations[0]) / relpath
    folder = Path(os.environ.get("VLM_PERF_FRAMEWORK_WHEELS", ROOT / ".venv" / "framework-wheels"))
    wheel = folder / f"{package}-{version}-py3-none-any.whl"
    if not wheel.is_file():
        pytest.skip(f"{package} {version} neither installed nor downloaded (python dev.py test fetches {wheel.name})")
    out = tmp_path_factory.mktemp(f"{package}-wheel") / relpath
    out.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(wheel) as z:
        out.write_bytes(z.read(f"{package}/{relpath}"))
    return out


def load_path(name: str, path: Path, stubs: dict[str, types.ModuleType]):
    """Execute the file at ``path`` as module ``name`` with ``stubs`` in sys.modules for the duration."""
    mod_spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(mod_spec)
    stubs = {**stubs, name: module}  # dataclasses look their module up while the class is built
    saved = {k: sys.modules.get(k) for k in stubs}
    sys.modules.update(stubs)
    try:
        mod_spec.loader.exec_module(module)
    finally:
        for k, v in saved.items():
            if v is None:
                sys.modules.pop(k, None)
            else:
                sys.modules[k] = v
    return module


@pytest.fixture(scope="module")
def verl_counter(tmp_path_factory):
    pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    path = framework_file("verl", "utils/flops_counter.py", tmp_path_factory)
    import torch

    stubs = {"verl": types.ModuleType("verl"), "verl.utils": types.ModuleType("verl.utils"),
             "verl.utils.device": types.ModuleType("verl.utils.device")}
    stubs["verl.utils.device"].get_torch_device = lambda: torch.cpu  # type: ignore[attr-defined]
    module = load_path("_verl_flops_counter", path, stubs)

    def run(preset: str, seq_lens: list[int], grids=()) -> float:
        """veRL's FLOPs (TFLOP for dt = 1 s) for a batch of documents and image grids."""
        cfg = dict(preset_config(preset))
        config = transformers.AutoConfig.for_model(**cfg)
        images = [h * w for t, h, w in grids for _ in range(t)] or None
        kwargs = {"images_seqlens": images} if images else {}
        return module.FlopsCounter(config).estimate_flops(seq_lens, 1.0, **kwargs)[0]

    return run


def _ours(preset: str, seq_lens, grids=(), convention="verl") -> float:
    spec = load_model(preset)
    stats = BatchStats.from_batch(seq_lens=list(seq_lens), image_grids=list(grids), spec=spec)
    return compute_flops(spec, stats, convention).total / 1e12


VERL_CASES = [
    ("qwen3-vl-4b", [512, 1024, 2048], [(1, 16, 32), (1, 32, 32), (1, 32, 64)]),  # head_dim: 2560 // 32 = 80
    ("qwen3-vl-8b", [4096] * 3, [(1, 64, 64)] * 3),
    ("qwen3-vl-32b", [3000, 1096], [(2, 36, 64)]),
    ("qwen3-vl-30b-a3b", [4096, 777], [(1, 32, 48)]),
    ("qwen2.5-vl-7b", [2048, 2048], [(1, 28, 40), (1, 16, 16)]),
    ("qwen3-30b-a3b", [4096, 1280], []),
    ("llama3-8b", [8192], []),
    ("deepseek-v3", [4096, 2048], []),
    ("qwen3.5-35b-a3b", [4096, 1000], [(1, 32, 32)]),
    ("qwen3.5-397b-a17b", [2048], []),
]


@pytest.mark.parametrize("preset,seq_lens,grids", VERL_CASES, ids=[c[0] for c in VERL_CASES])
def test_verl_matches_verls_own_function(verl_counter, preset, seq_lens, grids):
    assert _ours(preset, seq_lens, grids) == pytest.approx(verl_counter(preset, seq_lens, grids), rel=1e-12)


def test_verl_qwen2_vl_refused_with_the_reason(verl_counter):
    with pytest.raises(ConventionNotDefined, match="out_hidden_size"):
        _ours("qwen2-vl-7b", [1024], [(1, 16, 16)])
    with pytest.raises(AttributeError):  # what veRL itself does on that config
        verl_counter("qwen2-vl-7b", [1024], [(1, 16, 16)])


def test_verl_glm41v_refused_as_verl_raises_on_the_nested_config(verl_counter):
    # ESTIMATE_FUNC["glm4v"] = _estimate_qwen2_flops reads config.hidden_size; Glm4vConfig nests it in text_config
    with pytest.raises(AttributeError, match="hidden_size"):  # what veRL itself does (main 1dda039b9c63 / v0.9.0)
        verl_counter("glm-4.1v-9b-thinking", [1024], [(1, 16, 16)])
    for convention in ("verl", "verl@v0.7.1"):
        with pytest.raises(ConventionNotDefined, match="AttributeError"):
            _ours("glm-4.1v-9b-thinking", [1024], [(1, 16, 16)], convention)


# --------------------------------------------------------------------------------- hand arithmetic


def test_verl_qwen3_vl_head_dim_is_derived_by_hand():
    # verl/utils/flops_counter.py _estimate_qwen3_vl_flops: head_dim = hidden_size // num_attention_heads
    h, H, G, L, F, V, s = 2560, 32, 8, 36, 9728, 151936, 4096  # Qwen3-VL-4B text_config
    d = h // H
    dense = (3 * h * F + h * (H * d + 2 * G * d + H * d)) * L + 2 * V * h
    hand = 6 * dense * s + 6 * s * s * d * H * L
    assert _ours("qwen3-vl-4b", [s]) * 1e12 == pytest.approx(hand, rel=1e-12)
    # the config's head_dim (128) would give 1.12x as much
    assert hand < compute_flops(load_model("qwen3-vl-4b"), BatchStats.from_batch(seq_lens=[s]), "megatron-lm").total


def test_verl_v071_counts_qwen25_vl_text_only():
    # v0.7.1 ESTIMATE_FUNC: "qwen2_5_vl": _estimate_qwen2_flops (no ViT term)
    spec = load_model("qwen2.5-vl-7b")
    with_images = BatchStats.from_batch(seq_lens=[2048], image_grids=[(1, 32, 32)], spec=spec)
    old = compute_flops(spec, with_images, "verl@v0.7.1")
    assert old.vision == 0
    assert old.language == compute_flops(spec, with_images, "verl").language
    assert compute_flops(spec, with_images, "verl").vision > 0


def test_pr2575_text_only_keeps_the_configured_length():
    # PR #2575 moved VLMs to runtime lengths; text-only models keep B x seq_length (2 rows of 4096 here)
    spec = load_model("qwen3-30b-a3b")
    packed = BatchStats.from_batch(seq_lens=[1000, 3096, 2000, 2096], padded_tokens=8192, samples=2)
    unpacked = BatchStats.from_batch(seq_len=4096, samples=2)
    assert compute_flops(spec, packed, "mbridge-pr2575").total == compute_flops(spec, unpacked, "megatron-lm").total
    assert compute_flops(spec, packed, "mbridge-pr2575").total > compute_flops(spec, packed, "megatron-lm").total


def test_pr2575_qwen25_vl_has_no_vision_term():
    # the PR's vision function returns 0 when vision_config has no num_position_embeddings (Qwen2.5-VL)
    spec = load_model("qwen2.5-vl-7b")
    assert not spec.vision.num_position_embeddings
    b = compute_flops(spec, BatchStats.from_batch(seq_lens=[2048], image_grids=[(1, 32, 32)], spec=spec),
                      "mbridge-pr2575")
    assert b.vision == 0 and b.language > 0


def test_pr2575_glm45v_by_hand_and_the_pr_heads_own_value():
    """Megatron-Bridge PR #2575 head efc3be64783e: GLM45VBridge.provider_bridge (src/megatron/bridge/models/glm_vl/
    glm_45v_bridge.py: moe_layer_freq [0] * first_k_dense_replace + [1] * rest, moe_shared_expert_intermediate_size
    = moe_intermediate_size, mtp_num_layers = 0) fed to flop_utils.num_floating_point_operations' transformer_flops
    (src/megatron/bridge/training/utils/flop_utils.py lines 296-552: vlm_step's runtime per-sample averages x
    batch_size, 12 = 3 x 2 x 2 expansion, SwiGLU x 3/2, causal S2 / 2h) + its vision function, which returns 0
    because Glm4vVisionConfig has no num_position_embeddings (lines 44-70)."""
    from fractions import Fraction as Fr

    # GLM-4.5V text_config: 46 layers (first 1 dense), hidden 4096, 96 heads x 128, 8 kv groups, FFN 10944,
    # 128 experts of 1408 (top-8), 1 shared, vocab 151552 (a multiple of 128: no padding)
    L, h, H, G, d, F, Fe, k, V = 46, 4096, 96, 8, 128, 10944, 1408, 8, 151552
    docs = [3000, 1096]
    n = len(docs)  # vlm_step, packed: batch_size = sub-sequences, per-sample averages
    tokens = n * Fr(sum(docs), n)
    S2 = n * Fr(sum(x * x for x in docs), n)
    mlp = tokens * 12 * L * h * (F * Fr(3, 2) * Fr(1, L) + Fe * k * Fr(3, 2) * Fr(L - 1, L) + Fe * Fr(3, 2) * Fr(L - 1, L))
    attn = 12 * L * h * h * Fr(H * d, h) * ((1 + Fr(G, H)) * tokens + S2 / (2 * h))
    logits = tokens * 3 * 2 * h * V
    hand = mlp + attn + logits
    assert float(hand) == 348647457816576.0  # what the PR head's own function returned (the harness of
    # scripts/record_issue33_framework_values.py: cfg from GLM45VBridge's mapping, one 32x32 image), 2026-12-07
    spec = load_model("glm-4.5v")
    stats = BatchStats.from_batch(seq_lens=docs, image_grids=[(1, 32, 32)], spec=spec)
    got = compute_flops(spec, stats, "mbridge-pr2575")
    assert got.total == pytest.approx(float(hand), rel=1e-12)
    assert got.vision == 0


@pytest.mark.parametrize("convention", ["megatron-bridge", "mbridge-pr2575"])
def test_glm41v_refused_by_megatron_bridge_without_a_bridge(convention):
    spec = load_model("glm-4.1v-9b-thinking")
    with pytest.raises(ConventionNotDefined, match="Glm4vForConditionalGeneration"):
        compute_flops(spec, BatchStats.from_batch(seq_lens=[1024]), convention)


@pytest.mark.parametrize("convention", ["megatron-bridge", "mbridge-pr2575", "verl"])
def test_qwen2_vl_refused_by_frameworks_that_cannot_train_it(convention):
    spec = load_model("qwen2-vl-7b")
    with pytest.raises(ConventionNotDefined, match="qwen2_vl"):
        compute_flops(spec, BatchStats.from_batch(seq_lens=[1024]), convention)


def test_megatron_lm_dev_qwen35_vl_v2_vision_by_hand():
    # Megatron-LM PR #6173: 6P*C*Tp*Ps^2*hv + Lv*[6P*(3hv*qv + qv*hv + 2hv*iv) + 12qv*P2] + 6M*((m^2hv)^2 + m^2hv*dout)
    spec = load_model("qwen3.5-35b-a3b")
    v = spec.vision
    grids = [(1, 32, 32), (1, 16, 48)]
    P = sum(t * h * w for t, h, w in grids)
    P2 = sum(t * (h * w) ** 2 for t, h, w in grids)
    M = P // 4
    hv, qv, iv, Lv, vol, dout = v.hidden_size, v.num_heads * v.head_dim, v.intermediate_size, v.depth, \
        v.in_channels * v.temporal_patch_size * v.patch_size ** 2, v.out_hidden_size
    hand = 6 * P * vol * hv + Lv * (6 * P * (3 * hv * qv + qv * hv + 2 * hv * iv) + 12 * qv * P2) \
        + 6 * M * ((4 * hv) ** 2 + 4 * hv * dout)
    stats = BatchStats.from_batch(seq_lens=[4096], image_grids=grids, spec=spec)
    dev = compute_flops(spec, stats, "megatron-lm@dev-qwen35_vl_v2")
    main = compute_flops(spec, stats, "megatron-lm")
    assert dev.vision == hand
    assert dev.language == main.language and main.vision == 0
    # other VLMs: the variant is set by the Qwen3.5-VL factory only
    q3 = load_model("qwen3-vl-8b")
    s3 = BatchStats.from_batch(seq_lens=[4096], image_grids=grids, spec=q3)
    assert compute_flops(q3, s3, "megatron-lm@dev-qwen35_vl_v2").total == compute_flops(q3, s3, "megatron-lm").total


@pytest.mark.parametrize("preset", ["qwen3.5-35b-a3b", "qwen3.5-397b-a17b"])
def test_torchtitan_qwen35_moe_from_real_parameter_counts(preset):
    """torchtitan main b5bcd76c66d0, torchtitan/models/utils.py get_moe_model_nparams_and_flops (called by
    models/qwen3_5/model.py with head_dims = 2 * head_dim): every non-vision parameter is dense except the
    embedding (excluded, untied), the router and shared experts (active) and the routed experts (x top_k //
    num_experts); per token 6 * N + 6 * n_full * H * 2d * seq_len. Written here over transformers' own
    parameters (meta device), in transformers' module names."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    cfg = {k: v for k, v in preset_config(preset).items() if not k.startswith("_")}
    with torch.device("meta"):
        model = getattr(transformers, cfg["architectures"][0])(transformers.AutoConfig.for_model(**cfg))
    text = model.config.text_config
    dense = routed = 0
    for name, p in model.named_parameters():
        if ".visual." in f".{name}" or "embed_tokens" in name:
            continue
        if ".mlp.experts." in name:
            routed += p.numel()
        else:
            dense += p.numel()  # attention, delta-net, norms, router, shared expert (+ gate), lm_head
    n_active = dense + routed * text.num_experts_per_tok // text.num_experts
    n_full = sum(t == "full_attention" for t in text.layer_types)
    seq, rows = 4096, 2
    per_token = 6 * n_active + 6 * n_full * text.num_attention_heads * 2 * text.head_dim * seq
    spec = load_model(preset)
    got = compute_flops(spec, BatchStats.from_batch(seq_lens=[3000, 1096, 4096], padded_tokens=rows * seq,
                                                    samples=rows), "torchtitan")
    assert got.total == per_token * rows * seq
    assert got.vision == 0


# ------------------------------------------------------------------------------------------------ VeOmni


@pytest.fixture(scope="module")
def veomni_counter(tmp_path_factory):
    """VeOmni's ``veomni/utils/count_flops.py`` (0.1.12), loaded on its own with ``veomni/lora/config.py`` (its LoRA
    module lists and VeOmniLoraConfig, standard library only); stubbed: ``veomni.utils.logging`` (a stdlib logger
    with ``warning_rank0``) and ``veomni.utils.device.get_device_name`` (-> "CPU")."""
    import logging as _logging

    transformers = pytest.importorskip("transformers")
    path = framework_file("veomni", "utils/count_flops.py", tmp_path_factory)
    lora_path = framework_file("veomni", "lora/config.py", tmp_path_factory)
    log = _logging.getLogger("veomni-stub")
    log.warning_rank0 = log.warning  # type: ignore[attr-defined]
    names = ("veomni", "veomni.lora", "veomni.utils", "veomni.utils.logging", "veomni.utils.device")
    stubs = {n: types.ModuleType(n) for n in names}
    for n in ("veomni", "veomni.lora", "veomni.utils"):
        stubs[n].__path__ = []  # type: ignore[attr-defined]
    stubs["veomni.utils.logging"].get_logger = lambda name: log  # type: ignore[attr-defined]
    stubs["veomni.utils.device"].get_device_name = lambda: "CPU"  # type: ignore[attr-defined]
    stubs["veomni.utils"].logging = stubs["veomni.utils.logging"]  # type: ignore[attr-defined]
    lora_config = load_path("veomni.lora.config", lora_path, stubs)
    stubs["veomni.lora.config"] = lora_config
    module = load_path("veomni.utils.count_flops", path, stubs)

    def run(preset, seq_lens: list[int], grids=(), freeze_vit=None, lora_config=None) -> float:
        """``preset``: a preset name or a config dict."""
        cfg = dict(preset) if isinstance(preset, dict) else dict(preset_config(preset))
        config = transformers.AutoConfig.for_model(**cfg)
        images = [h * w for t, h, w in grids for _ in range(t)] or None
        counter = module.VeomniFlopsCounter(config)
        return counter.estimate_flops(seq_lens, 1.0, images_seqlens=images, freeze_vit=freeze_vit,
                                      lora_config=lora_config)[0]

    run.LoraConfig = lora_config.VeOmniLoraConfig  # type: ignore[attr-defined]
    return run


VEOMNI_CASES = [
    ("qwen3-vl-8b", [4096, 1000], [(1, 32, 32), (2, 16, 24)]),
    ("qwen3-vl-30b-a3b", [4096], [(1, 64, 64)]),
    ("qwen2.5-vl-7b", [2048, 2048], [(1, 28, 40), (1, 16, 16)]),
    ("qwen2-vl-7b", [3000], [(1, 36, 64)]),
    ("qwen3-30b-a3b", [4096, 1280], []),
    ("llama3-8b", [8192], []),
    ("deepseek-v3", [4096, 2048], []),  # _estimate_deepseek_v3_flops (issue 33)
    ("qwen3.5-35b-a3b", [4096, 1000], [(1, 32, 32), (2, 16, 24)]),  # _estimate_qwen3_5_family_flops
    ("qwen3.5-35b-a3b", [3000, 1096], []),
    ("qwen3.5-397b-a17b", [8192], [(1, 48, 48)]),
]


@pytest.mark.parametrize("preset,seq_lens,grids", VEOMNI_CASES, ids=[c[0] for c in VEOMNI_CASES])
def test_veomni_matches_veomnis_own_function(veomni_counter, preset, seq_lens, grids):
    assert _ours(preset, seq_lens, grids, "veomni") == pytest.approx(veomni_counter(preset, seq_lens, grids), rel=1e-12)


def test_veomni_dense_qwen3_5_matches_veomnis_own_function(veomni_counter):
    """Dense Qwen3.5 (no preset ships one): transformers' Qwen3_5Config defaults (32 layers, hidden 4096, 8 full-
    attention layers of 16 x 256 heads, 24 gated-delta layers, 27-layer ViT), the same VeOmni function as the MoE."""
    transformers = pytest.importorskip("transformers")
    cfg = transformers.AutoConfig.for_model("qwen3_5").to_dict()
    seq_lens, grids = [4096, 1000], [(1, 32, 32)]
    spec = load_model(cfg)
    assert spec.family == "qwen3_5" and spec.lm.moe is None
    stats = BatchStats.from_batch(seq_lens=seq_lens, image_grids=grids, spec=spec)
    ours = compute_flops(spec, stats, "veomni").total / 1e12
    assert ours == pytest.approx(veomni_counter(cfg, seq_lens, grids), rel=1e-12)


@pytest.mark.parametrize("preset", ["qwen3-vl-8b", "qwen2.5-vl-7b", "qwen3.5-35b-a3b"])
def test_veomni_freeze_vit(veomni_counter, preset):
    spec = load_model(preset)
    grids = [(1, 32, 32)]
    stats = BatchStats.from_batch(seq_lens=[2048], image_grids=grids, spec=spec)
    ours = compute_flops(spec, stats, "veomni", frozen=("vision_tower",)).total / 1e12
    assert ours == pytest.approx(veomni_counter(preset, [2048], grids, freeze_vit=True), rel=1e-12)


# ------------------------------------------------------------------------------------------------ NeMo Automodel


@pytest.fixture(scope="module")
def automodel_flops(tmp_path_factory):
    """NeMo Automodel's ``flops_utils.py`` (0.7.0; the module imports only the standard library), loaded by path."""
    transformers = pytest.importorskip("transformers")
    path = framework_file("nemo_automodel", "components/utils/flops_utils.py", tmp_path_factory)
    module = load_path("_automodel_flops_utils", path, {})

    def run(preset: str, rows: int, length: int) -> float:
        config = transformers.AutoConfig.for_model(**dict(preset_config(preset)))
        formula = module.get_flops_formula_for_hf_config(config)
        return formula(config, gbs=rows, seq_len=length)

    return run


@pytest.mark.parametrize("preset", ["qwen3-30b-a3b", "llama3-8b", "qwen3-vl-8b", "qwen3-vl-30b-a3b"])
def test_automodel_matches_automodels_own_function(automodel_flops, preset):
    spec = load_model(preset)
    stats = BatchStats.from_batch(seq_lens=[3000, 1096, 4096], padded_tokens=2 * 4096, samples=2,
                                  image_grids=[(1, 32, 32)] if spec.vision else [], spec=spec)
    ours = compute_flops(spec, stats, "automodel")
    assert ours.total == pytest.approx(automodel_flops(preset, 2, 4096), rel=1e-12)
    assert ours.vision == 0


def test_automodel_refuses_qwen25_vl():
    with pytest.raises(ConventionNotDefined, match="not computed"):
        _ours("qwen2.5-vl-7b", [1024], [(1, 16, 16)], "automodel")


# ------------------------------------------------------------------------------------------------ MaxText


def test_maxtext_gemma3_4b_lm_by_hand():
    # src/maxtext/utils/maxtext_utils.py @ e591f30cbbf2 with MaxText's gemma3-4b.yml: emb 2560, 8 q / 4 kv heads of
    # 256, mlp 10240 (gelu, linear), 34 layers, vocab 262_144, sliding window 1024, pattern length 6
    B, s, h, H, G, d, F, L, V, W = 2, 4096, 2560, 8, 4, 256, 10240, 34, 262_144, 1024
    qkv = 2 * B * s * h * (H + 2 * G) * d
    proj = 2 * B * s * h * H * d
    ffn = 2 * B * s * F * h * 2 + 2 * B * s * F * h
    emb = 2 * B * s * h * V
    n_global = L // 6
    core = n_global * 2 * B * s**2 * H * d + (L - n_global) * 4 * B * (s * W - 0.5 * W**2) * H * d
    lm = 3 * (ffn * L + (qkv + proj) * L + emb) + 3 * core
    spec = load_model("gemma3-4b")
    stats = BatchStats.from_batch(seq_lens=[1000, 3096, 4096], padded_tokens=B * s, samples=B, spec=spec)
    got = compute_flops(spec, stats, "maxtext")
    assert got.language == pytest.approx(lm, rel=1e-12)


def test_maxtext_gemma3_vision_per_image():
    # reference check values (B = 1, h = 2560, 896 px): trainable 16.386 TF, freeze_vision_encoder_params 5.4649 TF
    spec = load_model("gemma3-4b")
    stats = BatchStats.from_batch(seq_len=512, samples=1, spec=spec)  # no image: MaxText bills one anyway
    assert compute_flops(spec, stats, "maxtext").vision / 1e12 == pytest.approx(16.386, abs=5e-4)
    frozen = compute_flops(spec, stats, "maxtext", frozen=("vision_tower",)).vision / 1e12
    assert frozen == pytest.approx(5.4649, abs=5e-5)


@pytest.mark.parametrize("preset", ["qwen3.5-35b-a3b", "llama3-8b", "qwen3-30b-a3b"])
def test_torchtitan_pr4300_from_real_parameter_counts(preset):
    """torchtitan @ 01c01c88 (PR #4300): per token 6 * N_act + 6*H*(d+d)*s per softmax layer + 18*Hv*dk*dv per
    gated-delta layer; N_act from get_nparams_and_active_nparams' rule (embedding 0 when untied, routed experts x
    top_k / E as an exact fraction, vision 0), written over transformers' own parameters (meta device)."""
    from fractions import Fraction

    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    cfg = {k: v for k, v in preset_config(preset).items() if not k.startswith("_")}
    with torch.device("meta"):
        model = getattr(transformers, cfg["architectures"][0])(transformers.AutoConfig.for_model(**cfg))
    text = getattr(model.config, "text_config", model.config)
    active = Fraction(0)
    for name, p in model.named_parameters():
        if ".visual." in f".{name}" or "embed_tokens" in name:
            continue
        if ".mlp.experts." in name:
            active += Fraction(p.numel() * text.num_experts_per_tok, text.num_experts)
        else:
            active += p.numel()
    seq, rows = 4096, 2
    layer_types = getattr(text, "layer_types", None) or ["full_attention"] * text.num_hidden_layers
    d = getattr(text, "head_dim", None) or text.hidden_size // text.num_attention_heads
    per_token = 6 * active
    for t in layer_types:
        if t == "full_attention":
            per_token += 6 * text.num_attention_heads * 2 * d * seq
        else:
            per_token += 18 * text.linear_num_value_heads * text.linear_key_head_dim * text.linear_value_head_dim
    spec = load_model(preset)
    got = compute_flops(spec, BatchStats.from_batch(seq_lens=[3000, 1096, 4096], padded_tokens=rows * seq,
                                                    samples=rows), "torchtitan@pr4300")
    assert got.total == per_token * rows * seq


# ------------------------------------------------------------------------------------------------ VeOmni LoRA


def _veomni_lora(preset, seq_lens, grids, r, targets, bias="none"):
    """vlm-perf's ``veomni`` under a LoRA Trainability (the regime's adapter), in TFLOP."""
    from vlm_perf.arch.adapters import AdapterConfig
    from vlm_perf.arch.trainability import Trainability
    from vlm_perf.flops.conventions import get_convention

    spec = load_model(preset)
    stats = BatchStats.from_batch(seq_lens=list(seq_lens), image_grids=list(grids), spec=spec)
    regime = Trainability.build(adapter=AdapterConfig(r=r, target_modules=targets, bias=bias))
    return get_convention("veomni").compute_regime(spec, stats, regime).total / 1e12


VEOMNI_LORA_CASES = [
    ("qwen3-vl-8b", [4096, 1000], [(1, 32, 32), (2, 16, 24)], 16,
     ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"), "none"),  # ViT forward-only
    ("qwen3-vl-8b", [4096], [(1, 32, 32)], 8, ("q_proj", "v_proj", "qkv", "linear_fc1"), "none"),  # ViT + mergers
    ("qwen3-vl-8b", [2048], [(1, 16, 16)], 32, ("q_proj",), "all"),  # bias-only ViT: activation gradients
    ("qwen3-vl-30b-a3b", [4096], [(1, 64, 64)], 16, ("q_proj", "o_proj", "proj"), "none"),
    ("qwen2.5-vl-7b", [2048, 2048], [(1, 28, 40), (1, 16, 16)], 16, ("gate_proj", "up_proj", "down_proj", "mlp.0"),
     "none"),  # gate/up/down name both the LM MLP and the ViT MLP
    ("qwen2.5-vl-7b", [2048], [(1, 28, 40)], 8, ("q_proj",), "all"),
    ("qwen2-vl-7b", [3000], [(1, 36, 64)], 8, ("qkv", "fc1", "q_proj"), "none"),
    ("qwen3-30b-a3b", [4096, 1280], [], 16, ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj"), "none"),
]


@pytest.mark.parametrize("preset,seq_lens,grids,r,targets,bias", VEOMNI_LORA_CASES,
                         ids=[f"{c[0]}-{'+'.join(c[4])}-{c[5]}" for c in VEOMNI_LORA_CASES])
def test_veomni_lora_matches_veomnis_own_function(veomni_counter, preset, seq_lens, grids, r, targets, bias):
    theirs = veomni_counter(preset, seq_lens, grids,
                            lora_config=veomni_counter.LoraConfig(r=r, target_modules=list(targets), bias=bias))
    assert theirs > 0
    assert _veomni_lora(preset, seq_lens, grids, r, targets, bias) == pytest.approx(theirs, rel=1e-12)


@pytest.mark.parametrize("preset,targets", [("llama3-8b", ("q_proj",)), ("qwen3-30b-a3b", ".*q_proj"),
                                            ("qwen3-vl-8b", ("fc1",)), ("deepseek-v3", ("q_proj",))])
def test_veomni_lora_refused_where_veomni_prints_zero(veomni_counter, preset, targets):
    # estimate_flops: an unsupported model type, a regex target list or a module outside the model type's list
    # logs a warning and returns 0 FLOPs
    tm = targets if isinstance(targets, str) else list(targets)
    assert veomni_counter(preset, [1024], [], lora_config=veomni_counter.LoraConfig(r=8, target_modules=tm)) == 0
    with pytest.raises(ConventionNotDefined, match="0 FLOPs"):
        _veomni_lora(preset, [1024], [], 8, targets)


QWEN35_LORA_CASES = [
    ("qwen3.5-35b-a3b", [4096, 1000], [(1, 32, 32)], 16, ("q_proj", "k_proj", "v_proj", "o_proj"), "none"),
    ("qwen3.5-35b-a3b", [3000], [(1, 16, 24)], 8,
     ("in_proj_qkv", "in_proj_z", "in_proj_b", "in_proj_a", "out_proj", "gate_proj", "down_proj"), "none"),
    ("qwen3.5-35b-a3b", [2048], [(1, 32, 32), (2, 16, 16)], 8, ("q_proj", "qkv", "linear_fc1"), "none"),
    ("qwen3.5-397b-a17b", [2048], [(1, 16, 16)], 32, ("up_proj",), "all"),
]


@pytest.mark.parametrize("preset,seq_lens,grids,r,targets,bias", QWEN35_LORA_CASES,
                         ids=[f"{c[0]}-{'+'.join(c[4])}-{c[5]}" for c in QWEN35_LORA_CASES])
def test_veomni_lora_qwen3_5_matches_veomnis_own_function(veomni_counter, preset, seq_lens, grids, r, targets, bias):
    theirs = veomni_counter(preset, seq_lens, grids,
                            lora_config=veomni_counter.LoraConfig(r=r, target_modules=list(targets), bias=bias))
    assert theirs > 0
    assert _veomni_lora(preset, seq_lens, grids, r, targets, bias) == pytest.approx(theirs, rel=1e-12)


def test_veomni_lora_dense_qwen3_5_matches_veomnis_own_function(veomni_counter):
    from vlm_perf.arch.adapters import AdapterConfig
    from vlm_perf.arch.trainability import Trainability
    from vlm_perf.flops.conventions import get_convention

    transformers = pytest.importorskip("transformers")
    cfg = transformers.AutoConfig.for_model("qwen3_5").to_dict()
    targets = ("q_proj", "in_proj_z", "gate_proj", "down_proj", "proj")
    lora = veomni_counter.LoraConfig(r=16, target_modules=list(targets))
    theirs = veomni_counter(cfg, [4096], [(1, 32, 32)], lora_config=lora)
    spec = load_model(cfg)
    stats = BatchStats.from_batch(seq_lens=[4096], image_grids=[(1, 32, 32)], spec=spec)
    regime = Trainability.build(adapter=AdapterConfig(r=16, target_modules=targets))
    assert get_convention("veomni").compute_regime(spec, stats, regime).total / 1e12 == pytest.approx(theirs,
                                                                                                      rel=1e-12)


def test_veomni_lora_target_parameters_refused(veomni_counter):
    """Routed-expert LoRA (target_parameters): VeOmni counts it on MoE types (not reproduced here: refused with that
    reason), and prints 0 on dense types (refused as a 0)."""
    from vlm_perf.arch.adapters import AdapterConfig
    from vlm_perf.arch.trainability import Trainability
    from vlm_perf.flops.conventions import get_convention

    conv = get_convention("veomni")
    for preset, match in (("qwen3-30b-a3b", "does not reproduce yet"), ("qwen3.5-35b-a3b", "does not reproduce yet"),
                          ("qwen3-vl-8b", "0 FLOPs.*non-MoE")):
        spec = load_model(preset)
        regime = Trainability.build(adapter=AdapterConfig(r=8, target_modules=("q_proj",),
                                                          target_parameters=("mlp.experts.gate_up_proj",)))
        with pytest.raises(ConventionNotDefined, match=match):
            conv.compute_regime(spec, BatchStats.from_batch(seq_lens=[1024]), regime)
    lora = veomni_counter.LoraConfig(r=8, target_modules=["q_proj"], target_parameters=["mlp.experts.gate_up_proj"])
    assert veomni_counter("qwen3-vl-8b", [1024], [], lora_config=lora) == 0
    assert veomni_counter("qwen3-30b-a3b", [1024], [], lora_config=lora) > 0


def test_veomni_lora_moe_text_by_hand():
    # veomni/utils/count_flops.py @ 0.1.12 _compute_qwen3_moe_text_flops + _compute_linear_flops: base
    # (router hE + 3h*F_e*k + h(2q + 2kv)) * L + V*h at 4 per token (frozen base: forward + input gradient),
    # adapters r*(in + out) per targeted shape at 6 (q_proj: h -> q, L times), core 12*S2*d*H*L unchanged
    h, H, G, d, L, E, k, Fe, V = 2048, 32, 4, 128, 48, 128, 8, 768, 151936  # Qwen3-30B-A3B
    q, kv, r = H * d, G * d, 16
    S, S2 = 4096 + 1280, 4096**2 + 1280**2
    base = (h * E + 3 * h * Fe * k + h * (2 * q + 2 * kv)) * L + V * h
    hand = (4 * base + 6 * r * (h + q) * L) * S + 12 * S2 * d * H * L
    assert _veomni_lora("qwen3-30b-a3b", [4096, 1280], [], r, ("q_proj",)) * 1e12 == pytest.approx(hand, rel=1e-12)


def test_veomni_lora_qwen3_vit_by_hand():
    # _estimate_qwen3_vit_flop with a vision target: 2 * N_patch + 4 * (N - N_patch) + 6 * N_lora per patch, core
    # 12 * P2 * h_v * L_v; linear_fc1 names the block MLP's fc1 (h_v -> i_v, depth times) AND every merger's fc1
    # (m^2h_v -> m^2h_v, 1 + len(deepstack) times). The LM: the same base without adapters at 4, core 12.
    spec = load_model("qwen3-vl-8b")
    v, lm = spec.vision, spec.lm
    hv, iv, D, mv, dout = v.hidden_size, v.intermediate_size, v.depth, 4 * v.hidden_size, v.out_hidden_size
    n_merge = 1 + len(v.deepstack_visual_indexes)
    P, P2, r = 32 * 32, (32 * 32) ** 2, 8
    patch = hv * 3 * 2 * 16 * 16
    N = patch + (2 * hv * iv + 4 * hv * hv) * D + n_merge * (dout + mv) * mv
    lora = r * ((hv + iv) * D + (mv + mv) * n_merge)
    vit = 2 * patch * P + (4 * (N - patch) + 6 * lora) * P + 12 * P2 * hv * D
    h, H, G, d, L, F, Vocab = lm.hidden_size, lm.num_heads, lm.num_kv_heads, lm.head_dim, lm.num_layers, \
        lm.intermediate_size, lm.vocab_size
    S = 4096
    text = 4 * ((3 * h * F + h * (2 * H * d + 2 * G * d)) * L + Vocab * h) * S + 12 * S * S * d * H * L
    got = _veomni_lora("qwen3-vl-8b", [S], [(1, 32, 32)], r, ("linear_fc1",))
    assert got * 1e12 == pytest.approx(vit + text, rel=1e-12)


def test_veomni_regime_of_whole_parts_is_freeze_vit_and_finer_regimes_without_adapter_are_refused():
    from vlm_perf.arch.trainability import Trainability
    from vlm_perf.flops.conventions import get_convention

    spec = load_model("qwen3-vl-8b")
    stats = BatchStats.from_batch(seq_lens=[2048], image_grids=[(1, 32, 32)], spec=spec)
    conv = get_convention("veomni")
    assert conv.compute_regime(spec, stats, Trainability.from_frozen(("vision_tower",))).total == \
        compute_flops(spec, stats, "veomni", frozen=("vision_tower",)).total
    with pytest.raises(ConventionNotDefined, match="full fine-tuning, freeze_vit and LoRA"):
        conv.compute_regime(spec, stats, Trainability.build(trainable=("language_model[0:4]",)))
    with pytest.raises(ConventionNotDefined, match="finer than whole parts"):
        get_convention("verl").compute_regime(spec, stats, Trainability.build(trainable=("language_model[0:4]",)))


# ------------------------------------------------------------------------------------------------ torchtitan Qwen3-VL

# torchtitan's own get_moe_model_nparams_and_flops (torchtitan/models/utils.py) at each pin, called once from a
# mirror of pytorch/torchtitan as Qwen3VLModel.Config.get_nparams_and_flops calls it (the whole model, n_heads,
# 2 * head_dim, seq_len 4096; transformers' Qwen3-VL on the meta device, parameters renamed to torchtitan's names as
# its state_dict_adapter maps them; enable_weight_tying as its config registry sets it: 2B only), x 2 rows x 4096
# padded tokens (labels.numel()). Recorded 2026-12-07 by scripts/record_issue33_framework_values.py.
TITAN_QWEN3_VL_RECORDED = {
    ("qwen3-vl-2b", "torchtitan@qwen3-vl"): 127662198620160,
    ("qwen3-vl-2b", "torchtitan@qwen3-vl-pre3225"): 112367820079104,
    ("qwen3-vl-8b", "torchtitan@qwen3-vl"): 459706534723584,
    ("qwen3-vl-8b", "torchtitan@qwen3-vl-pre3225"): 459706534723584,
    ("qwen3-vl-30b-a3b", "torchtitan@qwen3-vl"): 255153533091840,
    ("qwen3-vl-30b-a3b", "torchtitan@qwen3-vl-pre3225"): 255153533091840,
}


@pytest.mark.slow
@pytest.mark.parametrize("preset,convention", sorted(TITAN_QWEN3_VL_RECORDED), ids=lambda x: str(x))
def test_torchtitan_qwen3_vl_bills_every_parameter_per_lm_token(preset, convention):
    """torchtitan models/qwen3_vl (PR #2409 .. #3371): per LM token 6 x every parameter whose torchtitan name lacks
    "embedding" (so the ViT, its pos_embed, the merger and the deepstack mergers are in), routed experts x top_k //
    E, + 6 * L * H * 2d * seq_len; a tied table (2B) counts once as the head from PR #3225 on, 0 before it. Written
    here over transformers' own parameters (meta device); images do not change the number."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    cfg = {k: v for k, v in preset_config(preset).items() if not k.startswith("_")}
    config = transformers.AutoConfig.for_model(**cfg)
    with torch.device("meta"):
        model = getattr(transformers, config.architectures[0])(config)
    text = config.text_config
    tied = bool(config.tie_word_embeddings)
    dense = routed = embedding = 0
    for name, p in model.named_parameters():  # a tied table appears once, as embed_tokens (registered first)
        if "embed_tokens" in name:
            embedding += p.numel()
        elif ".mlp.experts." in name:
            routed += p.numel()
        else:
            dense += p.numel()  # vision encoder + mergers, attention, norms, router, lm_head
    active = dense + (routed * text.num_experts_per_tok // text.num_experts if routed else 0)
    if tied and convention == "torchtitan@qwen3-vl":
        active += embedding
    seq, rows = 4096, 2
    per_token = 6 * active + 6 * text.num_hidden_layers * text.num_attention_heads * 2 * text.head_dim * seq
    assert per_token * rows * seq == TITAN_QWEN3_VL_RECORDED[(preset, convention)]
    spec = load_model(preset)
    for grids in ([(1, 32, 32)], [(2, 16, 24), (1, 64, 64)], []):
        stats = BatchStats.from_batch(seq_lens=[3000, 1096, 4096], padded_tokens=rows * seq, samples=rows,
                                      image_grids=grids, spec=spec)
        got = compute_flops(spec, stats, convention)
        assert got.total == per_token * rows * seq
        assert got.vision > 0  # the tower is billed per LM token, with or without images


def test_torchtitan_qwen3_vl_frozen_tower_still_billed_and_other_families_refused():
    spec = load_model("qwen3-vl-8b")
    stats = BatchStats.from_batch(seq_lens=[4096], image_grids=[(1, 32, 32)], spec=spec)
    full = compute_flops(spec, stats, "torchtitan@qwen3-vl")
    frozen = compute_flops(spec, stats, "torchtitan@qwen3-vl", frozen=("vision_tower",))
    assert frozen.total == full.total and any("frozen parts ignored" in n for n in frozen.notes)
    for preset in ("qwen2.5-vl-7b", "qwen3.5-35b-a3b", "llama3-8b"):
        with pytest.raises(ConventionNotDefined, match="no formula"):
            compute_flops(load_model(preset), BatchStats.from_batch(seq_lens=[1024]), "torchtitan@qwen3-vl")


def test_veomni_deepseek_v3_by_hand():
    """veomni/utils/count_flops.py @ 0.1.12 _estimate_deepseek_v3_flops, with DeepSeek-V3's config written out:
    per layer MLA (h*q_lora + H*d_qk*q_lora + h*(kv_lora + rope) + H*(d_qk - rope + d_v)*kv_lora + H*d_v*h),
    MoE layers router h*E + 3*h*F_e*(k + shared), the first 3 layers dense 3*h*F, lm_head V*h; 6 x that x S, plus
    12 * sum(s^2) * L * d_qk * H (d_qk = 128 + 64 for both products; no causal half); no MTP."""
    h, V, L, k_dense, H = 7168, 129280, 61, 3, 128
    q_lora, kv_lora, nope, rope, dv = 1536, 512, 128, 64, 128
    Fe, E, k, shared, F = 2048, 256, 8, 1, 18432
    dqk = nope + rope
    attn = h * q_lora + H * dqk * q_lora + h * (kv_lora + rope) + H * (dqk - rope + dv) * kv_lora + H * dv * h
    n = (h * E + 3 * h * Fe * (k + shared) + attn) * (L - k_dense) + (3 * h * F + attn) * k_dense + V * h
    seqs = [4096, 2048]
    hand = 6 * n * sum(seqs) + 12 * sum(s * s for s in seqs) * L * dqk * H
    assert _ours("deepseek-v3", seqs, (), "veomni") * 1e12 == pytest.approx(hand, rel=1e-12)
