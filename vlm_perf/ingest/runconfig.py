"""Run configuration: merge what the log states, an optional manifest and CLI overrides.

Precedence (``docs/run-config.md``): **CLI override > manifest (run.yaml / run.json) > log**.
A value stated differently by two sources is still resolved by that precedence, but the
disagreement is recorded in ``RunConfig.conflicts`` (each entry names every source and its value)
so a report can show it; nothing is silently dropped.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, Mapping

from ..remote import as_path
from ..arch.parts import PART_ALIASES
from ..arch.validate import bounded
from ..errors import ConfigError, InputError, SchemaError
from .textcodec import decode_text

__all__ = ["MANIFEST_KEYS", "MANIFEST_NAMES", "RunConfig", "find_manifest", "image_grid_from_size", "load_manifest",
           "resolve_run_config"]

MANIFEST_NAMES = ("run.yaml", "run.yml", "run.json")
MANIFEST_KEYS = ("model", "num_gpus", "gpu", "dtype", "frozen", "log_interval", "seq_length", "image_grid",
                 "image_size", "images_per_sample", "global_batch_size", "micro_batch_size", "synthetic", "generator",
                 "seed", "notes", "recompute_granularity", "recompute_method", "recompute_num_layers",
                 "gradient_checkpointing", "trainable", "adapter", "qlora")
FROZEN_PARTS = tuple(PART_ALIASES)  # one vocabulary with the FLOPs library (vlm_perf.arch.parts)

# log parser keys (ParseResult.run_config) that map onto RunConfig fields
_LOG_KEYS = {
    "num_gpus": "num_gpus", "world_size": "num_gpus",
    "seq_length": "seq_length", "micro_batch_size": "micro_batch_size", "global_batch_size": "global_batch_size",
    "tensor_model_parallel_size": "tensor_parallel", "pipeline_model_parallel_size": "pipeline_parallel",
    "context_parallel_size": "context_parallel", "expert_model_parallel_size": "expert_parallel",
    "data_parallel_size": "data_parallel", "log_interval": "log_interval", "dtype": "dtype", "model": "model",
    "gpu": "gpu",
    "recompute_granularity": "recompute_granularity", "recompute_method": "recompute_method",
    "recompute_num_layers": "recompute_num_layers", "gradient_checkpointing": "gradient_checkpointing",
}
_INT_FIELDS = ("num_gpus", "seq_length", "micro_batch_size", "global_batch_size", "tensor_parallel",
               "pipeline_parallel", "context_parallel", "expert_parallel", "data_parallel", "log_interval",
               "images_per_sample", "recompute_num_layers")


@dataclass
class RunConfig:
    """The resolved run configuration. ``sources`` says where each set field came from."""

    model: str | None = None  # preset name or config path (manifest-relative paths made absolute)
    num_gpus: int | None = None
    gpu: str | None = None
    dtype: str | None = None
    frozen: tuple[str, ...] = ()  # parts, or selectors PART[SLICE][.KIND+KIND] (vlm_perf.arch.trainability)
    trainable: tuple[str, ...] = ()  # selectors that train (default: everything; with an adapter: nothing of the base)
    adapter: str | None = None  # adapter_config.json or a PEFT checkpoint folder (manifest-relative made absolute)
    qlora: bool | None = None  # the adapter's base is quantised (QLoRA)
    log_interval: int | None = None
    seq_length: int | None = None
    micro_batch_size: int | None = None
    global_batch_size: int | None = None
    tensor_parallel: int | None = None
    pipeline_parallel: int | None = None
    context_parallel: int | None = None
    expert_parallel: int | None = None
    data_parallel: int | None = None
    image_grid: tuple[int, int, int] | None = None  # [t, h, w] patches of each sample's image (estimates)
    image_size: tuple[int, int] | None = None  # [height, width] pixels of each sample's image (estimates)
    images_per_sample: int | None = None  # images per sample for estimates (default 1 when a grid/size is set)
    synthetic: bool | None = None
    generator: str | None = None  # provenance of synthetic runs (e.g. vlm_perf.synth)
    seed: int | None = None
    notes: str | None = None
    # activation recompute as Megatron (granularity full|selective, method uniform|block, num_layers) or
    # HF (gradient_checkpointing) state it; vlm_perf.analysis.hfu turns them into a rule
    recompute_granularity: str | None = None
    recompute_method: str | None = None
    recompute_num_layers: int | None = None
    gradient_checkpointing: bool | None = None
    manifest_path: str | None = None
    sources: dict[str, str] = field(default_factory=dict)  # field -> "cli" | "manifest" | "log"
    conflicts: list[dict[str, Any]] = field(default_factory=list)  # {"field", "used", "values": {source: v}}
    unused_log_keys: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["frozen"] = list(self.frozen)
        out["trainable"] = list(self.trainable)
        out["image_grid"] = list(self.image_grid) if self.image_grid else None
        out["image_size"] = list(self.image_size) if self.image_size else None
        return out

    def conflict_messages(self) -> list[str]:
        return [f"{c['field']}: " + ", ".join(f"{src} says {val!r}" for src, val in c["values"].items())
                + f" (using {c['used']})" for c in self.conflicts]


# ------------------------------------------------------------------------------------------------
def find_manifest(run_dir_or_log: str | Path) -> Path | None:
    """``run.yaml`` / ``run.yml`` / ``run.json`` in the directory (or next to the log file)."""
    path = as_path(run_dir_or_log)
    folder = path if path.is_dir() else path.parent
    found = [folder / name for name in MANIFEST_NAMES if (folder / name).is_file()]
    for name in MANIFEST_NAMES:  # a directory, FIFO, socket or dangling link under a manifest's name: said
        candidate = folder / name
        if not candidate.is_file() and (candidate.exists() or candidate.is_symlink()):
            raise InputError(f"is {_kind_of(candidate)}, not a file: a manifest is a YAML/JSON file (rename or remove "
                             "it)", str(candidate))
    if len(found) > 1:
        raise InputError(f"several manifests ({', '.join(p.name for p in found)}); keep one", str(folder))
    return found[0] if found else None


def _kind_of(path: Path) -> str:
    import stat

    try:
        mode = path.stat().st_mode
    except OSError:
        return "a link to nothing"
    return ("a directory" if stat.S_ISDIR(mode) else "a FIFO (named pipe)" if stat.S_ISFIFO(mode)
            else "a socket" if stat.S_ISSOCK(mode) else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode)
            else "not a regular file")


def load_manifest(path: str | Path) -> dict[str, Any]:
    """Read and validate a manifest; ``model`` paths are resolved relative to the manifest.

    YAML is read with `_read_yaml` (duplicate keys refused with their line, alias expansion and nesting
    bounded), JSON with the config reader's limits (size, NaN/Infinity, nesting) and duplicate keys refused;
    every error is one `SchemaError` line naming the file that prints bounded values only."""
    path = as_path(path)
    if not path.is_file() and (path.exists() or path.is_symlink()):  # never opened: a FIFO's read would block
        raise SchemaError(f"is {_kind_of(path)}, not a file: a manifest is a YAML/JSON file", str(path))
    if path.suffix == ".json":
        data = _read_json_manifest(path)
    else:
        data = _read_yaml(path)
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise SchemaError("a manifest must be a mapping of keys to values", str(path))
    for key in data:
        if key not in MANIFEST_KEYS:
            raise SchemaError(f"unknown manifest key {bounded(key)} (known: {', '.join(MANIFEST_KEYS)})", str(path))
    out = {k: v for k, v in data.items() if v is not None}
    try:
        out = _normalise(out)
    except ValueError as exc:
        raise SchemaError(str(exc), str(path)) from None
    model = out.get("model")
    if model is not None:
        candidate = (path.parent / model)
        looks_like_path = "/" in model or model.endswith((".json", ".yaml", ".yml")) or candidate.exists()
        if looks_like_path and not as_path(model).is_absolute():
            out["model"] = str(candidate.resolve())
    if out.get("adapter") is not None and not as_path(out["adapter"]).is_absolute():
        out["adapter"] = str((path.parent / out["adapter"]).resolve())
    return out


#: Largest manifest read, and the most nodes its YAML may expand to through aliases (a manifest has a
#: few dozen; an "alias bomb" of 1.2 KB expands to billions).
MAX_MANIFEST_BYTES = 1 << 20
MAX_YAML_NODES = 10_000


def _read_json_manifest(path: Path) -> Any:
    from ..arch.validate import read_json_file

    if not path.read_bytes().strip():
        return {}
    try:
        return read_json_file(path, "manifest")  # size, NaN/Infinity, nesting and duplicate-key limits
    except (InputError, ConfigError) as exc:
        raise _as_schema_error(exc, path) from None


def _as_schema_error(exc: Exception, path: Path) -> SchemaError:
    """The same one line as a SchemaError, its ``path[:line]`` prefix kept once."""
    message = str(exc)
    source = getattr(exc, "source", None) or str(path)
    for prefix in (f"{source}: ", f"{path}: "):
        message = message.removeprefix(prefix)
    return SchemaError(message, source)


def _read_yaml(path: Path) -> Any:
    """Safe YAML with duplicate keys refused (key and line named), alias expansion bounded by
    `MAX_YAML_NODES` and nesting by the config limit; non-finite floats refused like in JSON."""
    import yaml

    from ..arch.validate import MAX_DEPTH, check_tree

    if path.stat().st_size > MAX_MANIFEST_BYTES:
        raise SchemaError(f"larger than {MAX_MANIFEST_BYTES} bytes; a manifest is a short list of keys", str(path))
    try:
        text = decode_text(path.read_bytes(), str(path))  # UTF-16 / UTF-32 by their BOM, else strict UTF-8
    except InputError as exc:
        raise _as_schema_error(exc, path) from None
    loader = yaml.SafeLoader(text)
    try:
        try:
            node = loader.get_single_node()
        except RecursionError:
            raise SchemaError(f"nested deeper than {MAX_DEPTH} levels; a manifest is a flat mapping", str(path)) from None
        except yaml.YAMLError as exc:
            raise SchemaError(f"cannot parse manifest: {str(exc).splitlines()[0]}", str(path)) from None
        if node is None:
            return None
        _check_nodes(node, path)
        try:
            data = loader.construct_document(node)
        except yaml.YAMLError as exc:
            raise SchemaError(f"cannot parse manifest: {str(exc).splitlines()[0]}", str(path)) from None
    finally:
        loader.dispose()
    try:
        check_tree(data, str(path))
    except ValueError as exc:
        raise _as_schema_error(exc, path) from None
    return data


def _check_nodes(root: Any, path: Path) -> None:
    """Walk the composed YAML graph once per node (shared through aliases): count the nodes the document
    expands to, refuse a cycle, nesting deeper than MAX_DEPTH and duplicate mapping keys (line named)."""
    import yaml

    from ..arch.validate import MAX_DEPTH

    expanded: dict[int, int] = {}  # node id -> nodes it expands to (itself included)
    stack: list[tuple[Any, int, bool]] = [(root, 0, False)]
    active: set[int] = set()
    while stack:
        node, depth, done = stack.pop()
        key = id(node)
        if done:
            active.discard(key)
            children = _children(node)
            expanded[key] = 1 + sum(expanded[id(c)] for c in children)
            if expanded[key] > MAX_YAML_NODES:
                raise SchemaError(f"the YAML expands to more than {MAX_YAML_NODES} values through aliases "
                                  f"(line {node.start_mark.line + 1}); write the values out", str(path))
            continue
        if key in expanded:
            continue
        if key in active:
            raise SchemaError(f"line {node.start_mark.line + 1}: an alias refers to itself", str(path))
        if depth > MAX_DEPTH:
            raise SchemaError(f"line {node.start_mark.line + 1}: nested deeper than {MAX_DEPTH} levels", str(path))
        if isinstance(node, yaml.MappingNode):
            seen: dict[Any, int] = {}
            for k, _ in node.value:
                if isinstance(k, yaml.ScalarNode):
                    name = (k.tag, k.value)
                    if name in seen:
                        raise SchemaError(f"line {k.start_mark.line + 1}: duplicate key {bounded(k.value)} (first at "
                                          f"line {seen[name]}); state each key once", str(path))
                    seen[name] = k.start_mark.line + 1
        active.add(key)
        stack.append((node, depth, True))
        stack.extend((c, depth + 1, False) for c in _children(node) if id(c) not in expanded)


def _children(node: Any) -> list:
    import yaml

    if isinstance(node, yaml.MappingNode):
        return [n for pair in node.value for n in pair]
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    return []


#: Upper bound of each integer key: far beyond any real run, small enough that every product the
#: analysis forms stays exact in Int64 / float64 (``log_interval: 1e20`` used to end in an overflow).
INT_MAX = {"num_gpus": 1 << 24, "tensor_parallel": 1 << 24, "pipeline_parallel": 1 << 24,
            "context_parallel": 1 << 24, "expert_parallel": 1 << 24, "data_parallel": 1 << 24,
            "seq_length": 1 << 26, "micro_batch_size": 1 << 24, "global_batch_size": 1 << 31,
            "log_interval": 1 << 31, "images_per_sample": 1 << 16, "recompute_num_layers": 1 << 16,
            "image_grid": 1 << 20, "image_size": 1 << 20}


def _int(value: Any, name: str) -> int:
    high = INT_MAX.get(name, 1 << 31)
    wanted = f"{name} must be a positive integer (at most {high}), got {bounded(value)}"
    if isinstance(value, bool):
        raise ConfigError(wanted)
    if isinstance(value, int):
        number: float = value
    else:
        try:
            number = float(str(value).strip()) if isinstance(value, str) else float(value)
        except (TypeError, ValueError, OverflowError):
            raise ConfigError(wanted) from None
    if not (isinstance(number, int) or (math.isfinite(number) and number.is_integer())) or not 0 < number <= high:
        raise ConfigError(wanted)
    return int(number)


def _normalise(values: Mapping[str, Any]) -> dict[str, Any]:
    """Type-check and canonicalise RunConfig field values (raises ValueError naming the key)."""
    out: dict[str, Any] = {}
    for key, value in values.items():
        if value is None:
            continue
        if key == "recompute_num_layers" and isinstance(value, str) and value.strip().lower() in ("none", "null"):
            continue  # Megatron prints "None" when recompute is off
        if key in _INT_FIELDS:
            out[key] = _int(value, key)
        elif key in ("frozen", "trainable"):
            parts = [value] if isinstance(value, str) else value
            if not isinstance(parts, (list, tuple)):
                raise ConfigError(f"{key} must be a list of parts ({', '.join(FROZEN_PARTS)}) or selectors "
                                  f"PART[SLICE][.KIND+KIND], got {bounded(value)}")
            out[key] = tuple(dict.fromkeys(_selector_text(p, key) for p in parts))
        elif key == "adapter":
            if not isinstance(value, str):
                raise ConfigError(f"adapter must be a path (adapter_config.json or a PEFT checkpoint folder), got "
                                  f"{bounded(value)}")
            out[key] = value
        elif key == "image_grid":
            grid = value.replace("x", ",").split(",") if isinstance(value, str) else value
            if not isinstance(grid, (list, tuple)) or len(grid) != 3:
                raise ConfigError(f"image_grid must be [t, h, w], got {bounded(value)}")
            out[key] = tuple(_int(v, "image_grid") for v in grid)
        elif key == "image_size":
            size = value.replace("x", ",").split(",") if isinstance(value, str) else value
            if not isinstance(size, (list, tuple)) or len(size) != 2:
                raise ConfigError(f"image_size must be [height, width] in pixels, got {bounded(value)}")
            out[key] = tuple(_int(v, "image_size") for v in size)
        elif key in ("recompute_granularity", "recompute_method"):
            if isinstance(value, (dict, list, tuple)):
                raise ConfigError(f"{key} must be a single value, got {bounded(value)}")
            out[key] = str(value).strip().lower()
        elif key in ("synthetic", "gradient_checkpointing", "qlora"):
            if isinstance(value, str) and value.lower() in ("true", "false", "yes", "no", "1", "0"):
                value = value.lower() in ("true", "yes", "1")
            if not isinstance(value, bool):
                raise ConfigError(f"{key} must be true or false, got {bounded(value)}")
            out[key] = value
        elif key == "seed":
            if isinstance(value, bool) or not isinstance(value, int) or not -(1 << 63) <= value < 1 << 63:
                raise ConfigError(f"seed must be an integer, got {bounded(value)}")
            out[key] = value
        elif key in ("model", "gpu", "dtype", "notes", "generator"):
            if isinstance(value, (dict, list, tuple)):
                raise ConfigError(f"{key} must be a single value, got {bounded(value)}")
            out[key] = str(value)
        else:
            raise ConfigError(f"unknown run configuration key {bounded(key)}")
    return out


def _selector_text(item: Any, key: str) -> str:
    """A part name canonicalised (``vit`` stays ``vit``: the alias is resolved where it is used), or a selector
    checked by the trainability grammar; a `ConfigError` naming ``key`` otherwise."""
    text = str(item).strip()
    plain = text.lower().replace("-", "_")
    if plain in FROZEN_PARTS:
        return plain
    if "[" not in text and "." not in text:  # a part name, not a selector
        raise ConfigError(f"{key}: unknown part(s) {bounded([text])} (known: {', '.join(FROZEN_PARTS)}; or a "
                          "selector PART[SLICE][.KIND+KIND])")
    from ..arch.trainability import parse_selector

    try:
        parse_selector(text)
    except ConfigError as exc:
        raise ConfigError(f"{key}: {exc} (parts: {', '.join(FROZEN_PARTS)})") from None
    return text


def _from_log(log_config: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any], list[dict[str, Any]]]:
    """Log-parser dict -> RunConfig fields (+ keys we do not use, + internal log disagreements)."""
    values: dict[str, Any] = {}
    unused: dict[str, Any] = {}
    conflicts: list[dict[str, Any]] = []
    seen_from: dict[str, str] = {}
    for key, value in log_config.items():
        target = _LOG_KEYS.get(key)
        if target is None or value is None:
            unused[key] = value
            continue
        try:
            value = _normalise({target: value})[target]
        except ValueError as exc:
            raise ConfigError(f"log run_config: {exc}") from None
        if target in values and values[target] != value:  # e.g. world_size vs num_gpus in the log
            conflicts.append({"field": target, "used": values[target],
                              "values": {f"log:{seen_from[target]}": values[target], f"log:{key}": value}})
            continue
        values[target] = value
        seen_from[target] = key
    return values, unused, conflicts


def resolve_run_config(log_config: Mapping[str, Any] | None = None, manifest_path: str | Path | None = None,
                       overrides: Mapping[str, Any] | None = None) -> RunConfig:
    """Merge ``log_config`` (the log parser's ``run_config`` dict), the manifest and ``overrides``.

    Precedence CLI (``overrides``) > manifest > log. Every field stated by two or more sources with
    different values is listed in ``conflicts`` with all source values. ``overrides`` use RunConfig
    field names (``None`` values are ignored, so unset CLI options can be passed straight through).
    """
    log_values, unused, conflicts = _from_log(log_config or {})
    manifest: dict[str, Any] = {}
    if manifest_path is not None:
        manifest = load_manifest(manifest_path)
    known = {f.name for f in fields(RunConfig)} - {"sources", "conflicts", "unused_log_keys", "manifest_path"}
    cli_raw = {k: v for k, v in (overrides or {}).items() if v is not None}
    for key in cli_raw:
        if key not in known:
            raise ConfigError(f"unknown override {bounded(key)} (known: {', '.join(sorted(known))})")
    try:
        cli = _normalise(cli_raw)
    except ValueError as exc:
        raise ConfigError(f"override {exc}") from None

    layers = (("cli", cli), ("manifest", manifest), ("log", log_values))
    cfg = RunConfig(manifest_path=str(manifest_path) if manifest_path is not None else None,
                    conflicts=conflicts, unused_log_keys=unused)
    for name in sorted(known):
        stated = [(src, vals[name]) for src, vals in layers if name in vals]
        if not stated:
            continue
        src, value = stated[0]
        setattr(cfg, name, value)
        cfg.sources[name] = src
        if len({_identity(name, v) for _, v in stated}) > 1:
            cfg.conflicts.append({"field": name, "used": src, "values": {s: v for s, v in stated}})
    _derive_world_size(cfg)
    _check_consistency(cfg)
    return cfg


def _identity(name: str, value: Any) -> str:
    """What makes two stated values of ``name`` the same value: a GPU by the device it names (``H100`` and
    ``H100-SXM`` are one device with one peak, so no conflict), anything else by its value."""
    if name == "gpu":
        from ..hardware import resolve_gpu

        try:
            return resolve_gpu(str(value))
        except ValueError:
            pass
    return repr(value)


def _derive_world_size(cfg: RunConfig) -> None:
    """No source states the GPU count, but the log gives every parallel size: dp x tp x pp x cp."""
    if cfg.num_gpus is None and cfg.data_parallel and cfg.tensor_parallel and cfg.pipeline_parallel:
        cfg.num_gpus = cfg.data_parallel * cfg.tensor_parallel * cfg.pipeline_parallel * (cfg.context_parallel or 1)
        cfg.sources["num_gpus"] = "derived:dp*tp*pp*cp"


def _check_consistency(cfg: RunConfig) -> None:
    """Derived disagreements: parallel sizes that do not multiply to the GPU count."""
    if cfg.num_gpus and cfg.tensor_parallel and cfg.pipeline_parallel and cfg.context_parallel is not None:
        model_parallel = cfg.tensor_parallel * cfg.pipeline_parallel * (cfg.context_parallel or 1)
        if cfg.num_gpus % model_parallel:
            cfg.conflicts.append({
                "field": "num_gpus", "used": cfg.sources.get("num_gpus"),
                "values": {cfg.sources.get("num_gpus", "?"): cfg.num_gpus,
                           "derived:tp*pp*cp": model_parallel},
                "note": "num_gpus is not a multiple of tensor x pipeline x context parallel sizes"})


def image_grid_from_size(height: int, width: int, patch_size: int, merge_size: int) -> tuple[int, int, int]:
    """``image_grid_thw`` of one still image of ``height`` x ``width`` pixels, as Qwen-VL processors build it.

    The processors resize each side to the nearest multiple of ``patch_size * merge_size`` (at least
    one such factor) and cut it into patches; a still image is one temporal patch (t = 1). The
    processors' min/max pixel limits are NOT applied: when an image would be resized by them,
    state the grid (``image_grid`` / ``--grid``) instead.
    """
    factor = patch_size * merge_size
    h = max(factor, round(height / factor) * factor)
    w = max(factor, round(width / factor) * factor)
    return 1, h // patch_size, w // patch_size
