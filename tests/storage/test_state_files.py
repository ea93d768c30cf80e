"""After appends with a leader epoch, idempotent and transactional batches, the partition's
``leader-epoch-checkpoint`` and ``.snapshot`` files decode (by the readers in tests/kafka_layout.py,
written from Kafka's formats) to what the log holds, through roll, truncation, recovery, retention and
compaction; new partitions get ``partition.metadata``."""

from __future__ import annotations

import os
import struct
from pathlib import Path

import pytest

from kafkafs.storage.config import Settings
from kafkafs.storage.leader_epochs import LeaderEpochCache
from kafkafs.storage.logdir import LogDir
from kafkafs.storage.partition_metadata import read_topic_id
from kafkafs.storage.producer_state import snapshot_offsets
from tests.kafka_layout import (
    batch,
    control_batch,
    read_epoch_checkpoint,
    read_partition_metadata,
    read_producer_snapshot,
    walk_batches,
)

T0 = 1_700_000_000_000


def log_batches(folder: Path) -> list[tuple[dict, bytes, int]]:
    """Every batch of the partition's .log files, oldest first: (header fields, file bytes, position)."""
    out = []
    for path in sorted(folder.glob("*.log")):
        data = path.read_bytes()
        out.extend((f, data, pos) for pos, f in walk_batches(data))
    return out


def expected_producers(folder: Path, upto: int) -> dict[int, dict]:
    """Kafka's ProducerAppendInfo rules, applied by the test to the batches below ``upto``."""
    state: dict[int, dict] = {}
    for f, data, pos in log_batches(folder):
        pid, last = f["producerId"], f["baseOffset"] + f["lastOffsetDelta"]
        if pid < 0 or last >= upto:
            continue
        old = state.get(pid)
        if f["attributes"] & 0x20:  # a marker: value version i16, coordinatorEpoch i32 (last 6 bytes)
            coordinator = struct.unpack_from(">i", data, pos + 12 + f["batchLength"] - 5)[0]
            entry = dict(old or {"producerId": pid, "lastSequence": -1, "lastOffset": -1, "offsetDelta": 0})
            entry.update(epoch=f["producerEpoch"], coordinatorEpoch=coordinator, currentTxnFirstOffset=-1,
                         timestamp=f["maxTimestamp"])
        else:
            txn = old["currentTxnFirstOffset"] if old else -1
            if f["attributes"] & 0x10 and txn < 0:
                txn = f["baseOffset"]
            entry = {"producerId": pid, "epoch": f["producerEpoch"], "lastSequence": f["baseSequence"] + f["lastOffsetDelta"],
                     "lastOffset": last, "offsetDelta": f["lastOffsetDelta"], "timestamp": f["maxTimestamp"],
                     "coordinatorEpoch": old["coordinatorEpoch"] if old else -1, "currentTxnFirstOffset": txn}
        state[pid] = entry
    return state


def snapshots(folder: Path) -> dict[int, dict[int, dict]]:
    return {int(p.name[:20]): {e["producerId"]: e for e in read_producer_snapshot(p.read_bytes())}
            for p in sorted(folder.glob("*.snapshot"))}


def epochs(folder: Path) -> list[tuple[int, int]]:
    return read_epoch_checkpoint((folder / "leader-epoch-checkpoint").read_text())


def expected_epochs(folder: Path) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for f, _data, _pos in log_batches(folder):
        if not out or f["partitionLeaderEpoch"] > out[-1][0]:
            out.append((f["partitionLeaderEpoch"], f["baseOffset"]))
    return out


