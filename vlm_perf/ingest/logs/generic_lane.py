"""The generic extractor, vectorised: one Python extraction per distinct line *shape*, polars for the
lines.

A shape is a cleaned line with every number token replaced by ``#`` (``signature``). Lines of one
shape carry the same keys, separators, suffixes and units in the same places, so what
``generic.extract`` does to one of them it does to all: the column each number goes to and the
factors it is multiplied by (``vocab.value_factors``: suffix, then the key's scale, then the unit,
in ``value_of``'s order, so results are bit-identical). ``template_of`` derives that from the
shape's first line; the template is then checked against the Python extraction of up to
``VERIFY`` lines of the shape and used only when they agree exactly; otherwise (and for shapes it
does not cover: bars, epoch-based steps, a printed rank, Composer blocks) the lines go to the
per-line router as before. So the lane changes speed, never results (a test runs both).

Lines eligible (``lane_mask``): ASCII, no ``\\r``/ANSI/``^M``, selected only by the generic
pre-filter or a declared generic shape (``nanochat``, ``mmengine``), not by any other format's
pre-filter, and not a possible hard-wrap continuation.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import polars as pl

from . import generic
from .preprocess import PREFIX_RE, clean_line, prefix_label_expr, strip_prefix_expr
from .schema import KIND_DTYPE

#: Number tokens (a thousands-separated or plain number with optional sign, fraction, exponent).
TOKEN_RE = (r"[-+]?\d{1,3}(?:,\d{3})+(?:\.\d+)?(?:[eE][-+]?\d+)?"
            r"|[-+]?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?")
_TOKEN = re.compile(TOKEN_RE)
#: Lines of a new shape checked against the per-line extraction before its template is used.
VERIFY = 3
#: Set False to send every generic line through the per-line router (the tests' reference).
ENABLED = True
#: Distinct shapes a file may template; beyond it new shapes take the per-line path (a log whose every
#: line is its own shape gains nothing from templates).
MAX_SHAPES = 2000


def signature(clean: str) -> str:
    return _TOKEN.sub("#", clean)


@dataclass(frozen=True)
class Template:
    framework: str
    kind: str
    step_tok: int
    total_tok: int | None
    #: (column, token index or -1 for a constant, suffix, scale, unit, constant, normalise -0.0)
    cols: tuple


def template_of(clean: str) -> Template | None:
    """What ``generic.extract`` makes of a line of this shape, as token positions and factors; None
    when the shape is not covered (the lines then take the per-line path)."""
    shape = generic.shape_of(clean)
    if shape is not None and shape.name == "composer":
        return None
    ex = generic.extract(clean, shape.overrides if shape is not None else None)
    rec, st = ex.record, ex.step
    if rec is None or st is None or st.shape not in ("keyed", "mmengine") or st.epoch is not None or "_rank" in rec:
        return None
    toks = [(m.start(), m.group()) for m in _TOKEN.finditer(clean)]
    starts = {p: i for i, (p, _) in enumerate(toks)}
    in_step = [i for i, (p, _) in enumerate(toks) if st.start <= p < st.end]
    if not in_step or not _is_int(toks[in_step[0]][1], st.n):
        return None
    total_tok = None
    if "train_iters" in rec:
        if len(in_step) < 2 or not _is_int(toks[in_step[1]][1], st.total):
            return None
        total_tok = in_step[1]
    cols = []
    for col, val in rec.items():
        if col in ("iteration", "train_iters", "kind"):
            continue
        src = ex.sources.get(col)
        if src is None:
            return None  # a value not read from a token (the bar's rate, ...)
        raw, at, factors, mapped = src
        idx = starts.get(at)
        if idx is None:
            if isinstance(val, float) and (math.isnan(val) or math.isinf(val)):
                cols.append((col, -1, 1.0, 1.0, 1.0, val, False))
                continue
            return None
        if factors is None or not _TOKEN.fullmatch(toks[idx][1]) or not raw.startswith(toks[idx][1]):
            return None
        suf, scale, unit = factors
        cols.append((col, idx, suf, scale, unit, None, mapped))
    fw = shape.name if shape is not None else "generic"
    return Template(fw, rec.get("kind", "train"), in_step[0], total_tok, tuple(cols))


def _is_int(tok: str, n: int | None) -> bool:
    """``tok`` is the plain digits of ``n`` (leading zeros allowed: nanochat's ``step 00010``)."""
    return n is not None and tok.isdigit() and int(tok) == n


def _number(tok: pl.Expr) -> pl.Expr:
    return tok.str.replace_all(",", "", literal=True).cast(pl.Float64, strict=False)


def apply(t: Template, rows: pl.DataFrame) -> pl.DataFrame:
    """Records of ``rows`` (columns ``line``, ``rank_label``, ``toks``: the number tokens) of one shape."""
    toks = pl.col("toks")
    exprs = [pl.col("line"), pl.lit(0, pl.Int64).alias("_sub"), pl.col("rank_label"),
             pl.lit(t.framework).alias("framework"), pl.lit(t.kind).cast(KIND_DTYPE).alias("kind"),
             toks.list.get(t.step_tok).cast(pl.Int64, strict=False).alias("iteration")]
    if t.total_tok is not None:
        exprs.append(_number(toks.list.get(t.total_tok)).alias("train_iters"))
    for col, idx, suf, scale, unit, const, mapped in t.cols:
        if idx < 0:
            exprs.append(pl.lit(const, pl.Float64).alias(col))
            continue
        v = _number(toks.list.get(idx))
        if suf != 1.0:
            v = v * suf
        if mapped:
            v = v * scale * unit
            v = pl.when(v == 0.0).then(0.0).otherwise(v)
        exprs.append(v.alias(col))
    return rows.select(exprs)


def _python_record(clean: str) -> dict | None:
    shape = generic.shape_of(clean)
    ex = generic.extract(clean, shape.overrides if shape is not None else None)
    return ex.record


def _same(a: dict, b: dict) -> bool:
    if set(a) != set(b):
        return False
    for k, x in a.items():
        y = b[k]
        if isinstance(x, float) and isinstance(y, float) and math.isnan(x) and math.isnan(y):
            continue
        if x != y or type(x) is not type(y) and not (isinstance(x, (int, float)) and isinstance(y, (int, float))):
            return False
    return True


class Lane:
    """Per-file state: templates by shape (None: the shape takes the per-line path)."""

    def __init__(self) -> None:
        self.templates: dict[str, Template | None] = {}
        self.frames: list[pl.DataFrame] = []
        self.seen: dict[str, int] = {}

    def take(self, rows: pl.DataFrame) -> pl.Series:
        """Extract what it can of ``rows`` (``line``, ``text``: eligible lines); returns the mask of
        the rows it took (the rest go to the router)."""
        work = rows.select(
            pl.col("line"), pl.col("text"),
            prefix_label_expr(pl.col("text")).alias("rank_label"),
            strip_prefix_expr(pl.col("text")).alias("clean"),
        ).with_columns(pl.col("clean").str.replace_all(TOKEN_RE, "#").alias("sig"))
        for sig, first in work.group_by("sig", maintain_order=True).agg(pl.col("clean").head(VERIFY)).iter_rows():
            if sig in self.templates:
                continue
            self.templates[sig] = self._verified(first) if len(self.templates) < MAX_SHAPES else None
        ok = {s for s, t in self.templates.items() if t is not None}
        taken = work.get_column("sig").is_in(list(ok)) if ok else pl.Series([False] * work.height)
        if not taken.any():
            return taken
        mine = work.filter(taken).with_columns(pl.col("clean").str.extract_all(TOKEN_RE).alias("toks"))
        for sig, group in mine.group_by("sig", maintain_order=True):
            t = self.templates[sig[0]]
            out = apply(t, group)
            self.frames.append(out)
            self.seen[t.framework] = self.seen.get(t.framework, 0) + out.height
        return taken

    def _verified(self, cleans: list[str]) -> Template | None:
        t = template_of(cleans[0])
        if t is None:
            return None
        frame = pl.DataFrame({"line": list(range(len(cleans))), "rank_label": [None] * len(cleans),
                              "clean": cleans}, schema={"line": pl.Int64, "rank_label": pl.Utf8, "clean": pl.Utf8})
        got = apply(t, frame.with_columns(pl.col("clean").str.extract_all(TOKEN_RE).alias("toks"))).rows(named=True)
        for clean, row in zip(cleans, got):
            ref = _python_record(clean)
            if ref is None:
                return None
            mine = {k: v for k, v in row.items() if k not in ("line", "_sub", "rank_label", "framework", "kind")
                    and v is not None}
            ref = {k: v for k, v in ref.items() if k != "kind"}
            if not _same(mine, ref) or row["kind"] != (t.kind):
                return None
        return t


def lane_mask(text: pl.Expr, other_re: str) -> pl.Expr:
    """Lines the lane may take (see the module doc); ``other_re``: every other format's pre-filter."""
    own = ((text.str.contains(generic.PREFILTER) & text.str.contains(generic.METRIC_PREFILTER))
           | text.str.contains(r"\((?:train|val|test)\)\s{0,8}\[") | text.str.contains(r"^step \d{5}/\d{5} \("))
    return (own & (text.str.len_bytes() == text.str.len_chars())
            & ~text.str.contains_any(["\x1b", "\r", "^M"]) & ~text.str.contains(other_re))


__all__ = ["Lane", "Template", "template_of", "apply", "signature", "lane_mask", "TOKEN_RE", "PREFIX_RE",
           "clean_line"]
