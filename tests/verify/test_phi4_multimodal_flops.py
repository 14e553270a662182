"""Phi-4-multimodal (transformers ``Phi4MultimodalForCausalLM``) against FlopCounterMode, per part.

Reference: the famverify harness (``tests/verify/families/phi4_multimodal.py``): a tiny random model (SigLIP-like
tower on 64-px crops of 32 x 32 patches, 2 layers with ``feature_layer`` -2, pooling head; projection 16 -> 32
-> 32; Phi-3 LM of 2 layers; a 1-block conformer that holds parameters only), eager attention, float64, crops
and placeholder counts from transformers' own ``Phi4MultimodalImageProcessor`` code (compiled from the
installed file: no torchvision here). The library starts from the SAME pixel sizes, derives crops and
placeholders with its own rule (several images: crops padded to the call's largest count, as the processor
pads them) and counts ``exact`` with ``causal="full"`` (eager computes the whole square). Exact per part
(tolerance 0). Audio: clips through transformers' own ``Phi4MultimodalFeatureExtractor`` (one call, padded to
the longest clip), the conformer encoder counted as part ``audio``. Parameters per part equal the tiny model's and
the full-size class defaults' meta-device count; the crop rule and the samples -> tokens rule are fuzzed
(seeded, bounded) against the processor's / feature extractor's own code.
"""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.measured
torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from .families import CASES, harness, measure_family  # noqa: E402

FAMILY = "phi4_multimodal"
PROCESSOR = {"preprocessor_config.json": {"size": {"height": 64, "width": 64}, "patch_size": 2, "dynamic_hd": 3}}
_models: dict = {}


def model(**over):
    key = repr(sorted(over.items()))
    if key not in _models:
        h = harness(FAMILY)
        _models[key] = h.build_model(h.tiny_config(**over), 0)
    return _models[key]


def _spec(m, processor=PROCESSOR):
    from vlm_perf.arch import spec_from_config

    return spec_from_config(m.config.to_dict(), name="tiny-phi4", processor=processor)


def _library(m, measured, images, mode="forward", frozen=()):
    from vlm_perf.commands.flops import derive_media
    from vlm_perf.flops import compute_flops
    from vlm_perf.stats import BatchStats

    spec = _spec(m)
    media = derive_media(spec, list(images), [])  # the CLI's path: one call, crops padded to the largest
    assert [d.visual_tokens for d in media] == measured.media["num_img_tokens"]  # the rule agrees with HF's
    assert sum(d.grid[0] for d in media) == measured.media["crops_in_tower"]
    stats = BatchStats.from_batch(seq_lens=[measured.media["seq_len"]], image_grids=[d.grid for d in media],
                                  spec=spec, image_merged_tokens=[d.merged_tokens for d in media])
    return compute_flops(spec, stats, mode=mode, causal="full", frozen=frozen).parts


def _check(measured: dict, library: dict):
    assert {p: library.get(p, 0) for p in measured} == measured


@pytest.mark.parametrize("case", CASES[FAMILY], ids=lambda c: "+".join(f"{h}x{w}" for h, w in c["image_sizes"]))
def test_forward_per_part(case):
    m = measure_family(FAMILY, model=model(), **case)
    _check(m.parts("forward"), _library(model(), m, case["image_sizes"]))


@pytest.mark.parametrize("frozen", [(), ("vision_tower",), ("projector",), ("vision_tower", "projector"),
                                    ("language_model",)],
                         ids=["all-trainable", "frozen-tower", "frozen-projector", "frozen-vision", "frozen-lm"])
def test_training_per_part(frozen):
    # all trainable: two images, crops padded 2 -> 4 for the second one; the frozen variants: one image (time)
    images = [(40, 130), (64, 64)] if not frozen else [(100, 70)]
    m = measure_family(FAMILY, model=model(), image_sizes=images, mode="training", frozen=frozen)
    _check(m.parts("training"), _library(model(), m, images, mode="training", frozen=frozen))


