"""Docs that run: every ```bash / ```console / ```python block of README.md and docs/*.md is executed.

Shell blocks: each command line (``$ `` prompts of console blocks stripped, ``\\`` continuations
joined, ``#`` comments dropped) that starts with ``vlm-perf`` or ``python`` runs with this
interpreter's vlm-perf in a temporary folder holding a copy of the repository's ``sample_logs/``
(the paths a reader types from a clone); it must exit 0. Each distinct command runs once: the first ``vlm-perf``
command as a real process, the later ones through the same entry point (``vlm_perf.cli.main``) in this process. Other
lines are checked with ``bash -n``. Python blocks are exec'd there, each in a fresh namespace.

A block that needs a cluster, a GPU, the network, a training loop or the reader's own files is
marked on the line before its fence::

    <!-- docs-test: skip reason="needs a Dask cluster" -->

and is only checked for syntax (``bash -n`` / ``compile``).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support import run_main

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
SHELLS = {"bash", "console", "sh", "shell"}
MARKER = re.compile(r'<!--\s*docs-test:\s*skip\s+reason="([^"]+)"\s*-->')
FENCE = re.compile(r"^```([\w+-]*)\s*$")


@dataclass(frozen=True)
class Block:
    doc: Path
    line: int  # 1-based line of the opening fence
    lang: str
    text: str
    skip: str | None  # the marker's reason

    @property
    def id(self) -> str:
        return f"{self.doc.relative_to(ROOT)}:{self.line}"


def blocks() -> list[Block]:
    out = []
    for doc in DOCS:
        lines = doc.read_text().splitlines()
        i = 0
        while i < len(lines):
            m = FENCE.match(lines[i])
            if not m:
                i += 1
                continue
            start, lang = i, m.group(1).lower()
            j = i + 1
            while j < len(lines) and not lines[j].startswith("```"):
                j += 1
            before = next((lines[k] for k in range(start - 1, -1, -1) if lines[k].strip()), "")
            marker = MARKER.search(before)
            if lang in SHELLS or lang == "python":
                out.append(Block(doc, start + 1, lang, "\n".join(lines[start + 1:j]) + "\n",
                                 marker.group(1) if marker else None))
            i = j + 1
    return out


def shell_commands(block: Block) -> list[str]:
    """The block's command lines (prompts stripped, continuations joined)."""
    raw = block.text.splitlines()
    if block.lang == "console":
        raw = [line[2:] if line.startswith("$ ") else "" for line in raw]  # output lines are not commands
    out, cur = [], ""
    for line in raw:
        if line.rstrip().endswith("\\"):
            cur += line.rstrip()[:-1] + " "
            continue
        cur += line
        if cur.strip() and not cur.lstrip().startswith("#"):
            out.append(cur.strip())
        cur = ""
    return out


def runnable(command: str) -> bool:
    return command.split()[0] in ("vlm-perf", "python", "python3")


BLOCKS = blocks()


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    work = tmp_path_factory.mktemp("docs")
    shutil.copytree(ROOT / "sample_logs", work / "sample_logs")
    return work


_DONE: dict[str, subprocess.CompletedProcess] = {}


def run_command(command: str, workdir: Path) -> subprocess.CompletedProcess:
    if command in _DONE:
        return _DONE[command]
    argv = shlex.split(command, comments=True)
    if argv[0] == "vlm-perf" and any(c.split()[0] == "vlm-perf" for c in _DONE):
        # after the first one (a real `vlm-perf` process, below), the same entry point (vlm_perf.cli.main) runs in
        # this process, in the docs folder: a new interpreter per command would only repeat the imports
        cwd = os.getcwd()
        os.chdir(workdir)
        try:
            _DONE[command] = run_main(*argv[1:])
        finally:
            os.chdir(cwd)
        return _DONE[command]
    vlm_perf = Path(sys.executable).with_name("vlm-perf")
    if argv[0] == "vlm-perf":
        argv = [str(vlm_perf)] if vlm_perf.exists() else [sys.executable, "-m", "vlm_perf.cli"]
        argv += shlex.split(command, comments=True)[1:]
    else:
        argv[0] = sys.executable
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    _DONE[command] = subprocess.run(argv, cwd=workdir, env=env, capture_output=True, text=True, timeout=300)
    return _DONE[command]


def check_syntax(block: Block) -> None:
    if block.lang == "python":
        compile(block.text, block.id, "exec")
        return
    script = "\n".join(shell_commands(block)) + "\n"
    done = subprocess.run(["bash", "-n"], input=script, capture_output=True, text=True)
    assert done.returncode == 0, f"{block.id}: {done.stderr}"


def test_every_marker_sits_on_a_runnable_block():
    for doc in DOCS:
        lines = doc.read_text().splitlines()
        for k, line in enumerate(lines):
            if "docs-test" in line:
                assert MARKER.search(line), f"{doc.name}:{k + 1}: marker without reason=\"...\": {line}"
                nxt = next((x for x in lines[k + 1:] if x.strip()), "")
                lang = FENCE.match(nxt)
                assert lang and (lang.group(1) in SHELLS or lang.group(1) == "python"), \
                    f"{doc.name}:{k + 1}: the marker is not followed by a bash/console/python block"


@pytest.mark.parametrize("block", BLOCKS, ids=[b.id for b in BLOCKS])
def test_doc_block(block: Block, workdir: Path, monkeypatch):
    check_syntax(block)
    if block.skip is not None:
        return
    if block.lang == "python":
        monkeypatch.chdir(workdir)
        monkeypatch.syspath_prepend(str(ROOT))
        exec(compile(block.text, block.id, "exec"), {"__name__": "__docs__"})  # noqa: S102 - the docs' own code
        return
    for command in shell_commands(block):
        if not runnable(command):
            continue
        done = run_command(command, workdir)
        assert done.returncode == 0, (f"{block.id}: `{command}` exited {done.returncode}\n"
                                      f"{(done.stderr or done.stdout)[-2000:]}")
        if block.doc.name == "README.md":
            assert_no_failed_check(block, command, workdir)


def assert_no_failed_check(block: Block, command: str, workdir: Path) -> None:
    """The README's examples are what a newcomer runs first: a report they write must pass every check (an example
    that gives the wrong GPU count exits 0 yet prints FAILED checks and doubled TFLOP/s)."""
    argv = shlex.split(command, comments=True)
    if argv[:2] != ["vlm-perf", "report"] or "-o" not in argv:
        return
    summary = workdir / argv[argv.index("-o") + 1] / "summary.json"
    failed = json.loads(summary.read_text())["checks_failed"]
    assert not failed, f"{block.id}: `{command}` writes a report with FAILED checks: {failed}"
