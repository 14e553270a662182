"""Hugging Face ``config.json`` -> :class:`ModelSpec`, through the family registry.

Accepts the hub layout and the layout ``save_pretrained`` writes: LM fields either flat at the top level
(released Qwen2/2.5-VL configs) or nested under ``text_config``; vision fields under ``vision_config``.
Each family module (:mod:`vlm_perf.arch.families`) reads its own fields and handles its own traps.

A field the formulas need and the config lacks raises an error naming it; no silent default changes a
result (the only defaults are the transformers class defaults for optional switches).

A config without a top-level ``model_type`` is read by its ``text_config.model_type`` only when it has no
``vision_config`` (and the spec says so in ``extra["notes"]``); with a ``vision_config`` it is refused:
which VLM family reads that tower cannot be told, and dropping it silently would count a VLM as text-only.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any, Mapping

from ..remote import as_path
from ..errors import InputError, UnsupportedModelError
from .families import FAMILIES, family_for, supported_model_types
from .fields import Fields as _Fields  # noqa: F401  (kept importable under its old name)
from .fields import layer_index_notes
from .spec import ModelSpec
from .validate import check_config, check_spec, read_json_file



def __getattr__(name: str):
    # VLM_TYPES / LM_TYPES / SUPPORTED_MODEL_TYPES are read from the family registry at each access, so a
    # family registered after import (a plugin's register_family) is included
    if name == "VLM_TYPES":
        return tuple(t for f in FAMILIES.values() if f.is_vlm for t in f.model_types)
    if name == "LM_TYPES":
        return tuple(t for f in FAMILIES.values() if not f.is_vlm for t in f.model_types)
    if name == "SUPPORTED_MODEL_TYPES":
        return supported_model_types()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


PROCESSOR_FILES = ("preprocessor_config.json", "processor_config.json", "video_preprocessor_config.json")


def load_config_file(path: str | Path) -> dict:
    """Read ``config.json`` from a file or a directory holding one."""
    p = as_path(path)
    if p.is_dir():
        p = p / "config.json"
    if not p.is_file():
        raise InputError("no such config file (expected a config.json or a directory holding one)", str(path))
    return _read_json(p)


def _read_json(p: Path) -> dict:
    data = read_json_file(p, "config file")  # size, NaN/Infinity and nesting limits (vlm_perf.arch.validate)
    if not isinstance(data, dict):
        raise InputError("top-level JSON value must be an object", str(p))
    return data


def load_processor_files(directory: str | Path) -> dict[str, dict]:
    """The processor files a checkpoint directory ships, by file name (missing files are absent)."""
    d = as_path(directory)
    return {name: _read_json(d / name) for name in PROCESSOR_FILES if (d / name).is_file()}


def spec_from_config(config: Mapping[str, Any], name: str = "", source: str = "config",
                     processor: Mapping[str, dict] | None = None) -> ModelSpec:
    """Build a :class:`ModelSpec` (with its block inventory) from a parsed config dict."""
    model_type = config.get("model_type")
    notes: list[str] = []
    if model_type is None and isinstance(config.get("text_config"), dict):
        text_type = config["text_config"].get("model_type")
        if "vision_config" in config:
            raise UnsupportedModelError(
                f"{source}: config has no top-level model_type, only text_config.model_type {text_type!r} and a "
                "vision_config; add the checkpoint's model_type (e.g. qwen2_5_vl) so its vision tower is counted")
        model_type = text_type
        if model_type in supported_model_types():
            notes.append(f"config has no top-level model_type: read as the text-only LM {model_type!r} "
                         "from text_config")
    family = family_for(model_type, source)
    check_config(config, source)  # impossible or non-finite architectures: one line naming the field
    spec = family.build(config, source, name)
    check_spec(spec, source)
    if processor:
        spec = replace(spec, processor=dict(processor))
        if family.with_processor is not None:
            spec = family.with_processor(spec)
    notes += layer_index_notes(config, source)  # index lists naming layers the config does not have: said
    if notes:
        spec.extra.setdefault("notes", []).extend(notes)
    if isinstance(config.get("transformers_version"), str):  # the release that wrote the config (module names)
        spec.extra["transformers_version"] = config["transformers_version"]
    # the LM's attention kernel as the config states it (eager, sdpa, ...): text_config's, else the top level's
    # (transformers hands the top level's to every sub-config); vision_config's is not the LM's, and a vision tower's
    # attention is bidirectional (the whole square under any --causal), so it is not read
    text = config.get("text_config")
    for where in (text if isinstance(text, dict) else {}, config):
        value = where.get("attn_implementation", where.get("_attn_implementation"))
        if isinstance(value, str) and value:
            spec.extra.setdefault("attn_implementation", value)
    return spec
