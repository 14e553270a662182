"""The polars paths of the FLOPs library cannot wrap: frame results equal exact Python arithmetic at 1e20+.

Training FLOPs of one large step exceed the Int64 range (2^63 ~ 9.2e18): Llama-3.1-405B on one
16M-token step is ~1e20. polars integer arithmetic wraps silently, so every polars path
(``BatchStats.columns()``, ``Breakdown.as_exprs()``, ``analysis.with_flops`` / ``window_sums`` /
``vision_share`` / ``components_by_convention``) computes in Float64.

Independent reference: the same formulas evaluated on ``fractions.Fraction`` statistics, i.e. exact
rational arithmetic with unbounded integers (no rounding, no wrap-around). Allowed relative error of
the Float64 frame path: ``REL = 1e-12`` (Float64 rounds each operation to 2^-53 ~ 1.1e-16; the longest
formula chain has a few dozen operations, so a few 1e-15 at worst; 1e-12 leaves a wide margin while
still catching any wrap, which is an error of order 1).
"""

from __future__ import annotations

from fractions import Fraction

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vlm_perf.analysis import vision_share, window_sums, with_flops
from vlm_perf.analysis.explore.conventions import components_by_convention
from vlm_perf.arch import load_model
from vlm_perf.flops import CONVENTIONS, compute_flops
from vlm_perf.stats import BatchStats

REL = 1e-12
INT64_MAX = 2**63 - 1
FIELDS = BatchStats.field_names()

# Rows of one "iteration" each. Both LM rows are ~16.8M tokens (the 16M-token steps of a large
# pre-training run): 2048 x 8192 and 16 x 1M context. VLM rows add thousands of images and videos.
LM_ROWS = [dict(seq_len=8192, samples=2048), dict(seq_len=1_048_576, samples=16)]
VLM_ROWS = [
    dict(seq_len=131_072, samples=128, image_grids=[(1, 64, 64)] * 3000, video_grids=[(16, 36, 64)] * 200),
    dict(seq_len=32_768, samples=512, image_grids=[(1, 98, 146)] * 4000, video_grids=[(64, 16, 16)] * 50),
]
PRESET_ROWS = {"llama3.1-405b": LM_ROWS, "deepseek-v3": LM_ROWS,
               "qwen3-vl-235b-a22b": VLM_ROWS, "qwen2.5-vl-72b": VLM_ROWS}


def _conventions(spec):
    family = spec.family or spec.model_type
    return [c for c in CONVENTIONS if spec.lm.family not in CONVENTIONS[c].unsupported and CONVENTIONS[c].covers(family)]


def _stats(spec, row: dict) -> BatchStats:
    return BatchStats.from_batch(spec=spec, **row)


def _exact(stats: BatchStats) -> BatchStats:
    """The statistics as Fractions: the formulas then run in exact rational arithmetic."""
    return BatchStats(**{k: Fraction(v) for k, v in stats.as_dict().items()})


def _reference(spec, stats: BatchStats, convention: str, mode: str = "training", causal: str = "half",
               frozen=()) -> dict[str, Fraction]:
    """Exact components + vision/language/total. ``exact`` with causal half multiplies its attention
    core by the float 0.5, so it is derived from causal full (half the core, exactly)."""
    b = compute_flops(spec, _exact(stats), convention, mode=mode,
                      causal="full" if convention == "exact" else causal, frozen=frozen)
    comps = {k: Fraction(v) for k, v in b.components.items()}
    if convention == "exact" and causal == "half":
        for core in ("lm.attn_core", "lm.mtp"):
            if core == "lm.mtp" and spec.lm.num_mtp_layers:
                # MTP mixes GEMMs and a causal core: recompute the core part on its own
                full = compute_flops(spec, _exact(stats), "exact", mode=mode, causal="full", frozen=frozen)
                no_core = compute_flops(spec, _exact(stats.with_(lm_tokens_sq=0)), "exact", mode=mode,
                                        causal="full", frozen=frozen)
                comps[core] = Fraction(no_core.components[core]) + (
                    Fraction(full.components[core]) - Fraction(no_core.components[core])) / 2
            elif core == "lm.attn_core":
                comps[core] = comps[core] / 2
    vision = sum((v for k, v in comps.items() if k.startswith("vision.")), Fraction(0))
    language = sum((v for k, v in comps.items() if k.startswith("lm.")), Fraction(0))
    return {**comps, "vision": vision, "language": language, "total": vision + language}


def _frame(stats_rows: list[BatchStats], dtype=pl.Int64) -> pl.DataFrame:
    return pl.DataFrame({f: [int(getattr(s, f)) for s in stats_rows] for f in FIELDS},
                        schema={f: dtype for f in FIELDS})


