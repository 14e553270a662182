"""Megatron(-Bridge) ``progress.txt``: TAB-separated, ``key: value`` fields, one event per line.

``Starting job`` lines are restart banners (new segment); lines with ``Iteration:`` are records.
``Job throughput`` (TFLOP/s/GPU, Bridge: MODEL_TFLOP/s/GPU) goes to ``tflops_per_gpu_logged``;
it is an average since the job started, not an interval value.
"""

from __future__ import annotations

import re

from .preprocess import to_float
from .schema import snake_case

DETECT_RE = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\tJob ID:")
_NUM_RE = re.compile(r"^\s*([-+\d.eE,]+)")


def parse(text: str) -> tuple[str, dict, int | None] | None:
    """Return (event, record-or-{}, gpus) or None when the line is not a progress.txt line."""
    if not DETECT_RE.match(text):
        return None
    parts = text.split("\t")
    rec: dict = {"timestamp": parts[0]}
    event = ""
    gpus = None
    for part in parts[1:]:
        key, sep, raw = part.partition(": ")
        if not sep:
            event = part.strip()
            continue
        key = key.strip()
        if key == "Job ID":
            continue
        m = _NUM_RE.match(raw)
        value = to_float(m.group(1)) if m else None
        if key == "# GPUs":
            gpus = int(value) if value is not None else None
            rec["gpus"] = value
        elif key == "Iteration":
            rec["iteration"] = int(value) if value is not None else None
        elif key == "Job throughput":
            rec["tflops_per_gpu_logged"] = value
        elif value is not None:
            rec[snake_case(key)] = value
    rec["event_" + snake_case(event or "none")] = 1.0
    return event, rec, gpus
