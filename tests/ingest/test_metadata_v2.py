"""Schema v2 (media in pixels) against schema v1 grids that Hugging Face's own processors produce.

Independent references: ``Qwen2VLImageProcessorPil`` (image_grid_thw of real pixel arrays), transformers'
``smart_resize`` for video frames, and InternVL's ``GotOcr2ImageProcessorPil`` through the family harness
(``processor_media``: tiles per image with ``InternVLProcessor``'s forced ``crop_to_patches=True``). The
CLS statistic of InternViT is checked by hand arithmetic (one CLS per 448-px tile of 32 x 32 patches).
"""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

pytest.importorskip("transformers")

from vlm_perf.arch import load_model, preset_config, spec_from_config  # noqa: E402
from vlm_perf.arch.families import FAMILIES  # noqa: E402
from vlm_perf.capture import MetadataWriter, batch_metadata  # noqa: E402
from vlm_perf.errors import SchemaError  # noqa: E402
from vlm_perf.ingest.metadata_source import MetadataSource  # noqa: E402
from vlm_perf.stats import BatchStats  # noqa: E402

QWEN_PROCESSOR = {"preprocessor_config.json": {"min_pixels": 3136, "max_pixels": 28 * 28 * 1024}}
QWEN_VIDEO = (128 * 28 * 28, 768 * 28 * 28)  # Qwen2-VL video_preprocessor_config.json bounds (reference default)
SIZES = [[(1080, 1920), (333, 517)], [(64, 2000)], [], [(448, 448), (2000, 300), (1080, 1920)]]


