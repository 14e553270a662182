"""Seeded, bounded fuzz of the three inputs a user hands over (issue 17): config.json, run.yaml and metadata
against the config. Every mutated input must either be refused with a VlmPerfError (one line) or be read
exactly: an accepted config mutation leaves the model unchanged (the field is not one the family reads) unless
the new value is a valid one; an accepted run.yaml keeps every other key and a value of the declared type; an
accepted metadata row gives the statistics computed by hand here. No other exception, no hang (hypothesis
deadline off, example counts bounded; the whole file runs in well under 30 s).
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

sys.path.insert(0, str(Path(__file__).resolve().parent / "arch"))
from config_samples import SAMPLES, sample  # noqa: E402

from vlm_perf.arch import load_model, spec_from_config  # noqa: E402
from vlm_perf.arch.fields import text_section  # noqa: E402
from vlm_perf.arch.validate import AUDIO_FIELDS, INDEX_FIELDS, POS, TEXT_FIELDS, TOP_FIELDS, VISION_FIELDS, VISION_SQUARE  # noqa: E402
from vlm_perf.errors import VlmPerfError  # noqa: E402

FUZZ = settings(derandomize=True, deadline=None, database=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


# ----------------------------------------------------------------------------------------- config.json
def _numeric_leaves(cfg: dict) -> list[tuple[str, ...]]:
    """Paths of every numeric (non-bool) value directly in the top level, text_config, vision_config and
    audio_config (an Omni config's sections under ``thinker_config``)."""
    out = []
    thinker = cfg.get("thinker_config")
    root, base = (thinker, ("thinker_config",)) if isinstance(thinker, dict) else (cfg, ())
    for path, section in ((base, root), *((base + (name,), root.get(name))
                                         for name in ("text_config", "vision_config", "audio_config"))):
        if not isinstance(section, dict):
            continue
        for key, value in section.items():
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                out.append(path + (key,))
    return out


LEAVES = [(family, path) for family in SAMPLES for path in _numeric_leaves(sample(family))]
MUTATIONS = ("zero", "negative", "nan", "inf", "huge", "string", "list", "missing")


def _kind_of(family: str, path: tuple[str, ...]):
    """The declared kind of a field, as the reader sees it (None: not a declared structural field)."""
    key = path[-1]
    if path[0] == "thinker_config":  # an Omni thinker: its sections are read like a top-level config's
        path = path[1:] or path
        if path[0] == "audio_config":
            return AUDIO_FIELDS.get(key)
    if path[0] == "audio_config":  # Phi-4-multimodal's conformer at the top level
        return AUDIO_FIELDS.get(key)
    if path[0] == "vision_config":
        return POS if key in VISION_SQUARE else VISION_FIELDS.get(key)
    _, section = text_section(sample(family))
    if len(path) == 1 and not section:  # flat LM fields at the top level
        return TEXT_FIELDS.get(key) or TOP_FIELDS.get(key)
    return (TEXT_FIELDS if path[0] == "text_config" else TOP_FIELDS).get(key)


def _mutate(cfg: dict, path: tuple[str, ...], mutation: str) -> None:
    node = cfg
    for key in path[:-1]:
        node = node[key]
    value = {"zero": 0, "negative": -3, "nan": math.nan, "inf": math.inf, "huge": 2**62, "string": "12",
             "list": [12]}.get(mutation)
    if mutation == "missing":
        del node[path[-1]]
    else:
        node[path[-1]] = value


def _fingerprint(spec) -> tuple:
    return spec.lm, spec.vision, spec.blocks


_BASE: dict[str, tuple] = {}


def _base(family: str) -> tuple:
    if family not in _BASE:
        _BASE[family] = _fingerprint(spec_from_config(sample(family)))
    return _BASE[family]


def _single_mutation_problem(family: str, path: tuple[str, ...], mutation: str) -> str | None:
    cfg = sample(family)
    _mutate(cfg, path, mutation)
    try:
        spec = spec_from_config(cfg)
    except VlmPerfError as exc:
        return "a multi-line error" if "\n" in str(exc) else None
    if _fingerprint(spec) == _base(family):
        return None  # a field this family does not read (or a mutation to its default)
    if path[-1] in INDEX_FIELDS and mutation in ("zero", "negative", "list"):
        return None  # another valid layer index (range-checked against the tower depth)
    kind = _kind_of(family, path)
    # a different model is allowed only when the new value is a valid one for a declared field: a missing
    # optional field (class default), or 0 where 0 is meaningful (no shared experts, no sliding window, ...)
    if kind is None:
        return "changed the model but is not a declared field"
    if mutation == "missing" or (mutation == "zero" and kind.low == 0):
        return None
    return "silently changed the model"


def test_config_mutations_error_or_change_nothing():
    """Exhaustive (every numeric field of every family's sample x every mutation, about 4,300 cases, a few
    seconds): the fuzz space is small enough to enumerate, so nothing is left to the sampler."""
    problems = [f"{family}: {'.'.join(path)} -> {mutation}: {problem}"
                for family, path in LEAVES for mutation in MUTATIONS
                if (problem := _single_mutation_problem(family, path, mutation))]
    assert not problems, "\n".join(problems[:20])


@settings(FUZZ, max_examples=150)
@given(st.data())
def test_config_double_mutations_never_crash(data):
    family = data.draw(st.sampled_from(SAMPLES))
    cfg = sample(family)
    for path in data.draw(st.lists(st.sampled_from(_numeric_leaves(cfg)), min_size=2, max_size=3, unique=True)):
        _mutate(cfg, path, data.draw(st.sampled_from(MUTATIONS)))
    try:
        spec_from_config(cfg)
    except VlmPerfError:
        pass


# -------------------------------------------------------------------------------------------- run.yaml
from vlm_perf.ingest.runconfig import _INT_FIELDS, INT_MAX, MANIFEST_KEYS, load_manifest  # noqa: E402

MANIFEST = {"model": "qwen2.5-vl-7b", "num_gpus": 8, "gpu": "H100", "frozen": ["vision_tower"], "log_interval": 10,
            "seq_length": 4096, "global_batch_size": 256, "image_grid": [1, 28, 28], "seed": 3, "synthetic": False}
_scalars = st.one_of(st.integers(-2**70, 2**70), st.floats(allow_nan=True, allow_infinity=True),
                     st.text(max_size=12), st.booleans(), st.none())
_values = st.recursive(_scalars, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                         st.dictionaries(st.text(max_size=5), inner, max_size=3)),
                       max_leaves=8)


