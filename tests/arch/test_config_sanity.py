"""Config sanity, tested by defect class over every registered family (vlm_perf.arch.validate).

Each class of impossible architecture is generated from the family's sample config (tests/arch/config_samples.py)
for every member the family has: every declared structural field set to 0 / negative / NaN / huge / a string,
heads not dividing the width the family derives head_dim from, kv heads not dividing heads, top-k > experts,
``layer_types`` of the wrong length. The expected outcome is written here (a one-line ConfigError naming the
field), never read from the code under test.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from config_samples import SAMPLES, sample  # noqa: E402

from vlm_perf.arch import FAMILIES, load_model, spec_from_config  # noqa: E402
from vlm_perf.arch.params import total_params  # noqa: E402
from vlm_perf.arch.fields import text_section  # noqa: E402
from vlm_perf.arch.validate import MAX_SIZE, TEXT_FIELDS, VISION_FIELDS  # noqa: E402
from vlm_perf.errors import ConfigError, InputError, VlmPerfError  # noqa: E402


def _sections(cfg: dict) -> list[tuple[dict, str]]:
    """(section dict to mutate in place, prefix the error names) for the LM and the vision tower."""
    out = []
    outer = ""
    if isinstance(cfg.get("thinker_config"), dict):  # Omni: the thinker's sections
        cfg, outer = cfg["thinker_config"], "thinker_config."
    text, section = text_section(cfg)
    out.append((cfg["text_config"] if section else cfg, f"{outer}text_config." if section else outer))
    if isinstance(cfg.get("vision_config"), dict):
        out.append((cfg["vision_config"], f"{outer}vision_config."))
    return out


def _members(kinds: str) -> list[tuple[str, int, str]]:
    """(family, section index, field) for every declared integer field present in a family's sample."""
    out = []
    for family in SAMPLES:
        for i, (section, _prefix) in enumerate(_sections(sample(family))):
            table = TEXT_FIELDS if i == 0 else VISION_FIELDS
            for key, value in section.items():
                kind = table.get(key)
                if kind is None or kind.number or value is None or isinstance(value, bool):
                    continue
                if kinds == "positive" and kind.low != 1:
                    continue
                out.append((family, i, key))
    return out


def _mutated(family: str, index: int, key: str, value) -> tuple[dict, str]:
    cfg = sample(family)
    section, prefix = _sections(cfg)[index]
    section[key] = value
    return cfg, prefix + key


def test_every_family_has_a_sample():
    assert set(FAMILIES) <= set(SAMPLES), f"add a sample config for {sorted(set(FAMILIES) - set(SAMPLES))}"


@pytest.mark.parametrize("family", SAMPLES)
def test_samples_build_and_are_their_family(family):
    assert spec_from_config(sample(family)).family == family


POSITIVE = _members("positive")
NUMERIC = _members("all")
BAD_SIZES = [0, -1]
BAD_VALUES = [math.nan, math.inf, -math.inf, MAX_SIZE * 4, 1e300, "64", [64], 2.5]


def _fields(members: list[tuple[str, int, str]], family: str) -> list[tuple[int, str]]:
    fields = [(index, key) for fam, index, key in members if fam == family]
    assert fields, f"{family}: its sample declares no structural field"
    return fields


# The law "every declared structural field with an impossible value is refused naming that field" holds for every
# (family, field, value): each family is one test that walks all of its fields and all of the values (was one test
# item per triple, ~6,900 items; every triple still runs, and a failure names it).
@pytest.mark.parametrize("family", sorted({m[0] for m in POSITIVE}))
def test_zero_or_negative_size_names_the_field(family):
    for index, key in _fields(POSITIVE, family):
        for bad in BAD_SIZES:
            cfg, name = _mutated(family, index, key, bad)
            with pytest.raises(ConfigError, match=f"field {name.replace('.', '[.]')} must be") as err:
                spec_from_config(cfg)
            assert "\n" not in str(err.value), (name, bad)


@pytest.mark.parametrize("family", sorted({m[0] for m in NUMERIC}))
def test_non_finite_huge_or_mistyped_value_names_the_field(family):
    for index, key in _fields(NUMERIC, family):
        for bad in BAD_VALUES:
            cfg, name = _mutated(family, index, key, bad)
            if key in ("sliding_window", "max_position_embeddings") and bad == MAX_SIZE * 4:
                spec_from_config(cfg)  # a window or position count may exceed MAX_SIZE (tokens, not a width)
                continue
            with pytest.raises(ConfigError, match=name.replace(".", "[.]")):
                spec_from_config(cfg)


