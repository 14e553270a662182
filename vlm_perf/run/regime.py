"""The training regime of a run: what trains, resolved once from every source that states it.

Sources, highest first (`vlm_perf.run.options`): **command line > run.yaml > files in the run folder**.

* stated (command line or run.yaml): ``trainable`` / ``frozen`` selectors (``PART[SLICE][.KIND+KIND]``, whole
  parts as before), ``adapter`` (an ``adapter_config.json`` or a PEFT checkpoint folder), ``qlora``;
* found (`vlm_perf.run.discover`): ``trainability.json`` (what the callback observed requiring grad) and the run's
  ``adapter_config.json``. An adapter found in the folder completes a stated regime that names none.

When a stated regime and the observed record disagree on the FLOPs they imply, the stated one is used and the
disagreement is kept (`Regime.alternatives`) so the report names it with the size of the FLOPs difference.
A regime of whole parts only (`Trainability.stage_level`) is counted by the FLOPs layer exactly as the frozen parts
it names (`vlm_perf.flops.regime.exact_flops`), so its numbers are those of the frozen-parts count.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..arch.adapters import AdapterConfig
from ..arch.spec import ModelSpec
from ..arch.trainability import Trainability
from ..stats import BatchStats

__all__ = ["Regime", "resolve_regime", "describe_regime"]

_WHO = {"cli": "the command line", "manifest": "run.yaml"}
_ATTN = ("q_proj", "k_proj", "v_proj", "o_proj", "qkv", "attn", "query", "key", "value", "out_proj", "dense")
_MLP = ("mlp", "gate", "up_proj", "down_proj", "fc1", "fc2", "w1", "w2", "w3")


@dataclass
class Regime:
    """``trainability``: what trains, the one type every FLOPs count takes (a whole-part regime is counted exactly as
    the frozen parts it names); ``source`` in words; ``alternatives``: (source, Trainability) that other sources
    state and that differ; ``stated``: whether any source beyond the default states a regime."""

    trainability: Trainability
    source: str
    stated: bool = False
    alternatives: list[tuple[str, Trainability]] = field(default_factory=list)
    description: str = ""

    @property
    def stage_level(self) -> bool:
        return self.trainability.stage_level


def resolve_regime(config: Any, files: Any, spec: ModelSpec) -> Regime:
    """The `Regime` of a run from its resolved configuration (`RunConfig`) and its `RunFiles`."""
    from ..arch.observed import observed_trainability
    from ..ingest.adapter_config import read_adapter_config, read_trainability_record

    qlora = bool(getattr(config, "qlora", None))
    sources = getattr(config, "sources", {})
    trainable = tuple(getattr(config, "trainable", ()) or ())
    frozen = tuple(getattr(config, "frozen", ()) or ())
    adapter: AdapterConfig | None = None
    adapter_from = ""
    if getattr(config, "adapter", None):
        adapter = read_adapter_config(config.adapter, quantized_base=qlora)
        adapter_from = _WHO.get(sources.get("adapter", ""), "run.yaml")
    elif files.adapter_config is not None:
        adapter = read_adapter_config(files.adapter_config, quantized_base=qlora)
        adapter_from = (str(files.adapter_config.relative_to(files.folder))
                        if files.adapter_config.is_relative_to(files.folder) else str(files.adapter_config))
    # an empty list states nothing (run.yaml's ``frozen: []`` is today's default, not a regime)
    stated_by = sorted({_WHO.get(sources.get(k, ""), "run.yaml") for k in ("trainable", "adapter", "frozen")
                        if getattr(config, k, None)})
    observed: Trainability | None = None
    if files.trainability_record is not None:
        record = read_trainability_record(files.trainability_record)
        observed = observed_trainability(spec, record.requires_grad, adapter=record.adapter or adapter,
                                         input_require_grads=record.input_require_grads).trainability
        if qlora and observed.adapter is not None:
            from dataclasses import replace

            observed = replace(observed, adapter=replace(observed.adapter, quantized_base=True))
    if stated_by or (adapter is not None and observed is None):
        t = Trainability.build(trainable, frozen, adapter=adapter)
        who = " and ".join(stated_by) if stated_by else ""
        if adapter is not None and adapter_from not in stated_by:
            who = (who + " + " if who else "") + adapter_from
        regime = Regime(t, who, stated=True)
        if observed is not None:
            regime.alternatives.append((f"{files.trainability_record.name} (observed by the callback)", observed))
    elif observed is not None:
        regime = Regime(observed, f"{files.trainability_record.name} (observed by the callback)", stated=True)
    else:
        regime = Regime(Trainability.from_frozen(()), "default (every part trains)", stated=False)
    regime.description = describe_regime(spec, regime.trainability)
    return regime


def probe_batch(spec: ModelSpec) -> BatchStats:
    """A tiny batch of the model (one 16-token sequence, with one 4x4 image when it has a tower): the stand-in that
    regime and evidence checks count on when only the shape of the accounting matters."""
    grids = [(1, 4, 4)] if spec.vision is not None else []
    return BatchStats.from_batch(seq_lens=[16], image_grids=grids, spec=spec)


def _kind(name: str) -> str:
    leaf = name.rsplit(".", 1)[-1]
    if "mlp" in name or any(leaf.startswith(m) for m in _MLP):
        return "MLP"
    if "attn" in name or "attention" in name or any(leaf.startswith(a) for a in _ATTN):
        return "attention"
    return leaf


def describe_regime(spec: ModelSpec, t: Trainability) -> str:
    """The regime in words, e.g. ``LoRA r=16 on LM attention + MLP, tower and projector frozen``: what the
    adapter sits on (by part and module kind), which parts' base weights train and which are frozen."""
    from ..flops.regime import regime_flops

    try:
        r = regime_flops(spec, probe_batch(spec), t, full_reference=False)
    except Exception:  # noqa: BLE001 - words only; the FLOPs path raises its own typed error
        return t.describe()
    short = {"language_model": "LM", "vision_tower": "tower", "projector": "projector"}
    bits = []
    if t.adapter is not None:
        where: dict[str, list[str]] = {}
        for m in r.adapted:
            part = {"vision_tower": "tower", "language_model": "LM"}.get(m.stage, "projector")
            kinds = where.setdefault(part, [])
            if _kind(m.name) not in kinds:
                kinds.append(_kind(m.name))
        order = {"attention": 0, "MLP": 1}
        on = "; ".join(f"{p} {' + '.join(sorted(k, key=lambda x: (order.get(x, 2), x)))}" for p, k in where.items()) \
            or "no module of this model"
        bits.append(f"{t.adapter.describe()} on {on}")
    trained = [p for p, c in r.by_part.items() if c.get("weight_grad", 0)]
    adapted = {{"vision_tower": "vision_tower", "language_model": "language_model"}.get(m.stage, "projector")
               for m in r.adapted}
    frozen = [p for p, c in r.by_part.items() if not c.get("weight_grad", 0) and p not in adapted]
    fine = not t.stage_level and t.adapter is None
    if fine:  # e.g. the callback's observed names: a part whose weight gradients are all there trains whole
        whole = regime_flops(spec, probe_batch(spec), Trainability(), full_reference=False).by_part
        partly = [p for p in trained if r.by_part[p].get("weight_grad", 0) < whole.get(p, {}).get("weight_grad", 0)]
        if not partly and not frozen:
            return "full training, every weight trains: " + t.describe()
        fully = [p for p in trained if p not in partly]
        if fully:
            bits.append(" and ".join(short.get(p, p) for p in fully) + " weights trained")
        if partly:
            bits.append(" and ".join(short.get(p, p) for p in partly) + " weights partly trained")
    elif trained and (t.adapter is not None or frozen):
        bits.append(" and ".join(short.get(p, p) for p in trained) + " weights trained")
    if frozen:
        bits.append(" and ".join(short.get(p, p) for p in frozen) + " frozen")
    if not bits:
        return "full training (every weight trains)"
    if fine:
        bits.append(t.describe())
    return ", ".join(bits)
