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

Every pattern (a string ``target_modules`` / ``exclude_modules``, each ``modules_to_save`` / ``layers_pattern``
entry, each ``rank_pattern`` / ``alpha_pattern`` key) is compiled once when the config is built, by
`vlm_perf.arch.user_regex.compile_user_regex`: an invalid regex, or one outside its bound on match time, is a
one-line `ConfigError` naming the file and the field.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any, Mapping

from ..errors import ConfigError
from .user_regex import compile_user_regex, fullmatch, match
from .validate import MAX_SIZE, bounded

ALL_LINEAR = "all-linear"
_UNSET = object()
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
    #: every user pattern compiled once (`_compile_patterns`): field -> compiled regex
    _patterns: dict = field(default_factory=dict, init=False, repr=False, compare=False)

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
        self._compile_patterns()

    def _compile_patterns(self) -> None:
        """Compile every user pattern once, each within `vlm_perf.arch.user_regex`'s bound; the forms PEFT builds
        around an entry (``(^|.*\\.)ENTRY($|\\..*)`` ...) add at most two unbounded repetitions."""
        def user(pattern: str, name: str) -> str:
            compile_user_regex(pattern, self.source, name)  # refused here, with the file and field, if bad
            return pattern

        compiled = self._patterns
        if isinstance(self.target_modules, str) and self.target_modules != ALL_LINEAR:
            compiled["target_modules"] = compile_user_regex(self.target_modules, self.source, "target_modules")
        if isinstance(self.exclude_modules, str):
            compiled["exclude_modules"] = compile_user_regex(self.exclude_modules, self.source, "exclude_modules")
        compiled["modules_to_save"] = [re.compile(rf"(^|.*\.){user(m, f'modules_to_save[{i}]')}($|\..*)")
                                       for i, m in enumerate(self.modules_to_save)]
        compiled["layers_pattern"] = [re.compile(rf"(?:^|.*?\.){user(pat, f'layers_pattern[{i}]')}\.(\d+)\.")
                                      for i, pat in enumerate(self.layers_pattern)]
        compiled["rank_pattern"] = [(re.compile(rf"(.*\.)?({user(key, f'rank_pattern key {key!r}')})$"), int(rank))
                                    for key, rank in self.rank_pattern.items()]
        for key in self.alpha_pattern:
            user(key, f"alpha_pattern key {key!r}")

    # ------------------------------------------------------------------ matching
    def saves(self, name: str) -> bool:
        """``name`` lies inside a ``modules_to_save`` module (trained in full through PEFT's copy)."""
        return any(match(m, name) for m in self._patterns["modules_to_save"])

    def _excluded(self, name: str) -> bool:
        ex = self.exclude_modules
        if not ex:
            return False
        if isinstance(ex, str):
            return fullmatch(self._patterns["exclude_modules"], name)
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
            return fullmatch(self._patterns["target_modules"], name)
        if not any(name == t or name.endswith("." + t) for t in tm):
            return False
        if self.layers_to_transform is None or (isinstance(tm, str)) or name in tm:
            return True
        index = layer_index(name, self._patterns["layers_pattern"])
        return index is not None and index in self.layers_to_transform

    def targets_parameter(self, key: str) -> bool:
        """Whether PEFT would wrap the parameter ``key`` (``<module name>.<parameter name>``)."""
        return any(key == t or key.endswith("." + t) for t in self.target_parameters)

    def rank(self, name: str) -> int:
        for pattern, rank in self._patterns["rank_pattern"]:
            if match(pattern, name):
                return rank
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


def layer_index(name: str, layers_pattern: "tuple[str, ...] | list[re.Pattern]" = ()) -> int | None:
    """The layer index PEFT reads from a module name for ``layers_to_transform`` (see the module docstring);
    ``layers_pattern``: the patterns' names, or their compiled forms (`AdapterConfig._compile_patterns`)."""
    if not layers_pattern:
        m = re.match(r".*?\.[^.]*\.(\d+)\.", name)
    else:
        m = None
        for pattern in layers_pattern:
            if isinstance(pattern, str):
                pattern = re.compile(rf"(?:^|.*?\.){compile_user_regex(pattern, '', 'layers_pattern').pattern}\.(\d+)\.")
            m = pattern.match(name) if len(name) <= 500 else None
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

    def number(key: str, default: Any, kind: type, value: Any = _UNSET) -> Any:
        value = data.get(key, default) if value is _UNSET else value
        if value is None and default is not None:
            return default
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"{where}field {key} must be a number, got {bounded(value)}")
        if not math.isfinite(value) or abs(value) > MAX_SIZE:  # a rank or scale of 2^24 is already no adapter
            raise ConfigError(f"{where}field {key} is {bounded(value)}; give a finite number of at most {MAX_SIZE}")
        if kind is int and value != int(value):
            raise ConfigError(f"{where}field {key} must be a whole number, got {value!r}")
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
        rank_pattern={str(k): number(f"rank_pattern[{k!r}]", None, int, v)
                      for k, v in (data.get("rank_pattern") or {}).items()},
        alpha_pattern={str(k): number(f"alpha_pattern[{k!r}]", None, float, v)
                       for k, v in (data.get("alpha_pattern") or {}).items()},
        quantized_base=quantized_base, source=source)
