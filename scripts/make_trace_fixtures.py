"""Make the small trace fixtures of tests/ingest/test_traces*.py.

    python scripts/make_trace_fixtures.py --hta-trace PATH/nccl_data.json.gz

1. ``tests/ingest/fixtures/traces/hta_ddp_step5.json.gz``: an excerpt of a public GPU trace,
   ``tests/data/nccl_parser_config/nccl_data.json.gz`` of facebookresearch/HolisticTraceAnalysis
   (MIT licence; commit f4d0062c382f, 2026-05-01): a 2-rank DDP training on an A100 (rank 0's
   file), profiled by torch.profiler with CUDA activity. The excerpt keeps the file's top-level keys
   and metadata events and, of its three steps, only ``ProfilerStep#5``: every host event inside
   that step's range, the device events launched from it (by ``correlation``) and the flow events
   of those links. ``args`` keep the ids (``External id``, ``correlation``, ``Sequence number``,
   ``Fwd thread id``, ``device``, ``stream``) and the collective fields (shapes and kernel launch
   parameters are dropped); nothing else is changed.
2. ``tests/ingest/fixtures/traces/nsys_tiny.sqlite``: a tiny Nsight Systems export written from the
   documented schema (docs/traces.md): StringIds, CUPTI_ACTIVITY_KIND_KERNEL / _RUNTIME / _MEMCPY,
   NVTX_EVENTS, with hand-chosen times (the tests state the expected attribution by hand).
"""

from __future__ import annotations

import argparse
import gzip
import json
import sqlite3
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "tests" / "ingest" / "fixtures" / "traces"
HOST_ARGS = ("External id", "correlation", "Sequence number", "Fwd thread id", "cbid")
KERNEL_ARGS = ("External id", "correlation", "device", "stream", "Collective name", "In msg nelems", "Group size")


def hta_excerpt(src: Path, step: str = "ProfilerStep#5") -> dict:
    raw = json.load(gzip.open(src))
    events = raw["traceEvents"]
    s = next(e for e in events if e.get("name") == step)
    lo, hi = s["ts"], s["ts"] + s["dur"]
    host_cats = {"cpu_op", "user_annotation", "cuda_runtime", "cuda_driver", "python_function"}
    host = [e for e in events if e.get("ph") == "X" and e.get("cat") in host_cats and lo <= e["ts"] <= hi]
    corr = {e["args"]["correlation"] for e in host if "correlation" in e.get("args", {})}
    device = [e for e in events if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset",
                                                                            "gpu_user_annotation")
              and (e.get("args", {}).get("correlation") in corr
                   or (e.get("cat") == "gpu_user_annotation" and lo <= e["ts"] <= hi))]
    for e in device:
        if e.get("cat") != "gpu_user_annotation":
            e["args"] = {k: v for k, v in e["args"].items() if k in KERNEL_ARGS}
    for e in host:
        if "args" in e:
            e["args"] = {k: v for k, v in e["args"].items() if k in HOST_ARGS}
    flows = [e for e in events if e.get("ph") in ("s", "f") and (
        (e.get("cat") == "ac2g" and e.get("id") in corr) or (e.get("cat") == "fwdbwd" and lo <= e["ts"] <= hi))]
    meta = [e for e in events if e.get("ph") == "M"]
    return {**{k: v for k, v in raw.items() if k != "traceEvents"}, "traceEvents": meta + host + device + flows}


