"""Kimi-VL (remote code, not in transformers 5.24): preset against the published total, hand arithmetic of the
tower / projector FLOPs from the cited source lines, FlopCounterMode on an independent re-implementation of
MoonViT + projector (forward, training, frozen tower), and the image rule (hand cases + a seeded, bounded
fuzz against vLLM's token-count formula restated here: the remote processor cannot be imported).

Source lines (vllm-project/vllm @ 97d4c384 ``vllm/model_executor/models/moonvit.py``; @ 0322cc0e
``vllm/model_executor/models/kimi_vl.py``):
* ``MoonVisionPatchEmbed``: ``nn.Conv2d(in_dim, out_dim, kernel_size=patch_size, stride=patch_size)`` (bias);
* ``MoonVitEncoderLayer``: ``wqkv = Linear(hidden_dim, hidden_dim * 3, bias=attn_bias)``, ``wo = Linear(hidden_dim,
  hidden_dim)``, ``MLP2([hidden_dim, mlp_dim, hidden_dim])`` (fc0, fc1 with bias), two LayerNorms;
* ``MoonVitEncoder``: ``cu_seqlens`` = cumulative ``grid_hws[:, 0] * grid_hws[:, 1]`` (one sequence per image);
* ``KimiVLMultiModalProjector``: ``pre_norm = LayerNorm(vision hidden)``, ``linear_1 = Linear(4 h_v, 4 h_v)``,
  ``linear_2 = Linear(4 h_v, text hidden)``;
* ``KimiVLProcessingInfo.get_num_image_tokens``: scale by sqrt(limit / ((W//p)(H//p))) when over the limit,
  pad to a multiple of k p, tokens = (H'/kp)(W'/kp).
"""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import given, settings, strategies as st

from vlm_perf.arch import load_model, preset_config, spec_from_config
from vlm_perf.arch.families import FAMILIES
from vlm_perf.arch.params import count_params, total_params
from vlm_perf.errors import ConfigError, UnsupportedModelError
from vlm_perf.flops import compute_flops
from vlm_perf.stats import BatchStats

RULE = FAMILIES["kimi_vl"].media


def test_preset_total_equals_published():
    spec = load_model("kimi-vl-a3b-instruct")
    c = count_params(spec)
    # hand count from the cited modules, Kimi-VL-A3B dims (h_v 1152, i_v 4304, 27 layers, 64x64 table)
    layer = 2 * 2 * 1152 + (1152 * 3456 + 3456) + (1152 * 1152 + 1152) + (1152 * 4304 + 4304) + (4304 * 1152 + 1152)
    tower = (588 * 1152 + 1152) + 64 * 64 * 1152 + 27 * layer + 2 * 1152
    assert c.vision_tower == tower == 416_866_032
    assert c.merger == 2 * 1152 + (4608 * 4608 + 4608) + (4608 * 2048 + 2048) == 30_679_808
    total = total_params(spec)
    assert total == 16_407_656_048
    assert round(total / 1e8) * 1e8 == pytest.approx(16.4e9)  # hub: moonshotai/Kimi-VL-A3B-Instruct 16.4B params
    assert spec.lm.num_mtp_layers == 0 and spec.lm.mla is not None and spec.lm.mla.q_lora_rank is None


def test_lm_matches_transformers_deepseek_v3_on_meta():
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    text = {k: v for k, v in preset_config("kimi-vl-a3b-instruct")["text_config"].items() if k != "architectures"}
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(transformers.AutoConfig.for_model(**text))
    c = count_params(load_model("kimi-vl-a3b-instruct"))
    # transformers registers e_score_correction_bias as a buffer; the checkpoint (remote code: a Parameter) stores it
    stored = sum(p.numel() for p in model.parameters()) + sum(
        b.numel() for n, b in model.named_buffers() if n.endswith("e_score_correction_bias"))
    assert c.lm_embedding + c.lm_layers + c.lm_final_norm + c.lm_head == stored


