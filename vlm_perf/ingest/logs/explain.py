"""``vlm-perf parse FILE --explain``: per distinct line shape, what the parser made of it.

A line's *shape* is its cleaned text (ANSI, launcher prefix removed) with every number replaced by
``#`` and runs of spaces collapsed, so the thousands of iteration lines of a log are one shape. For
each shape (in order of first appearance) the explanation names the format that read it, the record
kind, each key's column and the rule that mapped it (the vocabulary's ``Mapping.why`` for the
generic extractor and the declared shapes), the keys left as extra columns (unknown to the
vocabulary) and, for a line that gave no record, why (the ignore reason, a failed claim, or "a step
but no known training metric" with its keys). It runs the real parse once (so what it reports is
what ``parse_logs`` did) and reads the file once more for the shapes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from ...remote import as_path
from .preprocess import clean_line
from .router import reason_of

_COMPOSER_PIECE = re.compile(r"^(?:Train|Eval) [^:]{1,160}: ")
_NUM_RE = re.compile(r"[-+]?\d[\d,]*(?:\.\d+)?(?:[eE][-+]?\d+)?")
_WS_RE = re.compile(r"\s+")
#: Distinct shapes remembered (beyond it, further new shapes are only counted).
MAX_TRACKED = 10_000
_NOT_KEYS = frozenset({"framework", "file", "line", "rank_label", "segment", "iteration", "timestamp", "kind",
                       "first_in_segment"})


def shape_of_line(text: str) -> str:
    _, clean = clean_line(text.split("\r")[-1])
    return _WS_RE.sub(" ", _NUM_RE.sub("#", clean)).strip()[:160]


@dataclass
class ShapeInfo:
    shape: str
    first_line: int
    sample: str
    count: int = 0
    framework: str | None = None
    kind: str | None = None
    fields: list[str] = field(default_factory=list)  # "key -> column (why)" or "column"
    unknown: list[str] = field(default_factory=list)
    why_not: str = ""
    confidence: str = ""
    rl: list[str] = field(default_factory=list)  # RL-step columns (vocab.RL_COLUMNS, kept timers): "column=value"
    #: every key of the sample line and what became of it (``keys.account``), and the line shape that read it
    keys: list = field(default_factory=list)
    line_shape: str = ""


def explain(path: str | Path, max_shapes: int = 40) -> tuple[list[ShapeInfo], int]:
    """(the first ``max_shapes`` shapes of ``path``: the shapes that gave records first, then the others by
    count, number of distinct shapes seen)."""
    from .parser import parse_logs

    path = as_path(path)  # a URL too (vlm_perf.remote)
    result = parse_logs([path], empty_ok=True)
    by_line: dict[int, dict] = {}
    for row in result.raw.rows(named=True):
        by_line.setdefault(row["line"], row)
    failed = {int(loc.rsplit(":", 1)[1]) for loc in result.diagnostics.failed if ":" in loc}
    easyr1_blocks = any(row["framework"] == "easyr1" for row in by_line.values())
    shapes, order, distinct = _count_shapes(path, by_line)
    # record shapes first (in order of appearance), then the others, most frequent first
    order = ([s for s in order if shapes[s].framework is not None]
             + sorted((s for s in order if shapes[s].framework is None), key=lambda s: -shapes[s].count))
    out = []
    full = _full_lines(path, {shapes[sig].first_line for sig in order[:max_shapes]})
    for sig in order[:max_shapes]:
        info = shapes[sig]
        _, clean = clean_line(full.get(info.first_line, info.sample).split("\r")[-1])
        row = by_line.get(info.first_line)
        if row is not None:
            _describe_record(info, clean, row)
        else:
            _explain_no_record(info, clean, by_line, info.first_line in failed, easyr1_blocks)
        out.append(info)
    return out, distinct


def _count_shapes(path: Path, by_line: dict[int, dict]) -> tuple[dict[str, ShapeInfo], list[str], int]:
    """(shape -> its ShapeInfo, shapes in order of first appearance, distinct shapes seen): one read of the file;
    a shape's sample line is the first line of it that gave a record, else its first line. Beyond `MAX_TRACKED`
    shapes, new ones are only counted."""
    from .reader import line_frames

    shapes: dict[str, ShapeInfo] = {}
    order: list[str] = []
    distinct = 0
    for frame in line_frames(path):
        for line, text in frame.select("line", "text").iter_rows():
            text = text or ""
            sig = shape_of_line(text)
            info = shapes.get(sig)
            if info is None:
                distinct += 1
                if len(shapes) >= MAX_TRACKED:
                    continue
                info = shapes[sig] = ShapeInfo(sig, line, text[:200])
                order.append(sig)
            info.count += 1
            if info.framework is None and line in by_line:  # a shape may be read on some lines only
                info.first_line, info.sample = line, text[:200]
                info.framework = by_line[line]["framework"]
    return shapes, order, distinct


def _describe_record(info: ShapeInfo, clean: str, row: dict) -> None:
    """A shape that gave a record: its format, kind, each key's column and rule, the extra and RL columns."""
    from .generic import extract, shape_of
    from .keys import account
    from .vocab import is_rl_column

    info.framework = row["framework"]
    info.kind = str(row.get("kind") or "train")
    info.confidence = "lower (generic extractor, no declared format)" if info.framework == "generic" else "declared format"
    if info.framework in ("generic", "nanochat", "mmengine", "composer"):
        shape = shape_of(clean)
        ex = extract(clean, shape.overrides if shape is not None else None)
        info.fields = [f"{k} -> {col} ({why})" for k, (col, why) in ex.mapped.items()]
        info.unknown = list(ex.unknown)
    if not info.fields:  # a declared format, or a block record (Composer) read from several lines
        info.fields = [f"{c}={_fmt(v)}" for c, v in row.items() if v is not None and c not in _NOT_KEYS
                       and c in _CORE_VALUES]
        info.unknown = info.unknown or [c for c, v in row.items() if v is not None and c not in _NOT_KEYS
                                        and c not in _CORE_VALUES and not is_rl_column(c)]
    info.rl = [f"{c}={_fmt(v)}" for c, v in row.items() if v is not None and is_rl_column(c)]
    info.unknown = [u for u in info.unknown if not is_rl_column(u.split(" -> ")[-1].split(" ")[0])]
    info.line_shape, info.keys = account(clean, row)


