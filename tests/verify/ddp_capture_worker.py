"""Worker for tests/verify/test_capture_trainer.py::test_two_process_ddp (run under torch.distributed.run).

Each of the 2 processes trains the tiny Qwen2-VL with the HF Trainer (DDP over gloo, CPU) and records
metadata with MetadataCallback() into <out>/metadata/metadata-rank0000{rank}.jsonl.
"""

import sys
from pathlib import Path

import torch
import transformers

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
# import the harness as ``verify`` (tests/ on the path): a third-party top-level ``tests`` package in the
# environment (verl ships one) would shadow ``tests.verify``
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from verify.measure import build_model  # noqa: E402
from verify.test_capture_trainer import _collate, _vlm_samples  # noqa: E402
from vlm_perf.capture import MetadataCallback  # noqa: E402

torch.set_num_threads(1)
args = transformers.TrainingArguments(
    output_dir=sys.argv[1], per_device_train_batch_size=2, gradient_accumulation_steps=2, max_steps=2,
    logging_steps=1, save_strategy="no", report_to=[], use_cpu=True, seed=0, dataloader_num_workers=0,
    remove_unused_columns=False, disable_tqdm=True, ddp_backend="gloo")
trainer = transformers.Trainer(model=build_model("qwen2_vl", dtype=torch.float32), args=args,
                               train_dataset=_vlm_samples(16), data_collator=_collate, callbacks=[MetadataCallback()])
trainer.train()
assert args.world_size == 2
# tear the gloo group down before the interpreter exits: left to interpreter shutdown, its threads
# are destroyed while still joinable and rank 0 can abort ("terminate called without an active exception")
if torch.distributed.is_initialized():
    torch.distributed.barrier()
    torch.distributed.destroy_process_group()
