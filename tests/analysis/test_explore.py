"""explore.py against hand arithmetic: smart resize, grids, per-sample split, MFU impact, tables."""

import math

import polars as pl
import pytest

from vlm_perf.analysis import with_flops
from vlm_perf.analysis.explore import (components_by_convention, components_vs_reference, convention_summary_frame,
                                       deviation_table, sample_run_dir, image_grid, merged_tokens,
                                       mfu_impact, pixel_bounds, ratio_table, run_vision_profile, sample_split,
                                       smart_resize, sweep, video_grid)
from vlm_perf.arch import load_model
from vlm_perf.flops import CONVENTIONS, compute_flops
from vlm_perf.stats import BatchStats

Q25 = load_model("qwen2.5-vl-7b")  # patch 14, merge 2: factor 28
Q3 = load_model("qwen3-vl-30b-a3b")  # patch 16, merge 2: factor 32
TEXT = load_model("qwen3-30b-a3b")


# ------------------------------------------------------------------------------------ resize / grids
def test_448_square_patch14():
    # 448 / 28 = 16 exactly -> 448 x 448 px -> 32 x 32 patches of 14 px -> 16 x 16 = 256 merged tokens
    grid = image_grid(448, 448, Q25)
    assert grid == (1, 32, 32)
    assert merged_tokens(grid, Q25) == 256


def test_448_square_patch16():
    # 448 / 32 = 14 -> 448 px -> 28 x 28 patches of 16 px -> 196 merged tokens; 448^2 = 200704 in [65536, 16777216]
    assert image_grid(448, 448, Q3) == (1, 28, 28)
    assert merged_tokens((1, 28, 28), Q3) == 196


def test_rounding_to_nearest_multiple_half_to_even():
    # 1000/28 = 35.71 -> 36 -> 1008; 700/28 = 25 -> 700
    assert smart_resize(1000, 700, 28, 3136, 10**8) == (1008, 700)
    # 70/28 = 2.5 -> round half to even -> 2 -> 56; 98/28 = 3.5 -> 4 -> 112 (as Python's round does)
    assert smart_resize(70, 98, 28, 56, 10**8) == (56, 112)


def test_min_pixels_bound():
    # Qwen2.5-VL 10 x 10 px: rounds to 0 x 0 < 3136 -> scale sqrt(3136 / 100) = 5.6 -> 56 px -> ceil(2) x 28 = 56
    assert pixel_bounds(Q25) == (3136, 12845056)
    assert image_grid(10, 10, Q25) == (1, 4, 4)
    # Qwen3-VL 100 x 100 px: 96 x 96 = 9216 < 65536 -> scale 2.56 -> 256 px -> 16 x 16 patches
    assert image_grid(100, 100, Q3) == (1, 16, 16)


def test_max_pixels_bound():
    # Qwen3-VL 8000 x 8000: 64e6 > 4096^2 -> scale sqrt(64e6 / 16777216) = 1.953125 -> 4096 px -> 256 patches
    assert image_grid(8000, 8000, Q3) == (1, 256, 256)
    # Qwen2.5-VL 1000 x 2000 with max_pixels = 28*28*1280 = 1003520: 1008 x 1988 = 2003904 too many ->
    # scale sqrt(2e6 / 1003520) = 1.41173 -> 708.4 -> floor(25.3) * 28 = 700; 1416.7 -> floor(50.6) * 28 = 1400
    assert image_grid(1000, 2000, Q25, max_pixels=28 * 28 * 1280) == (1, 50, 100)
    assert 700 * 1400 <= 28 * 28 * 1280


def test_resize_errors():
    with pytest.raises(ValueError, match="aspect ratio"):
        smart_resize(10, 3000, 28, 3136, 10**7)
    with pytest.raises(ValueError, match="positive"):
        smart_resize(0, 100, 28, 3136, 10**7)
    with pytest.raises(ValueError, match="no vision tower"):
        image_grid(448, 448, TEXT)


def _transformers_smart_resize():
    """transformers' own smart_resize, taken from its source file (importing the module needs torchvision)."""
    import ast
    import importlib.util
    from pathlib import Path

    spec = importlib.util.find_spec("transformers")
    if spec is None or spec.origin is None:
        pytest.skip("transformers not installed")
    path = Path(spec.origin).parent / "models" / "qwen2_vl" / "image_processing_qwen2_vl.py"
    tree = ast.parse(path.read_text(encoding="utf-8"))
    funcs = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "smart_resize"]
    if not funcs:
        pytest.skip("transformers has no qwen2_vl smart_resize")
    namespace = {"math": math}
    exec(compile(ast.Module(body=funcs, type_ignores=[]), str(path), "exec"), namespace)
    return namespace["smart_resize"]


