"""nanotron and LitGPT console lines (slow path).

* nanotron (``huggingface/nanotron``, ``trainer.py`` log entries): ``[0428 09:17:07|DP=0|PP=0|TP=0]:
  iteration: 12 / 100 | consumed_tokens: 49.2K | elapsed_time_per_iteration_ms: 5.2K |
  tokens_per_sec: 6.3K | tokens_per_sec_per_gpu: 790 | global_batch_size: 16 | lm_loss: 10.8 |
  lr: 0.0003 | model_tflops_per_gpu: 16.6 | hardware_tflops_per_gpu: 16.6 | grad_norm: 11.3``;
  values carry K/M/G suffixes and some lines omit trailing fields.
* LitGPT (``litgpt pretrain`` / ``finetune``): ``Epoch 1 | iter 100 step 25 | loss train: 3.456,
  val: n/a | iter time: 512.33 ms (step) remaining time: 1:23:45``; ``step`` is the optimizer step
  (the ``iteration`` column), ``iter`` the micro-batch iteration (``micro_iter``); ``iter time`` is
  one micro-batch iteration, kept as ``iter_time_s`` (not ``elapsed_s``, which is per step).
"""

from __future__ import annotations

import re

from .formats import LogFormat, register
from .preprocess import put_int, to_float
from .vocab import put_known_or_extra

NANOTRON_RE = re.compile(r"(?:^|[\]:\s])iteration: (\d{1,19}) / (\d{1,19})(?: \|(.*))?$")
_NANOTRON_MAP = {
    "elapsed_time_per_iteration_ms": ("elapsed_s", 1e-3),
    "tokens_per_sec_per_gpu": ("tokens_per_s", 1.0),
    "lm_loss": ("loss", 1.0),
    "lr": ("lr", 1.0),
    "grad_norm": ("grad_norm", 1.0),
    "global_batch_size": ("global_batch_size", 1.0),
    "model_tflops_per_gpu": ("tflops_per_gpu_logged", 1.0),
    "tokens_per_sec": ("tokens_per_s_total", 1.0),
}
_NANOTRON_OUT = frozenset(name for name, _ in _NANOTRON_MAP.values()) | {"train_iters"}


def parse_nanotron(text: str) -> dict | None:
    m = NANOTRON_RE.search(text)
    if not m:
        return None
    rec: dict = {}
    put_int(rec, "iteration", m.group(1))
    rec["train_iters"] = to_float(m.group(2))
    for part in (m.group(3) or "").split("|"):
        key, sep, raw = part.partition(":")
        key = key.strip()
        if not sep or not key:
            continue
        v = to_float(raw)  # K/M/G suffixes: 5.2K -> 5200
        if v is None:
            continue
        if key not in _NANOTRON_MAP:
            put_known_or_extra(rec, key, raw.strip(), v, _NANOTRON_OUT)
            continue
        name, mult = _NANOTRON_MAP[key]
        if name == "global_batch_size":
            put_int(rec, name, v)
            continue
        rec.setdefault(name, v * mult)
    return rec


LITGPT_RE = re.compile(r"Epoch (\d{1,9}) \| iter (\d{1,19}) step (\d{1,19}) \|(.*)$")
_LITGPT_LOSS = re.compile(r"loss train: ([-+\w.]{1,40})")
_LITGPT_VAL = re.compile(r"val: ([-+\w./]{1,40})")
_LITGPT_TIME = re.compile(r"iter time: ([\d.]{1,20}) ?ms")


def parse_litgpt(text: str) -> dict | None:
    m = LITGPT_RE.search(text)
    if not m:
        return None
    rec: dict = {"epoch": float(m.group(1)), "micro_iter": float(m.group(2))}
    put_int(rec, "iteration", m.group(3))
    rest = m.group(4)
    for rx, name, mult in ((_LITGPT_LOSS, "loss", 1.0), (_LITGPT_VAL, "val_loss", 1.0),
                           (_LITGPT_TIME, "iter_time_s", 1e-3)):
        found = rx.search(rest)
        v = to_float(found.group(1)) if found else None
        if v is not None:
            rec[name] = v * mult
    return rec


def _handle_nanotron(router, line: int, sub: int, label: str | None, text: str, s: str) -> bool:
    if "iteration: " not in text:
        return False
    rec = parse_nanotron(text)
    if rec is None:
        return False
    if router.allowed("nanotron"):
        router.emit("nanotron", line, sub, label, rec)
    return True


def _handle_litgpt(router, line: int, sub: int, label: str | None, text: str, s: str) -> bool:
    if "| iter " not in text:
        return False
    rec = parse_litgpt(text)
    if rec is None:
        return False
    if router.allowed("litgpt"):
        router.emit("litgpt", line, sub, label, rec)
    return True


register(LogFormat(
    name="nanotron",
    source="nanotron `iteration: N / M | consumed_tokens: … | elapsed_time_per_iteration_ms: … | "
           "model_tflops_per_gpu: … | …`",
    example="[0428 09:17:07|DP=0|PP=0|TP=0|lighteval.trainer]: iteration: 12 / 100 | consumed_tokens: 49.2K | "
            "elapsed_time_per_iteration_ms: 5.2K | tokens_per_sec: 6.3K | tokens_per_sec_per_gpu: 790 | "
            "global_batch_size: 16 | lm_loss: 10.8 | lr: 0.0003 | model_tflops_per_gpu: 16.6 | "
            "hardware_tflops_per_gpu: 16.6 | grad_norm: 11.3",
    notes="K/M/G suffixes expanded (`5.2K` → 5200); `elapsed_time_per_iteration_ms` → `elapsed_s`; "
          "`model_tflops_per_gpu` → `tflops_per_gpu_logged` (`hardware_tflops_per_gpu` kept as an extra); "
          "`tokens_per_sec_per_gpu` → `tokens_per_s`, `tokens_per_sec` → `tokens_per_s_total`; `lm_loss` → `loss`",
    prefilter=r"iteration: \d+ / \d",
    detect=r"(?:^|[\]:\s])iteration: \d{1,19} / \d",
    order=77,
    handle=_handle_nanotron,
))

register(LogFormat(
    name="litgpt",
    source="LitGPT `pretrain` / `finetune` console `Epoch E | iter I step S | loss train: L, val: V | iter time: T ms`",
    example="Epoch 1 | iter 100 step 25 | loss train: 3.456, val: n/a | iter time: 512.33 ms (step) remaining time: "
            "1:23:45",
    notes="`step` (optimizer step) → `iteration`, `iter` (micro-batch) → `micro_iter`; `iter time` is one "
          "micro-batch iteration → `iter_time_s`, not `elapsed_s`; `val: n/a` → null `val_loss`",
    prefilter=r"\| iter \d+ step \d",
    detect=r"Epoch \d{1,9} \| iter \d{1,19} step \d",
    order=78,
    handle=_handle_litgpt,
))
