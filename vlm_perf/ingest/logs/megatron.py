"""Megatron-family iteration lines, vectorised (the hot path of big logs).

Covers Megatron-LM (all layouts: with/without ``[timestamp]``, with microseconds, throughput,
energy/power, decoupled lr), Megatron-Bridge (same iteration layout), Megatron-DeepSpeed forks
(``consumed tokens``, ``tokens per gpu per second (tgs)``, ``TFLOPs``) and FlagScale.

Layout: ``[ts] iteration <it>/<N> | <key>: <value> | ... |``. Every field is optional.

Two extraction paths share KNOWN_KEYS and semantics (tested against a per-line regex loop):

* ``fast_plan`` (lazy, streaming; the bulk of big logs): complete ASCII lines ending in ``|``.
  For each key probed on a sample it does one literal ``str.find`` of ``"| key:"`` and one
  ``str.slice`` up to the next present key; no regex, no split. Rows it cannot vouch for (more
  fields than keys found, an unparsable value, a launcher prefix when the sample had none) keep
  their text and are redone by ``extract``.
* ``extract`` (eager, checked): each value must be terminated by ``|`` within a short window, so
  a line truncated mid-number yields null for that field (reported as partial) instead of a
  wrong number.

Byte offsets (``find``) and char offsets (``slice``) only agree on ASCII text; the caller
routes non-ASCII rows through the cleaning path, which masks non-ASCII characters.
"""

from __future__ import annotations

import re

import polars as pl

from .formats import LogFormat, register
from .preprocess import PREFIX_RE, prefix_label_expr
from .schema import extra_name, note_text, snake_case

FORMAT = "megatron"

#: Pre-filter for the fast path (applied to raw text): ``iteration 12/ 5000 |``.
DETECT_RE = r"iteration\s+\d+\s*/\s*\d+\s*\|"
#: Same-looking NeMo 2 line, handled by the NeMo parser (quirk 29).
NEMO2_COLLISION_RE = r"epoch \d+, iteration"

# key as printed -> (output column, multiplier). Unknown keys become snake_case extras.
KNOWN_KEYS: dict[str, tuple[str, float]] = {
    "consumed samples": ("consumed_samples", 1.0),
    "skipped samples": ("skipped_samples", 1.0),
    "consumed tokens": ("consumed_tokens", 1.0),
    "elapsed time per iteration (ms)": ("elapsed_s", 1e-3),
    "throughput per GPU (TFLOP/s/GPU)": ("tflops_per_gpu_logged", 1.0),
    "energy per GPU (J/iter/GPU)": ("energy_per_gpu_j_per_iter", 1.0),
    "power per GPU (W/GPU)": ("power_per_gpu_w", 1.0),
    "learning rate": ("lr", 1.0),
    "decoupled learning rate": ("decoupled_lr", 1.0),
    "global batch size": ("global_batch_size", 1.0),
    "lm loss": ("loss", 1.0),
    "loss scale": ("loss_scale", 1.0),
    "grad norm": ("grad_norm", 1.0),
    "num zeros": ("num_zeros", 1.0),
    "params norm": ("params_norm", 1.0),
    "actual seqlen": ("actual_seqlen", 1.0),
    "number of skipped iterations": ("skipped_iterations", 1.0),
    "number of nan iterations": ("nan_iterations", 1.0),
    "samples per second": ("samples_per_s", 1.0),
    "tokens per gpu per second (tgs)": ("tokens_per_s", 1.0),
    "TFLOPs": ("_tflops_ds", 1.0),  # Megatron-DeepSpeed per-GPU TFLOP/s; coalesced below
    # GPT-NeoX (a Megatron-DeepSpeed fork): `lm_loss`, and `approx flops per GPU: 112.9TFLOPS` (a
    # human-readable rate with a unit, converted to TFLOP/s by `extract`); coalesced in `finish`
    "lm_loss": ("_neox_loss", 1.0),
    "approx flops per GPU": ("_neox_tflops", 1.0),
    # per-GPU token rates of newer Megatron-LM / Bridge logs
    "tokens/sec/gpu": ("_tokens_per_gpu", 1.0),
    "tokens per sec per gpu": ("_tokens_per_gpu", 1.0),
    # `elapsed time per iteration: 2512.3 ms` (unit after the value; ms when none is printed)
    "elapsed time per iteration": ("_elapsed_unit", 1.0),
    # a plain `loss:` (ms-swift's Megatron trainers, GRPO included): the loss where the line prints no
    # `lm loss`; next to an `lm loss` it is another loss, kept as the extra `loss_extra` (`finish`)
    "loss": ("_loss_plain", 1.0),
}

