"""Shared line pre-processing: ANSI colours, launcher prefixes, curly quotes, number tokens.

Each rule exists twice: as a polars expression (hot path, whole columns at once) and as a Python
function (slow path, only for the few lines a vectorised pre-filter selected). Both use the same
regular expressions so they agree.
"""

from __future__ import annotations

import math
import re

import polars as pl

# ESC [ ... final byte — covers colours incl. 24-bit `ESC[38;2;r;g;bm` and cursor codes tqdm emits.
ANSI_RE = r"\x1b\[[0-?]*[ -/]*[@-~]"

# At most one launcher prefix at the start of a line (after ANSI removal). Alternatives, in order:
#   torchrun --tee `[default3]:` / rank filter `[rank0]:`;  srun -l `  3: ` (digits then colon
#   then space/end, so a leading clock time `12:34:56` is NOT a label);  TorchX / NeMo-Run
#   `trainer/0 `;  Ray `(TaskRunner pid=1234) `.
PREFIX_RE = (
    r"^(?:\[[A-Za-z_]*\d+\]:"
    r"|\s*\d+:(?:\s|$)"
    r"|[A-Za-z_][\w.-]*/\d+\s"
    r"|\([^()]*pid=\d+[^()]*\)\s?)\s?"
)
_PREFIX_STRIP = "[]():\t "

_ansi = re.compile(ANSI_RE)
_prefix = re.compile(PREFIX_RE)
_CURLY = str.maketrans({"\u2018": "'", "\u2019": "'", "\u201c": '"', "\u201d": '"'})


def strip_ansi(text: str) -> str:
    return _ansi.sub("", text) if "\x1b" in text else text


def split_prefix(text: str) -> tuple[str | None, str]:
    """Return ``(rank_label, rest)``; ``rank_label`` is None when the line has no launcher prefix."""
    m = _prefix.match(text)
    if not m or not m.group(0):
        return None, text
    label = m.group(0).strip(_PREFIX_STRIP)
    return (label or None), text[m.end():]


def clean_line(text: str) -> tuple[str | None, str]:
    """ANSI removal, then at most one launcher prefix, then curly-quote normalisation."""
    label, rest = split_prefix(strip_ansi(text))
    return label, rest.translate(_CURLY)


# ---- vectorised counterparts ------------------------------------------------------------------

def prefix_label_expr(text: pl.Expr) -> pl.Expr:
    """rank_label from a (short) ANSI-free head of the line; null when no prefix."""
    raw = text.str.extract(PREFIX_RE, 0).str.strip_chars(_PREFIX_STRIP)
    return pl.when(raw.str.len_bytes() > 0).then(raw).otherwise(None)


def strip_prefix_expr(text: pl.Expr) -> pl.Expr:
    return text.str.replace(PREFIX_RE, "")


def strip_ansi_expr(text: pl.Expr) -> pl.Expr:
    return text.str.replace_all(ANSI_RE, "")


# ---- numbers ----------------------------------------------------------------------------------

_SUFFIX = {"K": 1e3, "M": 1e6, "G": 1e9, "B": 1e9, "T": 1e12}
_NUM_RE = re.compile(r"^[-+]?(?:\d[\d,]*(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?$")


def to_float(value: object) -> float | None:
    """Best-effort float: numbers, numeric strings with thousands separators, `1.2e+03`, `nan`,
    `inf`, `14.2K` style suffixes and `43.2%` (returned as printed, NOT divided by 100).
    Returns None for anything else (bools, lists, free text)."""
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, int):
        try:
            return float(value)
        except OverflowError:  # a 400-digit integer: beyond every float, not a number we can keep
            return math.inf if value > 0 else -math.inf
    if isinstance(value, float):
        return value
    if not isinstance(value, str):
        return None
    s = value.strip().rstrip("%").strip()
    if not s:
        return None
    low = s.lower()
    if low in ("nan", "+nan", "-nan"):
        return math.nan
    if low in ("inf", "+inf", "infinity"):
        return math.inf
    if low in ("-inf", "-infinity"):
        return -math.inf
    mult = 1.0
    if s[-1] in _SUFFIX and len(s) > 1 and (s[-2].isdigit() or s[-2] == "."):
        mult = _SUFFIX[s[-1]]
        s = s[:-1]
    if not _NUM_RE.match(s):
        return None
    try:
        return float(s.replace(",", "")) * mult
    except (ValueError, OverflowError):
        return None


#: Largest magnitude an integer column holds (Int64).
INT64_MAX = (1 << 63) - 1


def put_int(rec: dict, key: str, value: object) -> None:
    """``rec[key] = to_int(value)``; a present value that is not an exact integer leaves null and
    flags the record partial (``_partial``), so the loss is counted, never silent."""
    v = to_int(value)
    rec[key] = v
    if v is None and value is not None:
        rec["_partial"] = True


def to_int(value: object) -> int | None:
    """An integer field (a step, a sample count): the exact integer, or None when the value is not
    one (``nan``, ``inf``, ``1.5``, ``1,234.5``, beyond Int64). Never rounds: callers that get None
    for a present value report the record as partial."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if -INT64_MAX <= value <= INT64_MAX else None
    v = to_float(value)
    if v is None or not math.isfinite(v) or v != math.floor(v) or abs(v) > INT64_MAX:
        return None
    return int(v)


_DURATION_HMS = re.compile(r"^(?:(\d+) days?, )?(\d+):(\d\d):(\d\d(?:\.\d+)?)$")
_DURATION_UNITS = re.compile(r"(\d+(?:\.\d+)?)\s*([dhms])")


def to_seconds(value: object) -> float | None:
    """`'0:01:10'`, `'1 day, 2:03:04'`, `'1h 2m 3s'` -> seconds; numbers pass through."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if not isinstance(value, str):
        return None
    s = value.strip()
    m = _DURATION_HMS.match(s)
    if m:
        days = int(m.group(1) or 0)
        return days * 86400 + int(m.group(2)) * 3600 + int(m.group(3)) * 60 + float(m.group(4))
    parts = _DURATION_UNITS.findall(s)
    if parts and _DURATION_UNITS.sub("", s).strip() == "":
        scale = {"d": 86400, "h": 3600, "m": 60, "s": 1}
        return sum(float(v) * scale[u] for v, u in parts)
    return None
