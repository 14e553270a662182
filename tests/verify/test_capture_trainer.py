"""`vlm_perf.capture.batch_metadata` and `MetadataCallback` with a real transformers `Trainer` (and TRL).

The Trainer tests train tiny randomly initialised models for a few steps on CPU and compare what the
callback recorded with what was fed in: the data set's own lengths and grids (every sample is used
exactly once, so the multisets must match), the Trainer's own step count, and the microbatch indices
implied by gradient accumulation.
"""

from __future__ import annotations

import json
from collections import Counter

import pytest

np = pytest.importorskip("numpy")


torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
pytest.importorskip("accelerate")  # the Trainer needs it

from .measure import IMAGE_TOKEN, VISION_END, VISION_START, build_model  # noqa: E402


def _vlm_samples(n: int, seed: int = 0) -> list[dict]:
    """``n`` samples of 5-30 text tokens and 0-2 images (grids in patches, merge 2, patch 2)."""
    g = torch.Generator().manual_seed(seed)
    rng = np.random.default_rng(seed)
    grids = [(1, 2, 2), (1, 4, 2), (1, 4, 6), (1, 2, 8)]
    out = []
    for _ in range(n):
        ids: list[int] = torch.randint(0, 900, (int(rng.integers(5, 30)),), generator=g).tolist()
        types = [0] * len(ids)
        rows = [grids[int(i)] for i in rng.integers(0, len(grids), int(rng.integers(0, 3)))]
        for t, h, w in rows:
            k = t * h * w // 4
            ids += [VISION_START] + [IMAGE_TOKEN] * k + [VISION_END]
            types += [0] + [1] * k + [0]
        item = {"input_ids": ids, "mm_token_type_ids": types, "grids": rows}
        if rows:
            item["pixel_values"] = torch.randn(sum(t * h * w for t, h, w in rows), 3 * 2 * 2 * 2, generator=g)
        out.append(item)
    return out


def _collate(items):
    length = max(len(it["input_ids"]) for it in items)
    pad = lambda seq, v: seq + [v] * (length - len(seq))  # noqa: E731
    batch = {"input_ids": torch.tensor([pad(it["input_ids"], 0) for it in items]),
             "attention_mask": torch.tensor([pad([1] * len(it["input_ids"]), 0) for it in items]),
             "mm_token_type_ids": torch.tensor([pad(it["mm_token_type_ids"], 0) for it in items])}
    batch["labels"] = batch["input_ids"].masked_fill(batch["attention_mask"] == 0, -100)
    grids = [g for it in items for g in it["grids"]]
    if grids:
        batch["pixel_values"] = torch.cat([it["pixel_values"] for it in items if it["grids"]])
        batch["image_grid_thw"] = torch.tensor(grids)
    return batch


def _args(tmp_path, **over):
    kw = dict(output_dir=str(tmp_path / "out"), per_device_train_batch_size=2, gradient_accumulation_steps=3,
              max_steps=4, logging_steps=1, learning_rate=1e-3, save_strategy="no", report_to=[], use_cpu=True,
              seed=0, dataloader_num_workers=0, remove_unused_columns=False, disable_tqdm=True)
    kw.update(over)
    return transformers.TrainingArguments(**kw)


