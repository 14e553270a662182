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
import sys
import warnings
from dataclasses import dataclass

from . import verl
from .formats import LogFormat, register
from .preprocess import put_int, to_float, to_seconds
from .reader import head_text, read_text
from .schema import empty_frame, extra_name, records_frame, snake_case
from .vocab import WRAPPERS, is_eval_key, put_known_or_extra, record_kind, scalar_of
from .segments import FILE_SCALE, ORD, SUB_SCALE

#: Kept for reference: the outermost ``{...}`` of a line (``load_dict`` finds it with find/rfind,
#: which is the same span without the regex engine's quadratic backtracking on a line of ``{``).
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


_HF_OUTPUTS = frozenset(HF_MAP.values()) | {"max_steps", "percentage", "elapsed_time_s", "remaining_time_s",
                                            "elapsed_s", "throughput_tokens_per_s"}


#: JSON nesting accepted (the interpreter's default recursion limit, 1000, would reject ~1,000 levels
#: of an ignored key); deeper input is an error, never a crash.
JSON_DEPTH = 5000


def json_loads(text: str):
    """``json.loads`` that accepts nesting up to ``JSON_DEPTH`` (RecursionError beyond)."""
    limit = sys.getrecursionlimit()
    if limit >= JSON_DEPTH:
        return json.loads(text)
    sys.setrecursionlimit(JSON_DEPTH)
    try:
        return json.loads(text)
    finally:
        sys.setrecursionlimit(limit)


def load_dict(text: str) -> dict | None:
    """Parse the outermost ``{...}`` in ``text`` (JSON or Python repr); None if it is not a dict."""
    start = text.find("{")
    end = text.rfind("}")
    if start < 0 or end < start:
        return None
    blob = text[start:end + 1]
    try:
        value = json_loads(blob)
    except RecursionError:  # nested deeper than the interpreter's recursion limit
        return None
    except ValueError:
        value = _literal(_BARE_RE.sub(r"'\1'", blob))
        if value is None and "(" in blob:
            # values printed as reprs (`np.float64(0.5)`, `tensor(1.2, device='cuda:0')`, `Decimal('1.5')`):
            # the number inside, as a string (vocab rule 7); any other call leaves the dict unreadable
            blob = _BARE_RE.sub(r"'\1'", _WRAPPED_IN_DICT.sub(_wrapped_number, blob))
            value = _literal(blob)
            if value is None:  # another repr (`Foo(1.0)`): kept as its text, so that value alone is not read
                value = _literal(_OTHER_CALL.sub(lambda m: repr(m.group(0)), blob))
    return value if isinstance(value, dict) else None


#: Any other call repr in a dict value position (no nested parentheses): quoted, it reads as text.
_OTHER_CALL = re.compile(r"(?<=[:\[,]\s)(?<![\w.'\"])[A-Za-z_][\w.]{0,60}\([^()\n'\"]{0,200}\)")


#: A wrapped value inside a dict repr (vocab rule 7), bounded: the argument list holds no parentheses
#: but one level (``grad_fn=<...>`` has none; ``dtype=torch.float32`` none)
_WRAPPED_IN_DICT = re.compile(
    rf"(?<![\w.])(?P<name>{WRAPPERS})\(\s{{0,4}}\[?\s{{0,4}}(?P<q>['\"]?)(?P<num>[-+]?(?:\d[\d,]*(?:\.\d*)?|\.\d+)"
    r"(?:[eE][-+]?\d+)?|[-+]?(?:nan|inf|infinity))(?P=q)\s{0,4}\]?(?:\s{0,4},[^()\n]{0,200}?"
    r"(?:\([^()\n]{0,60}\)[^()\n]{0,100}?)?)?\)", re.IGNORECASE)


def _wrapped_number(m: re.Match) -> str:
    return repr(m.group("num"))


def _literal(blob: str):
    try:
        with warnings.catch_warnings():  # e.g. "invalid decimal literal" on garbled numbers
            warnings.simplefilter("ignore")
            return ast.literal_eval(blob)
    except (ValueError, SyntaxError, MemoryError, RecursionError, TypeError):
        return None


def classify(d: dict) -> str:
    if "current_steps" in d:
        return "llamafactory"
    if "global_step/max_steps" in d:
        return "swift"
    if "step" in d and isinstance(d.get("data"), dict):
        return "verl-jsonl"
    return "hf"


