"""Key accounting for ``parse --explain``: every key of a line read, and what became of it.

``account(text, row)`` finds the keys of one line the way its line shape prints them (``line_keys``: a metrics
dict, a veRL ``step:N - k:v`` line, a Megatron ``| key: value |`` line, NeMo-RL / DeepSpeed-Chat bullets and
pairs, any other ``key: value`` / ``key=value`` / ``key value`` run) and says, per key, one of:

* ``step`` — the step / epoch / progress counter the record's iteration (or epoch) came from;
* ``mapped`` — the canonical column it filled (``vocab.lookup``'s rule, or the format's own table);
* ``extra`` — kept as an extra column (not in the vocabulary, an evaluation key, a second key for a filled
  column), with the column's name;
* ``dropped`` — not kept, and why: the value is not a number (``unwrap``'s reason: a wrapper not understood,
  a list of several values, text), the column it means already held another key's value (a duplicate), its unit
  was not understood, or the line's format does not read it.

``row`` is the record the parser made of the line (None: the line gave no record; then every key is
``dropped`` with the reason the line gave none). Nothing here decides anything the parser did not: the
accounting reads the parser's row and the same vocabulary.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from .schema import snake_case
from .vocab import lookup, unwrap, value_of

#: Keys that give the record's step or epoch (or progress), never a metric column.
_STEP_KEYS = frozenset({"step", "steps", "global_step", "iteration", "iter", "it", "_step", "current_steps",
                        "global step", "train/global_step", "trainer/global_step", "training/global_step",
                        "global_step/max_steps", "total_steps", "max_steps", "epoch", "training/epoch", "train/epoch",
                        "ppo_ep", "ppo epoch", "percentage", "elapsed_time", "remaining_time", "_runtime",
                        "_timestamp", "v_num", "rank"})
_MODE_WORDS = frozenset({"train", "training"})
_RANK_COORDS = frozenset({"DP", "PP", "TP", "EP", "CP", "SP", "dp", "pp", "tp", "ep", "cp", "rank_id"})
_MEGA_FIELD = re.compile(r"\|\s*([^|:]{1,120}?):\s*([^|]{0,200})")
_MEGA_ITER = re.compile(r"iteration\s+\d+\s*/\s*\d+")
_BULLET = re.compile(r"^•\s{0,8}(?P<key>[^:]{1,160}?):\s{0,8}(?P<val>.*)$")
_DS_PAIR = re.compile(r"(?:^|\|)\s?(?P<key>[A-Za-z][A-Za-z0-9 ]{0,40}?)=(?P<val>[^|]{1,60})")


@dataclass(frozen=True)
class KeyFate:
    key: str
    fate: str  # "step" | "mapped" | "extra" | "dropped"
    column: str
    why: str

    def text(self) -> str:
        col = f" -> {self.column}" if self.column else ""
        return f"{self.key}{col} ({self.why})"


def line_keys(clean: str) -> tuple[str, list[tuple[str, object]]]:
    """(the line shape, its (key, raw value) pairs in print order)."""
    from .dicts import load_dict
    from .generic import pairs_at

    s = clean.strip()
    if "{" in s and "}" in s:
        d = load_dict(s)
        if d is not None:
            if "step" in d and isinstance(d.get("data"), dict):  # veRL file logger
                return "veRL JSON step", [("step", d["step"]), *d["data"].items()]
            if "step" in d and isinstance(d.get("metrics"), dict):  # ROLL's metrics_tag: the record the parser reads
                from .dicts import flatten_step_metrics

                return "step + metrics dict", [(str(k), v) for k, v in flatten_step_metrics(d).items()]
            return "metrics dict", [(str(k), v) for k, v in d.items()]
    from .verl import DETECT_RE as _VERL

    if _VERL.match(s):
        items = []
        for part in s.split(" - "):
            key, sep, raw = part.partition(":")
            if sep:
                items.append((key.strip(), raw.strip()))
        return "veRL step line", items
    if _MEGA_ITER.search(s) and "|" in s:
        return "Megatron iteration line", [(k.strip(), v.strip()) for k, v in _MEGA_FIELD.findall(s)]
    if s.startswith("•"):
        m = _BULLET.match(s)
        return "NeMo-RL bullet", ([(m.group("key").strip(), m.group("val").strip())] if m else [])
    if s.startswith("|") and "=" in s:
        return "DeepSpeed-Chat timing line", [(m.group("key").strip(), m.group("val").strip())
                                              for m in _DS_PAIR.finditer(s)]
    from .generic import find_step

    dropped: list = []
    st = find_step(s)
    head: list[tuple[str, object]] = []
    if st is not None:  # the step is read first and cut out, as the generic extractor does
        body = st.post or "" if st.shape == "bar" else s[:st.start] + " " + s[st.end:]
        head = [("step", str(st.n))]  # the printed step (`step: 10`, `Iter(train) [10/..]`, `[batch=10/..]`, a bar)
    else:
        body = s
    pairs = [(k, v) for k, v, _ in pairs_at(body, dropped)]
    return "key/value run", head + pairs + [(k, _NOT_ONE if why.startswith("a list of several") else _Dropped(why))
                                            for k, why in dropped]


#: Marker for a value ``pairs_at`` saw as a list of several values
_NOT_ONE = "[…several values…]"


class _Dropped(str):
    """A value ``pairs_at`` did not read, carrying its reason."""


def _number(raw: object) -> tuple[float | None, str]:
    if isinstance(raw, _Dropped):
        return None, str(raw)
    if isinstance(raw, bool) or raw is None:
        return None, "not a number"
    if isinstance(raw, (int, float)):
        return float(raw), ""
    if isinstance(raw, (list, tuple)):
        return (None, f"a list of {len(raw)} values (not one number)") if len(raw) != 1 else _number(raw[0])
    if not isinstance(raw, str):
        return None, f"a {type(raw).__name__}, not a number"
    if raw == _NOT_ONE:
        return None, "a list of several values (not one number)"
    f = _FLOPS_VALUE.match(raw.strip())
    if f:  # GPT-NeoX `112.9TFLOPS`: a rate with its unit, read in TFLOP/s by the Megatron reader
        return float(f.group(1)) * _FLOPS_SCALE[f.group(2)], "a FLOP/s rate with its unit, in TFLOP/s"
    u = unwrap(raw)
    if u.text is None:
        return None, u.why + (f" ({raw.strip()[:40]!r})" if u.why == "not a number" and raw.strip() else "")
    v = value_of(raw)
    if v is None:
        return None, f"not a number ({raw.strip()[:40]!r})"
    return v, (f"unwrapped from {u.wrapper}" if u.wrapper else "")


_FLOPS_VALUE = re.compile(r"^([-+]?\d+(?:\.\d*)?(?:[eE][-+]?\d+)?)\s*([KMGTPEZ]?)FLOPS$")
_FLOPS_SCALE = {"": 1e-12, "K": 1e-9, "M": 1e-6, "G": 1e-3, "T": 1.0, "P": 1e3, "E": 1e6, "Z": 1e9}


def _close(a: object, v: float) -> bool:
    """``a`` is the printed number ``v`` in the column's unit (as printed, a percentage / 100, ms -> s)."""
    return _same(a, v) or _same(a, v / 100) or _same(a, v * 1e-3)


