"""The bounded chunked reader (every input through `compressed.open_maybe_compressed`, cut at newlines)
against the reader it replaced for plain files (one polars ``scan_csv`` of the whole file, batches of
``BATCH_ROWS``): the same line frames, and the same parse (records, both views, diagnostics, per-rank
timing) on a generated log with noise, restarts, hard-wrapped records, CRLF, ``\\r`` redraws, non-ASCII
and a last line without a newline; and the one-segment shortcut of `assign_segments` against its
general path."""

import gzip
import random

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from polars.testing import assert_frame_equal

from vlm_perf.ingest.logs import parse_logs, parser, reader, segments
from vlm_perf.ingest.logs.segments import ORD, assign_segments


def old_line_frames(path, omitted=None):
    """The plain-file reader before this change (whole-file streaming scan), as DataFrames; with
    ``extra_columns="ignore"`` added (without it a 0x1F in the first line raised, before and after)."""
    lf = (pl.scan_csv(path, has_header=False, separator="\x1f", quote_char=None, schema={"text": pl.Utf8},
                      encoding="utf8-lossy", truncate_ragged_lines=True, empty_string_is_null=False,
                      missing_columns="insert", extra_columns="ignore")
          .with_row_index("line", offset=1).with_columns(pl.col("line").cast(pl.Int64)))
    yield from lf.collect_batches(chunk_size=parser.BATCH_ROWS)


def mline(it, total=100, ms=1000.0, prefix=""):
    return (f"{prefix} [2025-01-01 00:00:{it % 60:02d}] iteration {it:8d}/{total:8d} | consumed samples: {it * 8:10d} | "
            f"elapsed time per iteration (ms): {ms:.1f} | learning rate: 1.000000E-04 | global batch size:     8 | "
            f"lm loss: {1 + 1 / it:.6E} | loss scale: 1.0 | grad norm: 0.{it % 97:03d} | "
            f"number of skipped iterations:   0 | number of nan iterations:   0 |")


NOISE = ["", "  warnings.warn(", "(min, max) time across ranks (ms):",
         "    forward-backward ...............................: (1000.00, 1003.00)",
         "[Rank 0] (after 10 iterations) memory (MB) | allocated: 1.0 | max allocated: 2.0",
         "saving checkpoint at iteration      10 to /ckpt", "Traceback (most recent call last):",
         "validation loss at iteration 10 | lm loss value: 1.0", "  world_size ........ 8",
         "caf\u00e9 \u00fcber na\u00efve \u2014 non-ASCII noise", "progress 10%|#   | 1/10"]


def generated_log(seed: int = 0, n: int = 1500) -> str:
    """Invented Megatron-LM log (seed ``seed``): noise, two restarts (a banner, then a step back
    without one), hard-wrapped records, a ``\\r`` redraw, CRLF lines, a launcher prefix."""
    rng = random.Random(seed)
    out, it = [], 0
    for k in range(n):
        it += 1
        if k == n // 3:
            out.append("successfully loaded checkpoint from /ckpt at iteration 100")
            it -= 40
        if k == 2 * n // 3:
            it -= 25
        line = mline(it, ms=900 + rng.random() * 200)
        r = rng.random()
        if r < 0.03:  # hard wrap at a terminal width
            cut = rng.randint(60, len(line) - 20)
            out += [line[:cut], line[cut:]]
        elif r < 0.05:
            out.append("progress\r" + line)
        elif r < 0.07:
            out.append(line + "\r")  # CRLF
        elif r < 0.09:
            out.append(mline(it, ms=1000.0, prefix="[default3]:"))
        else:
            out.append(line)
        if rng.random() < 0.3:
            out.append(rng.choice(NOISE))
    return "\n".join(out)  # no newline after the last line


def assert_same_parse(got, want):
    assert_frame_equal(got.raw, want.raw, check_exact=True)
    assert_frame_equal(got.iterations, want.iterations, check_exact=True)
    assert_frame_equal(got.deduplicated, want.deduplicated, check_exact=True)
    assert got.diagnostics.to_dict() == want.diagnostics.to_dict()
    assert got.run_config == want.run_config
    for name in ("timers", "detector", "nvrx", "rank_steps"):
        assert_frame_equal(getattr(got.rank_timing, name), getattr(want.rank_timing, name), check_exact=True)


@pytest.mark.parametrize("chunk", [1 << 10, 1 << 14, 1 << 24])
def test_generated_log_parses_the_same_as_with_the_whole_file_reader(tmp_path, monkeypatch, chunk):
    path = tmp_path / "train.log"
    path.write_text(generated_log())
    monkeypatch.setattr(parser, "line_frames", old_line_frames)
    want = parse_logs([path])
    monkeypatch.undo()
    monkeypatch.setattr(reader, "CHUNK_BYTES", chunk)
    got = parse_logs([path])
    assert_same_parse(got, want)
    assert want.diagnostics.segments == 3 and want.raw.height > 1400  # the log exercises what it claims
    assert want.diagnostics.ignored.get("joined_continuation", 0) > 0
    gz = tmp_path / "train.log.gz"
    gz.write_bytes(gzip.compress(path.read_bytes()))
    zipped = parse_logs([gz])
    assert_frame_equal(zipped.raw.drop("file"), want.raw.drop("file"), check_exact=True)


