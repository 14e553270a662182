"""`MetadataCallback`: schema-v1 metadata per microbatch from a Hugging Face ``Trainer`` (or TRL trainer).

A ``TrainerCallback`` alone never sees a microbatch's inputs (no event receives the batch, and the
events around gradient accumulation differ between transformers versions). So on ``on_train_begin``
the callback registers a forward pre-hook (``with_kwargs=True``) on the model the Trainer hands to
callbacks (the unwrapped model: DDP/FSDP/DeepSpeed wrappers call it, so the hook fires inside them
too). Every forward that runs in training mode with gradients enabled is one microbatch:

* ``iteration`` = ``state.global_step + 1`` (the optimizer step the microbatch belongs to; the
  number HF logs and ``trainer_state.json`` use for that step);
* ``microbatch`` = 0, 1, ... within the iteration (reset when the iteration changes), so
  ``gradient_accumulation_steps`` forwards give indices 0..GA-1;
* ``dp_rank`` = ``args.process_index`` unless ``rank`` is given (tensor/sequence-parallel setups:
  pass the data-parallel rank, and ``enabled=False`` on the ranks that duplicate a DP rank's data);
* sequence lengths, ``padded_tokens``, ``samples`` and grids: :func:`vlm_perf.capture.batch_metadata`.

On ``on_train_begin`` it also writes ``trainability.json`` beside the metadata folder (``<output_dir>/`` by
default; rank 0 only, so metadata globs never pick it up): the names of the parameters that require grad, whether the gradient-checkpointing input hook
(``enable_input_require_grads``) is installed, and a PEFT model's adapter config, so a report can count the
regime exactly (:func:`vlm_perf.ingest.adapter_config.read_trainability_record`; docs/training-regimes.md).

Evaluation (``model.eval()``) and generation under ``torch.no_grad()`` are not recorded. A forward
run twice per microbatch (e.g. a custom ``compute_loss`` calling the model twice) is recorded twice;
the FLOPs are then really spent twice, so that is what the metadata should say.
"""

from __future__ import annotations

import json
import os
from enum import Enum
from pathlib import Path
from typing import Any

import torch
from transformers import TrainerCallback

from .capture import MetadataWriter, batch_metadata

__all__ = ["MetadataCallback", "TRAINABILITY_FILE", "trainability_record"]

TRAINABILITY_FILE = "trainability.json"
TRAINABILITY_SCHEMA = "vlm-perf-trainability/1"


def _json_safe(value: Any) -> Any:
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, (set, frozenset)):
        return sorted(_json_safe(v) for v in value)
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return str(value)


def trainability_record(model, gradient_checkpointing: bool = False) -> dict:
    """What trains in ``model`` (a transformers model, possibly a PeftModel), as JSON-safe data."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    hooked = any(getattr(m, "_require_grads_hooks", None) or getattr(m, "_require_grads_hook", None)
                 for m in (model, base))
    names = [n for n, p in model.named_parameters() if p.requires_grad]
    adapter = None
    peft_config = getattr(model, "peft_config", None)
    if isinstance(peft_config, dict) and peft_config:
        active = getattr(model, "active_adapter", None)
        key = active if isinstance(active, str) and active in peft_config else next(iter(peft_config))
        config = peft_config[key]
        adapter = _json_safe(config.to_dict() if hasattr(config, "to_dict") else vars(config))
    return {"schema": TRAINABILITY_SCHEMA, "requires_grad": names, "input_require_grads": bool(hooked),
            "gradient_checkpointing": gradient_checkpointing,
            "trainable_params": sum(p.numel() for p in model.parameters() if p.requires_grad),
            "total_params": sum(p.numel() for p in model.parameters()), "adapter_config": adapter}


class MetadataCallback(TrainerCallback):
    """Record one schema-v1 line per training microbatch (see the module docstring).

    ``path``: directory or ``*.jsonl`` for :class:`MetadataWriter` (default ``<output_dir>/metadata``).
    ``rank``: the data-parallel rank to record (default: the Trainer's ``args.process_index``).
    ``enabled``: record on this process (False: a no-op, e.g. on tensor-parallel peers).
    """

    def __init__(self, path: str | os.PathLike | None = None, rank: int | None = None, enabled: bool = True) -> None:
        self.path = path
        self.rank = rank
        self.enabled = enabled
        self.writer: MetadataWriter | None = None
        self.microbatches = 0  # recorded in this process
        self._state: Any = None
        self._handle: Any = None
        self._iteration: int | None = None
        self._index = 0

    # --------------------------------------------------------------- Trainer events
    def on_train_begin(self, args, state, control, model=None, **kwargs):
        self._state = state
        if not self.enabled:
            return
        if model is None:
            raise ValueError("MetadataCallback: the Trainer passed no model to on_train_begin")
        if self.writer is None:
            target = Path(self.path) if self.path is not None else Path(args.output_dir) / "metadata"
            self.writer = MetadataWriter(target, rank=self.rank if self.rank is not None else args.process_index)
        if self._handle is None:
            self._handle = model.register_forward_pre_hook(self._pre_forward, with_kwargs=True)
        rank = self.rank if self.rank is not None else args.process_index
        if rank == 0:
            target = Path(self.path) if self.path is not None else Path(args.output_dir) / "metadata"
            folder = (target.parent if target.suffix == ".jsonl" else target).parent  # beside the metadata folder
            folder.mkdir(parents=True, exist_ok=True)
            record = trainability_record(model, gradient_checkpointing=bool(getattr(args, "gradient_checkpointing",
                                                                                    False)))
            (folder / TRAINABILITY_FILE).write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")

    def on_step_begin(self, args, state, control, **kwargs):
        self._state = state  # the Trainer may replace its state object (resume); keep the live one

    def on_train_end(self, args, state, control, **kwargs):
        self.close()

    # --------------------------------------------------------------- the hook
    def _pre_forward(self, module, args: tuple, kwargs: dict) -> None:
        if not module.training or not torch.is_grad_enabled() or self.writer is None:
            return
        inputs = dict(kwargs)
        if args and "input_ids" not in inputs and torch.is_tensor(args[0]):
            inputs["input_ids"] = args[0]  # model(input_ids, ...) called positionally
        iteration = int(self._state.global_step) + 1
        if iteration != self._iteration:
            self._iteration, self._index = iteration, 0
        else:
            self._index += 1
        self.writer.record(iteration, microbatch=self._index, **batch_metadata(inputs))
        self.microbatches += 1

    def close(self) -> None:
        if self._handle is not None:
            self._handle.remove()
            self._handle = None
        if self.writer is not None:
            self.writer.close()
            self.writer = None
