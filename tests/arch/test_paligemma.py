"""PaliGemma family (``paligemma``): PaliGemma-3B and PaliGemma 2 3B parameter counts by hand, against transformers'
meta-device count and the published totals; the presets; image tokens and FLOPs of one 224-px image by hand; one-line
errors for what is not modelled."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from vlm_perf.arch import load_model, spec_from_config
from vlm_perf.arch.families import FAMILIES
from vlm_perf.arch.params import count_params
from vlm_perf.errors import ConfigError, UnsupportedModelError

RULE = FAMILIES["paligemma"].media
PRESETS = Path(__file__).parents[1] / "verify" / "families" / "presets"
PG1 = json.loads((PRESETS / "paligemma-3b-pt-224.json").read_text())
PG2 = json.loads((PRESETS / "paligemma2-3b-pt-224.json").read_text())
SIDECAR = json.loads((PRESETS / "presets.json").read_text())


def _spec(config=PG1, processor=None):
    return spec_from_config(copy.deepcopy(config), name="paligemma-test", processor=processor or {})


def _siglip_so400m_224() -> int:
    """SigLIP-So400m/14 at 224 px: conv (3·14·14·1152 + bias), 256 positions, 27 layers (2 LayerNorms, q/k/v/o with
    bias, fc1/fc2 with bias), post LayerNorm."""
    h, i = 1152, 4304
    layer = 2 * 2 * h + 4 * (h * h + h) + (h * i + i) + (i * h + h)
    return (3 * 14 * 14 * h + h) + 256 * h + 27 * layer + 2 * h


def test_paligemma_3b_parameters_by_hand():
    """Gemma-2B LM: 18 layers, hidden 2048, 8 q heads / 1 kv head x 256, GeGLU 16384, 2 RMSNorms per layer, final
    norm, tied embedding of the HF checkpoint's 257,216 tokens."""
    h = 2048
    layer = h * 8 * 256 + 2 * h * 256 + 8 * 256 * h + 3 * h * 16384 + 2 * h
    lm = 257_216 * h + 18 * layer + h
    c = count_params(_spec())
    assert c.vision_tower == _siglip_so400m_224() == 412_442_352
    assert c.merger == 1152 * 2048 + 2048 == 2_361_344
    assert c.lm == lm == 2_508_662_784
    assert c.total == 2_923_466_480


def test_paligemma2_3b_parameters_by_hand():
    """Gemma 2 2B LM: 26 layers, hidden 2304, 8 q / 4 kv heads x 256, GeGLU 9216, 4 RMSNorms per layer."""
    h = 2304
    layer = h * 8 * 256 + 2 * h * 4 * 256 + 8 * 256 * h + 3 * h * 9216 + 4 * h
    lm = 257_216 * h + 26 * layer + h
    c = count_params(_spec(PG2))
    assert c.vision_tower == _siglip_so400m_224()
    assert c.merger == 1152 * h + h
    assert c.lm == lm
    assert c.total == 3_032_242_416


@pytest.mark.parametrize("config,key,vocab_width", [(PG1, "paligemma-3b-pt-224", 2048),
                                                    (PG2, "paligemma2-3b-pt-224", 2304)])
def test_totals_match_transformers_and_published(config, key, vocab_width):
    c = count_params(_spec(config))
    entry = SIDECAR[key]
    assert c.total == entry["transformers_parameters"]  # transformers' meta-device count (test_presets re-derives it)
    assert abs(c.total - entry["published_total"]) <= entry["published_tolerance"]
    # keras-hub publishes the exact count with PaliGemma's 257,152-token vocab; the HF text vocab has 64 more rows
    keras = {"paligemma-3b-pt-224": 2_923_335_408, "paligemma2-3b-pt-224": 3_032_094_960}[key]
    assert c.total == keras + 64 * vocab_width


@pytest.mark.parametrize("preset,hub", [("paligemma-3b-224", PG1), ("paligemma2-3b-224", PG2)])
def test_shipped_presets_equal_the_verified_configs(preset, hub):
    assert count_params(load_model(preset)).total == count_params(_spec(hub)).total
    assert load_model(preset).family == "paligemma"


