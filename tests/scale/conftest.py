"""Fixtures of the scale tests."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def plain_report(tmp_path_factory):
    """``plain_report(sample) -> (out_dir, stdout)``: ``vlm-perf report SAMPLE -o OUT`` on this machine, no
    scheduler, through the CLI entry point in this process; run once per sample per session (the single-machine
    reference several scale tests compare against; each reads it, none writes into it)."""
    from tests.support import run_main

    done: dict[Path, tuple[Path, str]] = {}

    def report(sample: Path) -> tuple[Path, str]:
        if sample not in done:
            out = tmp_path_factory.mktemp(f"plain-{sample.name}") / "single"
            r = run_main("report", sample, "-o", out)
            assert r.returncode == 0, r.stderr
            done[sample] = (out, r.stdout)
        return done[sample]

    return report
