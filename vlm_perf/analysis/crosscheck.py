"""Cross-check the TFLOP/s/GPU a log printed against our recomputation of its own formula.

For each window, logged = F_log / (t * N_log * 1e12). Recomputing F with the LM-only
``megatron-lm`` formula from the metadata, the world size the log's number implies is
N_implied = F / (t * logged * 1e12). A median ratio logged/recomputed off by more than 2% is
flagged with the usual causes. The same ratio is reported for every other FLOPs column the
analysis computed (each convention's total, and its LM-only part), so a log that uses another
convention (e.g. Megatron-Bridge's padded-token LM term) is recognised instead of just flagged.
"""

from __future__ import annotations

import polars as pl

from .selection import reliable_expr

TOLERANCE = 0.02


def crosscheck_log(windows: pl.DataFrame, world_size: int | None, flops_column: str = "megatron-lm_total",
                   convention: str = "megatron-lm", estimated: bool = False) -> dict:
    """``windows`` needs ``tflops_per_gpu_logged``, ``window_seconds`` and ``flops_column`` sums.

    ``estimated``: the FLOPs come from the run configuration (no metadata); a mismatch then names the
    estimate's assumptions first.
    """
    if "tflops_per_gpu_logged" not in windows.columns:
        return {"status": "no_logged_value", "message": "the log prints no TFLOP/s/GPU to compare with"}
    good = pl.col("reliable") if "reliable" in windows.columns else reliable_expr(windows.columns)
    logged = pl.col("tflops_per_gpu_logged")
    usable = windows.filter(logged.is_not_null() & logged.is_finite() & (logged > 0) & (pl.col(flops_column) > 0)
                            & good)
    if usable.height == 0:
        return {"status": "no_overlap", "message": "no complete window has both a logged TFLOP/s/GPU and metadata"}
    implied_world = _implied_world(usable, flops_column)
    result = {"convention": convention, "windows": usable.height, "implied_world_size": implied_world,
              "implied_world_size_rounded": int(round(implied_world)), "world_size": world_size}
    if world_size:
        ratio = world_size / implied_world  # = logged / recomputed
        result.update(ratio_logged_to_recomputed=ratio, status="ok" if abs(ratio - 1) <= TOLERANCE else "mismatch")
        result["candidates"] = _candidates(usable, world_size)
        if result["status"] == "mismatch":
            result["likely_causes"] = _causes(ratio, world_size, implied_world, result["candidates"], estimated)
    else:
        result["status"] = "world_size_inferred"
    return result


def _implied_world(windows: pl.DataFrame, flops_column: str) -> float:
    implied = windows.select((pl.col(flops_column) / (pl.col("window_seconds") * pl.col("tflops_per_gpu_logged")
                                                      * 1e12)).alias("n"))["n"]
    return float(implied.median())


def _candidates(windows: pl.DataFrame, world_size: int) -> dict[str, float]:
    """logged / recomputed for every convention total and LM-only part the analysis computed."""
    out = {}
    for column in windows.columns:
        if not column.endswith(("_total", "_language")) or windows[column].sum() <= 0:
            continue
        if column.endswith("_language") and windows[column].sum() == windows[column[:-9] + "_total"].sum():
            continue  # an LM-only convention: its LM part is its total
        name = column.removesuffix("_total") if column.endswith("_total") else \
            column.removesuffix("_language") + " (LM only)"
        out[name] = world_size / _implied_world(windows, column)
    return out


def plausible_world(implied: float, world: int) -> bool:
    """``implied`` is (within 1%) a GPU count a misconfigured world size would give: a whole multiple or
    fraction of the stated one, or a multiple of 8 GPUs (a node count off)."""
    n = round(implied)
    if n < 1 or n == world or abs(implied - n) > 0.01 * implied:
        return False
    return n % world == 0 or world % n == 0 or n % 8 == 0


def _causes(ratio: float, world: int, implied: float, candidates: dict[str, float],
            estimated: bool = False) -> list[str]:
    causes = []
    if estimated:
        causes.append("the ESTIMATE assumes every sample is seq_length tokens with the stated media; the log counts "
                      "what was really trained (real tokens, other media): pass --metadata for exact numbers")
    matching = [name for name, r in candidates.items() if abs(r - 1) <= TOLERANCE]
    if matching:
        causes.append(f"the log's number matches the {' / '.join(matching)} convention instead")
    if plausible_world(implied, world):
        causes.append(f"wrong world size: the log's number fits {round(implied)} GPUs, not {world}")
    if ratio > 1:
        causes.append("the log counts padded tokens (or the configured sequence length) where the metadata has "
                      "real tokens")
        causes.append("the log uses a convention that counts more (e.g. vision included, no causal half)")
    else:
        causes.append("the log counts fewer FLOPs (e.g. real tokens vs padding in the metadata, LM only)")
    causes.append("metadata incomplete (missing ranks or microbatches) or windows misaligned with the log")
    return causes