def test_matches_transformers_smart_resize():
    reference = _transformers_smart_resize()
    for h in (10, 70, 100, 333, 448, 480, 854, 1000, 2048, 5000):
        for w in (28, 99, 640, 1001, 3000):
            if max(h, w) / min(h, w) > 200:
                continue
            for factor, lo, hi in ((28, 3136, 12845056), (28, 3136, 1003520), (32, 65536, 16777216)):
                assert smart_resize(h, w, factor, lo, hi) == reference(h, w, factor, lo, hi), (h, w, factor)


def test_video_grid():
    # 9 frames of 480 x 854 on Qwen2.5-VL (per-frame bounds 128..768 x 28^2): 480/28 = 17.1 -> 476,
    # 854/28 = 30.5 -> 30 (half to even) -> 840; 476*840 = 399840 within bounds; t = ceil(9/2) = 5
    grid = video_grid(9, 480, 854, Q25)
    assert grid == (5, 34, 60)
    assert merged_tokens(grid, Q25) == 5 * 17 * 30


# ------------------------------------------------------------------------------------ one sample
def test_split_equals_compute_flops():
    split = sample_split(Q25, 448, 2, 1000, conventions=("exact", "megatron-bridge"))
    stats = BatchStats.from_batch(seq_len=1000 + 2 * 256, samples=1, image_grids=[(1, 32, 32)] * 2, spec=Q25)
    assert split.stats == stats
    assert split.visual_tokens == 512 and split.seq_len == 1512 and split.patches == 2 * 1024
    for conv in ("exact", "megatron-bridge"):
        ref = compute_flops(Q25, stats, conv)
        assert split.vision(conv) == ref.vision
        assert split.language(conv) == ref.language
        assert split.total(conv) == ref.total
    ref = compute_flops(Q25, stats, "exact")
    assert split.components == ref.components
    assert split.vision_flops == ref.vision and split.lm_flops == ref.language
    assert split.vision_share == pytest.approx(ref.vision / ref.total, rel=1e-15)
    assert split.visual_token_share == pytest.approx(512 / 1512)
    table = split.table()
    assert table["convention"].to_list() == ["exact", "megatron-bridge"]


def test_split_text_only_and_video():
    split = sample_split(Q3, None, 0, 2048)
    assert split.vision_flops == 0 and split.image_grid is None and split.seq_len == 2048
    vid = sample_split(Q25, None, 0, 100, video=(9, 480, 854))
    assert vid.visual_tokens == 2550 and vid.stats.video_patches == 5 * 34 * 60
    with pytest.raises(ValueError, match="empty"):
        sample_split(Q3, None, 0, 0)


def test_frozen_tower_is_forward_only():
    live = sample_split(Q3, 448, 1, 512)
    frozen = sample_split(Q3, 448, 1, 512, frozen=("vision_tower",))
    # ViT blocks: x3 trainable, x1 frozen; LM unchanged
    assert frozen.components["vision.attn_proj"] * 3 == live.components["vision.attn_proj"]
    assert frozen.components["vision.mlp"] * 3 == live.components["vision.mlp"]
    assert frozen.lm_flops == live.lm_flops
    assert frozen.vision_flops < live.vision_flops


# ------------------------------------------------------------------------------------ MFU impact
def test_mfu_impact_fixed_before_number():
    split = sample_split(Q3, 448, 2, 1024, conventions=("megatron-lm", "mbridge-pr2575"))
    ratio = split.total("mbridge-pr2575") / split.total("megatron-lm")
    imp = mfu_impact(split, before="megatron-lm", after="mbridge-pr2575", before_tflops_per_gpu=494.0, gpu="GB200")
    assert imp.ratio == pytest.approx(ratio, rel=1e-15)
    assert imp.after_tflops_per_gpu == pytest.approx(494.0 * ratio, rel=1e-15)
    assert imp.peak_tflops == 2500.0
    assert imp.before_mfu == pytest.approx(494.0 / 2500.0)
    assert imp.after_mfu == pytest.approx(494.0 * ratio / 2500.0)
    assert imp.delta_mfu_points == pytest.approx(100 * 494.0 * (ratio - 1) / 2500.0)
    # the implied step time: F_before / (494e12) for one sample on one GPU
    assert imp.step_time_s == pytest.approx(split.total("megatron-lm") / 494e12)


