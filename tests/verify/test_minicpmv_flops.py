"""MiniCPM-V 4.6 / 4.7 / MiniCPM-OCR (transformers ``MiniCPMV4_6`` / ``MiniCPMV4_7`` / ``MiniCPMOcr``
``ForConditionalGeneration``) against FlopCounterMode, per part, and the slicing rule against transformers'
``MiniCPMV4_6ImageProcessorPil``.

Reference: the famverify harness (``tests/verify/families/minicpmv.py``): tiny random models (tower 3 x 32,
window-attention merger after layer 1, merger 128 -> 64; the qwen3_5 harness's hybrid LM), eager attention,
float64, images through transformers' image processor (MiniCPM-OCR: explicit patch grids, its processor needs
torchvision). The library derives grids with its own media rule (settings given as a checkpoint directory's
preprocessor_config.json would) and counts ``exact`` with ``causal="full"``. LM lengths are multiples of 64:
the delta rule's torch fallback pads to its chunk (tests/verify/test_qwen3_5_flops.py pins that difference).
"""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.measured
torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from .families import measure_family  # noqa: E402
from .families.minicpmv import SCALE, build_model, processor_grids, tiny_config  # noqa: E402

FAMILIES = ("minicpmv4_6", "minicpmv4_7", "minicpm_ocr")
# several images per sample: an image sliced 2x3 (overview 8x8 patches, slices 8x8), a small image upscaled to
# the overview with a 3-slice tall image (slices 8x8 next to a 12x4 overview); OCR ("4x"): grids in patches
IMAGE_CASES = [dict(image_sizes=[(30, 50)]), dict(image_sizes=[(10, 12), (40, 20)])]
OCR_CASES = [dict(grids=[[(8, 8), (4, 6), (4, 6)]]), dict(grids=[[(6, 10)], [(4, 4), (8, 2)]])]


def _cases(family):
    return OCR_CASES if family == "minicpm_ocr" else IMAGE_CASES


def _id(case):
    if "grids" in case:
        return "grids" + "+".join("/".join(f"{h}x{w}" for h, w in item) for item in case["grids"])
    return "+".join(f"{h}x{w}" for h, w in case["image_sizes"])


@pytest.fixture(scope="module", params=FAMILIES)
def model(request):
    return build_model(tiny_config(request.param), 0)


def _spec(model):
    from vlm_perf.arch import spec_from_config

    pre = {"patch_size": model.config.vision_config.patch_size, "scale_resolution": SCALE,
           "downsample_mode": model.config.downsample_mode}
    return spec_from_config(model.config.to_dict(), name="tiny-minicpmv", processor={"preprocessor_config.json": pre})


def _aligned(model, case, multiple=64):
    from .families import processor_media

    media = processor_media(model.config.model_type, model.config, text_len=0, **case)
    return dict(case, text_len=(-media["seq_len"]) % multiple + multiple)


def _library(model, measured, case, mode="forward", frozen=()):
    from vlm_perf.arch.families import FAMILIES as REG
    from vlm_perf.flops import compute_flops
    from vlm_perf.stats import BatchStats

    spec = _spec(model)
    if case.get("image_sizes"):
        media = [REG[spec.family].media.image(spec, h, w) for h, w in case["image_sizes"]]
        grids = [g for item in media for g in item.grids]
        # the media rule agrees with HF's processor: grids (overview, then the slices) and placeholder count
        assert [[(h, w) for t, h, w in item.grids for _ in range(t)] for item in media] == measured.media["per_image"]
        assert sum(item.visual_tokens for item in media) == measured.media["visual_tokens"]
    else:
        grids = [(1, h, w) for item in case.get("grids", ()) for h, w in item]
    stats = BatchStats.from_batch(seq_lens=[measured.media["seq_len"]], image_grids=grids,
                                  video_grids=measured.media.get("video_grids", []), spec=spec)
    return compute_flops(spec, stats, mode=mode, causal="full", frozen=frozen)