def test_the_walk_covers_every_family_with_declared_fields():
    """Hand count of the walk's size: a sample that lost its structural fields would shrink it silently."""
    assert len({m[0] for m in POSITIVE}) == len(SAMPLES)
    assert len(NUMERIC) >= len(POSITIVE) >= 2 * len(SAMPLES)


@pytest.mark.parametrize("family", SAMPLES)
def test_negative_sizes_of_every_field_are_refused(family):
    """Every integer >= 1 anywhere in the LM / vision sections set to -7: refused (one field at a time)."""
    base = sample(family)
    for i, (section, _) in enumerate(_sections(base)):
        for key, value in section.items():
            if isinstance(value, int) and not isinstance(value, bool) and value > 0 and key not in (
                    "model_type", "bos_token_id", "eos_token_id", "pad_token_id", "image_token_id",
                    "video_token_id", "max_position_embeddings") and not key.endswith("_token_id") and not key.endswith(
                    "_token_index"):
                cfg, _ = _mutated(family, i, key, -7)
                try:
                    spec_from_config(cfg)
                except VlmPerfError:
                    continue
                table = TEXT_FIELDS if i == 0 else VISION_FIELDS
                assert key not in table, f"{family}: {key} = -7 was accepted"


# ------------------------------------------------------------------------------------- cross-field rules
def _derives_head_dim(family: str) -> bool:
    cfg = sample(family)
    text, _ = text_section(cfg.get("thinker_config", cfg))
    return text.get("head_dim") is None and text.get("kv_lora_rank") is None


@pytest.mark.parametrize("family", [f for f in SAMPLES if _derives_head_dim(f)])
def test_heads_not_dividing_hidden_is_refused(family):
    cfg = sample(family)
    section, prefix = _sections(cfg)[0]
    heads = section["num_attention_heads"]
    section["hidden_size"] = heads * 64 + 1  # hand arithmetic: not a multiple of heads (heads > 1)
    with pytest.raises(ConfigError, match="not divisible by"):
        spec_from_config(cfg)


@pytest.mark.parametrize("family", [f for f in SAMPLES if "vision_config" in sample(f)])
def test_vision_heads_not_dividing_width_is_refused(family):
    cfg = sample(family)
    vc = cfg["vision_config"]
    width_key = "embed_dim" if "embed_dim" in vc else "hidden_size"
    heads_key = "num_heads" if "num_heads" in vc else "num_attention_heads"
    heads = vc.get(heads_key) or 16  # class default where the sample leaves it out
    vc[heads_key] = heads
    # a hierarchical tower (Florence-2's DaViT) lists one width and one head count per stage
    vc[width_key] = [h * 64 + 1 for h in heads] if isinstance(heads, list) else heads * 64 + 1
    with pytest.raises(ConfigError, match="not divisible by"):
        spec_from_config(cfg)


@pytest.mark.parametrize("family", SAMPLES)
@pytest.mark.parametrize("kv", [0, "not a divisor"])
def test_kv_heads_zero_or_not_dividing_heads_is_refused(family, kv):
    cfg = sample(family)
    section, _ = _sections(cfg)[0]
    heads = section["num_attention_heads"]
    section["num_key_value_heads"] = 0 if kv == 0 else next(k for k in range(2, heads + 2) if heads % k)
    with pytest.raises(ConfigError, match="num_key_value_heads"):
        spec_from_config(cfg)


MOE = [f for f in SAMPLES if _sections(sample(f))[0][0].get("num_experts_per_tok") is not None]


@pytest.mark.parametrize("family", MOE)
def test_top_k_above_experts_is_refused(family):
    cfg = sample(family)
    section, _ = _sections(cfg)[0]
    experts = next(section[k] for k in ("num_experts", "num_local_experts", "n_routed_experts") if k in section)
    section["num_experts_per_tok"] = experts + 1
    with pytest.raises(ConfigError, match="num_experts_per_tok"):
        spec_from_config(cfg)


def test_moe_families_are_covered():
    assert {"qwen3_moe", "deepseek_v3", "qwen3_vl_moe", "glm4v_moe", "glm46v", "qwen3_5_moe"} <= set(MOE)


@pytest.mark.parametrize("family", SAMPLES)
@pytest.mark.parametrize("delta", [-1, 1])
def test_layer_types_of_the_wrong_length_is_refused(family, delta):
    cfg = sample(family)
    section, _ = _sections(cfg)[0]
    layers = section["num_hidden_layers"]
    section["layer_types"] = ["full_attention"] * (layers + delta)
    with pytest.raises(ConfigError, match="layer_types"):
        spec_from_config(cfg)


