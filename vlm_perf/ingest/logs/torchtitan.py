"""torchtitan console metrics line (fields separated by two spaces, thousands separators,
``mfu`` in percent -> fraction, ``memory`` in GiB)."""

from __future__ import annotations

import re

from .formats import LogFormat, register
from .preprocess import put_int, to_float
from .vocab import put_known_or_extra

DETECT_RE = re.compile(r"(?<![\w/])(?P<val>validate )?step:\s*(?P<step>\d+)\s{2,}(?:loss|wps|tps)")
_TS_RE = re.compile(r"\[titan\]\s+(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:,\d+)?)")
_FIELD_RE = re.compile(r"([A-Za-z_][\w()%/]*):\s*(\S+)")
_MEM_RE = re.compile(r"([\d.,]+)GiB\(([\d.,]+)%\)")

_MAP = {"loss": "loss", "grad_norm": "grad_norm", "tps": "tokens_per_s", "wps": "tokens_per_s",
        "tflops": "tflops_per_gpu_logged", "lr": "lr"}


_OUTPUTS = frozenset(_MAP.values()) | {"memory_gib", "memory_pct", "mfu_logged", "timestamp"}


def parse(text: str) -> tuple[str, dict | None] | None:
    m = DETECT_RE.search(text)
    if not m:
        return None
    if m.group("val"):
        return "validation", None
    rec: dict = {}
    put_int(rec, "iteration", m.group("step"))
    ts = _TS_RE.search(text)
    if ts:
        rec["timestamp"] = ts.group(1).replace(",", ".")
    body = text[m.start():]
    for key, raw in _FIELD_RE.findall(body[m.end("step") - m.start():]):
        if key == "memory":
            mm = _MEM_RE.match(raw)
            if mm:
                rec["memory_gib"] = to_float(mm.group(1))
                rec["memory_pct"] = to_float(mm.group(2))
            continue
        if key == "mfu":
            v = to_float(raw)  # 'N/A' with FP8/MX -> None
            if v is not None:
                rec["mfu_logged"] = v / 100.0
            continue
        v = to_float(raw)
        if v is not None:
            if key in _MAP:
                rec[_MAP[key]] = v
            else:
                put_known_or_extra(rec, key, raw, v, _OUTPUTS)
    return "torchtitan", rec


# ---- registration ------------------------------------------------------------------------------

def _handle(router, line: int, sub: int, label: str | None, text: str, s: str) -> bool:
    return router.train_or_validation("torchtitan", parse(text), line, sub, label)


register(LogFormat(
    name="torchtitan",
    source="torchtitan console metrics line",
    example="[rank0]:[titan] 2025-03-04 05:06:17,123 - root - INFO - step: 10  loss:  9.8765  grad_norm:  1.1234  "
            "memory: 41.00GiB(51.25%)  tps: 12,345  tflops: 567.89  mfu: 57.42%",
    notes="thousands separators; `mfu` % → fraction; `N/A` → null; `memory_gib`, `memory_pct`",
    prefilter=r"step:\s*\d",
    order=60,
    handle=_handle,
))
