"""The command that installs an optional extra, spelled for the installation that is running.

A message about a missing extra ends with :func:`install_hint`: ``pip install 'vlm-perf[EXTRA]'`` for an installed
package, and, when vlm-perf runs from a clone of its repository (the editable install ``python3 dev.py`` makes), the
command that works there: this interpreter's pip, the clone as an editable install, and the verified lock
(``requirements/verified.txt``) as constraints, the way ``dev.py`` installs. Imports nothing of vlm-perf, so every
layer may use it.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LOCK = ROOT / "requirements" / "verified.txt"


def _shown(path: Path, cwd: Path) -> str:
    """``path`` relative to ``cwd`` when it lies inside it (``.`` for ``cwd`` itself), else absolute."""
    try:
        rel = path.relative_to(cwd)
    except ValueError:
        return str(path)
    return str(rel) if str(rel) != "." else "."


def _program(path: Path, cwd: Path) -> str:
    """An executable as typed: a bare name in the working directory gets ``./`` (else the shell searches PATH)."""
    shown = _shown(path.absolute(), cwd)
    return shown if os.sep in shown else f".{os.sep}{shown}"


def checkout_root() -> Path | None:
    """The repository clone this vlm-perf runs from (its ``pyproject.toml``, ``dev.py`` and lock beside the package),
    or None for an installed package (site-packages holds none of them)."""
    if (ROOT / "pyproject.toml").is_file() and (ROOT / "dev.py").is_file() and LOCK.is_file():
        return ROOT
    return None


def install_hint(extra: str, *, root: Path | None = None, python: str | None = None, cwd: Path | None = None) -> str:
    """One line: how to install ``extra`` (keyword arguments: for tests; by default this clone, interpreter and
    working directory)."""
    generic = f"pip install 'vlm-perf[{extra}]'"
    root = root if root is not None else checkout_root()
    if root is None:
        return generic
    cwd = (cwd or Path.cwd()).resolve()
    interpreter = Path(python or sys.executable)  # not resolved: a venv's python is a link to the base interpreter
    pip = interpreter.with_name("pip.exe" if os.name == "nt" else "pip")
    command = _program(pip, cwd) if pip.exists() else f"{_program(interpreter, cwd)} -m pip"
    lock = _shown(root / "requirements" / "verified.txt", cwd)
    return f"{generic} (in this checkout: {command} install -e '{_shown(root, cwd)}[{extra}]' --constraint {lock})"
