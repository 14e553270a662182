"""GRPORecorder's own rules on hand-made tensors: response length as TRL keeps it (up to and including the first
EOS, else every generated token), prompt lengths from the attention mask, padding and decode steps recorded;
the step row's time split (update = step - rollout block; other = the block's rest)."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from vlm_perf.capture_rl import GRPORecorder  # noqa: E402
from vlm_perf.ingest.rl_metadata import read_rl  # noqa: E402


def test_rollout_lengths_by_hand(tmp_path):
    rec = GRPORecorder(tmp_path)
    rec.trainer = SimpleNamespace(eos_token_ids=[7])
    ids = torch.tensor([[0, 5, 5, 1, 7, 2, 2], [5, 5, 5, 1, 1, 1, 1]])  # prompt width 3, 4 decode steps
    mask = torch.tensor([[0, 1, 1], [1, 1, 1]])
    rec._rollout({"input_ids": ids[:, :3], "attention_mask": mask, "image_grid_thw": torch.tensor([[1, 4, 4]])}, ids)
    r = rec._row["rollout"]
    assert r["prompt_lens"] == [2, 3]  # left padding not counted
    assert r["response_lens"] == [2, 4]  # row 0 stops at its EOS (included); row 1 never emits one
    assert r["padded_prompt_len"] == [3] and r["generated_steps"] == [4]
    assert r["image_grid_thw"] == [[1, 4, 4]]


def test_step_row_time_split(tmp_path):
    rec = GRPORecorder(tmp_path)
    state = SimpleNamespace(is_world_process_zero=True, global_step=1)
    rec.trainer = SimpleNamespace(num_generations=2, beta=0.0, num_iterations=1, use_vllm=False,
                                  args=SimpleNamespace(steps_per_generation=1, gradient_accumulation_steps=1))
    rec.logprob_head = {"positions": "response", "backward_recompute": True}
    rec.on_train_begin(None, state, None)
    rec.on_step_begin(None, state, None)
    rec._row.update({"phases_s": {"generation": 0.5}, "rollout_block_s": 0.75,
                     "forwards": {"update_actor": [{"prompt_lens": [3], "response_lens": [2], "image_grid_thw": [],
                                                    "video_grid_thw": []}]}})
    rec._step_start -= 2.0  # the step took (at least) 2 s
    rec.on_step_end(None, state, None)
    rec.on_train_end(None, state, None)
    row = json.loads((tmp_path / "rl" / "steps.jsonl").read_text())
    assert row["phases_s"]["generation"] == 0.5
    assert row["phases_s"]["other"] == pytest.approx(0.25)
    assert row["phases_s"]["update_actor"] == pytest.approx(row["step_s"] - 0.75)
    assert row["rollout"] is None and row["log_prob_forwards"] == {} and len(row["update"]) == 1
    record = read_rl(tmp_path / "rl")  # what it wrote is valid RL metadata
    assert not record.settings.reference and not record.settings.old_log_prob
    assert record.steps[0].update[0].prompt_lens == (3,)
