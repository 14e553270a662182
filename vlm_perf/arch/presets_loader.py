"""Shipped model presets (config.json-shaped package data) and ``load_model``.

A preset is reached by its name (``qwen2-vl-7b``), by the Hugging Face repo id its ``_vlm_perf_source`` names
(``Qwen/Qwen2-VL-7B-Instruct``, case-insensitive, with or without the organisation), or by a spelling that differs
only in punctuation (``gemma-3-4b`` for ``gemma3-4b``). Anything else is an error with "did you mean" suggestions.
"""

from __future__ import annotations

import difflib
import json
import re
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import NamedTuple

from ..remote import as_path
from ..errors import InputError, UnsupportedModelError
from .hf_config import load_config_file, load_processor_files, spec_from_config
from .spec import ModelSpec

_PRESET_DIR = "presets"
_HUB = re.compile(r"^https://huggingface\.co/([^/]+/[^/]+)/blob/")


class PresetInfo(NamedTuple):
    """One shipped preset: its name, the Hugging Face repo its config.json comes from, its model_type."""

    name: str
    hub_repo: str
    model_type: str


def preset_names() -> list[str]:
    """Names of the shipped presets, e.g. ``qwen3-vl-30b-a3b``."""
    root = resources.files("vlm_perf.arch").joinpath(_PRESET_DIR)
    return sorted(p.name[: -len(".json")] for p in root.iterdir() if p.name.endswith(".json"))


def _raw(name: str) -> dict:
    return json.loads(resources.files("vlm_perf.arch").joinpath(_PRESET_DIR, f"{name}.json").read_text(encoding="utf-8"))


@lru_cache(maxsize=1)
def preset_infos() -> tuple[PresetInfo, ...]:
    """Every shipped preset with the hub repo id of its source config (``""`` when the source is not a hub file)."""
    out = []
    for name in preset_names():
        cfg = _raw(name)
        m = _HUB.match(str(cfg.get("_vlm_perf_source", "")))
        out.append(PresetInfo(name, m.group(1) if m else "", str(cfg.get("model_type", ""))))
    return tuple(out)


def _squash(text: str) -> str:
    """Lower case, letters and digits only: ``Gemma-3-4B`` and ``gemma3-4b`` both give ``gemma34b``."""
    return re.sub(r"[^a-z0-9]", "", text.lower())


@lru_cache(maxsize=1)
def _aliases() -> dict[str, str]:
    """Lookup key -> preset name: the name, the hub repo id and its part after the slash (lower case), and the
    squashed forms of each. A key two presets would share is dropped (never a silent pick)."""
    seen: dict[str, set[str]] = {}
    for info in preset_infos():
        keys = {info.name, _squash(info.name)}
        if info.hub_repo:
            repo = info.hub_repo.lower()
            keys |= {repo, repo.split("/", 1)[1], _squash(repo.split("/", 1)[1])}
        for key in keys:
            seen.setdefault(key, set()).add(info.name)
    return {key: next(iter(names)) for key, names in seen.items() if len(names) == 1}


def resolve_preset(text: str) -> str | None:
    """The preset ``text`` names (a preset name, a hub repo id, a punctuation variant), or None."""
    key = text.strip().lower()
    if key.count("/") > 1 or key.startswith((".", "/", "~")) or key.endswith(".json"):
        return None  # a path, never a preset
    aliases = _aliases()
    for candidate in (key, key.split("/", 1)[1] if key.count("/") == 1 else key, _squash(key.split("/")[-1])):
        if candidate in aliases:
            return aliases[candidate]
    return None


def _suggestions(text: str) -> list[str]:
    key = text.strip().lower()
    tail = key.split("/")[-1]
    names = preset_names()
    close = [n for n in names if n.startswith(tail) or tail in n][:3]
    if not close:
        pool = {_squash(n): n for n in names}
        for info in preset_infos():
            if info.hub_repo:
                pool.setdefault(_squash(info.hub_repo.split("/", 1)[1]), info.name)
        close = list(dict.fromkeys(pool[m] for m in difflib.get_close_matches(_squash(tail), list(pool), n=3,
                                                                              cutoff=0.7)))
    if not close:
        close = difflib.get_close_matches(tail, names, n=3, cutoff=0.5)
    return close


def _unknown(name: str) -> str:
    close = _suggestions(name)
    if close:
        return f"unknown model preset {name!r}; did you mean {', '.join(close)}?"
    return f"unknown model preset {name!r}; known presets: {', '.join(preset_names())} (vlm-perf families --presets)"


def preset_config(name: str) -> dict:
    """The raw config dict of a preset (as published on the Hugging Face Hub), by any name
    :func:`resolve_preset` accepts."""
    resolved = resolve_preset(name)
    if resolved is None:
        raise UnsupportedModelError(_unknown(name))
    return _raw(resolved)


def load_model(name_or_config: str | Path | dict) -> ModelSpec:
    """A preset name (or the hub repo id of a shipped preset), a path to ``config.json`` (or its directory), or a
    config dict."""
    if isinstance(name_or_config, dict):
        return spec_from_config(name_or_config, source="dict")
    text = str(name_or_config)
    path = as_path(text)  # a URL names a config.json (or its folder) in an object store (vlm_perf.remote)
    if path.exists():
        # a checkpoint directory may also ship processor files (preprocessor_config.json, ...)
        processor = load_processor_files(path if path.is_dir() else path.parent)
        return spec_from_config(load_config_file(path), name=path.stem if path.is_file() else path.name,
                                source=text, processor=processor)
    resolved = resolve_preset(text)
    if resolved is not None:
        return spec_from_config(_raw(resolved), name=resolved, source=f"preset:{resolved}")
    if "/" not in text and not text.endswith(".json"):
        raise UnsupportedModelError(_unknown(text))
    if text.endswith(".json") or text.count("/") != 1 or text.startswith((".", "/", "~")):
        load_config_file(path)  # a path that does not exist: the usual one-line InputError
    # "org/name": a Hugging Face repo id without a shipped preset (nothing is downloaded)
    close = _suggestions(text)
    hint = f"did you mean {', '.join(close)}? " if close else ""
    raise InputError(f"not a file and not a shipped preset: {hint}for another checkpoint download its config.json "
                     "(and processor files) and pass the directory; vlm-perf families --presets lists the presets",
                     text)
