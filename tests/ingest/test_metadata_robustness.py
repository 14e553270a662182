"""Metadata input that must never crash, hang or silently change a number (issue 9, metadata part).

Every case: without skip_bad a one-line error that starts with ``file:line``; with skip_bad the
line is counted and the good lines still count. A seeded, bounded hypothesis fuzz of the reader.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from vlm_perf.errors import VlmPerfError
from vlm_perf.ingest.metadata_source import BAD_ROW_HINT, MetadataSource

GOOD = '{"iteration": 1, "seq_lens": [4], "image_grid_thw": [[1, 2, 2]]}'


def three_good_around(tmp_path: Path, bad: str | bytes) -> Path:
    """GOOD, GOOD, <bad>, GOOD: the bad line is line 3."""
    f = tmp_path / "m.jsonl"
    body = bad if isinstance(bad, bytes) else bad.encode("utf-8", "surrogatepass")
    f.write_bytes(b"\n".join([GOOD.encode(), GOOD.encode(), body, GOOD.encode()]) + b"\n")
    return f


def assert_bad_line_3(f: Path, field: str, **options) -> None:
    with pytest.raises(VlmPerfError) as info:
        MetadataSource(f, **options).read()
    message = str(info.value)
    assert message.startswith(f"{f}:3: "), message
    assert field in message, message
    assert "\n" not in message
    src = MetadataSource(f, skip_bad=True, **options).read()
    d = src.diagnostics
    assert (d.rows_used, d.rows_skipped_total) == (3, 1)
    assert d.bad_lines[0].startswith(f"{f}:3: ")
    assert src.per_iteration["vision_patches"].to_list() == [12]  # the three good rows of [1, 2, 2]


INTEGER_FIELD_VALUES = ["NaN", "Infinity", "-Infinity", "1.5", "1e3", "1.0", '"1"', "true",
                        str(2**63), str(-(2**63) - 1), "1" * 400]


@pytest.mark.parametrize("value", INTEGER_FIELD_VALUES)
def test_integer_field_never_rounded(tmp_path, value):
    assert_bad_line_3(three_good_around(tmp_path, '{"iteration": %s, "seq_lens": [4]}' % value), "iteration")


@pytest.mark.parametrize("value", ["1.5", "NaN", "1e400", str(2**64)])
def test_integer_inside_lists_never_rounded(tmp_path, value):
    f = three_good_around(tmp_path, '{"iteration": 1, "seq_lens": [4], "image_grid_thw": [[1, 2, %s]]}' % value)
    assert_bad_line_3(f, "image_grid_thw")


def test_bom_at_file_start_is_accepted(tmp_path):
    f = tmp_path / "m.jsonl"
    f.write_bytes(b"\xef\xbb\xbf" + (GOOD + "\n").encode() * 3)
    src = MetadataSource(f).read()
    assert src.diagnostics.rows_used == 3 and src.diagnostics.rows_skipped_total == 0


@pytest.mark.parametrize("chunk", [64, 1 << 20])
def test_bom_at_a_line_start_inside_the_file_is_accepted(tmp_path, chunk):
    """``cat a.jsonl b.jsonl`` of two files written with a BOM: the second BOM starts a line."""
    f = tmp_path / "m.jsonl"
    f.write_bytes(b"\n".join([GOOD.encode(), b"not json", b"\xef\xbb\xbf" + GOOD.encode()]) + b"\n")
    d = MetadataSource(f, skip_bad=True, chunk_bytes=chunk).read().diagnostics
    assert (d.rows_used, d.bad_lines) == (2, [f"{f}:2: json: not valid JSON"])


@pytest.mark.parametrize("bad", [b'"\\ud800x"', b'"\xff\xfe"', b"NaN"])
@pytest.mark.parametrize("chunk", [64, 1 << 20])
def test_odd_values_in_ignored_keys_are_harmless(tmp_path, bad, chunk):
    """A lone surrogate escape, invalid UTF-8 or NaN in a key the reader ignores: the row counts,
    whatever the chunking (next to an unparsable line the per-line path gives the same verdict)."""
    f = tmp_path / "m.jsonl"
    line = b'{"iteration": 1, "seq_lens": [4], "image_grid_thw": [[1, 2, 2]], "note": ' + bad + b"}"
    f.write_bytes(b"\n".join([GOOD.encode(), b"not json", line, GOOD.encode()]) + b"\n")
    src = MetadataSource(f, skip_bad=True, chunk_bytes=chunk).read()
    assert (src.diagnostics.rows_used, src.diagnostics.rows_skipped_total) == (3, 1)
    assert src.diagnostics.bad_lines == [f"{f}:2: json: not valid JSON"]


def test_duplicate_schema_key_is_a_bad_line(tmp_path):
    f = three_good_around(tmp_path, '{"iteration": 1, "iteration": 2, "seq_lens": [4]}')
    assert_bad_line_3(f, "iteration: the key appears twice")


def test_huge_line_is_counted_not_held(tmp_path):
    big = '{"iteration": 1, "seq_lens": [4], "pad": "' + "x" * 5000 + '"}'
    f = three_good_around(tmp_path, big)
    assert_bad_line_3(f, "line longer than 1000 bytes", max_line_bytes=1000, chunk_bytes=256)
    assert_bad_line_3(f, "line longer than 1000 bytes", max_line_bytes=1000)


def test_huge_last_line_without_newline(tmp_path):
    f = tmp_path / "m.jsonl"
    f.write_text(GOOD + "\n" + GOOD + "\n" + "[" * 3000)
    src = MetadataSource(f, skip_bad=True, max_line_bytes=1000, chunk_bytes=128).read()
    assert src.diagnostics.bad_lines[0].startswith(f"{f}:3: json: line longer")
    assert src.diagnostics.rows_used == 2


def test_deep_nesting_in_an_ignored_key_is_fine(tmp_path):
    deep = '{"iteration": 1, "seq_lens": [4], "image_grid_thw": [[1, 2, 2]], "x": ' + "[" * 1000 + "]" * 1000 + "}"
    f = three_good_around(tmp_path, deep)
    assert MetadataSource(f).read().diagnostics.rows_used == 4


@pytest.mark.parametrize("depth", [1000, 100_000])
def test_deep_nesting_in_a_schema_key_is_a_bad_line(tmp_path, depth):
    deep = '{"iteration": 1, "seq_lens": ' + "[" * depth + "4" + "]" * depth + "}"
    assert_bad_line_3(three_good_around(tmp_path, deep), "json: nested too deeply")


@pytest.mark.parametrize("grid, field", [
    ([[1, 2**31, 2**31]], "image_grid_thw: a grid row exceeds the bound"),
    ([[2**21, 2**21, 2**22]], "image_grid_thw: a grid row exceeds the bound"),  # t*h*w = 2^64 wraps to 0
    ([[1, 2**14, 2**14]], "image_grid_thw: a grid row exceeds the bound"),  # 2^28 patches
])
def test_grid_products_that_overflow_are_rejected(tmp_path, grid, field):
    f = three_good_around(tmp_path, json.dumps({"iteration": 1, "seq_lens": [4], "image_grid_thw": grid}))
    assert_bad_line_3(f, field)


def test_video_grid_and_lengths_bounded(tmp_path):
    f = three_good_around(tmp_path, json.dumps({"iteration": 1, "seq_lens": [4], "video_grid_thw": [[2**20, 2**20, 2]]}))
    assert_bad_line_3(f, "video_grid_thw: a grid row exceeds the bound")
    f = three_good_around(tmp_path, json.dumps({"iteration": 1, "seq_lens": [2**27]}))
    assert_bad_line_3(f, "seq_lens: a length exceeds 2^26")


def test_largest_allowed_grid_is_exact(tmp_path):
    # 2^26 patches in one row: (t*h*w)^2 = 2^52 is still exact in Int64 (hand arithmetic)
    f = tmp_path / "m.jsonl"
    f.write_text(json.dumps({"iteration": 1, "seq_lens": [4], "image_grid_thw": [[1, 2**13, 2**13]]}) + "\n")
    frame = MetadataSource(f).read().per_iteration
    assert frame["vision_patches"][0] == 2**26
    assert frame["vision_patches_sq_item"][0] == 2**52


def test_sum_that_wraps_int64_is_an_error(tmp_path):
    row = {"iteration": 5, "lm_tokens": 10, "lm_tokens_sq": 2**62}
    f = tmp_path / "m.jsonl"
    f.write_text((json.dumps(row) + "\n") * 3)  # 3 * 2^62 > 2^63 - 1
    with pytest.raises(VlmPerfError, match="lm_tokens_sq over the rows of iteration 5 exceeds Int64"):
        MetadataSource(f).read()


# ------------------------------------------------------------------------------------ fuzzing
VALID = [
    '{"schema_version": 1, "iteration": 3, "microbatch": 0, "dp_rank": 1, "seq_lens": [30, 12], '
    '"image_grid_thw": [[1, 4, 6]], "loss": 1.25}',
    '{"iteration": 3, "microbatch": 1, "dp_rank": 1, "seq_lens": [7], "video_grid_thw": [[2, 4, 4]]}',
    '{"iteration": 4, "microbatch": 0, "dp_rank": 0, "padded_tokens": 64, "samples": 2}',
    '{"iteration": 4, "microbatch": 1, "dp_rank": 0, "lm_tokens": 5, "lm_tokens_sq": 25}',
]
MUTATIONS = ["flip", "insert", "delete", "truncate", "duplicate", "swap_digit"]


def mutate(line: str, rng: random.Random, kind: str) -> bytes:
    raw = bytearray(line.encode())
    i = rng.randrange(len(raw))
    if kind == "flip":
        raw[i] = rng.randrange(256)
    elif kind == "insert":
        raw[i:i] = rng.choice([b"[", b"{", b"]", b"\"", b"1.5", b"-", b"\xff", b"\\ud800", b"NaN", b",", b"\r"])
    elif kind == "delete":
        del raw[i]
    elif kind == "truncate":
        del raw[i:]
    elif kind == "duplicate":
        raw[i:i] = raw[i:i + rng.randrange(1, 12)]
    else:
        digits = [j for j, c in enumerate(raw) if chr(c).isdigit()]
        if digits:
            raw[rng.choice(digits)] = ord(rng.choice("0123456789.e-"))
    return bytes(raw).replace(b"\n", b" ")


@settings(derandomize=True, deadline=None, max_examples=40, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(1, 30))
def test_fuzz_reader_counts_every_line_and_never_crashes(tmp_path, seed, n):
    rng = random.Random(seed)
    lines = []
    for _ in range(n):
        line = rng.choice(VALID)
        lines.append(mutate(line, rng, rng.choice(MUTATIONS)) if rng.random() < 0.6 else line.encode())
    f = tmp_path / f"fuzz-{seed}-{n}.jsonl"
    f.write_bytes(b"\n".join(lines) + b"\n")
    nonblank = sum(1 for raw in lines if raw.strip(b" \t\r\n"))
    results = []
    # chunking (and the per-piece fallback) must not change anything: 200-byte chunks end inside most lines
    # (the fixture lines are 60-150 bytes) and hold one to three of them
    for chunk in (200, 1 << 20):
        try:
            src = MetadataSource(f, skip_bad=True, chunk_bytes=chunk, max_line_bytes=4096).read()
        except VlmPerfError as exc:  # only the documented whole-file errors are allowed
            assert "exceeds Int64" in str(exc), exc
            return
        d = src.diagnostics
        assert d.rows_used + d.rows_skipped_total + d.rows_duplicate == nonblank
        assert d.rows_read == nonblank
        results.append((src.per_iteration, d.to_dict()))
    assert results[0][0].equals(results[1][0]) and results[0][1] == results[1][1]
    d = results[0][1]
    if d["bad_lines"]:  # without skip_bad: the first bad line, one line, as a VlmPerfError
        with pytest.raises(VlmPerfError) as info:
            MetadataSource(f, max_line_bytes=4096).read()
        # the first bad line, then how to get past it (the library names no flag: the CLI adds --skip-bad)
        assert str(info.value) == f"{d['bad_lines'][0]} ({BAD_ROW_HINT})"


@settings(derandomize=True, deadline=None, max_examples=200)
@given(lengths=st.lists(st.integers(0, 40), min_size=1, max_size=30), max_line=st.integers(1, 30))
def test_long_line_probe_never_misses(lengths, max_line):
    """The O(len / max_line) probe is never False when some line is longer than max_line."""
    from vlm_perf.ingest.metadata_chunks import may_hold_long_line

    whole = b"".join(b"x" * n + b"\n" for n in lengths)
    if max(lengths) > max_line:
        assert may_hold_long_line(whole, max_line)


def test_compressed_enormous_line_and_many_newlines(tmp_path):
    """A .gz whose decompressed text is mostly newlines and one huge line: streamed in chunks,
    the huge line reported with its number, the good lines counted, line numbers exact."""
    import gzip

    body = b"\n" * 500_000 + b'{"iteration": 1, "pad": "' + b"x" * 3_000_000 + b'"}\n' + b"\n" * 1000 + GOOD.encode() + b"\n"
    f = tmp_path / "m.jsonl.gz"
    f.write_bytes(gzip.compress(body, compresslevel=1))
    src = MetadataSource(f, skip_bad=True, max_line_bytes=1 << 20, chunk_bytes=1 << 18).read()
    d = src.diagnostics
    assert d.bad_lines == [f"{f}:500001: json: line longer than {1 << 20} bytes (the stated limit); not read"]
    assert (d.rows_used, d.rows_skipped_total) == (1, 1)
    with pytest.raises(VlmPerfError, match=rf"^{f}:500001: json: line longer"):
        MetadataSource(f, max_line_bytes=1 << 20, chunk_bytes=1 << 18).read()