def test_mfu_impact_fixed_step_time():
    split = sample_split(Q3, 448, 1, 1024, conventions=("megatron-lm", "exact"))
    imp = mfu_impact(split, step_time_s=2.0, samples_per_step=128, gpus=64, peak_tflops=989.0)
    assert imp.before_tflops_per_gpu == pytest.approx(split.total("megatron-lm") * 128 / (2.0 * 64 * 1e12))
    assert imp.after_tflops_per_gpu == pytest.approx(split.total("exact") * 128 / (2.0 * 64 * 1e12))
    assert imp.after_mfu == pytest.approx(imp.after_tflops_per_gpu / 989.0)
    # consistent with the fixed-before form at the same step time
    again = mfu_impact(split, before_tflops_per_gpu=imp.before_tflops_per_gpu, samples_per_step=128, gpus=64)
    assert again.step_time_s == pytest.approx(2.0) and again.before_mfu is None
    with pytest.raises(ValueError, match="exactly one"):
        mfu_impact(split)
    with pytest.raises(ValueError, match="not computed"):
        mfu_impact(split, after="verl", step_time_s=1.0)


# ------------------------------------------------------------------------------------ sweep
def test_sweep_rows_match_split():
    frame = sweep(Q25, resolutions=(224, (448, 896)), images_per_sample=(1, 3), text_tokens=(256, 4096),
                  conventions=("exact", "megatron-lm"))
    assert frame.height == 2 * 2 * 2 * 2
    row = frame.filter((pl.col("image_h_px") == 448) & (pl.col("images_per_sample") == 3)
                       & (pl.col("text_tokens") == 256) & (pl.col("convention") == "exact")).row(0, named=True)
    split = sample_split(Q25, (448, 896), 3, 256)
    assert (row["grid_h"], row["grid_w"]) == (32, 64)
    assert row["visual_tokens"] == 3 * 512 and row["seq_len"] == 256 + 1536
    assert row["vision_flops"] == split.vision_flops and row["lm_flops"] == split.lm_flops
    assert row["vision_to_lm"] == pytest.approx(split.vision_flops / split.lm_flops)
    assert frame.filter(pl.col("convention") == "megatron-lm")["vision_flops"].sum() == 0


# ------------------------------------------------------------------------------------ PR #2575 tables
def test_ratio_table_reference_numbers():
    """flops-conventions.md section 3: Megatron-Bridge FLOPs per visual token of Qwen3-VL-30B-A3B."""
    t = ratio_table(Q3, seq_len=4096, patches_per_frame=(256, 1024, 4096))
    linear = 4 * 6 * 27 * 15_224_832  # ViT blocks (2-matrix MLP), 4 patches per visual token
    mergers = 4 * 6 * (4608**2 + 4608 * 2048)  # 1 main + 3 deepstack, once per merged token
    attn = [4 * 12 * 1152 * 27 * p for p in (256, 1024, 4096)]
    got = t["vision_flops_per_visual_token"].to_list()
    for g, a in zip(got, attn):
        assert g == pytest.approx(linear + mergers + a, rel=1e-12)
    assert got[0] == pytest.approx(10.98e9, rel=1e-3) and got[2] == pytest.approx(16.72e9, rel=1e-3)
    assert t["lm_flops_per_token"][0] == pytest.approx(23_006_281_728, rel=1e-12)
    assert t["cost_ratio"][1] == pytest.approx(12.13e9 / 23.006e9, rel=1e-3)
    # param ratio: (tower + mergers) / active LM, far below every per-visual-token cost ratio
    assert 0.15 < t["param_ratio"][0] < 0.19
    assert (t["cost_ratio"] > 2.5 * t["param_ratio"]).all()


def test_run_vision_profile_by_hand():
    frame = pl.DataFrame({"lm_tokens": [1000, 3000], "vision_merged_tokens": [100, 300],
                          "vision_patches": [400, 1200], "vision_patches_sq_frame": [400 * 400, 3 * 400 * 400]})
    p = run_vision_profile(frame)
    assert p["visual_token_share"] == pytest.approx(0.1)
    assert p["patches_per_lm_token"] == pytest.approx(0.4)
    assert p["patches_per_frame"] == pytest.approx(400)
    assert "exact_vision_share" not in p