def _explain_no_record(info: ShapeInfo, clean: str, by_line: dict[int, dict], failed: bool,
                       easyr1_blocks: bool) -> None:
    """A shape that gave no record: why (a failed claim, blank, a piece joined onto an earlier record, a step
    without a training metric, or the router's ignore reason), and the keys of the record it joined."""
    from .keys import account

    if failed:
        info.why_not = _failed_why(clean)
        info.line_shape, info.keys = account(clean, None, info.why_not)
        return
    if not clean.strip():
        info.why_not = "ignored: blank"
        return
    joined, info.why_not = _joined_piece(clean, info.first_line, by_line, easyr1_blocks)
    if info.why_not:
        if joined is not None:
            info.line_shape, info.keys = account(clean, by_line[joined[1]])
        return
    _explain_stepped_line(info, clean)


def _joined_piece(clean: str, line: int, by_line: dict[int, dict],
                  easyr1_blocks: bool) -> tuple[tuple[str, int] | None, str]:
    """((framework, record line) or None, why) for a line that is a piece of a multi-line record; ("", None)
    when it is not one."""
    if _COMPOSER_PIECE.match(clean.strip()):
        return (_joined_onto(clean, line, by_line, "composer"),
                "joined onto the Composer block record above it (its fields are that record's)")
    if easyr1_blocks and _easyr1_entry(clean):
        return (_joined_onto(clean, line, by_line, "easyr1"),
                "joined onto the EasyR1 `Step N` block above it (its fields are that record's)")
    joined = _joined_onto(clean, line, by_line)
    if joined is None:
        return None, ""
    fw, at = joined
    return joined, f"joined onto the {fw} record of line {at} (a record spread over lines; its keys are that record's)"


def _explain_stepped_line(info: ShapeInfo, clean: str) -> None:
    """A line with a step but no training metric (its keys and what they would map to), else the router's
    ignore reason."""
    from .generic import find_step, pairs
    from .keys import account
    from .vocab import lookup

    step = find_step(clean)
    if step is None:
        info.why_not = f"ignored: {reason_of(clean)} (no step found)"
        return
    ks = [k for k, _ in pairs(clean)]
    known = [f"{k} -> {m.column or '(extra)'}" for k in ks if (m := lookup(k)) is not None]
    lr_only = known and all(k.split(" -> ")[-1] in ("lr", "(extra)") for k in known)
    info.why_not = (f"not a record: a step ({step.n}) but no training metric"
                    + (" (a learning rate alone is not one)" if lr_only else "")
                    + f"; keys: {', '.join(ks) or 'none'}"
                    + (f"; they would map: {', '.join(known)}" if known else ""))
    info.line_shape, info.keys = account(clean, None, "the line gave no record: " + info.why_not)


#: Lines a multi-line record may span after its first (the assemblers' bounds: NeMo-RL blocks, step dumps)
_JOIN_SPAN = 2000


