"""Language-model sufficient statistics from causal sub-sequence lengths.

A packed microbatch holds several documents, each its own causal attention sequence of ``s``
tokens. Attention cost is quadratic per sequence, so the statistics are
``tokens = sum(s)`` and ``tokens_sq = sum(s^2)`` (plus the sequence count). Padding tokens, when a
framework computes on them, are a separate statistic (``padded_tokens``), never mixed in here.
"""

from __future__ import annotations

from typing import Any, Iterable

from ..errors import InputError

def beyond_window_sq(seq_len: Any, window: int | None) -> Any:
    """max(s - W, 0)^2: what a sliding window of W tokens (query included) removes from s^2.

    A causal layer with window W computes, per query i, min(i+1, W) keys; in the continuous "causal half"
    convention (s^2/2 for full causal) that is (s^2 - max(s - W, 0)^2) / 2 = s*W - W^2/2 for s > W.
    """
    if not window:
        return 0
    if isinstance(seq_len, int):
        return max(seq_len - window, 0) ** 2
    over = (seq_len - window).clip(lower_bound=0)  # polars expression
    return over * over


def seq_len_stats(seq_lens: Iterable[int], where: str = "seq_lens", window: int | None = None) -> dict[str, int]:
    """Sum, sum of squares and count of positive integer sequence lengths (and the sliding-window
    statistic ``tokens_sq_beyond_window`` for a window of ``window`` tokens)."""
    tokens = tokens_sq = count = beyond = 0
    for i, s in enumerate(seq_lens):
        if isinstance(s, bool) or not isinstance(s, (int, float)) or int(s) != s or s <= 0:
            raise InputError(f"{where}[{i}]: sequence lengths must be positive integers, got {s!r}")
        s = int(s)
        tokens += s
        tokens_sq += s * s
        count += 1
        beyond += beyond_window_sq(s, window)
    return {"tokens": tokens, "tokens_sq": tokens_sq, "sequences": count, "tokens_sq_beyond_window": beyond}


def uniform_stats(seq_len: Any, samples: Any, window: int | None = None) -> dict[str, Any]:
    """B unpacked sequences of S tokens each (works on numbers and polars expressions)."""
    return {"tokens": seq_len * samples, "tokens_sq": seq_len * seq_len * samples, "sequences": samples,
            "tokens_sq_beyond_window": beyond_window_sq(seq_len, window) * samples}
