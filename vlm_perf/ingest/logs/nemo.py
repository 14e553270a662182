"""NeMo progress lines (slow path: NeMo logs are small compared with Megatron ones).

* NeMo 2 ``ProgressPrinter``: ``Training epoch 0, iteration 12/100 | lr: 1e-05 | reduced_train_loss: 2.3``
  (no trailing ``|``; values ``{:.4}`` so large ones are e-notation; ``max_memory_*`` in bytes).
* NeMo 1 Lightning bar postfix: ``Epoch 0: 10%|#| 12/120 [00:24<03:36, 2.00s/it, reduced_train_loss=2.35,
  global_step=11.00, consumed_samples=2.56e+5, v_num=1]``.
"""

from __future__ import annotations

import math
import re

from .formats import LogFormat, register
from .preprocess import put_int, to_float
from .vocab import put_known_or_extra

NEMO2_RE = re.compile(r"(?P<kind>Training|Validation|Testing) epoch (?P<epoch>\d+), iteration (?P<it>\d+)/(?P<total>\d+)(?P<rest>.*)$")
NEMO1_RE = re.compile(
    r"Epoch (?P<epoch>\d+):(?:\s*:)?\s*\d+%\|[^|]*\|\s*(?P<n>\d+)/(?P<total>\d+)\s*\[(?P<post>[^\]]*)\]?"
)
_RATE_RE = re.compile(r"([\d.]+)\s*(s/it|it/s)")
#: A postfix ``key=value``; keys may hold single spaces (``train_step_timing in s=4.21``: the whole key,
#: which used to be read as a key ``s``, losing the step time: issue 19)
_KV1_RE = re.compile(r"(?:^|(?<=[,\[]))\s*(\w+(?: \w+){0,4})=([^,\]\s]+)")

# key -> core column (seconds and TFLOP/s already in core units)
_MAP = {
    "reduced_train_loss": "loss",
    "train_loss": "loss",
    "loss": "loss",
    "lr": "lr",
    "global_step": "iteration",
    "consumed_samples": "consumed_samples",
    "global_batch_size": "global_batch_size",
    "train_step_timing in s": "elapsed_s",
    "train_step_timing": "elapsed_s",
    "TFLOPS_per_GPU": "tflops_per_gpu_logged",
    "tflops_per_sec_per_gpu": "tflops_per_gpu_logged",
    "grad_norm": "grad_norm",
}


_OUTPUTS = frozenset(_MAP.values())


def _put(rec: dict, key: str, value: float | None) -> None:
    if value is None:
        return
    name = _MAP.get(key)
    if name is None:  # a key NeMo's own table does not know: through the vocabulary, else an extra
        put_known_or_extra(rec, key, None, value, _OUTPUTS)
        return
    rec.setdefault(name, value)


def parse_nemo2(text: str) -> tuple[str, dict | None] | None:
    """Return None if not a NeMo 2 line, ('ignore', None) for validation/testing lines,
    ('nemo2', record) for training lines (record None when no field parsed)."""
    m = NEMO2_RE.search(text)
    if not m:
        return None
    if m.group("kind") != "Training":
        return "validation", None
    rec: dict = {"epoch": float(m.group("epoch"))}
    for field in m.group("rest").split("|"):
        if ":" not in field:
            continue
        key, _, raw = field.rpartition(":")
        _put(rec, key.strip(), to_float(raw))
    put_int(rec, "iteration", rec["iteration"] if "iteration" in rec else m.group("it"))
    if len(rec) <= 2:
        return "nemo2", None
    return "nemo2", rec


def parse_nemo1(text: str) -> dict | None:
    m = NEMO1_RE.search(text)
    if not m:
        return None
    post = m.group("post")
    rec: dict = {"epoch": float(m.group("epoch"))}
    r = _RATE_RE.search(post)
    if r:
        v = float(r.group(1))
        rec["elapsed_s"] = v if r.group(2) == "s/it" else (1.0 / v if v else None)
    for key, raw in _KV1_RE.findall(post):
        if key == "v_num":
            continue
        # the current bar prints a NaN loss as `nan.0`
        _put(rec, key, math.nan if raw.lower() in ("nan.0", "-nan.0") else to_float(raw))
    # no global_step in the postfix: fall back to the bar position
    put_int(rec, "iteration", rec["iteration"] if "iteration" in rec else m.group("n"))
    return rec


# ---- registration ------------------------------------------------------------------------------

def _handle_nemo2(router, line: int, sub: int, label: str | None, text: str, s: str) -> bool:
    return router.train_or_validation("nemo2", parse_nemo2(text), line, sub, label)


def _handle_nemo1(router, line: int, sub: int, label: str | None, text: str, s: str) -> bool:
    if "Epoch" not in text:
        return False
    rec = parse_nemo1(text)
    if rec is None:
        return False
    if router.allowed("nemo1"):
        router.emit("nemo1", line, sub, label, rec)
    return True


register(LogFormat(
    name="nemo2",
    source="NeMo 2 `ProgressPrinter` `Training epoch E, iteration n/N | k: v`",
    example="Training epoch 0, iteration 11/999 | lr: 0.0001 | global_step: 11 | consumed_samples: 1536 | "
            "reduced_train_loss: 2.345 | train_step_timing in s: 2.5 | TFLOPS_per_GPU: 1.234e+03 | "
            "global_batch_size: 128",
    notes="told apart from Megatron by the `epoch E, iteration` prefix; validation lines ignored (`validation`); "
          "`max_memory_*` kept in bytes",
    prefilter=r"epoch \d+, iteration",
    detect=r"Training epoch \d+, iteration \d+/\d+",
    order=20,
    handle=_handle_nemo2,
))

register(LogFormat(
    name="nemo1",
    source="NeMo 1 Lightning progress bar with its `k=v` postfix (older `…, 2.00s/it, reduced_train_loss=…]` and "
           "the current `Epoch 0: :   3%|…| 9/300 [00:39<21:06, reduced_train_loss=…, global_step=9e+3, …]`)",
    example="Epoch 0: 10%|#         | 12/120 [00:24<03:36, 2.00s/it, reduced_train_loss=2.350, global_step=11.00, "
            "consumed_samples=2.56e+5, v_num=1]",
    notes="`elapsed_s` from the bar rate when it is printed; `global_step` (any float spelling) is the iteration, "
          "else the bar position",
    prefilter=r"Epoch \d+:",
    detect=r"Epoch \d+:[^|]{0,40}\d+%\|",
    order=70,
    handle=_handle_nemo1,
))
