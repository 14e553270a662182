"""Make the bundled REAL profiler trace: the tiny CPU run of ``make_real_run.py`` under ``torch.profiler``.

    python scripts/make_real_trace.py --out sample_logs/qwen2-vl-tiny-trace

The same model, data, seed and Trainer settings as ``scripts/make_real_run.py`` (its functions are
reused), so iteration N here trains exactly the microbatches of iteration N of the bundled
``sample_logs/qwen2-vl-tiny-real`` run (asserted: the metadata lines written here must equal the
bundled ones for the same iterations). ``torch.profiler`` (CPU activity, ``record_shapes``,
``with_stack`` so ``nn.Module: <Class>_<k>`` events exist) records a few steps, driven by
``prof.step()`` in ``on_step_end``: ProfilerStep#k spans optimizer step k+1 (dataloader fetch,
forward, backward, optimizer).

To keep the bundled file small, the written Chrome trace is trimmed, keeping its structure: only
the ``active`` steps are recorded; ``python_function`` events other than ``nn.Module:`` ones are
dropped (they only name Python frames), as are zero-FLOP view ops (``VIEW_OPS``: their tiny self
time goes to the enclosing op of the same part; kept when they made an autograd node) and the flow events (their ids are in the args);
per-op ``args`` keep the ids the attribution uses (``External id``, ``Sequence number``,
``Fwd thread id``) and ``Input Dims``. The result is gzipped (``trace/rank0.pt.trace.json.gz``).
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
sys.path.insert(0, str(ROOT))

KEEP_ARGS = ("External id", "Sequence number", "Fwd thread id", "Input Dims")
# zero-FLOP view/metadata ops; dropping one hands its (sub-microsecond) self time to the enclosing op or
# module, which is in the same part, so the per-part times do not change
VIEW_OPS = {"aten::as_strided", "aten::view", "aten::t", "aten::transpose", "aten::resolve_conj", "aten::reshape",
            "aten::expand", "aten::unsqueeze", "aten::slice", "aten::select", "aten::narrow", "aten::_unsafe_view",
            "aten::detach", "aten::alias", "aten::squeeze", "aten::permute", "aten::resolve_neg", "detach",
            "aten::view_as", "aten::_reshape_alias", "aten::lift_fresh", "aten::empty_like"}


def trim(raw: dict, keep_steps: set[str]) -> dict:
    """Drop non-module python frames and most args; keep only the events of ``keep_steps``' span."""
    events = raw["traceEvents"]
    spans = [(e["ts"], e["ts"] + e["dur"]) for e in events
             if e.get("ph") == "X" and e.get("name") in keep_steps]
    lo, hi = min(s for s, _ in spans), max(e for _, e in spans)
    # a view op that made an autograd node (the last forward op carrying a sequence number a backward
    # node refers to) stays: the backward node finds its module through it
    last_fwd: dict[int, int] = {}
    wanted: set[int] = set()
    for k, e in sorted(enumerate(events), key=lambda ke: ke[1].get("ts", 0)):
        a = e.get("args") or {}
        if e.get("cat") == "cpu_op" and "Sequence number" in a:
            if a.get("Fwd thread id", 0) == 0:
                last_fwd[a["Sequence number"]] = k
            else:
                wanted.add(a["Sequence number"])
    makers = {last_fwd[q] for q in wanted if q in last_fwd}
    kept = []
    for k, e in enumerate(events):
        if e.get("ph") in ("s", "f"):  # flows: the ids they carry are in the events' args
            continue
        if e.get("ph") == "X":
            if e.get("cat") == "cpu_op" and e.get("name") in VIEW_OPS and k not in makers:
                continue
            if e.get("cat") == "python_function" and not str(e.get("name", "")).startswith("nn.Module: "):
                continue
            if e["ts"] + e.get("dur", 0) < lo or e["ts"] > hi:
                continue
            if "args" in e:
                e["args"] = {k: v for k, v in e["args"].items() if k in KEEP_ARGS}
        kept.append(e)
    return {**{k: v for k, v in raw.items() if k != "traceEvents"}, "traceEvents": kept}


