"""Run an iterator one item ahead in a worker thread (reading and decoding overlap the consumer).

The producer's work (file reads, decompression, polars/pyarrow parsing) releases the GIL, so on a
multi-core machine producing item k+1 and consuming item k overlap. Items, and any exception the
iterator raises, arrive in the original order; at most one item is produced ahead.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Iterator, TypeVar

__all__ = ["prefetched"]

T = TypeVar("T")
_DONE = object()


def _next(it: Iterator[T]):
    return next(it, _DONE)


def prefetched(items: Iterator[T], name: str = "vlm-perf-read") -> Iterator[T]:
    """``items``, each produced in a worker thread while the previous one is consumed.

    Closing the returned generator early (``break``, an exception in the consumer) waits for the
    item in flight and closes ``items`` (so its files are closed)."""
    pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix=name)
    try:
        ahead = pool.submit(_next, items)
        while True:
            item = ahead.result()  # re-raises the iterator's exception at its place in the order
            if item is _DONE:
                return
            ahead = pool.submit(_next, items)
            yield item
    finally:
        pool.shutdown(wait=True)
        close = getattr(items, "close", None)
        if close is not None:
            close()