def _close(got: float, want: Fraction, what: str) -> None:
    if want == 0:
        assert got == 0, what
        return
    rel = abs(Fraction(got) - want) / abs(want)
    assert rel <= REL, f"{what}: frame {got!r} vs exact {float(want)!r} (relative error {float(rel):.2e})"


def _rows(spec, name: str) -> list[BatchStats]:
    """The preset's single steps, then the same steps 16x (a logging window of 16 iterations summed)."""
    steps = [_stats(spec, r) for r in PRESET_ROWS[name]]
    return steps + [s.scaled(16) for s in steps]


@pytest.mark.parametrize("name", sorted(PRESET_ROWS))
def test_reference_rows_are_beyond_int64(name):
    """Guard: the test rows really are in the regime where Int64 arithmetic would wrap."""
    spec = load_model(name)
    totals = [_reference(spec, s, "exact")["total"] for s in _rows(spec, name)]
    assert max(totals) >= 1e20
    assert sum(t > INT64_MAX for t in totals) >= 2


def test_int64_arithmetic_would_wrap():
    """What the casts prevent: the same formula evaluated in Int64 (the convention object called
    directly, bypassing compute_flops' cast) silently goes wrong on these rows."""
    from vlm_perf.flops.breakdown import Options
    from vlm_perf.flops.conventions import get_convention

    spec = load_model("llama3.1-405b")
    stats = _stats(spec, LM_ROWS[0])
    raw = BatchStats(**{f: pl.col(f) for f in FIELDS})  # no cast: integer arithmetic
    b = get_convention("6nd").compute(spec, raw, Options())
    wrapped = _frame([stats]).select(b.components["lm.dense_mlp"].alias("x"))["x"][0]
    exact = _reference(spec, stats, "6nd")["lm.dense_mlp"]
    assert abs(Fraction(wrapped) - exact) / exact > 0.1  # wrapped (it is even negative here)


def test_compute_flops_casts_any_expression_stats():
    """BatchStats built from raw Int64 / Int32 expressions (not BatchStats.columns()) is safe too:
    compute_flops casts every expression field to Float64 before any formula runs."""
    spec = load_model("llama3.1-405b")
    stats = _stats(spec, LM_ROWS[0])
    raw = BatchStats(**{f: pl.col(f) for f in FIELDS})
    for dtype in (pl.Int64, pl.UInt64):
        out = _frame([stats], dtype).select(compute_flops(spec, raw, "exact").as_exprs())
        for key, want in _reference(spec, stats, "exact").items():
            _close(out[f"flops_{key}"][0], want, f"raw {dtype} {key}")


@pytest.mark.parametrize("name", sorted(PRESET_ROWS))
@pytest.mark.parametrize("dtype", [pl.Int64, pl.UInt64])
def test_as_exprs_matches_exact_arithmetic(name, dtype):
    """``compute_flops(spec, BatchStats.columns()).as_exprs()``, every convention, mode and causal rule,
    per component and total, on single steps and 16-step windows of up to 1e20+ FLOPs per row."""
    spec = load_model(name)
    rows = _rows(spec, name)
    frame = _frame(rows, dtype)
    for conv in _conventions(spec):
        for mode, causal in (("training", "half"), ("training", "full"), ("forward", "half")):
            b = compute_flops(spec, BatchStats.columns(), conv, mode=mode, causal=causal)
            out = frame.select(b.as_exprs())
            assert all(dt == pl.Float64 for dt in out.schema.values())
            for i, s in enumerate(rows):
                ref = _reference(spec, s, conv, mode, causal)
                for key, want in ref.items():
                    _close(out[f"flops_{key}"][i], want, f"{name} {conv} {mode} {causal} row {i} {key}")


def test_int32_statistics_columns_do_not_wrap():
    """Narrow integer columns (e.g. Int32 from a parquet writer) are widened before any product."""
    spec = load_model("qwen2.5-vl-72b")
    rows = [_stats(spec, dict(seq_len=8192, samples=8, image_grids=[(1, 64, 64)] * 20))]
    assert max(int(v) for v in rows[0].as_dict().values()) < 2**31
    out = _frame(rows, pl.Int32).select(compute_flops(spec, BatchStats.columns(), causal="full").as_exprs())
    _close(out["flops_total"][0], _reference(spec, rows[0], "exact", causal="full")["total"], "int32 total")


def test_as_exprs_of_python_numbers_beyond_int64():
    """A Breakdown of Python numbers (a single batch) as constant columns: no Int64 literal overflow."""
    spec = load_model("llama3.1-405b")
    stats = _stats(spec, LM_ROWS[1])
    b = compute_flops(spec, stats, "exact", causal="full")
    assert b.total > INT64_MAX and isinstance(b.total, int)
    out = pl.DataFrame({"x": [0, 1]}).with_columns(b.as_exprs())
    assert out["flops_total"].to_list() == [float(b.total)] * 2
    assert out.schema["flops_total"] == pl.Float64