def dict_kind(d: dict) -> str:
    """The record kind of a metrics dict (``vocab.record_kind`` of its keys whose value is set): ``summary``
    for an end-of-run report (HF ``train_runtime`` ..., ms-swift's result with ``last_model_checkpoint``),
    ``eval`` when every metric carries an evaluation prefix (``eval_loss``, ``val/acc``; counters and progress
    do not count), ``other`` when it holds no metric at all, else ``train``."""
    return record_kind(k for k, v in d.items() if v is not None)


def flatten_step_metrics(d: dict) -> dict:
    """``{"step": N, "metrics": {...}}`` (ROLL's driver prints it after ``metrics_tag:``, alibaba/ROLL
    ``roll/utils/tracking.py``-style trackers) -> one flat record: the step beside its metrics, so that the metrics'
    keys (``time/step_generate``, ...) go through the vocabulary as they do in a W&B export. Any other dict as is."""
    metrics = d.get("metrics")
    if "step" not in d or not isinstance(metrics, dict):
        return d
    flat = {k: v for k, v in d.items() if k != "metrics"}
    flat.update((k, v) for k, v in metrics.items() if k not in flat)
    return flat


def record_from_dict(d: dict) -> tuple[str, dict]:
    """(format, record) for any supported dict shape. ``iteration`` may be absent (HF console).
    ``kind``: see ``dict_kind``."""
    fmt = classify(d)
    if fmt == "verl-jsonl":
        return fmt, verl.record_from_items(d.get("step"), d["data"])
    d = flatten_step_metrics(d)
    rec = {}
    kind = dict_kind(d)
    if kind != "train":
        rec["kind"] = kind
    for key, raw in d.items():
        raw = scalar_of(raw)  # `np.float64(0.5)`, `[1e-05]`, `Decimal('1.5')` -> the number (vocab rule 7)
        if key == "global_step/max_steps" and isinstance(raw, str) and "/" in raw:
            cur, _, tot = raw.partition("/")
            put_int(rec, "iteration", cur)
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
        name = HF_MAP.get(key)
        if name is None and isinstance(key, str) and key[:1].isupper():  # Title-Case (`Step`, `Loss`)
            name = HF_MAP.get(snake_case(key))
        if name is None:
            if not isinstance(key, str) or is_eval_key(key) or kind != "train":
                name = extra_name(snake_case(str(key)), rec, _HF_OUTPUTS)
            else:  # xtuner / slime / custom scripts: `train/loss`, `tflops`, `tokens_per_sec` via the vocabulary
                put_known_or_extra(rec, key, raw, v, _HF_OUTPUTS)
                continue
        if name == "iteration":
            if "iteration" not in rec:
                put_int(rec, "iteration", raw)
            continue
        rec.setdefault(name, v)
    if fmt == "swift":
        speed = rec.get("train_speed_iter_s")
        if speed:
            rec["elapsed_s"] = 1.0 / speed
        elif rec.get("train_speed_s_it") is not None:  # newer ms-swift prints seconds per iteration
            rec["elapsed_s"] = rec["train_speed_s_it"]
    if fmt == "llamafactory" and "throughput" in rec:
        # cumulative tokens / elapsed since (re)start, all GPUs: NOT tokens/s/GPU, keep as extra
        rec["throughput_tokens_per_s"] = rec.pop("throughput")
    return fmt, rec


_ENTRY_RE = re.compile(r"\{[^{}]*\}")


def parse_trainer_state(text: str) -> list[tuple[int, dict]]:
    """``trainer_state.json`` -> [(line, record)] from ``log_history`` (flat dicts)."""
    from ...errors import InputError

    try:
        state = json_loads(text)
    except RecursionError:
        raise InputError(f"trainer_state.json nested deeper than {JSON_DEPTH} levels") from None
    except ValueError as exc:
        raise InputError(f"not valid JSON ({exc})") from None
    history = state.get("log_history") if isinstance(state, dict) else None
    if not isinstance(history, list):
        raise InputError("no log_history list")
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
        if "step" in entry:
            put_int(rec, "iteration", entry["step"])
        out.append((line, rec))
    return out


# ---- HF Trainer console: the step of a dict is the training bar's count ----------------------------

#: A tqdm bar ``NN%|...| n/total [elapsed<remaining, rate]``. Each quantifier is bounded or anchored
#: after a non-digit so the regex engine never backtracks quadratically on a long line.
TQDM_RE = re.compile(r"(?<!\d)(\d{1,3})%\|[^|]{0,200}\|\s{0,8}(\d{1,18})/(\d{1,18})\s{0,8}\[([^\]]{0,300})\]?")
_RATE_RE = re.compile(r"(?<![\d.])(\d{1,12}(?:\.\d{1,12})?)\s?(s/it|it/s)")
_TOTAL_STEPS_RE = re.compile(r"Total optimization steps = ([\d,]{1,24})")