def test_separator_byte_in_a_block_s_first_line_is_no_crash(tmp_path, monkeypatch):
    path = tmp_path / "train.log"
    path.write_bytes(b"a\x1fb\n" + mline(1).encode() + b"\nx\x1fy\n" + mline(2).encode() + b"\n")
    monkeypatch.setattr(reader, "CHUNK_BYTES", 8)  # "x\x1fy" starts a block too
    r = parse_logs([path])
    assert r.raw.get_column("iteration").to_list() == [1, 2]
    assert [f.get_column("text").to_list()[0] for f in reader.line_frames(path)][:1] == ["a"]


def _nonblank(frame: pl.DataFrame) -> pl.DataFrame:
    """The rows a parser can use: a stretch of nothing but blank lines may be skipped by the reader (it never
    parses millions of empty lines), so frames are compared on their non-blank lines and line numbers."""
    return frame.filter(pl.col("text").str.strip_chars(" \t\r\n") != "")


def test_line_frames_equal_the_whole_file_read(tmp_path, monkeypatch):
    path = tmp_path / "train.log"
    path.write_bytes(generated_log(seed=1).encode() + b"\n\n\xff\xfe broken utf-8\nlast")
    want = pl.concat(list(old_line_frames(path)))
    for chunk, frame_lines in [(1 << 8, 7), (1 << 12, 1 << 20), (1 << 24, 100)]:
        monkeypatch.setattr(reader, "CHUNK_BYTES", chunk)
        monkeypatch.setattr(reader, "FRAME_LINES", frame_lines)
        frames = list(reader.line_frames(path))
        assert max(f.height for f in frames) <= frame_lines
        assert_frame_equal(_nonblank(pl.concat(frames)), _nonblank(want), check_exact=True)


TEXT = st.lists(st.sampled_from(list("ab |:\r\t\u00e9\x1f") + ["iteration 3/ 9 |"]), max_size=12).map("".join)


@settings(derandomize=True, deadline=None, max_examples=120)
@given(st.lists(TEXT, max_size=40), st.booleans(), st.integers(1, 64))
def test_fuzz_line_frames_equal_the_whole_file_read(tmp_path_factory, lines, final_newline, chunk):
    path = tmp_path_factory.mktemp("r") / "x.log"
    path.write_bytes(("\n".join(lines) + ("\n" if final_newline and lines else "")).encode())
    want = pl.concat(list(old_line_frames(path))) if path.stat().st_size else None
    old = reader.CHUNK_BYTES
    reader.CHUNK_BYTES = chunk
    try:
        frames = list(reader.line_frames(path))
    finally:
        reader.CHUNK_BYTES = old
    if want is None or _nonblank(want).height == 0:
        assert sum(_nonblank(f).height for f in frames) == 0
    else:
        assert_frame_equal(_nonblank(pl.concat(frames)), _nonblank(want), check_exact=True)


@settings(derandomize=True, deadline=None, max_examples=150)
@given(st.lists(st.tuples(st.one_of(st.none(), st.integers(0, 6)), st.sampled_from([None, "0", "1"])),
                min_size=1, max_size=30))
def test_fuzz_one_segment_shortcut_equals_the_general_path(rows):
    df = pl.DataFrame({"iteration": [r[0] for r in rows], "rank_label": [r[1] for r in rows]},
                      schema={"iteration": pl.Int64, "rank_label": pl.Utf8}).with_columns(
        (pl.int_range(0, pl.len(), dtype=pl.Int64) * 1000).alias(ORD))
    got = assign_segments(df, [])
    shortcut = segments._one_segment(df) is not None
    original = segments._one_segment
    segments._one_segment = lambda frame: None
    try:
        want = assign_segments(df, [])
    finally:
        segments._one_segment = original
    assert_frame_equal(got, want, check_exact=True)
    keyed = [r[0] for r in rows if r[0] is not None]
    assert shortcut == all(a <= b for a, b in zip(keyed, keyed[1:]))


def test_aligned_like_keeps_the_chunk_layout():
    import numpy as np

    frame = pl.concat([pl.DataFrame({"a": [1, 2, 3]}), pl.DataFrame({"a": [4, 5]})], rechunk=False)
    col = segments.aligned_like(frame, np.arange(5) * 2, "k")
    assert [c.len() for c in col.get_chunks()] == [3, 2] and col.to_list() == [0, 2, 4, 6, 8]
    out = frame.with_columns(col)
    assert out.n_chunks("all") == [2, 2]