def _rows(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """Qwen2-VL tiny, batch 2 (padded), GA 3, 4 steps = 24 samples = the whole data set once;
    evaluation every 2 steps (its forwards must not be recorded)."""
    from vlm_perf.capture import MetadataCallback

    tmp_path = tmp_path_factory.mktemp("trainer")
    torch.set_num_threads(1)
    model = build_model("qwen2_vl", dtype=torch.float32)
    model.train()
    data = _vlm_samples(24)
    callback = MetadataCallback()
    trainer = transformers.Trainer(model=model, args=_args(tmp_path, eval_strategy="steps", eval_steps=2,
                                                           per_device_eval_batch_size=2),
                                   train_dataset=data, eval_dataset=data[:4], data_collator=_collate,
                                   callbacks=[callback])
    trainer.train()
    return tmp_path, data, callback, trainer


def test_callback_records_every_microbatch_of_every_step(trained):
    tmp_path, data, callback, trainer = trained
    shard = tmp_path / "out" / "metadata" / "metadata-rank00000.jsonl"  # default: <output_dir>/metadata
    rows = _rows(shard)
    assert trainer.state.global_step == 4
    assert [(r["iteration"], r["microbatch"]) for r in rows] == [(i, m) for i in range(1, 5) for m in range(3)]
    assert callback.microbatches == 12 and callback.writer is None  # closed at on_train_end
    assert all(r["dp_rank"] == 0 and r["samples"] == 2 and r["schema_version"] == 1 for r in rows)
    # what was fed in: every sample exactly once (one epoch), in the sampler's order
    assert Counter(n for r in rows for n in r["seq_lens"]) == Counter(len(d["input_ids"]) for d in data)
    assert Counter(tuple(g) for r in rows for g in r.get("image_grid_thw", [])) == Counter(
        g for d in data for g in d["grids"])
    for r in rows:  # padded to the longer row of the microbatch
        assert r["padded_tokens"] == 2 * max(r["seq_lens"])
    # the iteration is the step HF logs: the log history's steps are 1..4
    assert [h["step"] for h in trainer.state.log_history if "loss" in h] == [1, 2, 3, 4]


def test_recorded_metadata_reads_back_as_the_trained_tokens(trained):
    from vlm_perf.ingest.metadata import iteration_stats

    tmp_path, data, _, _ = trained
    res = iteration_stats(tmp_path / "out" / "metadata")
    assert res.frame["iteration"].to_list() == [1, 2, 3, 4]
    assert res.frame["microbatches"].to_list() == [3, 3, 3, 3]
    assert int(res.frame["lm_tokens"].sum()) == sum(len(d["input_ids"]) for d in data)
    assert int(res.frame["vision_patches"].sum()) == sum(t * h * w for d in data for t, h, w in d["grids"])


def test_callback_custom_path_rank_and_disabled(tmp_path):
    from vlm_perf.capture import MetadataCallback

    torch.set_num_threads(1)
    model = build_model("qwen2_vl", dtype=torch.float32)
    data = _vlm_samples(4, seed=3)
    on, off = MetadataCallback(tmp_path / "meta", rank=5), MetadataCallback(tmp_path / "never", enabled=False)
    trainer = transformers.Trainer(model=model, args=_args(tmp_path, gradient_accumulation_steps=1, max_steps=2),
                                   train_dataset=data, data_collator=_collate, callbacks=[on, off])
    trainer.train()
    rows = _rows(tmp_path / "meta" / "metadata-rank00005.jsonl")
    assert [(r["iteration"], r["microbatch"], r["dp_rank"]) for r in rows] == [(1, 0, 5), (2, 0, 5)]
    assert not (tmp_path / "never").exists()
    # the hook is gone after training: a later forward records nothing
    batch = _collate(data[:2])
    model.train()
    model(**batch)
    assert len(_rows(tmp_path / "meta" / "metadata-rank00005.jsonl")) == 2


def test_trl_sft_trainer_padding_free(tmp_path):
    """TRL's SFTTrainer (padding_free: documents packed into one row, position ids restart)."""
    trl = pytest.importorskip("trl")
    datasets = pytest.importorskip("datasets")
    from vlm_perf.capture import MetadataCallback

    torch.set_num_threads(1)
    config = transformers.Qwen2Config(vocab_size=1000, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                      num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=512)
    torch.manual_seed(0)
    model = transformers.Qwen2ForCausalLM(config)
    rng = np.random.default_rng(1)
    lengths = [int(n) for n in rng.integers(4, 40, 16)]
    ds = datasets.Dataset.from_dict({"input_ids": [[int(x) for x in rng.integers(1, 998, n)] for n in lengths]})

    tokenizers = pytest.importorskip("tokenizers")
    vocab = {f"w{i}": i for i in range(998)} | {"<pad>": 998, "</s>": 999}
    backend = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab, unk_token="w0"))
    tok = transformers.PreTrainedTokenizerFast(tokenizer_object=backend, pad_token="<pad>", eos_token="</s>")

    cfg = trl.SFTConfig(output_dir=str(tmp_path / "out"), per_device_train_batch_size=4,
                        gradient_accumulation_steps=2, max_steps=2, logging_steps=1, report_to=[], use_cpu=True,
                        save_strategy="no", padding_free=True, max_length=None, dataset_kwargs={"skip_prepare_dataset": True},
                        remove_unused_columns=False, disable_tqdm=True, seed=0)
    trainer = trl.SFTTrainer(model=model, args=cfg, train_dataset=ds, processing_class=tok,
                             callbacks=[MetadataCallback(tmp_path / "meta", rank=0)])
    trainer.train()
    rows = _rows(tmp_path / "meta" / "metadata-rank00000.jsonl")
    assert [(r["iteration"], r["microbatch"]) for r in rows] == [(1, 0), (1, 1), (2, 0), (2, 1)]
    assert all(r["samples"] == 1 for r in rows)  # one packed row per microbatch
    assert Counter(n for r in rows for n in r["seq_lens"]) == Counter(lengths)
    assert all(r["padded_tokens"] == sum(r["seq_lens"]) for r in rows)


