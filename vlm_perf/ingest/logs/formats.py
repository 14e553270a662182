"""The registry of log formats: one small ``LogFormat`` object per format, registered beside its parser.

Shaped like torch's ``register_flop_formula``: each format module calls ``register(LogFormat(...))``
at import time, next to the code that parses it; a second registration of the same name is an
error. The router and the file dispatcher loop over this registry instead of an if-chain, and the
slow-path candidate pre-filter is the union of the formats' own ``prefilter`` patterns
(``candidate_regex``), so adding a format touches its own module plus its tests.

Two kinds:

* **line formats** (``handle`` set): the per-line ``Router`` offers each candidate line to the
  formats in ``order``; ``handle(router, line, sub, label, text)`` returns True when it consumed the
  line (as a record, a counted non-record, or a failure). ``detect`` is the strict claim: a line it
  matches that yields no record is counted as *failed* (``file:line``), never as ignored.
* **file formats** (``sniff`` and ``read`` set): a whole structured file (``trainer_state.json``,
  TensorBoard events, W&B history exports) is recognised by ``sniff(path, head)`` and read by
  ``read(path, file_idx, diagnostics)`` into a frame of the common record schema.

``example`` is a real-shaped sample (one or more lines, or a file's text) that docs/log-formats.md
shows and the test suite parses, so the docs cannot drift from the code.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class LogFormat:
    """One log format.

    ``name``: the value of the ``framework`` column and of ``parse_logs(format=...)``.
    ``source``: which framework prints it (docs). ``notes``: its quirks and unit conversions (docs).
    ``example``: real-shaped sample text; ``example_suffix`` the file name suffix it needs.
    ``prefilter``: regex on the raw line selecting candidates for the per-line router (line
    formats); deliberately broad: a false positive costs one Python call, a false negative loses a
    record. ``detect``: strict regex claim; matched but unparsed lines are failures.
    ``order``: position in the router's loop (lower first; earlier formats claim shared shapes).
    """

    name: str
    source: str
    example: str
    notes: str = ""
    example_suffix: str = ".log"
    prefilter: str | None = None
    detect: str | None = None
    order: int = 100
    handle: Callable[..., bool] | None = field(default=None, compare=False)
    #: Called once per file after its last line (line formats that resolve state at the end).
    finish: Callable[..., None] | None = field(default=None, compare=False)
    sniff: Callable[..., bool] | None = field(default=None, compare=False)
    read: Callable[..., Any] | None = field(default=None, compare=False)
    #: Format names this object emits besides its own (a dict line may be HF, LLaMA-Factory, ...).
    emits: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not re.fullmatch(r"[a-z0-9][a-z0-9-]*", self.name):
            raise ValueError(f"log format name {self.name!r}: lower-case letters, digits and '-' only")
        for rx in (self.prefilter, self.detect):
            if rx is not None:
                re.compile(rx)  # fail at registration, not on the first log
        if (self.sniff is None) != (self.read is None):
            raise ValueError(f"log format {self.name!r}: a file format needs both sniff and read")

    @property
    def kind(self) -> str:
        return "file" if self.read is not None else ("line" if self.handle is not None else "dict")


_REGISTRY: dict[str, LogFormat] = {}


def register(fmt: LogFormat) -> LogFormat:
    """Add ``fmt`` to the registry; a name registered twice is rejected (ValueError)."""
    if fmt.name in _REGISTRY:
        raise ValueError(f"log format {fmt.name!r} is already registered")
    _REGISTRY[fmt.name] = fmt
    return fmt


def registry() -> dict[str, LogFormat]:
    """name -> format, in registration order (after every built-in format module is imported)."""
    _load_builtin()
    return dict(_REGISTRY)


def line_formats() -> list[LogFormat]:
    """Formats the per-line router offers lines to, in ``order``."""
    return sorted((f for f in registry().values() if f.handle is not None), key=lambda f: f.order)


def file_formats() -> list[LogFormat]:
    return sorted((f for f in registry().values() if f.read is not None), key=lambda f: f.order)


def names() -> tuple[str, ...]:
    return tuple(registry())


#: Candidate rules that belong to no format: carriage-return redraws and ANSI colour codes (which
#: need cleaning before any format can see the line), the Megatron arguments block and YAML config
#: dumps (run configuration), and restart banners.
GENERIC_PREFILTERS: tuple[str, ...] = (
    r"[\r\x1b]",
    r"^\s*\w+ \.{3,} ",
    r"^\s+(?:world_size|seq_length|sequence_length|micro_batch_size|global_batch_size|\w+_parallel_size):\s+\d",
    r"successfully loaded checkpoint|Restoring states|Running training|Resuming training|Loading checkpoint from",
)


def candidate_regex() -> str:
    """One alternation of every line format's ``prefilter`` and the generic rules (raw text)."""
    parts = list(GENERIC_PREFILTERS) + [f.prefilter for f in line_formats() if f.prefilter]
    return "|".join(f"(?:{p})" for p in parts)


