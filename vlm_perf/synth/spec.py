"""`RunSpec`: everything that defines one synthetic run (model, data mix, cluster, timing, quirks).

All fields are plain values so a spec is hashable, printable and reproducible: the same spec and
seed always give byte-identical output files (see ``vlm_perf.synth.runner``).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace


@dataclass(frozen=True)
class ResolutionMode:
    """One component of the image-size mixture.

    The source image's side length sqrt(H*W) is log-normal with median ``median_side`` px and
    log-sd ``sigma``; the aspect ratio W/H is log-normal around ``aspect`` with log-sd ``aspect_sigma``.
    """

    weight: float
    median_side: float
    sigma: float = 0.35
    aspect: float = 1.0
    aspect_sigma: float = 0.25


@dataclass(frozen=True)
class ImageDist:
    """Images: source-size mixture, then Qwen smart-resize to multiples of patch x merge px."""

    modes: tuple[ResolutionMode, ...]
    min_pixels: int  # smart-resize lower bound (pixels after resize)
    max_pixels: int  # smart-resize upper bound
    extra_images_mean: float = 0.3  # images per image sample = 1 + Poisson(mean), capped
    max_images: int = 4


@dataclass(frozen=True)
class VideoDist:
    """Video clips sampled at ``fps`` frames/s (an even number of frames), lower per-frame resolution."""

    median_seconds: float = 12.0
    sigma: float = 0.6
    fps: float = 2.0
    min_frames: int = 4
    max_frames: int = 64
    width: int = 640  # source frame size before resizing
    height: int = 360
    frame_max_pixels: int = 768 * 28 * 28  # per-frame bound (Qwen2.5-VL VIDEO_MAX_PIXELS)
    frame_min_pixels: int = 128 * 28 * 28
    total_pixels: int = 4096 * 2 * 28 * 28  # budget over all frames of a clip


@dataclass(frozen=True)
class TextDist:
    """Text tokens per sample: log-normal (median, log-sd), clipped to [min_tokens, max_tokens]."""

    median_tokens: float
    sigma: float
    min_tokens: int = 16
    max_tokens: int = 4096


@dataclass(frozen=True)
class DataMix:
    """Sample kinds (fractions are normalised) and their distributions.

    ``text_only`` samples use ``text``; image/video samples use ``media_text`` for their text part
    (prompt + answer). Every media item adds ``media_wrap_tokens`` (vision start/end tokens) besides
    its merged visual tokens.
    """

    text_only: float
    image: float
    video: float
    text: TextDist
    media_text: TextDist
    images: ImageDist | None = None
    videos: VideoDist | None = None
    media_wrap_tokens: int = 2


@dataclass(frozen=True)
class Parallelism:
    """Megatron parallel layout. world = tp * pp * cp * dp; EP splits experts inside the DP x CP group."""

    tp: int = 1
    pp: int = 1
    cp: int = 1
    ep: int = 1
    dp: int = 8
    vpp: int = 1  # virtual pipeline chunks (interleaving shrinks the bubble)

    @property
    def world_size(self) -> int:
        return self.tp * self.pp * self.cp * self.dp

    @property
    def gpus_per_replica(self) -> int:
        return self.world_size // self.dp


@dataclass(frozen=True)
class StepTimeModel:
    """Iteration time = max over DP ranks of sum_c F_c / (eff_c * peak * gpus_per_replica),
    times the pipeline bubble (1 + (pp-1)/(vpp*num_microbatches)), plus ``overhead_ms``, times
    log-normal noise; with probability ``hiccup_prob`` an iteration is ``hiccup_factor`` slower.

    Efficiencies are fractions of ``peak_tflops`` per component group (``COMPONENT_GROUPS`` in
    steptime.py): LM dense GEMMs, MoE expert GEMMs, LM attention core, ViT GEMMs, ViT attention.
    """

    peak_tflops: float  # dense bf16 peak per GPU
    eff_lm_gemm: float
    eff_lm_moe: float
    eff_lm_attn: float
    eff_vit_gemm: float
    eff_vit_attn: float
    overhead_ms: float = 20.0
    noise_sigma: float = 0.02
    hiccup_prob: float = 0.02
    hiccup_factor: float = 1.25
    warmup_s: float = 12.0  # extra time in the first logging window of every segment


@dataclass(frozen=True)
class Quirks:
    """Real-world log quirks. Iterations are 1-based, as Megatron prints them.

    ``crash_after``: the job dies after this iteration (mid-window) and restarts from the last
    checkpoint (``save_interval`` multiple); 0 = no restart. ``nan_iteration``: that iteration's loss
    is NaN (in every attempt that logs its window), so that window prints no ``lm loss``. ``prefixes``: launcher
    prefix style per segment, "none" | "srun" (``63: ``) | "torchrun" (``[default7]:``).
    """

    crash_after: int = 0
    save_interval: int = 50
    nan_iteration: int = 0
    prefixes: tuple[str, ...] = ("none",)
    restart_gap_s: float = 420.0


@dataclass(frozen=True)
class RunSpec:
    """One synthetic run. ``model`` is a vlm_perf preset name; ``frozen`` parts follow compute_flops."""

    name: str
    model: str
    description: str
    data: DataMix
    parallel: Parallelism
    timing: StepTimeModel
    gpu: str
    seq_length: int
    micro_batch_size: int = 1
    num_microbatches: int = 8
    iterations: int = 200
    log_interval: int = 5
    frozen: tuple[str, ...] = ()
    dtype: str = "bf16"
    seed: int = 0
    quirks: Quirks = field(default_factory=Quirks)
    lr: float = 1e-5
    lr_warmup: int = 20
    loss_start: float = 1.6
    loss_end: float = 0.9
    moe_aux_loss: bool = False
    start_time: str = "2025-09-14 08:00:00"
    notes: str = ""
    # data-mix schedule: (first iteration, mix) pairs switching ``data`` from that iteration on, as a
    # curriculum or a dataset blend that changes over the run; step-time attribution needs such variation
    phases: tuple[tuple[int, DataMix], ...] = ()

    @property
    def global_batch_size(self) -> int:
        return self.micro_batch_size * self.num_microbatches * self.parallel.dp

    def with_(self, **changes) -> "RunSpec":
        return replace(self, **changes)
