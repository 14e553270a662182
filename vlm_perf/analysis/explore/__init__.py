"""What-if exploration for the notebooks: image size -> grid -> vision/LM FLOPs split -> MFU impact.

Everything here is a thin layer over :func:`vlm_perf.flops.compute_flops` and
:meth:`vlm_perf.stats.BatchStats.from_batch`; the notebooks only call these functions and plot.

* :func:`smart_resize`, :func:`image_grid`, :func:`video_grid`: the Qwen processors' resize rule
  (each side rounded to a multiple of ``patch_size * spatial_merge_size``, the pixel count kept within
  ``[min_pixels, max_pixels]`` by rescaling both sides, aspect ratio kept as well as the rounding allows).
* :func:`sample_split`: FLOPs of ONE training sample (one causal sequence of text + visual tokens)
  under one or more conventions: vision, LM, vision share, per component.
* :func:`mfu_impact`: how TFLOP/s/GPU and MFU change when the same step is counted under another
  convention, either at a fixed step time or from a fixed logged "before" number.
* :func:`sweep`: a polars frame of splits over resolutions x images per sample x text lengths.
* :func:`regime_split`: vision / LM FLOPs of one sample under training regimes (full, frozen tower, LoRA on
  the LM, ...; :data:`REGIMES`).
* :func:`ratio_table`, :func:`run_vision_profile`, :func:`components_by_convention`,
  :func:`deviation_table`: tables for the PR #2575 and conventions notebooks.

Units: FLOPs are training FLOPs of one sample/step (not TFLOPs) unless a name says otherwise;
rates are TFLOP/s per GPU; MFU is a fraction (0.42 = 42 %).
"""

from ...stats.resize import MAX_ASPECT, smart_resize  # noqa: F401  (re-exported)
from .conventions import (
           components_by_convention,
           components_vs_reference,
           convention_summary_frame,
           deviation_table,
)
from .media import (
           DEFAULT_PIXEL_BOUNDS,
           DEFAULT_VIDEO_PIXEL_BOUNDS,
           image_grid,
           merged_tokens,
           pixel_bounds,
           video_grid,
)
from .paths import sample_run_dir
from .pr2575 import ratio_table, run_vision_profile
from .regimes import REGIME_COLUMNS, REGIMES, regime_split, regime_trainability
from .sample import (
           SWEEP_COLUMNS,
           MFUImpact,
           SampleSplit,
           mfu_impact,
           sample_split,
           sample_stats,
           sweep,
)

__all__ = ["DEFAULT_PIXEL_BOUNDS", "DEFAULT_VIDEO_PIXEL_BOUNDS", "MFUImpact", "REGIMES", "REGIME_COLUMNS",
           "SWEEP_COLUMNS", "SampleSplit", "regime_split", "regime_trainability",
           "components_by_convention", "components_vs_reference", "convention_summary_frame", "deviation_table", "image_grid", "merged_tokens", "mfu_impact",
           "pixel_bounds", "ratio_table", "run_vision_profile", "sample_run_dir", "sample_split", "sample_stats", "smart_resize",
           "sweep", "video_grid"]