def _write(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _image(h, w):
    import numpy as np

    return np.random.default_rng(0).integers(0, 256, size=(h, w, 3), dtype=np.uint8)


@pytest.fixture(scope="module")
def qwen_spec():
    cfg = {k: v for k, v in preset_config("qwen2-vl-7b").items() if not k.startswith("_")}
    return spec_from_config(cfg, processor=QWEN_PROCESSOR)


@pytest.fixture(scope="module")
def internvl_spec():
    return load_model("internvl3-8b")


def _frames(path, spec, **kw):
    src = MetadataSource(path, spec, per_microbatch=True, **kw)
    return src.per_iteration, src.per_microbatch, src.diagnostics


def _rows(sizes_per_row, media):
    """v1 and v2 rows for the same microbatches; ``media(sizes)`` -> (v1 extra keys, v2 extra keys)."""
    v1, v2 = [], []
    for i, sizes in enumerate(sizes_per_row):
        base = {"iteration": 1 + i // 2, "microbatch": i % 2, "dp_rank": 0, "seq_lens": [30000, 1000 + i]}
        one, two = media(sizes)
        v1.append({**base, "schema_version": 1, **one})
        v2.append({**base, "schema_version": 2, **two})
    return v1, v2


def test_qwen2_vl_image_sizes_equal_hf_grids(tmp_path, qwen_spec):
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    hf = Qwen2VLImageProcessorPil(min_pixels=3136, max_pixels=28 * 28 * 1024, patch_size=14, merge_size=2,
                                  temporal_patch_size=2)

    def media(sizes):
        if not sizes:
            return {}, {}
        grids = hf(images=[_image(h, w) for h, w in sizes], return_tensors="np")["image_grid_thw"].tolist()
        return {"image_grid_thw": grids}, {"image_sizes": [list(s) for s in sizes]}

    v1, v2 = _rows(SIZES, media)
    it1, mb1, d1 = _frames(_write(tmp_path / "v1.jsonl", v1), qwen_spec)
    it2, mb2, d2 = _frames(_write(tmp_path / "v2.jsonl", v2), qwen_spec)
    assert it1.equals(it2) and mb1.equals(mb2)
    assert it2["vision_patches"].sum() > 0 and it2["vision_cls_tokens"].sum() == 0  # Qwen: no CLS tokens
    assert d1.rows_media_in_pixels == 0 and d2.rows_media_in_pixels == 3
    assert any("media in pixels" in n for n in d2.notes)


def test_qwen2_vl_video_sizes_equal_hf_smart_resize(tmp_path, qwen_spec):
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import smart_resize

    def grid(t, h, w):  # Qwen2VLVideoProcessor: each frame resized with the video bounds, frames padded to 2
        rh, rw = smart_resize(h, w, factor=28, min_pixels=QWEN_VIDEO[0], max_pixels=QWEN_VIDEO[1])
        return [-(-t // 2), rh // 14, rw // 14]

    videos = [[(5, 100, 150)], [(16, 720, 1280), (2, 64, 64)], []]
    v1, v2 = _rows(videos, lambda vs: ({"video_grid_thw": [grid(*v) for v in vs]},
                                       {"video_sizes": [list(v) for v in vs]}) if vs else ({}, {}))
    it1, mb1, _ = _frames(_write(tmp_path / "v1.jsonl", v1), qwen_spec)
    it2, mb2, _ = _frames(_write(tmp_path / "v2.jsonl", v2), qwen_spec)
    assert mb1.equals(mb2) and it2["video_patches"].sum() > 0


INTERNVL_SIZES = [[(800, 1200), (448, 448)], [(300, 2000)], [(1080, 1920), (64, 64), (2000, 300)]]


def _internvl_tiles(sizes):
    from tests.verify.families import load_preset, processor_media

    return processor_media("internvl", load_preset("InternVL3-8B-hf"), image_sizes=sizes, max_patches=12)["tiles"]


def test_internvl_image_sizes_equal_hf_tiles_and_cls_by_hand(tmp_path, internvl_spec):
    hf_tiles = {}

    def media(sizes):
        tiles = _internvl_tiles(sizes)
        hf_tiles[tuple(sizes)] = tiles
        # InternVL3-8B: 448-px tiles of 14-px patches -> (tiles, 32, 32) per image
        return ({"image_grid_thw": [[n, 32, 32] for n in tiles]},
                {"image_sizes": [list(s) for s in sizes], "image_tiles": tiles})

    v1, v2 = _rows(INTERNVL_SIZES, media)
    it1, mb1, _ = _frames(_write(tmp_path / "v1.jsonl", v1), internvl_spec)  # v1 grids of a CLS tower: now read
    it2, mb2, _ = _frames(_write(tmp_path / "v2.jsonl", v2), internvl_spec)
    assert it1.equals(it2) and mb1.equals(mb2)
    tiles = [sum(hf_tiles[tuple(s)]) for s in INTERNVL_SIZES]
    assert mb2["vision_cls_tokens"].to_list() == tiles  # one CLS per tile
    assert mb2["vision_patches"].to_list() == [n * 1024 for n in tiles]  # CLS is no patch-embedding row
    assert mb2["vision_patches_sq_frame"].to_list() == [n * 1025 ** 2 for n in tiles]  # 1024 patches + CLS
    assert mb2["vision_merged_tokens"].to_list() == [n * 256 for n in tiles]  # pixel shuffle 0.5: 16 x 16


def test_cls_tower_pre_aggregated_rows_use_vision_frames(tmp_path, internvl_spec):
    row = {"iteration": 0, "seq_lens": [600], "vision_patches": 2048, "vision_patches_sq": 2 * 1025 ** 2,
           "vision_merged_tokens": 512, "vision_frames": 2}
    _, mb, _ = _frames(_write(tmp_path / "m.jsonl", [row]), internvl_spec)
    assert mb["vision_cls_tokens"].to_list() == [2]


BAD = [
    ({"image_sizes": [[0, 10]]}, "image_sizes: an entry is not 2 positive integers"),
    ({"image_sizes": [[10]]}, "image_sizes: an entry is not 2"),
    ({"image_sizes": [[10, 20, 30]]}, "image_sizes: an entry is not 2"),
    ({"image_sizes": [None]}, "image_sizes: an entry is not 2"),
    ({"image_sizes": [[10, 1 << 21]]}, "image_sizes: an entry is not 2"),
    ({"image_sizes": [[1.5, 10]]}, "image_sizes: expected a list of [H, W] integer rows"),
    ({"image_sizes": [[10, 2010]]}, "image_sizes: the model family's processor rule rejects a size"),
    ({"image_sizes": "big"}, "image_sizes: expected"),
    ({"video_sizes": [[0, 64, 64]]}, "video_sizes: an entry is not 3 positive integers"),
    ({"video_sizes": [[64, 64]]}, "video_sizes: an entry is not 3"),
    ({"image_sizes": [[64, 64]], "image_grid_thw": [[1, 4, 4]]}, "image_sizes: give image_sizes or image_grid_thw"),
    ({"video_sizes": [[2, 64, 64]], "video_grid_thw": [[1, 4, 4]]}, "video_sizes: give video_sizes or"),
    ({"image_sizes": [[64, 64]], "image_tiles": [2]}, "image_tiles: differs from the tiles"),
    ({"image_sizes": [[64, 64]], "image_tiles": [1, 1]}, "image_tiles: must hold one positive integer per image"),
    ({"image_sizes": [[64, 64]], "image_tiles": [0]}, "image_tiles: must hold one positive integer"),
    ({"image_tiles": [1]}, "image_tiles: given without image_sizes or image_grid_thw"),
    ({"image_grid_thw": [[1, 4, 4]], "image_tiles": [3]}, "image_tiles: differs"),
    ({"image_tiles": [True]}, "image_tiles: expected"),
]


@pytest.mark.parametrize("extra, message", BAD, ids=[m[:40] for _, m in BAD])
def test_bad_v2_line_names_file_line_and_field(tmp_path, qwen_spec, extra, message):
    good = {"schema_version": 2, "iteration": 1, "seq_lens": [100], "image_sizes": [[64, 64]]}
    lines = [good, good, {**{"schema_version": 2, "iteration": 1, "seq_lens": [100]}, **extra}, good]
    path = _write(tmp_path / "meta.jsonl", lines)
    with pytest.raises(SchemaError) as info:
        MetadataSource(path, qwen_spec).read()
    text = str(info.value)
    assert text.splitlines()[0] == text and f"{path}:3" in text and message in text, text
    src = MetadataSource(path, qwen_spec, skip_bad=True)
    assert src.diagnostics.rows_used == 3 and src.diagnostics.rows_skipped_total == 1
    assert src.diagnostics.bad_lines[0].startswith(f"{path}:3: ")


def test_pixels_without_a_rule_are_rejected(tmp_path):
    path = _write(tmp_path / "m.jsonl", [{"iteration": 0, "seq_lens": [5], "image_sizes": [[64, 64]]}])
    for spec in (None, load_model("llama3-8b")):
        with pytest.raises(SchemaError, match=r"m.jsonl:1: image_sizes: media in pixels need a model"):
            MetadataSource(path, spec).read()


def test_v1_rows_are_untouched_by_the_v2_path(tmp_path, qwen_spec):
    """A v1 batch never enters the conversion; mixing a v2 row in leaves the v1 rows' statistics alone."""
    v1 = [{"iteration": i, "seq_lens": [500], "image_grid_thw": [[1, 20, 30]]} for i in range(4)]
    alone = _frames(_write(tmp_path / "a.jsonl", v1), qwen_spec)[1]
    mixed = _frames(_write(tmp_path / "b.jsonl", v1 + [{"iteration": 9, "seq_lens": [5],
                                                         "image_sizes": [[280, 420]]}]), qwen_spec)[1]
    assert mixed.head(4).equals(alone)
    # 280 x 420 is a multiple of 28 within the bounds: kept as is -> 20 x 30 patches
    assert mixed.row(4, named=True)["vision_patches"] == 600


@settings(derandomize=True, deadline=None, max_examples=25)
@given(rows=st.lists(st.lists(st.tuples(st.integers(1, 3000), st.integers(1, 3000)), max_size=4),
                     min_size=1, max_size=6), family=st.sampled_from(["qwen", "internvl"]))
def test_fuzz_v2_equals_scalar_batch_stats(tmp_path_factory, qwen_spec, internvl_spec, rows, family):
    """Vectorised conversion (distinct sizes joined back) == the scalar path, row by row."""
    spec = qwen_spec if family == "qwen" else internvl_spec
    rule = FAMILIES[spec.family].media
    if family == "qwen":  # the Qwen processors reject aspect ratios over 200 (tested above)
        rows = [[(h, w) for h, w in sizes if max(h, w) <= 200 * min(h, w)] for sizes in rows]
    lines = [{"iteration": 0, "microbatch": i, "seq_lens": [50], "image_sizes": [list(s) for s in sizes]}
             for i, sizes in enumerate(rows)]
    path = _write(tmp_path_factory.mktemp("fz") / "m.jsonl", lines)
    mb = MetadataSource(path, spec, per_microbatch=True).per_microbatch.sort("microbatch")
    for i, sizes in enumerate(rows):
        want = BatchStats.from_batch(seq_lens=[50], image_grids=[rule.image(spec, h, w).grid for h, w in sizes],
                                     spec=spec).as_dict()
        got = mb.row(i, named=True)
        assert {k: got[k] for k in want} == want


# ------------------------------------------------------------------------------------------- capture
def test_writer_v2_lines_round_trip(tmp_path, internvl_spec):
    sizes = [(800, 1200), (448, 448)]
    tiles = [FAMILIES["internvl"].media.image(internvl_spec, *s).tiles for s in sizes]
    for fmt in ("jsonl", "parquet"):
        with MetadataWriter(tmp_path / fmt, rank=0, format=fmt) as w:
            row = w.record(3, microbatch=0, seq_lens=[4000], image_sizes=sizes, image_tiles=tiles)
            w.record(3, microbatch=1, seq_lens=[4000], image_grid_thw=[[n, 32, 32] for n in tiles])
        assert row["schema_version"] == 2 and row["image_sizes"] == [[800, 1200], [448, 448]]
        mb = MetadataSource(tmp_path / fmt, internvl_spec, per_microbatch=True).per_microbatch
        assert mb.height == 2 and mb.drop("microbatch").row(0) == mb.drop("microbatch").row(1)
    with MetadataWriter(tmp_path / "x.jsonl") as w:
        assert w.record(0, seq_lens=[5])["schema_version"] == 1  # v1 lines stay v1
        with pytest.raises(ValueError, match="image_sizes or image_grid_thw"):
            w.record(0, seq_lens=[5], image_sizes=[[4, 4]], image_grid_thw=[[1, 2, 2]])
        with pytest.raises(ValueError, match=r"\[H, W\]"):
            w.record(0, seq_lens=[5], image_sizes=[[4, 4, 4]])
        with pytest.raises(ValueError, match="image_tiles"):
            w.record(0, seq_lens=[5], image_sizes=[[4, 4]], image_tiles=[0])


def test_batch_metadata_records_image_sizes_and_tiles():
    torch = pytest.importorskip("torch")
    inputs = {"input_ids": torch.zeros(1, 12, dtype=torch.long), "image_sizes": torch.tensor([[800, 1200], [448, 448]]),
              "num_patches": torch.tensor([7, 1])}
    out = batch_metadata(inputs)
    assert out["image_sizes"].tolist() == [[800, 1200], [448, 448]] and out["image_tiles"].tolist() == [7, 1]
    with_grids = batch_metadata({**inputs, "image_grid_thw": torch.tensor([[1, 4, 4]])})
    assert "image_sizes" not in with_grids  # grids are exact: a line never carries both
