#!/usr/bin/env python3
"""One-command set-up: creates or reuses ./.venv, installs what the task needs, runs it.

    python3 dev.py main     # report on the bundled (synthetic) sample run -> out/qwen3-vl-30b-a3b-sft/
    python3 dev.py test     # the whole test suite (installs the test extra: CPU torch, transformers, ...)

Needs nothing but Python >= 3.10. Re-installs only when pyproject.toml changes.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent
VENV = ROOT / ".venv"
BIN = VENV / ("Scripts" if os.name == "nt" else "bin")
PY = BIN / ("python.exe" if os.name == "nt" else "python")

SAMPLE = "sample_logs/qwen3-vl-30b-a3b-sft"
MAIN_ARGS = ["report", SAMPLE, "-o", "out/qwen3-vl-30b-a3b-sft"]


def ensure_env(extra: str) -> None:
    if not PY.exists():
        print(f"[dev] creating virtual environment {VENV}", flush=True)
        venv.EnvBuilder(with_pip=True).create(VENV)
    digest = hashlib.sha256((ROOT / "pyproject.toml").read_bytes() + extra.encode()).hexdigest()
    stamp = VENV / f".installed-{extra or 'base'}"
    if stamp.exists() and stamp.read_text() == digest:
        return
    target = f".[{extra}]" if extra else "."
    print(f"[dev] installing vlm-perf{f'[{extra}]' if extra else ''} into {VENV}", flush=True)
    run([str(PY), "-m", "pip", "install", "--quiet", "--upgrade", "pip"])
    run([str(PY), "-m", "pip", "install", "--quiet", "-e", target])
    stamp.write_text(digest)


# The frameworks' own FLOPs modules the tests call (tests/flops/test_framework_conventions.py), pinned. Downloaded as
# wheels (--no-deps, ~7 MB, about a second), never installed: veRL's wheel ships top-level `tests` and `scripts`
# packages that would shadow this repository's. Offline, those tests skip.
FRAMEWORK_WHEELS = ("verl==0.9.0", "veomni==0.1.12", "nemo_automodel==0.7.0")
WHEEL_DIR = VENV / "framework-wheels"


def fetch_framework_wheels() -> None:
    names = [spec.replace("==", "-") + "-py3-none-any.whl" for spec in FRAMEWORK_WHEELS]
    if all((WHEEL_DIR / n).is_file() for n in names):
        return
    result = subprocess.run([str(PY), "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:",
                             "-d", str(WHEEL_DIR), *FRAMEWORK_WHEELS], cwd=ROOT)
    if result.returncode:
        print("[dev] could not download the framework wheels; their tests will skip", flush=True)


def run(cmd: list[str]) -> None:
    result = subprocess.run(cmd, cwd=ROOT)
    if result.returncode:
        sys.exit(result.returncode)


def main() -> None:
    task = sys.argv[1] if len(sys.argv) > 1 else "main"
    rest = sys.argv[2:]
    if task == "main":
        ensure_env("")
        run([str(BIN / "vlm-perf"), *(rest or MAIN_ARGS)])
    elif task == "test":
        ensure_env("test")
        fetch_framework_wheels()
        run([str(PY), "-m", "pytest", *rest])
    else:
        sys.exit(f"usage: python3 dev.py main|test [args...] (got {task!r})")


if __name__ == "__main__":
    main()
