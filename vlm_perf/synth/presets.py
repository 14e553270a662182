"""Run presets: the three bundled sample runs (sample_logs/) and a tiny one for tests.

Assumptions (also in sample_logs/README.md):

* ``qwen3-vl-30b-a3b-sft`` models the PR #2575 case: Qwen3-VL-30B-A3B image SFT on 64 GB200
  (2500 TFLOP/s bf16 dense peak), TP 4 x PP 2 x DP 8, EP 8; packed 4096-token sequences, 16
  microbatches (global batch 128). The data mix (70% of samples carry 1-4 images, Qwen3-VL
  smart-resize to 32 px multiples within 256^2..896^2 px, ~1000 patches per image on average) puts
  about 19% of LM tokens on images, which makes PR #2575's vision term about +12% of the LM term;
  efficiencies are chosen so the logged (LM-only) throughput lands near 494 TFLOP/s/GPU and PR
  #2575's with-vision number near 554.
* ``qwen3-30b-a3b-text`` is the text-only control: the same LM, cluster, layout and efficiencies,
  text-only samples.
* ``qwen2.5-vl-7b-video`` is Qwen2.5-VL-7B on 64 H100 (989 TFLOP/s), TP 4 x PP 2 x DP 8, 8192-token
  packs, video clips at 2 fps plus high-resolution documents (up to 4096 merged tokens), frozen
  vision tower and merger (``frozen: [vision]``);
  window attention (64-patch windows) keeps ViT attention cheap where full attention would not.
"""

from __future__ import annotations

from dataclasses import replace

from .spec import (DataMix, ImageDist, Parallelism, Quirks, ResolutionMode, RunSpec, StepTimeModel, TextDist,
                   VideoDist)

# --- Qwen3-VL-30B-A3B image SFT (PR #2575 case) -------------------------------------------------
QWEN3_VL_IMAGES = ImageDist(
    modes=(ResolutionMode(0.60, 480, 0.30),                      # photos / natural images
           ResolutionMode(0.20, 640, 0.30, aspect=0.75),          # documents, charts (portrait)
           ResolutionMode(0.20, 300, 0.30, aspect=1.33)),         # thumbnails, crops
    min_pixels=256 * 256, max_pixels=896 * 896, extra_images_mean=0.35, max_images=4)

SFT_TEXT = TextDist(median_tokens=700, sigma=0.85, min_tokens=24, max_tokens=4000)
SFT_MEDIA_TEXT = TextDist(median_tokens=900, sigma=0.8, min_tokens=16, max_tokens=3000)

GB200_MOE = StepTimeModel(peak_tflops=2500.0, eff_lm_gemm=0.34, eff_lm_moe=0.22, eff_lm_attn=0.30,
                          eff_vit_gemm=0.24, eff_vit_attn=0.20, overhead_ms=18.0)

PAR_30B = Parallelism(tp=4, pp=2, cp=1, ep=8, dp=8)

QWEN3_VL_30B_SFT = RunSpec(
    name="qwen3-vl-30b-a3b-sft",
    model="qwen3-vl-30b-a3b",
    description=("Qwen3-VL-30B-A3B image SFT modelled on the Megatron-Bridge PR #2575 discussion (494 -> 554 "
                 "TFLOP/s/GPU when vision FLOPs are added); logged TFLOP/s/GPU counts the LM only."),
    data=DataMix(text_only=0.3, image=0.7, video=0.0, text=SFT_TEXT, media_text=SFT_MEDIA_TEXT,
                 images=QWEN3_VL_IMAGES),
    parallel=PAR_30B, timing=GB200_MOE, gpu="GB200", seq_length=4096, micro_batch_size=1, num_microbatches=16,
    iterations=200, log_interval=5, seed=2575, moe_aux_loss=True,
    quirks=Quirks(crash_after=137, save_interval=50, nan_iteration=163, prefixes=("none", "srun")),
)

QWEN3_30B_TEXT = RunSpec(
    name="qwen3-30b-a3b-text",
    model="qwen3-30b-a3b",
    description="Text-only control for qwen3-vl-30b-a3b-sft: the same LM, cluster and layout, no media.",
    data=DataMix(text_only=1.0, image=0.0, video=0.0, text=SFT_TEXT, media_text=SFT_MEDIA_TEXT),
    parallel=PAR_30B, timing=GB200_MOE, gpu="GB200", seq_length=4096, micro_batch_size=1, num_microbatches=16,
    iterations=200, log_interval=5, seed=3030, moe_aux_loss=True, loss_start=1.4, loss_end=0.95,
    quirks=Quirks(crash_after=0, nan_iteration=88, prefixes=("torchrun",)),
)

