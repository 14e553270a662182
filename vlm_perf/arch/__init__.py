"""Model architecture descriptions built from Hugging Face configs (no I/O beyond reading configs)."""

from .families import FAMILIES, Family, family_for, register_family
from .families import supported_model_types
from .hf_config import load_config_file, load_processor_files, spec_from_config
from .presets_loader import PresetInfo, load_model, preset_config, preset_infos, preset_names, resolve_preset
from .spec import LMSpec, MLASpec, ModelSpec, MoESpec, VisionSpec

__all__ = ["FAMILIES", "Family", "family_for", "load_processor_files", "register_family", "LMSpec", "MLASpec", "ModelSpec", "MoESpec", "SUPPORTED_MODEL_TYPES", "VisionSpec", "load_config_file",  # noqa: F822
           "load_model", "preset_config", "preset_names", "spec_from_config", "PresetInfo", "preset_infos",
           "resolve_preset"]


def __getattr__(name: str):
    if name == "SUPPORTED_MODEL_TYPES":  # read at each access: families registered after import included
        return supported_model_types()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
