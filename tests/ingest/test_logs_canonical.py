"""The cheaper canonical Megatron plan agrees exactly with ``fast_plan`` on the rows it vouches for,
and the batched single pass gives the same result whatever the batch size."""

from __future__ import annotations

import polars as pl
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from polars.testing import assert_frame_equal

from vlm_perf.ingest.logs import megatron, parse_logs, parser

KEYS = ["consumed samples", "elapsed time per iteration (ms)", "learning rate", "global batch size",
        "lm loss", "loss scale", "grad norm", "number of skipped iterations", "number of nan iterations"]

_good = st.one_of(st.integers(0, 10**9).map(lambda v: f"{v:12d}"),
                  st.floats(1e-8, 1e6, allow_nan=False).map(lambda v: f"{v:.6E}"), st.just("nan"))
_bad = st.sampled_from(["inf", "-", "1,234", "", "1.5x", "  7  "])


@st.composite
def line(draw, probed: list[str] = KEYS) -> str:
    lead = draw(st.sampled_from(["", " ", " ", " ", "[rank0]: ", "  ", "x"]))
    ts = draw(st.sampled_from([
        "", "[2025-01-02 03:04:05] ", "[2025-01-02 03:04:05] ", "[2025-01-02 03:04:05.123456] ", "[2025-01-02 03:04:05.123456] ", "[2025-01-02 03:04:05.123] ",
        "[2025-01-02T03:04:05] ", "[2025-01-02 03:04:05,654321] ", "[1999-01-02 03:04:05] ",
        "[2025-13-02 03:04:05] ", "[2025-01-02 03:04:05]", "[x] ",
    ]))
    it = draw(st.integers(0, 10**8))
    total = draw(st.sampled_from(["x", "12", "   99999"]) if draw(st.integers(0, 9)) == 0 else st.integers(0, 10**8).map(str))
    pad = draw(st.sampled_from(["", "   ", "   ", " " * 45]))
    if draw(st.integers(0, 3)):  # mostly the probed order, some keys dropped
        keys = [k for k in probed if draw(st.integers(0, 4))]
    else:
        keys = draw(st.lists(st.sampled_from(KEYS + ["mtp loss", "num zeros"]), max_size=6))
    fields = "".join(f" {k}: {draw(_bad if draw(st.integers(0, 30)) == 0 else _good)} |" for k in keys)
    slash = draw(st.sampled_from(["/", "/", " / ", "/ "]))
    return f"{lead}{ts}iteration {pad}{it}{slash}{total} |{fields}"


def _ordered_keys(n: int) -> dict:
    return {k: megatron.KNOWN_KEYS[k] for k in KEYS[:n]}


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data(), st.integers(0, len(KEYS)), st.booleans())
def test_canonical_rows_equal_fast_plan(data, n_keys, fraction):
    lines = data.draw(st.lists(line(KEYS[:n_keys]), min_size=1, max_size=30))
    df = pl.DataFrame({"line": list(range(1, len(lines) + 1)), "text": lines}, schema={"line": pl.Int64, "text": pl.Utf8})
    keys = _ordered_keys(n_keys)
    canon = megatron.canonical_plan(df.lazy(), keys, fraction=fraction).collect()
    ref = megatron.fast_plan(df.lazy(), keys, label=False, fraction=fraction).collect()
    vouched = canon.get_column("_canon")
    # the canonical plan only vouches for rows fast_plan itself would not flag
    flagged = (ref.get_column("_unknown_keys") | ref.get_column("_partial") | ref.get_column("_prefixed")).fill_null(True)
    assert not (vouched & flagged).any()
    cols = [c for c in ref.columns if c != "text"]
    assert_frame_equal(canon.filter(vouched).select(cols), ref.filter(vouched).select(cols), check_exact=True)
    # rows it does not vouch for keep their text for fast_plan
    assert canon.filter(~vouched).get_column("text").to_list() == df.filter(~vouched).get_column("text").to_list()


def _mega(i: int, frac: bool = False) -> str:
    ts = f"[2025-01-01 00:{i // 60 % 60:02d}:{i % 60:02d}{'.250000' if frac else ''}]"
    return (f" {ts} iteration {i:8d}/   99999 | consumed samples: {i * 8:12d} | elapsed time per iteration (ms): "
            f"{1000 + i % 7:.1f} | learning rate: {1e-4:.6E} | global batch size:     8 | lm loss: {2 + 1 / i:.6E} |"
            f" loss scale: 1.0 | grad norm: {0.5 + i % 3:.3f} | number of skipped iterations:   0 |"
            f" number of nan iterations:   0 |")


def test_batch_size_and_probe_boundaries_do_not_change_results(tmp_path, monkeypatch):
    """Fast lines spread over several batches, a probe sample spanning batches, layouts that
    change after the probe (fractions, unknown keys, prefixes) and noise/candidate lines."""
    lines = []
    for i in range(1, 1301):
        text = _mega(i, frac=i > 900)
        if i % 250 == 0:
            text = text.replace("| loss scale:", "| mtp loss: 0.5 | loss scale:")
        if i % 333 == 0:
            text = "[rank1]:" + text
        lines.append(text)
        if i % 4 == 0:
            lines.append(["", "time (ms) | forward: 1.0", "  warnings.warn(", "{'loss': 1.0, 'epoch': 0.1}",
                          "saving checkpoint at iteration 4 to /c"][i % 5])
    p = tmp_path / "m.log"
    p.write_text("\n".join(lines) + "\n")
    ref = parse_logs([p])
    for batch_rows, probe_rows in [(50, 5000), (97, 40), (1 << 20, 3), (1 << 20, 5000)]:
        monkeypatch.setattr(parser, "BATCH_ROWS", batch_rows)
        monkeypatch.setattr(parser, "PROBE_ROWS", probe_rows)
        got = parse_logs([p])
        if probe_rows == 5000:  # same probe sample: identical output
            assert_frame_equal(got.raw, ref.raw, check_exact=True)
            assert got.diagnostics.to_dict() == ref.diagnostics.to_dict()
        else:  # another sample may pick other paths, never other values
            assert_frame_equal(got.raw, ref.raw, check_exact=True, check_column_order=False)
        assert_frame_equal(got.iterations, ref.iterations, check_exact=True, check_column_order=False)
