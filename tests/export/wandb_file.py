"""Read an offline W&B run file (``run-<id>.wandb``) back: each record parsed by wandb's own protobuf schema
(``wandb.proto.wandb_internal_pb2.Record``).

wandb >= 0.30 no longer ships a Python reader of its run files (wandb-core, in Go, reads them for ``wandb sync``),
so the framing is read here, written from the format's description: the leveldb log format (7-byte file header
``:W&B`` + magic 0xBEE1 + version 0; 32 KiB blocks; each record = CRC-32 (zlib, seeded with the CRC of its type
byte) + little-endian uint16 length + type byte FULL/FIRST/MIDDLE/LAST + data; a block's tail shorter than a
record header is zero padding). Every record's checksum is verified, so a misread framing fails loudly rather
than returning other numbers.
"""

from __future__ import annotations

import json
import struct
import zlib
from pathlib import Path

BLOCK = 32768
HEADER = 7
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4


def records(path: Path) -> list[bytes]:
    """Every record's bytes, in order."""
    raw = Path(path).read_bytes()
    ident, magic, version = struct.unpack("<4sHB", raw[:HEADER])
    assert (ident, magic, version) == (b":W&B", 0xBEE1, 0), (ident, hex(magic), version)
    out, pending, pos = [], None, HEADER
    while pos < len(raw):
        left = BLOCK - pos % BLOCK
        if left < HEADER:  # the block's tail is padding
            assert raw[pos:pos + left].strip(b"\0") == b"", "non-zero block padding"
            pos += left
            continue
        checksum, length, kind = struct.unpack("<IHB", raw[pos:pos + HEADER])
        data = raw[pos + HEADER:pos + HEADER + length]
        if kind == 0 and length == 0 and checksum == 0:  # zero-filled rest of a block (preallocated)
            pos += left
            continue
        assert len(data) == length, "truncated record"
        assert zlib.crc32(data, zlib.crc32(bytes([kind]))) & 0xFFFFFFFF == checksum, f"bad checksum at byte {pos}"
        pos += HEADER + length
        if kind == FULL:
            out.append(data)
        elif kind == FIRST:
            pending = data
        elif kind == MIDDLE:
            pending += data
        elif kind == LAST:
            out.append(pending + data)
            pending = None
        else:
            raise AssertionError(f"unknown record type {kind} at byte {pos}")
    return out


def read_run(path: Path) -> dict:
    """{"history": {key: {step: value}}, "config": {key: value}, "summary": {key: value}, "run": {...}, "kinds": [record
    type, ...]} of a run file, decoded with wandb's own protobuf schema."""
    from wandb.proto import wandb_internal_pb2 as pb

    history: dict[str, dict[int, float]] = {}
    config: dict = {}
    summary: dict = {}
    run: dict = {}
    kinds: list[str] = []
    for data in records(path):
        record = pb.Record()
        record.ParseFromString(data)
        kind = record.WhichOneof("record_type")
        kinds.append(kind)
        if kind == "history":
            step = record.history.step.num
            for item in record.history.item:
                key = item.key or "/".join(item.nested_key)
                if not key.startswith("_"):
                    history.setdefault(key, {})[step] = json.loads(item.value_json)
        elif kind == "config":
            for item in record.config.update:
                config[item.key or "/".join(item.nested_key)] = json.loads(item.value_json)
        elif kind == "summary":
            for item in record.summary.update:
                summary[item.key or "/".join(item.nested_key)] = json.loads(item.value_json)
        elif kind == "run":
            run = {"run_id": record.run.run_id, "project": record.run.project, "display_name": record.run.display_name,
                   "tags": list(record.run.tags), "job_type": record.run.job_type}
            for item in record.run.config.update:
                config[item.key or "/".join(item.nested_key)] = json.loads(item.value_json)
    return {"history": history, "config": config, "summary": summary, "run": run, "kinds": kinds}
