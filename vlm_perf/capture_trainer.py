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

Evaluation (``model.eval()``) and generation under ``torch.no_grad()`` are not recorded. A forward
run twice per microbatch (e.g. a custom ``compute_loss`` calling the model twice) is recorded twice;
the FLOPs are then really spent twice, so that is what the metadata should say.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch
from transformers import TrainerCallback

from .capture import MetadataWriter, batch_metadata

__all__ = ["MetadataCallback"]


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
