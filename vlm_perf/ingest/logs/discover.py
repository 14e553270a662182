"""Which files of a run directory are training logs (``parse_logs(DIR)``, ``vlm-perf parse DIR``).

A directory is searched **only** at its top level and in a few named sub-folders (``LOG_SUBDIRS``),
never through the whole tree (a run directory may hold checkpoints, datasets or other runs).
TensorBoard event files found there are read as one TensorBoard source per folder.
"""

from __future__ import annotations

import re
from pathlib import Path

#: File names that are training logs (plain or compressed text, HF / LLaMA-Factory / ms-swift /
#: veRL JSON(L), W&B history exports).
LOG_FILE_RE = re.compile(
    r"(\.log(\.gz|\.zst)?|\.txt(\.gz|\.zst)?|^trainer_state\.json|\.jsonl(\.gz|\.zst)?|^output\.log"
    r"|^wandb.*\.(csv|parquet)|history.*\.(csv|jsonl|parquet))$"
)
#: Metadata shards live next to logs but are not logs.
_NOT_LOGS = re.compile(r"^(metadata|microbatch).*\.(jsonl|ndjson|parquet)(\.gz|\.zst)?$|^requirements\.txt$")
#: Sub-folders searched besides the directory itself.
LOG_SUBDIRS: tuple[str, ...] = ("logs", "log", "tensorboard", "tb", "tb_logs", "runs", "wandb")
_TB = "events.out.tfevents"


def _has_events(folder: Path) -> bool:
    return any(p.name.startswith(_TB) for p in folder.iterdir() if p.is_file())


def expand_dir(folder: Path) -> list[Path]:
    """Log files and TensorBoard folders of a run directory (sorted, top level first)."""
    out: list[Path] = []
    for d in [folder] + [folder / name for name in LOG_SUBDIRS if (folder / name).is_dir()]:
        files = sorted(p for p in d.iterdir() if p.is_file())
        out += [p for p in files if LOG_FILE_RE.search(p.name) and not _NOT_LOGS.match(p.name)
                and not p.name.startswith(_TB)]
        if _has_events(d):
            out.append(d)  # one TensorBoard source (the event files directly in it)
        elif d is not folder:
            # TensorBoard writers usually make one sub-folder per run below tensorboard/
            out += [sub for sub in sorted(p for p in d.iterdir() if p.is_dir()) if _has_events(sub)]
    return out


__all__ = ["LOG_FILE_RE", "LOG_SUBDIRS", "expand_dir"]
