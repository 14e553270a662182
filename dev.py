#!/usr/bin/env python3
"""One-command set-up: creates or reuses a virtual environment, installs what the task needs, runs it.

    python3 dev.py main             # report on the bundled (synthetic) sample run -> out/qwen3-vl-30b-a3b-sft/
                                    #   (then: .venv/bin/vlm-perf ..., or `source .venv/bin/activate` and vlm-perf ...)
    python3 dev.py lab              # JupyterLab on notebooks/ (the notebooks extra; --allow-root when run as root)
    python3 dev.py test             # FULL tier: every test, on every core (what CI runs); ~6-8 min on 2 idle cores
    python3 dev.py test --fast      # FAST tier: every package, no torch measurement, no slow end-to-end; <= 2 min
    python3 dev.py test --latest    # the measured tests on the NEWEST published libraries; names what drifted
    python3 dev.py lock             # after `test --latest` passed: make the newest versions the verified lock

Needs nothing but Python >= 3.10. `main` and `test` install the versions the suite was verified on, from
requirements/verified.txt (pip constraints: the same file serves the base install and the test extra), so a fresh
clone today and next month gets the tool that was tested. `pip install vlm-perf` (or `pip install .`) still
resolves pyproject.toml's ranges for users; `--latest` is how a maintainer sees what those ranges admit now.
Re-installs only when pyproject.toml or the lock changes. Anything after the options goes to pytest / vlm-perf.
"""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys
import venv
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parent
LOCK = ROOT / "requirements" / "verified.txt"

SAMPLE = "sample_logs/qwen3-vl-30b-a3b-sft"
MAIN_ARGS = ["report", SAMPLE, "-o", "out/qwen3-vl-30b-a3b-sft"]

# The tiers are marker expressions (markers: pyproject.toml; tests/conftest.py files whole directories under them).
FAST_TIER = "not measured and not slow"
LATEST_TIER = "measured"

# The frameworks' own FLOPs modules the tests call (tests/flops/test_framework_conventions.py), pinned. Downloaded as
# wheels (--no-deps, ~7 MB, about a second), never installed: veRL's wheel ships top-level `tests` and `scripts`
# packages that would shadow this repository's. Offline, those tests skip.
FRAMEWORK_WHEELS = ("verl==0.9.0", "veomni==0.1.12", "nemo_automodel==0.7.0")


class Env:
    """One virtual environment: ``.venv`` (locked, verified versions) or ``.venv-latest`` (newest versions)."""

    def __init__(self, name: str, locked: bool) -> None:
        self.root = ROOT / name
        self.locked = locked
        self.bin = self.root / ("Scripts" if os.name == "nt" else "bin")
        self.python = self.bin / ("python.exe" if os.name == "nt" else "python")

    def ensure(self, extra: str) -> None:
        """Create the environment if missing and install vlm-perf[extra] unless the same request is installed."""
        if not self.python.exists():
            say(f"[dev] creating virtual environment {self.root}")
            venv.EnvBuilder(with_pip=True).create(self.root)
        lock = LOCK.read_bytes() if self.locked else b"newest"
        digest = hashlib.sha256((ROOT / "pyproject.toml").read_bytes() + lock + extra.encode()).hexdigest()
        stamp = self.root / f".installed-{extra or 'base'}"
        if self.locked and stamp.exists() and stamp.read_text() == digest:
            return
        target = f".[{extra}]" if extra else "."
        what = f"vlm-perf{f'[{extra}]' if extra else ''}"
        how = f"verified versions from {LOCK.relative_to(ROOT)}" if self.locked else "the newest published versions"
        say(f"[dev] 1/2 upgrading pip in {self.root.name}")
        run([str(self.python), "-m", "pip", "install", "--quiet", "--upgrade", "pip"], stdout=sys.stderr)
        say(f"[dev] 2/2 installing {what} into {self.root.name} ({how}); pip's progress follows, a first install "
            "takes a few minutes")
        # pip's own lines (Collecting ..., Downloading ..., Installing collected packages ...) are the progress; they go
        # to stderr with the [dev] lines, so `dev.py main flops ... --json` keeps stdout for vlm-perf's answer
        cmd = [str(self.python), "-m", "pip", "install", "-e", target]
        if self.locked:
            cmd += ["--constraint", str(LOCK)]
        else:
            cmd += ["--upgrade", "--upgrade-strategy", "eager"]
        run(cmd, stdout=sys.stderr)
        stamp.write_text(digest)
        say(f"[dev] installed {what} into {self.root.name}")

    def fetch_framework_wheels(self) -> None:
        wheel_dir = self.root / "framework-wheels"
        names = [spec.replace("==", "-") + "-py3-none-any.whl" for spec in FRAMEWORK_WHEELS]
        if all((wheel_dir / n).is_file() for n in names):
            return
        result = subprocess.run([str(self.python), "-m", "pip", "download", "--quiet", "--no-deps",
                                 "--only-binary=:all:", "-d", str(wheel_dir), *FRAMEWORK_WHEELS], cwd=ROOT)
        if result.returncode:
            print("[dev] could not download the framework wheels; their tests will skip", flush=True)

    def test_environ(self) -> dict[str, str]:
        """The environment pytest runs in: this environment's framework wheels, and bytecode caching on even where
        the machine turns it off (``PYTHONDONTWRITEBYTECODE``, common in containers): without it every pytest worker
        and each of the suite's ~150 CLI, kernel and Dask child processes compiles vlm_perf and pytest re-rewrites
        every test module's asserts (about 0.5 s per child and 10-15 s per worker, measured on 2 cores)."""
        env = {**os.environ, "VLM_PERF_FRAMEWORK_WHEELS": str(self.root / "framework-wheels")}
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        return env

    def freeze(self) -> dict[str, str]:
        """{normalised name: version} of what is installed (vlm-perf itself and local labels like +cpu left out)."""
        out = subprocess.run([str(self.python), "-m", "pip", "freeze", "--exclude-editable"], cwd=ROOT,
                             capture_output=True, text=True, check=True).stdout
        return parse_pins(out)


