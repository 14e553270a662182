"""Make the bundled REAL run: train a tiny randomly initialised Qwen2-VL with the HF Trainer on CPU.

    python scripts/make_real_run.py --out sample_logs/qwen2-vl-tiny-real

What it does (everything offline; no hub download):

* builds a word-level tokenizer with the ``tokenizers`` library (Qwen2-VL's special tokens added),
  HF's own ``Qwen2VLImageProcessorPil`` (patch 14, merge 2, temporal patch 2, as the released
  models) and HF's own ``Qwen2VLProcessor`` around them, which expands ``<|image_pad|>`` to one token
  per merged patch and returns ``pixel_values`` / ``image_grid_thw`` / ``mm_token_type_ids``;
* generates a seeded data set (numpy ``default_rng(seed)``): 0-2 images per sample of random sizes
  (random coloured rectangles and discs on noise, resized by the processor's own smart-resize rule)
  and 6-40 words of text; it is preprocessed before training, so no data work runs under the counter;
* trains a randomly initialised ``Qwen2VLForConditionalGeneration`` (eager attention, float32,
  every part trainable) with ``transformers.Trainer``: batch 1 per microbatch (no padding: eager
  attention would compute padded positions too), gradient accumulation 4, ``max_steps`` 20,
  ``logging_steps=1``, tqdm on;
* records per-microbatch metadata with ``vlm_perf.capture.MetadataCallback`` and, at the same time,
  measures every FLOP of the same steps with torch's ``FlopCounterMode`` (the measurement harness of
  ``tests/verify/measure.py``, which also splits FLOPs by part: vision tower, merger, LM, rotary
  tables), differenced per optimizer step at ``on_step_end``;
* writes into ``--out``: ``train.log`` (the console output of the training child process, byte for
  byte: tqdm redraws and the HF dict lines), ``metadata/metadata-rank00000.jsonl``,
  ``measured_flops.json``, ``config.json`` (the tiny model's HF config) and ``run.yaml``.

The training runs in a child process whose stdout+stderr are copied to the console and to
``train.log``, so the log is what a user would have seen.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))

from tiny_vlm import (IMAGE_SIZES, WORDS, build_config, build_processor, build_tokenizer, make_image,  # noqa: E402
                      remove_tree, run_child, write_config)


def make_dataset(processor, n: int, seed: int) -> list[dict]:
    """``n`` preprocessed samples (each a dict of 1-row tensors + labels)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    image_id = processor.tokenizer.convert_tokens_to_ids("<|image_pad|>")
    samples = []
    for _ in range(n):
        n_images = int(rng.choice([0, 1, 1, 2]))
        images = [make_image(rng, *IMAGE_SIZES[int(rng.integers(len(IMAGE_SIZES)))]) for _ in range(n_images)]
        words = lambda k: " ".join(rng.choice(WORDS, k))  # noqa: E731
        text = "<|im_start|> " + words(int(rng.integers(3, 12)))
        for _ in images:
            text += " <|vision_start|><|image_pad|><|vision_end|> " + words(int(rng.integers(2, 8)))
        text += " <|im_end|> <|im_start|> " + words(int(rng.integers(3, 20))) + " <|im_end|>"
        enc = processor(text=[text], images=images or None, return_tensors="pt")
        item = {k: v for k, v in enc.items()}
        labels = item["input_ids"].clone()
        labels[labels == image_id] = -100
        item["labels"] = labels
        samples.append(item)
    return samples


def collate(items: list[dict]) -> dict:
    """Right-pad a list of preprocessed samples (the run uses one per microbatch: no padding)."""
    import torch

    length = max(it["input_ids"].shape[1] for it in items)
    pad = {"input_ids": 0, "attention_mask": 0, "mm_token_type_ids": 0, "labels": -100}
    out = {k: torch.cat([torch.nn.functional.pad(it[k], (0, length - it[k].shape[1]), value=v) for it in items])
           for k, v in pad.items()}
    grids = [it["image_grid_thw"] for it in items if "image_grid_thw" in it]
    if grids:
        out["pixel_values"] = torch.cat([it["pixel_values"] for it in items if "pixel_values" in it])
        out["image_grid_thw"] = torch.cat(grids)
    return out


class ListDataset:
    def __init__(self, items):
        self.items = items

    def __len__(self):
        return len(self.items)

    def __getitem__(self, i):
        return self.items[i]


