"""LRU and PieceCache: small bounded caches shared by the threads serving one mount."""

from __future__ import annotations

import threading

from kafkafs.fs.caches import LRU, PieceCache


def test_lru_keeps_the_most_recently_used():
    cache = LRU(2)
    cache.put("a", 1)
    cache.put("b", 2)
    assert cache.get_item("a") == 1  # a is now the most recent
    cache.put("c", 3)
    assert cache.get_item("b") is None and cache.get_item("a") == 1 and cache.get_item("c") == 3
    cache.clear_all()
    assert len(cache) == 0


def test_piece_cache_drops_the_oldest_and_is_safe_across_threads():
    cache = PieceCache(capacity=3)
    for i in range(5):
        cache.put(i, b"%d" % i)
    assert [cache.get(i) for i in range(5)] == [None, None, b"2", b"3", b"4"]

    def churn(start: int) -> None:
        for i in range(start, start + 2000):
            cache.put(i, b"x")
            cache.get(i - 1)

    threads = [threading.Thread(target=churn, args=(k * 10_000,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(cache._items) <= 3


def test_lru_put_returns_what_it_pushed_out():
    cache = LRU(2)
    assert cache.put("a", 1) == []
    assert cache.put("b", 2) == []
    assert cache.get_item("a") == 1  # "a" is now the most recent
    assert cache.put("c", 3) == [2]
    assert list(cache) == ["a", "c"]
