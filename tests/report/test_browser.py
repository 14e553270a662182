"""report.html in a real browser: what a reader sees on the first screen, offline.

Each bundled sample's report.html (and one with failed checks, and the compare page) is opened by headless
Chromium (Debian's ``chromium``, driven by Playwright for Python; no browser download) at 1440x900 with the network
switched off, and must: show the verdict, the headline numbers and the first figure (the before/after figure)
inside the first viewport; log no console error and no page error; load every image (``naturalWidth > 0``); lay
out no text over other text (every rendered line box of every text node, against every other one); and request
nothing but the page itself (figures are inlined). Skipped only when no chromium binary exists.
"""

from __future__ import annotations

import pytest

from scripts.screenshots import MEASURE, SAMPLES, VIEWPORT, find_chromium, launch
from tests.support import SAMPLE_LOGS, run_cli

CHROMIUM = find_chromium()
pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(CHROMIUM is None, reason="no chromium binary (Debian: apt-get install -y chromium)")]

#: every text node's line boxes (page coordinates), for the overlap rule; invisible (closed <details>) are empty
LINE_BOXES = """() => {
  const out = [];
  const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  for (let node = walker.nextNode(); node; node = walker.nextNode()) {
    if (!node.textContent.trim() || !node.parentElement.checkVisibility()) continue;
    const range = document.createRange(); range.selectNodeContents(node);
    for (const r of range.getClientRects()) {
      if (r.width < 1 || r.height < 1) continue;
      out.push({text: node.textContent.trim().slice(0, 60), x0: r.left, x1: r.right,
                y0: r.top + window.scrollY, y1: r.bottom + window.scrollY});
    }
  }
  return out;
}"""
IMAGES = "() => [...document.images].map(i => ({alt: i.alt, ok: i.complete && i.naturalWidth > 0}))"


def overlapping(boxes: list[dict], slack: float = 1.0) -> list[tuple[str, str]]:
    """Pairs of line boxes that intersect by more than ``slack`` px both ways (sorted by top: a sweep)."""
    boxes = sorted(boxes, key=lambda b: b["y0"])
    out = []
    for i, a in enumerate(boxes):
        for b in boxes[i + 1:]:
            if b["y0"] >= a["y1"] - slack:
                break
            wide, high = min(a["x1"], b["x1"]) - max(a["x0"], b["x0"]), min(a["y1"], b["y1"]) - max(a["y0"], b["y0"])
            if wide > slack and high > slack:
                out.append((a["text"], b["text"]))
    return out


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        chromium = launch(p, CHROMIUM)
        yield chromium
        chromium.close()


def open_offline(browser, path):
    """The page at ``path`` in a fresh offline context; (page, console errors, requests other than the page)."""
    context = browser.new_context(viewport=VIEWPORT, offline=True)
    page = context.new_page()
    errors: list[str] = []
    requests: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("request", lambda r: requests.append(r.url) if r.url != path.as_uri() and not r.url.startswith("data:")
            else None)
    page.goto(path.as_uri(), wait_until="load")
    return page, errors, requests


def check_first_screen(browser, path, lead: tuple[str, ...] = (".verdict", ".stats")):
    page, errors, requests = open_offline(browser, path)
    try:
        where = page.evaluate(MEASURE)
        for selector in lead:
            box = page.locator(selector).first.bounding_box()
            assert box is not None and box["y"] >= 0 and box["y"] + box["height"] <= VIEWPORT["height"], (selector, box)
        figure = where["figure"]
        assert figure is not None and figure["bottom"] <= VIEWPORT["height"], where  # the whole first figure
        images = page.evaluate(IMAGES)
        assert images and all(i["ok"] for i in images), images
        assert overlapping(page.evaluate(LINE_BOXES)) == []
        assert errors == [] and requests == []
    finally:
        page.context.close()


@pytest.mark.parametrize("name", SAMPLES)
def test_first_screen_of_each_sample(name, browser, sample_report):
    out, _, _ = sample_report(name)
    check_first_screen(browser, out / "report.html")


def test_first_screen_with_failed_checks(browser, sample_report):
    """Two failed checks (a wrong GPU count) come before the numbers, and the figure still fits the first screen."""
    out, summary, _ = sample_report("qwen3-vl-30b-a3b-sft", "--gpus", "32")
    assert summary["checks_failed"]
    check_first_screen(browser, out / "report.html")


def test_first_screen_of_the_compare_page(browser, tmp_path):
    done = run_cli("compare", SAMPLE_LOGS / "qwen3-30b-a3b-text", SAMPLE_LOGS / "qwen3-vl-30b-a3b-sft", "-o",
                   tmp_path / "cmp")
    assert done.returncode == 0, done.stderr
    check_first_screen(browser, tmp_path / "cmp" / "compare.html")


def test_the_overlap_rule_sees_text_over_text(browser, tmp_path):
    """The rule itself: a paragraph pulled up over its neighbour is caught; the same two apart are not."""
    for shift, caught in (("-1.2em", True), ("0", False)):
        page_path = tmp_path / f"p{caught}.html"
        page_path.write_text(f'<!doctype html><html><body><p>first line of text</p><p style="margin-top:{shift}">'
                             'second line of text</p></body></html>')
        page, _, _ = open_offline(browser, page_path)
        assert bool(overlapping(page.evaluate(LINE_BOXES))) is caught
        page.context.close()
