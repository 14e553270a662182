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
import os
import platform
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

WORDS = ("the a an cat dog bird sees image picture photo of red blue green yellow square circle disc box on left "
         "right top bottom middle describe what is in this there two one three small large near far above below "
         "and with without color shape count how many which where").split()
SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|vision_end|>", "<|image_pad|>",
           "<|video_pad|>"]
IMAGE_SIZES = [(56, 56), (84, 112), (100, 150), (140, 140), (168, 224), (224, 196), (60, 300)]  # (H, W) px


def build_tokenizer():
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.WordLevel(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.train_from_iterator([" ".join(WORDS)], trainers.WordLevelTrainer(special_tokens=["<unk>"] + SPECIAL))
    return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", pad_token="<|endoftext|>",
                                   eos_token="<|im_end|>")


def build_processor(tokenizer):
    from transformers import Qwen2VLImageProcessorPil, Qwen2VLProcessor

    image_processor = Qwen2VLImageProcessorPil(patch_size=14, temporal_patch_size=2, merge_size=2,
                                               min_pixels=56 * 56, max_pixels=224 * 224)
    # Qwen2VLProcessor also wants a video processor, and HF's Qwen2VLVideoProcessor needs torchvision
    # (not installed here). This run has no videos: let the processor accept None for it.
    check = Qwen2VLProcessor.check_argument_for_proper_class

    def lenient(self, name, arg):
        return None if name == "video_processor" and arg is None else check(self, name, arg)

    Qwen2VLProcessor.check_argument_for_proper_class = lenient
    try:
        return Qwen2VLProcessor(image_processor=image_processor, tokenizer=tokenizer, video_processor=None)
    finally:
        Qwen2VLProcessor.check_argument_for_proper_class = check


def build_config(tokenizer):
    from transformers import Qwen2VLConfig

    ids = {t: tokenizer.convert_tokens_to_ids(t) for t in SPECIAL}
    text = dict(vocab_size=len(tokenizer), hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=4096,
                bos_token_id=None, eos_token_id=ids["<|im_end|>"], pad_token_id=ids["<|endoftext|>"],
                rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [4, 6, 6]})
    vision = dict(depth=2, embed_dim=64, hidden_size=128, mlp_ratio=2, num_heads=4, in_channels=3, patch_size=14,
                  spatial_merge_size=2, temporal_patch_size=2)
    config = Qwen2VLConfig(text_config=text, vision_config=vision, image_token_id=ids["<|image_pad|>"],
                           video_token_id=ids["<|video_pad|>"], vision_start_token_id=ids["<|vision_start|>"],
                           vision_end_token_id=ids["<|vision_end|>"], tie_word_embeddings=False)
    config._attn_implementation = "eager"
    return config


def make_image(rng, height: int, width: int):
    import numpy as np
    from PIL import Image

    img = rng.integers(0, 60, (height, width, 3)).astype(np.uint8)
    yy, xx = np.mgrid[:height, :width]
    for _ in range(int(rng.integers(1, 4))):
        color = rng.integers(80, 256, 3)
        cy, cx, r = rng.integers(0, height), rng.integers(0, width), rng.integers(8, max(9, min(height, width) // 2))
        if rng.random() < 0.5:
            img[(yy - cy) ** 2 + (xx - cx) ** 2 < r * r] = color
        else:
            img[max(0, cy - r):cy + r, max(0, cx - r):cx + r] = color
    return Image.fromarray(img)


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
    config.to_json_file(str(out / "config.json"))
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
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1",
           "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TQDM_MININTERVAL": "0"}
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", "--out", str(out), "--steps", str(a.steps),
           "--accumulation", str(a.accumulation), "--seed", str(a.seed), "--lora-rank", str(a.lora_rank)]
    with open(out / "train.log", "wb") as log:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, cwd=str(ROOT))
        for chunk in iter(lambda: proc.stdout.read1(4096), b""):
            log.write(chunk)
            sys.stdout.buffer.write(chunk)
            sys.stdout.flush()
        rc = proc.wait()
    if rc:
        sys.exit(f"training failed (exit {rc}); see {out / 'train.log'}")
    run_yaml = RUN_YAML.format(seed=a.seed, steps=a.steps, ga=a.accumulation)
    if a.lora_rank:
        run_yaml = run_yaml.replace("REAL training run of a tiny", f"REAL LoRA (r={a.lora_rank}, every LM Linear; tower "
                                    "and projector frozen; adapter_config.json, trainability.json) training run of a tiny")
    (out / "run.yaml").write_text(run_yaml)
    for leftover in (out / "_trainer").glob("**/*"):
        if leftover.is_file():
            leftover.unlink()
    for d in sorted((out / "_trainer").glob("**/"), reverse=True):
        d.rmdir()
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