def _same(a: object, b: float) -> bool:
    if not isinstance(a, (int, float)) or isinstance(a, bool):
        return False
    if math.isnan(b):
        return isinstance(a, float) and math.isnan(a)
    return a == b or (b != 0 and abs(a - b) <= 1e-9 * abs(b)) or abs(a - b) <= 1e-12


def _extra_names(key: str) -> list[str]:
    base = snake_case(key)
    names = [base, f"{base}_s", f"eval_{base}"] + [f"{base}_extra"] + [f"{base}_extra{i}" for i in range(2, 10)]
    if "/" in key or " " in key:
        names.append(snake_case(key.split("/")[-1]))
    return names


def classify(key: str, raw: object, row: dict | None, why_none: str = "") -> KeyFate:
    """What became of one printed key (see the module doc)."""
    low = key.strip().lower()
    if row is None:
        return KeyFate(key, "dropped", "", why_none or "the line gave no record")
    if low in _STEP_KEYS or low.split(" ")[-1] in ("step", "steps", "iteration"):
        kept = next((n for n in _extra_names(key) if n not in ("epoch", "iteration") and row.get(n) is not None), None)
        if kept is not None:  # a counter the reader kept beside the step (veRL's training/global_step)
            return KeyFate(key, "extra", kept, "a step / epoch counter kept as an extra (the record's step is another key)")
        col = "epoch" if "epoch" in low else ("iteration" if row.get("iteration") is not None else "")
        return KeyFate(key, "step", col, "the record's step / epoch / progress, not a metric")
    if key.strip() in _RANK_COORDS:
        return KeyFate(key, "dropped", "", "a parallel-rank coordinate of the printing process, not a metric")
    v, note = _number(raw)
    if v is None:
        return KeyFate(key, "dropped", "", note)
    first, sep, rest = key.strip().partition(" ")
    m = lookup(rest if sep and first.lower() in _MODE_WORDS else key)  # `Train loss/train/total`: the mode word
    if m is not None and m.column:
        got = row.get(m.column)
        want = value_of(raw, m) if isinstance(raw, str) else v * m.mult
        if got is not None and (want is None or _close(got, want) or _close(got, v)):
            rule = m.why + (f"; {note}" if note else "")
            return KeyFate(key, "mapped", m.column, rule)
    for name in _extra_names(key):
        got = row.get(name)
        if got is not None and _close(got, v):
            if m is not None and m.column and name != m.column:
                why = f"a second key for {m.column!r} (it holds an earlier key's value): kept as an extra"
            elif m is not None and not m.column:
                why = f"deliberately an extra: {m.why}"
            else:
                why = "not in the vocabulary" + (" (an evaluation key)" if name.startswith("eval_") else "")
            return KeyFate(key, "extra", name, why + (f"; {note}" if note else ""))
    # the format's own table may have mapped it: a canonical column holding exactly this number
    for col, got in row.items():
        if col in ("iteration", "line", "_sub", "segment") or not isinstance(got, (int, float)):
            continue
        if _close(got, v) and (m is None or not m.column or m.column == col):
            return KeyFate(key, "mapped", col, "the format's own key table" + (f"; {note}" if note else ""))
    if m is not None and m.column and row.get(m.column) is not None:
        return KeyFate(key, "dropped", "", f"duplicate: {m.column!r} already holds another key's value")
    if m is not None and m.column:
        return KeyFate(key, "dropped", "", f"means {m.column!r} but the format's reader did not take it")
    return KeyFate(key, "dropped", "", f"not read by the {row.get('framework') or '?'} reader (its own table does not "
                                       "take this key)")


def account(clean: str, row: dict | None, why_none: str = "") -> tuple[str, list[KeyFate]]:
    """(the line shape, the fate of each key of the line)."""
    shape, pairs = line_keys(clean)
    return shape, [classify(k, v, row, why_none) for k, v in pairs]