def _stats(grids, lm_tokens=0):
    return BatchStats(vision_patches=sum(h * w for h, w in grids),
                      vision_patches_sq_frame=sum((h * w) ** 2 for h, w in grids),
                      vision_merged_tokens=sum((h // 2) * (w // 2) for h, w in grids),
                      vision_frames=len(grids), vision_items=len(grids), lm_tokens=lm_tokens,
                      lm_tokens_sq=lm_tokens * lm_tokens, lm_sequences=1 if lm_tokens else 0)


def test_forward_flops_by_hand():
    spec = load_model("kimi-vl-a3b-instruct")
    grids = [(28, 40), (16, 16)]  # two images: one attention sequence each
    n = [h * w for h, w in grids]
    b = compute_flops(spec, _stats(grids), mode="forward")
    patch = 2 * sum(n) * 588 * 1152
    per_layer = 2 * sum(n) * (1152 * 3456 + 1152 * 1152 + 2 * 1152 * 4304) + 4 * 1152 * sum(x * x for x in n)
    assert b.parts["vision_tower"] == patch + 27 * per_layer
    merged = sum(x // 4 for x in n)
    assert b.parts["projector"] == 2 * merged * (4608 * 4608 + 4608 * 2048)


# ------------------------------------------------------------------- independent MoonViT re-implementation

TINY = {"model_type": "kimi_vl", "tie_word_embeddings": False,
        "vision_config": {"model_type": "moonvit", "hidden_size": 32, "num_attention_heads": 4,
                          "intermediate_size": 48, "num_hidden_layers": 2, "patch_size": 14,
                          "init_pos_emb_height": 4, "init_pos_emb_width": 4, "merge_kernel_size": [2, 2]},
        "text_config": {"model_type": "deepseek_v3", "hidden_size": 24, "intermediate_size": 40,
                        "moe_intermediate_size": 8, "num_hidden_layers": 2, "num_attention_heads": 2,
                        "num_key_value_heads": 2, "vocab_size": 64, "kv_lora_rank": 8, "q_lora_rank": None,
                        "qk_nope_head_dim": 8, "qk_rope_head_dim": 4, "v_head_dim": 8, "n_shared_experts": 1,
                        "n_routed_experts": 4, "num_experts_per_tok": 2, "first_k_dense_replace": 1,
                        "moe_layer_freq": 1, "topk_method": "noaux_tc", "tie_word_embeddings": False}}


def _tiny_tower(torch):
    """MoonViT + Kimi-VL projector written from the maths above (not the remote code): per image, a patch conv,
    the bicubically interpolated position table, pre-norm layers with 2D-rotated q/k and attention over that
    image only, a final LayerNorm, then LayerNorm -> 2x2 fold -> Linear -> GELU -> Linear."""
    nn, F = torch.nn, torch.nn.functional
    h, heads, i, layers, out = 32, 4, 48, 2, 24

    class Layer(nn.Module):
        def __init__(self):
            super().__init__()
            self.n0, self.n1 = nn.LayerNorm(h), nn.LayerNorm(h)
            self.qkv, self.o = nn.Linear(h, 3 * h), nn.Linear(h, h)
            self.fc0, self.fc1 = nn.Linear(h, i), nn.Linear(i, h)

        def forward(self, x, lengths, cos, sin):
            q, k, v = self.qkv(self.n0(x)).view(-1, 3, heads, h // heads).unbind(1)
            q, k = (t * cos + torch.stack((-t[..., 1::2], t[..., ::2]), -1).flatten(-2) * sin for t in (q, k))
            outs = []
            for qs, ks, vs in zip(q.split(lengths), k.split(lengths), v.split(lengths)):
                a = torch.softmax(qs.transpose(0, 1) @ ks.permute(1, 2, 0) / math.sqrt(h // heads), -1)
                outs.append((a @ vs.transpose(0, 1)).transpose(0, 1).reshape(-1, h))
            x = x + self.o(torch.cat(outs))
            return x + self.fc1(F.gelu(self.fc0(self.n1(x)), approximate="tanh"))

    class Tower(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(3, h, 14, 14)
            self.table = nn.Parameter(torch.randn(4, 4, h))
            self.layers = nn.ModuleList(Layer() for _ in range(layers))
            self.final = nn.LayerNorm(h)
            self.pre, self.l1, self.l2 = nn.LayerNorm(h), nn.Linear(4 * h, 4 * h), nn.Linear(4 * h, out)

        def tower(self, images):
            xs, cos, sin, lengths = [], [], [], []
            for img in images:
                gh, gw = img.shape[1] // 14, img.shape[2] // 14
                x = self.conv(img[None])[0].permute(1, 2, 0)
                pos = F.interpolate(self.table.permute(2, 0, 1)[None], size=(gh, gw), mode="bicubic")[0]
                xs.append((x + pos.permute(1, 2, 0)).reshape(-1, h))
                yy, xx = torch.meshgrid(torch.arange(gh), torch.arange(gw), indexing="ij")
                freq = 1.0 / 10000 ** (torch.arange(0, h // heads, 4) / (h // heads))
                ang = torch.stack((yy.reshape(-1, 1) * freq, xx.reshape(-1, 1) * freq), -1).flatten(1)
                cos.append(ang.cos().repeat_interleave(2, -1)[:, None])
                sin.append(ang.sin().repeat_interleave(2, -1)[:, None])
                lengths.append(gh * gw)
            x, c, s = torch.cat(xs), torch.cat(cos), torch.cat(sin)
            for layer in self.layers:
                x = layer(x, lengths, c, s)
            return self.final(x), [(img.shape[1] // 14, img.shape[2] // 14) for img in images]

        def project(self, x, grids):
            folded, start = [], 0
            for gh, gw in grids:
                seq = self.pre(x[start:start + gh * gw]).view(gh // 2, 2, gw // 2, 2, h)
                folded.append(seq.permute(0, 2, 1, 3, 4).reshape(-1, 4 * h))
                start += gh * gw
            return self.l2(F.gelu(self.l1(torch.cat(folded))))

    return Tower()


def _measure(torch, model, images, train: bool, frozen_tower: bool = False):
    from torch.utils.flop_counter import FlopCounterMode

    for p in [*model.conv.parameters(), model.table, *model.layers.parameters(), *model.final.parameters()]:
        p.requires_grad_(not frozen_tower)
    with FlopCounterMode(display=False) as fc_tower:
        x, grids = model.tower(images)
    with FlopCounterMode(display=False) as fc_proj:
        y = model.project(x, grids)
    tower, proj = fc_tower.get_total_flops(), fc_proj.get_total_flops()
    if train:
        with FlopCounterMode(display=False) as fc_back:
            y.sum().backward()
        # backward: split by which module's GEMMs ran (projector first in the backward order)
        counts = fc_back.get_flop_counts()
        back = fc_back.get_total_flops()
        return tower, proj, back, counts
    return tower, proj, 0, {}


@pytest.mark.parametrize("sizes", [[(56, 84)], [(56, 84), (28, 28), (112, 56)]])
def test_flop_counter_on_reimplementation(sizes):
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    model = _tiny_tower(torch)
    spec = spec_from_config(TINY)
    images = [torch.randn(3, hh, ww) for hh, ww in sizes]
    grids = [(hh // 14, ww // 14) for hh, ww in sizes]
    tower, proj, _, _ = _measure(torch, model, images, train=False)
    fwd = compute_flops(spec, _stats(grids), mode="forward").parts
    assert fwd["vision_tower"] == tower
    assert fwd["projector"] == proj
    # training, everything trainable: backward = 2x forward except the patch conv's input gradient (pixels)
    model.zero_grad()
    tower, proj, back, _ = _measure(torch, model, images, train=True)
    tr = compute_flops(spec, _stats(grids), mode="training").parts
    assert tr["vision_tower"] + tr["projector"] == tower + proj + back
    # frozen tower: the projector still pays linear_1's input gradient (its LayerNorm has weights)
    model.zero_grad()
    tower, proj, back, _ = _measure(torch, model, images, train=True, frozen_tower=True)
    fr = compute_flops(spec, _stats(grids), mode="training", frozen=("vision_tower",)).parts
    assert fr["vision_tower"] == tower
    assert fr["projector"] == proj + back


def test_tiny_params_match_reimplementation():
    torch = pytest.importorskip("torch")
    model = _tiny_tower(torch)
    c = count_params(spec_from_config(TINY))
    proj = sum(p.numel() for m in (model.pre, model.l1, model.l2) for p in m.parameters())
    assert c.merger == proj
    assert c.vision_tower == sum(p.numel() for p in model.parameters()) - proj


# ------------------------------------------------------------------- image rule


# Kimi-VL-A3B-Instruct's preprocessor_config.json (the checkpoint's file)
CHECKPOINT_FILE = {"patch_size": 14, "in_token_limit": 4096, "pad_input": True, "merge_kernel_size": [2, 2]}


def _spec(**pre):
    """The preset's config with the checkpoint's processor file, ``pre`` overriding its keys."""
    return spec_from_config(preset_config("kimi-vl-a3b-instruct"),
                            processor={"preprocessor_config.json": {**CHECKPOINT_FILE, **pre}})


@pytest.mark.parametrize("size,resized", [((1080, 1920), (672, 1204)), ((100, 100), (112, 112)),
                                          ((28, 28), (28, 28)), ((896, 896), (896, 896))])
def test_image_by_hand(size, resized):
    # 1080x1920: (1920//14)(1080//14) = 137*77 = 10549 > 4096: both sides scaled by sqrt(4096/10549), truncated,
    # then padded up to multiples of 28; 100 -> 112 (4 x 28); 28 and 896 (32 x 28) unchanged
    m = RULE.image(_spec(), *size)
    s = math.sqrt(4096 / (137 * 77))
    assert (int(1080 * s), int(1920 * s)) == (672, 1196)  # 1196 -> 1204 = 43 x 28
    assert m.resized == resized
    assert m.grid == (1, resized[0] // 14, resized[1] // 14)
    assert m.visual_tokens == (resized[0] // 28) * (resized[1] // 28)


def _vllm_sides(h: int, w: int, limit: int, p: int = 14, k: int = 2) -> tuple[int, int]:
    """vLLM's KimiVLProcessingInfo.get_num_image_tokens, restated: padded sides in merged tokens."""
    if (w // p) * (h // p) > limit:
        scale = math.sqrt(limit / ((w // p) * (h // p)))
        w, h = int(w * scale), int(h * scale)
    ph = (k * p - h % (k * p)) % (k * p)
    pw = (k * p - w % (k * p)) % (k * p)
    return (h + ph) // (k * p), (w + pw) // (k * p)


@settings(derandomize=True, deadline=None, max_examples=200)
@given(h=st.integers(1, 6000), w=st.integers(1, 6000), limit=st.sampled_from([1024, 4096, 16384]))
def test_image_fuzz_against_vllm_formula(h, w, limit):
    try:
        m = RULE.image(_spec(in_token_limit=limit), h, w)
    except UnsupportedModelError:
        assert max(_vllm_sides(h, w, limit)) * 2 >= 512  # the processor's "Exceed pos emb"
        return
    rows, cols = _vllm_sides(h, w, limit)
    assert m.visual_tokens == rows * cols
    assert m.grid[1] * m.grid[2] == 4 * m.visual_tokens


def test_refusals():
    spec = _spec()
    with pytest.raises(UnsupportedModelError, match="images only"):
        RULE.video(spec, 8, 448, 448)
    with pytest.raises(UnsupportedModelError, match="2D RoPE"):
        RULE.image(spec, 10, 8000)  # 1 x 572 patches: a side >= 512
    with pytest.raises(UnsupportedModelError, match="cropped"):
        RULE.image(_spec(pad_input=False), 20, 20)
    cfg = preset_config("kimi-vl-a3b-instruct")
    cfg["vision_config"]["merge_kernel_size"] = [2, 3]
    with pytest.raises(UnsupportedModelError, match="merge_kernel_size"):
        spec_from_config(cfg)
    cfg = preset_config("kimi-vl-a3b-instruct")
    del cfg["vision_config"]["hidden_size"]
    with pytest.raises(ConfigError, match="vision_config.hidden_size"):
        spec_from_config(cfg)
    cfg = preset_config("kimi-vl-a3b-instruct")
    cfg["text_config"]["model_type"] = "qwen2"
    with pytest.raises(UnsupportedModelError, match="deepseek_v3"):
        spec_from_config(cfg)


# ------------------------------------------------- no processor file: the class defaults


def test_no_processor_file_uses_the_class_defaults_which_crop(tmp_path):
    # KimiVLImageProcessor() (hub remote code; transformers 5.24 has no Kimi-VL class): pad_input False, so each
    # side is centre-cropped DOWN to a multiple of 2 x 14 = 28: 100 -> 84 (3 x 28), 1000 -> 980 (35 x 28)
    (tmp_path / "config.json").write_text(json.dumps(preset_config("kimi-vl-a3b-instruct")))
    spec = load_model(tmp_path)
    assert spec.processor == {}
    s = RULE.settings(spec)
    assert (s["patch_size"], s["in_token_limit"], s["pad_input"], s["merge_kernel_size"]) == (14, 4096, False, [2, 2])
    assert "KimiVLImageProcessor class defaults" in s["source"] and "transformers 5.24" in s["source"]
    m = RULE.image(spec, 100, 1000)
    assert m.resized == (84, 980)
    assert m.grid == (1, 6, 70)
    assert m.visual_tokens == 3 * 35
    # 1080x1920 scales to 672x1196 (see test_image_by_hand), then crops to 672x1176 (42 x 28)
    assert RULE.image(spec, 1080, 1920).resized == (672, 1176)
    with pytest.raises(UnsupportedModelError, match="cropped"):
        RULE.image(spec, 20, 20)


def test_a_key_the_file_omits_takes_the_class_default():
    spec = spec_from_config(preset_config("kimi-vl-a3b-instruct"),
                            processor={"preprocessor_config.json": {"in_token_limit": 1024}})
    s = RULE.settings(spec)
    assert (s["in_token_limit"], s["pad_input"]) == (1024, False)
    assert s["source"].startswith("processor files; patch_size, pad_input, merge_kernel_size: KimiVLImageProcessor")
    assert RULE.image(spec, 100, 100).resized == (84, 84)


def test_the_preset_uses_its_checkpoints_file():
    spec = load_model("kimi-vl-a3b-instruct")
    s = RULE.settings(spec)
    assert s["pad_input"] is True and "preprocessor_config.json" in s["source"]
    assert RULE.image(spec, 100, 100).resized == (112, 112)
