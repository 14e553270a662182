"""SmolVLM's video rule (``Idefics3Media.video`` for ``smolvlm``) fuzzed against transformers' own SmolVLM code.

* Resizing: ``SmolVLMVideoProcessor.resize`` itself (transformers 5.24) on a real frame tensor. Its two calls to
  the base class's pixel resampler (torchvision, not installed here) are replaced by ``torch`` interpolation to the
  size it asks for: what is tested is which size SmolVLM asks for (the longest edge, then the square
  ``max_image_size`` tile), not how pixels are resampled.
* Sampling and placeholders: ``SmolVLMVideoProcessor.sample_frames`` on random clip metadata picks the frame
  indices; ``SmolVLMProcessor.replace_video_token`` builds the video's prompt from them with the batch padded to a
  longer video (the ``pixel_values`` frame axis). The ``<image>`` placeholders in that prompt must equal the rule's
  ``visual_tokens`` for ``frames = len(indices)`` and every frame is one tower tile. ``num2words`` (only the intro's
  "twelve frames" text) is not installed: ``str`` stands in.
Seeded (``derandomize``) and bounded.
"""

from __future__ import annotations

from types import SimpleNamespace
from unittest import mock

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
hypothesis = pytest.importorskip("hypothesis")
from hypothesis import given, settings, strategies as st  # noqa: E402

from .idefics3 import tiny_config  # noqa: E402

FUZZ = settings(max_examples=120, derandomize=True, deadline=None)


def _spec(tile: int, patch: int, scale: int, video_edge: int):
    from vlm_perf.arch import spec_from_config

    cfg = tiny_config(smolvlm=True, scale_factor=scale, vision=dict(image_size=tile, patch_size=patch))
    processor = {"video_preprocessor_config.json": {"max_image_size": {"longest_edge": tile},
                                                    "video_sampling": {"video_size": {"longest_edge": video_edge}}}}
    return spec_from_config(cfg.to_dict(), name="fuzz-smolvlm", processor=processor)


# (patch, scale, tile multiple): tiles 8..96 px, always a multiple of patch x scale as released checkpoints are
GEOMETRY = st.tuples(st.sampled_from([2, 4]), st.sampled_from([1, 2, 4]), st.integers(1, 3))


@FUZZ
@given(geometry=GEOMETRY, h=st.integers(1, 400), w=st.integers(1, 400), edge_mult=st.integers(1, 4),
       frames=st.integers(1, 3))
def test_resize_matches_smolvlm_video_processor(geometry, h, w, edge_mult, frames):
    from transformers.image_processing_utils import SizeDict
    from transformers.models.smolvlm.video_processing_smolvlm import SmolVLMVideoProcessor
    from transformers.video_processing_utils import BaseVideoProcessor

    from vlm_perf.arch.families import FAMILIES

    patch, scale, mult = geometry
    tile = patch * scale * 4 * mult
    asked: list[tuple[int, int]] = []

    def resample(self, video, size, **kw):  # stands in for torchvision: the size SmolVLM asks for, nothing else
        asked.append((size.height, size.width))
        return torch.nn.functional.interpolate(video, size=(size.height, size.width))

    proc = SmolVLMVideoProcessor.__new__(SmolVLMVideoProcessor)
    proc.max_image_size = {"longest_edge": tile}
    with mock.patch.object(BaseVideoProcessor, "resize", resample):
        out = proc.resize(torch.zeros(frames, 3, h, w), SizeDict(longest_edge=edge_mult * tile))
    assert len(asked) == 2 and asked[1] == (tile, tile)  # the first resize keeps the aspect; the second squares
    derived = FAMILIES["smolvlm"].media.video(_spec(tile, patch, scale, edge_mult * tile), frames, h, w)
    assert tuple(out.shape) == (frames, 3, *derived.resized)
    assert derived.grid == (frames, tile // patch, tile // patch)


@FUZZ
@given(geometry=GEOMETRY, total=st.integers(1, 900), video_fps=st.sampled_from([1.0, 12.0, 24.0, 25.0, 29.97, 30.0]),
       max_frames=st.integers(1, 64), target_fps=st.sampled_from([0.5, 1, 2, 4]), extra=st.integers(0, 5))
def test_placeholders_match_smolvlm_processor(geometry, total, video_fps, max_frames, target_fps, extra):
    from transformers.models.smolvlm import processing_smolvlm
    from transformers.models.smolvlm.video_processing_smolvlm import SmolVLMVideoProcessor
    from transformers.video_utils import VideoMetadata

    from vlm_perf.arch.families import FAMILIES

    patch, scale, mult = geometry
    tile = patch * scale * 4 * mult
    per_tile = int(((tile // patch) ** 2) / (scale**2))  # SmolVLMProcessor's documented image_seq_len
    clip = VideoMetadata(total_num_frames=total, fps=video_fps, duration=total / video_fps)
    indices = SmolVLMVideoProcessor.sample_frames(SimpleNamespace(num_frames=max_frames, fps=target_fps), clip)
    sampled = VideoMetadata(total_num_frames=total, fps=video_fps, duration=total / video_fps,
                            frames_indices=[int(i) for i in indices])
    fake = SimpleNamespace(image_seq_len=per_tile, image_token="<image>", fake_image_token="<fake>",
                           global_image_token="<global-img>")
    padded = torch.zeros(1, len(indices) + extra, 3, 1, 1)  # the batch's longest video sets the frame axis
    with mock.patch.object(processing_smolvlm, "num2words", str):
        prompt = processing_smolvlm.SmolVLMProcessor.replace_video_token(
            fake, {"pixel_values": padded, "video_metadata": [sampled]}, 0)
    derived = FAMILIES["smolvlm"].media.video(_spec(tile, patch, scale, 4 * tile), len(indices), 300, 200)
    assert prompt.count("<image>") == derived.visual_tokens
    assert prompt.count("<global-img>") == derived.grid[0] == derived.tiles == len(indices)


def test_idefics3_and_no_resize_are_refused():
    from vlm_perf.arch import spec_from_config
    from vlm_perf.arch.families import FAMILIES
    from vlm_perf.errors import UnsupportedModelError

    spec = spec_from_config(tiny_config().to_dict(), name="tiny-idefics3")
    with pytest.raises(UnsupportedModelError, match=r"tiny-idefics3 \(idefics3\): Idefics3Processor takes no videos"):
        FAMILIES["idefics3"].media.video(spec, 4, 64, 64)
    cfg = tiny_config(smolvlm=True).to_dict()
    spec = spec_from_config(cfg, name="x", processor={"video_preprocessor_config.json": {"do_resize": False}})
    with pytest.raises(UnsupportedModelError, match="do_resize false"):
        FAMILIES["smolvlm"].media.video(spec, 4, 64, 64)