def test_components_by_convention_sums_to_run_totals():
    grids = [(1, 32, 32), (1, 16, 24)]
    rows = []
    for it, (n_img, seq) in enumerate([(1, 2048), (2, 4096), (0, 1024)], start=1):
        s = BatchStats.from_batch(seq_lens=[seq, 512], padded_tokens=seq + 600, image_grids=grids[:n_img], spec=Q25)
        rows.append({"iteration": it, **s.as_dict()})
    per_iter = pl.DataFrame(rows)
    convs = [c for c in CONVENTIONS if CONVENTIONS[c].covers(Q25.family)]
    long = components_by_convention(Q25, per_iter, convs, frozen=("vision_tower",))
    ref = with_flops(per_iter, Q25, convs, frozen=("vision_tower",))
    for conv in convs:
        part = long.filter(pl.col("convention") == conv)
        assert part["flops"].sum() == pytest.approx(ref[f"{conv}_total"].sum(), rel=1e-12), conv
        vis = part.filter(pl.col("part") == "vision")["flops"].sum()
        assert vis == pytest.approx(ref[f"{conv}_vision"].sum(), rel=1e-12, abs=1e-3), conv
    # Megatron-Bridge has no Qwen2-VL provider (a refusal): skipped rather than raising
    assert "megatron-bridge" not in components_by_convention(load_model("qwen2-vl-7b"), per_iter.with_columns(
        [pl.lit(0).alias(c) for c in per_iter.columns if c.startswith(("vision", "video"))]))["convention"].to_list()


def test_deviation_table():
    t = deviation_table()
    assert t.height == len(CONVENTIONS)
    exact = t.filter(pl.col("convention") == "exact").row(0, named=True)
    assert exact["deviations"] == "(reference)"
    lm = t.filter(pl.col("convention") == "megatron-lm").row(0, named=True)
    assert "vision tower and mergers not counted" in lm["deviations"] and not lm["counts_vision"]
    assert math.isclose(len(deviation_table(["exact", "6nd"])), 2)


def test_components_vs_reference_includes_uncounted_components():
    s = BatchStats.from_batch(seq_len=2048, image_grids=[(1, 32, 32)], spec=Q25)
    per_iter = pl.DataFrame([{"iteration": 1, **s.as_dict()}])
    long = components_by_convention(Q25, per_iter, ["exact", "megatron-lm"])
    vs = components_vs_reference(long, "exact")
    mlp = vs.filter((pl.col("convention") == "megatron-lm") & (pl.col("component") == "vision.mlp")).row(0, named=True)
    ref = compute_flops(Q25, s, "exact").components["vision.mlp"]
    assert mlp["flops"] == 0 and mlp["reference_flops"] == ref and mlp["delta"] == -ref and mlp["ratio"] == 0
    exact = vs.filter(pl.col("convention") == "exact")
    assert (exact["delta"] == 0).all()
    # megatron-lm's total deficit is exactly the vision FLOPs plus the router (text LM formula otherwise equal)
    b = compute_flops(Q25, s, "exact")
    lm = compute_flops(Q25, s, "megatron-lm")
    assert vs.filter(pl.col("convention") == "megatron-lm")["delta"].sum() == pytest.approx(lm.total - b.total)
    with pytest.raises(ValueError, match="not in the frame"):
        components_vs_reference(long, "verl")


def test_sample_run_dir(tmp_path):
    (tmp_path / "sample_logs" / "r1").mkdir(parents=True)
    (tmp_path / "notebooks").mkdir()
    assert sample_run_dir("r1", tmp_path / "notebooks") == (tmp_path / "sample_logs" / "r1").resolve()
    assert sample_run_dir("r1", tmp_path) == (tmp_path / "sample_logs" / "r1").resolve()
    with pytest.raises(FileNotFoundError, match="sample_logs/r2"):
        sample_run_dir("r2", tmp_path / "notebooks")


def test_convention_summary_frame():
    from vlm_perf.analysis import analyze_run

    its = pl.DataFrame({"segment": [0, 0, 0], "iteration": [10, 20, 30], "elapsed_s": [2.0, 2.0, 2.0]})
    s = BatchStats.from_batch(seq_len=4096, samples=8, image_grids=[(1, 32, 32)] * 8, spec=Q25)
    stats = pl.DataFrame([{"iteration": i, **s.as_dict()} for i in range(1, 31)])
    run = analyze_run(its, Q25, stats, world_size=8, peak_tflops=989.0, log_interval=10)
    frame = convention_summary_frame(run)
    summary = run.convention_summary()
    for row in frame.iter_rows(named=True):
        assert row["tflops_per_gpu_mean"] == pytest.approx(summary[row["convention"]]["tflops_per_gpu_mean"])
        assert row["vs_megatron_lm"] == pytest.approx(row["tflops_per_gpu_mean"]
                                                      / summary["megatron-lm"]["tflops_per_gpu_mean"])
    # windows (10,20] and (20,30]: 10 iterations x F / (20 s x 8 GPUs)
    f = compute_flops(Q25, s, "exact").total
    assert frame.filter(pl.col("convention") == "exact")["tflops_per_gpu_mean"][0] == pytest.approx(
        20 * f / (40 * 8 * 1e12))


