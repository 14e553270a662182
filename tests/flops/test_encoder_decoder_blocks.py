"""The encoder-decoder LM and DaViT block kinds against hand arithmetic (no torch): which backward matmuls run in
each regime, and the window padding of a DaViT stage. The measured counterparts are tests/verify/test_florence2_flops.py
and tests/verify/test_blip_2_t5_flops.py."""

from __future__ import annotations

from vlm_perf.arch.blocks import DaViTStage, EncoderDecoderLayers
from vlm_perf.arch.parts import LANGUAGE_MODEL, STAGES, VISION_TOWER
from vlm_perf.flops.blocks import FlopsContext, inventory_terms
from vlm_perf.flops.training import training_flops
from vlm_perf.stats import BatchStats

H, A, F = 8, 12, 16  # width, attention width (3 heads x 4), FFN
E, D = 10, 3  # one sample: 10 encoder positions, 3 decoder positions
LM = EncoderDecoderLayers(part=LANGUAGE_MODEL, count=1, hidden=H, num_heads=3, head_dim=4, encoder_layers=1,
                          decoder_layers=2, encoder_ffn=F, decoder_ffn=F, bias=False, gated=True, norm="rmsnorm")
STATS = BatchStats(lm_tokens=E, lm_tokens_sq=E * E, lm_decoder_tokens=D, lm_decoder_tokens_sq=D * D,
                   lm_decoder_x_encoder=D * E)


def _total(frozen, causal="full", block=LM, stats=STATS):
    return sum(training_flops(t, frozenset(frozen)) for t in inventory_terms((block,), stats, FlopsContext(causal)))


def _forward_parts():
    """Forward FLOPs by hand: encoder layer, decoder layer 0 up to its cross query, the rest of each decoder layer."""
    mm = lambda rows, i, o: 2 * rows * i * o  # noqa: E731
    ffn = lambda rows: 2 * mm(rows, H, F) + mm(rows, F, H)  # noqa: E731  (gated: wi_0, wi_1, wo)
    encoder = 3 * mm(E, H, A) + mm(E, A, H) + 4 * A * E * E + ffn(E)
    own = 3 * mm(D, H, A) + mm(D, A, H) + 4 * A * D * D + mm(D, H, A)  # self-attn + cross q of decoder layer 0
    cross_rest = 2 * mm(E, H, A) + 4 * A * D * E + mm(D, A, H) + ffn(D)  # cross k/v, core, o, FFN
    return encoder, own, cross_rest


def test_forward_by_hand():
    encoder, own, rest = _forward_parts()
    assert _total(set(STAGES)) == encoder + own + rest + (own + rest)


def test_trainable_lm_pays_three_times_everything():
    encoder, own, rest = _forward_parts()
    assert _total(set()) == 3 * (encoder + own + rest + own + rest)


def test_frozen_lm_under_a_trainable_tower():
    """The LM passes the tower's gradient: input gradients everywhere (weights 1x, cores 2x) except in the decoder's
    first self-attention and cross query (they read only the frozen decoder embeddings); that layer's eager cross
    core runs dK, dP, dV (3 halves of its forward's 2) but not dQ."""
    encoder, own, rest = _forward_parts()
    cross_core = 4 * A * D * E
    layer0 = own + 2 * (rest - cross_core) + cross_core + 3 * cross_core // 2
    layer1 = 2 * own + 4 * A * D * D + 2 * rest + cross_core  # every core's input gradient is 2x its forward
    assert _total({"language_model"}) == 2 * encoder + 4 * A * E * E + layer0 + layer1


def test_fused_kernel_rule_and_causal_half():
    """--causal half: the decoder's self cores halve, the encoder's square and the cross rectangles do not; a fused
    cross core computes dQ, dK, dV together (2x) whenever any is needed."""
    full = _total(set(STAGES), "full")
    half = _total(set(STAGES), "half")
    assert full - half == 2 * (4 * A * D * D) // 2
    _, own, rest = _forward_parts()
    frozen_lm_full = _total({"language_model"}, "full")
    frozen_lm_half = _total({"language_model"}, "half")
    # half: decoder self cores halved (forward and their 2x input gradient in layer 1: layer 0's needs none);
    # the first cross core's backward grows from 3 halves (eager) to 4 (fused)
    assert frozen_lm_full - frozen_lm_half == (4 * A * D * D) // 2 * (1 + 3) - (4 * A * D * E) // 2


def test_davit_stage_pads_windows_and_reads_pixels():
    """A 10 x 10 grid with 4 x 4 windows runs qkv / proj / core on 12 x 12 padded positions; the first stage's conv
    reads pixels (no input gradient)."""
    stage = DaViTStage(part=VISION_TOWER, count=1, in_width=3, width=8, kernel=4, stride=4, padding=0, pre_norm=False,
                       depth=1, num_heads=2, num_groups=2, window=4, mlp_width=16, qkv_bias=True, in_side=40,
                       reads_pixels=True)
    assert (stage.side, stage.positions, stage.padded_positions) == (10, 100, 144)
    terms = inventory_terms((stage,), BatchStats(vision_frames=2), FlopsContext("full"))
    n, r, w = 2 * 100, 2 * 144, 8
    conv = 2 * n * 16 * 3 * w
    body = (4 * 2 * n * 9 * w + 2 * 2 * n * 2 * w * 16 + 2 * r * 4 * w * w + 4 * r * 16 * w + 2 * n * 4 * w * w
            + 4 * n * w * (w // 2))
    assert sum(t.forward for t in terms) == conv + body
    assert sum(training_flops(t, frozenset()) for t in terms) == 2 * conv + 3 * body
