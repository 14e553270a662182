"""veRL console lines ``step:N - key:value - ...`` (Ray prefix stripped beforehand).

MFU (``perf/mfu/actor``, early ``mfu/actor``, EasyR1 ``perf/mfu_actor``) is already a fraction.
``perf/throughput`` is tokens/s/GPU and ``perf/time_per_step`` (= ``timing_s/step``) seconds. Every other
key goes through the vocabulary: the per-phase timers ``timing_s/<name>`` become ``phase_s_<phase>`` (or a
kept ``timer_s_<name>``), the length statistics ``prompt_len_*`` / ``response_len_*``, and
``perf/total_num_tokens`` ``step_tokens``. Hard-wrapped continuations are joined by the router before this
parser sees the line.
"""

from __future__ import annotations

import re

from .formats import LogFormat, register
from .preprocess import put_int, to_float
from .vocab import put_known_or_extra, record_kind, scalar_of

DETECT_RE = re.compile(r"^step:(\d+)(?: - |\s*$| -\s*$)")
#: A physical line that continues a wrapped veRL line: no spaces except `` - `` separators.
CONTINUATION_RE = re.compile(r"^[^\s{}\[\]]+(?: - [^\s{}\[\]]+)*\s*$")

MAP = {
    "perf/mfu/actor": ("mfu_logged", 1.0),
    "mfu/actor": ("mfu_logged", 1.0),
    "perf/mfu_actor": ("mfu_logged", 1.0),  # EasyR1's spelling
    "perf/throughput": ("tokens_per_s", 1.0),
    "perf/time_per_step": ("elapsed_s", 1.0),
    "timing_s/step": ("elapsed_s", 1.0),  # the same timer as perf/time_per_step (veRL / EasyR1)
    "actor/pg_loss": ("loss", 1.0),
    "actor/grad_norm": ("grad_norm", 1.0),
    "actor/lr": ("lr", 1.0),
}


_OUTPUTS = frozenset(name for name, _ in MAP.values())


def record_from_items(step: object, items: dict) -> dict:
    """``step`` as printed (digits, a JSON number...): an exact integer or null plus ``_partial``."""
    rec: dict = {}
    put_int(rec, "iteration", step)
    for key, raw in items.items():
        v = to_float(scalar_of(raw))  # `np.float64(-0.01)` (numpy >= 2 reprs): the number inside
        if v is None:
            continue
        if v == 0.0:
            v = 0.0  # -0.000 -> 0.0 (quirk 26)
        if key in MAP:
            name, mult = MAP[key]
            rec.setdefault(name, v * mult)
        else:  # veRL SFT `train/loss`, `train/lr(1e-3)`, ...: through the vocabulary
            put_known_or_extra(rec, key, raw, v, _OUTPUTS)
    kind = record_kind(k for k, v in items.items() if v is not None)
    if kind != "train":
        # a validation-only step (step 0 before training, verl issue #2060, also with `training/global_step` or
        # `timing_s/testing` beside the `val-*` keys in forks): not an iteration; nor a step of counters only
        rec["kind"] = kind
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
    return record_from_items(m.group(1), items)


# ---- registration ------------------------------------------------------------------------------

#: A bare ``step:N`` line: the step's metrics follow one ``key:value`` per line (a dump of the step's dict)
_BARE_STEP_RE = re.compile(r"^step:\d{1,19}\s*$")
#: ``key:value`` lines of one step dump at most (the record assembler's bound)
MAX_DUMP_LINES = 2000


def _handle(router, line: int, sub: int, label: str | None, text: str, s: str) -> bool:
    """A veRL line is held until the next line shows it is not hard-wrapped (``Router.pending``); a bare
    ``step:N`` takes the ``key:value`` lines after it (one per line) as that step's items."""
    if not DETECT_RE.match(s):
        return False
    if _BARE_STEP_RE.match(s):
        router.hold(line, sub, label, s.strip(), _continues, _flush, _glue_items, max_pieces=MAX_DUMP_LINES)
    else:
        router.hold(line, sub, label, s, _continues, _flush, _glue_wrap)
    return True


def _glue_wrap(so_far: str, piece_text: str, piece: str) -> str:
    """A hard-wrapped piece continues the line where it was cut; a cut at a `` - `` separator (the piece
    starts with ``- `` or the line ends with `` -``) keeps the separator's spaces."""
    so_far = so_far.rstrip()
    if piece.startswith("- ") or so_far.endswith(" -"):
        return so_far + " " + piece
    return so_far + piece


def _glue_items(so_far: str, piece_text: str, piece: str) -> str:
    """A ``key:value`` piece is the next item (`` - `` joined); a piece without ``:``, or holding `` - ``
    separators, is the rest of a hard-wrapped line (``_glue_wrap``)."""
    if ":" in piece and " - " not in piece and not piece.startswith("- ") and not so_far.endswith(" -"):
        return so_far + " - " + piece
    return _glue_wrap(so_far, piece_text, piece)


def _continues(text: str, s: str) -> bool:
    """A hard-wrapped piece of a veRL line (quirk 11): no spaces except `` - `` separators."""
    if s.startswith("- "):  # cut just before a separator
        s = s[2:]
    return not s.startswith("step:") and CONTINUATION_RE.match(s) is not None


def _flush(router, line: int, sub: int, label: str | None, text: str) -> None:
    if router.allowed("verl"):
        router.emit("verl", line, sub, label, parse(text))


register(LogFormat(
    name="verl",
    source="veRL console `step:N - key:value - …`",
    example="(TaskRunner pid=1234) step:1 - actor/pg_loss:-0.012 - actor/grad_norm:0.345 - actor/lr:1e-06 - "
            "perf/mfu/actor:0.312 - perf/throughput:1523.4 - perf/time_per_step:45.6 - timing_s/gen:12.3",
    notes="`perf/mfu/actor` (or `mfu/actor`) is already a fraction; `perf/throughput` → `tokens_per_s`; "
          "`timing_s/<name>` → `phase_s_<phase>` / kept `timer_s_<name>` (see RL steps below); "
          "hard-wrapped lines re-joined",
    prefilter=r"step:\s*\d|^[^\s{}\[\]]*:[^\s{}\[\]]*(?: - [^\s{}\[\]]+)*\s*$",
    order=50,
    handle=_handle,
))
