"""Nemotron-H hybrid LM and the Mamba-2 block kind.

* Parameters: the inventory equals transformers' ``NemotronHForCausalLM`` on the meta device (several patterns).
* FLOPs of one Mamba-2 layer: ``FlopCounterMode`` on an independent re-implementation written here from the
  SSD maths (Dao & Gu 2024, "Transformers are SSMs", section 6: the chunked algorithm's four products), not
  from transformers' code: forward and forward + backward; plus hand arithmetic at Nemotron-Nano-12B-v2 sizes.

What the SSD chunk size does: inside each chunk of Q tokens the scan is a masked Q x Q "attention" (C·Bᵀ per
group, then (L ∘ C·Bᵀ)·X per head): 2·Q·(G·N + d_in) FLOPs per token, growing with Q; across chunks the state
(N x P per head) is written once per chunk (Bᵀ·X) and read by every token (C·S): 4·N·d_in per token, independent
of Q; the recurrence between chunk states is elementwise (c steps of decay·S + S_new).
"""

from __future__ import annotations

import pytest

from vlm_perf.arch import spec_from_config
from vlm_perf.arch.blocks import Mamba2Mixer
from vlm_perf.arch.params import total_params
from vlm_perf.errors import ConfigError, UnsupportedModelError
from vlm_perf.flops import compute_flops
from vlm_perf.flops.blocks import FlopsContext, inventory_terms
from vlm_perf.flops.training import training_flops
from vlm_perf.stats import BatchStats

TINY = dict(model_type="nemotron_h", hidden_size=64, vocab_size=96, num_attention_heads=4, num_key_value_heads=2,
            head_dim=16, intermediate_size=80, mamba_num_heads=8, mamba_head_dim=12, ssm_state_size=16, n_groups=2,
            conv_kernel=4, chunk_size=8, hybrid_override_pattern="M-M*-M")


@pytest.mark.parametrize("pattern,extra", [("M-M*-M", {}), ("M*", {"tie_word_embeddings": True}),
                                           ("-M-*M", {"use_bias": True, "use_conv_bias": False, "mlp_bias": True})])
def test_params_match_transformers_meta(pattern, extra):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    cfg = dict(TINY, hybrid_override_pattern=pattern, **extra)
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(transformers.AutoConfig.for_model(**cfg))
    assert total_params(spec_from_config(cfg)) == sum(p.numel() for p in model.parameters())


def test_inventory_counts_layer_types():
    spec = spec_from_config(dict(TINY, hybrid_override_pattern="M-M-M*-M-"))
    kinds = {b.kind: b.count for b in spec.blocks}
    assert kinds["mamba2_mixer"] == 4 and kinds["decoder_attention"] == 1 and kinds["plain_mlp"] == 4
    assert spec.lm.num_layers == 9


def test_mamba_layer_flops_by_hand_nemotron_nano_12b_v2():
    # Nemotron-Nano-12B-v2 mixer: h 5120, 128 heads x 80 (d_in 10240), N 128, G 8, K 4, Q 128
    b = Mamba2Mixer(part="language_model", count=1, hidden=5120, num_heads=128, head_dim=80, state_size=128,
                    n_groups=8, conv_kernel=4, chunk=128)
    assert b.conv_channels == 10240 + 2 * 8 * 128 == 12288
    assert b.proj_per_token() == 2 * 5120 * (2 * 10240 + 2 * 8 * 128 + 128) + 2 * 10240 * 5120
    assert b.conv_per_output() == 2 * 12288 * 4
    # C·Bᵀ per group 2·Q·G·N, (L∘CBᵀ)X 2·Q·d_in, states Bᵀ·X 2·N·d_in, C·S 2·N·d_in
    assert b.scan_per_token() == 2 * 128 * 8 * 128 + 2 * 128 * 10240 + 2 * 128 * 10240 + 2 * 128 * 10240
    seq = 8192
    terms = inventory_terms((b,), BatchStats(lm_tokens=seq, lm_tokens_sq=seq * seq, lm_sequences=1, lm_samples=1),
                            FlopsContext())
    assert sum(t.forward for t in terms) == seq * (b.proj_per_token() + b.conv_per_output() + b.scan_per_token())
    # the scan is 2.9% of the layer at Q = 128: in_proj/out_proj dominate
    assert 0.02 < b.scan_per_token() / (b.proj_per_token() + b.conv_per_output() + b.scan_per_token()) < 0.04