DOCS_BEGIN = "<!-- formats: generated from the registry (vlm_perf/ingest/logs/formats.py); do not edit by hand -->"
DOCS_END = "<!-- formats: end -->"


def docs_markdown() -> str:
    """The per-format section of docs/log-formats.md, generated from the registry (a test keeps the
    file in sync: regenerate with ``python -m vlm_perf.ingest.logs.formats``)."""
    out = [DOCS_BEGIN, "", "| name | kind | source |", "|---|---|---|"]
    fmts = sorted(registry().values(), key=lambda f: (f.kind != "line", f.order, f.name))
    for f in fmts:
        kind = {"line": "console line", "file": "structured file", "dict": "dict line / JSONL"}[f.kind]
        if f.handle is not None and f.read is not None:
            kind = "console line + structured file"
        out.append(f"| `{f.name}` | {kind} | {f.source.replace('|', chr(92) + '|')} |")
    for f in fmts:
        out += ["", f"### `{f.name}`", ""]
        if f.example:
            out += [f"Example (`{f.example_suffix}`, parsed by the test suite):", "", "```text",
                    f.example.replace("\t", "<TAB>").replace("\r", "<CR>"), "```", ""]
        else:
            out += ["No text example (binary input); covered by the test suite.", ""]
        if f.notes:
            out.append(f"Quirks and units: {f.notes}.")
        if f.detect:
            out.append(f"A line matching `{f.detect}` that yields no record is counted as **failed**.")
        if f.emits:
            out.append(f"The same reader also produces records of: {', '.join(f'`{e}`' for e in f.emits)}.")
    out += ["", DOCS_END]
    return "\n".join(out)


_LOADED = False


def _load_builtin() -> None:
    global _LOADED
    if _LOADED:
        return
    _LOADED = True
    # importing a format module registers its formats (beside their parsers)
    from . import (  # noqa: F401
        dicts,
        maxtext,
        megatron,
        nanotron,
        nemo,
        progress,
        tensorboard,
        torchtitan,
        verl,
        wandb,
    )
    from . import generic

    generic.register_formats()  # last: the generic extractor and its declared shapes


__all__ = ["LogFormat", "register", "registry", "line_formats", "file_formats", "names", "candidate_regex",
           "docs_markdown"]


if __name__ == "__main__":  # python -m vlm_perf.ingest.logs.formats: refresh docs/log-formats.md
    from pathlib import Path

    from vlm_perf.ingest.logs import (
        formats as registered,  # the package's registry, not this __main__ copy
    )

    from vlm_perf.ingest.logs import vocab

    doc = Path(__file__).resolve().parents[3] / "docs" / "log-formats.md"
    text = doc.read_text(encoding="utf-8")
    for begin, end, body in ((DOCS_BEGIN, DOCS_END, registered.docs_markdown()),
                             (vocab.VOCAB_BEGIN, vocab.VOCAB_END, vocab.docs_markdown())):
        head, rest = text.split(begin, 1)
        _, tail = rest.split(end, 1)
        text = head + body + tail
    doc.write_text(text, encoding="utf-8")
    print(f"updated {doc}")
