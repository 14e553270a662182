"""Videos are refused exactly where transformers' processor takes none, and the refusal says why and what to do.

Independent evidence, read from the installed transformers (not from vlm-perf): the family's processor module
never mentions a ``video_processor`` (the generic ``ProcessorMixin.__call__`` then drops ``videos=``: it runs
``_process_videos`` only ``if hasattr(self, "video_processor")``) and the model's ``forward`` takes no
``*video*`` argument. SmolVLM's processor does take videos (its rule is measured and fuzzed elsewhere).
"""

from __future__ import annotations

import importlib.util
import inspect
import sys
from pathlib import Path

import pytest

from vlm_perf.arch import spec_from_config
from vlm_perf.arch.families import FAMILIES
from vlm_perf.errors import UnsupportedModelError

sys.path.insert(0, str(Path(__file__).resolve().parent))
from config_samples import SAMPLES, sample  # noqa: E402

transformers = pytest.importorskip("transformers")

# family -> (processor class named in the message, transformers module holding it)
NO_VIDEO = {
    "llava": ("LlavaProcessor", "llava"),
    "gemma3": ("Gemma3Processor", "gemma3"),
    "idefics3": ("Idefics3Processor", "idefics3"),
    "mistral3": ("PixtralProcessor", "pixtral"),
    "aya_vision": ("AyaVisionProcessor", "aya_vision"),
    "cohere2_vision": ("Cohere2VisionProcessor", "cohere2_vision"),
    "deepseek_vl": ("DeepseekVLProcessor", "deepseek_vl"),
    "llama4": ("Llama4Processor", "llama4"),
    "mllama": ("MllamaProcessor", "mllama"),
    "paligemma": ("PaliGemmaProcessor", "paligemma"),
    "llava_next": ("LlavaNextProcessor", "llava_next"),
}


def _source(module: str) -> str:
    found = importlib.util.find_spec(f"transformers.models.{module}.processing_{module}")
    assert found is not None and found.origin
    return Path(found.origin).read_text()


@pytest.mark.parametrize("family", sorted(NO_VIDEO))
def test_refused_where_transformers_takes_no_video(family):
    processor, module = NO_VIDEO[family]
    assert family in SAMPLES
    src = _source(module)
    assert f"class {processor}(" in src and "video_processor" not in src
    model_cls = getattr(transformers, FAMILIES[family].hf_class)
    assert not [p for p in inspect.signature(model_cls.forward).parameters if "video" in p]
    spec = spec_from_config(sample(family), name="ckpt")
    with pytest.raises(UnsupportedModelError) as err:
        FAMILIES[family].media.video(spec, 8, 224, 224)
    msg = str(err.value)
    assert msg.startswith(f"ckpt ({family}): {processor}") and "takes no videos" in msg
    assert FAMILIES[family].hf_class in msg and "one image per frame" in msg and "\n" not in msg


def test_smolvlm_processor_takes_videos():
    src = _source("smolvlm")
    assert "video_processor" in src and "def replace_video_token" in src
    spec = spec_from_config(sample("smolvlm"), name="ckpt")
    assert FAMILIES["smolvlm"].media.video(spec, 8, 224, 224).tiles == 8
