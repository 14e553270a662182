"""`vlm-perf flops` on Florence-2: the encoder length from --seq-len, the decoder's from --decoder-lens (or the stated
stand-in, named in a note), hand-checked on the preset."""

from __future__ import annotations

import json

from tests.support import run_main


def _lm(*extra):
    done = run_main("flops", "--model", "florence-2-base", "--seq-len", "590", "--image-size", "480,640",
                    "--mode", "forward", "--causal", "full", "--json", *extra)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_decoder_lens_by_hand():
    """BART-base: 6 + 6 layers of width 768, FFN 3072, vocabulary 51328; encoder 590 positions, decoder 20:
    6·(2·590·4·768² + 4·768·590² + 2·590·2·768·3072) + 6·(2·20·4·768² + 4·768·20² + 2·20·2·768² + 2·590·2·768²
    + 4·768·20·590 + 2·20·2·768·3072) + 2·20·768·51328."""
    e, d, h, f = 590, 20, 768, 3072
    enc = 6 * (2 * e * 4 * h * h + 4 * h * e * e + 2 * e * 2 * h * f)
    dec = 6 * (2 * d * 4 * h * h + 4 * h * d * d + 2 * d * 2 * h * h + 2 * e * 2 * h * h + 4 * h * d * e
               + 2 * d * 2 * h * f)
    out = _lm("--decoder-lens", "20")
    assert out["parts"]["language_model"] == enc + dec + 2 * d * h * 51328
    assert not any("decoder (label) length" in n for n in out.get("notes", []))


def test_without_decoder_lens_the_stand_in_is_named():
    out = _lm()
    assert out["stats"]["lm_decoder_tokens"] == 590 and out["stats"]["lm_decoder_x_encoder"] == 590 * 590
    assert any(n.startswith("assumed: each sample's decoder (label) length equals its encoder length")
               for n in out["notes"])


def test_decoder_lens_on_a_decoder_only_model_is_one_line():
    done = run_main("flops", "--model", "qwen2.5-vl-3b", "--seq-len", "100", "--decoder-lens", "20")
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.strip().startswith("error: decoder_lens given, but qwen2.5-vl-3b has no encoder-decoder")
