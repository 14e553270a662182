"""MaxText ``completed step`` lines and NeMo Automodel ``step N | ...`` lines (slow path).

* MaxText (``MaxText/metric_logger.py``): ``completed step: 9, seconds: 5.667, TFLOP/s/device: 134.924,
  Tokens/s/device: 8672.758, total_weights: 196608, loss: 10.374``; older versions print
  ``TFLOP/s:`` (also per device) and no token rate. ``seconds`` is the measured step time.
* NeMo Automodel recipes: ``step 4 | epoch 0 | loss 1.2345 | grad_norm 3.4567 | lr 1.00e-05 |
  mem 45.67 GiB | tps 9876.54(1234.57/gpu) | num_label_tokens 8192``; ``tps`` is tokens/s of the whole
  job, the bracketed ``/gpu`` value is per GPU (-> ``tokens_per_s``).
"""

from __future__ import annotations

import re

from .formats import LogFormat, register
from .preprocess import put_int, to_float
from .vocab import put_known_or_extra

MAXTEXT_RE = re.compile(r"completed step: (\d{1,19}),(.*)$")
_MAXTEXT_MAP = {
    "seconds": "elapsed_s",
    "TFLOP/s/device": "tflops_per_gpu_logged",
    "TFLOP/s": "tflops_per_gpu_logged",
    "Tokens/s/device": "tokens_per_s",
    "loss": "loss",
}


_MAXTEXT_OUT = frozenset(_MAXTEXT_MAP.values())
_AUTOMODEL_OUT = frozenset({"loss", "grad_norm", "lr", "tokens_per_s", "tokens_per_s_total", "mem_gib", "epoch"})


def parse_maxtext(text: str) -> dict | None:
    m = MAXTEXT_RE.search(text)
    if not m:
        return None
    rec: dict = {}
    put_int(rec, "iteration", m.group(1))
    for part in m.group(2).split(","):
        key, sep, raw = part.partition(":")
        if not sep:
            continue
        key = key.strip()
        v = to_float(raw)
        if v is None:
            continue
        if key in _MAXTEXT_MAP:
            rec.setdefault(_MAXTEXT_MAP[key], v)
        else:
            put_known_or_extra(rec, key, raw.strip(), v, _MAXTEXT_OUT)
    return rec if len(rec) > 1 else None


AUTOMODEL_RE = re.compile(r"(?:^|[\s\]:-])step (\d{1,19}) \| epoch (\d{1,9}) \|(.*)$")
_AUTOMODEL_TPS = re.compile(r"^([-+\d.eE,]{1,40})\(([-+\d.eE,]{1,40})/gpu\)$")
_AUTOMODEL_MAP = {"loss": "loss", "grad_norm": "grad_norm", "lr": "lr"}


def parse_automodel(text: str) -> dict | None:
    m = AUTOMODEL_RE.search(text)
    if not m:
        return None
    rec: dict = {"epoch": float(m.group(2))}
    put_int(rec, "iteration", m.group(1))
    for part in m.group(3).split("|"):
        key, _, raw = part.strip().partition(" ")
        raw = raw.strip()
        if not key:
            continue
        if key == "tps":
            t = _AUTOMODEL_TPS.match(raw.replace(" ", ""))
            if t:
                rec["tokens_per_s_total"] = to_float(t.group(1))
                rec["tokens_per_s"] = to_float(t.group(2))
                continue
        if key == "mem" and raw.endswith("GiB"):
            v = to_float(raw[:-3])
            if v is not None:
                rec["mem_gib"] = v
            continue
        v = to_float(raw)
        if v is not None:
            if key in _AUTOMODEL_MAP:
                rec.setdefault(_AUTOMODEL_MAP[key], v)
            else:
                put_known_or_extra(rec, key, raw, v, _AUTOMODEL_OUT)
    return rec if len(rec) > 2 else None


def _handle_maxtext(router, line: int, sub: int, label: str | None, text: str, s: str) -> bool:
    if "completed step:" not in text:
        return False
    rec = parse_maxtext(text)
    if rec is None:
        return False  # the strict detector counts it as failed
    if router.allowed("maxtext"):
        router.emit("maxtext", line, sub, label, rec)
    return True


def _handle_automodel(router, line: int, sub: int, label: str | None, text: str, s: str) -> bool:
    if "| epoch" not in text:
        return False
    rec = parse_automodel(text)
    if rec is None:
        return False
    if router.allowed("automodel"):
        router.emit("automodel", line, sub, label, rec)
    return True


register(LogFormat(
    name="maxtext",
    source="MaxText `completed step: N, seconds: S, TFLOP/s/device: T, Tokens/s/device: K, total_weights: W, loss: L`",
    example="completed step: 9, seconds: 5.667, TFLOP/s/device: 134.924, Tokens/s/device: 8672.758, "
            "total_weights: 196608, loss: 10.374",
    notes="`seconds` → `elapsed_s`; `TFLOP/s/device` (older logs: `TFLOP/s`) → `tflops_per_gpu_logged`; "
          "`Tokens/s/device` → `tokens_per_s`; other fields (`total_weights`, `Samples/s/device`) are extras",
    prefilter=r"completed step: ",
    detect=r"completed step: \d",
    order=75,
    handle=_handle_maxtext,
))

register(LogFormat(
    name="automodel",
    source="NeMo Automodel recipes `step N | epoch E | loss L | grad_norm G | lr X | mem M GiB | tps T(P/gpu)`",
    example="step 4 | epoch 0 | loss 1.2345 | grad_norm 3.4567 | lr 1.00e-05 | mem 45.67 GiB | "
            "tps 9876.54(1234.57/gpu) | num_label_tokens 8192",
    notes="`tps` is the job's tokens/s (`tokens_per_s_total`); the `/gpu` value → `tokens_per_s`; `mem` in GiB "
          "→ `mem_gib`",
    prefilter=r"step \d+ \| epoch \d",
    detect=r"(?:^|[\s\]:-])step \d{1,19} \| epoch \d",
    order=76,
    handle=_handle_automodel,
))