def test_forward_per_part_exact(model):
    for case in _cases(model.config.model_type):
        case = _aligned(model, case)
        m = measure_family(model.config.model_type, model=model, **case)
        assert m.media["seq_len"] % 64 == 0
        assert _library(model, m, case).parts == m.parts("forward"), _id(case)


@pytest.mark.parametrize("frozen", [(), ("vision_tower",), ("language_model",)],
                         ids=["all-trainable", "frozen-tower", "frozen-lm"])
def test_training_per_part_exact(model, frozen):
    """Frozen tower: the projector's first GEMM still needs its input gradient (its LayerNorm trains)."""
    case = _aligned(model, _cases(model.config.model_type)[1])
    m = measure_family(model.config.model_type, model=model, mode="training", frozen=frozen, **case)
    lib = _library(model, m, case, mode="training", frozen=frozen)
    assert lib.parts == m.parts("training")  # grouped-conv grad-weight over-count removed (harness default)


def test_parameters_per_part(model):
    from vlm_perf.arch.params import count_params

    c = count_params(_spec(model))
    numel = lambda mod: sum(p.numel() for p in mod.parameters())  # noqa: E731
    assert c.vision_tower == numel(model.model.vision_tower)
    assert c.merger == numel(model.model.merger)
    assert c.total == numel(model)  # tied lm_head (MiniCPM-OCR) counted once, as parameters() does