def _joined_onto(clean: str, line: int, by_line: dict[int, dict], want: str = "") -> tuple[str, int] | None:
    """(framework, record line) when ``clean`` is a piece of a record the assembler joined onto an earlier line:
    a DeepSpeed-Chat step / timing / reward line, a NeMo-RL bullet, a veRL step dump's ``key:value`` item."""
    from .rl_consoles import BULLET_RE, DS_NEW_STEP, DS_NEW_TIMING, DS_OLD_STEP, DS_REWARD

    s = clean.strip()
    if want:
        pass
    elif DS_OLD_STEP.match(s) or DS_NEW_STEP.match(s) or DS_NEW_TIMING.match(s) or DS_REWARD.match(s):
        want = "deepspeed-chat"
    elif BULLET_RE.match(s):
        want = "nemo-rl"
    elif re.match(r"^[^\s{}\[\]:]{1,300}:[^\s{}\[\]]{1,300}$", s):
        want = "verl"
    else:
        return None
    for at in range(line - 1, max(0, line - _JOIN_SPAN), -1):
        row = by_line.get(at)
        if row is not None:
            return (want, at) if row.get("framework") == want else None
    return None


#: Characters of a sample line whose keys are accounted (a longer line is accounted on its first ones)
FULL_LINE_CHARS = 1 << 16


def _full_lines(path, wanted: set[int]) -> dict[int, str]:
    """The text of the ``wanted`` lines (at most ``max_shapes`` of them, each cut at ``FULL_LINE_CHARS``): one more
    read of the file, so every key of a long line is accounted, not only those of its 200-character sample."""
    import polars as pl

    from .reader import line_frames

    out: dict[int, str] = {}
    if not wanted:
        return out
    keep = pl.Series(sorted(wanted), dtype=pl.Int64).implode()
    for frame in line_frames(path):
        for line, text in frame.filter(pl.col("line").is_in(keep)).select("line", "text").iter_rows():
            out[line] = (text or "")[:FULL_LINE_CHARS]
    return out


def _failed_why(clean: str) -> str:
    """Why a failed line failed, naming the line shape: the format whose strict detector claims it, and for a
    metrics dict that opens and never closes, that (the record assembler held it to its bound)."""
    from .dicts import DICT_MAX_LINES, load_dict
    from .formats import line_formats

    claim = next((f.name for f in line_formats() if f.detect and re.search(f.detect, clean)), None)
    if "{" in clean and load_dict(clean) is None:
        depth = clean.count("{") - clean.count("}")
        if depth > 0:
            return (f"failed: a metrics dict opens here and did not close (or did not parse) within the next "
                    f"{DICT_MAX_LINES} lines of dict content (the record assembler's bound); its keys are dropped")
        return "failed: a metrics dict that does not parse (a wrapper not understood, or garbled)"
    if claim:
        return f"failed: the {claim} format's detector claims this line shape but no record came of it"
    return "failed: no record came of a line a format claims"


def _easyr1_entry(clean: str) -> bool:
    from .easyr1 import ENTRY_RE

    return ENTRY_RE.match(clean.rstrip()) is not None


def _fmt(v) -> str:
    return f"{v:.6g}" if isinstance(v, float) else str(v)


_CORE_VALUES = frozenset({"elapsed_s", "tflops_per_gpu_logged", "mfu_logged", "tokens_per_s", "loss", "lr", "grad_norm",
                          "global_batch_size", "consumed_samples", "skipped_iterations", "nan_iterations"})


def explain_text(path: str | Path, max_shapes: int = 40) -> str:
    infos, distinct = explain(path, max_shapes)
    lines = [f"{path}: {distinct} distinct line shape(s)" + (f", the first {len(infos)} shown" if distinct > len(infos) else "")]
    for info in infos:
        lines.append(f"- line {info.first_line} (x{info.count}): {info.sample[:120]!r}")
        if info.framework is not None:
            lines.append(f"    format {info.framework} [{info.confidence}], kind {info.kind}")
            if info.fields:
                lines.append(f"    fields: {'; '.join(info.fields)}")
            if info.rl:
                lines.append(f"    RL step (phase seconds phase_s_*, kept timers timer_s_* not summed, lengths in tokens): "
                             f"{'; '.join(info.rl)}")
            if info.unknown:
                lines.append(f"    keys not in the vocabulary / other columns (kept as extras): {', '.join(info.unknown)}")
        else:
            lines.append(f"    {info.why_not}")
        lines += _key_lines(info)
    return "\n".join(lines)


def _key_lines(info: ShapeInfo) -> list[str]:
    """Every key of the shape's sample line, by fate (``keys.account``)."""
    if not info.keys:
        return []
    out = [f"    every key ({info.line_shape}, {len(info.keys)}):"]
    for fate, title in (("mapped", "mapped"), ("step", "step / progress"), ("extra", "kept as extras"),
                        ("dropped", "dropped")):
        ks = [k.text() for k in info.keys if k.fate == fate]
        if ks:
            out.append(f"      {title}: {'; '.join(ks)}")
    return out
