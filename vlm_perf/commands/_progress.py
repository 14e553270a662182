"""When to show a progress bar, and the bar itself (rich, on stderr).

A bar is shown only when stderr is a terminal and the input is large (`LARGE_INPUT_BYTES`), so
pipes, CI logs and small runs stay quiet.
"""

from __future__ import annotations

import os
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterable, Iterator, TextIO

#: Inputs smaller than this (bytes on disk, all files together) finish too fast to need a bar.
LARGE_INPUT_BYTES = 256 << 20


def input_bytes(paths: Iterable[str | os.PathLike]) -> int:
    """Bytes on disk of files, directories (their files, one level) and globs; unreadable ones count 0."""
    import glob

    from ..remote import as_path, is_url

    total = 0
    for item in paths:
        text = str(item)
        path = as_path(text)  # a URL: its size from the store (a glob of URLs counts 0: no bar)
        if path.is_dir():
            candidates: Iterable[Path] = (p for p in path.iterdir() if p.is_file())
        elif path.is_file():
            candidates = [path]
        else:
            candidates = [] if is_url(text) else (Path(p) for p in glob.glob(text))
        for p in candidates:
            try:
                total += p.stat().st_size
            except OSError:
                pass
    return total


def want_progress(stream: TextIO | None, total_bytes: int, threshold: int = LARGE_INPUT_BYTES) -> bool:
    """True when ``stream`` is a terminal and the input has at least ``threshold`` bytes."""
    if stream is None or total_bytes < threshold:
        return False
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # closed or not a real file
        return False


@contextmanager
def byte_progress(description: str, total_bytes: int, enabled: bool) -> Iterator[Callable[[int, int], None]]:
    """A ``callback(done_bytes, total_bytes)`` that drives a rich bar on stderr (a no-op when disabled)."""
    if not enabled:
        yield lambda done, total: None
        return
    from rich.console import Console
    from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn, TransferSpeedColumn

    with Progress(TextColumn("{task.description}"), BarColumn(), DownloadColumn(), TransferSpeedColumn(),
                  TimeRemainingColumn(), console=Console(file=sys.stderr), transient=True) as bar:
        task = bar.add_task(description, total=total_bytes)

        def update(done: int, total: int) -> None:
            bar.update(task, completed=done, total=total)

        yield update
