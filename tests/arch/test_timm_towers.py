"""Gemma 3n and PerceptionLM: their vision towers are timm models (``TimmWrapperModel``), which cannot be built in the
verified CPU stack, so both whole models are refused in one line naming timm and the LM config that IS counted."""

from __future__ import annotations

import pytest

from vlm_perf.arch import spec_from_config
from vlm_perf.errors import UnsupportedModelError


@pytest.mark.parametrize("model_type,tower,lm", [("gemma3n", "MobileNetV5", "gemma3n_text"),
                                                 ("perception_lm", "Perception Encoder", "llama")])
def test_timm_tower_models_are_refused_naming_timm(model_type, tower, lm):
    with pytest.raises(UnsupportedModelError, match=f"{tower}.*timm.*torchvision.*{lm}") as err:
        spec_from_config({"model_type": model_type}, source="config.json")
    assert "\n" not in str(err.value) and str(err.value).startswith("config.json: model_type")


@pytest.mark.slow
@pytest.mark.parametrize("name", ["PerceptionLM", "Gemma3n"])
def test_transformers_itself_needs_timm_for_these_towers(name):
    """The reason holds while timm is absent: transformers will not build either model without it (if timm joins
    the stack, this fails and the refusals above should become families)."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    config = getattr(transformers, f"{name}Config")()
    with pytest.raises(ImportError, match="timm"), torch.device("meta"):
        getattr(transformers, f"{name}ForConditionalGeneration")(config)