# --- Qwen2.5-VL-7B video + high-resolution images ------------------------------------------------
QWEN25_VL_HIRES = ImageDist(
    modes=(ResolutionMode(0.45, 1400, 0.35, aspect=0.77),   # scanned documents, posters
           ResolutionMode(0.35, 900, 0.35),                 # photos
           ResolutionMode(0.20, 2000, 0.25, aspect=1.5)),   # screenshots / charts at full size
    min_pixels=256 * 28 * 28, max_pixels=4096 * 28 * 28, extra_images_mean=0.15, max_images=2)

QWEN25_VL_VIDEO = VideoDist(median_seconds=14.0, sigma=0.6, fps=2.0, min_frames=4, max_frames=96, width=854,
                            height=480, frame_max_pixels=768 * 28 * 28, frame_min_pixels=128 * 28 * 28,
                            total_pixels=3072 * 2 * 28 * 28)

H100_DENSE = StepTimeModel(peak_tflops=989.0, eff_lm_gemm=0.55, eff_lm_moe=0.45, eff_lm_attn=0.42,
                           eff_vit_gemm=0.36, eff_vit_attn=0.18, overhead_ms=35.0, noise_sigma=0.025)

QWEN25_VL_MIX = DataMix(text_only=0.25, image=0.45, video=0.30, text=SFT_TEXT,
                        media_text=TextDist(median_tokens=500, sigma=0.8, min_tokens=16, max_tokens=3000),
                        images=QWEN25_VL_HIRES, videos=QWEN25_VL_VIDEO)
QWEN25_VL_TEXT_HEAVY = replace(QWEN25_VL_MIX, text_only=0.80, image=0.15, video=0.05)

QWEN25_VL_7B_VIDEO = RunSpec(
    name="qwen2.5-vl-7b-video",
    model="qwen2.5-vl-7b",
    description=("Qwen2.5-VL-7B SFT on video clips (2 fps) and high-resolution documents with a frozen vision "
                 "tower and merger, the blend alternating every 20 iterations between a media-heavy and a "
                 "text-heavy mix; logged TFLOP/s/GPU counts the LM only."),
    data=QWEN25_VL_MIX,
    phases=tuple((start, QWEN25_VL_TEXT_HEAVY if (start // 20) % 2 else QWEN25_VL_MIX) for start in range(21, 150, 20)),
    parallel=Parallelism(tp=4, pp=2, cp=1, ep=1, dp=8), timing=H100_DENSE, gpu="H100-SXM", seq_length=8192,
    micro_batch_size=1, num_microbatches=8, iterations=150, log_interval=5, frozen=("vision",), seed=2505,
    lr=2e-5, quirks=Quirks(crash_after=112, save_interval=50, nan_iteration=41, prefixes=("torchrun", "none")),
)

# --- tiny run for tests -------------------------------------------------------------------------
TINY = QWEN3_VL_30B_SFT.with_(
    name="tiny", description="Tiny smoke-test run (2 DP ranks, 2 microbatches, 20 iterations).",
    parallel=Parallelism(tp=2, pp=1, cp=1, ep=2, dp=2), num_microbatches=2, iterations=20, log_interval=5,
    seed=7, quirks=Quirks(crash_after=17, save_interval=10, nan_iteration=18, prefixes=("none", "srun")),
    timing=GB200_MOE)

RUN_PRESETS: dict[str, RunSpec] = {r.name: r for r in (QWEN3_VL_30B_SFT, QWEN3_30B_TEXT, QWEN25_VL_7B_VIDEO, TINY)}
SAMPLE_RUNS = ("qwen3-vl-30b-a3b-sft", "qwen3-30b-a3b-text", "qwen2.5-vl-7b-video")


def get_preset(name: str) -> RunSpec:
    if name not in RUN_PRESETS:
        raise ValueError(f"unknown run preset {name!r}; known: {', '.join(RUN_PRESETS)}")
    return RUN_PRESETS[name]