def workload(log_, ts: int = T0) -> None:
    """Plain, idempotent and transactional appends (one aborted, one committed, one left open), over
    three leader epochs."""
    log_.append_batches(batch(0, [(None, b"plain", ())], first_ts=ts))
    log_.append_batches(batch(0, [(None, b"i0", ()), (None, b"i1", ())], producer_id=7, producer_epoch=0, base_sequence=0, first_ts=ts + 1))
    log_.leader_epoch = 2
    log_.append_batches(batch(0, [(None, b"t0", ())], producer_id=9, producer_epoch=1, base_sequence=0, attributes=0x10, first_ts=ts + 2))
    log_.append_batches(batch(0, [(None, b"i2", ())], producer_id=7, producer_epoch=0, base_sequence=2, first_ts=ts + 3))
    log_.append_batches(control_batch(0, 0, 5, 9, 1, ts + 4))  # ABORT, coordinator epoch 5
    log_.append_batches(batch(0, [(None, b"t1", ())], producer_id=9, producer_epoch=1, base_sequence=1, attributes=0x10, first_ts=ts + 5))
    log_.append_batches(control_batch(0, 1, 6, 9, 1, ts + 6))  # COMMIT
    log_.leader_epoch = 5
    log_.append_batches(batch(0, [(None, b"u0", ())], producer_id=11, producer_epoch=3, base_sequence=0, attributes=0x10, first_ts=ts + 7))


def open_logdir(path: Path, **settings) -> LogDir:
    return LogDir(path, Settings.load(None, {k: str(v) for k, v in settings.items()}), writable=True)


@pytest.fixture
def written(tmp_path) -> Path:
    with open_logdir(tmp_path, **{"segment.bytes": 200}) as logdir:
        workload(logdir.create_partition("orders", 0))
    return tmp_path / "orders-0"


def test_state_files_after_appends_and_rolls(written):
    folder = written
    assert len(list(folder.glob("*.log"))) > 3  # rolled several times
    assert epochs(folder) == expected_epochs(folder) == [(0, 0), (2, 3), (5, 8)]
    snaps = snapshots(folder)
    bases = sorted(int(p.name[:20]) for p in folder.glob("*.log"))
    end = max(f["baseOffset"] + f["lastOffsetDelta"] for f, _d, _p in log_batches(folder)) + 1
    assert sorted(snaps) == [b for b in bases if b > 0] + ([end] if end not in bases else [])
    for offset, entries in snaps.items():
        assert entries == expected_producers(folder, offset), offset
    last = snaps[end]
    assert last[9]["currentTxnFirstOffset"] == -1 and last[9]["coordinatorEpoch"] == 6
    assert last[11]["currentTxnFirstOffset"] == 8  # still open
    topic_id = read_partition_metadata((folder / "partition.metadata").read_text())
    assert topic_id.int != 0


def test_reopen_uses_the_snapshot_and_truncation_cuts_both(written):
    logdir = open_logdir(written.parent, **{"segment.bytes": 200})
    try:
        log_ = logdir.log("orders-0")
        assert log_.leader_epoch == 5
        assert log_.transactions().current == {11: 8}
        state = log_.state_files.producers()
        assert state.replayed_batches == 0 and state.loaded_from == log_.log_end_offset  # no rescan
        log_.truncate_to(5)
        assert epochs(written) == [(0, 0), (2, 3)]
        assert all(offset <= 5 for offset in snapshots(written))
        assert log_.transactions().current == {9: 3}  # its ABORT marker (offset 5) was cut
        log_.leader_epoch = 6
        log_.append_batches(batch(0, [(None, b"again", ())], producer_id=7, producer_epoch=0, base_sequence=3))
    finally:
        logdir.close()
    assert epochs(written) == expected_epochs(written) == [(0, 0), (2, 3), (6, 5)]
    for offset, entries in snapshots(written).items():
        assert entries == expected_producers(written, offset), offset


@pytest.mark.allow_warnings("recovery cuts the torn tail it is given")
def test_recovery_after_a_crash(written):
    # a crash: the clean-shutdown marker gone, the last snapshot lost, the tail of the log torn
    top = written.parent
    os.unlink(top / ".kafka_cleanshutdown")
    end_snapshot = max(snapshots(written))
    os.unlink(written / f"{end_snapshot:020d}.snapshot")
    last_log = sorted(written.glob("*.log"))[-1]
    with last_log.open("ab") as f:
        f.write(b"\0" * 30)
    (written / "leader-epoch-checkpoint").unlink()
    with open_logdir(top, **{"segment.bytes": 200}) as logdir:
        log_ = logdir.log("orders-0")
        assert log_.leader_epoch == 5
        assert log_.transactions().current == {11: 8}
    assert epochs(written) == expected_epochs(written)
    for offset, entries in snapshots(written).items():
        assert entries == expected_producers(written, offset), offset