#: Private outputs merged into a core column by ``finish`` (first non-null wins, in this order).
_COALESCE = {
    "tflops_per_gpu_logged": ("_tflops_ds", "_neox_tflops"),
    "loss": ("_neox_loss",),
    "tokens_per_s": ("_tokens_per_gpu",),
    "elapsed_s": ("_elapsed_unit",),
}
#: ``112.9TFLOPS`` -> 112.9 (TFLOP/s); the SI prefix scales to tera.
_FLOPS_UNIT = {"": 1e-12, "K": 1e-9, "M": 1e-6, "G": 1e-3, "T": 1.0, "P": 1e3, "E": 1e6, "Z": 1e9}

#: Window after ``key:`` that must contain the value and its terminating ``|``.
_WINDOW = 48
_TS_RE = r"\[(\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d(?:[.,]\d+)?)\]"
_KEY_DISCOVERY_RE = r"\|\s*([^|:]+?):"


def _probe_keys(df: pl.DataFrame, text_col: str, keys: dict[str, tuple[str, float]], n: int = 2000) -> dict:
    """Keys present in the first/last ``n`` rows. Cheap way to skip ``find`` for absent keys; rows
    holding any other key are caught by the field count and re-extracted with every key."""
    sample = pl.concat([df.head(n), df.tail(n)]) if df.height > 2 * n else df
    text = pl.col(text_col)
    hits = sample.select([text.str.contains(f"| {k}:", literal=True).any().alias(f"k{i}")
                          for i, k in enumerate(keys)]).row(0)
    return {k: v for (k, v), hit in zip(keys.items(), hits) if hit}


def probe_keys(texts: pl.Series) -> dict[str, tuple[str, float]]:
    """Known keys that occur in a sample of iteration lines (e.g. the first few thousand)."""
    return _probe_keys(texts.to_frame("text"), "text", KNOWN_KEYS, n=len(texts))


def _is_plain(text: pl.Expr) -> pl.Expr:
    """No launcher prefix possible: the line starts like a bare Megatron line."""
    return (text.str.starts_with(" [") | text.str.starts_with(" iteration") | text.str.starts_with("[2")
            | text.str.starts_with("iteration"))


def key_order(texts: pl.Series, keys: dict[str, tuple[str, float]]) -> dict[str, tuple[str, float]]:
    """Probed keys sorted by where they usually appear in the line (Megatron prints a fixed order)."""
    df = texts.to_frame("text")
    med = df.select([pl.col("text").str.find(f"| {k}:", literal=True).median().alias(f"k{i}")
                     for i, k in enumerate(keys)]).row(0) if keys else ()
    return dict(sorted(keys.items(), key=lambda kv: med[list(keys).index(kv[0])]))


def has_fraction(texts: pl.Series) -> bool:
    """Whether sampled timestamps carry fractional seconds (Megatron-LM >= 2026-01)."""
    return bool(texts.to_frame("t").select(pl.col("t").str.contains(r"\[\d{4}-\d\d-\d\d[ T][\d:]{8}[.,]\d").any()).item())


def _marker_positions(text: pl.Expr, keys: dict[str, tuple[str, float]]):
    """Byte offsets of every ``| key:`` marker (``_p<i>``) and of ``iteration`` (``_pit``)."""
    items = list(keys.items())
    markers = [f"| {k}:" for k, _ in items]
    pcols = [f"_p{i}" for i in range(len(items))]
    positions = [text.str.find(m, literal=True).cast(pl.Int64).alias(c) for m, c in zip(markers, pcols)]
    positions.append(text.str.find("iteration", literal=True).cast(pl.Int64).alias("_pit"))
    return items, markers, pcols, positions