@pytest.mark.parametrize("mode,frozen", [("forward", ()), ("training", ("projector",))])
def test_last_feature_layer_trains_every_layer(mode, frozen):
    """feature_layer -1: every tower layer reaches the loss (the -2 default leaves the last forward only)."""
    m0 = model(vision={"feature_layer": -1})
    images = [(100, 70)]
    m = measure_family(FAMILY, model=m0, image_sizes=images, mode=mode, frozen=frozen)
    _check(m.parts(mode), _library(m0, m, images, mode=mode, frozen=frozen))


def _library_audio(m, measured, images, audio, mode="forward", frozen=()):
    """As :func:`_library`, with the clips through the family's audio rule (one encoder call)."""
    from vlm_perf.arch.families import FAMILIES as REG
    from vlm_perf.commands.flops import derive_media
    from vlm_perf.flops import compute_flops
    from vlm_perf.stats import BatchStats

    spec = _spec(m)
    media = derive_media(spec, list(images), [])
    clips = [REG[FAMILY].media.audio(spec, n, longest=max(audio)) for n in audio]
    assert [c.audio_tokens for c in clips] == measured.media["audio_tokens"]  # = the feature extractor's sizes
    assert max(c.mel_frames for c in clips) == measured.media["audio_frames_padded"]
    stats = BatchStats.from_batch(seq_lens=[measured.media["seq_len"]], image_grids=[d.grid for d in media],
                                  spec=spec, image_merged_tokens=[d.merged_tokens for d in media],
                                  audio_frames=[c.mel_frames for c in clips])
    return compute_flops(spec, stats, mode=mode, causal="full", frozen=frozen).parts


# clips in samples at 16 kHz: one short, two unequal (features padded to the longest), a 44-s clip whose 547
# encoder rows are cut into two 500-row pieces (the second padded; alone: transformers 5.24's unfold_tensor fails
# with a view error when several clips of one call exceed 500 rows), and an image with a clip
AUDIO_CASES = [dict(audio=[16000]), dict(audio=[16000, 5000]), dict(audio=[700000]),
               dict(images=[(100, 70)], audio=[9000])]


@pytest.mark.parametrize("case", AUDIO_CASES, ids=lambda c: "+".join(map(str, c.get("images", []) + c["audio"])))
def test_audio_forward_per_part(case):
    images = case.get("images", [])
    m = measure_family(FAMILY, model=model(), image_sizes=images, audio_samples=case["audio"])
    assert m.parts("forward")["audio"] > 0
    _check(m.parts("forward"), _library_audio(model(), m, images, case["audio"]))


@pytest.mark.parametrize("frozen", [(), ("audio",), ("language_model",), ("vision_tower", "projector")],
                         ids=["all-trainable", "frozen-audio", "frozen-lm", "frozen-vision"])
def test_audio_training_per_part(frozen):
    """Training with two clips (and an image where a vision part's freezing matters); torch's FlopCounterMode over-counts the depthwise convolutions'
    weight gradient by their channel count (it ignores ``groups``): the harness removes that
    (``PartMeasurement.grouped_conv_overcount``)."""
    images, audio = [(100, 70)] if frozen in ((), ("vision_tower", "projector")) else [], [16000, 5000]
    m = measure_family(FAMILY, model=model(), image_sizes=images, audio_samples=audio, mode="training", frozen=frozen)
    _check(m.parts("training"), _library_audio(model(), m, images, audio, mode="training", frozen=frozen))


