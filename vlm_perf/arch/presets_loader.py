"""Shipped model presets (config.json-shaped package data) and ``load_model``."""

from __future__ import annotations

import difflib
import json
from importlib import resources
from pathlib import Path

from ..errors import UnsupportedModelError
from .hf_config import load_config_file, load_processor_files, spec_from_config
from .spec import ModelSpec

_PRESET_DIR = "presets"


def preset_names() -> list[str]:
    """Names of the shipped presets, e.g. ``qwen3-vl-30b-a3b``."""
    root = resources.files("vlm_perf.arch").joinpath(_PRESET_DIR)
    return sorted(p.name[: -len(".json")] for p in root.iterdir() if p.name.endswith(".json"))


def preset_config(name: str) -> dict:
    """The raw config dict of a preset (as published on the Hugging Face Hub)."""
    key = name.strip().lower()
    path = resources.files("vlm_perf.arch").joinpath(_PRESET_DIR, f"{key}.json")
    if not path.is_file():
        names = preset_names()
        close = [n for n in names if n.startswith(key) or key in n][:3] or difflib.get_close_matches(
            key, names, n=3, cutoff=0.5)
        hint = f"; did you mean {', '.join(close)}?" if close else f"; known presets: {', '.join(preset_names())}"
        raise UnsupportedModelError(f"unknown model preset {name!r}{hint}")
    return json.loads(path.read_text(encoding="utf-8"))


def load_model(name_or_config: str | Path | dict) -> ModelSpec:
    """A preset name, a path to ``config.json`` (or its directory), or a config dict."""
    if isinstance(name_or_config, dict):
        return spec_from_config(name_or_config, source="dict")
    text = str(name_or_config)
    path = Path(text)
    if path.exists() or text.endswith(".json") or "/" in text:
        # a checkpoint directory may also ship processor files (preprocessor_config.json, ...)
        processor = load_processor_files(path if path.is_dir() else path.parent) if path.exists() else {}
        return spec_from_config(load_config_file(path), name=path.stem if path.is_file() else path.name,
                                source=text, processor=processor)
    config = preset_config(text)
    return spec_from_config(config, name=text.strip().lower(), source=f"preset:{text.strip().lower()}")