def fast_plan(lf: pl.LazyFrame, keys: dict[str, tuple[str, float]], *, label: bool = True,
              fraction: bool = True, text_col: str = "text") -> pl.LazyFrame:
    """Lazy (streamable) extraction for complete, ASCII Megatron lines (ending in ``|``).

    ``keys``: the probed keys in print order (``key_order``). A value ends where the next
    present key (in that order) starts, or at the final ``|``: one ``find`` and one ``slice``
    per key, no regex. Rows where that assumption can fail keep their ``text`` for the checked
    path: ``_unknown_keys`` (more ``|`` fields than keys found), ``_partial`` (a value did not
    parse, e.g. an unusual key order) and, with ``label=False``, rows that may carry a launcher
    prefix (``_prefixed``). ``fraction=False`` skips fractional seconds (none in the sample) and
    flags timestamps that do have them as ``_partial`` so they are redone.
    """
    text = pl.col(text_col)
    items, markers, pcols, positions = _marker_positions(text, keys)
    lf = lf.with_columns(*positions)
    last_bar = text.str.len_bytes().cast(pl.Int64) - 1
    vals = _value_exprs(text, items, pcols, markers, last_bar)
    head = text.str.slice(0, pl.col("_pit"))
    it = text.str.slice(pl.col("_pit") + 9, 40).str.split_exact("/", 1)
    ts = head.str.slice(head.str.find(r"\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d"), 26)
    when_ = ts.str.slice(0, 19).str.to_datetime("%Y-%m-%d %H:%M:%S", strict=False, time_unit="us")
    if fraction:
        micros = ts.str.slice(20, 6).str.pad_end(6, "0").cast(pl.Int64, strict=False).fill_null(0)
        stamp = when_ + pl.duration(microseconds=micros)
        odd_ts = None
    else:
        stamp = when_
        odd_ts = ts.str.slice(19, 1).is_in([".", ","]).fill_null(False)
    found = pl.sum_horizontal([pl.col(c).is_not_null().cast(pl.Int32) for c in pcols]) if pcols else pl.lit(0)
    n_fields = text.str.count_matches("|", literal=True).cast(pl.Int32) - 1
    lf = lf.with_columns(
        *vals,
        (prefix_label_expr(head) if label else pl.lit(None, pl.Utf8)).alias("rank_label"),
        stamp.alias("timestamp"),
        it.struct.field("field_0").str.strip_chars().cast(pl.Int64, strict=False).alias("iteration"),
        it.struct.field("field_1").str.split_exact("|", 1).struct.field("field_0").str.strip_chars()
        .cast(pl.Int64, strict=False).alias("train_iters"),
        (n_fields > found).alias("_unknown_keys"),
        (pl.lit(False) if label else ~_is_plain(text)).alias("_prefixed"),
    )
    bad = [pl.col(c).is_not_null() & pl.col(items[i][1][0]).is_null() for i, c in enumerate(pcols)]
    checks = bad + ([odd_ts] if odd_ts is not None else [])
    # (never pass a bare literal to any_horizontal: it can broadcast the frame to one row)
    partial = pl.any_horizontal(*checks) if checks else pl.col("_unknown_keys") & False
    lf = lf.with_columns(partial.alias("_partial"))
    keep = pl.col("_unknown_keys") | pl.col("_partial") | pl.col("_prefixed")
    return lf.with_columns(pl.when(keep).then(text).alias(text_col)).drop(*pcols, "_pit")


def _value_exprs(text: pl.Expr, items: list, pcols: list[str], markers: list[str], last_bar: pl.Expr) -> list[pl.Expr]:
    """Value of key i = text between its marker and the next present key's marker (or the final
    ``|``), stripped, as Float64 (times the key's multiplier). Shared by both fast plans."""
    vals = []
    for i, (c, m) in enumerate(zip(pcols, markers)):
        start = pl.col(c) + len(m)
        end = pl.coalesce(*[pl.col(o) for o in pcols[i + 1:]], last_bar)
        name, mult = items[i][1]
        # an unusual key order gives end < start: empty -> null -> _partial -> checked redo
        v = text.str.slice(start, (end - start).clip(lower_bound=0)).str.strip_chars().cast(pl.Float64, strict=False)
        vals.append((v * mult if mult != 1.0 else v).alias(name))
    return vals