def _yaml_text(values: dict) -> str:
    import yaml

    return yaml.safe_dump(values, sort_keys=False)


@settings(FUZZ, max_examples=200)
@given(key=st.sampled_from(MANIFEST_KEYS), value=_values, duplicate=st.booleans())
def test_run_yaml_mutations_error_or_read_exactly(tmp_path_factory, key, value, duplicate):
    manifest = dict(MANIFEST, **{key: value})
    text = _yaml_text(manifest)
    if duplicate:
        text += _yaml_text({key: MANIFEST.get(key, "x")})
    path = tmp_path_factory.mktemp("m") / "run.yaml"
    path.write_text(text)
    try:
        out = load_manifest(path)
    except VlmPerfError as exc:
        assert "\n" not in str(exc) and len(str(exc)) < 800
        return
    assert not duplicate, "a duplicate key was accepted"
    for other, original in MANIFEST.items():
        if other != key:
            assert out[other] == (tuple(original) if isinstance(original, list) else original)
    if value is None:
        assert key not in out
    elif key in _INT_FIELDS:
        assert isinstance(out[key], int) and 0 < out[key] <= INT_MAX.get(key, 1 << 31) and out[key] == value


@settings(FUZZ, max_examples=40)
@given(levels=st.integers(1, 12), width=st.integers(1, 12))
def test_run_yaml_aliases_are_bounded(tmp_path_factory, levels, width):
    lines = ["a0: &a0 x"]
    for i in range(1, levels):
        lines.append(f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * width) + "]")
    path = tmp_path_factory.mktemp("b") / "run.yaml"
    path.write_text("\n".join(lines) + f"\nnotes: *a{levels - 1}\n")
    with pytest.raises(VlmPerfError):  # a0.. are unknown keys; the point: refused fast, never expanded
        load_manifest(path)


# ------------------------------------------------------------------------------------ metadata vs config
MODELS = {"qwen2.5-vl-7b": 2, "smolvlm2-500m": 4, "llama3-8b": None}  # preset -> merge size (None: text-only)
_grid = st.tuples(st.integers(-1, 3), st.integers(-2, 24), st.integers(-2, 24))
_row = st.fixed_dictionaries({"iteration": st.integers(0, 3)}, optional={
    "seq_lens": st.lists(st.integers(-5, 3000), max_size=4),
    "image_grid_thw": st.lists(_grid, max_size=3),
    "video_grid_thw": st.lists(_grid, max_size=2),
    "padded_tokens": st.integers(-5, 9000),
})


def _hand(row: dict, merge: int | None) -> tuple[int, int] | None:
    """(LM tokens, merged visual tokens) of a row by hand, or None when the row must be refused."""
    seq = row.get("seq_lens")
    if seq is not None and (not seq or any(s <= 0 for s in seq)):
        return None
    grids = row.get("image_grid_thw", []) + row.get("video_grid_thw", [])
    if grids and merge is None:
        return None
    m = merge or 2
    if any(t <= 0 or h <= 0 or w <= 0 or h % m or w % m for t, h, w in grids):
        return None
    tokens = sum(seq) if seq is not None else row.get("padded_tokens")
    if tokens is None:
        return None
    padded = row.get("padded_tokens")
    if padded is not None and (padded <= 0 or padded < tokens):
        return None
    visual = sum(t * (h // m) * (w // m) for t, h, w in grids)
    if visual > tokens:
        return None
    return tokens, visual


@settings(FUZZ, max_examples=100)
@given(preset=st.sampled_from(list(MODELS)), rows=st.lists(_row, min_size=1, max_size=6))
def test_metadata_against_config_errors_or_matches_hand_arithmetic(tmp_path_factory, preset, rows):
    from vlm_perf.ingest.metadata_source import MetadataSource

    path = tmp_path_factory.mktemp("meta") / "m.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    expected = [_hand(r, MODELS[preset]) for r in rows]
    try:
        src = MetadataSource(path, load_model(preset), prefetch=False).read()
    except VlmPerfError as exc:
        bad = next(i for i, e in enumerate(expected) if e is None) if None in expected else None
        assert bad is not None, f"refused a valid file: {exc}"
        assert f"m.jsonl:{bad + 1}:" in str(exc)
        return
    assert None not in expected, "accepted a row that must be refused"
    per = {it: (0, 0) for it in {r["iteration"] for r in rows}}
    for r, (tokens, visual) in zip(rows, expected):
        per[r["iteration"]] = (per[r["iteration"]][0] + tokens, per[r["iteration"]][1] + visual)
    got = {it: (lm, vis) for it, lm, vis in src.per_iteration.select("iteration", "lm_tokens",
                                                                     "vision_merged_tokens").iter_rows()}
    assert got == per
