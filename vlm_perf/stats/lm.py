"""Language-model sufficient statistics from causal sub-sequence lengths.

A packed microbatch holds several documents, each its own causal attention sequence of ``s``
tokens. Attention cost is quadratic per sequence, so the statistics are
``tokens = sum(s)`` and ``tokens_sq = sum(s^2)`` (plus the sequence count). Padding tokens, when a
framework computes on them, are a separate statistic (``padded_tokens``), never mixed in here.
"""

from __future__ import annotations

from typing import Any, Iterable, Sequence

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


def beyond_chunks_sq(seq_len: Any, chunk: int | None) -> Any:
    """s^2 - Σ over the chunks of c^2: what chunked attention (Llama 4: causal within consecutive chunks of C tokens)
    removes from s^2; a chunked causal kernel computes (s^2 - that)/2 score entries. Works on ints and polars."""
    if not chunk:
        return 0
    full, rest = seq_len // chunk, seq_len % chunk
    return seq_len * seq_len - (full * chunk * chunk + rest * rest)


def seq_len_stats(seq_lens: Iterable[int], where: str = "seq_lens", window: int | None = None,
                  chunk: int | None = None) -> dict[str, int]:
    """Sum, sum of squares and count of positive integer sequence lengths (and the sliding-window
    statistic ``tokens_sq_beyond_window`` for a window of ``window`` tokens, the chunked-attention statistic
    ``tokens_sq_beyond_chunks`` for chunks of ``chunk`` tokens)."""
    tokens = tokens_sq = count = beyond = chunked = 0
    for i, s in enumerate(seq_lens):
        if isinstance(s, bool) or not isinstance(s, (int, float)) or int(s) != s or s <= 0:
            raise InputError(f"{where}[{i}]: sequence lengths must be positive integers, got {s!r}")
        s = int(s)
        tokens += s
        tokens_sq += s * s
        count += 1
        beyond += beyond_window_sq(s, window)
        chunked += beyond_chunks_sq(s, chunk)
    return {"tokens": tokens, "tokens_sq": tokens_sq, "sequences": count, "tokens_sq_beyond_window": beyond,
            "tokens_sq_beyond_chunks": chunked}


def uniform_stats(seq_len: Any, samples: Any, window: int | None = None, chunk: int | None = None) -> dict[str, Any]:
    """B unpacked sequences of S tokens each (works on numbers and polars expressions)."""
    return {"tokens": seq_len * samples, "tokens_sq": seq_len * seq_len * samples, "sequences": samples,
            "tokens_sq_beyond_window": beyond_window_sq(seq_len, window) * samples,
            "tokens_sq_beyond_chunks": beyond_chunks_sq(seq_len, chunk) * samples}


def text_x_vision(seq_lens: Sequence[int] | None, seq_len: int | None, per_image: Sequence[tuple[int, int]],
                  images_per_sample: Sequence[int] | None = None) -> tuple[int, int]:
    """(sum over samples of S x patches, of S x frames) of the images ``per_image`` ((patches, frames) each, in order).

    ``seq_lens``: one length per sample (then ``images_per_sample``, one count per sample summing to the
    images, assigns them in order; without it a single sample holds them all, else the longest length times
    the totals is returned: an upper bound); ``seq_len``: every sample has that length (exact without any
    assignment). Lengths are validated by the caller.
    """
    patches = sum(p for p, _ in per_image)
    frames = sum(f for _, f in per_image)
    if seq_lens is None:
        return (seq_len or 0) * patches, (seq_len or 0) * frames
    lens = [int(s) for s in seq_lens]
    if images_per_sample is None:
        if len(lens) == 1 or not per_image:
            return (lens[0] if lens else 0) * patches, (lens[0] if lens else 0) * frames
        return max(lens) * patches, max(lens) * frames
    counts = list(images_per_sample)
    if (len(counts) != len(lens) or any(isinstance(c, bool) or not isinstance(c, int) or c < 0 for c in counts)
            or sum(counts) != len(per_image)):
        raise InputError(f"images_per_sample must hold one non-negative integer per sequence ({len(lens)}) summing "
                         f"to the number of images ({len(per_image)}), got {counts!r}")
    x_patches = x_frames = 0
    start = 0
    for length, count in zip(lens, counts):
        for p, f in per_image[start:start + count]:
            x_patches += length * p
            x_frames += length * f
        start += count
    return x_patches, x_frames


def decoder_stats(seq_lens: Sequence[int] | None, seq_len: int | None, samples: int, decoder_lens: Sequence[int] | None,
                  encoder_decoder: bool, model: str = "the model") -> dict[str, int]:
    """The decoder statistics of an encoder-decoder LM (``lm_decoder_tokens``, ``_sq``, ``_x_encoder``).

    ``decoder_lens``: one decoder length per sample (per entry of ``seq_lens``, or ``samples`` entries of the
    uniform ``seq_len``). Not given for an encoder-decoder model: every sample's decoder length is its encoder
    length (a stand-in that the docs state; it is exact only when the targets are as long as the inputs). Given
    for a decoder-only model: refused (nothing would read it). The encoder lengths are validated by the caller.
    """
    if decoder_lens is None:
        if not encoder_decoder:
            return {}
        enc = [int(s) for s in seq_lens] if seq_lens is not None else [int(seq_len or 0)] * int(samples or 0)
        dec = enc
    else:
        if not encoder_decoder:
            raise InputError(f"decoder_lens given, but {model} has no encoder-decoder language model (its LM reads "
                             "one sequence per sample)")
        enc = [int(s) for s in seq_lens] if seq_lens is not None else [int(seq_len or 0)] * int(samples or 0)
        dec = list(decoder_lens)
        if len(dec) != len(enc):
            raise InputError(f"decoder_lens must hold one length per sample ({len(enc)}), got {len(dec)}")
        for i, d in enumerate(dec):
            if isinstance(d, bool) or not isinstance(d, (int, float)) or int(d) != d or d <= 0:
                raise InputError(f"decoder_lens[{i}]: decoder lengths must be positive integers, got {d!r}")
        dec = [int(d) for d in dec]
    return {"lm_decoder_tokens": sum(dec), "lm_decoder_tokens_sq": sum(d * d for d in dec),
            "lm_decoder_x_encoder": sum(d * e for d, e in zip(dec, enc))}
