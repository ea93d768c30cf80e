"""The real broker directories in the shared fixtures, through the engine; kafka-python as a second
reader of what kafkafs writes.

The fixtures are read-only data: every test that writes works on a copy, and a module-level check
proves the originals were not touched.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from kafkafs.format.batch import decode_batch, scan_batches, validate_batch
from kafkafs.format.checkpoint import parse_offset_checkpoint
from kafkafs.format.jsonview import ProducerRecord
from kafkafs.storage.config import Settings
from kafkafs.storage.log import Log
from kafkafs.storage.logdir import CLEAN_SHUTDOWN_FILE, RECOVERY_POINT_FILE, LogDir

from ..conftest import FIXTURES
from .helpers import (
    config,
    kafka_indexes,
    kafka_python_records,
    open_log,
    read_offset,
    tree_fingerprint,
    writable_copy,
)

LOGS_A = FIXTURES / "kafka-logs-a"
LOGS_B = FIXTURES / "kafka-logs-b"


@pytest.fixture(scope="module", autouse=True)
def fixtures_untouched():
    before = {name: tree_fingerprint(FIXTURES / name) for name in ("kafka-logs-a", "kafka-logs-b")}
    yield
    after = {name: tree_fingerprint(FIXTURES / name) for name in ("kafka-logs-a", "kafka-logs-b")}
    assert after == before, "a test wrote to the shared fixtures"


def raw_records(directory: Path) -> list[tuple[int, int, bytes | None, bytes | None]]:
    """Every record of a partition folder, straight from the format layer (CRCs checked)."""
    out = []
    for path in sorted(directory.glob("*.log")):
        data = path.read_bytes()
        end = 0
        for h in scan_batches(data):
            validate_batch(data, h)
            out.extend((r.offset, r.timestamp, r.key, r.value) for r in decode_batch(data, h))
            end = h.end
        assert end == len(data)
    return out


def engine_records(log: Log) -> list[tuple[int, int, bytes | None, bytes | None]]:
    return [(r.offset, r.timestamp, r.key, r.value) for r in log.records()]


def check_partition(log: Log) -> None:
    """Open, verify and read record by record: by offset, as a stream, and by time."""
    expected = raw_records(log.dir)
    assert engine_records(log) == expected
    for segment in log.segments:
        segment.sanity_check()
    for offset, ts, key, value in expected:
        found = read_offset(log, offset)
        assert found is not None
        batch, i = found
        assert (batch.offsets[i], batch.timestamps[i], batch.keys[i], batch.values[i]) == (offset, ts, key, value)
    if expected:
        assert log.log_end_offset == expected[-1][0] + 1
        for _, target, _, _ in expected[:: max(1, len(expected) // 40)]:
            want = next((o, t) for o, t, _, _ in expected if t >= target)
            assert log.offset_for_timestamp(target) == want
        assert log.offset_for_timestamp(max(t for _, t, _, _ in expected) + 1) is None


def test_kafka_logs_a_reads_record_by_record() -> None:
    recovery = parse_offset_checkpoint((LOGS_A / RECOVERY_POINT_FILE).read_bytes())
    with LogDir(LOGS_A) as logdir:
        assert logdir.clean_shutdown
        names = logdir.partition_names()
        assert names == [
            "__consumer_offsets-10", "__consumer_offsets-12", "__consumer_offsets-49",
            "demo-0", "my-topic-0", "nikhilDemo-0",
        ]
        for name in names:
            log = logdir.log(name)
            check_partition(log)
            # a clean shutdown: the recovery point is the log end offset
            assert log.log_end_offset == recovery[(log.topic, log.partition)], name
        offsets12 = logdir.log("__consumer_offsets-12")
        assert offsets12.segments.bases() == [0, 862]
        assert offsets12.log_end_offset == 869 and len(engine_records(offsets12)) == 869
        demo = logdir.log("demo-0")
        assert (demo.log_start_offset, demo.log_end_offset) == (1, 1)
        assert list(demo.records()) == [] and read_offset(demo, 0) is None


def test_kafka_logs_b_without_index_files() -> None:
    with LogDir(LOGS_B) as logdir:
        assert not logdir.clean_shutdown
        assert logdir.partition_names() == ["quickstart-events-0", "wanjohi-0"]
        for log in logdir:
            check_partition(log)
        wanjohi = logdir.log("wanjohi-0")
        for offset in (4, 5):
            batch, i = read_offset(wanjohi, offset)  # type: ignore[misc]
            assert [h.key for h in batch.headers[i]] == ["__TypeId__"]
        segment = wanjohi.segments.first()  # type: ignore[index]
        assert segment.offset_index.entries == 0 and not segment.offset_index.path.exists()


def test_a_writable_copy_rebuilds_the_missing_indexes(tmp_path: Path) -> None:
    copy = writable_copy(LOGS_B, tmp_path / "b")
    with LogDir(copy, writable=True) as logdir:
        for log in logdir:
            assert log.last_recovery.truncated_bytes == 0  # type: ignore[union-attr]
            check_partition(log)
        logdir.log("wanjohi-0").append_records([ProducerRecord(1722036335999, b"k", b'{"id":9}', ())])
    assert (copy / "quickstart-events-0" / "00000000000000000000.log").read_bytes() == (
        LOGS_B / "quickstart-events-0" / "00000000000000000000.log"
    ).read_bytes()
    wanjohi = (copy / "wanjohi-0" / "00000000000000000000.log").read_bytes()
    assert wanjohi.startswith((LOGS_B / "wanjohi-0" / "00000000000000000000.log").read_bytes())
    for partition in ("quickstart-events-0", "wanjohi-0"):
        directory = copy / partition
        data = (directory / "00000000000000000000.log").read_bytes()
        index, timeindex = kafka_indexes(data, 0, 4096)
        assert (directory / "00000000000000000000.index").read_bytes() == index
        assert (directory / "00000000000000000000.timeindex").read_bytes() == timeindex
    records = kafka_python_records(wanjohi)
    assert records[-1][2:4] == (b"k", b'{"id":9}') and records[-1][0] == len(records) - 1


@pytest.mark.parametrize("how", ["index files deleted", "unclean shutdown, no recovery point"])
def test_rebuilt_indexes_equal_the_brokers_byte_for_byte(tmp_path: Path, how: str) -> None:
    copy = writable_copy(LOGS_A, tmp_path / "a")
    partition = copy / "__consumer_offsets-12"
    originals = {p.name: p.read_bytes() for p in partition.iterdir() if p.suffix in (".index", ".timeindex")}
    assert len(originals) == 4
    if how == "index files deleted":
        for name in originals:
            (partition / name).unlink()
    else:
        (copy / CLEAN_SHUTDOWN_FILE).unlink()
        (copy / RECOVERY_POINT_FILE).unlink()
    with LogDir(copy, Settings({"index.interval.bytes": 4096}), writable=True) as logdir:
        log = logdir.log("__consumer_offsets-12")
        both = ["00000000000000000000.log", "00000000000000000862.log"]
        report = log.last_recovery
        assert sorted(report.recovered_segments) == both  # type: ignore[union-attr]
        # exact: the rebuilt indexes equal the broker's, so only deleted ones count as changed
        assert sorted(report.rebuilt_indexes) == (both if how == "index files deleted" else [])  # type: ignore[union-attr]
        assert report.truncated_bytes == 0  # type: ignore[union-attr]
        check_partition(log)
    for name, data in originals.items():
        assert (partition / name).read_bytes() == data, name


def test_a_writable_copy_after_a_clean_shutdown_appends_where_the_broker_stopped(tmp_path: Path) -> None:
    copy = writable_copy(LOGS_A, tmp_path / "a")
    with LogDir(copy, writable=True) as logdir:
        assert logdir.clean_shutdown
        demo = logdir.log("demo-0")
        assert demo.last_recovery.recovered_segments == []  # type: ignore[union-attr]
        assert demo.append_records([ProducerRecord(1, None, b"hello", ())]).first_offset == 1
        offsets12 = logdir.log("__consumer_offsets-12")
        result = offsets12.append_records([ProducerRecord(2, b"k", b"v", ())])
        assert result.first_offset == 869 and offsets12.segments.bases() == [0, 862]
    assert (copy / CLEAN_SHUTDOWN_FILE).exists()
    data = (copy / "__consumer_offsets-12" / "00000000000000000862.log").read_bytes()
    assert data.startswith((LOGS_A / "__consumer_offsets-12" / "00000000000000000862.log").read_bytes())
    assert kafka_python_records(data)[-1][0] == 869
    recovery = parse_offset_checkpoint((copy / RECOVERY_POINT_FILE).read_bytes())
    assert recovery[("__consumer_offsets", 12)] == 870 and recovery[("demo", 0)] == 2
    assert ("location_update", 0) not in recovery  # only partitions the directory holds, as Kafka writes it


@pytest.mark.parametrize("compression", ["producer", "gzip", "snappy", "lz4", "zstd"])
def test_kafka_python_decodes_what_we_write(tmp_path: Path, compression: str) -> None:
    cfg = config(segment_bytes=4000, index_interval_bytes=500, compression_type=compression)
    log = open_log(tmp_path / "t-0", cfg)
    written = []
    for i in range(60):
        batch = [
            ProducerRecord(1_700_000_000_000 + i, b"key-%d" % i, b"value-%d " % i * (i % 7), ()),
            ProducerRecord(1_700_000_000_000 - i, None, None, (("h1", b"x"), ("h\u00e9", None))),
            ProducerRecord(1_700_000_000_500, "clé".encode(), b"", (("trace", b"%d" % i),)),
        ]
        log.append_records(batch[: 1 + i % 3])
        written.extend(batch[: 1 + i % 3])
    ours = [(r.offset, r.timestamp, r.key, r.value, [(h.key, h.value) for h in r.headers]) for r in log.records()]
    log.close()
    assert len(list((tmp_path / "t-0").glob("*.log"))) > 1
    theirs = []
    for path in sorted((tmp_path / "t-0").glob("*.log")):
        theirs.extend(kafka_python_records(path.read_bytes()))
    assert [(o, t, k, v, [tuple(h) for h in hs]) for o, t, k, v, hs in theirs] == ours
    assert [(r.timestamp, r.key, r.value) for r in written] == [(t, k, v) for _, t, k, v, _ in ours]


def test_fixture_copies_are_independent(tmp_path: Path) -> None:
    copy = writable_copy(LOGS_A / "demo-0", tmp_path / "demo-0")
    shutil.rmtree(copy)
    assert (LOGS_A / "demo-0" / "00000000000000000001.log").exists()