def test_audio_rows_by_hand():
    """Two clips of 16000 and 5000 samples: mel frames (n - 400) // 160 + 1 = 98 and 29; the encoder call pads
    both to 98 frames -> 49 -> 25 -> 13 rows per clip (three stride-2 convolutions); LM placeholders ceil(98/8)
    = 13 and ceil(29/8) = 4; the conformer runs 2 x 13 rows, attention 2 x 13^2, the depthwise conv 2 x (13 + 2)
    positions; the projection 2 x 13 rows."""
    from vlm_perf.arch.families import FAMILIES as REG
    from vlm_perf.stats import BatchStats

    spec = _spec(model())
    clips = [REG[FAMILY].media.audio(spec, n) for n in (16000, 5000)]
    assert [(c.mel_frames, c.audio_tokens) for c in clips] == [(98, 13), (29, 4)]
    s = BatchStats.from_batch(seq_len=40, spec=spec, audio_frames=[98, 29])
    assert (s.audio_conv_frames, s.audio_conv_frames_s2, s.audio_conv_frames_s4, s.audio_conv_frames_s8) == (
        196, 98, 50, 26)
    assert (s.audio_tokens, s.audio_tokens_sq, s.audio_sequences, s.audio_out_tokens) == (26, 2 * 169, 2, 26)
    long = BatchStats.from_batch(seq_len=600, spec=spec, audio_frames=[4373])  # 547 rows -> 2 pieces of 500
    assert (long.audio_tokens, long.audio_tokens_sq, long.audio_sequences, long.audio_out_tokens) == (
        1000, 2 * 500 ** 2, 2, 547)


def test_no_image_runs_no_tower():
    from vlm_perf.flops import compute_flops
    from vlm_perf.stats import BatchStats

    spec = _spec(model())
    m = measure_family(FAMILY, model=model(), image_sizes=[], text_len=20, mode="training")
    lib = compute_flops(spec, BatchStats.from_batch(seq_lens=[20], spec=spec), mode="training", causal="full").parts
    _check(m.parts("training"), lib)


def _numel(mod) -> int:
    return sum(p.numel() for p in mod.parameters())


@pytest.mark.parametrize("over", [{}, {"vision": {"feature_layer": -1}, "tie_word_embeddings": True},
                                  {"audio": {"bias_symmetric": True, "depthwise_multiplier": 2, "time_reduction": 4,
                                             "downsample_rate": 2, "num_blocks": 2}}],
                         ids=["default", "tied", "audio-variant"])
def test_parameters_per_part(over):
    from vlm_perf.arch.params import count_params

    h = harness(FAMILY)
    m = h.build_model(h.tiny_config(**over), 0)
    image = m.model.embed_tokens_extend.image_embed
    c = count_params(_spec(m))
    assert c.vision_tower == _numel(image.img_processor)
    assert c.merger == _numel(image) - _numel(image.img_processor)  # projection + the two separators
    assert c.audio == _numel(m.model.embed_tokens_extend.audio_embed)
    assert c.total == _numel(m)


def test_class_default_parameters_equal_meta_count():
    """The full-size class defaults (Phi-4-multimodal-instruct's dimensions) = transformers' meta-device count,
    per part: tower 428,565,440, projector 12,984,576, audio 466,432,256, total 5,308,268,992."""
    import transformers

    from vlm_perf.arch import spec_from_config
    from vlm_perf.arch.params import count_params

    cfg = transformers.Phi4MultimodalConfig()
    with torch.device("meta"):
        m = transformers.Phi4MultimodalForCausalLM(cfg)
    image = m.model.embed_tokens_extend.image_embed
    c = count_params(spec_from_config(cfg.to_dict(), name="phi4"))
    assert (c.vision_tower, c.merger, c.audio, c.total) == (
        _numel(image.img_processor), _numel(image) - _numel(image.img_processor),
        _numel(m.model.embed_tokens_extend.audio_embed), _numel(m))
    assert c.total == 5_308_268_992