@pytest.mark.parametrize("family", [f for f in SAMPLES if "first_k_dense_replace" in _sections(sample(f))[0][0]])
def test_more_dense_layers_than_layers_is_refused(family):
    cfg = sample(family)
    section, _ = _sections(cfg)[0]
    section["first_k_dense_replace"] = section["num_hidden_layers"] + 1
    with pytest.raises(ConfigError, match="first_k_dense_replace"):
        spec_from_config(cfg)


# the zeros that ended in ZeroDivisionError / IndexError before (issue 17), by name
@pytest.mark.parametrize("preset,path", [
    ("qwen2.5-vl-7b", ("num_attention_heads",)), ("qwen2.5-vl-7b", ("vision_config", "num_heads")),
    ("qwen2.5-vl-7b", ("vision_config", "spatial_merge_size")), ("qwen3-30b-a3b", ("decoder_sparse_step",)),
    ("qwen2.5-vl-7b", ("num_hidden_layers",)), ("qwen3-vl-8b", ("text_config", "num_hidden_layers")),
    ("gemma3-4b", ("vision_config", "num_attention_heads")), ("mistral-small-3.1-24b", ("spatial_merge_size",)),
    ("smolvlm2-500m", ("scale_factor",)),
])
def test_zeros_that_crashed_are_one_line_errors(preset, path):
    from vlm_perf.arch import preset_config

    cfg = preset_config(preset)
    node = cfg
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = 0
    with pytest.raises(ConfigError, match=path[-1]):
        spec_from_config(cfg)


# ------------------------------------------------------------------------------------- the JSON file
def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "config.json"
    path.write_text(text)
    return path


@pytest.mark.parametrize("literal", ["NaN", "Infinity", "-Infinity"])
def test_non_finite_json_literals_are_refused_with_the_line(tmp_path, literal):
    text = json.dumps(sample("qwen2_5_vl"), indent=1).replace('"hidden_size": 3584', f'"hidden_size": {literal}', 1)
    line = text[:text.index(literal)].count("\n") + 1
    with pytest.raises(InputError, match=f"config.json:{line}: {literal} is not a JSON number"):
        load_model(_write(tmp_path, text))


def test_infinite_time_step_limit_is_accepted_and_other_infinities_are_not(tmp_path):
    """Published Nemotron-H config.json files carry ``"time_step_limit": [0.0, Infinity]`` (Python's json writes
    the default +inf dt clamp that way); no FLOP count reads it, so it loads. The same literal on a structural field
    two lines later is still refused with its line."""
    from vlm_perf.arch import preset_config

    cfg = {k: v for k, v in preset_config("nemotron-h-8b").items() if not k.startswith("_")}
    cfg["time_step_limit"] = [0.0, float("inf")]
    text = json.dumps(cfg, indent=1)
    assert "Infinity" in text
    assert total_params(load_model(_write(tmp_path, text))) == 8_100_852_736
    bad = text.replace(f'"num_attention_heads": {cfg["num_attention_heads"]}', '"num_attention_heads": Infinity', 1)
    line = bad[:bad.index('"num_attention_heads": Infinity')].count("\n") + 1
    with pytest.raises(InputError, match=f"config.json:{line}: Infinity is not a JSON number \\(field num_attention_heads"):
        load_model(_write(tmp_path, bad))


@pytest.mark.parametrize("depth", [65, 1000, 200_000])
def test_deep_nesting_is_refused(tmp_path, depth):
    cfg = json.dumps(sample("qwen2_vl"))
    text = cfg[:-1] + ', "x": ' + "[" * depth + "]" * depth + "}"
    with pytest.raises(VlmPerfError, match="nested deeper than 64"):
        load_model(_write(tmp_path, text))


def test_oversized_config_is_refused_before_reading(tmp_path):
    path = tmp_path / "config.json"
    with path.open("wb") as fh:
        fh.truncate(17 << 20)  # sparse: no 17 MB written
    with pytest.raises(InputError, match="larger than"):
        load_model(path)


def test_duplicate_json_key_is_refused_with_its_line(tmp_path):
    text = '{\n "model_type": "qwen2",\n "hidden_size": 64,\n "hidden_size": 128\n}'
    with pytest.raises(InputError, match=r"config.json:4: duplicate key 'hidden_size'"):
        load_model(_write(tmp_path, text))


def test_messages_print_bounded_values():
    cfg = sample("llama")
    cfg["hidden_size"] = "x" * 100_000
    with pytest.raises(ConfigError) as err:
        spec_from_config(cfg)
    assert len(str(err.value)) < 300
