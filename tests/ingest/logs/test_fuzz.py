"""Seeded, bounded fuzzing of the log parsers: one line of a real-shaped fixture is mutated.

Checked for every mutation: no exception but the documented ``InputError``; no hang (each parse
well under a second here); and no silent change to the records of lines the mutation did not
touch. Records are compared per line, on the columns of the unmutated parse, except ``segment`` /
``first_in_segment`` (a mutated iteration may legitimately open a restart segment) and within two
lines of the mutation (an HF dict takes its step from a neighbouring bar, a Megatron piece may
join the line before it, a Bridge Step Time line takes the next iteration).
"""

from __future__ import annotations

import math
import time
from pathlib import Path

import polars as pl
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from vlm_perf.errors import InputError
from vlm_perf.ingest.logs import parse_logs

FIXTURES = Path(__file__).resolve().parent / "fixtures"
TEXT_FIXTURES = sorted(p for p in FIXTURES.iterdir() if p.suffix in (".log", ".txt", ".jsonl"))
SKIP = {"segment", "first_in_segment", "file"}
NASTY = ["{", "}", "|", ":", "%|", "\r", "^M", "[", "]", "'", '"', " nan ", "inf", "9" * 400, "9" * 5000, "  ",
         "\x1b[31m", "\ufffd", ",", "1,234.5", "-", "iteration 1/2 |", "step:", "Epoch 0:", "| lm loss: 1.0 |",
         "{'loss': 1.0}", "[" * 50, "{" * 2000, "\t", "e+999", "=", "/gpu)", "completed step: ", "0" * 30]


def _records(path: Path) -> pl.DataFrame | None:
    try:
        return parse_logs([path]).raw
    except InputError:
        return None


def _by_line(df: pl.DataFrame, cols: list[str], exclude: set[int]) -> dict:
    keep = df.filter(~pl.col("line").is_in(sorted(exclude)))
    out: dict = {}
    for row in keep.select([c for c in cols if c in keep.columns]).iter_rows(named=True):
        out.setdefault(row["line"], []).append(
            tuple((k, "nan" if isinstance(v, float) and math.isnan(v) else v) for k, v in row.items()))
    return out


ROOT = Path(__file__).resolve().parents[3]
BASE = {p.name: p.read_text(encoding="utf-8") for p in TEXT_FIXTURES}
# every format's lines in one file (detection is per line), and the bundled sample logs
BASE["mixed.log"] = "".join(BASE[k] for k in sorted(BASE) if not k.endswith(".jsonl"))
BASE.update({f"{p.parent.name}.log": p.read_text(encoding="utf-8") for p in sorted(ROOT.glob("sample_logs/*/train.log"))})


@settings(derandomize=True, deadline=None, max_examples=80, suppress_health_check=list(HealthCheck))
@given(name=st.sampled_from(sorted(BASE) + ["mixed.log"] * 4 + [k for k in BASE if k.startswith("qwen")] * 2), where=st.floats(0, 1), pos=st.floats(0, 1),
       op=st.sampled_from(["insert", "replace", "delete", "truncate", "duplicate"]),
       piece=st.sampled_from(NASTY), length=st.integers(1, 40))
def test_mutating_one_line_changes_nothing_else(tmp_path_factory, name, where, pos, op, piece, length):
    text = BASE[name]
    lines = text.split("\n")[:-1]
    m = min(int(where * len(lines)), len(lines) - 1)
    line = lines[m]
    at = int(pos * len(line))
    if op == "insert":
        line = line[:at] + piece + line[at:]
    elif op == "replace":
        line = line[:at] + piece + line[at + length:]
    elif op == "delete":
        line = line[:at] + line[at + length:]
    elif op == "truncate":
        line = line[:at]
    mutated = lines[:m] + [line] + ([line] if op == "duplicate" else []) + lines[m + 1:]
    tmp = tmp_path_factory.mktemp("fuzz")
    base_path, mut_path = tmp / f"base{Path(name).suffix}", tmp / f"mut{Path(name).suffix}"
    base_path.write_text(text, encoding="utf-8")
    mut_path.write_text("\n".join(mutated) + "\n", encoding="utf-8")

    base = _records(base_path)
    t0 = time.perf_counter()
    mut = _records(mut_path)  # anything but InputError propagates and fails the test
    assert time.perf_counter() - t0 < 5.0
    if base is None or mut is None:
        return
    lineno = m + 1
    # a duplicated line shifts every later line number by one: compare them shifted back
    if op == "duplicate":
        mut = mut.filter(pl.col("line") != lineno + 1).with_columns(
            pl.when(pl.col("line") > lineno + 1).then(pl.col("line") - 1).otherwise(pl.col("line")).alias("line"))
    near = set(range(lineno - 2, lineno + 3))
    cols = [c for c in base.columns if c not in SKIP and c in mut.columns]
    assert _by_line(mut, cols, near) == _by_line(base, cols, near)
    # a column only one side has (made by the mutated line, or by it before the mutation) holds
    # nothing on the untouched lines
    for df, other in ((base, mut), (mut, base)):
        only = [c for c in df.columns if c not in other.columns and c not in SKIP]
        far = df.filter(~pl.col("line").is_in(sorted(near)))
        assert all(far.get_column(c).null_count() == far.height for c in only), only
