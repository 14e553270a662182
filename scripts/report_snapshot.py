"""Snapshot the report outputs of every bundled sample, to prove a refactoring left them unchanged.

    python scripts/report_snapshot.py SNAPSHOT_DIR            # write summary.json, report.md, report.html,
                                                              # the terminal summary and a compare page per sample
    python scripts/report_snapshot.py SNAPSHOT_DIR --check    # compare the current outputs with SNAPSHOT_DIR

Run it from the repository root, once before a change and once after. Timings are stripped (the
``*_seconds`` / ``elapsed`` keys of the readers' diagnostics); everything else must be byte-identical.
The report folder is the same path each time, so file names in the outputs compare equal. A JSON file
whose parsed content is equal but whose key order differs is reported as such, not as a difference.
Known noise: qwen2-vl-tiny-trace's trace_parts.png (inlined in its report.html) is not byte-stable, two
runs of the same code can differ in that PNG alone.
"""

from __future__ import annotations

import argparse
import difflib
import hashlib
import json
import re
import shutil
import sys
from pathlib import Path

from typer.testing import CliRunner

from vlm_perf.cli import app

SAMPLES = sorted(p for p in Path("sample_logs").iterdir() if p.is_dir() and any(p.glob("train.log*")))
OUT = Path("/tmp/vlm_perf_report_snapshot_out")
TIMING = re.compile(r'"([a-z_]*(seconds|elapsed|_time_s|wall_s))": [0-9.e+-]+')


IMAGE = re.compile(r"data:image/png;base64,([A-Za-z0-9+/=]+)")


def _strip(text: str) -> str:
    """Timings and the checkout's path out; inlined PNGs as their SHA-256 (a diff stays readable)."""
    text = IMAGE.sub(lambda m: f"data:image/png;sha256,{hashlib.sha256(m.group(1).encode()).hexdigest()}", text)
    text = text.replace(str(Path.cwd()), "<repo>")  # a model path resolved inside the checkout
    return TIMING.sub(lambda m: f'"{m.group(1)}": "<t>"', text)


def outputs() -> dict[str, str]:
    files: dict[str, str] = {}
    runner = CliRunner()
    for sample in SAMPLES:
        out = OUT / sample.name
        shutil.rmtree(out, ignore_errors=True)
        result = runner.invoke(app, ["report", str(sample), "-o", str(out)])
        files[f"{sample.name}/terminal.txt"] = f"exit {result.exit_code}\n{result.output}"
        for name in ("summary.json", "report.md", "report.html"):
            path = out / name
            files[f"{sample.name}/{name}"] = _strip(path.read_text()) if path.exists() else "<missing>"
    a, b = SAMPLES[0], SAMPLES[-1]
    out = OUT / "compare"
    shutil.rmtree(out, ignore_errors=True)
    result = runner.invoke(app, ["compare", str(a), str(b), "-o", str(out)])
    files["compare/terminal.txt"] = f"exit {result.exit_code}\n{result.output}"
    for path in sorted(out.glob("compare.*")) if out.exists() else []:
        if path.suffix in (".json", ".md", ".html"):
            files[f"compare/{path.name}"] = _strip(path.read_text())
    return files


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("snapshot", type=Path)
    parser.add_argument("--check", action="store_true")
    args = parser.parse_args()
    now = outputs()
    if not args.check:
        for name, text in now.items():
            (args.snapshot / name).parent.mkdir(parents=True, exist_ok=True)
            (args.snapshot / name).write_text(text)
        print(f"{len(now)} files written to {args.snapshot}")
        return 0
    differ = reordered = 0
    for name, text in now.items():
        old_path = args.snapshot / name
        old = old_path.read_text() if old_path.exists() else "<not in snapshot>"
        if old != text and name.endswith(".json") and old.startswith("{") and json.loads(old) == json.loads(text):
            print(f"{name}: same content, key order differs")
            reordered += 1
        elif old != text:
            differ += 1
            sys.stdout.writelines(list(difflib.unified_diff(old.splitlines(True), text.splitlines(True), name, name,
                                                            n=1))[:40])
    print(f"{len(now)} files compared, {differ} differ, {reordered} with the same content in another key order")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
