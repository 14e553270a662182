"""Import every module of a package, so a module that registers something (a family, a convention, a log
format) registers by existing: adding one touches that module and its tests, not an import list."""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Iterable


def import_submodules(package: str, path: Iterable[str]) -> None:
    """Import ``package``'s direct submodules (``path``: the package's ``__path__``), in name order."""
    for module in sorted(m.name for m in pkgutil.iter_modules(list(path))):
        importlib.import_module(f"{package}.{module}")
