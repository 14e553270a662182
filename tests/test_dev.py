"""The quick start ends with a working vlm-perf: what ``python3 dev.py`` installs, what it tells a new user at the end,
how it starts JupyterLab (as root in a container too), and the README saying the same. No installs here: dev.py's
functions are called on paths, and the extras are read from pyproject.toml."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    tomllib = pytest.importorskip("tomli")


def _dev():
    spec = importlib.util.spec_from_file_location("_vlm_perf_dev_script", ROOT / "dev.py")
    dev = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(dev)
    return dev


dev = _dev()
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def _name(requirement: str) -> str:
    return dev.normalise(re.match(r"[A-Za-z0-9][A-Za-z0-9._-]*", requirement).group(0))


def _requirements(extra: str | None) -> set[str]:
    """The package names ``pip install '.[extra]'`` asks for (the base with it), extras of vlm-perf expanded."""
    out: set[str] = set()
    todo = [PROJECT["dependencies"]] + ([PROJECT["optional-dependencies"][extra]] if extra else [])
    while todo:
        for req in todo.pop():
            m = re.fullmatch(r"vlm-perf\[([^\]]+)\]", req.replace(" ", ""))
            if m:
                todo += [PROJECT["optional-dependencies"][e] for e in m.group(1).split(",")]
            else:
                out.add(_name(req))
    return out


# ---- where the command is -------------------------------------------------------------------------------------
def test_main_ends_by_saying_how_to_call_vlm_perf(monkeypatch):
    monkeypatch.chdir(ROOT)
    line = dev.where_vlm_perf(dev.LOCKED)
    assert "\n" not in line
    assert "`.venv/bin/vlm-perf --help`" in line and "`source .venv/bin/activate`" in line


def test_from_another_directory_the_paths_are_absolute(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    line = dev.where_vlm_perf(dev.LOCKED)
    assert f"{ROOT}/.venv/bin/vlm-perf" in line and f"source {ROOT}/.venv/bin/activate" in line


def test_the_readme_says_how_to_call_vlm_perf_after_dev_py_main():
    quick = README.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    assert ".venv/bin/vlm-perf" in quick and "source .venv/bin/activate" in quick


# ---- JupyterLab -------------------------------------------------------------------------------------------------
def test_lab_opens_the_notebooks_and_adds_allow_root_only_for_root():
    jupyter = str(dev.LOCKED.bin / "jupyter")
    assert dev.lab_command(dev.LOCKED, [], uid=1000) == [jupyter, "lab", "notebooks/"]
    assert dev.lab_command(dev.LOCKED, [], uid=0) == [jupyter, "lab", "notebooks/", "--allow-root"]
    assert dev.lab_command(dev.LOCKED, [], uid=None) == [jupyter, "lab", "notebooks/"]  # Windows: no uid


def test_lab_passes_options_and_a_path_through():
    jupyter = str(dev.LOCKED.bin / "jupyter")
    assert dev.lab_command(dev.LOCKED, ["--no-browser", "--ip", "0.0.0.0"], uid=0)[2:] == \
        ["--no-browser", "--ip", "0.0.0.0", "notebooks/", "--allow-root"]  # `0.0.0.0` is an option's value, not a path
    assert dev.lab_command(dev.LOCKED, ["--allow-root", "notebooks/01-quickstart.ipynb"], uid=0) == \
        [jupyter, "lab", "--allow-root", "notebooks/01-quickstart.ipynb"]


def test_every_readme_that_starts_jupyterlab_starts_it_through_dev_py_lab():
    for doc in (ROOT / "README.md", ROOT / "notebooks" / "README.md"):
        text = doc.read_text()
        assert "python3 dev.py lab" in text, doc
        assert not re.search(r"(?:^|`|\$ )(?:\S*/)?jupyter lab\b(?![^`\n]*--allow-root)", text, re.M), \
            f"{doc.name}: a `jupyter lab` line that exits at once as root (containers); use `python3 dev.py lab`"


# ---- what each command installs -------------------------------------------------------------------------------
def test_the_cli_installs_no_notebook_stack():
    base = _requirements(None)
    assert not base & {"jupyterlab", "jupytext", "ipywidgets", "notebook", "ipykernel"}, base


def test_the_test_extra_runs_the_notebooks():
    assert {"jupyterlab", "jupytext", "ipywidgets", "nbclient", "ipykernel"} <= _requirements("test")
    assert {"jupyterlab", "jupytext", "ipywidgets"} <= _requirements("notebooks")


@pytest.mark.parametrize("extra", [None, "notebooks", "test"])
def test_what_dev_py_installs_is_pinned_in_the_verified_lock(extra):
    """dev.py installs the base (main), the notebooks extra (lab) and the test extra (test) with the lock as
    constraints: a package it asks for that the lock does not pin would be whatever is newest that day."""
    pins = dev.parse_pins((ROOT / "requirements" / "verified.txt").read_text())
    missing = sorted(_requirements(extra) - set(pins))
    assert not missing, f"not pinned in requirements/verified.txt: {missing} (python3 dev.py test --latest, then lock)"


# ---- the base install is enough for the command-line tool ------------------------------------------------------
#: packages the test environment has that the base install (`python3 dev.py main`) does not bring: the notebook stack
#: and what only it pulled in (click too: typer >= 0.20 vendors its own and depends on none)
NOT_IN_BASE = ("click", "IPython", "ipykernel", "ipywidgets", "jupyter_client", "jupyter_core", "jupyter_server",
               "jupyterlab", "jupytext", "nbformat", "nbclient", "notebook", "tornado", "traitlets", "requests")


def _cli_without_extras(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    """``vlm-perf ARGS`` in a fresh interpreter where importing any of NOT_IN_BASE fails, as in a base install."""
    code = ("import sys\n"
            f"for name in {NOT_IN_BASE!r}:\n"
            "    sys.modules[name] = None  # import -> ImportError\n"
            "from vlm_perf.cli import main\n"
            f"main({list(args)!r})\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, "-c", code], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def test_the_cli_starts_without_the_notebook_stack(tmp_path):
    for args in (["--version"], ["report", "--help"]):
        done = _cli_without_extras(*args, cwd=tmp_path)
        assert done.returncode == 0, done.stderr[-2000:]


@pytest.mark.slow  # one end-to-end report in a fresh interpreter
def test_dev_py_main_report_runs_without_the_notebook_stack(tmp_path):
    done = _cli_without_extras("report", str(ROOT / dev.SAMPLE), "-o", str(tmp_path / "out"), cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert (tmp_path / "out" / "report.html").is_file()
