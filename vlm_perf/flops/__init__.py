"""FLOPs library: pure formulas over `BatchStats` and a `ModelSpec` (no I/O).

    >>> from vlm_perf.arch import load_model
    >>> from vlm_perf.stats import BatchStats
    >>> from vlm_perf.flops import compute_flops
    >>> spec = load_model("qwen3-vl-30b-a3b")
    >>> b = compute_flops(spec, BatchStats.from_batch(seq_len=4096, samples=1, image_grids=[(1, 64, 64)], spec=spec))
    >>> b.total, b.vision, b.language, b.components["vision.mlp"]
"""

from .breakdown import COMPONENTS, LM_COMPONENTS, VISION_COMPONENTS, Breakdown, Options, compute_flops
from .conventions import CONVENTIONS, Convention, get_convention

__all__ = ["Breakdown", "COMPONENTS", "CONVENTIONS", "Convention", "LM_COMPONENTS", "Options", "VISION_COMPONENTS",
           "compute_flops", "get_convention"]