def parse_bar(text: str):
    """``(n, total, seconds_per_it | None, description, end)`` of the first tqdm bar in ``text``, or None.

    ``description`` is the text before the percentage (``Map``, ``Loading checkpoint shards``, an
    evaluation label...); HF's training bar has none."""
    m = TQDM_RE.search(text)
    if not m:
        return None
    sec = None
    r = _RATE_RE.search(m.group(4))
    if r:
        v = float(r.group(1))
        sec = v if r.group(2) == "s/it" else (1.0 / v if v else None)
    desc = text[:m.start()].strip().rstrip(":").strip()
    return int(m.group(2)), int(m.group(3)), sec, desc, m.end()


@dataclass
class _Bar:
    pos: tuple[int, int]  # (line, \r-piece)
    n: int
    total: int
    sec: float | None
    glued: bool           # a dict follows the bar in the same piece


class HFSteps:
    """Assigns steps to HF console dicts after the whole file was seen (tqdm.write semantics).

    ``tqdm.write`` (what the Trainer's ``ProgressCallback.on_log`` uses) clears the bar, prints the
    dict and redraws the bar with its *current* count, which is the logged ``global_step``; the bar
    drawn *before* the dict may be stale (tqdm redraws at most every 0.1 s). So a dict takes:

    1. the count of the training bar redrawn right after it (the next piece, holding only a bar);
    2. else the training bar in front of it in the same piece (``bar{dict}``, the redraw was lost);
    3. else the last training bar at most 2 lines before it.

    A training bar has no description and, when ``Total optimization steps = N`` was printed and
    some bar has that total, the total N; data-loading (``Map:``), checkpoint-shard, evaluation and
    other bars never give a step.
    """

    def __init__(self) -> None:
        self.total: int | None = None
        self.events: list[tuple[str, object]] = []  # ("bar", _Bar) | ("dict", record) | ("other", None)

    def is_training(self, bar: _Bar, desc: str) -> bool:
        """Description-less bars are candidates; the stated total is applied in ``resolve``."""
        return not desc

    def note_text(self, text: str) -> None:
        m = _TOTAL_STEPS_RE.search(text)
        if m and self.total is None:
            try:
                self.total = int(m.group(1).replace(",", ""))
            except ValueError:
                pass

    def resolve(self) -> None:
        totals = {item.total for kind, item in self.events if kind == "bar"}
        if self.total is not None and self.total in totals:  # other totals: evaluation bars
            self.events = [e for e in self.events if e[0] != "bar" or e[1].total == self.total]
        ev = self.events
        last_bar: _Bar | None = None
        for i, (kind, item) in enumerate(ev):
            if kind == "bar":
                last_bar = item
                continue
            rec = item
            if "iteration" in rec:
                continue
            line = rec["line"]
            nxt = ev[i + 1][1] if i + 1 < len(ev) and ev[i + 1][0] == "bar" else None
            if nxt is not None and not nxt.glued and nxt.pos[0] <= line + 1:
                use = nxt  # the redraw after tqdm.write
            elif last_bar is not None and line - last_bar.pos[0] <= 2:
                use = last_bar
            else:
                continue
            rec["iteration"] = use.n
            if use.sec is not None and rec.get("kind", "train") == "train":  # not a summary's step time
                rec.setdefault("elapsed_s", use.sec)


def _handle(router, line: int, sub: int, label: str | None, text: str, s: str) -> bool:
    hf: HFSteps = router.state("hf", HFSteps)
    hf.note_text(text)
    parsed = parse_bar(text)
    bar = None
    if parsed is not None:
        n, total, sec, desc, end = parsed
        bar = _Bar((line, sub), n, total, sec, glued="{" in text[end:])
        if hf.is_training(bar, desc):
            hf.events.append(("bar", bar))
        elif "{" not in text and "=" in text and _postfix_record(text):
            return False  # a described bar with a `k=v` postfix of known metrics: the generic extractor's
        else:
            bar = None
            router.ignored["progress_bar"] += 1
            parsed = False  # counted: a non-training bar
    if "{" in text:
        if _emit_dict(router, hf, line, sub, label, text):
            return True
        depth = _open_depth(text)
        if depth > 0 and bar is None and _DICT_START.search(text):
            # a dict wrapped or pretty-printed over lines (`[metrics] step 60: {'loss': 1.2,` then the rest; a
            # number cut mid-digits by a terminal): held until its braces close, at most DICT_MAX_LINES lines
            st: _DictWrap = router.state("dict-wrap", _DictWrap)
            st.depth, st.last = depth, len(text.rstrip())
            router.hold(line, sub, label, text.rstrip(), st.continues, _flush_wrapped, st.glue,
                        max_pieces=DICT_MAX_LINES)
            return True
        if re.search(r"\{\s*['\"]", text):
            router.fail(line)  # looked like a metrics dict but did not parse
            return True
    if bar is not None:
        router.ignored["progress_bar"] += 1
        return True
    return parsed is False


