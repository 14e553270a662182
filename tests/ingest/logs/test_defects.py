"""No input changes a result silently, crashes or hangs: one test per defect class (issue 9 §3).

Every expected value is written out by hand from the line in the test."""

from __future__ import annotations

import gzip
import time

import pytest

from tests.support import megatron_line, write_log as write
from vlm_perf.errors import InputError
from vlm_perf.ingest.logs import parse_logs
from vlm_perf.ingest.logs.reader import MAX_LINE_BYTES


def mline(it, extra: str = "", loss: str = "2.500000E+00") -> str:
    """A Megatron-LM line with ``extra`` fields after the loss."""
    return megatron_line(it, loss, after_loss=extra)


@pytest.mark.parametrize("key,expect_col", [
    ("loss", "loss_extra"),            # snake_cases to the core `loss`
    ("Loss", "loss_extra"),
    ("copies", "copies_extra"),        # internal columns of the dedup view
    ("rank_labels", "rank_labels_extra"),
    ("text", "text_extra"),
    ("line", "line_extra"),
    ("loss scale ", None),             # a known key with a stray space stays the known key
])
def test_megatron_unknown_key_never_overwrites_a_known_column(tmp_path, key, expect_col):
    lines = [mline(1, f" {key}: 9.0 |"), mline(2), mline(3, f" {key}: 7.0 |")]
    r = parse_logs([write(tmp_path, "\n".join(lines) + "\n")])
    assert r.raw.get_column("loss").to_list() == [2.5, 2.5, 2.5]
    assert r.raw.get_column("line").to_list() == [1, 2, 3]
    dd = r.deduplicated  # builds copies / rank_labels: must not clash
    assert dd.get_column("copies").to_list() == [1, 1, 1]
    if expect_col:
        assert r.raw.get_column(expect_col).to_list()[0] == 9.0
        assert r.raw.get_column(expect_col).to_list()[2] == 7.0
        assert any(expect_col in n for n in r.diagnostics.notes)


def test_two_spellings_of_one_unknown_name_stay_distinct(tmp_path):
    lines = [mline(1, " moe aux loss: 0.5 | moe_aux_loss: 0.7 |")]
    r = parse_logs([write(tmp_path, "\n".join(lines) + "\n")])
    row = r.raw.row(0, named=True)
    assert sorted([row["moe_aux_loss"], row["moe_aux_loss_extra"]]) == [0.5, 0.7]
    assert row["loss"] == 2.5


@pytest.mark.parametrize("value", ["nan", "inf", "1.5", "1,234.5", "1e30"])
def test_integer_field_not_an_integer_is_null_and_partial(tmp_path, value):
    line = mline(5).replace("global batch size:     8", f"global batch size: {value}")
    r = parse_logs([write(tmp_path, line + "\n")])
    row = r.raw.row(0, named=True)
    assert row["global_batch_size"] is None and row["iteration"] == 5 and row["loss"] == 2.5
    assert r.diagnostics.partial_count == 1 and r.diagnostics.partial[0].endswith("train.log:1")


def test_integer_field_with_thousands_separator_is_exact(tmp_path):
    line = mline(5).replace("consumed samples:           40", "consumed samples: 1,234")
    r = parse_logs([write(tmp_path, line + "\n")])
    assert r.raw.row(0, named=True)["consumed_samples"] == 1234 and r.diagnostics.partial_count == 0


@pytest.mark.parametrize("step", ["inf", "nan", "1.5", "9" * 400, "9" * 5000, "-1e400"])
def test_dict_step_that_is_not_an_integer(tmp_path, step):
    text = "{'loss': 1.25, 'step': " + step + "}\n{'loss': 1.0, 'step': 7}\n"
    r = parse_logs([write(tmp_path, text)])
    d = r.diagnostics
    good = r.raw.filter(r.raw["iteration"] == 7)
    assert good.height == 1 and good.row(0, named=True)["loss"] == 1.0
    first = r.raw.filter(r.raw["line"] == 1)
    if first.height:  # parsed with a null step, counted partial
        assert first.row(0, named=True)["iteration"] is None and d.partial_count == 1
    else:  # not even a number the reader accepts: failed, with its line
        assert d.failed == [f"{tmp_path / 'train.log'}:1"]


