"""Scaffolding shared by the measured tests of the fixed-tile families (DeepSeek-VL, DeepSeek-VL hybrid, Janus,
GOT-OCR2: every image becomes one or more fixed-size tiles, each a fixed number of visual tokens).

Each ``tests/verify/test_<family>_flops.py`` builds one :class:`FixedTileFamily` and keeps its own tests, cases
and hand arithmetic; this module only holds what they did the same way: the tiny-model cache, the spec from the
model's config, the library's count from the SAME pixel sizes (media by the family's own rule, ``exact`` with
``causal="full"``), the per-part comparison, the conventions check and the media-rule check against transformers'
processor. torch / transformers / vlm_perf are imported lazily.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import pytest

from .families import harness

REL_TOL = 0.005  # per part; every fixed-tile family is exact to the FLOP

# The cases every fixed-tile test file runs (same ids everywhere).
IMAGE_CASES = pytest.mark.parametrize("images", [[(30, 50)], [(70, 20), (32, 32), (5, 200)]],
                                      ids=lambda s: "+".join(f"{h}x{w}" for h, w in s))
FROZEN_CASES = pytest.mark.parametrize(
    "frozen", [(), ("vision_tower",), ("projector",), ("vision_tower", "projector"), ("language_model",)],
    ids=["all-trainable", "frozen-tower", "frozen-projector", "frozen-vision", "frozen-lm"])
TRAINING_IMAGES = [(70, 20), (32, 32)]


def numel(module) -> int:
    """Stored parameters of a torch module."""
    return sum(p.numel() for p in module.parameters())


def check_parts(measured: dict, library: dict) -> None:
    """Every measured part equals the library's within :data:`REL_TOL`."""
    bad = {p: (measured[p], library[p]) for p in measured
           if abs(library[p] - measured[p]) > REL_TOL * max(measured[p], 1)}
    assert not bad, bad


def one_square_per_image(media: list, got: dict) -> None:
    """The processor made one square tile per image, of the size the rule says."""
    assert len(media) == got["images_in_tower"]
    assert all(d.resized == got["pixel_shape"][1:] for d in media)