def _emit_dict(router, hf: HFSteps, line: int, sub: int, label: str | None, text: str) -> bool:
    """Emit the record of the dict in ``text``; False when no dict parses there."""
    d = load_dict(text)
    if d is None:
        return False
    fmt, rec = record_from_dict(d)
    if fmt == "hf" and "iteration" not in rec:
        _step_before_dict(rec, text)
    if router.allowed(fmt):
        if any(k != "kind" for k in rec):
            router.emit(fmt, line, sub, label, rec)
            if fmt == "hf":
                hf.events.append(("dict", rec))
        else:
            router.fail(line)
    return True


#: A dict held over lines ends within this many physical lines and characters (bounded memory and time).
DICT_MAX_LINES = 64
DICT_MAX_CHARS = 256 * 1024


#: A dict that may continue on the next lines opens with a key or ends its line: ``{'loss': …`` / ``{``
_DICT_START = re.compile(r"\{\s*(?:['\"]|$)")
#: First characters of a pretty-printed dict's lines and of a number cut mid-digits
_DICT_PIECE_START = frozenset("'\"}]0123456789.-+eE")
#: A physical line at least this long may have been cut by a terminal anywhere (a hard wrap)
_WRAP_ROW = 60


def _open_depth(text: str) -> int:
    """``{`` minus ``}`` from the first ``{`` (braces inside quoted strings are not told apart: a dict
    whose strings hold braces is the rare case, and it only ends the assembly early or late, bounded)."""
    return text.count("{") - text.count("}")


class _DictWrap:
    """The record assembler's state for one held dict: its brace depth and length, updated piece by piece
    (linear in the record's length)."""

    def __init__(self) -> None:
        self.depth = 0
        self.last = 0  # length of the last physical piece (a terminal's hard wrap fills its row)

    def continues(self, so_far: str, piece: str) -> bool:
        """The piece continues the held dict: the dict is still open, the record stays under its bounds, and the
        piece starts nothing new (a progress bar, or a ``{`` that is not a value after ``key:``: another
        record's dict; then the held one ends, and fails if it never closed)."""
        if self.depth <= 0 or len(so_far) + len(piece) > DICT_MAX_CHARS or "%|" in piece:
            return False
        o = piece.find("{")
        if o >= 0 and not piece[:o].rstrip().endswith(":"):
            return False
        # dict content: a key, a closing brace, a number's rest; anything dict-like after a full terminal row
        return piece[0] in _DICT_PIECE_START or (self.last >= _WRAP_ROW and any(c in piece for c in "'\":}"))

    def glue(self, so_far: str, piece_text: str, piece: str) -> str:
        """Pieces are joined as printed without the line break: a pretty-printed dict's pieces start with
        its indentation (stripped), a terminal's hard wrap cuts anywhere (a number mid-digits rejoins)."""
        self.depth += piece.count("{") - piece.count("}")
        self.last = len(piece)
        return so_far + piece


def _flush_wrapped(router, line: int, sub: int, label: str | None, text: str) -> None:
    hf: HFSteps = router.state("hf", HFSteps)
    if not _emit_dict(router, hf, line, sub, label, text):
        if re.search(r"\{\s*['\"]", text):
            router.fail(line)  # a dict that never closed or did not parse once joined
        else:
            router.ignored["other"] += 1


def _postfix_record(text: str) -> bool:
    """Whether the generic extractor makes a record of a described bar's postfix (``train: 5%|..| 50/1000
    [00:10<03:10, 2.00s/it, loss=2.31]``): then the bar is not counted here."""
    from .generic import extract

    return extract(text).record is not None


#: slime's ``perf 3: {...}`` / ``rollout 3: {...}`` / ``eval 3: {...}`` (``slime/utils``: the rollout id before the dict)
_SLIME_HEAD = re.compile(r"(?:^|[\s\]])(?P<what>perf|rollout|eval) (?P<n>\d{1,19}):\s*$")


