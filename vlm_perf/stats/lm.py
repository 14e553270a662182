"""Language-model sufficient statistics from causal sub-sequence lengths.

A packed microbatch holds several documents, each its own causal attention sequence of ``s``
tokens. Attention cost is quadratic per sequence, so the statistics are
``tokens = sum(s)`` and ``tokens_sq = sum(s^2)`` (plus the sequence count). Padding tokens, when a
framework computes on them, are a separate statistic (``padded_tokens``), never mixed in here.
"""

from __future__ import annotations

from typing import Any, Iterable


def seq_len_stats(seq_lens: Iterable[int], where: str = "seq_lens") -> dict[str, int]:
    """Sum, sum of squares and count of positive integer sequence lengths."""
    tokens = tokens_sq = count = 0
    for i, s in enumerate(seq_lens):
        if isinstance(s, bool) or not isinstance(s, (int, float)) or int(s) != s or s <= 0:
            raise ValueError(f"{where}[{i}]: sequence lengths must be positive integers, got {s!r}")
        s = int(s)
        tokens += s
        tokens_sq += s * s
        count += 1
    return {"tokens": tokens, "tokens_sq": tokens_sq, "sequences": count}


def uniform_stats(seq_len: Any, samples: Any) -> dict[str, Any]:
    """B unpacked sequences of S tokens each (works on numbers and polars expressions)."""
    return {"tokens": seq_len * samples, "tokens_sq": seq_len * seq_len * samples, "sequences": samples}