def nsys_tiny(path: Path) -> None:
    """Times in ns. One thread (gTid = pid 7 << 24 | tid 9) launches 4 kernels + 1 memcpy on device 0:

    NVTX ranges: "step 1" [0, 1000); "vision_tower" [100, 400); "language_model" [400, 800) containing
    "self_attention" [400, 600) and "mlp" [600, 800). Launches (runtime) at 110, 410, 610, 810 (corr 1..4),
    memcpy launched at 50 (corr 5). Kernels: corr1 [150, 350), corr2 [450, 550), corr3 [650, 850),
    corr4 (ncclDevKernel_AllReduce) [800, 950) overlapping corr3 by 50; memcpy [60, 100).
    """
    if path.exists():
        path.unlink()
    db = sqlite3.connect(path)
    db.executescript("""
        CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT NOT NULL);
        CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INTEGER NOT NULL, end INTEGER NOT NULL, deviceId INTEGER,
            contextId INTEGER, streamId INTEGER, correlationId INTEGER, globalPid INTEGER, demangledName INTEGER,
            shortName INTEGER, gridX INTEGER, blockX INTEGER);
        CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME (start INTEGER NOT NULL, end INTEGER NOT NULL, eventClass INTEGER,
            globalTid INTEGER, correlationId INTEGER, nameId INTEGER, returnValue INTEGER);
        CREATE TABLE CUPTI_ACTIVITY_KIND_MEMCPY (start INTEGER NOT NULL, end INTEGER NOT NULL, deviceId INTEGER,
            contextId INTEGER, streamId INTEGER, correlationId INTEGER, globalPid INTEGER, bytes INTEGER,
            copyKind INTEGER);
        CREATE TABLE NVTX_EVENTS (start INTEGER NOT NULL, end INTEGER, eventType INTEGER NOT NULL, rangeId INTEGER,
            category INTEGER, color INTEGER, text TEXT, globalTid INTEGER, endGlobalTid INTEGER, textId INTEGER,
            domainId INTEGER, uint64Value INTEGER, int64Value INTEGER, doubleValue REAL, uint32Value INTEGER,
            int32Value INTEGER, floatValue REAL, jsonTextId INTEGER, jsonText TEXT);
    """)
    strings = {1: "cudaLaunchKernel_v7000", 2: "cudaMemcpyAsync_v3020", 3: "sm90_xmma_gemm_bf16bf16_vision",
               4: "flash_fwd_kernel", 5: "sm90_xmma_gemm_bf16bf16_mlp", 6: "ncclDevKernel_AllReduce_Sum_bf16_RING_LL",
               7: "mlp"}
    db.executemany("INSERT INTO StringIds VALUES (?, ?)", strings.items())
    gtid = (7 << 24) | 9
    db.executemany("INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (?,?,?,?,?,?,?)", [
        (110, 120, 0, gtid, 1, 1, 0), (410, 420, 0, gtid, 2, 1, 0), (610, 620, 0, gtid, 3, 1, 0),
        (810, 820, 0, gtid, 4, 1, 0), (50, 55, 0, gtid, 5, 2, 0)])
    db.executemany("INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (?,?,?,?,?,?,?,?,?,?,?)", [
        (150, 350, 0, 1, 7, 1, 7 << 24, 3, 3, 1, 128), (450, 550, 0, 1, 7, 2, 7 << 24, 4, 4, 1, 128),
        (650, 850, 0, 1, 7, 3, 7 << 24, 5, 5, 1, 128), (800, 950, 0, 1, 21, 4, 7 << 24, 6, 6, 1, 128)])
    db.execute("INSERT INTO CUPTI_ACTIVITY_KIND_MEMCPY VALUES (60, 100, 0, 1, 7, 5, 117440512, 4096, 1)")
    nvtx = [(0, 1000, "step 1", None), (100, 400, "vision_tower", None), (400, 800, "language_model", None),
            (400, 600, "self_attention", None), (600, 800, None, 7)]
    db.executemany("INSERT INTO NVTX_EVENTS (start, end, eventType, text, globalTid, textId) VALUES (?,?,59,?,?,?)",
                   [(s, e, t, gtid, tid) for s, e, t, tid in nvtx])
    db.execute("INSERT INTO NVTX_EVENTS (start, end, eventType, text, globalTid) VALUES (500, NULL, 34, 'mark', ?)",
               (gtid,))
    db.commit()
    db.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hta-trace", type=Path, help="HTA's tests/data/nccl_parser_config/nccl_data.json.gz")
    a = ap.parse_args()
    OUT.mkdir(parents=True, exist_ok=True)
    if a.hta_trace:
        data = json.dumps(hta_excerpt(a.hta_trace), separators=(",", ":")).encode()
        with gzip.GzipFile(OUT / "hta_ddp_step5.json.gz", "wb", mtime=0) as fh:
            fh.write(data)
    nsys_tiny(OUT / "nsys_tiny.sqlite")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
