"""A missing optional extra is named with the command that installs it where vlm-perf runs: the generic
``pip install 'vlm-perf[EXTRA]'`` for an installed package, and in a clone (what ``python3 dev.py`` sets up) this
environment's pip, the clone as an editable install and the verified lock, the way dev.py installs it."""

from __future__ import annotations

import sys
from pathlib import Path

from vlm_perf.extras import checkout_root, install_hint

ROOT = Path(__file__).resolve().parents[1]


def _venv(tmp_path: Path) -> Path:
    """A clone at tmp_path/clone with .venv/bin/{python,pip} (empty files: only their paths matter)."""
    clone = tmp_path / "clone"
    (clone / ".venv" / "bin").mkdir(parents=True)
    for name in ("python", "pip"):
        (clone / ".venv" / "bin" / name).touch()
    return clone


def test_this_repository_is_a_checkout():
    assert checkout_root() == ROOT


def test_an_installed_package_gets_the_generic_command(monkeypatch, tmp_path):
    import vlm_perf.extras as extras

    monkeypatch.setattr(extras, "ROOT", tmp_path)  # site-packages: no pyproject.toml, dev.py or lock beside it
    monkeypatch.setattr(extras, "LOCK", tmp_path / "requirements" / "verified.txt")
    assert checkout_root() is None
    assert install_hint("dask") == "pip install 'vlm-perf[dask]'"


def test_from_the_clone_root_the_command_is_the_one_dev_py_would_run(tmp_path):
    clone = _venv(tmp_path)
    hint = install_hint("dask", root=clone, python=str(clone / ".venv" / "bin" / "python"), cwd=clone)
    assert hint == ("pip install 'vlm-perf[dask]' (in this checkout: .venv/bin/pip install -e '.[dask]' "
                    "--constraint requirements/verified.txt)")
    assert "\n" not in hint


def test_from_elsewhere_the_paths_are_absolute(tmp_path):
    clone = _venv(tmp_path)
    elsewhere = tmp_path / "runs"
    elsewhere.mkdir()
    hint = install_hint("tensorboard", root=clone, python=str(clone / ".venv" / "bin" / "python"), cwd=elsewhere)
    assert hint.endswith(f"(in this checkout: {clone}/.venv/bin/pip install -e '{clone}[tensorboard]' "
                         f"--constraint {clone}/requirements/verified.txt)")


def test_without_a_pip_script_it_is_this_interpreters_pip_module(tmp_path):
    clone = _venv(tmp_path)
    (clone / ".venv" / "bin" / "pip").unlink()
    hint = install_hint("remote", root=clone, python=str(clone / ".venv" / "bin" / "python"), cwd=clone)
    assert "(in this checkout: .venv/bin/python -m pip install -e '.[remote]' --constraint" in hint


def test_the_default_is_this_interpreter_and_this_clone():
    hint = install_hint("dask", cwd=ROOT)
    assert hint.startswith("pip install 'vlm-perf[dask]' (in this checkout: ")
    assert "install -e '.[dask]' --constraint requirements/verified.txt)" in hint
    assert str(Path(sys.executable).parent) in hint or ".venv" in hint  # the pip of the environment that runs