LOCKED = Env(".venv", locked=True)
LATEST = Env(".venv-latest", locked=False)


def parse_pins(text: str) -> dict[str, str]:
    """``name==version`` lines -> {normalised name: version}; comments, blanks and non-pins are skipped."""
    pins: dict[str, str] = {}
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        m = re.fullmatch(r"([A-Za-z0-9][A-Za-z0-9._-]*)(?:\[[^\]]*\])?==([^\s;+]+)(?:\+\S+)?", line)
        if m and normalise(m.group(1)) != "vlm-perf":
            pins[normalise(m.group(1))] = m.group(2)
    return pins


def normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def write_lock(pins: dict[str, str], source: str) -> None:
    header = (
        "# The versions vlm-perf's test suite was verified on (pip constraints). Written by `python3 dev.py lock`\n"
        f"# from {source} after the suite passed there; do not edit by hand. Python "
        f"{sys.version_info.major}.{sys.version_info.minor}, {sys.platform}.\n"
        "# dev.py main / dev.py test install with `--constraint` this file; local labels (+cpu) are dropped so the\n"
        "# same pin is satisfiable from any index (torch==2.13.0 stays the CPU build where one is on disk).\n")
    LOCK.parent.mkdir(exist_ok=True)
    LOCK.write_text(header + "".join(f"{name}=={pins[name]}\n" for name in sorted(pins)))
    print(f"[dev] wrote {LOCK.relative_to(ROOT)} ({len(pins)} pins)", flush=True)


def drift(locked: dict[str, str], latest: dict[str, str]) -> list[str]:
    """The packages whose newest version differs from the verified one, as 'name: old -> new' lines."""
    lines = [f"{n}: {locked.get(n, '(not locked)')} -> {latest.get(n, '(gone)')}"
             for n in sorted(set(locked) | set(latest)) if locked.get(n) != latest.get(n)]
    return lines


def failures(junit: Path) -> list[str]:
    """'test id: first line of its error' for every failed or errored test of a JUnit XML file."""
    if not junit.is_file():
        return []
    out = []
    for case in ET.parse(junit).getroot().iter("testcase"):
        for bad in list(case.findall("failure")) + list(case.findall("error")):
            message = (bad.get("message") or "").strip().splitlines()
            out.append(f"{case.get('classname')}::{case.get('name')}: {message[0][:160] if message else '?'}")
    return out


def say(line: str) -> None:
    """dev.py's own progress and hints: on stderr, so stdout is the command's (``dev.py main flops ... --json``)."""
    print(line, file=sys.stderr, flush=True)


def run(cmd: list[str], env: dict[str, str] | None = None, stdout=None) -> None:
    result = subprocess.run(cmd, cwd=ROOT, env=env, stdout=stdout)
    if result.returncode:
        sys.exit(result.returncode)


def shown(path: Path) -> str:
    """``path`` as the reader types it from the working directory (relative inside it, else absolute)."""
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def where_vlm_perf(env: Env) -> str:
    """The line that tells a new user how to call the vlm-perf this environment installed."""
    exe = shown(env.bin / "vlm-perf")
    activate = f"source {shown(env.bin / 'activate')}" if os.name != "nt" else shown(env.bin / "activate.bat")
    return (f"[dev] the vlm-perf command is {exe}: run `{exe} --help`, or `{activate}` (once per shell) and "
            f"then `vlm-perf ...`; `python3 dev.py main ARGS...` runs it too")