def test_projector_and_tokens_by_hand():
    """One 100 x 70 image, crops of 64 px (32 x 32 patches of 2 px), dynamic_hd 3: ceil(70/64) x ceil(100/64) =
    2 x 2 = 4 > 3 crops, so the closest aspect ratio among (1,1), (1,2), (2,1), (1,3), (3,1) to 0.7 is (1 col, 2
    rows): canvas 64 x 128, resized to 64 x 91 (int(100 * 0.64)), 37 px of bottom padding = 18 patch rows
    masked: 64 - 18 = 46 useful patch rows -> 23 pooled rows x 16 columns; placeholders 256 + 16 + 1 + 23 x 16
    + 23 = 664; tower crops 1 + 2 = 3; projector 2 x 664 x (16 x 32 + 32 x 32) FLOPs forward."""
    from vlm_perf.arch.families import FAMILIES as REG
    from vlm_perf.flops import compute_flops
    from vlm_perf.stats import BatchStats

    spec = _spec(model())
    d = REG[FAMILY].media.image(spec, 100, 70)
    assert (d.grid, d.visual_tokens, d.merged_tokens, d.detail["useful_tokens"]) == ((3, 32, 32), 664, 664, [23, 16])
    stats = BatchStats.from_batch(seq_len=700, image_grids=[d.grid], spec=spec, image_merged_tokens=[664])
    assert compute_flops(spec, stats, mode="forward").parts["projector"] == 2 * 664 * (16 * 32 + 32 * 32)


def test_refusals():
    from vlm_perf.arch import spec_from_config
    from vlm_perf.arch.families import FAMILIES as REG
    from vlm_perf.errors import InputError, UnsupportedModelError

    rule = REG[FAMILY].media
    spec = _spec(model())
    with pytest.raises(UnsupportedModelError, match="no video"):
        rule.video(spec, 4, 64, 64)
    with pytest.raises(InputError, match="analysis window"):
        rule.audio(spec, 399)
    other = model(audio={"time_reduction": 4})
    with pytest.raises(UnsupportedModelError, match="time_reduction"):
        rule.audio(_spec(other), 16000)
    with pytest.raises(InputError, match="extreme"):
        rule.image(spec, 2, 400)
    cfg = model().config.to_dict()
    small = dict(cfg, vision_config=dict(cfg["vision_config"], image_size=32, crop_size=32))
    with pytest.raises(UnsupportedModelError, match="256 \\+ 16"):
        rule.image(spec_from_config(small, name="t", processor={"preprocessor_config.json": {
            "size": {"height": 32, "width": 32}, "patch_size": 2}}), 50, 50)
    with pytest.raises(UnsupportedModelError, match="crop_size"):
        spec_from_config(dict(cfg, vision_config=dict(cfg["vision_config"], crop_size=48)), name="t")
    with pytest.raises(UnsupportedModelError, match="crop_size"):
        rule.image(_spec(model(), {"preprocessor_config.json": {"size": {"height": 48, "width": 48}}}), 50, 50)
    with pytest.raises(UnsupportedModelError, match="odd"):
        spec_from_config(dict(cfg, vision_config=dict(cfg["vision_config"], image_size=62, crop_size=62)), name="t")


def test_conventions_coverage():
    """hf-trainer / ms-swift (transformers' own ``Trainer.floating_point_ops``: 6 x non-embedding parameters,
    audio encoder included, x input ids), 6nd and exact define a number; every other convention refuses."""
    from types import SimpleNamespace

    import transformers

    from vlm_perf.errors import ConventionNotDefined
    from vlm_perf.flops import compute_flops
    from vlm_perf.flops.conventions import CONVENTIONS
    from vlm_perf.stats import BatchStats

    m = model()
    spec = _spec(m)
    ids = torch.zeros((1, 700), dtype=torch.long)
    stats = BatchStats.from_batch(seq_len=700, image_grids=[(3, 32, 32)], spec=spec, image_merged_tokens=[664])
    trainer = transformers.Trainer.floating_point_ops(SimpleNamespace(model=m), {"input_ids": ids})
    for name in ("hf-trainer", "ms-swift"):
        assert compute_flops(spec, stats, name).total == trainer
    # 6nd: the LM's matmul weights: 2 layers of q 32x32, k/v 32x16, o 32x32, SwiGLU 3 x 32x48; head 32 x 1000
    assert compute_flops(spec, stats, "6nd").total == 6 * (2 * (2 * 32 * 32 + 2 * 32 * 16 + 3 * 32 * 48)
                                                           + 32 * 1000) * 700
    # with audio: hf-trainer bills every parameter (the audio encoder's included) per input id, 6nd only the LM
    audio_stats = BatchStats.from_batch(seq_len=700, spec=spec, audio_frames=[98])
    assert compute_flops(spec, audio_stats, "hf-trainer").total == trainer
    assert compute_flops(spec, audio_stats, "6nd").parts.get("audio", 0) == 0
    defined = {"hf-trainer", "ms-swift", "6nd", "exact"}
    for name in sorted(set(CONVENTIONS) - defined):
        with pytest.raises(ConventionNotDefined, match=FAMILY):
            compute_flops(spec, stats, name)


