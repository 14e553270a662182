"""LoRA-family adapter settings (PEFT ``adapter_config.json`` semantics) and which modules they touch (pure).

:class:`AdapterConfig` holds what the FLOPs depend on: the rank ``r`` (and per-module ``rank_pattern``),
``target_modules`` / ``exclude_modules`` (a list of names, a regex string, or ``"all-linear"``),
``layers_to_transform`` / ``layers_pattern``, ``modules_to_save``, ``use_dora``, ``lora_dropout`` and
``bias``. ``lora_alpha`` / ``alpha_pattern`` / ``use_rslora`` only scale the adapter's output (an
elementwise multiply, no matmul): they are kept for the description, never for FLOPs.

Matching restates PEFT's documented rules (``tuners_utils.check_target_module_exists``, ``get_pattern_key``;
see docs/training-regimes.md) against the model's real module names (``vlm_perf.arch.layout``):

* a string ``target_modules`` is a regex that must match the WHOLE module name;
* a list matches a name equal to an entry or ending in ``"." + entry``;
* ``layers_to_transform`` (list targets only) keeps a module whose layer index is listed; the index is the
  first number that sits between dots after a named segment (``...blocks.3.attn.qkv`` -> 3), or the one
  after ``layers_pattern``; a module without such an index is not adapted (a projector's ``mlp.0``);
* ``exclude_modules`` removes modules with the same rules, and no adapter is placed inside a
  ``modules_to_save`` module (that module is trained in full instead);
* ``rank_pattern``: the first key that the name ends with (on a dot boundary, the key itself a regex)
  gives that module's rank, else ``r``;
* ``"all-linear"``: every Linear except the output head (``lm_head``); convolutions are not Linears.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Mapping

from ..errors import ConfigError

ALL_LINEAR = "all-linear"
_BIAS = ("none", "all", "lora_only")


@dataclass(frozen=True)
class AdapterConfig:
    """A LoRA / DoRA adapter (PEFT field names). ``quantized_base``: the base weights are 4/8-bit (QLoRA): the
    matmul FLOPs are those of the dequantised weights; the dequantisation itself is not counted."""

    r: int = 8
    target_modules: tuple[str, ...] | str | None = None
    lora_alpha: float = 8
    lora_dropout: float = 0.0
    use_dora: bool = False
    use_rslora: bool = False
    bias: str = "none"
    exclude_modules: tuple[str, ...] | str | None = None
    modules_to_save: tuple[str, ...] = ()
    layers_to_transform: tuple[int, ...] | None = None
    layers_pattern: tuple[str, ...] = ()
    rank_pattern: Mapping[str, int] = field(default_factory=dict)
    alpha_pattern: Mapping[str, float] = field(default_factory=dict)
    quantized_base: bool = False
    source: str = ""
    # parameters adapted directly (PEFT ``target_parameters``: fused MoE expert stacks, a router weight): a
    # parameter key ``<module>.<param>`` equal to an entry or ending in ``"." + entry``
    target_parameters: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        where = f"{self.source}: " if self.source else ""
        if self.r <= 0:
            raise ConfigError(f"{where}adapter rank r must be > 0, got {self.r}")
        if self.bias not in _BIAS:
            raise ConfigError(f"{where}adapter bias must be one of {', '.join(_BIAS)}, got {self.bias!r}")
        if not 0 <= self.lora_dropout < 1:
            raise ConfigError(f"{where}lora_dropout must be in [0, 1), got {self.lora_dropout}")
        for key, rank in self.rank_pattern.items():
            if int(rank) <= 0:
                raise ConfigError(f"{where}rank_pattern[{key!r}] must be > 0, got {rank}")
        if self.target_modules is None and not self.target_parameters:
            raise ConfigError(f"{where}adapter config has neither target_modules nor target_parameters")
        if self.target_parameters and (self.use_dora or self.lora_dropout > 0):
            raise ConfigError(f"{where}target_parameters with {'use_dora' if self.use_dora else 'lora_dropout > 0'}: "
                              "PEFT's parameter wrapper supports neither")

    # ------------------------------------------------------------------ matching
    def saves(self, name: str) -> bool:
        """``name`` lies inside a ``modules_to_save`` module (trained in full through PEFT's copy)."""
        return any(re.match(rf"(^|.*\.){m}($|\..*)", name) for m in self.modules_to_save)

    def _excluded(self, name: str) -> bool:
        ex = self.exclude_modules
        if not ex:
            return False
        if isinstance(ex, str):
            return re.fullmatch(ex, name) is not None
        return any(name == e or name.endswith("." + e) for e in ex)

    def targets(self, name: str, is_linear: bool = True, is_head: bool = False) -> bool:
        """Whether PEFT would put an adapter on the module ``name``."""
        if self._excluded(name) or self.saves(name):
            return False
        tm = self.target_modules
        if tm is None:
            return False
        if tm == ALL_LINEAR:
            return is_linear and not is_head
        if isinstance(tm, str):
            return re.fullmatch(tm, name) is not None
        if not any(name == t or name.endswith("." + t) for t in tm):
            return False
        if self.layers_to_transform is None or (isinstance(tm, str)) or name in tm:
            return True
        index = layer_index(name, self.layers_pattern)
        return index is not None and index in self.layers_to_transform

    def targets_parameter(self, key: str) -> bool:
        """Whether PEFT would wrap the parameter ``key`` (``<module name>.<parameter name>``)."""
        return any(key == t or key.endswith("." + t) for t in self.target_parameters)

    def rank(self, name: str) -> int:
        for key, rank in self.rank_pattern.items():
            if re.match(rf"(.*\.)?({key})$", name):
                return int(rank)
        return self.r

    def describe(self) -> str:
        kind = "QLoRA" if self.quantized_base else "DoRA" if self.use_dora else "LoRA"
        ranks = f"r={self.r}" + (f" (rank_pattern: {len(self.rank_pattern)} keys)" if self.rank_pattern else "")
        return f"{kind} {ranks}"

    def as_dict(self) -> dict[str, Any]:
        tm = self.target_modules
        return {"r": self.r, "lora_alpha": self.lora_alpha, "lora_dropout": self.lora_dropout,
                "use_dora": self.use_dora, "use_rslora": self.use_rslora, "bias": self.bias,
                "target_modules": tm if isinstance(tm, str) or tm is None else list(tm),
                "exclude_modules": self.exclude_modules if not isinstance(self.exclude_modules, tuple)
                else list(self.exclude_modules),
                "modules_to_save": list(self.modules_to_save),
                "layers_to_transform": None if self.layers_to_transform is None else list(self.layers_to_transform),
                "layers_pattern": list(self.layers_pattern), "rank_pattern": dict(self.rank_pattern),
                "alpha_pattern": dict(self.alpha_pattern), "quantized_base": self.quantized_base,
                "target_parameters": list(self.target_parameters), "source": self.source}


def layer_index(name: str, layers_pattern: tuple[str, ...] = ()) -> int | None:
    """The layer index PEFT reads from a module name for ``layers_to_transform`` (see the module docstring)."""
    if not layers_pattern:
        m = re.match(r".*?\.[^.]*\.(\d+)\.", name)
    else:
        m = None
        for pattern in layers_pattern:
            m = re.match(rf"(?:^|.*?\.){pattern}\.(\d+)\.", name)
            if m:
                break
    return int(m.group(1)) if m else None


def _names(value: Any, key: str, where: str) -> tuple[str, ...] | str | None:
    if value is None:
        return None
    if isinstance(value, str):
        return value
    if isinstance(value, (list, tuple, set)) and all(isinstance(v, str) for v in value):
        return tuple(sorted(value)) if isinstance(value, set) else tuple(value)
    raise ConfigError(f"{where}{key} must be a string (regex) or a list of module names, got {value!r}")


def adapter_from_dict(data: Mapping[str, Any], source: str = "", quantized_base: bool = False) -> AdapterConfig:
    """An :class:`AdapterConfig` from the keys of a PEFT ``adapter_config.json`` (unknown keys ignored).

    Only LoRA-type adapters are modelled (``peft_type`` LORA, absent, or a LoRA variant flag); others are a
    ConfigError naming the type."""
    where = f"{source}: " if source else ""
    peft_type = str(data.get("peft_type") or "LORA").upper()
    if peft_type != "LORA":
        raise ConfigError(f"{where}peft_type {peft_type} is not modelled (only LORA, with use_dora for DoRA)")
    if data.get("layer_replication"):
        raise ConfigError(f"{where}layer_replication is not modelled")
    params = data.get("target_parameters") or ()
    if isinstance(params, str) or not all(isinstance(p, str) for p in params):
        raise ConfigError(f"{where}target_parameters must be a list of parameter names, got {params!r}")

    def number(key: str, default: Any, kind: type) -> Any:
        value = data.get(key, default)
        if value is None:
            return default
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"{where}{key} must be a number, got {value!r}")
        return kind(value)

    layers = data.get("layers_to_transform")
    if isinstance(layers, int) and not isinstance(layers, bool):
        layers = [layers]
    if layers is not None and (not isinstance(layers, list) or not all(isinstance(i, int) for i in layers)):
        raise ConfigError(f"{where}layers_to_transform must be an int or a list of ints, got {layers!r}")
    pattern = data.get("layers_pattern") or ()
    if isinstance(pattern, str):
        pattern = (pattern,)
    saves = data.get("modules_to_save") or ()
    if isinstance(saves, str):
        saves = (saves,)
    for key in ("rank_pattern", "alpha_pattern"):
        if not isinstance(data.get(key) or {}, dict):
            raise ConfigError(f"{where}{key} must be a mapping of module-name pattern to a number")
    return AdapterConfig(
        r=number("r", 8, int), lora_alpha=number("lora_alpha", 8, float),
        lora_dropout=number("lora_dropout", 0.0, float), use_dora=bool(data.get("use_dora") or False),
        use_rslora=bool(data.get("use_rslora") or False), bias=str(data.get("bias") or "none"),
        target_modules=_names(data.get("target_modules"), "target_modules", where),
        target_parameters=tuple(sorted(params)),
        exclude_modules=_names(data.get("exclude_modules"), "exclude_modules", where),
        modules_to_save=tuple(saves),
        layers_to_transform=None if not layers else tuple(layers), layers_pattern=tuple(pattern),
        rank_pattern={str(k): int(v) for k, v in (data.get("rank_pattern") or {}).items()},
        alpha_pattern={str(k): float(v) for k, v in (data.get("alpha_pattern") or {}).items()},
        quantized_base=quantized_base, source=source)