def canonical_plan(lf: pl.LazyFrame, keys: dict[str, tuple[str, float]], *, fraction: bool,
                   text_col: str = "text") -> pl.LazyFrame:
    """Cheaper variant of ``fast_plan(label=False)`` for the canonical layout of plain lines
    (`` [YYYY-MM-DD HH:MM:SS(.ffffff)] iteration  N/  M | key: v | ... |`` or no timestamp).

    Rows it vouches for (``_canon``) get exactly the values ``fast_plan(lf, keys, label=False,
    fraction=fraction)`` would give them with no ``_unknown_keys``/``_partial``/``_prefixed``
    flag; every other row keeps its ``text`` (and ``_canon`` False) for ``fast_plan``.

    Savings over ``fast_plan``: literal ``find`` + fixed-offset slices instead of a regex search
    for the timestamp, of two ``split_exact`` for ``iteration N/M`` and of ``count_matches``. The
    field count is implied: when the first ``|`` is the first present key's marker and every
    present value parses as a number (a number holds no ``|``), the markers and values tile the
    line up to the final ``|``, so there are no unaccounted fields.
    """
    text = pl.col(text_col)
    items, markers, pcols, positions = _marker_positions(text, keys)
    lf = lf.with_columns(
        *positions,
        text.str.find("|", literal=True).cast(pl.Int64).alias("_b0"),
        text.str.find("/", literal=True).cast(pl.Int64).alias("_sl"),
        text.str.find("]", literal=True).cast(pl.Int64).alias("_rb"),
        text.str.starts_with(" ").cast(pl.Int64).alias("_lb"),  # position of "[" if any
    )
    pit, b0, sl, rb, lb = (pl.col(c) for c in ("_pit", "_b0", "_sl", "_rb", "_lb"))
    last_bar = text.str.len_bytes().cast(pl.Int64) - 1
    vals = _value_exprs(text, items, pcols, markers, last_bar)
    # timestamp: fixed offsets after "[" (fast_plan: first regex match in the text before
    # "iteration"; the text before "[" is " " or "", so the first match can only start there)
    when_ = text.str.slice(lb + 1, 19).str.to_datetime("%Y-%m-%d %H:%M:%S", strict=False, time_unit="us")
    if fraction:  # fast_plan: 6 chars after the seconds' separator, else 0 micros
        micros = pl.when(rb == lb + 27).then(
            text.str.slice(lb + 21, 6).cast(pl.Int64, strict=False).fill_null(0)).otherwise(0)
        stamp = when_ + pl.duration(microseconds=micros)
        ts_ok = (rb == lb + 20) | (rb == lb + 27)
    else:  # a fraction makes fast_plan flag the row: not canonical
        stamp = when_
        ts_ok = rb == lb + 20
    no_ts = (pit == 0) | ((pit == 1) & (lb == 1))  # "iteration" / " iteration"
    with_ts = ((text.str.starts_with(" [") | text.str.starts_with("[2")) & (pit == rb + 2) & ts_ok
               & when_.is_not_null())
    it = text.str.slice(pit + 9, sl - pit - 9).str.strip_chars().cast(pl.Int64, strict=False)
    tot = text.str.slice(sl + 1, b0 - sl - 1).str.strip_chars().cast(pl.Int64, strict=False)
    # fast_plan reads "N/M" inside a 40-char window after "iteration", up to the first "/" and "|"
    it_ok = (sl > pit + 9) & (b0 > sl) & (b0 < pit + 49)
    first_key = pl.coalesce(*[pl.col(c) for c in pcols]) if pcols else pl.lit(None, pl.Int64)
    lf = lf.with_columns(
        *vals,
        pl.lit(None, pl.Utf8).alias("rank_label"),
        stamp.alias("timestamp"),
        it.alias("iteration"),
        tot.alias("train_iters"),
    )
    values_ok = [pl.col(c).is_null() | pl.col(items[i][1][0]).is_not_null() for i, c in enumerate(pcols)]
    canon = ((no_ts | with_ts) & it_ok & pl.col("iteration").is_not_null() & pl.col("train_iters").is_not_null()
             & (b0 == first_key).fill_null(False))
    if values_ok:  # (never a bare literal inside all_horizontal: it can broadcast to one row)
        canon = canon & pl.all_horizontal(*values_ok)
    return (lf.with_columns(canon.alias("_canon"))
            .with_columns(pl.when(~pl.col("_canon")).then(text).alias(text_col),
                          pl.lit(False).alias("_unknown_keys"), pl.lit(False).alias("_prefixed"),
                          pl.lit(False).alias("_partial"))
            .drop(*pcols, "_pit", "_b0", "_sl", "_rb", "_lb"))