hyp = pytest.importorskip("hypothesis")
from hypothesis import given, settings, strategies as st  # noqa: E402

FUZZ = settings(derandomize=True, deadline=None, max_examples=40)
_processors: dict = {}


@settings(derandomize=True, deadline=None, max_examples=25)
@given(n=st.integers(400, 60_000))
def test_audio_tokens_equal_hf_feature_extractor(n):
    import numpy as np

    from vlm_perf.arch.families import FAMILIES as REG

    from .families.phi4_multimodal import feature_extractor

    m = model()
    out = feature_extractor(m.config)([np.zeros(n, dtype=np.float32)], sampling_rate=16000, return_tensors="pt")
    d = REG[FAMILY].media.audio(_spec(m), n)
    assert (d.mel_frames, d.audio_tokens) == (out["audio_input_features"].shape[1], int(out["audio_embed_sizes"][0]))


@FUZZ
@given(h=st.integers(1, 500), w=st.integers(1, 500), hd=st.integers(1, 8))
def test_crops_and_placeholders_equal_hf_processor(h, w, hd):
    from vlm_perf.arch.families import FAMILIES as REG
    from vlm_perf.errors import InputError

    from .families.phi4_multimodal import hf_image_processor, random_image_tensors

    if hd not in _processors:
        _processors[hd] = hf_image_processor(64, 2, hd)
    spec = _spec(model(), {"preprocessor_config.json": {"size": {"height": 64, "width": 64}, "patch_size": 2,
                                                        "dynamic_hd": hd}})
    try:
        out = _processors[hd](random_image_tensors([(h, w)]))
    except ValueError as exc:  # "the aspect ratio is very extreme": the rule refuses the same images
        assert "extreme" in str(exc)
        with pytest.raises(InputError, match="extreme"):
            REG[FAMILY].media.image(spec, h, w)
        return
    d = REG[FAMILY].media.image(spec, h, w)
    assert d.visual_tokens == int(out["num_img_tokens"][0])
    assert d.grid[0] == out["image_pixel_values"].shape[1]
    assert list(d.resized) == [int(v) for v in out["image_sizes"][0]]


def test_metadata_audio_rows_and_refused_image_grids(tmp_path):
    """Metadata: audio rows give the encoder-call statistics of ``BatchStats.from_batch(audio_frames=...)`` (one
    call per microbatch); image grids are refused (code 36: the projector rows and padded crops do not follow
    from per-image grids), pre-aggregated vision statistics are read as given."""
    import json

    from vlm_perf.errors import VlmPerfError
    from vlm_perf.ingest.metadata_source import MetadataSource
    from vlm_perf.stats import BatchStats

    spec = _spec(model())

    def write(rows, name):
        path = tmp_path / name
        path.write_text("".join(json.dumps({"schema_version": 2, "dp_rank": 0, **r}) + "\n" for r in rows))
        return path

    audio = write([dict(iteration=0, microbatch=0, seq_lens=[40], audio_frames=[98, 29])], "a.jsonl")
    got = MetadataSource([audio], spec).per_iteration.row(0, named=True)
    want = BatchStats.from_batch(seq_lens=[40], audio_frames=[98, 29], spec=spec)
    assert {f: got[f] for f in want.field_names() if f.startswith("audio_")} == {
        f: getattr(want, f) for f in want.field_names() if f.startswith("audio_")}
    grids = write([dict(iteration=0, microbatch=0, seq_lens=[900], image_grid_thw=[[3, 32, 32]])], "g.jsonl")
    with pytest.raises(VlmPerfError, match=r"g.jsonl:1: image_grid_thw: the model's image tokens"):
        MetadataSource([grids], spec).per_iteration
    pre = write([dict(iteration=0, microbatch=0, seq_lens=[900], vision_patches=3072, vision_patches_sq=3 * 1024 ** 2,
                      vision_merged_tokens=664, vision_frames=3, vision_items=1)], "p.jsonl")
    row = MetadataSource([pre], spec).per_iteration.row(0, named=True)
    assert (row["vision_patches"], row["vision_merged_tokens"], row["vision_frames"]) == (3072, 664, 3)