def test_short_last_accumulation_and_resume_from_checkpoint(tmp_path):
    """10 samples, GA 4, one epoch: steps of 4, 4 and 2 microbatches. Then a resumed job (checkpoint at
    step 2, a fresh Trainer with resume_from_checkpoint) continues the numbering from the Trainer's
    restored global_step and appends to the same shard."""
    from vlm_perf.capture import MetadataCallback

    torch.set_num_threads(1)
    data = _vlm_samples(10, seed=5)
    shard = tmp_path / "meta" / "metadata-rank00000.jsonl"
    model = build_model("qwen2_vl", dtype=torch.float32)
    args = _args(tmp_path, per_device_train_batch_size=1, gradient_accumulation_steps=4, max_steps=-1,
                 num_train_epochs=1)
    transformers.Trainer(model=model, args=args, train_dataset=data, data_collator=_collate,
                         callbacks=[MetadataCallback(tmp_path / "meta", rank=0)]).train()
    rows = _rows(shard)
    assert [(r["iteration"], r["microbatch"]) for r in rows] == [(1, m) for m in range(4)] + [
        (2, m) for m in range(4)] + [(3, 0), (3, 1)]
    assert Counter(n for r in rows for n in r["seq_lens"]) == Counter(len(d["input_ids"]) for d in data)

    shard2 = tmp_path / "meta2" / "metadata-rank00000.jsonl"
    args = _args(tmp_path / "ckpt", per_device_train_batch_size=1, gradient_accumulation_steps=2, max_steps=2,
                 save_strategy="steps", save_steps=2)
    transformers.Trainer(model=build_model("qwen2_vl", dtype=torch.float32), args=args, train_dataset=data,
                         data_collator=_collate, callbacks=[MetadataCallback(tmp_path / "meta2", rank=0)]).train()
    checkpoint = tmp_path / "ckpt" / "out" / "checkpoint-2"
    assert checkpoint.is_dir()
    args = _args(tmp_path / "ckpt", per_device_train_batch_size=1, gradient_accumulation_steps=2, max_steps=4)
    transformers.Trainer(model=build_model("qwen2_vl", dtype=torch.float32), args=args, train_dataset=data,
                         data_collator=_collate, callbacks=[MetadataCallback(tmp_path / "meta2", rank=0)]).train(
        resume_from_checkpoint=str(checkpoint))
    rows = _rows(shard2)
    assert [(r["iteration"], r["microbatch"]) for r in rows] == [(i, m) for i in range(1, 5) for m in range(2)]


