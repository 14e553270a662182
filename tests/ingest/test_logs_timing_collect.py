"""Per-rank timing collected during the single parse (`timers.TimingCollector`, ``ParseResult.rank_timing``)
equals `extract_rank_timing` of every line of the logs (the whole-frame formulation, independent of the
collector's reduction), on the fixtures, on the parser fixtures, and fuzzed with random frame splits."""

from pathlib import Path

import polars as pl
from hypothesis import given, settings
from hypothesis import strategies as st
from polars.testing import assert_frame_equal

from vlm_perf.ingest.logs import parse_logs
from vlm_perf.ingest.logs.timers import RankTiming, TimingCollector, extract_rank_timing, read_rank_timing

HERE = Path(__file__).parent
TIMERS = HERE / "fixtures" / "timers"
PARSER_FIXTURES = HERE / "logs" / "fixtures"


def all_lines(paths) -> pl.DataFrame:
    """Every line of the files, read whole by polars' CSV reader (the reader before the chunked one)."""
    frames = []
    for p in paths:
        df = pl.read_csv(p, has_header=False, separator="\x1f", quote_char=None, schema={"text": pl.Utf8},
                         encoding="utf8-lossy", truncate_ragged_lines=True, empty_string_is_null=False)
        frames.append(df.with_row_index("line", offset=1).select(
            pl.lit(str(p)).alias("file"), pl.col("line").cast(pl.Int64), "text"))
    return pl.concat(frames)


def assert_same(got: RankTiming, want: RankTiming) -> None:
    for name in ("timers", "detector", "nvrx", "rank_steps"):
        assert_frame_equal(getattr(got, name), getattr(want, name), check_exact=True)
    assert got.counts == want.counts


def test_fixtures_parse_once_equals_the_whole_frame_extraction():
    for fixture in ("megatron_timers.log", "rank_prefixed.log"):
        path = TIMERS / fixture
        want = extract_rank_timing(all_lines([path]))
        assert_same(parse_logs([path]).rank_timing, want)
        assert_same(read_rank_timing([path]), want)
    t = parse_logs([TIMERS / "megatron_timers.log"]).rank_timing
    assert t.counts["timer_lines"] == 10 and t.counts["straggler_detector_lines"] == 2  # (not empty)


def test_several_files_and_the_parser_fixtures():
    paths = [TIMERS / "megatron_timers.log", TIMERS / "rank_prefixed.log"]
    paths += sorted(p for p in PARSER_FIXTURES.iterdir() if p.suffix in (".log", ".txt"))
    want = extract_rank_timing(all_lines(paths))
    got = parse_logs(paths).rank_timing
    assert_same(got, want)
    assert got.rank_steps.height == want.rank_steps.height > 0


def test_small_reader_chunks_do_not_change_the_result(tmp_path, monkeypatch):
    from vlm_perf.ingest.logs import reader

    text = (TIMERS / "megatron_timers.log").read_text() * 3
    path = tmp_path / "train.log"
    path.write_text(text)
    want = extract_rank_timing(all_lines([path]))
    for chunk in (64, 200, 1 << 12):
        monkeypatch.setattr(reader, "CHUNK_BYTES", chunk)
        assert_same(parse_logs([path]).rank_timing, want)


LINES = [
    " [2025-11-13 16:26:20] iteration       {it}/     100 | elapsed time per iteration (ms): 2300.5 | lm loss: 1.0 |",
    "{rank}:  [2025-09-14 08:02:37] iteration        {it}/     200 | elapsed time per iteration (ms): {ms} |",
    "[default{rank}]: iteration {it}/ 200 | elapsed time per iteration (ms): {ms} |",
    "(min, max) time across ranks (ms):",
    "max time across ranks (ms):",
    "    forward-backward ...............................: ({ms}, {ms2})",
    "    optimizer ......................................: {ms}",
    "  saved checkpoint at iteration {it} [ t 1/1 ] (min, max) time across ranks (ms): save-checkpoint ....: ({ms}, {ms2})",
    " 0: [x] | MnRtt/Rnk: {ms}ms/{rank} | MxRtt/Rnk: {ms2}ms/{rank2} | MnEtpt/Rnk: 296.02TF/{rank2} | MxEtpt/Rnk: 305.32TF/{rank}",
    "GPU relative performance:",
    "GPU individual performance:",
    " Worst performing 2/16 ranks:",
    " Best performing 2/16 ranks:",
    "  Rank={rank} Node=h100-{rank2} Score=0.{rank2}4",
    "validation loss at iteration {it} | lm loss value: 1.0",
    "the iteration {it} had no slash",
    "",
    "world_size ..... 16",
    " iteration 99999999999999999999/ 100 | elapsed time per iteration (ms): 1.0 |",
    "3: iteration 9223372036854775807/ 100 | elapsed time per iteration (ms): {ms} |",
    "4: iteration \u0663/ 100 | elapsed time per iteration (ms): {ms} |",  # an Arabic-Indic digit
]


@st.composite
def logs(draw):
    n = draw(st.integers(0, 60))
    out = []
    for _ in range(n):
        template = draw(st.sampled_from(LINES))
        out.append(template.format(it=draw(st.integers(0, 40)), rank=draw(st.integers(0, 9)),
                                   rank2=draw(st.integers(0, 9)), ms=draw(st.integers(1, 999)),
                                   ms2=draw(st.integers(1, 999))))
    cuts = sorted(draw(st.lists(st.integers(0, n), max_size=6)))
    return out, cuts


@settings(derandomize=True, deadline=None, max_examples=150)
@given(st.lists(logs(), min_size=1, max_size=3))
def test_fuzz_collector_equals_the_whole_frame_extraction(files):
    collector = TimingCollector()
    frames = []
    for k, (lines, cuts) in enumerate(files):
        name = f"f{k}.log"
        frame = pl.DataFrame({"line": pl.Series(range(1, len(lines) + 1), dtype=pl.Int64),
                              "text": pl.Series(lines, dtype=pl.Utf8)})
        frames.append(frame.select(pl.lit(name).alias("file"), "line", "text"))
        collector.start_file(name)
        for a, b in zip([0, *cuts], [*cuts, len(lines)]):
            collector.feed(frame.slice(a, b - a))
    assert_same(collector.result(), extract_rank_timing(pl.concat(frames)))


def test_per_file_partials_carry_the_timing_through_pickling_and_merge():
    import pickle

    from vlm_perf.ingest.logs.partial import combine_partials, merge_partials, parse_file_partial

    paths = [TIMERS / "megatron_timers.log", TIMERS / "rank_prefixed.log"]
    parts = [pickle.loads(pickle.dumps(parse_file_partial(p, i), protocol=5)) for i, p in enumerate(paths)]
    want = extract_rank_timing(all_lines(paths))
    assert_same(combine_partials(parts).rank_timing, want)
    assert_same(combine_partials([merge_partials(parts[:1]), merge_partials(parts[1:])]).rank_timing, want)