def test_gemma2_layer_types_default_alternates():
    """Gemma2Config.__post_init__: layer i is sliding when (i + 1) is odd; window 4096 (the summary keeps it; the
    inventory bills the square on every layer, see the FLOPs test)."""
    lm = _spec(PG2).lm
    assert lm.sliding_window == 4096 and lm.sliding_layers == tuple(range(0, 26, 2))
    assert _spec(PG1).lm.sliding_window is None


def test_one_224px_image_tokens_and_flops_by_hand():
    """Any image size: resized to 224 x 224 -> 256 patches -> 256 LM tokens. Forward tower FLOPs per image: conv
    2·256·588·1152 + 27 layers x (2·256·4·1152² + 4·256²·1152 + 2·256·2·1152·4304); projector 2·256·1152·2048.
    Prefix-LM: the LM core is the whole square under --causal half too (4·H·d·s² per layer)."""
    from vlm_perf.flops import compute_flops
    from vlm_perf.stats import BatchStats

    spec = _spec(processor={"preprocessor_config.json": {"size": {"height": 224, "width": 224},
                                                         "image_seq_length": 256}})
    for hw in ((224, 224), (1000, 37), (5, 5)):
        m = RULE.image(spec, *hw)
        assert (m.grid, m.visual_tokens, m.resized) == ((1, 16, 16), 256, (224, 224))
    n, h, i = 256, 1152, 4304
    tower = 2 * n * 588 * h + 27 * (2 * n * 4 * h * h + 4 * n * n * h + 2 * n * 2 * h * i)
    s = 300
    stats = BatchStats.from_batch(seq_lens=[s], image_grids=[(1, 16, 16)], spec=spec)
    half = compute_flops(spec, stats, mode="forward", causal="half")
    full = compute_flops(spec, stats, mode="forward", causal="full")
    assert half.parts["vision_tower"] == tower
    assert half.parts["projector"] == 2 * n * h * 2048
    assert half.components["lm.attn_core"] == full.components["lm.attn_core"] == 18 * 4 * 8 * 256 * s * s


def _with(config, path, value):
    cfg = copy.deepcopy(config)
    node = cfg
    for key in path[:-1]:
        node = node[key]
    if value is None:
        node.pop(path[-1])
    else:
        node[path[-1]] = value
    return cfg


@pytest.mark.parametrize("config,error,match", [
    (_with(PG1, ("projection_dim",), 1024), ConfigError, "projection_dim 1024"),
    (_with(PG1, ("text_config", "model_type"), "llama"), UnsupportedModelError, "text_config.model_type 'llama'"),
    (_with(PG1, ("vision_config", "model_type"), "clip_vision_model"), UnsupportedModelError, "SigLIP"),
    (_with(PG1, ("vision_config",), None), ConfigError, "vision_config"),
    (_with(PG1, ("text_config",), None), ConfigError, "text_config"),
    (_with(PG1, ("vision_config", "hidden_size"), "big"), ConfigError, "vision_config.hidden_size"),
    (_with(PG1, ("text_config", "num_hidden_layers"), 0), ConfigError, "text_config.num_hidden_layers"),
    (_with(PG2, ("text_config", "sliding_window"), "wide"), ConfigError, "text_config.sliding_window"),
    (_with(PG2, ("text_config", "layer_types"), ["full_attention"]), ConfigError, "text_config.layer_types"),
])
def test_config_errors_are_one_line(config, error, match):
    with pytest.raises(error, match=match) as exc:
        spec_from_config(config, name="bad")
    assert "\n" not in str(exc.value)


@pytest.mark.parametrize("processor,error,match", [
    ({"preprocessor_config.json": {"size": {"height": 448, "width": 448}}}, UnsupportedModelError, "224-px"),
    ({"preprocessor_config.json": {"image_seq_length": 1024}}, ConfigError, "image_seq_length 1024"),
])
def test_processor_mismatch_is_refused(processor, error, match):
    with pytest.raises(error, match=match):
        RULE.image(_spec(processor=processor), 100, 100)


def test_no_video_and_bad_sizes():
    with pytest.raises(UnsupportedModelError, match="no video"):
        RULE.video(_spec(), 4, 100, 100)
    with pytest.raises(Exception, match="--image-size"):
        RULE.image(_spec(), 0, 100)
