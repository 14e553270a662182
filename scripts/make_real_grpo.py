"""Make the bundled REAL GRPO run: a tiny randomly initialised Qwen2-VL trained with TRL's GRPOTrainer on CPU.

    python scripts/make_real_grpo.py --out sample_logs/qwen2-vl-tiny-grpo-real

What it does (everything offline; no hub download):

* the tiny model, tokenizer and processor of ``scripts/tiny_vlm.py`` (shared with make_real_run.py): HF's own
  ``Qwen2VLProcessor`` / ``Qwen2VLImageProcessorPil``, a word-level tokenizer, eager attention, float32; plus a
  minimal chat template (TRL applies the processor's chat template to conversational prompts);
* a seeded prompt set (numpy ``default_rng(seed)``): each prompt one or two random images (the processor's own
  smart resize) and a few words; TRL repeats each prompt ``num_generations`` times;
* ``trl.GRPOTrainer`` with ``beta > 0`` (a reference model: the policy's initial weights, saved once and
  loaded by TRL as its reference), ``num_iterations=2`` (each rollout is trained on in two optimizer steps, so
  TRL computes the old-policy log-probs), ``num_generations`` completions per prompt of exactly
  ``max_completion_length`` tokens (``min_new_tokens`` = that length: no row finishes early, so neither the
  batched ``generate()`` nor the padded training batch computes padding; one prompt per generation batch, so
  the prompt rows have equal lengths too), a trivial reward (the share of the word "red"), gradient
  checkpointing off;
* records the run with ``vlm_perf.capture.MetadataCallback`` (schema-v1 metadata of the training
  microbatches) and ``vlm_perf.capture_rl.GRPORecorder`` (``rl/settings.json`` + ``rl/steps.jsonl``);
* measures every FLOP with torch's ``FlopCounterMode`` (the part-splitting counter of
  ``tests/verify/measure.py``, hooked on the policy AND the reference model), labelled by phase with this
  script's OWN hooks, independent of the recorder: ``generation`` (inside ``model.generate``), ``ref`` (inside
  the reference model's forward), ``old_log_prob`` (a policy forward without gradients outside generate),
  ``update_actor`` (forwards with gradients and every backward op); per optimizer step, per phase, per part
  (tower / merger / lm; TRL's fused log-prob head, which multiplies by ``lm_head.weight`` outside the
  ``lm_head`` module, is attributed to ``lm``). Saved as ``measured_flops.json``.

The training runs in a child process whose stdout+stderr go to the console and to ``train.log``.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))

from tiny_vlm import (IMAGE_SIZES, WORDS, build_config, build_processor, build_tokenizer, make_image,  # noqa: E402
                      remove_tree, run_child, write_config)

CHAT_WORDS = ("user", "assistant")
CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|> {{ m['role'] }} "
    "{% if m['content'] is string %}{{ m['content'] }} {% else %}{% for c in m['content'] %}"
    "{% if c['type'] == 'image' %}<|vision_start|><|image_pad|><|vision_end|> "
    "{% elif c['type'] == 'text' %}{{ c['text'] }} {% endif %}{% endfor %}{% endif %}<|im_end|> {% endfor %}"
    "{% if add_generation_prompt %}<|im_start|> assistant {% endif %}")
PHASES = ("generation", "old_log_prob", "ref", "update_actor")


def make_prompts(n: int, seed: int) -> list[dict]:
    import numpy as np

    rng = np.random.default_rng(seed)
    rows = []
    for _ in range(n):
        k = int(rng.choice([1, 1, 2]))
        images = [make_image(rng, *IMAGE_SIZES[int(rng.integers(len(IMAGE_SIZES)))]) for _ in range(k)]
        text = " ".join(rng.choice(WORDS, int(rng.integers(3, 10))))
        rows.append({"prompt": [{"role": "user", "content": text}], "images": images})
    return rows


def red_share(completions, **kwargs):
    """The trivial reward: the share of the word "red" in each completion."""
    out = []
    for c in completions:
        words = (c[0]["content"] if isinstance(c, list) else c).split()
        out.append(words.count("red") / max(1, len(words)))
    return out


def train(out: Path, steps: int, seed: int, generations: int, completion: int, beta: float,
          lora_rank: int = 0) -> None:
    import accelerate
    import datasets
    import torch
    import transformers
    import trl
    from torch.utils import flop_counter
    from transformers import TrainerCallback

    sys.path.insert(0, str(ROOT))
    sys.path.insert(0, str(ROOT / "tests"))  # as ``verify``: a third-party ``tests`` package would shadow it
    from verify.measure import _make_counter_class, _tag_graph, part_modules
    from vlm_perf.capture import MetadataCallback
    from vlm_perf.capture_rl import GRPORecorder

    torch.set_num_threads(1)
    tokenizer = build_tokenizer(CHAT_WORDS)
    processor = build_processor(tokenizer)
    processor.chat_template = CHAT_TEMPLATE
    config = build_config(tokenizer)
    torch.manual_seed(seed)
    init = out / "_trainer" / "init"
    transformers.Qwen2VLForConditionalGeneration(config).save_pretrained(str(init))
    model = transformers.Qwen2VLForConditionalGeneration.from_pretrained(str(init), attn_implementation="eager",
                                                                         dtype=torch.float32)
    prompts = make_prompts(steps // 2, seed)
    dataset = datasets.Dataset.from_list(prompts)

    args = trl.GRPOConfig(
        output_dir=str(out / "_trainer"), per_device_train_batch_size=generations, gradient_accumulation_steps=1,
        num_generations=generations, max_completion_length=completion, num_iterations=2, beta=beta,
        generation_kwargs={"min_new_tokens": completion}, max_steps=steps, logging_steps=1, learning_rate=1e-3,
        lr_scheduler_type="constant", warmup_steps=0, weight_decay=0.0, max_grad_norm=1.0, save_strategy="no",
        report_to=[], use_cpu=True, seed=seed, data_seed=seed, dataloader_num_workers=0, disable_tqdm=False,
        gradient_checkpointing=False, shuffle_dataset=False, log_completions=False, bf16=False, fp16=False)
    peft_config = None
    if lora_rank:
        import peft

        peft_config = peft.LoraConfig(
            r=lora_rank, lora_alpha=2 * lora_rank, lora_dropout=0.0,
            target_modules=r"model\.language_model\..*\.(q_proj|k_proj|v_proj|o_proj|gate_proj|up_proj|down_proj)")
    trainer = trl.GRPOTrainer(model=model, reward_funcs=red_share, args=args, train_dataset=dataset,
                              processing_class=processor, peft_config=peft_config,
                              callbacks=[MetadataCallback(out / "metadata", rank=0)])
    ref = trainer.ref_model  # with LoRA: none, the reference is the policy with its adapter disabled
    base = trainer.model.get_base_model() if lora_rank else trainer.model
    assert (ref is None) == bool(lora_rank) and ref is not trainer.model
    for m in (base, ref):
        if m is not None:
            assert m.config.text_config._attn_implementation == "eager"
            assert m.config.vision_config._attn_implementation == "eager"
    recorder = GRPORecorder(out).attach(trainer)

    # ---------------------------------------------------------------- the measurement (this script's own labels)
    parts: dict[str, list] = defaultdict(list)
    for m in (base, ref):
        for part, mods in (part_modules(m).items() if m is not None else ()):
            parts[part] += mods
    state = {"phase": None, "step": None}

    class PhaseCounter(_make_counter_class()):
        """(phase, forward/backward, part) FLOPs; backward ops belong to the actor update."""

        def __init__(self, **kw):
            # torch's registry counts aten.addmm but not the in-place aten.addmm_, with which TRL's chunked
            # log-prob backward accumulates its two gradient GEMMs (grad_hidden += tile @ W, grad_W += tile^T @ h):
            # count it with torch's own addmm formula, or 2 GEMMs per head position would go unmeasured
            def addmm_inplace(*a, **k):  # torch's registered addmm formula (it takes tensors and out_val)
                return flop_counter.flop_registry[torch.ops.aten.addmm](*a, **k)

            addmm_inplace._get_raw = True
            super().__init__(parts=dict(parts), custom_mapping={torch.ops.aten.addmm_: addmm_inplace}, **kw)
            self.by_phase: dict[tuple[str, str, str], int] = defaultdict(int)

        def _record(self, func_packet, args, direction, part, flops):
            phase = "update_actor" if direction == "backward" else state["phase"] or "unlabelled"
            self.by_phase[(phase, direction, part)] += flops

    counter = PhaseCounter()

    def labelled(phase, fn):
        def call(*a, **k):
            outer, state["phase"] = state["phase"], phase
            try:
                return fn(*a, **k)
            finally:
                state["phase"] = outer
        return call

    trainer.model.generate = labelled("generation", trainer.model.generate)
    stack: list = []

    def enter(phase_of):
        def hook(mod, a):
            stack.append(state["phase"])
            state["phase"] = phase_of()
        return hook

    def leave(mod, a, o):
        state["phase"] = stack.pop()

    # a forward decides its phase when it starts (the fused head's autograd.Function runs its forward without
    # gradients even in the training forward, so the phase is fixed at the model's entry, not per op)
    if ref is not None:
        ref.register_forward_pre_hook(enter(lambda: "ref"))
        ref.register_forward_hook(leave)
    else:  # TRL runs the reference forward inside use_adapter(model, None): adapters disabled
        import contextlib

        from trl.trainer import grpo_trainer

        adapter = grpo_trainer.use_adapter

        @contextlib.contextmanager
        def labelled_adapter(*a, **k):
            with adapter(*a, **k):
                outer, state["phase"] = state["phase"], "ref"
                try:
                    yield
                finally:
                    state["phase"] = outer

        grpo_trainer.use_adapter = labelled_adapter
    trainer.model.register_forward_pre_hook(enter(lambda: state["phase"] or (
        "update_actor" if torch.is_grad_enabled() else "old_log_prob")))
    trainer.model.register_forward_hook(leave)

    # TRL's fused log-prob head multiplies by lm_head.weight outside the lm_head module: count it as "lm"
    from trl.trainer import utils as trl_utils

    chunked = trl_utils._ChunkedLogProbFunction

    class CountedChunked:
        @staticmethod
        def apply(*a, **k):
            counter.part_stack.append("lm")
            try:
                result = chunked.apply(*a, **k)
            finally:
                counter.part_stack.pop()
            if torch.is_grad_enabled():
                _tag_graph(result, "lm")
            return result

    trl_utils._ChunkedLogProbFunction = CountedChunked

    class MeasureSteps(TrainerCallback):
        def __init__(self):
            self.steps, self._last = [], {}
            self._t0 = 0.0

        def on_step_end(self, args, st, control, **kwargs):
            now = dict(counter.by_phase)
            delta = {k: v - self._last.get(k, 0) for k, v in now.items() if v - self._last.get(k, 0)}
            self._last = now
            by_phase: dict[str, dict[str, int]] = defaultdict(dict)
            for (phase, direction, part), n in sorted(delta.items()):
                by_phase[phase][f"{direction}.{part}"] = n
            self.steps.append({"iteration": st.global_step, "flops": sum(delta.values()),
                               "by_phase": {p: dict(v) for p, v in sorted(by_phase.items())}})

    measure = MeasureSteps()
    trainer.add_callback(measure)
    start = time.perf_counter()
    with counter:
        trainer.train()
    wall = time.perf_counter() - start
    total = counter.get_total_flops()
    assert sum(s["flops"] for s in measure.steps) == total, "per-step FLOPs must add up to the counter's total"
    assert sum(counter.by_phase.values()) == total
    by_part = {f"{d}.{p}": n for (d, p), n in sorted(counter.counts.items())}
    assert not any(k.endswith(".other") for k in by_part), by_part
    assert {k[0] for k in counter.by_phase} <= set(PHASES), counter.by_phase.keys()
    write_config(config, out / "config.json")  # + the kernel it ran: attn_implementation
    measured = {
        "what": ("torch.utils.flop_counter.FlopCounterMode FLOPs of every optimizer step of this REAL GRPO run, by "
                 "RL phase (generation: inside model.generate with its KV cache; ref: the reference model's "
                 "forwards; old_log_prob: policy forwards without gradients outside generate; update_actor: "
                 "policy forwards with gradients and every backward op) and by part; the optimizer, loss, "
                 "rewards and advantages are not matmuls and count 0"),
        "units": "FLOPs (2 per multiply-add)",
        "parts": ("tower = visual.patch_embed + visual.blocks; merger = visual.merger; lm = language_model + "
                  "lm_head + TRL's fused log-prob head (lm_head.weight); rope = the rotary-table modules (not model "
                  "FLOPs); policy and reference model alike; forward/backward split as in tests/verify/measure.py"),
        "addmm_": ("torch's FlopCounterMode registry has no entry for the in-place aten.addmm_, which TRL's chunked "
                   "log-prob backward uses for its gradient GEMMs; this counter adds torch's own addmm formula for it"),
        "attention": "eager (full square attention score and value matmuls: compare with --causal full)",
        **({"lora_rank": lora_rank} if lora_rank else {}),
        "steps": steps, "seed": seed, "num_generations": generations, "max_completion_length": completion,
        "beta": beta, "num_iterations": 2, "wall_s": wall,
        "total_flops": total, "by_part": by_part,
        "by_phase": {p: sum(v for (ph, _, _), v in counter.by_phase.items() if ph == p) for p in PHASES},
        "per_step": measure.steps,
        "versions": {"python": platform.python_version(), "torch": torch.__version__,
                     "transformers": transformers.__version__, "trl": trl.__version__,
                     "accelerate": accelerate.__version__, "datasets": datasets.__version__},
    }
    (out / "measured_flops.json").write_text(json.dumps(measured, indent=1) + "\n")
    del recorder


RUN_YAML = """\
# REAL run (tiny, CPU; not synthetic): made by scripts/make_real_grpo.py (seed {seed}); see README.md
model: config.json
num_gpus: 1
dtype: fp32
frozen: []
log_interval: 1
synthetic: false
notes: 'REAL GRPO run (TRL GRPOTrainer) of a tiny randomly initialised Qwen2-VL (CPU, eager attention,
  {steps} optimizer steps, {gens} completions of {comp} tokens per prompt, beta {beta}, num_iterations 2,
  seed {seed}); FLOPs measured by FlopCounterMode per phase in measured_flops.json. One CPU process counts
  as one "GPU" for the per-GPU rates; no gpu key: a CPU has no peak in vlm-perf''s table.'
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=ROOT / "sample_logs" / "qwen2-vl-tiny-grpo-real")
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--generations", type=int, default=2)
    ap.add_argument("--completion", type=int, default=8)
    ap.add_argument("--beta", type=float, default=0.04)
    ap.add_argument("--lora-rank", type=int, default=0, help="LoRA on every LM Linear with this rank (TRL's "
                    "peft_config; tower and projector frozen; the reference is the policy with its adapter disabled)")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    out = a.out.resolve()
    if a.steps % 2:
        sys.exit("--steps must be even (num_iterations=2: each rollout is trained on in two steps)")
    if a.child:
        train(out, a.steps, a.seed, a.generations, a.completion, a.beta, a.lora_rank)
        return
    if out.exists() and any(out.iterdir()):
        sys.exit(f"{out} exists and is not empty; remove it first")
    out.mkdir(parents=True, exist_ok=True)
    run_child(__file__, out, ["--steps", str(a.steps), "--seed", str(a.seed), "--generations", str(a.generations),
                              "--completion", str(a.completion), "--beta", str(a.beta), "--lora-rank", str(a.lora_rank)])
    run_yaml = RUN_YAML.format(seed=a.seed, steps=a.steps, gens=a.generations, comp=a.completion, beta=a.beta)
    if a.lora_rank:
        run_yaml = run_yaml.replace("REAL GRPO run", f"REAL GRPO run with LoRA (r={a.lora_rank}, every LM Linear)")
    (out / "run.yaml").write_text(run_yaml)
    remove_tree(out / "_trainer")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