@pytest.mark.slow
def test_two_process_ddp(tmp_path):
    """Two DDP processes (torch.distributed.run, gloo, CPU): one shard per rank, dp_rank from
    args.process_index, the same iterations on both, and together every sample exactly once."""
    import subprocess
    import sys
    from pathlib import Path

    worker = Path(__file__).with_name("ddp_capture_worker.py")
    for _attempt in (1, 2):  # gloo's threads can abort a rank at interpreter exit (SIGABRT): one fresh retry
        out = tmp_path / f"out{_attempt}"
        r = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
                            str(worker), str(out)], capture_output=True, text=True, timeout=300)
        if r.returncode == 0 or "terminate called without an active exception" not in r.stderr:
            break
    if r.returncode and ("gloo" in r.stderr.lower() and "not available" in r.stderr.lower()):
        pytest.skip("torch without gloo")
    assert r.returncode == 0, r.stderr[-3000:]
    shards = sorted((out / "metadata").iterdir())
    assert [p.name for p in shards] == ["metadata-rank00000.jsonl", "metadata-rank00001.jsonl"]
    rows = [_rows(p) for p in shards]
    for rank, shard in enumerate(rows):
        assert [(r["iteration"], r["microbatch"], r["dp_rank"]) for r in shard] == [
            (i, m, rank) for i in (1, 2) for m in (0, 1)]
    data = _vlm_samples(16)
    assert Counter(n for shard in rows for r in shard for n in r["seq_lens"]) == Counter(
        len(d["input_ids"]) for d in data)


def test_callback_records_trainability_of_a_lora_run(tmp_path):
    """A LoRA run under the Trainer: trainability.json says what trained; read back, it gives the same FLOPs as
    the adapter config PEFT saved."""
    peft = pytest.importorskip("peft")
    from vlm_perf.arch import spec_from_config
    from vlm_perf.arch.observed import observed_trainability
    from vlm_perf.arch.trainability import Trainability
    from vlm_perf.capture import MetadataCallback
    from vlm_perf.flops.regime import regime_flops
    from vlm_perf.ingest.adapter_config import read_adapter_config, read_trainability_record
    from vlm_perf.stats import BatchStats

    torch.set_num_threads(1)
    base = build_model("qwen2_vl", dtype=torch.float32)
    model = peft.get_peft_model(base, peft.LoraConfig(r=4, target_modules=r".*language_model.*\.(q_proj|v_proj)",
                                                      modules_to_save=["lm_head"]))
    data = _vlm_samples(4, seed=5)
    trainer = transformers.Trainer(model=model, args=_args(tmp_path, gradient_accumulation_steps=1, max_steps=2,
                                                           gradient_checkpointing=True),
                                   train_dataset=data, data_collator=_collate, callbacks=[MetadataCallback()])
    trainer.train()
    assert sorted(p.name for p in (tmp_path / "out" / "metadata").iterdir()) == ["metadata-rank00000.jsonl"]
    record = read_trainability_record(tmp_path / "out")
    assert record.input_require_grads  # gradient checkpointing installs the input hook
    assert record.adapter is not None and record.adapter.modules_to_save == ("lm_head",)
    assert any("lora_A" in n for n in record.requires_grad)
    model.save_pretrained(tmp_path / "adapter")
    spec = spec_from_config(base.config.to_dict(), name="tiny")
    stats = BatchStats.from_batch(seq_lens=[40], image_grids=[(1, 4, 6)], spec=spec)
    observed = observed_trainability(spec, record.requires_grad, adapter=record.adapter,
                                     input_require_grads=record.input_require_grads).trainability
    declared = Trainability.build(adapter=read_adapter_config(tmp_path / "adapter"), input_require_grads=True)
    assert regime_flops(spec, stats, observed).total == regime_flops(spec, stats, declared).total
    # the adapter's parameters (LoRA pairs + the lm_head copy modules_to_save trains) are PEFT's own count
    assert regime_flops(spec, stats, declared).adapter_params == sum(
        p.numel() for p in model.parameters() if p.requires_grad)
