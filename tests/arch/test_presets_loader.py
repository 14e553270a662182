"""Preset lookup by Hugging Face repo id and HF-style names (issue 17 newcomer items): every shipped preset is reached
by its name, its source repo id (with or without the organisation, any case) and punctuation variants; unknown names
get "did you mean" suggestions, a repo id without a preset a one-line InputError; never a silent wrong preset."""

from __future__ import annotations

import pytest

from vlm_perf.arch import load_model, preset_config, preset_infos, preset_names, resolve_preset
from vlm_perf.errors import InputError


def test_every_preset_has_a_hub_repo_and_resolves_by_it():
    infos = preset_infos()
    assert [i.name for i in infos] == preset_names()
    for info in infos:
        assert info.hub_repo.count("/") == 1, info
        assert resolve_preset(info.hub_repo) == info.name
        assert resolve_preset(info.hub_repo.upper()) == info.name
        assert resolve_preset(info.hub_repo.split("/")[1]) == info.name
        assert resolve_preset(info.name) == info.name


@pytest.mark.parametrize("text,preset", [
    ("Qwen/Qwen2-VL-7B-Instruct", "qwen2-vl-7b"),
    (" qwen/qwen2.5-vl-72b-instruct ", "qwen2.5-vl-72b"),
    ("gemma-3-4b", "gemma3-4b"),
    ("google/gemma-3-27b-it", "gemma3-27b"),
    ("Gemma-3-12B-IT", "gemma3-12b"),
    ("Qwen2.5-VL-7B", "qwen2.5-vl-7b"),
    ("meta-llama/Meta-Llama-3-8B", "llama3-8b"),
    ("InternVL3-8B", "internvl3-8b"),
    ("llava-hf/llava-v1.6-mistral-7b-hf", "llava-v1.6-mistral-7b"),
])
def test_hf_names_map_to_presets(text, preset):
    assert resolve_preset(text) == preset
    spec = load_model(text)
    assert spec.name == preset and spec.source == f"preset:{preset}"
    assert preset_config(text) == preset_config(preset)


def test_no_alias_is_shared_by_two_presets():
    """qwen3-30b-a3b (LM) and qwen3-vl-30b-a3b (VLM) must never be confused by the punctuation-free forms."""
    assert resolve_preset("qwen3-30b-a3b") == "qwen3-30b-a3b"
    assert resolve_preset("Qwen3-VL-30B-A3B") == "qwen3-vl-30b-a3b"
    assert resolve_preset("Qwen/Qwen3-30B-A3B") == "qwen3-30b-a3b"


@pytest.mark.parametrize("repo,suggestion", [
    ("Qwen/Qwen2-VL-2B-Instruct", "qwen3-vl-2b"),
    ("google/gemma-3-1b-it", "gemma3-4b"),
    ("meta-llama/Llama-3.3-70B-Instruct", "llama3"),  # (Llama-3.2-11B-Vision has a preset now)
])
def test_repo_id_without_preset_is_one_line_with_suggestions(repo, suggestion):
    with pytest.raises(InputError, match="not a file and not a shipped preset: did you mean") as exc:
        load_model(repo)
    assert suggestion in str(exc.value) and "\n" not in str(exc.value)
    assert str(exc.value).startswith(repo)


def test_missing_paths_stay_file_errors():
    for text in ("some/dir/config.json", "missing.json", "./Qwen/Qwen2-VL-7B-Instruct"):
        with pytest.raises(InputError, match="no such config file"):
            load_model(text)


def test_existing_directory_wins_over_a_preset_alias(tmp_path, monkeypatch):
    """A local checkpoint directory named like a repo id is read, not replaced by the preset."""
    import json

    d = tmp_path / "Qwen" / "Qwen2-VL-7B-Instruct"
    d.mkdir(parents=True)
    cfg = {k: v for k, v in preset_config("llama3-8b").items() if not k.startswith("_")}
    (d / "config.json").write_text(json.dumps(cfg))
    monkeypatch.chdir(tmp_path)
    assert load_model("Qwen/Qwen2-VL-7B-Instruct").family == "llama"


def test_punctuation_variant_that_used_to_be_a_typo_resolves():
    assert load_model("qwen25-vl-7b").name == "qwen2.5-vl-7b"
