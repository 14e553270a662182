"""No figure prints text over other text.

Every text matplotlib draws while saving a figure (titles, suptitles, axis labels, tick labels, legend entries,
notes, bar labels) is recorded with its box in the renderer's own pixels (``Text.get_window_extent(renderer)``
at draw time), and no two boxes of one figure may intersect by more than a pixel. Checked on every figure of
every bundled sample's report (and the compare page), and on the vision-share figure whose two subplot titles
once printed on top of each other.
"""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.text import Text  # noqa: E402

from tests.support import SAMPLE_LOGS, run_main  # noqa: E402

SAMPLES = sorted(p.name for p in SAMPLE_LOGS.iterdir() if p.is_dir() and any(p.glob("train.log*")))
SLACK_PX = 1.0  # boxes that touch (adjacent tick labels) are not an overlap


def overlaps(boxes: list[tuple[str, object]]) -> list[tuple[str, str]]:
    """Pairs of texts whose boxes intersect by more than `SLACK_PX` in both directions."""
    out = []
    for i, (a, ba) in enumerate(boxes):
        for b, bb in boxes[i + 1:]:
            dx = min(ba.x1, bb.x1) - max(ba.x0, bb.x0)
            dy = min(ba.y1, bb.y1) - max(ba.y0, bb.y0)
            if dx > SLACK_PX and dy > SLACK_PX:
                out.append((a, b))
    return out


@contextmanager
def recording(monkeypatch):
    """``{saved file name: [(text, box), ...]}`` for every figure saved inside the block (the last draw pass of each
    text: ``bbox_inches="tight"`` draws twice)."""
    saved: dict[str, list] = {}
    drawn: dict[int, tuple[str, object]] = {}
    text_draw, savefig = Text.draw, Figure.savefig

    def draw(self, renderer):
        text_draw(self, renderer)
        if self.get_visible() and self.get_text().strip():
            drawn[id(self)] = (self.get_text(), self.get_window_extent(renderer))

    def save(self, fname, *args, **kwargs):
        drawn.clear()
        result = savefig(self, fname, *args, **kwargs)
        saved[Path(str(fname)).name] = list(drawn.values())
        return result

    monkeypatch.setattr(Text, "draw", draw)
    monkeypatch.setattr(Figure, "savefig", save)
    yield saved


def test_the_overlap_rule_sees_overlapping_titles(monkeypatch, tmp_path):
    """The check itself: two subplot titles too long for their axes are caught; short ones are not."""
    with recording(monkeypatch) as saved:
        for name, title in (("long.png", "a very long subplot title that runs into its neighbour's title " * 2),
                            ("short.png", "per iteration")):
            fig, axes = plt.subplots(1, 2, figsize=(8, 3))
            for ax in axes:
                ax.set_title(title)
            fig.savefig(tmp_path / name)
            plt.close(fig)
    assert overlaps(saved["long.png"]) and not overlaps(saved["short.png"])


@pytest.mark.slow
def test_vision_share_titles_do_not_overlap(monkeypatch, tmp_path):
    """The two histograms carry short titles; the model and the run's share are one title over both."""
    import polars as pl

    from vlm_perf.pipeline import load_run
    from vlm_perf.report import figures

    loaded = load_run(str(SAMPLE_LOGS / "qwen3-vl-30b-a3b-sft"))
    shares = pl.Series(np.random.default_rng(0).uniform(0, 0.3, 1000))
    with recording(monkeypatch) as saved:
        figures.vision_share_hist(loaded.analysis, shares, tmp_path / "vision_share.png")
    texts = [t for t, _ in saved["vision_share.png"]]
    assert "per microbatch" in texts and "per iteration" in texts
    assert overlaps(saved["vision_share.png"]) == []


@pytest.mark.slow
@pytest.mark.parametrize("name", SAMPLES)
def test_no_figure_of_a_report_overlaps_text(name, monkeypatch, tmp_path):
    with recording(monkeypatch) as saved:
        done = run_main("report", SAMPLE_LOGS / name, "-o", tmp_path / "out")
    assert done.returncode == 0, done.stderr
    pngs = sorted(p.name for p in (tmp_path / "out").glob("*.png"))
    assert pngs and set(pngs) <= set(saved), (pngs, sorted(saved))
    bad = {png: overlaps(saved[png]) for png in pngs if overlaps(saved[png])}
    assert bad == {}


@pytest.mark.slow
def test_the_compare_figure_does_not_overlap_text(monkeypatch, tmp_path):
    with recording(monkeypatch) as saved:
        done = run_main("compare", SAMPLE_LOGS / "qwen3-30b-a3b-text", SAMPLE_LOGS / "qwen3-vl-30b-a3b-sft",
                        "-o", tmp_path / "cmp")
    assert done.returncode == 0, done.stderr
    assert overlaps(saved["compare.png"]) == []
