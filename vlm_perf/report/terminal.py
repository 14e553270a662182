"""The terminal summary `vlm-perf report` prints: the numbers of ``summary.json``, formatted by the same
`fmt` and the same display unit (`vlm_perf.report.units.run_rate_unit`) as report.md / report.html (one
value, one spelling, wherever it is shown). Each line comes from a report part's ``terminal`` function
(`vlm_perf.report.parts`), in the parts' terminal order."""

from __future__ import annotations

from .parts import all_parts

__all__ = ["number_lines"]


def number_lines(summary: dict) -> list[str]:
    """Peak, TFLOP/s/GPU and MFU per convention, HFU, the vision share (and any other part's lines), from a
    summary.json dict."""
    parts = sorted((p for p in all_parts() if p.terminal is not None),
                   key=lambda p: (p.order if p.terminal_order is None else p.terminal_order, p.name))
    return [line for part in parts for line in part.terminal(summary)]  # type: ignore[misc]