def extract(df: pl.DataFrame, text_col: str = "text", keys: dict[str, tuple[str, float]] | None = None) -> pl.DataFrame:
    """Checked eager extraction for the few rows the fast plan cannot take (truncated, prefixed,
    non-ASCII, unknown keys, garbled values).

    Adds: rank_label, timestamp, iteration, train_iters, one Float64 column per key present,
    ``_partial`` (a key present but its value unparsable or not terminated by ``|``) and
    ``_unknown_keys`` (``|`` fields that no key accounts for). Thousands separators are accepted.
    """
    keys = KNOWN_KEYS if keys is None else keys
    text = pl.col(text_col)
    items = list(keys.items())
    markers = [f"| {k}:" for k, _ in items]
    df = df.with_columns([text.str.find(m, literal=True).alias(f"_p{i}") for i, m in enumerate(markers)])
    present_any = df.select([pl.col(f"_p{i}").is_not_null().any() for i in range(len(items))]).row(0) if df.height else ()
    live = [i for i, ok in enumerate(present_any) if ok]
    # value = text up to the next "|" inside a short window; null when no "|" follows (truncated)
    windows = [text.str.slice(pl.col(f"_p{i}") + len(markers[i]), _WINDOW).str.split_exact("|", 1).alias(f"_w{i}")
               for i in live]
    df = df.with_columns(*windows, text.str.find("iteration", literal=True).alias("_pit"))
    vals = []
    for i in live:
        name, mult = items[i][1]
        raw = pl.col(f"_w{i}").struct.field("field_0").str.strip_chars()
        raw = pl.when(pl.col(f"_w{i}").struct.field("field_1").is_not_null()).then(
            raw.str.replace_all(",", "", literal=True))
        v = raw.cast(pl.Float64, strict=False)
        if name == "_neox_tflops":  # `112.9TFLOPS`: number and SI prefix -> TFLOP/s
            parts = raw.str.extract_groups(r"^([-+0-9.eE]+)\s*([KMGTPEZ]?)FLOPS$")
            scale = parts.struct.field("2").replace_strict(_FLOPS_UNIT, default=None, return_dtype=pl.Float64)
            v = pl.coalesce(v, parts.struct.field("1").cast(pl.Float64, strict=False) * scale)
        elif name == "_elapsed_unit":  # `2512.3 ms` / `2.5 s` / a bare number (ms) -> seconds
            parts = raw.str.extract_groups(r"^([-+0-9.eE]+)\s*(ms|s)?$")
            unit = pl.when(parts.struct.field("2") == "s").then(1.0).otherwise(1e-3)
            v = parts.struct.field("1").cast(pl.Float64, strict=False) * unit
        vals.append((v * mult if mult != 1.0 else v).alias(name))
    head = text.str.slice(0, pl.col("_pit"))
    it = text.str.slice(pl.col("_pit"), 40).str.extract_groups(r"^iteration\s+(\d+)\s*/\s*(\d+)")
    ts = head.str.extract(_TS_RE, 1).str.replace(",", ".", literal=True)
    found = [pl.col(f"_p{i}").is_not_null() for i in live]
    bad = [pl.col(f"_p{i}").is_not_null() & pl.col(items[i][1][0]).is_null() for i in live]
    n_fields = text.str.count_matches("|", literal=True) - 1
    df = df.with_columns(*vals).with_columns(
        prefix_label_expr(head).alias("rank_label"),
        ts.str.to_datetime("%Y-%m-%d %H:%M:%S%.f", strict=False, time_unit="us").alias("timestamp"),
        it.struct.field("1").cast(pl.Int64, strict=False).alias("iteration"),
        it.struct.field("2").cast(pl.Int64, strict=False).alias("train_iters"),
        (pl.any_horizontal(bad) if bad else pl.col("_pit").is_null() & False).alias("_partial"),
        (n_fields > (pl.sum_horizontal(found) if found else 0)).alias("_unknown_keys"),
    )
    return df.drop([c for c in df.columns if c.startswith(("_p", "_w")) and c != "_partial"])


