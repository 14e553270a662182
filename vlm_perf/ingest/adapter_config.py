"""Read a PEFT ``adapter_config.json`` (a file, a checkpoint folder, or a run folder that contains one).

``read_adapter_config(path)`` returns a :class:`vlm_perf.arch.adapters.AdapterConfig`; bad JSON or fields are an
:class:`~vlm_perf.errors.InputError` / ``ConfigError`` naming the file. ``find_adapter_config(run_dir)`` looks for
the newest ``adapter_config.json`` in a run folder (the folder itself, then ``checkpoint-*`` folders, then any
depth up to three), so a report can pick it up without flags.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from ..remote import as_path
from ..arch.adapters import AdapterConfig, adapter_from_dict
from ..arch.validate import read_json_file
from ..errors import ConfigError, InputError

FILENAME = "adapter_config.json"
TRAINABILITY_FILE = "trainability.json"  # written by vlm_perf.capture_trainer.MetadataCallback


@dataclass(frozen=True)
class TrainabilityRecord:
    """What a run's callback observed: parameter names that required grad, the input hook, the adapter."""

    requires_grad: tuple[str, ...]
    input_require_grads: bool
    adapter: AdapterConfig | None
    source: str


def read_trainability_record(path: str | Path) -> TrainabilityRecord:
    """``trainability.json`` (or a folder holding it); errors name the file."""
    p = as_path(path)
    if p.is_dir():
        p = p / TRAINABILITY_FILE
    if not p.exists():
        raise InputError("trainability record not found", str(p))
    data = read_json_file(p, "trainability record")  # the shared limits: depth, size, NaN, duplicate keys
    if not isinstance(data, dict) or not isinstance(data.get("requires_grad"), list) \
            or not all(isinstance(n, str) for n in data["requires_grad"]):
        raise InputError("a trainability record needs a 'requires_grad' list of parameter names", str(p))
    adapter = data.get("adapter_config")
    if adapter is not None and not isinstance(adapter, dict):
        raise InputError("'adapter_config' must be an object", str(p))
    return TrainabilityRecord(tuple(data["requires_grad"]), bool(data.get("input_require_grads", False)),
                              adapter_from_dict(adapter, source=f"{p} adapter_config") if adapter else None, str(p))


def read_adapter_config(path: str | Path, quantized_base: bool = False) -> AdapterConfig:
    """The adapter config at ``path``: an ``adapter_config.json`` or a folder holding one."""
    p = as_path(path)
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
    data = read_json_file(p, "adapter config")  # the shared limits: depth, size, NaN / Infinity, duplicate keys
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
    root = as_path(run_dir)
    if (root / FILENAME).is_file():
        return root / FILENAME
    found = [p for depth in ("*/", "*/*/", "*/*/*/") for p in root.glob(depth + FILENAME)]
    if not found:
        return None
    checkpoints = [p for p in found if _step(p) >= 0]
    if checkpoints:
        return max(checkpoints, key=_step)
    return min(found, key=lambda p: (len(p.parts), str(p)))
