"""Slow path: per-line Python dispatch for the few lines the vectorised pre-filter selected.

Handles ``\\r`` redraws, ANSI, launcher prefixes, curly quotes, hard-wrapped veRL lines, and every
non-Megatron format. Megatron iteration lines found here (e.g. glued after ``\\r`` or carrying
ANSI/non-ASCII) are cleaned and handed back for the vectorised extractor, so both paths share one
Megatron implementation.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field

from . import dicts, megatron, nemo, progress, torchtitan, verl
from .preprocess import clean_line

MEGA_RE = re.compile(megatron.DETECT_RE)
NEMO2_COLLISION = re.compile(megatron.NEMO2_COLLISION_RE)
TQDM_RE = re.compile(r"(\d+)%\|[^|]*\|\s*(\d+)/(\d+)\s*\[[^\]]*?([\d.]+)\s*(s/it|it/s)")
BANNER_RE = re.compile(
    r"successfully loaded checkpoint|Restoring states from the checkpoint|\*{3,} Running training \*{3,}"
    r"|Resuming training from checkpoint|Loading checkpoint from"
)

#: Reasons for lines that are not records; the same rules run vectorised in ``reasons_expr``.
REASON_RULES: tuple[tuple[str, str], ...] = (
    ("megatron_timer", r"time \(ms\)|time across ranks \(ms\)|^\s*\S+ \.+: \(\s*[\d.]+"),
    ("memory_report", r"memory \((?:MB|GB|GiB)\)|\[Rank \d+\] \(after \d+ iterations\)"),
    ("traceback", r"Traceback \(most recent call last\)|^\s+File \"|^\w*(?:Error|Exception)\b|^\s+\^+\s*$"),
    ("warning", r"(?i)warn"),
    ("progress_bar", r"\d+%\|"),
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
    _pending_verl: list | None = None  # [line, sub, label, text, last physical line]
    _last_bar: tuple[int, int, float | None] | None = None  # (line, n, seconds per it)

    # -- public -----------------------------------------------------------------------------------
    def feed(self, line: int, text: str) -> None:
        if "\r" in text:
            for sub, piece in enumerate(text.split("\r")):
                self._handle(line, sub, piece)
        else:
            self._handle(line, 0, text)

    def close(self) -> None:
        self._flush_verl()

    # -- internals --------------------------------------------------------------------------------
    def _allowed(self, fmt: str) -> bool:
        if self.only is None or self.only == fmt:
            return True
        self.ignored["other_format"] += 1
        return False

    def _emit(self, fmt: str, line: int, sub: int, label: str | None, rec: dict | None) -> None:
        if rec is None:
            self.failed.append(line)
            return
        rec["framework"] = fmt
        rec["line"] = line
        rec["_sub"] = sub
        rec["rank_label"] = label
        self.records.append(rec)
        self.seen[fmt] += 1

    def _flush_verl(self) -> None:
        if self._pending_verl is None:
            return
        line, sub, label, text, _ = self._pending_verl
        self._pending_verl = None
        if self._allowed("verl"):
            self._emit("verl", line, sub, label, verl.parse(text))

    def _train_or_validation(self, fmt: str, parsed: tuple[str, dict] | None, line: int, sub: int,
                             label: str | None) -> bool:
        """Emit a (kind, record) parse of ``fmt``; validation lines are counted, not emitted.
        False when the line is not of this format."""
        if parsed is None:
            return False
        kind, rec = parsed
        if kind == "validation":
            self.ignored["validation"] += 1
        elif self._allowed(fmt):
            self._emit(fmt, line, sub, label, rec)
        return True

    def _handle(self, line: int, sub: int, raw: str) -> None:
        label, text = clean_line(raw)
        s = text.strip()
        pend = self._pending_verl
        if pend is not None:
            if (s and line in (pend[4], pend[4] + 1) and not s.startswith("step:")
                    and verl.CONTINUATION_RE.match(s)):
                pend[3] = pend[3].rstrip() + s  # hard wrap (quirk 11): glue onto the previous line
                pend[4] = line
                self.ignored["joined_continuation"] += 1
                return
            self._flush_verl()
        if not s:
            self.ignored["blank"] += 1
            return
        if MEGA_RE.search(text) and not NEMO2_COLLISION.search(text):
            if self._allowed("megatron"):
                self.mega_rows.append((line, sub, label, text))
            return
        if self._train_or_validation("nemo2", nemo.parse_nemo2(text), line, sub, label):
            return
        if "Step Time" in text:
            rec = megatron.parse_step_time(text)
            if rec is not None or "GPU utilization" in text:
                if self._allowed("megatron-bridge"):
                    self._emit("megatron-bridge", line, sub, label, rec)
                return
        pr = progress.parse(s)
        if pr is not None:
            event, rec, gpus = pr
            if gpus is not None:
                self.run_config.setdefault("world_size", gpus)
                self.run_config.setdefault("progress_gpus", gpus)
            if event == "Starting job":
                self.banners.append((line, sub))
            if "iteration" in rec:
                if self._allowed("megatron-progress"):
                    self._emit("megatron-progress", line, sub, label, rec)
            else:
                self.ignored["progress_event"] += 1
            return
        if verl.DETECT_RE.match(s):
            self._pending_verl = [line, sub, label, s, line]
            return
        if self._train_or_validation("torchtitan", torchtitan.parse(text), line, sub, label):
            return
        if "Epoch" in text:
            rec = nemo.parse_nemo1(text)
            if rec is not None:
                if self._allowed("nemo1"):
                    self._emit("nemo1", line, sub, label, rec)
                return
        bar = TQDM_RE.search(text)
        if bar:
            v = float(bar.group(4))
            sec = v if bar.group(5) == "s/it" else (1.0 / v if v else None)
            self._last_bar = (line, int(bar.group(2)), sec)
        if "{" in text:
            d = dicts.load_dict(text)
            if d is not None:
                fmt, rec = dicts.record_from_dict(d)
                if self._allowed(fmt):
                    if fmt == "hf" and "iteration" not in rec and self._last_bar and line - self._last_bar[0] <= 2:
                        # console dicts carry no step: take it from the tqdm bar drawn just before
                        rec["iteration"] = self._last_bar[1]
                        rec.setdefault("elapsed_s", self._last_bar[2])
                    self._emit(fmt, line, sub, label, rec if len(rec) else None)
                return
            if re.search(r"\{\s*['\"]", text):
                self.failed.append(line)  # looked like a metrics dict but did not parse
                return
        if bar:
            self.ignored["progress_bar"] += 1
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
