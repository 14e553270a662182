"""`prefetched`: the same items in the same order, the iterator's error at its place, early close
closes the source."""

from __future__ import annotations

import pytest

from vlm_perf.ingest.prefetch import prefetched


def test_items_in_order():
    assert list(prefetched(iter(range(1000)))) == list(range(1000))
    assert list(prefetched(iter([]))) == []


def test_error_arrives_after_the_items_before_it():
    def source():
        yield 1
        yield 2
        raise ValueError("line 3 is bad")

    got = []
    with pytest.raises(ValueError, match="line 3"):
        for item in prefetched(source()):
            got.append(item)
    assert got == [1, 2]


def test_early_stop_closes_the_source():
    closed = []

    def source():
        try:
            yield from range(100)
        finally:
            closed.append(True)

    gen = prefetched(source())
    for item in gen:
        if item == 3:
            break
    gen.close()
    assert closed == [True]
