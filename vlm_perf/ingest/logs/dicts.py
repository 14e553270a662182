"""Dict-shaped records: HF Trainer/accelerate console dicts, LLaMA-Factory ``trainer_log.jsonl``,
ms-swift ``logging.jsonl``, veRL file-logger JSONL and HF ``trainer_state.json``.

A dict is searched anywhere in the line (it is often glued to a tqdm bar). Python-repr dicts are
read with ``ast.literal_eval`` after quoting bare ``nan``/``inf``; JSON with ``json.loads``.
Every value goes through ``to_float`` because newer transformers print floats as strings.
"""

from __future__ import annotations

import ast
import json
import re

from . import verl
from .preprocess import to_float, to_seconds
from .schema import snake_case

DICT_RE = re.compile(r"\{.*\}")
_BARE_RE = re.compile(r"(?<=[:\[,\s])(-?(?:nan|inf|NaN|Infinity|-Infinity))(?=\s*[,}\]])")

HF_MAP = {
    "loss": "loss",
    "train_loss": "train_loss",
    "learning_rate": "lr",
    "lr": "lr",
    "grad_norm": "grad_norm",
    "step": "iteration",
    "global_step": "iteration",
    "current_steps": "iteration",
}


def load_dict(text: str) -> dict | None:
    """Parse the outermost ``{...}`` in ``text`` (JSON or Python repr); None if it is not a dict."""
    m = DICT_RE.search(text)
    if not m:
        return None
    blob = m.group(0)
    try:
        value = json.loads(blob)
    except ValueError:
        try:
            value = ast.literal_eval(_BARE_RE.sub(r"'\1'", blob))
        except (ValueError, SyntaxError, MemoryError, RecursionError):
            return None
    return value if isinstance(value, dict) else None


def classify(d: dict) -> str:
    if "current_steps" in d:
        return "llamafactory"
    if "global_step/max_steps" in d:
        return "swift"
    if "step" in d and isinstance(d.get("data"), dict):
        return "verl-jsonl"
    return "hf"


def record_from_dict(d: dict) -> tuple[str, dict]:
    """(format, record) for any supported dict shape. ``iteration`` may be absent (HF console)."""
    fmt = classify(d)
    if fmt == "verl-jsonl":
        step = to_float(d.get("step"))
        rec = verl.record_from_items(int(step) if step is not None else None, d["data"])
        return fmt, rec
    rec: dict = {}
    for key, raw in d.items():
        if key == "global_step/max_steps" and isinstance(raw, str) and "/" in raw:
            cur, _, tot = raw.partition("/")
            rec["iteration"] = int(to_float(cur)) if to_float(cur) is not None else None
            rec["max_steps"] = to_float(tot)
            continue
        if key in ("elapsed_time", "remaining_time"):
            secs = to_seconds(raw)
            if secs is not None:
                rec[key + "_s"] = secs  # cumulative wall time since (re)start, not per iteration
            continue
        if key == "percentage":
            v = to_float(raw)
            if v is not None:
                rec["percentage"] = v
            continue
        v = to_float(raw)
        if v is None:
            continue
        name = HF_MAP.get(key) or snake_case(key)
        if name == "iteration":
            v = int(v)
        rec.setdefault(name, v)
    if fmt == "swift":
        speed = rec.get("train_speed_iter_s")
        if speed:
            rec["elapsed_s"] = 1.0 / speed
    if fmt == "llamafactory" and "throughput" in rec:
        # cumulative tokens / elapsed since (re)start, all GPUs: NOT tokens/s/GPU, keep as extra
        rec["throughput_tokens_per_s"] = rec.pop("throughput")
    return fmt, rec


_ENTRY_RE = re.compile(r"\{[^{}]*\}")


def parse_trainer_state(text: str) -> list[tuple[int, dict]]:
    """``trainer_state.json`` -> [(line, record)] from ``log_history`` (flat dicts)."""
    state = json.loads(text)
    history = state.get("log_history") if isinstance(state, dict) else None
    if not isinstance(history, list):
        raise ValueError("no log_history list")
    start = text.find('"log_history"')
    out: list[tuple[int, dict]] = []
    matches = list(_ENTRY_RE.finditer(text, start))
    # the flat entries appear in order; use their text positions for line numbers
    for i, entry in enumerate(history):
        if not isinstance(entry, dict):
            continue
        pos = matches[i].start() if i < len(matches) else start
        line = text.count("\n", 0, pos) + 1
        _, rec = record_from_dict(entry)
        rec["iteration"] = int(entry["step"]) if "step" in entry else rec.get("iteration")
        out.append((line, rec))
    return out
