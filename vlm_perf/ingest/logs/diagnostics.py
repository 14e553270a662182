"""Parse diagnostics: every line read is accounted for (record, ignored-by-reason or failed)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

#: Keep at most this many file:line references per list so a garbled 40 GB log stays printable;
#: the counts (``failed_count``, ``partial_count``) are always exact.
MAX_LOCATIONS = 1000


@dataclass
class Diagnostics:
    """Counters of one ``parse_logs`` call.

    ``lines_read`` counts physical lines (``\\n``-separated; ``\\r`` redraws inside a line are not
    extra lines). ``records`` counts produced rows of ``ParseResult.raw``. ``ignored`` maps a reason
    (``blank``, ``megatron_timer``, ``traceback``, ``other`` ...) to a count of lines or sub-lines.
    ``failed`` lists ``file:line`` of lines that looked like a record but yielded none; ``partial``
    lists lines that yielded a record with some field lost (truncated/garbled value).
    ``duplicates`` counts raw records dropped by the per-(segment, iteration) dedup, e.g. the same
    line printed by every rank. ``decode_errors`` counts bytes that were not valid UTF-8 (each
    replaced by U+FFFD).
    """

    lines_read: int = 0
    records: int = 0
    ignored: dict[str, int] = field(default_factory=dict)
    failed: list[str] = field(default_factory=list)
    failed_count: int = 0
    partial: list[str] = field(default_factory=list)
    partial_count: int = 0
    duplicates: int = 0
    decode_errors: int = 0
    formats_seen: dict[str, int] = field(default_factory=dict)
    segments: int = 0
    files: list[str] = field(default_factory=list)
    #: One line per noteworthy event that is not an error: a log key renamed because it collided
    #: with a known column, a file skipped because it held no training record, ...
    notes: list[str] = field(default_factory=list)

    def note(self, text: str) -> None:
        if text not in self.notes and len(self.notes) < MAX_LOCATIONS:
            self.notes.append(text)

    def ignore(self, reason: str, n: int = 1) -> None:
        if n:
            self.ignored[reason] = self.ignored.get(reason, 0) + n

    def ignore_counts(self, counts: Counter | dict[str, int]) -> None:
        for reason, n in counts.items():
            self.ignore(reason, int(n))

    def fail(self, location: str) -> None:
        self.failed_count += 1
        if len(self.failed) < MAX_LOCATIONS:
            self.failed.append(location)

    def mark_partial(self, location: str) -> None:
        self.partial_count += 1
        if len(self.partial) < MAX_LOCATIONS:
            self.partial.append(location)

    def saw(self, fmt: str, n: int = 1) -> None:
        if n:
            self.formats_seen[fmt] = self.formats_seen.get(fmt, 0) + n

    def to_dict(self) -> dict[str, Any]:
        return {
            "lines_read": self.lines_read,
            "records": self.records,
            "ignored": dict(sorted(self.ignored.items())),
            "failed": list(self.failed),
            "failed_count": self.failed_count,
            "partial": list(self.partial),
            "partial_count": self.partial_count,
            "duplicates": self.duplicates,
            "decode_errors": self.decode_errors,
            "formats_seen": dict(sorted(self.formats_seen.items())),
            "segments": self.segments,
            "files": list(self.files),
            "notes": list(self.notes),
        }