def test_sample_video_of_a_temporal_chunk_tower_counts_chunk_tokens():
    """Kimi K2.5 averages the frames of each video chunk (pos_emb_time frames) into one frame's merged tokens:
    8 frames at 448 px (grid 8 x 32 x 32, merge 2, chunk 4) are 2 chunks x 16 x 16 = 512 LM placeholders, not
    8 x 16 x 16 = 2048. The sample's LM sequence is the text plus those 512 (hand arithmetic), as the family's
    processor rule writes them."""
    from tests.arch.config_samples import sample

    from vlm_perf.analysis.explore.sample import sample_stats
    from vlm_perf.arch import spec_from_config
    from vlm_perf.arch.families import FAMILIES

    spec = spec_from_config(sample("kimi_k25"), name="t")
    assert (spec.vision.temporal_chunk, spec.vision.spatial_merge_size) == (4, 2)
    stats, _, vid = sample_stats(spec, None, 0, 10, video=(8, 448, 448))
    assert vid == (8, 32, 32)
    assert stats.vision_merged_tokens == 2 * 16 * 16 == FAMILIES["kimi_k25"].media.video(spec, 8, 448, 448).visual_tokens
    assert stats.lm_tokens == 10 + 2 * 16 * 16


def test_sample_lm_sequence_counts_the_processors_placeholders():
    """The LM sequence of a sample holds the placeholders the family's processor writes, which for LLaVA-OneVision
    (anyres unpadding) are fewer than the projector rows (the grid's fold): a 500x700 image is 5 tiles of 27 x 27
    (fold 5 x 27 x 27 = 3645 rows), but the processor writes fewer; 10 text tokens + those placeholders is the
    sequence, as `vlm-perf flops --image-size` checks it."""
    from tests.arch.config_samples import sample

    from vlm_perf.analysis.explore.sample import sample_stats
    from vlm_perf.arch import spec_from_config
    from vlm_perf.arch.families import FAMILIES

    spec = spec_from_config(sample("llava_onevision"), name="t")
    item = FAMILIES["llava_onevision"].media.image(spec, 500, 700)
    assert item.grid == (5, 27, 27) and item.visual_tokens < 5 * 27 * 27
    stats, img, _ = sample_stats(spec, (500, 700), 1, 10)
    assert stats.vision_merged_tokens == 5 * 27 * 27  # the projector still runs on every row
    assert stats.lm_tokens == 10 + item.visual_tokens


@pytest.mark.parametrize("model,image_px", [("minicpm-v-4.6", (1344, 1344)), ("phi4_multimodal", (900, 1300))])
def test_sample_of_a_several_grid_or_own_rows_family_equals_the_flops_command_path(model, image_px):
    """MiniCPM-V splits one image into an overview plus slices of another shape (several grids per item);
    Phi-4-multimodal's projector rows are not the grid's fold. explore's sample holds every grid and the family's
    rows, so its FLOPs equal the `flops --image-size` path (commands.flops.derive_media -> from_batch), for two
    images of one sample; the LM sequence holds the processor's placeholders."""
    import sys
    from pathlib import Path

    from vlm_perf.arch import spec_from_config
    from vlm_perf.commands.flops import derive_media

    if "-" in model:  # a preset
        spec = load_model(model)
    else:
        sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "arch"))
        from config_samples import sample

        cfg = sample(model)  # the tiny sample with the released processor's crop (448 px, patch 14)
        cfg["vision_config"].update(image_size=448, crop_size=448, patch_size=14)
        spec = spec_from_config(cfg)
    items = derive_media(spec, [image_px, image_px], [], multi_image=True)
    if model.startswith("minicpm"):
        assert len(items[0].grids) > 1  # the case this test is about
    else:
        assert items[0].merged_tokens is not None
    text = 32
    seq = text + sum(i.visual_tokens for i in items)
    stats = BatchStats.from_batch(seq_len=seq, samples=1, image_grids=[g for i in items for g in i.grids], spec=spec,
                                  image_merged_tokens=[i.merged_tokens for i in items]
                                  if items[0].merged_tokens is not None else ())
    split = sample_split(spec, image_px, images_per_sample=2, text_tokens=text)
    assert split.total_flops == compute_flops(spec, stats, "exact").total
    assert split.vision_flops == compute_flops(spec, stats, "exact").vision