def _step_before_dict(rec: dict, text: str) -> None:
    """A dict printed after a keyed step on the same line (``step 3: {...}``, slime and custom
    scripts) takes that step (a bar's count would otherwise be guessed later, or none); slime's
    ``perf N:`` / ``rollout N:`` heads give the rollout id (its step), ``eval N:`` an evaluation."""
    head = text[:text.find("{")]
    m = _SLIME_HEAD.search(head) if head else None
    if m:
        rec["iteration"] = int(m.group("n"))
        if m.group("what") == "eval":
            rec["kind"] = "eval"
        return
    if not head or not any(w in head.lower() for w in ("step", "iter")):
        return
    from .generic import find_step

    st = find_step(head)
    if st is not None and st.shape == "keyed":
        rec["iteration"] = st.n


def _finish(router) -> None:
    hf = router.states.get("hf")
    if hf is not None:
        hf.resolve()


def _is_trainer_state(path) -> bool:
    return (not path.is_dir() and head_text(path).lstrip().startswith("{")
            and '"log_history"' in head_text(path, 1 << 16))


def read_trainer_state(path, file_idx: int, diag):
    """``trainer_state.json`` -> records of format ``hf`` (one per ``log_history`` entry)."""
    import polars as pl

    from ...errors import InputError

    text, bad = read_text(path)
    diag.decode_errors += bad
    diag.lines_read += text.count("\n") + (0 if text.endswith("\n") else 1)
    rows = []
    try:
        parsed = parse_trainer_state(text)
    except InputError as exc:
        raise InputError(str(exc), source=str(path)) from None
    for line, rec in parsed:
        rec.update(framework="hf", line=line, _sub=0, rank_label=None)
        rows.append(rec)
    diag.saw("hf", len(rows))
    df = records_frame(rows) if rows else empty_frame()
    return df.with_columns((pl.lit(file_idx * FILE_SCALE, pl.Int64) + pl.col("line") * SUB_SCALE).alias(ORD))


register(LogFormat(
    name="hf",
    source="HF Trainer / TRL / Axolotl / LLaMA-Factory console / InternVL and Qwen-VL fine-tune scripts: console "
           "dicts (Python repr, numbers or strings, bare `nan`), and `trainer_state.json` `log_history`",
    example=" 10%|#         | 12/120 [00:24<03:36,  2.00s/it]\r{'loss': 1.2345, 'grad_norm': 0.5, "
            "'learning_rate': 1e-05, 'epoch': 0.1}\n 10%|#         | 12/120 [00:24<03:36,  2.00s/it]",
    notes="a console dict carries no step: `iteration` is the training bar's count as redrawn right after the dict "
          "(tqdm.write semantics), else the bar glued in front of it, else the bar at most 2 lines before, else "
          "null; bars with a description (`Map:`, `Loading checkpoint shards:`) or another total than `Total "
          "optimization steps` are never the step; literal `^M` is a carriage return",
    prefilter=r"[{]|\d%\||Total optimization steps = ",
    detect=r"\{\s*['\"]",
    order=90,
    handle=_handle,
    finish=_finish,
    sniff=_is_trainer_state,
    read=read_trainer_state,
    emits=("llamafactory", "swift", "verl-jsonl"),
))

register(LogFormat(
    name="llamafactory",
    source="LLaMA-Factory `trainer_log.jsonl`",
    example='{"current_steps": 5, "total_steps": 100, "loss": 1.5, "lr": 4.9e-05, "epoch": 0.05, "percentage": 5.0, '
            '"elapsed_time": "0:00:50", "remaining_time": "0:15:50", "throughput": 1234.5, "total_tokens": 61725}',
    notes="`elapsed_time_s` is cumulative; its `throughput` (all GPUs, since (re)start) is kept as "
          "`throughput_tokens_per_s`, not `tokens_per_s`",
    example_suffix=".jsonl",
))

register(LogFormat(
    name="swift",
    source="ms-swift `logging.jsonl` / console dicts",
    example='{"loss": 1.234, "grad_norm": 2.5, "learning_rate": 1e-05, "memory(GiB)": 30.5, "train_speed(iter/s)": '
            '0.25, "epoch": 0.1, "global_step/max_steps": "5/50", "percentage": "10.00%", "elapsed_time": "20s"}',
    notes="`global_step/max_steps` → `iteration`, `max_steps`; `elapsed_s` = 1 / `train_speed(iter/s)` (newer "
          "versions: `train_speed(s/it)`, taken as is)",
    example_suffix=".jsonl",
))

register(LogFormat(
    name="verl-jsonl",
    source='veRL file logger `{"step": N, "data": {…}}`',
    example='{"step": 1, "data": {"actor/pg_loss": -0.01, "perf/mfu/actor": 0.3, "perf/throughput": 1500.0, '
            '"perf/time_per_step": 40.0}}',
    notes="same key mapping as `verl`",
    example_suffix=".jsonl",
))