def test_window_merger_by_hand():
    """The 16x tower by hand for one 8x8 slice: patch embed, 2 layers on 64 patches, the merger (attention in
    16 windows of 4, MLP on 16 rows), 1 layer on 16 tokens; widths of the tiny config (h 32, i 64, patch 2)."""
    from vlm_perf.arch import spec_from_config
    from vlm_perf.flops import compute_flops
    from vlm_perf.stats import BatchStats

    spec = spec_from_config(tiny_config("minicpmv4_6").to_dict(), name="tiny")
    h, i, n = 32, 64, 64

    def layer(rows):
        return 2 * rows * (4 * h * h + 2 * h * i) + 4 * h * rows * rows

    merger = 2 * n * 4 * h * h + 4 * h * 4 * n + 2 * (n // 4) * (4 * h * 4 * i + 4 * i * h)
    tower = 2 * n * 3 * 2 * 2 * h + 2 * layer(n) + merger + layer(n // 4)
    projector = 2 * (n // 16) * (4 * h * 4 * h + 4 * h * 64)
    stats = BatchStats.from_batch(seq_lens=[64], image_grids=[(1, 8, 8)], spec=spec)
    parts = compute_flops(spec, stats, mode="forward", causal="full").parts
    assert (parts["vision_tower"], parts["projector"]) == (tower, projector)


def _rule_vs_processor(spec, config, sizes, scale, **kw):
    from vlm_perf.arch.families import FAMILIES as REG

    out, per_image = processor_grids(config, sizes, scale, **kw)
    fold2 = 16 if config.downsample_mode == "16x" else 4
    for (hp, wp), hf, slices in zip(sizes, per_image, out["grids"]):
        item = REG[spec.family].media.image(spec, hp, wp)
        assert [(h, w) for t, h, w in item.grids for _ in range(t)] == hf, (hp, wp)
        assert item.visual_tokens == sum(h * w // fold2 for h, w in hf)
        assert list(item.detail["slices"]) == list(slices)


def test_media_rule_fuzzed_against_processor():
    """Seeded, bounded fuzz of the slicing rule against MiniCPMV4_6ImageProcessorPil: image sizes, scale
    resolution, slice cap and downsample mode (the tower's patch stays 2)."""
    pytest.importorskip("hypothesis")
    from hypothesis import given, settings, strategies as st

    from vlm_perf.arch import spec_from_config

    @settings(derandomize=True, deadline=None, max_examples=300)
    @given(sizes=st.lists(st.tuples(st.integers(1, 160), st.integers(1, 160)), min_size=1, max_size=3),
           scale=st.integers(4, 40), max_slices=st.integers(1, 12), mode=st.sampled_from(["16x", "4x"]))
    def check(sizes, scale, max_slices, mode):
        config = tiny_config("minicpmv4_6", downsample_mode=mode)
        pre = {"patch_size": 2, "scale_resolution": scale, "max_slice_nums": max_slices, "downsample_mode": mode}
        spec = spec_from_config(config.to_dict(), name="tiny", processor={"preprocessor_config.json": pre})
        _rule_vs_processor(spec, config, sizes, scale, max_slice_nums=max_slices)

    check()


def test_media_rule_real_sizes():
    """The class defaults (scale 448, patch 14, 9 slices, 16x) on photo-like sizes, against the processor."""
    from vlm_perf.arch import spec_from_config

    config = tiny_config("minicpmv4_6", vision={"patch_size": 14, "image_size": 980})
    spec = spec_from_config(config.to_dict(), name="tiny")  # no processor files: class defaults
    _rule_vs_processor(spec, config, [(1080, 1920), (448, 448), (300, 2000), (3000, 4000), (100, 80)], 448)


def test_refusals():
    from vlm_perf.arch import spec_from_config
    from vlm_perf.arch.families import FAMILIES as REG
    from vlm_perf.errors import ConfigError, UnsupportedModelError

    base = tiny_config("minicpmv4_6").to_dict()
    spec = spec_from_config(base, name="tiny")
    with pytest.raises(UnsupportedModelError, match="stack_frames"):  # stacked canvases depend on the duration
        REG["minicpmv4_6"].media.video(spec_from_config(base, name="x", processor={
            "video_preprocessor_config.json": {"patch_size": 2, "stack_frames": 3}}), 4, 64, 64)
    with pytest.raises(ConfigError, match="max_num_frames"):
        REG["minicpmv4_6"].media.video(spec_from_config(base, name="x", processor={
            "video_preprocessor_config.json": {"patch_size": 2, "max_num_frames": 0}}), 4, 64, 64)
    with pytest.raises(UnsupportedModelError, match="video processor's patch_size"):  # class default 14 vs 2
        REG["minicpmv4_6"].media.video(spec, 4, 64, 64)
    ocr = spec_from_config(tiny_config("minicpm_ocr").to_dict(), name="tiny-ocr", processor={
        "preprocessor_config.json": {"patch_size": 2, "small_image_upsize": "adaptive"}})
    with pytest.raises(UnsupportedModelError, match="small_image_upsize"):  # content-dependent upscaling
        REG["minicpm_ocr"].media.image(ocr, 64, 64)
    with pytest.raises(UnsupportedModelError, match="downsample_mode"):  # processor 16x (default) vs model 4x
        REG["minicpmv4_6"].media.image(spec_from_config({**base, "downsample_mode": "4x"}, name="x", processor={
            "preprocessor_config.json": {"patch_size": 2}}), 64, 64)
    for bad, err in (({"merger_times": 2}, UnsupportedModelError), ({"insert_layer_id": 3}, UnsupportedModelError),
                     ({"downsample_mode": "8x"}, ConfigError), ({"merge_kernel_size": [3, 3]}, UnsupportedModelError)):
        with pytest.raises(err):
            spec_from_config({**base, **bad}, name="bad")
    with pytest.raises(UnsupportedModelError, match="qwen3_5_moe_text"):
        spec_from_config({**base, "text_config": {**base["text_config"], "model_type": "llama"}}, name="bad")


def test_preset_equals_meta_device_count_and_hub_total():
    """minicpm-v-4.6: the hub's safetensors total 1,300,428,016 (BF16, tied head, no MTP tensors) = transformers'
    meta-device count of MiniCPMV4_6ForConditionalGeneration on the preset = the library, per part too."""
    import transformers

    from vlm_perf.arch import load_model, preset_config
    from vlm_perf.arch.params import count_params

    cfg = {k: v for k, v in preset_config("minicpm-v-4.6").items() if not k.startswith("_")}
    with torch.device("meta"):
        hf = transformers.MiniCPMV4_6ForConditionalGeneration(transformers.AutoConfig.for_model(**cfg))
    numel = lambda mod: sum(p.numel() for p in mod.parameters())  # noqa: E731
    c = count_params(load_model("minicpm-v-4.6"))
    assert (c.vision_tower, c.merger, c.total) == (numel(hf.model.vision_tower), numel(hf.model.merger), numel(hf))
    assert c.total == 1_300_428_016


@pytest.mark.parametrize("mode,frozen", [("forward", ()), ("training", ()), ("training", ("vision_tower",))])
def test_video_frames_through_the_video_path(model, mode, frozen):
    """Videos through the model's own video path (``pixel_values_videos`` / ``target_sizes_videos``, packed as
    the video processor packs them), next to an image: every frame is its overview + slices, counted as video
    grids (the pixel rule for videos is refused: the video processor needs torchvision)."""
    fold = 4 if model.config.downsample_mode == "16x" else 2
    unit = [(2 * fold, 3 * fold), (fold, 2 * fold), (fold, 2 * fold)]  # overview + 2 slices per frame
    case = dict(grids=[[(2 * fold, 2 * fold)]], video_frames=[(3, unit)])
    case = _aligned(model, case)
    m = measure_family(model.config.model_type, model=model, mode=mode, frozen=frozen, **case)
    assert len(m.media["video_grids"]) == 9
    assert _library(model, m, case, mode=mode, frozen=frozen).parts == m.parts(mode)


def test_one_grid_per_item_consumers_refuse_sliced_images(tmp_path):
    """Metadata rows with image_sizes (one grid per item there) refuse a sliced MiniCPM-V image with a one-line
    SchemaError naming file:line and the field, instead of dropping its slices; its grids are accepted."""
    import json

    from vlm_perf.arch import load_model
    from vlm_perf.errors import SchemaError
    from vlm_perf.ingest.metadata_source import MetadataSource

    spec = load_model("minicpm-v-4.6")
    base = {"schema_version": 2, "iteration": 1, "microbatch": 0, "dp_rank": 0, "seq_lens": [4096]}
    path = tmp_path / "m.jsonl"
    path.write_text(json.dumps({**base, "image_sizes": [[1080, 1920]]}) + "\n")
    with pytest.raises(SchemaError, match=r"m.jsonl:1: image_sizes: ") as info:
        MetadataSource(path, spec, per_microbatch=True).per_iteration
    assert "\n" not in str(info.value)
    grids = [[1, 24, 44], [8, 32, 32]]  # the rule's overview + slices for 1080 x 1920 (tests above)
    path.write_text(json.dumps({**base, "image_grid_thw": grids}) + "\n")
    frame = MetadataSource(path, spec, per_microbatch=True).per_iteration
    assert int(frame["vision_patches"][0]) == 24 * 44 + 8 * 32 * 32
    path.write_text(json.dumps({**base, "video_sizes": [[8, 720, 1280]]}) + "\n")  # sliced frames: refused too
    with pytest.raises(SchemaError, match=r"m.jsonl:1: video_sizes: ") as info:
        MetadataSource(path, spec, per_microbatch=True).per_iteration
    assert "\n" not in str(info.value)
    # 4 frames of 224 x 224 (< 448², not sliced): upscaled to 448 x 448 = one grid (4, 32, 32)
    path.write_text(json.dumps({**base, "video_sizes": [[4, 224, 224]]}) + "\n")
    frame = MetadataSource(path, spec, per_microbatch=True).per_iteration
    assert int(frame["vision_patches"][0]) == 4 * 32 * 32


@pytest.fixture(scope="module")
def moe_model():
    """One tiny MiniCPM-V 4.7 with the MoE LM for the three regimes below (built once; the regimes only change
    the inputs' mode and the frozen parts, which the harness sets per measurement)."""
    return build_model(tiny_config("minicpmv4_7", moe=True), 0)


@pytest.mark.parametrize("mode,frozen", [("forward", ()), ("training", ()), ("training", ("vision_tower",))])
def test_minicpmv4_7_moe_lm(moe_model, mode, frozen):
    """MiniCPM-V 4.7 with a ``qwen3_5_moe_text`` LM (the 35B-A3B's backbone): eager experts gather each expert's
    tokens (top-k, not dense), so the library's routed count is exact here too."""
    model = moe_model
    case = _aligned(model, dict(image_sizes=[(30, 50)]))
    m = measure_family("minicpmv4_7", model=model, mode=mode, frozen=frozen, **case)
    assert _library(model, m, case, mode=mode, frozen=frozen).parts == m.parts(mode)
    if mode == "forward":
        from vlm_perf.arch.params import count_params

        numel = lambda mod: sum(p.numel() for p in mod.parameters())  # noqa: E731
        assert count_params(_spec(model)).total == numel(model)


def test_ocr_rule_helpers_are_the_4_6_processors():
    """MiniCPM-OCR's image processor needs torchvision (absent), so its pixel rule is checked in two steps: its own
    helper functions (find_best_resize, get_refine_size, get_sliced_grid: pure Python, called on the class) equal
    MiniCPMV4_6ImageProcessorPil's on fuzzed inputs, whose composition is verified end to end above; and the rule's
    OCR-only branch, ``small_image_upsize="never"``, keeps an unsliced image's size (sides rounded to multiples of
    patch x 2 in 4x), by hand."""
    pytest.importorskip("hypothesis")
    from hypothesis import given, settings, strategies as st
    from transformers.models.minicpm_ocr.image_processing_minicpm_ocr import MiniCPMOcrImageProcessor
    from transformers.models.minicpmv4_6.image_processing_pil_minicpmv4_6 import MiniCPMV4_6ImageProcessorPil

    from vlm_perf.arch import spec_from_config
    from vlm_perf.arch.families import FAMILIES as REG

    ocr, v46 = object.__new__(MiniCPMOcrImageProcessor), MiniCPMV4_6ImageProcessorPil()

    @settings(derandomize=True, deadline=None, max_examples=300)
    @given(h=st.integers(1, 3000), w=st.integers(1, 3000), scale=st.integers(4, 600), n=st.integers(1, 12),
           mode=st.sampled_from(["4x", "16x"]), up=st.booleans())
    def check(h, w, scale, n, mode, up):
        assert ocr.get_sliced_grid((h, w), n, scale) == v46.get_sliced_grid((h, w), n, scale)
        assert ocr.find_best_resize((h, w), scale, 14, mode, up) == v46.find_best_resize((h, w), scale, 14, mode, up)
        grid = v46.get_sliced_grid((h, w), n, scale) or [1, 2]
        assert (ocr.get_refine_size((h, w), grid, scale, 14, mode, True)
                == v46.get_refine_size((h, w), grid, scale, 14, mode, True))

    check()
    base = tiny_config("minicpm_ocr").to_dict()
    # 11 x 14 px (154 < 16^2: not sliced), scale 16, patch 2, 4x (unit 4 px). never: 11 -> 12 px, 14 -> 16 px
    # (3.5 rounds to even 4) = 6 x 8 patches; always: int(16 / sqrt(14/11)) = 14, int(14 * 14/11) = 17 -> 16 x 16 px
    for upsize, expected in (("never", (1, 6, 8)), ("always", (1, 8, 8))):
        spec = spec_from_config(base, name="ocr", processor={"preprocessor_config.json": {
            "patch_size": 2, "scale_resolution": 16, "small_image_upsize": upsize}})
        item = REG["minicpm_ocr"].media.image(spec, 11, 14)
        assert item.grids == (expected,) and item.visual_tokens == expected[1] * expected[2] // 4


@pytest.mark.parametrize("selectors", [("projector", "lm.mlp"), ("language_model[-2:]",)],
                         ids=["projector+lm-mlps", "last-2-lm-layers"])
def test_partial_freezing_regimes(selectors):
    """Finer regimes than whole parts (the LM is laid out per layer; the tower trains or freezes as a whole):
    only the named weights train, every other part frozen; measured with requires_grad on the same modules."""
    import copy

    from vlm_perf.flops.regime import regime_flops
    from vlm_perf.arch.trainability import Trainability

    from .regimes import measure_regime, measured_parts

    model = build_model(tiny_config("minicpmv4_6"), 0)
    case = _aligned(model, dict(image_sizes=[(30, 50)]))
    from .families import harness

    h = harness("minicpmv4_6")
    inputs, media = h.make_inputs(model, image_sizes=case["image_sizes"], text_len=case["text_len"], seed=1)
    m = copy.deepcopy(model)
    m.requires_grad_(False)
    layers = m.model.language_model.layers
    train = ([*h.part_modules(m)["projector"], *(layer.mlp for layer in layers)] if "projector" in selectors
             else list(layers[-2:]))
    for mod in train:
        mod.requires_grad_(True)
    measured = measured_parts(measure_regime(m, inputs, parts=h.part_modules(m), training=True), True)
    spec = _spec(model)
    from vlm_perf.stats import BatchStats

    stats = BatchStats.from_batch(seq_lens=[media["seq_len"]], image_grids=media["image_grids"], spec=spec)
    lib = regime_flops(spec, stats, Trainability.build(list(selectors)), causal="full").parts
    over = 0
    if "projector" not in selectors:
        # layer 2 (a gated delta net) trains its depthwise conv: FlopCounterMode bills the weight gradient as a
        # dense conv (ignores groups). Conv channels C = 2 * (2 heads x 8) + 4 x 8 = 64, kernel k = 4, on S + k - 1
        # padded positions: counted 2·(S+k-1)·C·C·k, real 2·(S+k-1)·C·k.
        c, k, rows = 64, 4, media["seq_len"] + 3
        over = 2 * rows * c * c * k - 2 * rows * c * k
    assert {**lib, "language_model": lib["language_model"] + over} == measured



def test_adapters_are_refused_not_guessed(tmp_path):
    """Adapter configs name modules; MiniCPM-V's module names are not laid out (its tower, with the window-attention
    merger and the folded layers, has no per-layer layout), so an adapter is refused with one typed line instead of
    being matched against the wrong modules. Whole parts and LM selectors work (tests above)."""
    import json

    from vlm_perf.arch.trainability import Trainability
    from vlm_perf.errors import UnsupportedModelError
    from vlm_perf.flops.regime import regime_flops
    from vlm_perf.ingest.adapter_config import read_adapter_config
    from vlm_perf.stats import BatchStats

    (tmp_path / "adapter_config.json").write_text(json.dumps(
        {"peft_type": "LORA", "r": 4, "lora_alpha": 8, "target_modules": ["q_proj", "v_proj"]}))
    spec = _spec(build_model(tiny_config("minicpmv4_6"), 0))
    stats = BatchStats.from_batch(seq_lens=[64], image_grids=[(1, 8, 8)], spec=spec)
    with pytest.raises(UnsupportedModelError, match="not laid out") as info:
        regime_flops(spec, stats, Trainability.build(adapter=read_adapter_config(tmp_path)), causal="full")
    assert "\n" not in str(info.value)


# ------------------------------------------------------------------------------------------- videos in pixels
def _video_spec(model_type, mode, scale, max_slices, slice_mode=True):
    from vlm_perf.arch import spec_from_config

    vid = {"patch_size": 2, "scale_resolution": scale, "max_slice_nums": max_slices, "downsample_mode": mode,
           "slice_mode": slice_mode}
    config = tiny_config(model_type, downsample_mode=mode)
    return spec_from_config(config.to_dict(), name="tiny", processor={"video_preprocessor_config.json": vid})


def _per_frame_units(item):
    """The rule's grids of one video as the processor lists target sizes: per frame the overview, then its
    slices."""
    (t, oh, ow), rest = item.grids[0], item.grids[1:]
    slices = [(h, w) for n, h, w in rest for _ in range(n // t)]
    return [u for _ in range(t) for u in [(oh, ow), *slices]]


def test_video_rule_fuzzed_against_video_processor():
    """Seeded, bounded fuzz of the video rule against transformers' own MiniCPMV4_6VideoProcessor /
    MiniCPMOcrVideoProcessor source (torch stand-ins for the pixel ops only): per frame the overview + slice
    sizes in patches, the slice grid, the placeholder tokens of ``replace_video_token``; and the frame count
    of ``sample_frames`` against :func:`sampled_frames` for fuzzed durations, fps and caps."""
    pytest.importorskip("hypothesis")
    from hypothesis import given, settings, strategies as st
    from transformers.video_utils import VideoMetadata

    from vlm_perf.arch.families import FAMILIES as REG
    from vlm_perf.arch.families.minicpmv import sampled_frames

    from .families.minicpmv import process_videos, video_placeholders, video_processor_class

    @settings(derandomize=True, deadline=None, max_examples=30)
    @given(videos=st.lists(st.tuples(st.integers(1, 3), st.integers(1, 90), st.integers(1, 90)), min_size=1,
                           max_size=2),
           scale=st.integers(4, 32), max_slices=st.integers(1, 9), mode=st.sampled_from(["16x", "4x"]),
           slice_mode=st.booleans(), model_type=st.sampled_from(["minicpmv4_6", "minicpm_ocr"]),
           duration=st.floats(0.01, 300, allow_nan=False), fps=st.floats(0.5, 60), cap=st.integers(1, 130))
    def check(videos, scale, max_slices, mode, slice_mode, model_type, duration, fps, cap):
        spec = _video_spec(model_type, mode, scale, max_slices, slice_mode)
        out = process_videos(videos, model_type, patch_size=2, scale_resolution=scale, max_slice_nums=max_slices,
                             downsample_mode=mode, slice_mode=slice_mode)
        sizes = [tuple(int(x) for x in t) for t in out["target_sizes_videos"]]
        texts = video_placeholders(out, 16 if mode == "16x" else 4, slice_mode)
        start, frame = 0, 0
        for (t, h, w), text in zip(videos, texts):
            item = REG[model_type].media.video(spec, t, h, w)
            units = _per_frame_units(item)
            assert units == sizes[start:start + len(units)], (t, h, w)
            assert item.visual_tokens == text.count("V")
            rows, cols = item.detail["slices"]
            assert [tuple(int(x) for x in g) for g in out["grids_videos"][frame:frame + t]] == [(rows, cols)] * t
            start, frame = start + len(units), frame + t
        assert start == len(sizes)
        proc = object.__new__(video_processor_class(model_type))
        total = max(1, int(duration * fps))
        meta = VideoMetadata(total_num_frames=total, fps=fps, duration=duration)
        assert len(proc.sample_frames(meta, max_num_frames=cap, stack_frames=1)) == sampled_frames(duration, cap)

    check()
    proc = object.__new__(video_processor_class("minicpmv4_6"))
    for duration, cap in ((5.0, 5), (5.05, 5), (4.99, 5), (0.3, 1), (1.0, 1), (128.0, 128), (128.5, 128)):
        meta = VideoMetadata(total_num_frames=int(duration * 30), fps=30.0, duration=duration)
        assert len(proc.sample_frames(meta, max_num_frames=cap, stack_frames=1)) == sampled_frames(duration, cap)


def _video_case(model, with_image):
    ocr = model.config.model_type == "minicpm_ocr"
    case: dict = dict(video_sizes=[(2, 30, 50)] if not with_image else [(3, 20, 14)])
    if with_image:
        case.update(dict(grids=[[(4, 4), (4, 2), (4, 2)]]) if ocr else dict(image_sizes=[(10, 12)]))
    return _aligned(model, case)


@pytest.mark.parametrize("mode,frozen,with_image", [("forward", (), False), ("forward", (), True),
                                                     ("training", ("vision_tower",), True)],
                         ids=["video", "image+video", "image+video-training-frozen-tower"])
def test_video_in_pixels_per_part_exact(model, mode, frozen, with_image):
    """A video in pixels through transformers' own video processor code and the model's video path (alone, and
    next to an image): the library's video rule gives the processor's frame grids and placeholder count, and the
    FLOPs per part equal FlopCounterMode's, forward and training with the tower frozen."""
    from vlm_perf.arch import spec_from_config
    from vlm_perf.arch.families import FAMILIES as REG
    from vlm_perf.flops import compute_flops
    from vlm_perf.stats import BatchStats

    case = _video_case(model, with_image)
    m = measure_family(model.config.model_type, model=model, mode=mode, frozen=frozen, **case)
    pre = {"patch_size": 2, "scale_resolution": SCALE, "downsample_mode": model.config.downsample_mode}
    spec = spec_from_config(model.config.to_dict(), name="tiny", processor={
        "preprocessor_config.json": pre, "video_preprocessor_config.json": pre})
    rule = REG[spec.family].media
    videos = [rule.video(spec, *v) for v in case["video_sizes"]]
    images = ([rule.image(spec, h, w) for h, w in case["image_sizes"]] if case.get("image_sizes")
              else [] if not case.get("grids") else None)
    image_grids = ([g for item in images for g in item.grids] if images is not None
                   else [(1, h, w) for item in case["grids"] for h, w in item])
    assert [u for item in videos for u in _per_frame_units(item)] == [(h, w) for _, h, w in m.media["video_grids"]]
    image_tokens = (sum(i.visual_tokens for i in images) if images is not None
                    else sum(t * h * w for t, h, w in image_grids) // 4)
    assert sum(v.visual_tokens for v in videos) + image_tokens == m.media["visual_tokens"]
    stats = BatchStats.from_batch(seq_lens=[m.media["seq_len"]], image_grids=image_grids,
                                  video_grids=[g for v in videos for g in v.grids], spec=spec)
    lib = compute_flops(spec, stats, mode=mode, causal="full", frozen=frozen)
    assert lib.parts == m.parts(mode)


def test_cli_video_size_by_hand():
    """``vlm-perf flops --video-size`` on the minicpm-v-4.6 preset (class defaults: scale 448, patch 14, 16x, 9
    slices), by hand for 8 frames of 720 x 1280: 921600 / 448² = 4.59 -> 5 slices wanted, 2 x 3 (log aspect
    nearest 16/9 among 4..6). Overview: h = int(448 / sqrt(16/9)) = 336, w = int(336 · 16/9) = 597 -> 616 (nearest
    multiple of 56) = 24 x 44 patches. Slice: 720/2 = 360, 1281/3 = 427 (1280 -> 1281, multiple of 3), upscaled:
    h = int(448 / sqrt(427/360)) = 411 -> 392, w = int(411 · 427/360) = 487 -> 504 = 28 x 36 patches. Tokens per
    frame (24·44 + 6·28·36) / 16 = 444; x 8 frames = 3552."""
    from tests.support import run_main

    r = run_main("flops", "--model", "minicpm-v-4.6", "--seq-len", "8192", "--video-size", "8,720,1280")
    assert r.returncode == 0, r.stderr
    text = " ".join(r.stdout.split())
    assert "grid 8,24,44 + 48,28,36, 3552 visual tokens" in text
    r = run_main("flops", "--model", "minicpm-v-4.6", "--seq-len", "8192", "--video-size", "8,0,1280")
    assert r.returncode != 0 and len(r.stderr.strip().splitlines()) == 1
