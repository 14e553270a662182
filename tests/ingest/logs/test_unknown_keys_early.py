"""Unknown Megatron keys extracted batch by batch (``parser.EARLY_UNKNOWN``) against the whole-file
``megatron.discover_unknown`` path it replaced: the same records, views and diagnostics (notes and
renames included) on generated logs with unknown keys (frequent, rare, colliding with known columns,
damaged spellings, non-numbers, truncated values), over several batches; fuzzed."""

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from polars.testing import assert_frame_equal

from vlm_perf.ingest.logs import parse_logs, parser

EXTRA = ["| mtp_1 loss: {v} ", "| z loss: {v} ", "| lm loss value: {v} ", "| eta: 0:03:{i:02d} ", "| loss: {v} ",
         "| text: {v} ", "| tokens: 1,2{i}4 ", "|  load_balancing_loss: {v} ", "| iteration time: {v} ",
         "| learning_rate: {v} ", "| grad norm x: nan ", "| aux_loss: {x} ", "| aux_loss: {x} "]
COMMON = ["| load_balancing_loss: {v} ", "| z_loss: {v} "]  # frequent: named before their rare look-alikes


def mline(it, extras, rng, prefix="", trunc=False):
    body = "".join(e.format(v=f"{rng.random():.4f}", i=it % 60, x=rng.choice(["n/a", f"{rng.random():.3f}"]))
                   for e in extras)
    line = (f"{prefix} [2025-01-01 00:00:{it % 60:02d}] iteration {it:8d}/    9999 | consumed samples: {it * 8:10d} | "
            f"elapsed time per iteration (ms): {900 + it % 7:.1f} | lm loss: {1 + 1 / it:.6E} {body}| loss scale: 1.0 |")
    return line[: len(line) - 9] if trunc else line


def generated(seed, n=400):
    rng = random.Random(seed)
    out = []
    for it in range(1, n + 1):
        k = rng.random()
        extras = rng.sample(EXTRA, rng.randint(0, 3)) if k < 0.7 else []
        if k < 0.5:
            extras = COMMON + [e for e in extras if e not in COMMON]
        prefix = "[default1]:" if rng.random() < 0.05 else ""
        line = mline(it, extras, rng, prefix, trunc=rng.random() < 0.03)
        if rng.random() < 0.03:
            line = line.replace("lm loss", "lm l\u00f6ss")  # non-ASCII: the slow path
        out.append(line)
        if rng.random() < 0.2:
            out.append("  warnings.warn(")
    return "\n".join(out) + "\n"


def both(path, monkeypatch):
    monkeypatch.setattr(parser, "EARLY_UNKNOWN", False)
    want = parse_logs([path])
    monkeypatch.setattr(parser, "EARLY_UNKNOWN", True)
    return parse_logs([path]), want


def assert_same(got, want):
    assert_frame_equal(got.raw, want.raw, check_exact=True)
    assert_frame_equal(got.iterations, want.iterations, check_exact=True)
    assert got.diagnostics.to_dict() == want.diagnostics.to_dict()


@pytest.mark.parametrize("batch_rows", [37, 1 << 20])
def test_generated_logs_with_unknown_keys(tmp_path, monkeypatch, batch_rows):
    monkeypatch.setattr(parser, "BATCH_ROWS", batch_rows)
    monkeypatch.setattr(parser, "PROBE_ROWS", 50)
    for seed in range(3):
        path = tmp_path / f"moe{seed}.log"
        path.write_text(generated(seed))
        got, want = both(path, monkeypatch)
        assert_same(got, want)
        # what the log exercises: kept keys, a rename by frequency, a never-number, partial rows
        assert {"load_balancing_loss", "z_loss", "z_loss_extra", "aux_loss"} <= set(want.raw.columns)
        assert any("not a number" in n for n in want.diagnostics.notes)
        assert want.diagnostics.partial_count > 0


@settings(derandomize=True, deadline=None, max_examples=40)
@given(st.integers(0, 10_000), st.sampled_from([13, 64, 1 << 20]))
def test_fuzz_unknown_keys(tmp_path_factory, seed, batch_rows):
    path = tmp_path_factory.mktemp("u") / "m.log"
    path.write_text(generated(seed, n=60))
    old_rows, old_probe, old_flag = parser.BATCH_ROWS, parser.PROBE_ROWS, parser.EARLY_UNKNOWN
    parser.BATCH_ROWS, parser.PROBE_ROWS = batch_rows, 20
    try:
        parser.EARLY_UNKNOWN = False
        want = parse_logs([path])
        parser.EARLY_UNKNOWN = True
        got = parse_logs([path])
    finally:
        parser.BATCH_ROWS, parser.PROBE_ROWS, parser.EARLY_UNKNOWN = old_rows, old_probe, old_flag
    assert_same(got, want)
