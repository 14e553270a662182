"""What each log file states about its run, beyond the iteration lines: the evidence the checks
of `vlm_perf.analysis.evidence` cross-examine.

One bounded pass per text log (`vlm_perf.ingest.logs.reader.line_frames`: memory bounded by the block
size, not the file) keeps only the lines that match a cheap pre-filter, then reads:

* the arguments block(s) (Megatron ``  name ........ value``; every key, not only the ones the run
  configuration uses), per file: two files with different arguments are two runs;
* parameter counts as frameworks print them: Megatron ``number of parameters on (tensor, pipeline)
  model parallel rank (T, P): N`` (per model-parallel shard), HF Trainer ``Number of trainable
  parameters = N`` / ``Total params``-style lines;
* memory reports, per rank: Megatron-LM ``[Rank R] (after K iterations) memory (MB) | allocated: x |
  max allocated: x | reserved: x | max reserved: x`` (MiB: the framework divides by 1024 x 1024) and
  Megatron-Bridge ``... memory (GB) | mem-allocated-gigabytes: x | mem-max-allocated-gigabytes: x |
  ... | mem-max-reserved-gigabytes: x`` (decimal GB: divided by 1e9). A launcher prefix before
  ``[Rank R]`` (``p4/0 ``, ``[default3]:``) is allowed;
* the peak an MFU was divided by, where the framework prints it: ms-swift's ``perf_log`` callback
  (``swift/callbacks/perf_log.py``, ``on_init_end``) logs ``Specify theoretical max TFLOPS through ENV
  'DEVICE_TFLOPS'. [989 TFLOPS]`` or, after timing 8192x8192 matmuls, ``Estimate test finished.
  [7.9137353585254075 TFLOPS] Device count: [1]`` (modelscope/ms-swift PR #6434's log); its MFU divides by
  that value x the device count;
* the Hugging Face Trainer's end-of-run ``log_metrics`` line ``  total_flos  =  15GF`` (also LLaMA-Factory's
  console), where the number is ``int(total_flos) >> 30`` (transformers ``metrics_format``: FLOPs / 2**30,
  rounded down).

Structured logs (JSON, TensorBoard, W&B CSV) are not scanned: they carry no such lines.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable

import polars as pl

from ..remote import as_path
from .logs.reader import line_frames
from .logs.timers import is_text_log

#: lines worth a Python look (one regex over each frame, vectorised)
_PREFILTER = (r"\s\.{3,}\s|memory \((?:MB|GB|GiB)\)|(?i:parameters)|TFLOPS\]|total_flos")
_ARG = re.compile(r"(?:^|[\]:]\s*|^\s*\d+:\s*)\s*([A-Za-z_][\w.-]*)\s\.{3,}\s(\S.*?)\s*$")
_MEMORY = re.compile(r"\[Rank (\d+)\] \(after (\d+) iterations\) memory \((MB|GB|GiB)\)(.*)$")
_MEMORY_FIELD = re.compile(r"\|\s*([A-Za-z][A-Za-z -]*?)\s*:\s*([0-9][0-9.eE+-]*)")
_MEGATRON_PARAMS = re.compile(r"number of parameters on \(tensor, pipeline\) model parallel rank "
                              r"\((\d+), (\d+)\):\s*([0-9][0-9,]*)")
_HF_PARAMS = re.compile(r"(?i)\b(number of trainable parameters|trainable params|total params|"
                        r"number of parameters|total parameters)\s*[=:]\s*([0-9][0-9,]*(?:\.\d+)?)\s*([KMBT])?\b")
#: ms-swift perf_log: the TFLOP/s per device its MFU divides by (DEVICE_TFLOPS, or a measured matmul rate)
_SWIFT_PEAK = re.compile(r"(DEVICE_TFLOPS'\.|Estimate test finished\.)\s*\[([0-9][0-9.]*(?:[eE][-+]?\d+)?) TFLOPS\]"
                         r"(?:\s*Device count:\s*\[(\d+)\])?")
#: transformers Trainer.log_metrics: ``total_flos = <int(total_flos) >> 30>GF``
_TOTAL_FLOS_GF = re.compile(r"\btotal_flos\s*=\s*(\d+)GF\b")
_SCALE = {"K": 1e3, "M": 1e6, "B": 1e9, "T": 1e12}
#: bytes per unit of each memory report (Megatron-LM divides by 1024**2; Megatron-Bridge by 1e9)
MEMORY_UNIT_BYTES = {"MB": 1024.0 ** 2, "GB": 1e9, "GiB": 1024.0 ** 3}
_MAX_ALLOCATED = ("max allocated", "mem-max-allocated-gigabytes")
_MAX_RESERVED = ("max reserved", "mem-max-reserved-gigabytes")
#: most values kept per kind and file (a log printing one on every line cannot grow the facts)
MAX_FACTS = 10_000


@dataclass
class FileFacts:
    """What one log file states besides its iteration lines."""

    path: str
    arguments: dict[str, str] = field(default_factory=dict)  # first value of each key in the arguments block(s)
    argument_lines: dict[str, int] = field(default_factory=dict)  # key -> line of that first value
    #: (kind, count, line): kind "megatron:T,P" (one model-parallel shard) or "trainable" / "total"
    parameter_counts: list[tuple[str, int, int]] = field(default_factory=list)
    #: (rank, iteration, max_allocated_bytes, max_reserved_bytes, unit, line)
    memory: list[tuple[int, int, float | None, float | None, str, int]] = field(default_factory=list)
    #: (TFLOP/s per device, device count printed or None, source "DEVICE_TFLOPS" | "measured", line): the peak
    #: ms-swift's perf_log divides its MFU by
    device_peaks: list[tuple[float, int | None, str, int]] = field(default_factory=list)
    #: (n, line) of each ``total_flos = nGF`` console line: total_flos in [n * 2**30, (n + 1) * 2**30)
    total_flos_gf: list[tuple[int, int]] = field(default_factory=list)


def _parameter_count(text: str, line: int) -> tuple[str, int, int] | None:
    m = _MEGATRON_PARAMS.search(text)
    if m:
        return f"megatron:{m.group(1)},{m.group(2)}", int(m.group(3).replace(",", "")), line
    m = _HF_PARAMS.search(text)
    if m:
        kind = "trainable" if "trainable" in m.group(1).lower() else "total"
        value = float(m.group(2).replace(",", "")) * _SCALE.get(m.group(3) or "", 1.0)
        return kind, int(round(value)), line
    return None


def _memory(text: str, line: int) -> tuple[int, int, float | None, float | None, str, int] | None:
    m = _MEMORY.search(text)
    if not m:
        return None
    unit = m.group(3)
    fields = {}
    for key, value in _MEMORY_FIELD.findall(m.group(4)):
        try:
            number = float(value)
        except ValueError:  # a garbled value ("1e400...") is left out, never an error
            continue
        if math.isfinite(number) and number >= 0:
            fields[key.strip().lower()] = number
    scale = MEMORY_UNIT_BYTES[unit]
    allocated = next((fields[k] * scale for k in _MAX_ALLOCATED if k in fields), None)
    reserved = next((fields[k] * scale for k in _MAX_RESERVED if k in fields), None)
    if allocated is None and reserved is None:
        return None
    return int(m.group(1)), int(m.group(2)), allocated, reserved, unit, line


def scan_lines(path: str, lines: Iterable[tuple[int, str]], facts: FileFacts | None = None) -> FileFacts:
    """`FileFacts` of ``(line number, text)`` pairs (pre-filtered or not), added to ``facts`` if given."""
    facts = facts if facts is not None else FileFacts(path)
    for line, text in lines:
        if "TFLOPS]" in text:
            peak = _SWIFT_PEAK.search(text)
            if peak is not None:
                value = float(peak.group(2))
                if math.isfinite(value) and value > 0 and len(facts.device_peaks) < MAX_FACTS:
                    source = "DEVICE_TFLOPS" if peak.group(1).startswith("DEVICE") else "measured"
                    facts.device_peaks.append((value, int(peak.group(3)) if peak.group(3) else None, source, line))
                continue
        if "total_flos" in text:
            gf = _TOTAL_FLOS_GF.search(text)
            if gf is not None:
                if len(facts.total_flos_gf) < MAX_FACTS:
                    facts.total_flos_gf.append((int(gf.group(1)), line))
                continue
        if "memory (" in text:
            mem = _memory(text, line)
            if mem is not None:
                if len(facts.memory) < MAX_FACTS:
                    facts.memory.append(mem)
                continue
        if "arameters" in text or "params" in text.lower():
            count = _parameter_count(text, line)
            if count is not None:
                if len(facts.parameter_counts) < MAX_FACTS:
                    facts.parameter_counts.append(count)
                continue
        m = _ARG.search(text)
        if m and m.group(1) not in facts.arguments and len(facts.arguments) < MAX_FACTS:
            facts.arguments[m.group(1)] = m.group(2)[:200]
            facts.argument_lines[m.group(1)] = line
    return facts


def read_file_facts(path: str | Path) -> FileFacts:
    """`FileFacts` of one log file (empty for a structured log)."""
    path = as_path(path)
    if not is_text_log(path):
        return FileFacts(str(path))
    facts = FileFacts(str(path))
    for frame in line_frames(path):
        hits = frame.filter(pl.col("text").str.contains(_PREFILTER).fill_null(False))
        scan_lines(str(path), hits.select("line", "text").iter_rows(), facts)
    return facts


def read_log_facts(paths: Iterable[str | Path]) -> list[FileFacts]:
    """`FileFacts` of every log file, in the order given."""
    return [read_file_facts(p) for p in paths]