def test_json_nested_1000_deep_in_a_log_line(tmp_path):
    deep = '{"loss": 1.0, "x": ' + "[" * 1000 + "]" * 1000 + "}"
    deeper = '{"loss": 2.0, "x": ' + "[" * 100_000 + "]" * 100_000 + "}"
    r = parse_logs([write(tmp_path, deep + "\n" + deeper + "\n" + mline(3) + "\n")])
    # 1,000 levels inside an ignored key: the record is kept (no step on the line)
    assert r.raw.get_column("iteration").to_list() == [None, 3]
    assert r.raw.get_column("loss").to_list() == [1.0, 2.5]
    assert r.diagnostics.failed == [f"{tmp_path / 'train.log'}:2"]  # beyond the stated depth: failed


@pytest.mark.parametrize("line", ["{" * 100_000, "{'" * 50_000, "1" * 100_000 + "%", "10%|" + "#" * 100_000,
                                  "Training epoch 0, iteration 1/2 |" + " a: 1 |" * 14_000])
def test_pathological_long_lines_stay_linear(tmp_path, line):
    p = write(tmp_path, line + "\n" + mline(3) + "\n")
    t = time.perf_counter()
    r = parse_logs([p])
    assert time.perf_counter() - t < 5.0  # quadratic backtracking takes minutes here
    assert 3 in r.raw.get_column("iteration").to_list()


def test_line_over_the_size_limit_is_failed_with_its_number(tmp_path):
    big = " iteration 1/ 2 | lm loss: 1.0 |" + "x" * (MAX_LINE_BYTES + 10)
    p = write(tmp_path, mline(1) + "\n" + big + "\n" + mline(3) + "\n")
    r = parse_logs([p])
    assert r.raw.get_column("iteration").to_list() == [1, 3]
    assert r.diagnostics.failed == [f"{p}:2"]


def test_gzip_with_one_enormous_line_is_bounded_and_reported(tmp_path):
    p = tmp_path / "train.log.gz"
    with gzip.open(p, "wb", compresslevel=1) as fh:
        fh.write((mline(1) + "\n").encode())
        fh.write(b"{" * (40 << 20))  # 40 MiB without a newline (> chunk and > line limit)
        fh.write(("\n" + mline(3) + "\n").encode())
    r = parse_logs([p])
    assert r.raw.get_column("iteration").to_list() == [1, 3]
    assert r.raw.get_column("line").to_list() == [1, 3]
    assert r.diagnostics.failed == [f"{p}:2"]


def test_truncated_gzip_is_a_one_line_error(tmp_path):
    p = tmp_path / "train.log.gz"
    data = gzip.compress(("\n".join(mline(i) for i in range(1, 2000)) + "\n").encode())
    p.write_bytes(data[: len(data) // 2])
    with pytest.raises(InputError, match="cannot decompress"):
        parse_logs([p])


def test_nemo1_bar_claimed_but_unparsable_is_failed_not_ignored(tmp_path):
    text = "Epoch 0:  10%|#  | garbage\n" + mline(2) + "\n"
    r = parse_logs([write(tmp_path, text)])
    assert r.diagnostics.failed_count == 1 and "other" not in r.diagnostics.ignored


def test_compressed_stream_of_newlines_is_split_into_bounded_frames(tmp_path, monkeypatch):
    from vlm_perf.ingest.logs import reader

    monkeypatch.setattr(reader, "FRAME_LINES", 1000)  # the real bound is 2**20 lines per frame
    p = tmp_path / "train.log.gz"
    p.write_bytes(gzip.compress((mline(1) + "\n" + "\n" * 25_000 + mline(3) + "\n").encode()))
    frames = [f.collect() for f in reader.lazy_line_frames(p)]
    assert max(f.height for f in frames) <= 1000
    r = parse_logs([p])
    assert r.raw.get_column("line").to_list() == [1, 25_002]
    assert r.diagnostics.lines_read == 25_002 and r.diagnostics.ignored == {"blank": 25_000}


def test_trainer_state_nested_1000_deep_is_a_one_line_error(tmp_path):
    p = tmp_path / "trainer_state.json"
    p.write_text('{"log_history": [{"loss": 1.0, "step": 1, "x": ' + "[" * 100_000 + "]" * 100_000 + "}]}")
    with pytest.raises(InputError, match="trainer_state.json"):
        parse_logs([p])
    deep_ok = tmp_path / "ok" / "trainer_state.json"
    deep_ok.parent.mkdir()
    deep_ok.write_text('{"log_history": [{"loss": 1.0, "step": 1, "x": ' + "[" * 1000 + "]" * 1000 + "}]}")
    r = parse_logs([deep_ok])  # 1,000 levels inside an ignored key: read, the key is not a number
    assert r.raw.get_column("iteration").to_list() == [1] and r.raw.get_column("loss").to_list() == [1.0]
