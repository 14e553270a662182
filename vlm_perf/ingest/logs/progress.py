"""Megatron(-Bridge) ``progress.txt``: TAB-separated, ``key: value`` fields, one event per line.

``Starting job`` lines are restart banners (new segment); lines with ``Iteration:`` are records.
``Job throughput`` (TFLOP/s/GPU, Bridge: MODEL_TFLOP/s/GPU) goes to ``tflops_per_gpu_logged``;
it is an average since the job started, not an interval value.
"""

from __future__ import annotations

import re

from .formats import LogFormat, register
from .preprocess import put_int, to_float, to_int
from .schema import extra_name, snake_case

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
            gpus = to_int(value)
            rec["gpus"] = value
        elif key == "Iteration":
            put_int(rec, "iteration", value)
        elif key == "Job throughput":
            rec["tflops_per_gpu_logged"] = value
        elif value is not None:
            rec[extra_name(snake_case(key), rec, {"tflops_per_gpu_logged", "iteration", "gpus"})] = value
    rec["event_" + snake_case(event or "none")] = 1.0
    return event, rec, gpus


# ---- registration ------------------------------------------------------------------------------

def _handle(router, line: int, sub: int, label: str | None, text: str, s: str) -> bool:
    pr = parse(s)
    if pr is None:
        return False
    event, rec, gpus = pr
    if gpus is not None:
        router.run_config.setdefault("world_size", gpus)
        router.run_config.setdefault("progress_gpus", gpus)
    if event == "Starting job":
        router.banners.append((line, sub))
    if "iteration" in rec:
        if router.allowed("megatron-progress"):
            router.emit("megatron-progress", line, sub, label, rec)
    else:
        router.ignored["progress_event"] += 1
    return True


register(LogFormat(
    name="megatron-progress",
    source="Megatron `progress.txt` (`--log-progress`)",
    example="2025-01-01 10:05:00\tJob ID: 123\t# GPUs: 64\tIteration: 100\tJob throughput: 410.5 TFLOP/s/GPU"
            "\tCumulative throughput: 410.5 TFLOP/s/GPU\tFloating-point operations: 1.23e+18\tTokens (in billions): 0.52",
    notes="`Job throughput` → `tflops_per_gpu_logged` (average since job start); `Starting job` is a restart "
          "banner; `# GPUs` → `run_config[\"world_size\"]`",
    example_suffix=".txt",
    prefilter=r"\tJob ID:",
    detect=DETECT_RE.pattern,
    order=40,
    handle=_handle,
))
