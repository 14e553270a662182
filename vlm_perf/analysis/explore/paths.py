"""Locate the bundled sample runs from the repo root or from notebooks/."""

from __future__ import annotations

from pathlib import Path


def sample_run_dir(name: str, start: str | Path | None = None) -> Path:
    """``sample_logs/<name>`` of the repository, found by walking up from ``start`` (default: the
    working directory), so a notebook finds it whether it runs from ``notebooks/`` or the repo root."""
    here = Path(start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        candidate = folder / "sample_logs" / name
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError(f"sample_logs/{name} not found in {here} or any parent directory; run from inside "
                            "the vlm-perf repository")
