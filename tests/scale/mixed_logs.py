"""A multi-file run for the map/combine tests: restarts (banner and step-back, inside and across
files), replayed iterations, hard-wrapped Megatron records, several formats (Megatron console,
progress.txt, HF console, LLaMA-Factory JSONL, NeMo 2, torchtitan), bad lines, a record-less
launcher log, a gzip file. Hand-written lines; the format fixtures are the ones shaped like public
logs in tests/ingest/logs/fixtures/."""

from __future__ import annotations

import gzip
import shutil
from pathlib import Path

from tests.support import megatron_line

FIXTURES = Path(__file__).resolve().parents[1] / "ingest" / "logs" / "fixtures"


def mline(it: int, loss: float, prefix: str = "[default0]:", extra: str = "") -> str:
    """A Megatron-LM line as torchrun's rank-0 output prints it (``extra`` fields after the grad norm)."""
    return megatron_line(it, loss, prefix, after_grad_norm=extra)


BANNER = "[default0]: successfully loaded checkpoint from /ckpt [ t 1/1, p 1/1 ] at iteration {}"


def _wrapped(it: int, loss: float, width: int = 80) -> list[str]:
    full = mline(it, loss, prefix="")
    return [full[i:i + width] for i in range(0, len(full), width)]


def write_run(root: Path) -> list[Path]:
    """The run's files, in the order a user would pass them (attempt by attempt)."""
    root.mkdir(parents=True, exist_ok=True)
    texts: dict[str, list[str]] = {
        # attempt 1: run settings, two ranks printing, a wrapped record, bad lines, an unknown
        # non-numeric field (a note), then a restart banner and replayed iterations 30-40
        "attempt1.log": ["[default0]:  log_interval .................................... 10",
                         "[default0]:  micro_batch_size ................................ 1", "noise line"]
        + [mline(i, 3.0 - i / 100, p) for i in (10, 20, 30) for p in ("[default0]:", "[default1]:")]
        + _wrapped(40, 2.6)
        + [mline(50, 2.5, extra=" ETA: 0:03:00 |"),
           "[default0]: [2024-05-01 12:00:00] iteration       55/    1000 | consumed samples: 4x0 | lm loss: 2.4",
           "[default0]: [2024-05-01 12:00:00] iteration       56/    1000 | lm loss: 2.4E+00 | grad norm: nan |",
           "\x1b[32m" + mline(60, 2.3) + "\x1b[0m",
           BANNER.format(20)]
        + [mline(i, 2.0 - i / 100) for i in (30, 40, 50)],
        # a launcher log without any training record: skipped with a note
        "nccl.log": ["NCCL INFO Bootstrap : Using eth0", "NCCL INFO NET/Plugin: No plugin found", ""],
        # attempt 2: banner at the top, no step back (resumed at 50); a traceback at the end
        "attempt2.log": ["[launcher] restart", BANNER.format(50), mline(60, 1.5), mline(70, 1.4),
                         "Traceback (most recent call last):", "  File \"train.py\", line 1",
                         "{'loss': 1.5, 'learning_rate': 1e-05, 'epoch'", "x" * (1 << 20) + " iteration 71 |"],
        # attempt 3 steps back across files without a banner and ends with one
        "attempt3.log": [mline(65, 1.3), mline(70, 1.2) + "\r" + mline(75, 1.15), mline(80, 1.1),
                         BANNER.format(80)],
    }
    out: list[Path] = []
    for name, lines in texts.items():
        p = root / name
        p.write_text("\n".join(lines) + "\n", encoding="utf-8")
        out.append(p)
    bad = root / "attempt4.log"  # invalid UTF-8 bytes in a record line
    bad.write_bytes((mline(90, 1.0) + "\n").encode() + b"[default0]: \xff\xfe garbage\n" + (mline(100, 0.9) + "\n").encode())
    out.append(bad)
    gz = root / "attempt5.log.gz"
    with gzip.open(gz, "wt") as fh:
        fh.write("\n".join([BANNER.format(95), mline(100, 0.85), mline(110, 0.8)]) + "\n")
    out.append(gz)
    for name in ("progress.txt", "hf_console.log", "trainer_log.jsonl", "nemo2.log", "torchtitan.log"):
        target = root / name
        shutil.copy(FIXTURES / name, target)
        out.append(target)
    return out