def finish(df: pl.DataFrame) -> pl.DataFrame:
    """Post-process extracted rows: fork spellings (Megatron-DeepSpeed ``TFLOPs``, GPT-NeoX
    ``lm_loss`` / ``approx flops per GPU``, ``tokens/sec/gpu``, iteration time in s) coalesced into
    their core column, drop all-null extras, framework label."""
    if "_loss_plain" in df.columns:
        df = _take_loss_plain(df)
    for core, privates in _COALESCE.items():
        present = [c for c in privates if c in df.columns]
        if present:
            cols = ([core] if core in df.columns else []) + present
            df = df.with_columns(pl.coalesce(cols).alias(core)).drop(present)
    keep_always = {"consumed_samples", "elapsed_s", "tflops_per_gpu_logged", "lr", "global_batch_size",
                   "loss", "grad_norm", "skipped_iterations", "nan_iterations", "tokens_per_s"}
    drop = [c for c, (name, _) in ((k, v) for k, v in KNOWN_KEYS.items())
            for c in [name] if c in df.columns and c not in keep_always and df.get_column(c).null_count() == df.height]
    if "train_iters" in df.columns and df.get_column("train_iters").null_count() == df.height:
        drop.append("train_iters")
    return df.drop(sorted(set(drop))).with_columns(pl.lit(FORMAT).alias("framework"))


def _take_loss_plain(df: pl.DataFrame) -> pl.DataFrame:
    """A plain ``loss:`` is the loss of a line without ``lm loss`` (or GPT-NeoX ``lm_loss``); on a line
    that has one it is a second loss, kept as an extra column (``loss_extra``, the rename noted)."""
    plain = pl.col("_loss_plain")
    other = [c for c in ("loss", "_neox_loss") if c in df.columns]
    has_other = pl.any_horizontal([pl.col(c).is_not_null() for c in other]) if other else pl.lit(False)
    flags = df.select((plain.is_not_null() & has_other).any().alias("extra"),
                      (plain.is_not_null() & ~has_other).any().alias("core")).row(0)
    out = []
    if flags[0]:
        name = extra_name("loss", set(df.columns))
        out.append(pl.when(has_other).then(plain).alias(name))
    if flags[1]:
        out.append(pl.coalesce([*([pl.col("loss")] if "loss" in df.columns else []),
                                pl.when(~has_other).then(plain)]).alias("loss"))
    return df.with_columns(out).drop("_loss_plain")


def discover_unknown(df: pl.DataFrame, text_col: str = "text") -> pl.DataFrame:
    """Extract fields whose keys are not in KNOWN_KEYS (MoE/MTP losses, new fields).

    Runs only on rows flagged ``_unknown_keys``. The key set is found with ``extract_all`` and the
    values with the same find/slice extraction as the known keys.
    """
    # the most frequent spelling first, then a plain one (letters, digits, spaces, _-/().), then the
    # earliest: a key damaged on one line never takes the real key's name
    found = (df.select(pl.col("line"), pl.col(text_col).str.extract_all(_KEY_DISCOVERY_RE).alias("k"))
             .explode("k").drop_nulls("k"))
    counts = (found.group_by("k").agg(pl.len().alias("n"), pl.col("line").min().alias("first"))
              .with_columns((~pl.col("k").str.contains(r"^\|\s*[A-Za-z0-9 _/().-]+:$")).alias("odd"))
              .sort(["n", "odd", "first", "k"], descending=[True, False, False, False]))
    keys = counts.get_column("k").to_list()
    unknown: dict[str, tuple[str, float]] = {}
    # an unknown key never takes a known, internal or already present column (nor another unknown
    # spelling's): it gets a distinct name and the rename is reported (schema.drain_renames)
    taken = set(df.columns) | {name for name, _ in KNOWN_KEYS.values()} | set(_COALESCE)
    for raw in keys:
        m = re.match(_KEY_DISCOVERY_RE, raw)
        key = m.group(1).strip() if m else None
        if not key or key in KNOWN_KEYS or key.startswith("iteration") or key in unknown:
            continue
        name = extra_name(snake_case(key), taken)
        if name in taken:  # one more repeat of an over-used spelling: dropped (and noted)
            continue
        taken.add(name)
        unknown[key] = (name, 1.0)
    if not unknown:
        return df
    partial = df.get_column("_partial")
    base = df.drop([c for c in ("rank_label", "timestamp", "iteration", "train_iters", "_partial", "_unknown_keys") if c in df.columns])
    out = extract(base.select(text_col, "line"), text_col, unknown)
    # a field that is never a number (an ETA `0:03:00`, a tag) is not kept and not "partial" on
    # every line: one note says so; a field that is numeric on some lines and not on others is
    text = df.get_column(text_col)
    new_cols, lost = [], pl.zeros(df.height, dtype=pl.Boolean, eager=True)
    for key, (name, _) in unknown.items():
        if name not in out.columns:
            continue
        values = out.get_column(name)
        if values.null_count() == values.len():
            sample = text.str.extract(re.escape(f"| {key}:") + r"\s*([^|]{0,40})", 1).drop_nulls()
            note_text(f"Megatron field {key!r} is not a number (e.g. {sample[0].strip()!r}); not kept"
                      if len(sample) else f"Megatron field {key!r} is not a number; not kept")
            continue
        new_cols.append(name)
        lost = lost | (text.str.contains(f"| {key}:", literal=True) & values.is_null())
    return df.with_columns(out.select(new_cols)).with_columns((partial | lost).alias("_partial"))


