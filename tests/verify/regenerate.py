"""What "the script reproduces the bundled run" means: the same records and numbers, not the same bytes.

A library writes some of a run's files (transformers writes ``config.json`` and stamps its own version in it). The
regenerate tests compare what the run means — every JSON key, every metadata record, every run.yaml entry — with
the library's version stamps set aside, so a newer library that writes the same model passes and one that writes a
different model fails, naming the file and the first key that differs. Where the stamps agree (the locked stack,
requirements/verified.txt) the files must also be byte-identical; ``python3 dev.py test --latest`` is where a newer
library's difference shows up.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

# keys a library writes about itself, not about the model or the run
VERSION_STAMPS = frozenset({"transformers_version"})


def _strip(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _strip(v) for k, v in value.items() if k not in VERSION_STAMPS}
    if isinstance(value, list):
        return [_strip(v) for v in value]
    return value


def records(path: Path) -> Any:
    """The content of a run file: parsed JSON / JSON lines / YAML with version stamps removed."""
    text = path.read_text()
    if path.suffix == ".jsonl":
        return [_strip(json.loads(line)) for line in text.splitlines() if line.strip()]
    if path.suffix == ".json":
        return _strip(json.loads(text))
    if path.suffix in (".yaml", ".yml"):
        return _strip(yaml.safe_load(text))
    raise ValueError(f"no record reader for {path.name}")


def first_difference(new: Any, old: Any, where: str = "") -> str | None:
    """The path of the first place two parsed documents differ (None when equal)."""
    if isinstance(new, dict) and isinstance(old, dict):
        for key in sorted(set(new) | set(old)):
            if key not in new or key not in old:
                return f"{where}.{key} ({'missing in the new file' if key not in new else 'new key'})"
            found = first_difference(new[key], old[key], f"{where}.{key}")
            if found:
                return found
        return None
    if isinstance(new, list) and isinstance(old, list):
        if len(new) != len(old):
            return f"{where} ({len(new)} items, bundled {len(old)})"
        for i, (a, b) in enumerate(zip(new, old)):
            found = first_difference(a, b, f"{where}[{i}]")
            if found:
                return found
        return None
    return None if new == old else f"{where}: {new!r} != bundled {old!r}"


def _stamps(path: Path) -> list[str]:
    return sorted(line.strip() for line in path.read_text().splitlines() if any(k in line for k in VERSION_STAMPS))


def assert_same_records(new_run: Path, bundled_run: Path, names: tuple[str, ...]) -> None:
    for name in names:
        new, old = new_run / name, bundled_run / name
        diff = first_difference(records(new), records(old))
        assert diff is None, f"{name}{diff}"
        if _stamps(new) == _stamps(old):  # written by the same library versions: the same bytes
            assert new.read_bytes() == old.read_bytes(), f"{name}: same records and versions, other bytes"