def test_retention_and_compaction_keep_them(written):
    from kafkafs.storage.cleaner import clean_logdir

    top = written.parent
    with open_logdir(top, **{"segment.bytes": 200, "retention.bytes": 400, "retention.ms": -1, "file.delete.delay.ms": 0}) as logdir:
        lines = list(clean_logdir(logdir))
        log_ = logdir.log("orders-0")
        start = log_.log_start_offset
    assert lines and start > 0
    assert epochs(written)[0][1] == start and epochs(written)[1:] == [e for e in expected_epochs(written) if e[1] > start]
    assert all(offset > start or (written / f"{offset:020d}.log").exists() for offset in snapshots(written))
    before = snapshots(written)
    with open_logdir(top, **{"segment.bytes": 200, "cleanup.policy": "compact", "retention.ms": -1, "min.cleanable.dirty.ratio": 0}) as logdir:
        compacted = list(clean_logdir(logdir))
    assert any("compacted" in line for line in compacted), compacted
    after = snapshots(written)
    assert {o: e for o, e in after.items() if o in before} == {o: e for o, e in before.items() if o in after}
    assert epochs(written)[-1] == (5, 8)


def test_new_partitions_get_metadata_and_an_empty_checkpoint(tmp_path):
    with open_logdir(tmp_path) as logdir:
        logdir.create_partition("t", 0)
        logdir.create_partition("t", 1)
    a = read_partition_metadata((tmp_path / "t-0/partition.metadata").read_text())
    b = read_partition_metadata((tmp_path / "t-1/partition.metadata").read_text())
    assert a == b
    assert epochs(tmp_path / "t-0") == []
    assert snapshots(tmp_path / "t-0") == {}  # nothing past the log start to snapshot (Kafka writes none)


def test_produce_with_a_leader_epoch(tmp_path):
    import subprocess
    import sys

    def produce(*args: str, data: bytes = b"a\nb\n", rc: int = 0) -> subprocess.CompletedProcess:
        proc = subprocess.run([sys.executable, "-m", "kafkafs.cli", "produce", str(tmp_path), "p-0", *args],
                              input=data, capture_output=True, timeout=120)
        assert proc.returncode == rc and b"Traceback" not in proc.stderr, proc.stderr
        return proc

    produce()
    produce("--leader-epoch", "4")
    produce("--leader-epoch", "4", data=b"c\n")
    assert epochs(tmp_path / "p-0") == expected_epochs(tmp_path / "p-0") == [(0, 0), (4, 2)]
    assert b"below the partition's current epoch 4" in produce("--leader-epoch", "3", rc=2).stderr
    assert [f["partitionLeaderEpoch"] for f, _d, _p in log_batches(tmp_path / "p-0")] == [0, 4, 4]


def test_truncation_inside_a_batch_cuts_at_the_batch(written):
    with open_logdir(written.parent, **{"segment.bytes": 200}) as logdir:
        log_ = logdir.log("orders-0")
        log_.truncate_to(2)  # offsets 1..2 are one batch (producer 7): it goes whole, the log ends at 1
        assert log_.log_end_offset == 1
        assert max(snapshots(written), default=0) <= 1 and epochs(written) == [(0, 0)]
        assert log_.state_files.producers().entries == {}


def test_state_files_are_never_read_through_links(tmp_path):
    target = tmp_path / "elsewhere"
    target.write_bytes(b"0\n1\n9 0\n")
    folder = tmp_path / "t-0"
    folder.mkdir()
    (folder / "leader-epoch-checkpoint").symlink_to(target)
    (folder / "partition.metadata").symlink_to(tmp_path / "meta")
    (tmp_path / "meta").write_bytes(b"version: 0\ntopic_id: f64BRmo_QQOpNWuZOGjZrA")
    (folder / "00000000000000000005.snapshot").symlink_to(target)
    cache = LeaderEpochCache(folder, writable=False)
    assert cache.entries == [] and not cache.loaded_ok
    assert read_topic_id(folder) is None
    assert snapshot_offsets(folder) == []