def child(out: Path, steps: int, accumulation: int, seed: int, wait: int, active: int) -> None:
    import make_real_run as base
    import torch
    import transformers
    from transformers import Trainer, TrainerCallback, TrainingArguments

    from vlm_perf.capture import MetadataCallback

    torch.set_num_threads(1)
    tokenizer = base.build_tokenizer()
    processor = base.build_processor(tokenizer)
    config = base.build_config(tokenizer)
    dataset = base.ListDataset(base.make_dataset(processor, 20 * accumulation, seed))  # same data as the run
    torch.manual_seed(seed)
    model = transformers.Qwen2VLForConditionalGeneration(config)
    raw_path = out / "_raw_trace.json"
    first_active = wait + 1  # ProfilerStep# index of the first recorded step (after 1 warmup step)

    prof = torch.profiler.profile(
        activities=[torch.profiler.ProfilerActivity.CPU], record_shapes=True, with_stack=True,
        schedule=torch.profiler.schedule(wait=wait, warmup=1, active=active, repeat=1),
        on_trace_ready=lambda p: p.export_chrome_trace(str(raw_path)))

    class Step(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            prof.step()
            if prof.profiler is not None:  # the metadata goes into the trace only while recording
                prof.add_metadata_json("vlm_perf_first_iteration", "1")  # ProfilerStep#0 = optimizer step 1

    args = TrainingArguments(
        output_dir=str(out / "_trainer"), per_device_train_batch_size=1, gradient_accumulation_steps=accumulation,
        max_steps=steps, logging_steps=1, learning_rate=1e-3, lr_scheduler_type="constant", warmup_steps=0,
        weight_decay=0.0, max_grad_norm=1.0, save_strategy="no", report_to=[], use_cpu=True, seed=seed,
        data_seed=seed, dataloader_num_workers=0, remove_unused_columns=False, disable_tqdm=False)
    trainer = Trainer(model=model, args=args, train_dataset=dataset, data_collator=base.collate,
                      callbacks=[MetadataCallback(out / "metadata", rank=0), Step()])
    with prof:
        trainer.train()
    raw = json.loads(raw_path.read_text())
    keep = {f"ProfilerStep#{k}" for k in range(first_active, first_active + active)}
    trimmed = trim(raw, keep)
    (out / "trace").mkdir(exist_ok=True)
    with gzip.GzipFile(out / "trace" / "rank0.pt.trace.json.gz", "wb", mtime=0) as fh:
        fh.write(json.dumps(trimmed, separators=(",", ":")).encode())
    raw_path.unlink()
    base.write_config(config, out / "config.json")  # + attn_implementation (eager)
    # the same microbatches as the bundled run, iteration by iteration
    bundled = (ROOT / "sample_logs" / "qwen2-vl-tiny-real" / "metadata" / "metadata-rank00000.jsonl").read_text()
    mine = (out / "metadata" / "metadata-rank00000.jsonl").read_text().splitlines()
    assert bundled.splitlines()[:len(mine)] == mine, "the traced run must train the bundled run's microbatches"
    print("versions:", torch.__version__, transformers.__version__)


RUN_YAML = """\
# REAL profiled run (tiny, CPU; not synthetic): made by scripts/make_real_trace.py (seed {seed}); see README.md
model: config.json
num_gpus: 1
dtype: fp32
frozen: []
log_interval: 1
synthetic: false
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=ROOT / "sample_logs" / "qwen2-vl-tiny-trace")
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--accumulation", type=int, default=4)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--wait", type=int, default=1)
    ap.add_argument("--active", type=int, default=2)
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    out = a.out.resolve()
    if a.child:
        child(out, a.steps, a.accumulation, a.seed, a.wait, a.active)
        return
    out.mkdir(parents=True, exist_ok=True)
    for old in ("trace", "metadata"):
        for f in (out / old).glob("*"):
            f.unlink()
    # the console of the profiled training is the run's log, as in make_real_run.py, so that `vlm-perf report`
    # reads the same run the trace profiled
    from tiny_vlm import run_child

    run_child(__file__, out, ["--steps", str(a.steps), "--accumulation", str(a.accumulation), "--seed", str(a.seed),
                              "--wait", str(a.wait), "--active", str(a.active)], what="profiled training")
    (out / "run.yaml").write_text(RUN_YAML.format(seed=a.seed))
    from tiny_vlm import remove_tree

    remove_tree(out / "_trainer")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
