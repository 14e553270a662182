"""Slow path: per-line Python dispatch for the few lines the vectorised pre-filter selected.

Handles ``\\r`` redraws (and a literal ``^M`` pasted for one), ANSI, launcher prefixes, curly quotes
and hard-wrapped veRL lines, then offers each cleaned line to the registered line formats
(``formats.line_formats()``, in their ``order``) until one consumes it. A line that a format's strict
``detect`` claims but no format turned into a record is counted as failed, never as ignored.
Megatron iteration lines found here (e.g. glued after ``\\r`` or carrying ANSI/non-ASCII) are
cleaned and handed back for the vectorised extractor, so both paths share one implementation.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field

from . import megatron
from .formats import line_formats
from .preprocess import clean_line

BANNER_RE = re.compile(
    r"successfully loaded checkpoint|Restoring states from the checkpoint|\*{3,} Running training \*{3,}"
    r"|Resuming training from checkpoint|Loading checkpoint from"
)
#: Reasons for lines that are not records; the same rules run vectorised in ``reasons_expr``.
#: (Written so that Python's backtracking engine stays linear: no unanchored ``\d+`` before a
#: literal, which would retry every start inside a long digit run.)
REASON_RULES: tuple[tuple[str, str], ...] = (
    ("megatron_timer", r"time \(ms\)|time across ranks \(ms\)|^\s*\S+ \.+: \(\s*[\d.]"),
    ("memory_report", r"memory \((?:MB|GB|GiB)\)|\[Rank \d+\] \(after \d+ iterations\)"),
    ("traceback", r"Traceback \(most recent call last\)|^\s+File \"|^\w*(?:Error|Exception)\b|^\s+\^+\s*$"),
    ("warning", r"(?i)warn"),
    ("progress_bar", r"\d%\|"),
    ("validation", r"(?i)validat|\beval"),
    ("checkpoint", r"(?i)checkpoint"),
)
_REASON_RES = [(name, re.compile(rx)) for name, rx in REASON_RULES]


def reason_of(text: str) -> str:
    if not text.strip():
        return "blank"
    for name, rx in _REASON_RES:
        if rx.search(text):
            return name
    return "other"


@dataclass
class Router:
    """Stateful per-file line dispatcher. Feed candidate rows in file order."""

    file: str
    only: str | None = None  # restrict to one format name
    records: list[dict] = field(default_factory=list)
    mega_rows: list[tuple[int, int, str | None, str]] = field(default_factory=list)
    banners: list[tuple[int, int]] = field(default_factory=list)
    run_config: dict = field(default_factory=dict)
    ignored: Counter = field(default_factory=Counter)
    failed: list[int] = field(default_factory=list)
    seen: Counter = field(default_factory=Counter)
    #: Per-format state for formats that resolve something at the end of the file (``state``).
    states: dict = field(default_factory=dict)
    #: A held record that may continue on the next physical line(s): [line, sub, label, text, last
    #: physical line, pieces, accept(text_so_far, next_stripped) -> bool, flush(router, line, sub,
    #: label, text)]; see ``hold``.
    _pending: list | None = None

    def __post_init__(self) -> None:
        self._formats = line_formats()
        self._detects = [(f.name, re.compile(f.detect)) for f in self._formats if f.detect]
        #: one alternation of every strict detector (the generic extractor's "claimed by a format" test)
        self.detect_any = re.compile("|".join(f"(?:{f.detect})" for f in self._formats if f.detect) or r"(?!)")

    # -- public -----------------------------------------------------------------------------------
    def feed(self, line: int, text: str) -> None:
        if "^M" in text:
            text = _CARET_M.sub("\r", text)  # a carriage return pasted as the two characters ^M
        if "\r" in text:
            for sub, piece in enumerate(text.split("\r")):
                self._handle(line, sub, piece)
        else:
            self._handle(line, 0, text)

    def close(self) -> None:
        self._flush_pending()
        for fmt in self._formats:
            if fmt.finish is not None:
                fmt.finish(self)

    # -- the interface line formats use ----------------------------------------------------------------
    def allowed(self, fmt: str) -> bool:
        """Whether records of ``fmt`` are kept (``format=`` restricts); counts the line otherwise."""
        if self.only is None or self.only == fmt:
            return True
        self.ignored["other_format"] += 1
        return False

    def emit(self, fmt: str, line: int, sub: int, label: str | None, rec: dict | None) -> None:
        """Keep ``rec`` as a record of ``fmt``; ``None`` counts the line as failed."""
        if rec is None:
            self.failed.append(line)
            return
        rec["framework"] = fmt
        rec.setdefault("kind", "train")
        rec["line"] = line
        rec["_sub"] = sub
        rec["rank_label"] = label
        self.records.append(rec)
        self.seen[fmt] += 1

    def fail(self, line: int) -> None:
        self.failed.append(line)

    def state(self, name: str, factory):
        """Per-file state of format ``name`` (created on first use)."""
        st = self.states.get(name)
        if st is None:
            st = self.states[name] = factory()
        return st

    def hold(self, line: int, sub: int, label: str | None, text: str, accept, flush, glue=None,
             max_pieces: int | None = None) -> None:
        """Hold a record line until the next lines show whether it was hard-wrapped: each following
        physical line that ``accept(text_so_far, line_stripped)`` takes is glued on (at most
        ``MAX_PIECES`` pieces), then ``flush(router, line, sub, label, joined_text)`` parses it.
        ``glue(text_so_far, piece_text, piece_stripped)`` joins (default: right-stripped text plus the
        stripped piece). ``max_pieces``: instead of ``MAX_PIECES`` (a block record such as Composer's)."""
        self._flush_pending()
        self._pending = [line, sub, label, text, line, 1, accept, flush, glue or _glue_stripped,
                         max_pieces or MAX_PIECES]

    def train_or_validation(self, fmt: str, parsed: tuple[str, dict] | None, line: int, sub: int,
                            label: str | None) -> bool:
        """Emit a (kind, record) parse of ``fmt``; validation lines are counted, not emitted.
        False when the line is not of this format."""
        if parsed is None:
            return False
        kind, rec = parsed
        if kind == "validation":
            self.ignored["validation"] += 1
        elif self.allowed(fmt):
            self.emit(fmt, line, sub, label, rec)
        return True

    # -- internals --------------------------------------------------------------------------------
    def _flush_pending(self) -> None:
        if self._pending is None:
            return
        line, sub, label, text, _, _, _, flush, _, _ = self._pending
        self._pending = None
        flush(self, line, sub, label, text)

    def _handle(self, line: int, sub: int, raw: str) -> None:
        label, text = clean_line(raw)
        s = text.strip()
        pend = self._pending
        if pend is not None:
            if s and line in (pend[4], pend[4] + 1) and pend[5] < pend[9] and pend[6](pend[3], s):
                pend[3] = pend[8](pend[3], text, s)  # hard wrap: glue onto the previous physical line
                pend[4] = line
                pend[5] += 1
                self.ignored["joined_continuation"] += 1
                return
            self._flush_pending()
        if not s:
            self.ignored["blank"] += 1
            return
        for fmt in self._formats:
            if fmt.handle(self, line, sub, label, text, s):
                return
        for _name, rx in self._detects:
            if rx.search(text):  # claimed by a format's strict detector, but no record came of it
                self.failed.append(line)
                return
        arg = megatron.parse_argument(text)
        if arg is not None:
            self.run_config.setdefault(arg[0], arg[1])
            self.ignored["arguments"] += 1
            return
        if BANNER_RE.search(text):
            self.banners.append((line, sub))
            self.ignored["restart_banner"] += 1
            return
        self.ignored[reason_of(text)] += 1


def _glue_stripped(so_far: str, text: str, s: str) -> str:
    return so_far.rstrip() + s


#: Physical lines one hard-wrapped record may span.
MAX_PIECES = 8

_CARET_M = re.compile(r"\^M")
