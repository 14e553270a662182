"""Model architecture descriptions built from Hugging Face configs (no I/O beyond reading configs)."""

from .families import FAMILIES, Family, family_for, register_family
from .hf_config import SUPPORTED_MODEL_TYPES, load_config_file, load_processor_files, spec_from_config
from .presets_loader import PresetInfo, load_model, preset_config, preset_infos, preset_names, resolve_preset
from .spec import LMSpec, MLASpec, ModelSpec, MoESpec, VisionSpec

__all__ = ["FAMILIES", "Family", "family_for", "load_processor_files", "register_family", "LMSpec", "MLASpec", "ModelSpec", "MoESpec", "SUPPORTED_MODEL_TYPES", "VisionSpec", "load_config_file",
           "load_model", "preset_config", "preset_names", "spec_from_config", "PresetInfo", "preset_infos",
           "resolve_preset"]
