"""Analysis: windows, TFLOP/s/GPU and MFU per convention, log cross-check, attribution, explain."""

from .attribution import Attribution, fit_step_time
from .crosscheck import crosscheck_log
from .explain import Explanation, explain_delta
from .flops_frame import flops_columns, vision_share, with_flops
from .run import DEFAULT_CONVENTIONS, RunAnalysis, analyze_run, estimate_stats
from .windows import build_windows, infer_log_interval, window_sums

__all__ = ["Attribution", "DEFAULT_CONVENTIONS", "Explanation", "RunAnalysis", "analyze_run", "build_windows",
           "crosscheck_log", "estimate_stats", "explain_delta", "fit_step_time", "flops_columns",
           "infer_log_interval", "vision_share", "window_sums", "with_flops"]
