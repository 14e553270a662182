"""The Qwen-VL processors' image resize rule (moved to :mod:`vlm_perf.arch.resize`; re-exported here)."""

from ..arch.resize import MAX_ASPECT, smart_resize

__all__ = ["MAX_ASPECT", "smart_resize"]