def lab_command(env: Env, rest: list[str], uid: int | None) -> list[str]:
    """``jupyter lab`` on notebooks/ (unless a path of the repository is given), with ``--allow-root`` when run as root
    (uid 0, as in a container), where JupyterLab otherwise refuses to start. It runs in the repository root."""
    cmd = [str(env.bin / "jupyter"), "lab", *rest]
    if not any(not a.startswith("-") and (ROOT / a).exists() for a in rest):  # `--ip 0.0.0.0`: a value
        cmd.append("notebooks/")
    if uid == 0 and "--allow-root" not in rest:
        cmd.append("--allow-root")
    return cmd


def pytest_cmd(env: Env, marker: str | None, rest: list[str], ignore: tuple[str, ...] = ()) -> list[str]:
    """pytest on every core (pytest-xdist; ``-n 0`` in ``rest`` runs in one process) with the tier's markers.

    ``--dist loadscope`` keeps a module's tests on one worker, so a module-scoped fixture (a rendered sample report)
    is built once, not once per worker; ``--no-loadscope-reorder`` hands the modules out in collection order, which
    tests/conftest.py sets heaviest first (xdist's own reorder, by number of tests, would leave the few-test heavy
    modules, notebooks and regenerated runs, for the end). ``ignore``: directories not even collected (the fast tier skips importing
    the torch-measured ones: ~7 s of collection per worker)."""
    cmd = [str(env.python), "-m", "pytest"]
    if not any(a == "-n" or a.startswith(("-n=", "--numprocesses")) for a in rest):
        cmd += ["-n", "auto"]
    if not any(a.startswith("--dist") for a in rest):
        cmd += ["--dist", "loadscope", "--no-loadscope-reorder"]
    if marker:
        cmd += ["-m", marker]
    cmd += [f"--ignore={d}" for d in ignore]
    return cmd + rest


def fast_tier_ignores() -> tuple[str, ...]:
    """The directories whose every test is ``measured`` (tests/tiers.py): not collected in the fast tier."""
    sys.path.insert(0, str(ROOT))
    from tests.tiers import MEASURED_DIRS

    return MEASURED_DIRS


def test_latest(rest: list[str]) -> int:
    """The measured tests on the newest published libraries; prints what drifted (versions, failing tests)."""
    LATEST.ensure("test")
    LATEST.fetch_framework_wheels()
    junit = LATEST.root / "latest-junit.xml"
    junit.unlink(missing_ok=True)
    code = subprocess.run(pytest_cmd(LATEST, LATEST_TIER, [f"--junitxml={junit}", *rest]), cwd=ROOT,
                          env=LATEST.test_environ()).returncode
    moved = drift(parse_pins(LOCK.read_text()), LATEST.freeze())
    failed = failures(junit)
    report = ["# Drift: newest published libraries vs requirements/verified.txt", "",
              f"## Versions that moved ({len(moved)})", *[f"- {x}" for x in moved], "",
              f"## Measured tests failing on the newest versions ({len(failed)})", *[f"- {x}" for x in failed]]
    path = LATEST.root / "DRIFT.md"
    path.write_text("\n".join(report) + "\n")
    print("\n".join(report[:4 + len(moved)]))
    print(f"[dev] {len(failed)} measured test(s) fail on the newest versions; the whole list: {path}"
          if failed else "[dev] the measured tests pass on the newest versions: `python3 dev.py lock` adopts them")
    return code


def main() -> None:
    task = sys.argv[1] if len(sys.argv) > 1 else "main"
    rest = sys.argv[2:]
    if task == "main":
        LOCKED.ensure("")
        code = subprocess.run([str(LOCKED.bin / "vlm-perf"), *(rest or MAIN_ARGS)], cwd=ROOT).returncode
        say(where_vlm_perf(LOCKED))
        sys.exit(code)
    elif task == "lab":
        LOCKED.ensure("notebooks")
        cmd = lab_command(LOCKED, rest, os.geteuid() if hasattr(os, "geteuid") else None)
        say(f"[dev] {' '.join(shown(Path(cmd[0])) if i == 0 else a for i, a in enumerate(cmd))}")
        run(cmd)
    elif task == "test":
        flags = [a for a in rest[:1] if a in ("--fast", "--latest", "--full")]
        rest = rest[len(flags):]
        if flags == ["--latest"]:
            sys.exit(test_latest(rest))
        LOCKED.ensure("test")
        LOCKED.fetch_framework_wheels()
        if flags == ["--fast"]:
            run(pytest_cmd(LOCKED, FAST_TIER, rest, ignore=fast_tier_ignores()), env=LOCKED.test_environ())
        else:
            run(pytest_cmd(LOCKED, None, rest), env=LOCKED.test_environ())
    elif task == "lock":
        if not LATEST.python.exists():
            sys.exit("[dev] no .venv-latest: run `python3 dev.py test --latest` first (and read its drift report)")
        write_lock(LATEST.freeze(), ".venv-latest")
    else:
        sys.exit(f"usage: python3 dev.py main|lab|test [--fast|--latest]|lock [args...] (got {task!r})")


if __name__ == "__main__":
    main()
