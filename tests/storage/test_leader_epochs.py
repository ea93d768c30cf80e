"""leader-epoch-checkpoint as Kafka's LeaderEpochFileCache keeps it."""

from __future__ import annotations

from kafkafs.storage.leader_epochs import LeaderEpochCache
from tests.kafka_layout import (
    read_epoch_checkpoint,
)


def test_leader_epoch_cache_follows_kafkas_rules(tmp_path):
    cache = LeaderEpochCache(tmp_path, writable=True)
    cache.create()
    assert read_epoch_checkpoint((tmp_path / "leader-epoch-checkpoint").read_text()) == []
    for epoch, start in [(0, 0), (0, 5), (2, 10), (2, 12), (3, 20)]:
        cache.assign(epoch, start)
    assert cache.entries == [(0, 0), (2, 10), (3, 20)]
    # a lower epoch at a later offset: Kafka drops the entries it contradicts (epoch or start at or above)
    cache.assign(1, 25)
    assert cache.entries == [(0, 0), (1, 25)]
    cache.assign(4, 30)
    cache.truncate_from_end(30)
    assert cache.entries == [(0, 0), (1, 25)]
    cache.assign(5, 40)
    cache.truncate_from_start(30)
    assert cache.entries == [(1, 30), (5, 40)]
    assert read_epoch_checkpoint((tmp_path / "leader-epoch-checkpoint").read_text()) == [(1, 30), (5, 40)]
    assert LeaderEpochCache(tmp_path, writable=False).entries == [(1, 30), (5, 40)]
    cache.clear()
    assert read_epoch_checkpoint((tmp_path / "leader-epoch-checkpoint").read_text()) == []


def test_read_only_cache_writes_nothing(tmp_path):
    cache = LeaderEpochCache(tmp_path, writable=False)
    cache.create()
    cache.assign(1, 0)
    assert not (tmp_path / "leader-epoch-checkpoint").exists()
