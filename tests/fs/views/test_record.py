"""fs/views/record: one record by offset, pretty-printed from its batch, and the small LRU maps that keep
batches and records for the lookups that follow."""

from __future__ import annotations

import threading

import pytest

from kafkafs.errors import Deferred
from kafkafs.format.jsonview import render_record_pretty
from kafkafs.fs.views import record
from kafkafs.fs.views.record import LRU, RecordFinder
from kafkafs.fs.views.render import Renderer
from kafkafs.storage.logdir import LogDir


def test_one_record_by_offset(built_logdir):
    with LogDir(built_logdir) as d:
        log = d.log("orders-0")
        finder = RecordFinder(log, Renderer("orders", 0, "auto"))
        found = finder.find(777)
        batch = log.locate(777).decode()
        want = render_record_pretty("orders", 0, batch, batch.offsets.index(777))
        assert found is not None and found.data == want and found.timestamp == batch.timestamps[batch.offsets.index(777)]
        assert finder.cached(777) is found and finder.cached(778) is None
        assert finder.find(log.log_end_offset) is None and finder.find(-1) is None
        finder.clear()
        assert finder.cached(777) is None


def test_on_the_loop_a_long_batch_is_deferred(built_logdir, monkeypatch):
    with LogDir(built_logdir) as d:
        log = d.log("orders-0")
        monkeypatch.setattr(record, "INLINE_BATCH_BYTES", 0)
        finder = RecordFinder(log, Renderer("orders", 0, "auto"))
        with pytest.raises(Deferred):
            finder.find(5, inline=True)
        assert finder.find(5) is not None  # in a worker thread it renders


def test_lru_keeps_the_most_recently_used():
    cache: LRU[str, int] = LRU(2)
    cache.put("a", 1)
    cache.put("b", 2)
    assert cache.get("a") == 1  # a is now the most recent
    cache.put("c", 3)
    assert cache.get("b") is None and cache.get("a") == 1 and cache.get("c") == 3
    cache.clear()
    assert len(cache) == 0


def test_lru_put_returns_what_it_pushed_out():
    cache: LRU[str, int] = LRU(2)
    assert cache.put("a", 1) == []
    assert cache.put("b", 2) == []
    assert cache.get("a") == 1  # "a" is now the most recent
    assert cache.put("c", 3) == [2]
    assert cache.values() == [1, 3]


def test_lru_is_safe_across_threads():
    cache: LRU[int, int] = LRU(64)

    def work(base: int) -> None:
        for i in range(2000):
            cache.put(base + i % 100, i)
            cache.get(base + (i * 7) % 100)
            cache.values()

    threads = [threading.Thread(target=work, args=(k * 1000,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(cache) == 64
