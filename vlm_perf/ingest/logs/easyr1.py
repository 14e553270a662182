"""EasyR1 console blocks: ``Step N`` then the step's metrics as YAML (Ray prefix stripped beforehand).

EasyR1's ``ConsoleLogger.log`` (hiyouga/EasyR1 ``verl/utils/logger/logger.py``) prints ``f"Step {step}"`` and
``yaml.dump(unflatten_dict(metrics), indent=2)`` (``verl/utils/py_functional.py``: keys split on ``/`` into
nested mappings, sorted; floats rounded to 3 decimals unless in scientific notation)::

    Step 3
    actor:
      entropy_loss: 0.512
      pg_loss: -0.004
    perf:
      mfu_actor: 0.287
    timing_s:
      gen: 40.21
      old: 5.103

The nested keys are joined back with ``/`` (``timing_s/gen``, ``perf/mfu_actor``) and read exactly as veRL's
keys (:func:`vlm_perf.ingest.logs.verl.record_from_items`: the same vocabulary; EasyR1's ``old`` timer is the
old-policy log-prob phase). YAML's ``.nan`` / ``.inf`` are numbers. The block ends at the first line that is
not a YAML mapping line.
"""

from __future__ import annotations

import re

from . import verl
from .formats import LogFormat, register

STEP_RE = re.compile(r"^Step (\d{1,19})\s*$")
#: a YAML mapping line of the block: ``key:`` (a section) or ``key: scalar``, any indentation; metric keys
#: and YAML scalars hold no spaces
ENTRY_RE = re.compile(r"^(?P<indent> *)(?P<key>[^\s:#{}\[\]][^\s:]{0,300}):(?: (?P<value>[^\s:]{1,300}))?\s*$")
_YAML_SPECIAL = {".nan": "nan", ".NaN": "nan", ".NAN": "nan", ".inf": "inf", ".Inf": "inf", "-.inf": "-inf",
                 "-.Inf": "-inf", "+.inf": "inf"}
#: lines in a block at most (a step's metrics are ~100 lines; beyond, the block is cut and the rest ignored)
MAX_LINES = 5000


def parse_block(text: str) -> dict | None:
    """``Step N\\n<yaml lines>`` -> a veRL-style record, or None when the first line is not ``Step N`` or the
    block holds no mapping line."""
    lines = text.split("\n")
    m = STEP_RE.match(lines[0].strip())
    if not m:
        return None
    items: dict[str, str] = {}
    stack: list[tuple[int, str]] = []  # (indent, key) of the open sections
    for ln in lines[1:]:
        e = ENTRY_RE.match(ln.rstrip())
        if e is None:
            continue
        indent, key, value = len(e.group("indent")), e.group("key").strip().strip("'\""), e.group("value")
        while stack and stack[-1][0] >= indent:
            stack.pop()
        path = "/".join([k for _, k in stack] + [key])
        if value is None:
            stack.append((indent, key))
        else:
            value = value.strip().strip("'\"")
            items[path] = _YAML_SPECIAL.get(value, value)
    if not items:
        return None
    return verl.record_from_items(m.group(1), items)


def _handle(router, line: int, sub: int, label: str | None, text: str, s: str) -> bool:
    if not STEP_RE.match(s):
        return False
    router.hold(line, sub, label, s, _continues, _flush, _glue, max_pieces=MAX_LINES)
    return True


def _continues(text: str, s: str) -> bool:
    return not s.startswith("Step ") and ENTRY_RE.match(s) is not None


def _glue(so_far: str, piece_text: str, piece_stripped: str) -> str:
    """Keep the piece's indentation (the YAML nesting); the launcher prefix is already removed."""
    return so_far + "\n" + piece_text.rstrip()


def _flush(router, line: int, sub: int, label: str | None, text: str) -> None:
    if router.allowed("easyr1"):
        rec = parse_block(text)
        if rec is None:  # a bare `Step N` with no metrics under it: not a record, not a failure
            router.ignored["no_metrics"] += 1
            return
        router.emit("easyr1", line, sub, label, rec)


register(LogFormat(
    name="easyr1",
    source="EasyR1 console `Step N` + the step's metrics as YAML (`yaml.dump(unflatten_dict(metrics))`)",
    example="(Runner pid=16098) Step 1\n(Runner pid=16098) actor:\n(Runner pid=16098)   pg_loss: -0.004\n"
            "(Runner pid=16098) perf:\n(Runner pid=16098)   mfu_actor: 0.287\n(Runner pid=16098)   time_per_step: 70.5\n"
            "(Runner pid=16098) timing_s:\n(Runner pid=16098)   gen: 40.21\n(Runner pid=16098)   old: 5.103\n"
            "(Runner pid=16098)   step: 70.5",
    notes="nested keys re-joined with `/` and read as veRL keys (`timing_s/old` -> `phase_s_old_log_prob`, "
          "`perf/mfu_actor` -> `mfu_logged`); YAML `.nan`/`.inf` are numbers",
    prefilter=r"Step \d+\s*$|^(?:\([^)]{1,80}\) ?)? *[^\s:#{}\[\]][^\s:]{0,300}:(?: [^\s:]{1,300})?\s*$",
    order=48,
    handle=_handle,
))
