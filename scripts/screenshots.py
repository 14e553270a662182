"""First-screen screenshots of every bundled sample's report, for review (not committed).

    python scripts/screenshots.py [--out out/screenshots] [--browser /usr/bin/chromium]

Renders ``vlm-perf report sample_logs/NAME`` for every sample run (and the README's compare example) into
``OUT/reports/NAME``, opens each ``report.html`` offline in headless Chromium (Debian's ``chromium``, driven by
Playwright for Python; no browser download) at 1440x900, and writes ``OUT/NAME.png``: what a reader sees before
scrolling. Also prints, per page, where the verdict and the first figure sit and the page's height (px).
The browser test (tests/report/test_browser.py) opens the same pages with the same functions.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
VIEWPORT = {"width": 1440, "height": 900}
#: sample runs with a training log, and the flags their README example uses (none: the folder says it all)
SAMPLES = sorted(p.name for p in (ROOT / "sample_logs").iterdir() if p.is_dir() and any(p.glob("train.log*")))
COMPARE = ("qwen3-30b-a3b-text", "qwen3-vl-30b-a3b-sft")

#: where the page's parts are, measured in the browser (CSS px from the top of the page)
MEASURE = """() => {
  const box = (el) => { if (!el) return null; const r = el.getBoundingClientRect();
                        return {top: r.top + window.scrollY, bottom: r.bottom + window.scrollY}; };
  return {verdict: box(document.querySelector('.verdict')), stats: box(document.querySelector('.stats')),
          figure: box(document.querySelector('img')), height: document.documentElement.scrollHeight};
}"""


def find_chromium() -> str | None:
    """The system Chromium (Debian's ``chromium`` package), or None."""
    for name in ("chromium", "chromium-browser"):
        found = shutil.which(name)
        if found:
            return found
    return "/usr/bin/chromium" if Path("/usr/bin/chromium").exists() else None


def launch(playwright, executable: str):
    """Headless Chromium at ``executable`` (no sandbox: containers run as root)."""
    return playwright.chromium.launch(executable_path=executable, headless=True, args=["--no-sandbox"])


def render_reports(out: Path) -> dict[str, Path]:
    """Every sample's report.html (and the compare page) under ``out``; name -> page."""
    pages = {}
    for name in SAMPLES:
        folder = out / name
        subprocess.run([sys.executable, "-m", "vlm_perf.cli", "report", str(ROOT / "sample_logs" / name), "-o",
                        str(folder)], check=True, capture_output=True, cwd=ROOT)
        pages[name] = folder / "report.html"
    folder = out / "compare"
    subprocess.run([sys.executable, "-m", "vlm_perf.cli", "compare", *(str(ROOT / "sample_logs" / n) for n in COMPARE),
                    "-o", str(folder)], check=True, capture_output=True, cwd=ROOT)
    pages["compare"] = folder / "compare.html"
    return pages


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "out" / "screenshots")
    parser.add_argument("--browser", default=None, help="Chromium executable (default: the system chromium)")
    args = parser.parse_args(argv)
    executable = args.browser or find_chromium()
    if executable is None:
        print("no chromium binary: apt-get install -y chromium (or pass --browser PATH)", file=sys.stderr)
        return 2
    from playwright.sync_api import sync_playwright

    args.out.mkdir(parents=True, exist_ok=True)
    pages = render_reports(args.out / "reports")
    with sync_playwright() as p:
        browser = launch(p, executable)
        context = browser.new_context(viewport=VIEWPORT, offline=True)
        for name, page_path in pages.items():
            page = context.new_page()
            page.goto(page_path.as_uri())
            where = page.evaluate(MEASURE)
            page.screenshot(path=str(args.out / f"{name}.png"))
            top = {key: "—" if where[key] is None else f"{where[key]['top']:.0f}" for key in ("verdict", "figure")}
            print(f"{name:28s} verdict at {top['verdict']:>5} px, first figure {top['figure']:>5}..."
                  f"{where['figure']['bottom'] if where['figure'] else 0:.0f} px, page {where['height']} px "
                  f"-> {args.out / (name + '.png')}")
            page.close()
        browser.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
