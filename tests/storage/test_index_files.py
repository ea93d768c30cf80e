"""The index files kafkafs writes are the ones Kafka would: compared byte for byte with an independent
model of Kafka's rule (helpers.kafka_indexes, itself checked against a real broker's files)."""

from __future__ import annotations

import random
import struct
from pathlib import Path

import pytest

from kafkafs.format.jsonview import ProducerRecord
from kafkafs.storage.log import Log

from .helpers import Clock, config, headers_of, kafka_indexes, open_log


def random_appends(log: Log, rng: random.Random, n: int, t0: int = 1_000_000) -> None:
    for _ in range(n):
        count = rng.choice([1, 1, 2, 5, 20])
        size = rng.choice([1, 10, 50, 300, 2000])
        ts = t0 + rng.randrange(-5_000, 100_000)  # out of order: the time index must stay monotonic
        log.append_records([ProducerRecord(ts + i, None, rng.randbytes(size), ()) for i in range(count)])


def check_segment_files(directory: Path, interval: int, restarts: dict[int, list[int]] | None = None) -> int:
    """Every sealed segment's index files equal the model's; return how many entries were checked.
    ``restarts``: per segment base, the sizes it was truncated to (the index count restarts there)."""
    checked = 0
    for path in sorted(directory.glob("*.log")):
        base = int(path.name[:20])
        data = path.read_bytes()
        index, timeindex = kafka_indexes(data, base, interval, restarts=(restarts or {}).get(base, ()))
        assert (directory / f"{base:020d}.index").read_bytes() == index, path.name
        assert (directory / f"{base:020d}.timeindex").read_bytes() == timeindex, path.name
        # kafka-dump-log --verify-index-only: every entry names the last offset of the batch at its position
        batches = {pos: last for pos, _base, last, _size, _ts in headers_of(data)}
        for rel, pos in struct.iter_unpack(">II", index):
            assert batches[pos] == base + rel
        checked += len(index) // 8 + len(timeindex) // 12
    return checked


@pytest.mark.parametrize("seed", [1, 2, 3, 4])
def test_index_files_after_close_are_kafkas(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    interval = rng.choice([0, 1, 100, 1000, 4096])
    cfg = config(segment_bytes=rng.choice([5_000, 20_000, 100_000]), index_interval_bytes=interval)
    log = open_log(tmp_path / "t-0", cfg, clock=Clock())
    random_appends(log, rng, 300)
    assert len(log.segments) > 1
    log.close()
    assert check_segment_files(tmp_path / "t-0", interval) > 10


def test_index_files_after_truncations_are_kafkas(tmp_path: Path) -> None:
    rng = random.Random(9)
    cfg = config(segment_bytes=30_000, index_interval_bytes=500)
    log = open_log(tmp_path / "t-0", cfg)
    restarts: dict[int, list[int]] = {}
    for _ in range(5):
        random_appends(log, rng, 80)
        log.truncate_to(rng.randrange(log.log_start_offset, log.log_end_offset))
        active = log.active_segment
        # a truncated segment counts index.interval.bytes afresh from its new end (Kafka's truncateTo)
        restarts.setdefault(active.base_offset, []).append(active.size)
    random_appends(log, rng, 50)
    log.close()
    check_segment_files(tmp_path / "t-0", 500, restarts)


def test_active_indexes_are_preallocated_and_zero_filled(tmp_path: Path) -> None:
    cfg = config(index_interval_bytes=100, segment_index_bytes=100_003)
    log = open_log(tmp_path / "t-0", cfg)
    random_appends(log, random.Random(5), 40)
    log.flush()
    index = (tmp_path / "t-0" / "00000000000000000000.index").read_bytes()
    timeindex = (tmp_path / "t-0" / "00000000000000000000.timeindex").read_bytes()
    assert len(index) == 100_000 and len(timeindex) == 99_996  # rounded down to whole entries
    active = log.active_segment
    assert active is not None
    n, m = active.offset_index.entries, active.time_index.entries
    assert n > 3 and not any(index[n * 8 :]) and not any(timeindex[m * 12 :])
    model_index, model_time = kafka_indexes(active.read_at(0, active.size), 0, 100, final=False)
    assert index[: n * 8] == model_index and timeindex[: m * 12] == model_time
    log.close()
    assert (tmp_path / "t-0" / "00000000000000000000.index").stat().st_size == n * 8