def _mamba_layer(torch, h=64, heads=8, p=12, n=16, g=2, k=4, q=8):
    """One Mamba-2 mixer from the SSD maths: in_proj -> causal depthwise conv + SiLU on (x, B, C) -> chunked scan
    -> y·silu(z), grouped RMSNorm -> out_proj. Chunks are batched, so each product is one einsum."""
    nn, F = torch.nn, torch.nn.functional
    d = heads * p
    ch = d + 2 * g * n

    class Layer(nn.Module):
        def __init__(self):
            super().__init__()
            self.in_proj = nn.Linear(h, d + ch + heads, bias=False)
            self.conv = nn.Conv1d(ch, ch, k, groups=ch)
            self.dt_bias, self.a_log, self.d = (nn.Parameter(torch.rand(heads)) for _ in range(3))
            self.norm_w = nn.Parameter(torch.ones(d))
            self.out_proj = nn.Linear(d, h, bias=False)

        def forward(self, u):  # u: (L, h), L a multiple of q
            length = u.shape[0]
            z, xbc, dt = self.in_proj(u).split([d, ch, heads], -1)
            xbc = F.silu(self.conv(F.pad(xbc.t()[None], (k - 1, 0)))[0].t())  # causal: L outputs
            x, bm, cm = xbc.split([d, g * n, g * n], -1)
            c = length // q
            x = x.reshape(c, q, heads, p)
            bm, cm = bm.reshape(c, q, g, n), cm.reshape(c, q, g, n)
            dt = F.softplus(dt + self.dt_bias).reshape(c, q, heads)
            a = dt * -torch.exp(self.a_log)  # (c, q, H) log-decay per step
            acum = a.cumsum(1)
            seg = acum[:, :, None, :] - acum[:, None, :, :]  # (c, i, j, H)
            causal = torch.ones(q, q, dtype=torch.bool).tril()[None, :, :, None]
            decay = torch.where(causal, seg, torch.full_like(seg, float("-inf"))).exp()
            rep = heads // g
            cb = torch.einsum("cign,cjgn->cgij", cm, bm).repeat_interleave(rep, 1)  # per group, then to heads
            m = cb * decay.permute(0, 3, 1, 2) * dt.permute(0, 2, 1)[:, :, None, :]
            y = torch.einsum("chij,cjhp->cihp", m, x)  # intra-chunk
            bh, chh = bm.repeat_interleave(rep, 2), cm.repeat_interleave(rep, 2)
            to_end = (acum[:, -1:, :] - acum).exp() * dt  # (c, q, H)
            states = torch.einsum("cjhn,cjhp->chpn", bh, x * to_end[..., None])  # each chunk's state
            carried, prev = [], torch.zeros_like(states[0])
            for i in range(c):  # elementwise recurrence between chunks
                carried.append(prev)
                prev = prev * acum[i, -1].exp()[:, None, None] + states[i]
            y = y + torch.einsum("cihn,chpn->cihp", chh, torch.stack(carried)) * acum.exp()[..., None]
            y = (y + x * self.d[:, None]).reshape(length, d) * F.silu(z)
            yg = y.view(length, g, d // g)
            y = (yg * torch.rsqrt(yg.pow(2).mean(-1, keepdim=True) + 1e-5)).view(length, d) * self.norm_w
            return self.out_proj(y)

    return Layer()


@pytest.mark.parametrize("length,chunk", [(32, 8), (64, 16), (24, 8)])
def test_mamba_layer_against_flop_counter_on_reimplementation(length, chunk):
    torch = pytest.importorskip("torch")
    from torch.utils.flop_counter import FlopCounterMode

    torch.manual_seed(0)
    layer = _mamba_layer(torch, q=chunk)
    block = Mamba2Mixer(part="language_model", count=1, hidden=64, num_heads=8, head_dim=12, state_size=16,
                        n_groups=2, conv_kernel=4, chunk=chunk)
    assert block.params() == sum(p.numel() for p in layer.parameters())
    u = torch.randn(length, 64, requires_grad=True)  # a middle layer: its input needs a gradient
    with FlopCounterMode(display=False) as fwd:
        out = layer(u)
    with FlopCounterMode(display=False) as bwd:
        out.sum().backward()
    terms = inventory_terms((block,), BatchStats(lm_tokens=length, lm_tokens_sq=length * length, lm_sequences=1,
                                                 lm_samples=1), FlopsContext())
    assert sum(t.forward for t in terms) == fwd.get_total_flops()
    train = sum(training_flops(t, frozenset()) for t in terms)
    # FlopCounterMode's convolution_backward bills the depthwise conv's weight gradient as a dense conv (it ignores
    # ``groups``: x channels, measured here); a depthwise weight gradient is 2·ch·K·L like the forward, so the
    # conv's backward is replaced by 2x its forward (input + weight gradient) by hand
    conv_fwd = fwd.get_flop_counts()["Global"][torch.ops.aten.convolution]
    conv_bwd = bwd.get_flop_counts()["Global"][torch.ops.aten.convolution_backward]
    assert conv_fwd == 2 * 160 * 4 * length and conv_bwd == conv_fwd * (1 + 160)
    assert train == fwd.get_total_flops() + bwd.get_total_flops() - conv_bwd + 2 * conv_fwd


def test_conv_bias_param_count():
    b = Mamba2Mixer(part="language_model", count=1, hidden=64, num_heads=8, head_dim=12, state_size=16,
                    n_groups=2, conv_kernel=4, chunk=8)
    # in_proj 64 x (96 + 160 + 8), conv 160 x 4 + 160, dt_bias/A_log/D 3 x 8, norm 96, out_proj 96 x 64
    assert b.params() == 64 * 264 + 160 * 4 + 160 + 24 + 96 + 96 * 64


def test_full_model_lm_flops_by_hand():
    cfg = dict(TINY, hybrid_override_pattern="M*-")
    spec = spec_from_config(cfg)
    s = 64
    stats = BatchStats(lm_tokens=s, lm_tokens_sq=s * s, lm_sequences=1, lm_samples=1)
    got = compute_flops(spec, stats, mode="forward", causal="full").parts["language_model"]
    mamba = s * (2 * 64 * (96 + 160 + 8) + 2 * 96 * 64 + 2 * 160 * 4 + 2 * 8 * (2 * 16 + 96) + 4 * 16 * 96)
    attn = s * 2 * 64 * (64 + 2 * 32 + 64) + 2 * 4 * 2 * 16 * s * s  # q,k,v,o + QKᵀ and AV (eager square)
    mlp = s * 2 * 2 * 64 * 80
    head = s * 2 * 64 * 96
    assert got == mamba + attn + mlp + head


def test_refusals():
    with pytest.raises(ConfigError, match="num_experts_per_tok"):
        spec_from_config(dict(TINY, hybrid_override_pattern="ME*", n_routed_experts=4, num_experts_per_tok=6))
    with pytest.raises(ConfigError, match="hybrid_override_pattern"):
        spec_from_config(dict(TINY, hybrid_override_pattern="MX"))
    with pytest.raises(ConfigError, match="n_groups"):
        spec_from_config(dict(TINY, n_groups=3))
    with pytest.raises(ConfigError, match="hidden_size"):
        spec_from_config({k: v for k, v in TINY.items() if k != "hidden_size"})
    with pytest.raises(UnsupportedModelError, match="multi-token"):
        spec_from_config(dict(TINY, num_nextn_predict_layers=1))


def test_decode_is_refused_and_6nd_counts_the_mamba_weights():
    from vlm_perf.flops.generation import generation_flops

    spec = spec_from_config(dict(TINY, hybrid_override_pattern="M*-"))
    with pytest.raises(UnsupportedModelError, match="mamba2_mixer"):
        generation_flops(spec, [16], [4])
    s = 32
    got = compute_flops(spec, BatchStats(lm_tokens=s, lm_tokens_sq=s * s, lm_sequences=1, lm_samples=1),
                        convention="6nd").total
    # active matmul weights: in/out_proj + conv taps, q/k/v/o, up/down, lm_head (no norms, no embedding lookup)
    weights = 64 * 264 + 96 * 64 + 160 * 4 + 64 * (64 + 32 + 32) + 64 * 64 + 2 * 64 * 80 + 64 * 96
    assert got == 6 * weights * s


@pytest.mark.parametrize("length", [32, 64])
def test_transformers_reference_scan_differs_by_explained_terms(length):
    """FlopCounterMode on transformers' own NemotronHForCausalLM (its PyTorch reference path, used without the
    mamba_ssm / causal_conv1d kernels): the weight GEMMs equal the count exactly; the reference path computes
    more than the SSD kernels (and the count): C·Bᵀ per head instead of per group (2·c·Q²·N·(H − G)), the
    inter-chunk state passing as a (c+1) x (c+1) einsum (2·(c+1)²·H·P·N) and the conv on the padded length
    (2·ch·K·(K − 1) more). Measured and explained here; the count follows the kernels training uses."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from torch.utils.flop_counter import FlopCounterMode

    cfg = dict(TINY, hybrid_override_pattern="M")
    hf_cfg = transformers.AutoConfig.for_model(**cfg)
    hf_cfg._attn_implementation = "eager"
    torch.manual_seed(0)
    # parameters that do not require grad: transformers 5.25 calls causal_conv1d_fn as an nn.Module, and torch's
    # ModuleTracker (in FlopCounterMode) cannot hook the weight view taken under no_grad that it receives
    model = transformers.AutoModelForCausalLM.from_config(hf_cfg).eval().requires_grad_(False)
    with torch.no_grad(), FlopCounterMode(display=False) as fc:
        model(torch.randint(0, 96, (1, length)), use_cache=False)
    got = fc.get_flop_counts()["Global"]
    parts = compute_flops(spec_from_config(cfg), BatchStats(lm_tokens=length, lm_tokens_sq=length ** 2,
                                                            lm_sequences=1, lm_samples=1), mode="forward").components
    block = next(b for b in spec_from_config(cfg).blocks if isinstance(b, Mamba2Mixer))
    assert got[torch.ops.aten.mm] == length * block.proj_per_token() + parts["lm.logits"]
    assert got[torch.ops.aten.convolution] == 2 * 160 * 4 * (length + 3)
    c, q = length // 8, 8
    extra = 2 * c * q * q * 16 * (8 - 2) + 2 * (c + 1) ** 2 * 8 * 12 * 16
    assert got[torch.ops.aten.bmm] == parts["lm.attn_core"] + extra


@pytest.mark.parametrize("preset,total,named", [("nemotron-h-8b", 8_100_852_736, 8), ("nemotron-h-56b", 56_324_350_464, 56),
                                                ("nemotron-nano-9b-v2", 8_888_227_328, 9)])
def test_presets_equal_transformers_meta_count(preset, total, named):
    """The shipped presets (sources in each preset's note) = transformers' NemotronHForCausalLM on the meta device
    built from the same file, and round to the size in the model's name (8B, 56B, 9B)."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from vlm_perf.arch import load_model, preset_config

    cfg = {k: v for k, v in preset_config(preset).items() if not k.startswith("_")}
    with torch.device("meta"):
        model = transformers.NemotronHForCausalLM(transformers.AutoConfig.for_model(**cfg))
    assert total_params(load_model(preset)) == sum(p.numel() for p in model.parameters()) == total
    assert round(total / 1e9) == named


# --------------------------------------------------------------------------- MoE layers (Nemotron 3)
MOE = dict(TINY, n_routed_experts=6, num_experts_per_tok=2, moe_intermediate_size=24,
           moe_shared_expert_intermediate_size=40, n_group=2, topk_group=1)


@pytest.mark.parametrize("pattern,extra", [("*E-E", {}), ("ME*E", {"moe_latent_size": 32, "mlp_bias": True})],
                         ids=["moe", "latent-bias"])
def test_moe_params_match_transformers_meta(pattern, extra):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    cfg = dict(MOE, hybrid_override_pattern=pattern, **extra)
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(transformers.AutoConfig.for_model(**cfg))
    assert total_params(spec_from_config(cfg)) == sum(p.numel() for p in model.parameters())


def test_moe_layer_by_hand():
    """6 experts top-2 of width 24 on h 64, shared MLP 40, router 64 -> 6; with a 32-wide latent the experts read
    32 values and two 64 <-> 32 projections run per token."""
    from vlm_perf.arch.blocks import PlainMoEMLP

    b = PlainMoEMLP(part="language_model", count=1, hidden=64, num_experts=6, top_k=2, expert_width=24,
                    shared_width=40)
    assert b.per_token() == {"routed": 2 * 2 * 64 * 24 * 2, "shared": 2 * 2 * 64 * 40, "router": 2 * 64 * 6}
    assert b.params() == 6 * 2 * 64 * 24 + 2 * 64 * 40 + 6 * 64
    assert b.active_params() == 2 * 2 * 64 * 24 + 2 * 64 * 40 + 6 * 64
    lat = PlainMoEMLP(part="language_model", count=1, hidden=64, num_experts=6, top_k=2, expert_width=24,
                      shared_width=40, latent=32)
    assert lat.per_token()["routed"] == 2 * 2 * 32 * 24 * 2 + 2 * 2 * 64 * 32


@pytest.mark.parametrize("latent", [0, 32])
@pytest.mark.parametrize("mode", ["forward", "training"])
def test_moe_lm_against_flop_counter_on_transformers(mode, latent):
    """FlopCounterMode on transformers' NemotronHForCausalLM (eager experts: each hit expert runs on its routed
    tokens; attention + MLP + MoE layers, no Mamba layer, whose reference scan differs): equal to the count."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from torch.utils.flop_counter import FlopCounterMode

    cfg = dict(MOE, hybrid_override_pattern="*E-E", **({"moe_latent_size": latent} if latent else {}))
    hf_cfg = transformers.AutoConfig.for_model(**cfg)
    hf_cfg._attn_implementation = "eager"
    hf_cfg._experts_implementation = "eager"
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(hf_cfg).double().eval()
    with torch.no_grad():
        for layer in model.model.layers:
            if hasattr(layer.mixer, "gate"):
                layer.mixer.gate.weight.normal_(0, 0.5)  # non-trivial routing
    length = 24
    ids = torch.randint(0, 96, (1, length))
    with FlopCounterMode(display=False) as fc:
        if mode == "training":
            model(ids, use_cache=False).logits.mean().backward()
        else:
            with torch.no_grad():
                model(ids, use_cache=False)
    got = compute_flops(spec_from_config(cfg), BatchStats(lm_tokens=length, lm_tokens_sq=length ** 2,
                                                          lm_sequences=1, lm_samples=1),
                        mode=mode, causal="full").total
    assert got == fc.get_total_flops()