# ---- Megatron-Bridge Step Time line (slow path; one per log interval) ---------------------------

STEP_TIME_RE = re.compile(
    r"Step Time\s*:\s*(?P<s>[-+\d.eE]+)\s*s\s+GPU utilization:\s*(?P<tf>[-+\d.eE,]+)\s*(?:MODEL_)?TFLOP/s/GPU"
)


def parse_step_time(text: str) -> dict | None:
    """``Step Time : 2.50s GPU utilization: 401.2MODEL_TFLOP/s/GPU`` (no iteration number: the
    caller attaches the iteration of the nearest Megatron iteration line)."""
    m = STEP_TIME_RE.search(text)
    if not m:
        return None
    try:
        return {"step_time_s": float(m.group("s")),
                "model_tflops_per_gpu": float(m.group("tf").replace(",", ""))}
    except ValueError:
        return None


# ---- arguments block -> run_config --------------------------------------------------------------

ARG_RE = re.compile(r"^\s*([A-Za-z_][\w]*)\s\.{3,}\s(.*?)\s*$")
# YAML-style config dumps (e.g. Megatron-Bridge printing its ConfigContainer): "  key: value",
# indented, for the keys we keep only.
YAML_ARG_RE = re.compile(r"^\s+([a-z_]+):\s+([0-9][\d_]*)\s*$")
RUN_CONFIG_KEYS = {
    "world_size": "world_size",
    "seq_length": "seq_length",
    "micro_batch_size": "micro_batch_size",
    "global_batch_size": "global_batch_size",
    "tensor_model_parallel_size": "tensor_model_parallel_size",
    "pipeline_model_parallel_size": "pipeline_model_parallel_size",
    "context_parallel_size": "context_parallel_size",
    "expert_model_parallel_size": "expert_model_parallel_size",
    "data_parallel_size": "data_parallel_size",
    "sequence_length": "seq_length",  # Megatron-Bridge dataset config
    "num_layers": "num_layers",
    "hidden_size": "hidden_size",
    "train_iters": "train_iters",
    "recompute_granularity": "recompute_granularity",  # full | selective | None (read by analysis.hfu)
    "recompute_method": "recompute_method",
    "recompute_num_layers": "recompute_num_layers",
}


def parse_argument(text: str) -> tuple[str, object] | None:
    """``  world_size ........................ 8`` (Megatron arguments block) or ``  world_size: 8``
    (an indented YAML config dump) -> ("world_size", 8), for the keys we keep."""
    m = ARG_RE.match(text) or YAML_ARG_RE.match(text)
    if not m or m.group(1) not in RUN_CONFIG_KEYS:
        return None
    raw = m.group(2)
    try:
        value: object = int(raw)
    except ValueError:
        try:
            value = float(raw)
        except ValueError:
            value = raw
    return RUN_CONFIG_KEYS[m.group(1)], value