def test_cli_pads_crops_per_call_and_counts_audio(tmp_path):
    """``vlm-perf flops`` on a checkpoint folder (config.json + preprocessor_config.json): two images in one batch
    (the second's crops padded to the first's count) and two clips give the measured per-part FLOPs' library
    numbers (the same path the measured tests check against FlopCounterMode)."""
    import json

    from tests.support import run_cli as cli

    m = model()
    (tmp_path / "config.json").write_text(json.dumps(m.config.to_dict()))
    (tmp_path / "preprocessor_config.json").write_text(json.dumps(PROCESSOR["preprocessor_config.json"]))
    measured = measure_family(FAMILY, model=m, image_sizes=[(40, 130), (64, 64)], audio_samples=[16000, 5000])
    r = cli("flops", "-m", str(tmp_path), "--image-size", "40,130", "--image-size", "64,64", "--audio-samples",
            "16000,5000", "--seq-lens", str(measured.media["seq_len"]), "--causal", "full", "--mode", "forward",
            "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert [d["grid"] for d in out["media"]] == [[4, 32, 32], [4, 32, 32]]
    assert [d["merged_tokens"] for d in out["media"]] == [1008, 545]
    _check(measured.parts("forward"), out["parts"])


def test_cli_refuses_audio_of_an_unmodelled_encoder_geometry(tmp_path):
    import json

    from tests.support import run_cli as cli

    (tmp_path / "config.json").write_text(json.dumps(model(audio={"time_reduction": 4}).config.to_dict()))
    r = cli("flops", "-m", str(tmp_path), "--audio-frames", "98", "--seq-len", "100")
    assert r.returncode != 0 and "time_reduction" in r.stderr and "Traceback" not in r.stderr


def test_cli_refuses_explicit_grids(tmp_path):
    """``vlm-perf flops --grid`` keeps one grid per image, whose m x m fold is not Phi-4-multimodal's projector rows
    (a 40x130 image: 1 + 3 x 1 crops of 32 x 32 patches, fold 4 x 16 x 16 = 1024, while the rule's rows are the
    global view's plus the un-padded crop area's, with separators): refused with one line, as the metadata path
    (code 36) and the run estimate refuse grids; --image-size counts the rule's rows."""
    import json

    from tests.arch.config_samples import sample
    from tests.support import run_main as cli
    from vlm_perf.arch import spec_from_config
    from vlm_perf.arch.families import FAMILIES

    pre = {"size": {"height": 64, "width": 64}, "patch_size": 2}
    (tmp_path / "config.json").write_text(json.dumps(sample(FAMILY)))
    (tmp_path / "preprocessor_config.json").write_text(json.dumps(pre))
    item = FAMILIES[FAMILY].media.image(spec_from_config(sample(FAMILY), name="t", processor={
        "preprocessor_config.json": pre}), 40, 130)
    assert item.grid == (4, 32, 32) and item.merged_tokens != 4 * 16 * 16
    r = cli("flops", "-m", str(tmp_path), "--grid", "4,32,32", "--seq-len", "2000")
    assert r.returncode == 2 and "per-image grids" in r.stderr and "Traceback" not in r.stderr
    r = cli("flops", "-m", str(tmp_path), "--image-size", "40,130", "--seq-len", "2000", "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["stats"]["vision_merged_tokens"] == item.merged_tokens