def train(out: Path, steps: int, accumulation: int, seed: int, lora_rank: int = 0) -> None:
    import accelerate
    import torch
    import transformers
    from transformers import Trainer, TrainerCallback, TrainingArguments

    sys.path.insert(0, str(ROOT))
    sys.path.insert(0, str(ROOT / "tests"))  # as ``verify``: a third-party ``tests`` package would shadow it
    from verify.measure import _make_counter_class
    from vlm_perf.capture import MetadataCallback

    torch.set_num_threads(1)
    tokenizer = build_tokenizer()
    processor = build_processor(tokenizer)
    config = build_config(tokenizer)
    dataset = ListDataset(make_dataset(processor, steps * accumulation, seed))
    torch.manual_seed(seed)
    model = transformers.Qwen2VLForConditionalGeneration(config)
    assert model.config.text_config._attn_implementation == "eager"
    assert model.config.vision_config._attn_implementation == "eager"
    counter = _make_counter_class()(model)  # hooks the base model's parts (PEFT injects into them in place)
    if lora_rank:
        import peft

        model = peft.get_peft_model(model, peft.LoraConfig(
            r=lora_rank, lora_alpha=2 * lora_rank, lora_dropout=0.0,
            target_modules=r"model\.language_model\..*\.(q_proj|k_proj|v_proj|o_proj|gate_proj|up_proj|down_proj)"))

    class MeasureSteps(TrainerCallback):
        """FlopCounterMode totals differenced per optimizer step (forward + backward of its microbatches)."""

        def __init__(self):
            self.steps, self._last_total, self._last_parts = [], 0, {}

        def on_step_end(self, args, state, control, **kwargs):
            total = counter.get_total_flops()
            parts = {f"{phase}.{part}": n for (phase, part), n in counter.counts.items()}
            delta = {k: v - self._last_parts.get(k, 0) for k, v in parts.items() if v - self._last_parts.get(k, 0)}
            self.steps.append({"iteration": state.global_step, "flops": total - self._last_total,
                               "by_part": dict(sorted(delta.items()))})
            self._last_total, self._last_parts = total, parts

    measure = MeasureSteps()
    args = TrainingArguments(
        output_dir=str(out / "_trainer"), per_device_train_batch_size=1, gradient_accumulation_steps=accumulation,
        max_steps=steps, logging_steps=1, learning_rate=1e-3, lr_scheduler_type="constant", warmup_steps=0,
        weight_decay=0.0, max_grad_norm=1.0, save_strategy="no", report_to=[], use_cpu=True, seed=seed,
        data_seed=seed, dataloader_num_workers=0, remove_unused_columns=False, disable_tqdm=False)
    trainer = Trainer(model=model, args=args, train_dataset=dataset, data_collator=collate,
                      callbacks=[MetadataCallback(out / "metadata", rank=0), measure])
    with counter:
        trainer.train()
    total = counter.get_total_flops()
    assert sum(s["flops"] for s in measure.steps) == total, "per-step FLOPs must add up to the counter's total"
    parts = {f"{phase}.{part}": n for (phase, part), n in sorted(counter.counts.items())}
    assert sum(parts.values()) == total and not any(k.endswith(".other") for k in parts), parts
    write_config(config, out / "config.json")  # + the kernel it ran: attn_implementation
    if lora_rank:
        model.save_pretrained(str(out / "_trainer" / "adapter"))
        (out / "adapter_config.json").write_bytes((out / "_trainer" / "adapter" / "adapter_config.json").read_bytes())
    measured = {
        "what": ("torch.utils.flop_counter.FlopCounterMode FLOPs of every optimizer step of this REAL run "
                 "(forward + backward of its microbatches; optimizer, loss and norms are not matmuls and count 0)"),
        "units": "FLOPs (2 per multiply-add)",
        "parts": ("tower = visual.patch_embed + visual.blocks; merger = visual.merger; lm = language_model + lm_head; "
                  "rope = the rotary-table modules (LM M-RoPE inv_freq @ positions; not model FLOPs); "
                  "forward/backward split as in tests/verify/measure.py"),
        "attention": "eager (full square attention score and value matmuls: compare with --causal full)",
        "gradient_accumulation_steps": accumulation, "micro_batch_size": 1, "steps": steps, "seed": seed,
        **({"lora_rank": lora_rank} if lora_rank else {}),
        "total_flops": total, "by_part": parts, "per_step": measure.steps,
        "hf_trainer_total_flos": {"value": float(trainer.state.total_flos),
                                  "what": ("the Trainer's own estimate (state.total_flos: 6 x non-embedding "
                                           "parameters x input tokens, vision parameters included), for comparison; "
                                           "not a measurement")},
        "versions": {"python": platform.python_version(), "torch": torch.__version__,
                     "transformers": transformers.__version__, "accelerate": accelerate.__version__},
    }
    (out / "measured_flops.json").write_text(json.dumps(measured, indent=1) + "\n")


RUN_YAML = """\
# REAL run (tiny, CPU; not synthetic): made by scripts/make_real_run.py (seed {seed}); see README.md
model: config.json
num_gpus: 1
dtype: fp32
frozen: []
log_interval: 1
synthetic: false
notes: 'REAL training run of a tiny randomly initialised Qwen2-VL (HF Trainer, CPU, eager attention,
  {steps} optimizer steps x {ga} microbatches of 1 sample, seed {seed}); FLOPs measured by FlopCounterMode
  in measured_flops.json. One CPU process counts as one "GPU" for the per-GPU rates; no gpu key: a CPU
  has no peak in vlm-perf''s table, so MFU is left empty.'
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=ROOT / "sample_logs" / "qwen2-vl-tiny-real")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--accumulation", type=int, default=4)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--lora-rank", type=int, default=0, help="LoRA on every LM Linear with this rank (PEFT; tower and "
                    "projector frozen); writes adapter_config.json, and the callback's trainability.json")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    out = a.out.resolve()
    if a.child:
        train(out, a.steps, a.accumulation, a.seed, a.lora_rank)
        return
    if out.exists() and any(out.iterdir()):
        sys.exit(f"{out} exists and is not empty; remove it first")
    out.mkdir(parents=True, exist_ok=True)
    run_child(__file__, out, ["--steps", str(a.steps), "--accumulation", str(a.accumulation), "--seed", str(a.seed),
                              "--lora-rank", str(a.lora_rank)])
    run_yaml = RUN_YAML.format(seed=a.seed, steps=a.steps, ga=a.accumulation)
    if a.lora_rank:
        run_yaml = run_yaml.replace("REAL training run of a tiny", f"REAL LoRA (r={a.lora_rank}, every LM Linear; tower "
                                    "and projector frozen; adapter_config.json, trainability.json) training run of a tiny")
        # no ``frozen: []`` (read as "nothing frozen"): the regime is the adapter's and the callback's record's
        run_yaml = run_yaml.replace("frozen: []\n", "")
    (out / "run.yaml").write_text(run_yaml)
    remove_tree(out / "_trainer")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