class FixedTileFamily:
    """One family's tiny models and library counts (``family``: the harness / FAMILIES name; ``name``: the spec's
    name; ``processor``: the processor files a spec gets when a test names none)."""

    def __init__(self, family: str, name: str, processor: dict | None = None):
        self.family, self.name, self.processor = family, name, processor or {}
        self._models: dict = {}

    def model(self, **vision: Any):
        """The tiny random model with these vision-config overrides (built once, seed 0)."""
        key = repr(sorted(vision.items()))
        if key not in self._models:
            h = harness(self.family)
            self._models[key] = h.build_model(h.tiny_config(vision=vision), 0)
        return self._models[key]

    def spec(self, m, processor: dict | None = None):
        from vlm_perf.arch import spec_from_config

        return spec_from_config(m.config.to_dict(), name=self.name,
                                processor=self.processor if processor is None else processor)

    def library(self, m, measured, images: Sequence[tuple[int, int]], mode: str = "forward", frozen=(),
                rule=None, check_media: Callable[[list, dict], None] = one_square_per_image):
        """The library's FLOPs for the sizes ``measured`` ran on, after checking its media against the processor's
        (``check_media``, then the visual tokens); ``rule``: the family's media rule unless given."""
        from vlm_perf.arch.families import FAMILIES
        from vlm_perf.flops import compute_flops
        from vlm_perf.stats import BatchStats

        spec = self.spec(m)
        rule = rule or FAMILIES[self.family].media
        media = [rule.image(spec, h, w) for h, w in images]
        check_media(media, measured.media)
        assert sum(d.visual_tokens for d in media) == measured.media["visual_tokens"]
        stats = BatchStats.from_batch(seq_lens=[measured.media["seq_len"]], image_grids=[d.grid for d in media],
                                      spec=spec)
        return compute_flops(spec, stats, mode=mode, causal="full", frozen=frozen)

    def check_conventions(self, m, seq_len: int, six_nd: int) -> None:
        """hf-trainer / ms-swift equal transformers' own ``Trainer.floating_point_ops`` on the same ids (2 samples
        of ``seq_len``, one 8 x 8 tile each); 6nd equals the caller's hand count ``six_nd``; every other convention
        is not defined for the family."""
        from types import SimpleNamespace

        import torch
        import transformers

        from vlm_perf.errors import ConventionNotDefined
        from vlm_perf.flops import compute_flops
        from vlm_perf.flops.conventions import CONVENTIONS
        from vlm_perf.stats import BatchStats

        spec = self.spec(m)
        ids = torch.zeros((2, seq_len), dtype=torch.long)
        stats = BatchStats.from_batch(seq_len=seq_len, samples=2, image_grids=[(1, 8, 8)] * 2, spec=spec)
        trainer = transformers.Trainer.floating_point_ops(SimpleNamespace(model=m), {"input_ids": ids})
        for name in ("hf-trainer", "ms-swift"):
            assert compute_flops(spec, stats, name).total == trainer
        assert compute_flops(spec, stats, "6nd").total == six_nd
        for name in sorted(set(CONVENTIONS) - {"hf-trainer", "ms-swift", "6nd", "exact"}):
            with pytest.raises(ConventionNotDefined, match=self.family):
                compute_flops(spec, stats, name)

    def check_square_media_rule(self, m, h: int, w: int) -> dict:
        """One (h, w) image: the processor made as many tiles, of the size and visual tokens, as the family's rule
        says; the processor's media (for further checks)."""
        from vlm_perf.arch.families import FAMILIES

        _, media = harness(self.family).make_inputs(m, image_sizes=[(h, w)])
        d = FAMILIES[self.family].media.image(self.spec(m), h, w)
        assert (media["images_in_tower"], media["pixel_shape"][1:]) == (d.grid[0], d.resized)
        assert media["visual_tokens"] == d.visual_tokens
        return media

    def check_one_square_refusals(self, m) -> None:
        """What every one-square family (DeepSeek-VL, its hybrid, Janus) refuses: a video, a processor whose
        ``num_image_tokens`` is not what the tower yields, an LM other than Llama."""
        from vlm_perf.arch import spec_from_config
        from vlm_perf.arch.families import FAMILIES
        from vlm_perf.errors import UnsupportedModelError

        cfg = m.config.to_dict()
        rule = FAMILIES[self.family].media
        with pytest.raises(UnsupportedModelError, match="no video"):
            rule.video(self.spec(m), 2, 32, 32)
        with pytest.raises(UnsupportedModelError, match="num_image_tokens"):
            rule.image(self.spec(m, {"processor_config.json": {"num_image_tokens": 576}}), 30, 50)
        with pytest.raises(UnsupportedModelError, match="llama"):
            spec_from_config(dict(cfg, text_config=dict(cfg["text_config"], model_type="qwen2")), name="t")


def meta_default(config_class: str, model_class: str, name: str, **config: Any):
    """transformers' ``config_class(**config)`` (its class defaults), the library's parameter inventory of it
    (``count_params``) and ``model_class`` built from it on the meta device: (counts, meta model)."""
    import torch
    import transformers

    from vlm_perf.arch import spec_from_config
    from vlm_perf.arch.params import count_params

    cfg = getattr(transformers, config_class)(**config)
    with torch.device("meta"):
        m = getattr(transformers, model_class)(cfg)
    return count_params(spec_from_config(cfg.to_dict(), name=name)), m


def any_image(side: int = 500, examples: int = 25):
    """Hypothesis, derandomized: the test runs on (h, w) images of 1 to ``side`` pixels, ``examples`` of them."""
    from hypothesis import given, settings, strategies as st

    def wrap(test):
        return settings(derandomize=True, deadline=None, max_examples=examples)(
            given(h=st.integers(1, side), w=st.integers(1, side))(test))

    return wrap