# ---- registration ------------------------------------------------------------------------------

_MEGA = re.compile(DETECT_RE)
_NEMO2_COLLISION = re.compile(NEMO2_COLLISION_RE)


def _handle_iteration(router, line: int, sub: int, label: str | None, text: str, s: str) -> bool:
    """Iteration lines the vectorised path could not take (glued after ``\r``, ANSI, non-ASCII):
    cleaned here, extracted later by the same vectorised ``extract``."""
    if not _MEGA.search(text) or _NEMO2_COLLISION.search(text):
        return False
    if sub:
        _flush(router, line, sub, label, text)
    else:  # possibly hard-wrapped (terminal or paste width): the next physical lines may continue it
        router.hold(line, sub, label, text, _continues, _flush, _glue)
    return True


def _glue(so_far: str, text: str, s: str) -> str:
    """A terminal wrap cuts at a column and loses no character: join the pieces as printed."""
    return so_far + text


#: A piece that continues a hard-wrapped iteration record (raw text): the tail of a field then its
#: ``|``, or a ``| key:`` field; never a timestamped/bracketed line. The same regex runs vectorised
#: (``parser``) to route such lines and the record line before them.
CONTINUATION_RE = r"^(?:[^|\[%]{0,80} \||\|\s?[A-Za-z])"  # Megatron writes " | "; a tqdm bar "10%|" is no piece
_CONT = re.compile(CONTINUATION_RE)


def _continues(text: str, s: str) -> bool:
    return (_CONT.match(s) is not None and _MEGA.search(s) is None and "Step Time" not in s
            and "time (ms)" not in s)


def _flush(router, line: int, sub: int, label: str | None, text: str) -> None:
    if router.allowed(FORMAT):
        router.mega_rows.append((line, sub, label, text))


def _handle_step_time(router, line: int, sub: int, label: str | None, text: str, s: str) -> bool:
    if "Step Time" not in text:
        return False
    rec = parse_step_time(text)
    if rec is None and "GPU utilization" not in text:
        return False
    if router.allowed("megatron-bridge"):
        router.emit("megatron-bridge", line, sub, label, rec)
    return True


register(LogFormat(
    name=FORMAT,
    source="Megatron-LM iteration line (every version: with/without `[timestamp]`, microseconds, "
           "`throughput per GPU`, energy/power, decoupled lr), Megatron-Bridge iteration line, "
           "Megatron-DeepSpeed forks (`consumed tokens`, `tgs`, `TFLOPs`), FlagScale, GPT-NeoX",
    example=" [2024-05-01 12:00:10] iteration       10/    1000 | consumed samples:         2560 | "
            "elapsed time per iteration (ms): 2512.3 | throughput per GPU (TFLOP/s/GPU): 401.2 | "
            "learning rate: 3.000000E-05 | global batch size:   256 | lm loss: 8.123456E+00 | loss scale: 1.0 | "
            "grad norm: 2.345 | number of skipped iterations:   0 | number of nan iterations:   0 |",
    notes="vectorised hot path; unknown `key: value` fields (MoE/MTP losses) become extra columns, renamed "
          "`<name>_extra` (with a note) when they would collide with a known column; a line without an "
          "iteration number is failed",
    prefilter=r"iteration\s+\d+\s*/",
    detect=DETECT_RE,
    order=10,
    handle=_handle_iteration,
))

register(LogFormat(
    name="megatron-bridge",
    source="Megatron-Bridge `Step Time : 2.50s GPU utilization: 401.2MODEL_TFLOP/s/GPU` (also the early "
           "`… TFLOP/s/GPU` variant)",
    example="Step Time : 2.50s GPU utilization: 401.2MODEL_TFLOP/s/GPU",
    notes="no iteration on the line: attached to the next Megatron iteration line of the same file (else the "
          "previous one); columns `step_time_s`, `model_tflops_per_gpu`",
    prefilter=r"Step Time",
    detect=r"Step Time\s*:.*GPU utilization",
    order=30,
    handle=_handle_step_time,
))

__all__ = ["DETECT_RE", "NEMO2_COLLISION_RE", "KNOWN_KEYS", "fast_plan", "canonical_plan", "extract", "finish",
           "discover_unknown", "parse_step_time", "parse_argument", "PREFIX_RE"]
