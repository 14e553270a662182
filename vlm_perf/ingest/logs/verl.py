"""veRL console lines ``step:N - key:value - ...`` (Ray prefix stripped beforehand).

MFU (``perf/mfu/actor``, early ``mfu/actor``) is already a fraction. ``perf/throughput`` is
tokens/s/GPU and ``perf/time_per_step`` seconds. Hard-wrapped continuations are joined by the
router before this parser sees the line.
"""

from __future__ import annotations

import re

from .preprocess import to_float
from .schema import snake_case

DETECT_RE = re.compile(r"^step:(\d+)(?: - |\s*$)")
#: A physical line that continues a wrapped veRL line: no spaces except `` - `` separators.
CONTINUATION_RE = re.compile(r"^[^\s{}\[\]]+(?: - [^\s{}\[\]]+)*\s*$")

MAP = {
    "perf/mfu/actor": ("mfu_logged", 1.0),
    "mfu/actor": ("mfu_logged", 1.0),
    "perf/throughput": ("tokens_per_s", 1.0),
    "perf/time_per_step": ("elapsed_s", 1.0),
    "actor/pg_loss": ("loss", 1.0),
    "actor/grad_norm": ("grad_norm", 1.0),
    "actor/lr": ("lr", 1.0),
}


def record_from_items(step: int, items: dict) -> dict:
    rec: dict = {"iteration": step}
    for key, raw in items.items():
        v = to_float(raw)
        if v is None:
            continue
        if v == 0.0:
            v = 0.0  # -0.000 -> 0.0 (quirk 26)
        name, mult = MAP.get(key, (snake_case(key), 1.0))
        rec.setdefault(name, v * mult)
    return rec


def parse(text: str) -> dict | None:
    m = DETECT_RE.match(text)
    if not m:
        return None
    items = {}
    for part in text.split(" - ")[1:]:
        key, sep, raw = part.partition(":")
        if sep:
            items[key.strip()] = raw.strip()
    return record_from_items(int(m.group(1)), items)
