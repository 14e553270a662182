"""An adapter config names modules; the layout knows the module names of the transformers releases it was verified
on (``VERIFIED_TRANSFORMERS``). A ``target_modules`` entry that names no module of the layout names nothing in the
model on a verified release (PEFT adapts nothing there: the count stands, with a note); on another release it may
name a module the layout lacks, so the count is refused with a message naming the release, where it was read, and
the entry. The release is the config's ``transformers_version`` (what wrote it), else the installed one."""

from __future__ import annotations

from importlib import metadata

import pytest

from vlm_perf.arch import spec_from_config
from vlm_perf.arch.adapters import AdapterConfig
from vlm_perf.arch.layout import VERIFIED_TRANSFORMERS, names_verified_on, transformers_version
from vlm_perf.arch.trainability import Trainability
from vlm_perf.errors import UnsupportedModelError
from vlm_perf.flops.regime import regime_flops
from vlm_perf.stats import BatchStats

TINY = {"model_type": "qwen2", "hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 1000, "tie_word_embeddings": False,
        "max_position_embeddings": 4096}


def _count(version, target_modules):
    config = dict(TINY, **({"transformers_version": version} if version else {}))
    spec = spec_from_config(config, name="tiny-qwen2")
    stats = BatchStats.from_batch(seq_lens=[10], spec=spec)
    return regime_flops(spec, stats, Trainability(trainable=(), adapter=AdapterConfig(r=4, target_modules=target_modules)),
                        causal="full")


def test_the_verified_range_is_the_locked_release_and_the_latest_one_measured():
    assert VERIFIED_TRANSFORMERS == ("5.24", "5.25")
    assert names_verified_on("5.24.0") and names_verified_on("5.25.0") and names_verified_on("5.25.1.dev0")
    assert not any(map(names_verified_on, ["5.23.0", "5.26.0", "4.57.1", "6.0.0", "", "main"]))


def test_the_config_records_its_release():
    spec = spec_from_config(dict(TINY, transformers_version="5.24.0"))
    assert transformers_version(spec) == ("5.24.0", "the config's transformers_version")


def test_an_entry_naming_nothing_on_a_verified_release_adds_nothing_and_says_so():
    """A generic target list (``linear_fc1`` is a Qwen3-VL tower name): PEFT adapts q_proj only."""
    got = _count("5.24.0", ("q_proj", "linear_fc1"))
    assert got.total == _count("5.24.0", ("q_proj",)).total
    assert [m.name for m in got.adapted] == ["model.layers.0.self_attn.q_proj", "model.layers.1.self_attn.q_proj"]
    assert any("'linear_fc1' names no module of this model" in n for n in got.notes)


def test_an_entry_naming_nothing_on_an_unverified_release_is_refused_naming_release_and_module():
    with pytest.raises(UnsupportedModelError, match=r"'linear_fc1'.*transformers 5\.99\.0 \(the config's "
                                                    r"transformers_version\)"):
        _count("5.99.0", ("q_proj", "linear_fc1"))


def test_a_v4_regex_on_a_v4_config_is_refused_not_counted_as_no_adapter():
    """transformers 4 named a VLM's LM ``language_model.model.layers``; such a regex matches no v5 name."""
    with pytest.raises(UnsupportedModelError, match=r"language_model.*transformers 4\.36\.0"):
        _count("4.36.0", r"language_model\.model\.layers\.\d+\.self_attn\.q_proj")


def test_known_names_on_an_unverified_release_count_with_a_note():
    got = _count("5.99.0", ("q_proj", "v_proj"))
    assert got.total == _count("5.25.0", ("q_proj", "v_proj")).total
    assert any("transformers 5.99.0" in n and "5.24-5.25 module names" in n for n in got.notes)


def test_without_a_recorded_release_the_installed_one_decides(monkeypatch):
    monkeypatch.setattr(metadata, "version", lambda name: "6.0.0")
    with pytest.raises(UnsupportedModelError, match=r"transformers 6\.0\.0 \(the installed transformers\)"):
        _count(None, ("q_proj", "linear_fc1"))


def test_with_no_release_known_the_count_stands_with_a_note(monkeypatch):
    """The base install has no transformers; a config without transformers_version: nothing says the names moved."""
    def missing(name):
        raise metadata.PackageNotFoundError(name)

    monkeypatch.setattr(metadata, "version", missing)
    got = _count(None, ("q_proj", "linear_fc1"))
    assert got.total == _count("5.24.0", ("q_proj",)).total
    assert any("release of this model is unknown" in n for n in got.notes)


def test_all_linear_names_no_module_and_is_resolved_by_type():
    got = _count("5.99.0", "all-linear")
    assert got.total == _count("5.24.0", "all-linear").total
    assert any("transformers 5.99.0" in n for n in got.notes)