def test_analysis_helpers_match_exact_arithmetic():
    """with_flops, window_sums (cumulative sums over a long run), vision_share and
    components_by_convention on iterations of 1e20+ FLOPs each, summed over 3000 iterations."""
    spec = load_model("qwen3-vl-235b-a22b")
    base = [_stats(spec, r) for r in VLM_ROWS]
    n = 3000
    rows = [base[i % 2].scaled(1 + i % 7) for i in range(n)]  # varied, every row > Int64 max
    stats = _frame(rows).with_columns(pl.int_range(1, n + 1).alias("iteration"))
    per_it = with_flops(stats, spec, ["exact", "megatron-bridge", "verl"])
    refs = {conv: [_reference(spec, s, conv) for s in base] for conv in ("exact", "megatron-bridge", "verl")}
    # per row: the formulas are evaluated per row, so row i equals its base reference x its scale
    for conv in refs:
        for i in (0, 1, 2, 5, n - 1):
            want = {k: v * (1 + i % 7) for k, v in refs[conv][i % 2].items()}
            for part in ("total", "vision", "language"):
                if conv == "exact" or part == "total":
                    _close(per_it[f"{conv}_{part}"][i], want[part], f"with_flops {conv} row {i} {part}")
    # the run total (1e24+): exact sum of the exact per-row values
    scale_sum = {k: sum(1 + i % 7 for i in range(n) if i % 2 == k) for k in (0, 1)}
    run_total = sum(refs["exact"][k]["total"] * scale_sum[k] for k in (0, 1))
    _close(per_it["exact_total"].sum(), run_total, "run total")
    # windows of 100 iterations via cumulative sums (the report's path)
    windows = pl.DataFrame({"segment": [0] * 30, "iteration": list(range(100, n + 1, 100)),
                            "window_start": list(range(0, n, 100))})
    summed = window_sums(windows, per_it, ["exact_total"])
    for w in (0, 17, 29):
        want = sum(refs["exact"][i % 2]["total"] * (1 + i % 7) for i in range(100 * w, 100 * (w + 1)))
        _close(summed["exact_total"][w], want, f"window {w}")
    share = vision_share(stats.head(2), spec)
    for i in range(2):
        _close(share[i], refs["exact"][i]["vision"] / refs["exact"][i]["total"], f"vision share row {i}")
    table = components_by_convention(spec, stats.head(2), ["exact"])
    got = dict(zip(table["component"], table["flops"]))
    for comp, value in got.items():
        want = sum(refs["exact"][i].get(comp, Fraction(0)) * (1 + i) for i in range(2))  # rows scaled 1x, 2x
        _close(value, want, f"components_by_convention {comp}")


# --------------------------------------------------------------------------- fuzz
PRESETS = ["llama3.1-405b", "deepseek-v3", "qwen3-vl-235b-a22b", "qwen2.5-vl-72b", "qwen3-vl-30b-a3b",
           "qwen2-vl-7b"]


@st.composite
def _batches(draw):
    name = draw(st.sampled_from(PRESETS))
    spec = load_model(name)
    seq_lens = draw(st.lists(st.integers(1, 2**20), min_size=1, max_size=6))
    grids = []
    if spec.is_vlm:
        grids = draw(st.lists(st.tuples(st.integers(1, 64), st.integers(1, 80).map(lambda x: 2 * x),
                                        st.integers(1, 80).map(lambda x: 2 * x)), max_size=4))
    videos = draw(st.booleans())
    repeat = draw(st.integers(1, 2**14))  # microbatches x ranks of the same shape
    stats = BatchStats.from_batch(seq_lens=seq_lens, spec=spec, image_grids=[] if videos else grids,
                                  video_grids=grids if videos else [], padded_tokens=max(seq_lens) * len(seq_lens),
                                  samples=len(seq_lens)).scaled(repeat)
    conv = draw(st.sampled_from(_conventions(spec)))
    causal = draw(st.sampled_from(["half", "full"]))
    return spec, stats, conv, causal


@settings(derandomize=True, deadline=None, max_examples=60)
@given(_batches())
def test_fuzz_frame_path_equals_exact_arithmetic(batch):
    spec, stats, conv, causal = batch
    out = _frame([stats]).select(compute_flops(spec, BatchStats.columns(), conv, causal=causal).as_exprs())
    for key, want in _reference(spec, stats, conv, causal=causal).items():
        _close(out[f"flops_{key}"][0], want, f"{spec.name} {conv} {causal} {key}")
