"""Read a PEFT ``adapter_config.json`` (a file, a checkpoint folder, or a run folder that contains one).

``read_adapter_config(path)`` returns a :class:`vlm_perf.arch.adapters.AdapterConfig`; bad JSON or fields are an
:class:`~vlm_perf.errors.InputError` / ``ConfigError`` naming the file. ``find_adapter_config(run_dir)`` looks for
the newest ``adapter_config.json`` in a run folder (the folder itself, then ``checkpoint-*`` folders, then any
depth up to three), so a report can pick it up without flags.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from ..arch.adapters import AdapterConfig, adapter_from_dict
from ..errors import ConfigError, InputError

FILENAME = "adapter_config.json"


def read_adapter_config(path: str | Path, quantized_base: bool = False) -> AdapterConfig:
    """The adapter config at ``path``: an ``adapter_config.json`` or a folder holding one."""
    p = Path(path)
    if p.is_dir():
        if not (p / FILENAME).is_file():
            found = find_adapter_config(p)
            if found is None:
                raise InputError(f"no {FILENAME} in this folder or its checkpoint folders", str(p))
            p = found
        else:
            p = p / FILENAME
    if not p.is_file():
        raise InputError("adapter config not found", str(p))
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"cannot read: {exc}", str(p)) from None
    except json.JSONDecodeError as exc:
        raise InputError(f"not JSON: {exc.msg}", f"{p}:{exc.lineno}") from None
    if not isinstance(data, dict):
        raise InputError("an adapter config must be a JSON object", str(p))
    try:
        return adapter_from_dict(data, source=str(p), quantized_base=quantized_base)
    except ConfigError:
        raise
    except (TypeError, ValueError) as exc:
        raise InputError(f"bad adapter config: {exc}", str(p)) from None


def _step(path: Path) -> int:
    m = re.search(r"checkpoint-(\d+)", str(path))
    return int(m.group(1)) if m else -1


def find_adapter_config(run_dir: str | Path) -> Path | None:
    """The adapter config of a run folder: its own, else the latest ``checkpoint-N``'s, else the shallowest one
    found up to three levels down; ``None`` when there is none."""
    root = Path(run_dir)
    if (root / FILENAME).is_file():
        return root / FILENAME
    found = [p for depth in ("*/", "*/*/", "*/*/*/") for p in root.glob(depth + FILENAME)]
    if not found:
        return None
    checkpoints = [p for p in found if _step(p) >= 0]
    if checkpoints:
        return max(checkpoints, key=_step)
    return min(found, key=lambda p: (len(p.parts), str(p)))
