"""`GRPORecorder`: the RL metadata (``rl/settings.json`` + ``rl/steps.jsonl``) of a TRL ``GRPOTrainer`` run.

A ``TrainerCallback`` never sees the rollout, so the recorder is attached to the trainer instance
(``GRPORecorder(...).attach(trainer)``; it also adds itself as a callback) and wraps, on that instance only:

* ``trainer.model.generate``: the rollout. Per row of the generation batch: the prompt length (the row's
  attention mask: real positions, visual placeholder tokens included), the response length as TRL keeps it
  (up to and including the first EOS, else every generated token), the media grids the call received, the
  padded prompt width and the number of decode steps the batch ran (``generated_steps``: finished rows stay
  in the batch until the longest stops); wall time = the ``generate()`` call;
* ``trainer._get_per_token_logps_and_entropies``: each log-prob forward, by role: ``ref`` (the reference
  model, or the policy with its adapter disabled / the ``ref`` adapter active), ``old_log_prob`` (the policy
  under ``torch.no_grad()``), ``update_actor`` (with gradients: the training forward of one microbatch, whose
  backward follows). Per call: prompt and response length per row (``logits_to_keep`` is the completion
  width; the attention mask splits each row), media grids, wall time;
* ``trainer._prepare_inputs``: wall time of the whole rollout block (generation, rewards, advantages and the
  no-grad forwards), so the step's time splits into named phases and an ``other`` rest.

On ``on_step_end`` one line per optimizer step is written (format: docs/metadata-schema.md, "RL steps");
``update_actor`` seconds = the step's wall time (``on_step_begin`` to ``on_step_end``) minus the rollout
block, i.e. the training forwards, backwards and the optimizer step. The settings file is written on
``on_train_begin``. Rank 0 only (the rows describe this process's rollout).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import torch
from transformers import TrainerCallback

from .ingest.rl_metadata import RL_DIR, RL_SCHEMA
from .ingest.rl_metadata import SETTINGS as RL_SETTINGS_FILE
from .ingest.rl_metadata import STEPS as RL_STEPS_FILE

__all__ = ["GRPORecorder", "RL_SCHEMA", "RL_DIR", "RL_SETTINGS_FILE", "RL_STEPS_FILE"]


def _grids(value: Any) -> list[list[int]]:
    return [[int(x) for x in row] for row in value.tolist()] if value is not None else []


def _adapter_is_reference(model: Any) -> bool:
    """A PEFT policy run as the reference: adapters disabled, or the ``ref`` adapter active."""
    if getattr(model, "active_adapter", None) == "ref":
        return True
    return any(getattr(m, "disable_adapters", False) is True for m in model.modules())


class GRPORecorder(TrainerCallback):
    """Record the RL settings and one row per optimizer step of a TRL ``GRPOTrainer`` (see the module docstring).

    ``folder``: the run folder; the files go to ``<folder>/rl/``. ``logprob_head``: how TRL's fused log-prob
    head ran (``positions``: ``all_but_last`` on devices without Triton, where every position but the last is
    projected; ``response`` with Triton, only the scored completion tokens; ``backward_recompute``: the head
    recomputes its logits in backward); default: read from TRL's own device test."""

    def __init__(self, folder: str | os.PathLike, logprob_head: dict | None = None) -> None:
        self.folder = Path(folder) / RL_DIR
        self.logprob_head = logprob_head
        self.trainer: Any = None
        self._row: dict[str, Any] = {}
        self._step_start = 0.0
        self._file: Any = None

    # --------------------------------------------------------------- wiring
    def attach(self, trainer: Any) -> GRPORecorder:
        self.trainer = trainer
        model = trainer.model
        generate, logps, prepare = model.generate, trainer._get_per_token_logps_and_entropies, trainer._prepare_inputs

        def recorded_generate(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            out = generate(*args, **kwargs)
            self._add_time("generation", time.perf_counter() - start)
            self._rollout(kwargs, out)
            return out

        def recorded_logps(model_: Any, input_ids: Any, attention_mask: Any, logits_to_keep: int, *args: Any,
                           **kwargs: Any) -> Any:
            if torch.is_grad_enabled():
                role = "update_actor"
            elif model_ is trainer.ref_model or _adapter_is_reference(trainer.accelerator.unwrap_model(model_)):
                role = "ref"
            else:
                role = "old_log_prob"
            start = time.perf_counter()
            out = logps(model_, input_ids, attention_mask, logits_to_keep, *args, **kwargs)
            if role != "update_actor":
                self._add_time(role, time.perf_counter() - start)
            prompt = attention_mask[:, :-logits_to_keep].sum(-1).tolist()
            response = attention_mask[:, -logits_to_keep:].sum(-1).tolist()
            self._row.setdefault("forwards", {}).setdefault(role, []).append(
                {"prompt_lens": [int(x) for x in prompt], "response_lens": [int(x) for x in response],
                 "image_grid_thw": _grids(kwargs.get("image_grid_thw")),
                 "video_grid_thw": _grids(kwargs.get("video_grid_thw"))})
            return out

        def recorded_prepare(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            out = prepare(*args, **kwargs)
            self._row["rollout_block_s"] = self._row.get("rollout_block_s", 0.0) + time.perf_counter() - start
            return out

        model.generate = recorded_generate
        trainer._get_per_token_logps_and_entropies = recorded_logps
        trainer._prepare_inputs = recorded_prepare
        trainer.add_callback(self)
        return self

    def _add_time(self, phase: str, seconds: float) -> None:
        times = self._row.setdefault("phases_s", {})
        times[phase] = times.get(phase, 0.0) + seconds

    def _rollout(self, kwargs: dict, out: Any) -> None:
        ids = out.sequences if hasattr(out, "sequences") else out
        mask = kwargs["attention_mask"]
        width = int(kwargs["input_ids"].shape[1])
        completion = ids[:, width:]
        eos = torch.tensor(self.trainer.eos_token_ids, device=completion.device)
        is_eos = torch.isin(completion, eos)
        lengths = [int(row.nonzero()[0, 0]) + 1 if row.any() else int(completion.shape[1]) for row in is_eos]
        rollout = self._row.setdefault("rollout", {"prompt_lens": [], "response_lens": [], "image_grid_thw": [],
                                                   "video_grid_thw": [], "padded_prompt_len": [],
                                                   "generated_steps": []})
        rollout["prompt_lens"] += [int(x) for x in mask.sum(-1).tolist()]
        rollout["response_lens"] += lengths
        rollout["image_grid_thw"] += _grids(kwargs.get("image_grid_thw"))
        rollout["video_grid_thw"] += _grids(kwargs.get("video_grid_thw"))
        rollout["padded_prompt_len"].append(width)
        rollout["generated_steps"].append(int(completion.shape[1]))

    # --------------------------------------------------------------- settings
    def settings(self) -> dict:
        import trl

        t, args = self.trainer, self.trainer.args
        head = self.logprob_head
        if head is None:
            try:  # TRL's own test of where its fused log-prob head scores (Triton: the valid positions only)
                from trl.trainer.utils import _use_triton
            except ImportError:
                raise ValueError(f"GRPORecorder: trl {trl.__version__} has no trl.trainer.utils._use_triton; pass "
                                 "logprob_head={'positions': ..., 'backward_recompute': ...}") from None
            head = {"positions": "response" if _use_triton(t.accelerator.device) else "all_but_last",
                    "backward_recompute": True}
        generate_every = args.steps_per_generation * t.num_iterations
        return {"schema": RL_SCHEMA, "algorithm": "grpo", "framework": "trl", "framework_version": trl.__version__,
                "num_generations": int(t.num_generations), "beta": float(t.beta),
                "reference": t.beta != 0.0, "num_iterations": int(t.num_iterations),
                "steps_per_generation": int(args.steps_per_generation),
                "old_log_prob": args.gradient_accumulation_steps % generate_every != 0 or bool(
                    getattr(t, "use_vllm", False) and getattr(t, "vllm_importance_sampling_correction", False)),
                "critic": False, "generation": "transformers generate() with a KV cache"
                if not getattr(t, "use_vllm", False) else "vllm",
                "logprob_head": head}

    # --------------------------------------------------------------- Trainer events
    def on_train_begin(self, args, state, control, **kwargs):
        if not state.is_world_process_zero:
            return
        self.folder.mkdir(parents=True, exist_ok=True)
        (self.folder / RL_SETTINGS_FILE).write_text(json.dumps(self.settings(), indent=1) + "\n", encoding="utf-8")
        self._file = open(self.folder / RL_STEPS_FILE, "w", encoding="utf-8")

    def on_step_begin(self, args, state, control, **kwargs):
        if not self._row.get("_open"):
            self._step_start = time.perf_counter()
            self._row["_open"] = True

    def on_step_end(self, args, state, control, **kwargs):
        step_s = time.perf_counter() - self._step_start
        row, self._row = self._row, {}
        if self._file is None:
            return
        phases = dict(row.get("phases_s", {}))
        block = row.get("rollout_block_s", 0.0)
        phases["update_actor"] = step_s - block
        phases["other"] = block - sum(v for k, v in phases.items() if k != "update_actor")
        forwards = row.get("forwards", {})
        out = {"iteration": int(state.global_step), "step_s": step_s, "phases_s": phases,
               "rollout": row.get("rollout"),
               "log_prob_forwards": {k: v for k, v in forwards.items() if k != "update_actor"},
               "update": forwards.get("update_actor", [])}
        self._file.write(json.dumps(out) + "\n")
        self._file.flush()

    def on_train_end(self, args, state, control, **kwargs):
        if self._file is not None:
            self._file.close()
            self._file = None
