"""Model architecture descriptions built from Hugging Face configs (no I/O beyond reading configs)."""

from .hf_config import SUPPORTED_MODEL_TYPES, load_config_file, spec_from_config
from .presets_loader import load_model, preset_config, preset_names
from .spec import LMSpec, MLASpec, ModelSpec, MoESpec, VisionSpec

__all__ = ["LMSpec", "MLASpec", "ModelSpec", "MoESpec", "SUPPORTED_MODEL_TYPES", "VisionSpec", "load_config_file",
           "load_model", "preset_config", "preset_names", "spec_from_config"]
