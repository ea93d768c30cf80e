"""The virtual tree without a kernel: names, contents, sizes, ranges, growth, damage, appends."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from kafkafs.errors import (
    CorruptRecordError,
    InternalTopicRefused,
    InvalidInput,
    InvalidName,
    NotFound,
    NotPermitted,
)
from kafkafs.format.batch import Codec, encode_batch
from kafkafs.fs.tree.root import Tree
from kafkafs.storage.logdir import LogDir

from ..conftest import (
    BASE_TS,
    SMALL_SEGMENTS,
    build_logdir,
    expected_jsonl,
    sample_records,
    tree_of,
    write_segment,
)

# ---------------------------------------------------------------------------------------------- layout


def test_listing(tree):
    top = tree.listdir("")
    assert top[:3] == ["orders-0", "events-3", "empty-0"] or sorted(top[:3]) == ["empty-0", "events-3", "orders-0"]
    assert set(top[3:]) == {".kafka_cleanshutdown", "log-start-offset-checkpoint", "recovery-point-offset-checkpoint"}
    assert tree.listdir("orders-0") == ["records.jsonl", "by-offset", "by-time", "segments", "partition.json",
                                        "by-key", "table.jsonl", "transactions.json"]
    assert tree.listdir("orders-0/by-time") == []
    with pytest.raises(NotFound):
        tree.resolve("orders-0/nothing")
    with pytest.raises(NotFound):
        tree.resolve("no-such-0")
    with pytest.raises(NotFound):
        tree.resolve("not a partition")


def test_rw_tree_has_append(logdir_copy):
    t = tree_of(logdir_copy, rw=True)
    try:
        assert t.listdir("orders-0")[-1] == "append"
    finally:
        t.close()


# ---------------------------------------------------------------------------------------------- by-offset


# ---------------------------------------------------------------------------------------------- by-time


# ---------------------------------------------------------------------------------------------- segments


# ---------------------------------------------------------------------------------------------- growth


def test_growth_seen_by_a_read_only_tree(logdir_copy):
    t = tree_of(logdir_copy)
    try:
        state = t.partitions.state("orders-0")
        before = t.resolve("orders-0/records.jsonl").attr().size
        seen = []
        t.partitions.add_listener(lambda s: seen.append(s.name))
        growing = t.resolve("orders-0/by-offset/1495-1600.jsonl")
        assert growing.volatile()
        with LogDir(logdir_copy, SMALL_SEGMENTS, writable=True) as writer:
            log = writer.log("orders-0")
            for start in range(1500, 1700, 20):
                log.append_records(sample_records(start, 20))
        assert state.refresh(force=True)
        assert seen == ["orders-0"]
        after = t.resolve("orders-0/records.jsonl").attr().size
        assert after > before
        assert t.read_file("orders-0/records.jsonl") == expected_jsonl(logdir_copy, "orders-0")
        assert growing.attr().size == len(expected_jsonl(logdir_copy, "orders-0", 1495, 1600))
        assert not growing.volatile()
        assert t.read_file("orders-0/by-offset/1699.json")
    finally:
        t.close()


def test_appends_through_the_tree(logdir_copy):
    t = tree_of(logdir_copy, rw=True)
    try:
        size0 = t.resolve("events-3/records.jsonl").attr().size
        handle = t.resolve("events-3/append").open(True)
        handle.write(0, b"hello\n")
        handle.write(
            0, b'{"key": "k", "value": {"a": [1, 2]}, "headers": [{"key": "h", "value": "v"}]}\n{"val'
        )
        handle.write(0, b'ue": {"$base64": "AAE="}, "timestamp": 1000}\npartial')
        assert t.partitions.state("events-3").log.log_end_offset == 8
        with pytest.raises(InvalidInput):
            handle.write(0, b"\nfine\n{broken\n")
        assert t.partitions.state("events-3").log.log_end_offset == 8
        # the failed write was in the middle of the line "partial": that line went with it
        handle.write(0, b"-line")
        handle.flush()
        log = t.partitions.state("events-3").log
        assert log.log_end_offset == 9
        recs = list(log.records(5))
        assert [r.value for r in recs] == [b"hello", b'{"a":[1,2]}', b"\x00\x01", b"-line"]
        assert recs[1].key == b"k" and list(recs[1].headers) == [("h", b"v")]
        assert recs[2].timestamp == 1000
        data = t.read_file("events-3/records.jsonl")
        assert len(data) == t.resolve("events-3/records.jsonl").attr().size > size0
        assert data.splitlines()[-3] == (
            b'{"topic":"events","partition":3,"offset":6,"timestamp":%d,"timestampType":"CreateTime",'
            b'"key":"k","value":{"a":[1,2]},"headers":[{"key":"h","value":"v"}]}' % recs[1].timestamp
        )
    finally:
        t.close()


def test_appends_roll_segments_and_views_follow(logdir_copy):
    t = tree_of(logdir_copy, rw=True)
    try:
        t.resolve("orders-0/records.jsonl").attr()
        handle = t.resolve("orders-0/append").open(True)
        for i in range(60):
            handle.write(0, b"".join(b"line %d of write %d\n" % (j, i) for j in range(50)))
        handle.flush()
        assert t.read_file("orders-0/records.jsonl") == expected_jsonl(logdir_copy, "orders-0")
        assert t.resolve("orders-0/records.jsonl").attr().size == len(expected_jsonl(logdir_copy, "orders-0"))
    finally:
        t.close()


def test_read_only_tree_refuses_writes(tree):
    with pytest.raises(NotPermitted):
        tree.resolve("orders-0/records.jsonl").open(True)
    with pytest.raises(NotPermitted):
        tree.mkdir("new-0")


def test_mkdir(logdir_copy):
    t = tree_of(logdir_copy, rw=True)
    try:
        t.mkdir("fresh.topic_1-7")
        assert (logdir_copy / "fresh.topic_1-7").is_dir()
        assert "fresh.topic_1-7" in t.listdir("")
        assert t.read_file("fresh.topic_1-7/records.jsonl") == b""
        for bad in ("nopartition", "bad name-0", "x-delete", "t-01"):
            with pytest.raises(InvalidName):
                t.mkdir(bad)
        with pytest.raises(FileExistsError):
            t.mkdir("orders-0")
    finally:
        t.close()


def test_mkdir_refuses_kafkas_internal_topics(logdir_copy):
    t = tree_of(logdir_copy, rw=True)
    try:
        for name in ("__consumer_offsets-0", "__cluster_metadata-0", "__transaction_state-3"):
            with pytest.raises(InternalTopicRefused, match="internal topic"):
                t.mkdir(name)
            assert not (logdir_copy / name).exists()
    finally:
        t.close()


# ---------------------------------------------------------------------------------------------- odd logs


def test_gaps_compression_and_transactions(tmp_path):
    rows = [(BASE_TS + i, b"k%d" % i, b"v%d" % i, ()) for i in range(4)]
    write_segment(
        tmp_path / "compacted-0",
        0,
        [
            encode_batch(rows[:3], base_offset=0, offset_deltas=[0, 2, 5], last_offset_delta=6),
            encode_batch(rows[:2], base_offset=10, compression=Codec.GZIP),
            encode_batch(rows[:2], base_offset=12, transactional=True, producer_id=77),
            encode_batch(
                [(BASE_TS, b"\x00\x00\x00\x01", b"\x00\x00\x00\x00\x00\x00", ())],
                base_offset=14,
                transactional=True,
                control=True,
                producer_id=77,
            ),
        ],
    )
    t = Tree(LogDir(tmp_path))
    try:
        assert t.listdir("compacted-0/by-offset") == [f"{o}.json" for o in (0, 2, 5, 10, 11, 12, 13, 14)]
        with pytest.raises(NotFound):
            t.resolve("compacted-0/by-offset/3.json")
        data = t.read_file("compacted-0/records.jsonl")
        assert data == expected_jsonl(tmp_path, "compacted-0")
        lines = [json.loads(line) for line in data.splitlines()]
        assert [r["offset"] for r in lines] == [0, 2, 5, 10, 11, 12, 13, 14]
        assert lines[5]["producerId"] == 77 and lines[7]["control"] == "COMMIT"
        assert t.read_file("compacted-0/by-offset/1-11.jsonl").count(b"\n") == 4
        assert json.loads(t.read_file("compacted-0/by-offset/14.json"))["control"] == "COMMIT"
    finally:
        t.close()


def corrupt_one_batch(logdir: Path, name: str = "orders-0") -> tuple[Path, int, int, int]:
    """Flip a byte inside the records of a batch in the middle of the first segment.
    Returns (segment, position, first offset, last offset) of the damaged batch."""
    from kafkafs.format.batch import scan_batches

    segment = sorted((logdir / name).glob("*.log"))[0]
    data = bytearray(segment.read_bytes())
    headers = list(scan_batches(data))
    h = headers[len(headers) // 2]
    data[h.position + 70] ^= 0xFF
    segment.write_bytes(bytes(data))
    return segment, h.position, h.base_offset, h.last_offset


def test_a_corrupt_batch_fails_only_what_needs_it(logdir_copy, caplog):
    segment, position, first, last = corrupt_one_batch(logdir_copy)
    t = tree_of(logdir_copy)
    try:
        node = t.resolve("orders-0/records.jsonl")
        size = node.attr().size
        handle = node.open(False)
        good = bytes(handle.read(0, 1000))  # a buffer (a memoryview of rendered bytes, uncopied)
        assert good.startswith(b'{"topic":"orders"')
        # it shows damage: read with direct I/O, a read that reaches the batch ends before it (whole
        # lines, review23 R23-14), and the read that starts at it fails
        before = bytes(handle.read(0, size))
        assert before == t.read_file(f"orders-0/by-offset/0-{first - 1}.jsonl") and handle.direct_io
        with pytest.raises(CorruptRecordError):
            handle.read(len(before), size - len(before))
        with pytest.raises(CorruptRecordError):
            t.resolve(f"orders-0/by-offset/{first}.json")
        assert json.loads(t.read_file(f"orders-0/by-offset/{last + 1}.json"))["offset"] == last + 1
        assert t.read_file(f"orders-0/by-offset/0-{first - 1}.jsonl").count(b"\n") == first
        assert t.read_file(f"orders-0/by-offset/{last + 1}-1499.jsonl").count(b"\n") == 1499 - last
        with pytest.raises(CorruptRecordError):
            t.read_file(f"orders-0/by-offset/{first - 1}-{last + 1}.jsonl")
        assert t.listdir("orders-0/by-offset")[-1] == "1499.json"
        assert any(segment.name in r.message and f"position {position}" in r.message for r in caplog.records)
    finally:
        t.close()


@pytest.mark.allow_warnings("a damaged batch is logged (SPEC §3)")
def test_a_broken_header_stops_only_its_segment(logdir_copy):
    segment = sorted((logdir_copy / "orders-0").glob("*.log"))[0]
    data = bytearray(segment.read_bytes())
    data[len(data) // 2 : len(data) // 2 + 64] = b"\xff" * 64
    segment.write_bytes(bytes(data))
    t = tree_of(logdir_copy)
    try:
        size = t.resolve("orders-0/records.jsonl").attr().size
        assert size > 0
        second_segment_base = int(sorted((logdir_copy / "orders-0").glob("*.log"))[1].name[:20])
        assert json.loads(t.read_file(f"orders-0/by-offset/{second_segment_base}.json"))
        assert t.read_file("orders-0/by-offset/1400-1499.jsonl").count(b"\n") == 100
    finally:
        t.close()


def test_fixture_logdirs_render(fixtures_dir):
    for logdir in ("kafka-logs-a", "kafka-logs-b"):
        t = Tree(LogDir(fixtures_dir / logdir))
        try:
            for name in t.listdir(""):
                if not (fixtures_dir / logdir / name).is_dir():
                    continue  # the log directory's own files (test_log_directory_files_at_the_top)
                data = t.read_file(f"{name}/records.jsonl")
                assert len(data) == t.resolve(f"{name}/records.jsonl").attr().size
                lines = data.splitlines()
                for line in lines:
                    json.loads(line)
                assert len(t.listdir(f"{name}/by-offset")) == len(lines)
        finally:
            t.close()


def test_bad_values_mode(built_logdir):
    with pytest.raises(InvalidInput):
        Tree(LogDir(built_logdir), mode="hex")


def test_new_logdir_builds(tmp_path):
    path = build_logdir(tmp_path / "x", records=30, per_batch=3)
    t = Tree(LogDir(path))
    try:
        assert t.read_file("orders-0/records.jsonl").count(b"\n") == 30
    finally:
        t.close()
    shutil.rmtree(path)


def test_appends_are_announced_before_the_write_returns(logdir_copy):
    t = tree_of(logdir_copy, rw=True)
    try:
        heard = []
        t.partitions.add_append_listener(
            lambda state, since: heard.append((state.name, since, state.log.log_end_offset))
        )
        handle = t.resolve("events-3/append").open(True)
        handle.write(0, b"x")
        handle.fsync()
        assert heard == []
        handle.write(0, b"\ny\n")
        assert heard == [("events-3", 0, 7)]
        handle.write(0, b"z")
        handle.flush()
        assert heard[-1][0::2] == ("events-3", 8)
        handle.flush()
        assert len(heard) == 2  # nothing appended: nothing to announce
    finally:
        t.close()


def test_log_directory_files_at_the_top(fixtures_dir):
    logs = fixtures_dir / "kafka-logs-a"
    t = Tree(LogDir(logs))
    try:
        top = t.listdir("")
        files = sorted(n for n in os.listdir(logs) if (logs / n).is_file())
        assert sorted(n for n in top if not (logs / n).is_dir() and n != "groups") == files
        assert "groups" in top and "transactions" not in top  # __consumer_offsets, no __transaction_state
        assert ".kafka_cleanshutdown" in files and "replication-offset-checkpoint" in files
        for name in files:
            assert t.read_file(name) == (logs / name).read_bytes()
            assert t.resolve(name).attr().size == (logs / name).stat().st_size
            with pytest.raises(NotPermitted):
                t.resolve(name).open(True)
        with pytest.raises(NotFound):
            t.resolve("no-such-checkpoint")
        info = json.loads(t.read_file("__consumer_offsets-12/partition.json"))
        assert info["topicId"] == "f64BRmo_QQOpNWuZOGjZrA" and info["leaderEpoch"] == 0
        assert info["leaderEpochs"] == [{"epoch": 0, "startOffset": 0}]
        assert info["highWatermark"] == 869 and info["recoveryPoint"] == 869
        assert info["checkpoints"] == {"highWatermark": 869, "recoveryPoint": 869, "logStartOffset": None, "cleanerOffset": 0}
        assert info["producerSnapshots"] == [862, 869] and info["logStartOffset"] == 0
        seg = t.listdir("__consumer_offsets-12/segments")
        assert seg == ["leader-epoch-checkpoint", "partition.metadata"] + [
            f"{b:020d}.{e}" for b in (0,) for e in ("log", "index", "timeindex")] + [
            f"{862:020d}.{e}" for e in ("log", "index", "timeindex", "snapshot")] + [f"{869:020d}.snapshot"]
        for name in seg:
            assert t.read_file(f"__consumer_offsets-12/segments/{name}") == (logs / "__consumer_offsets-12" / name).read_bytes()
    finally:
        t.close()


def test_a_linked_partition_folder_is_served_without_a_warning(built_logdir, tmp_path):
    """SPEC §3: partition folders (and LOGDIR) may be links; listing the top must not warn that such a
    folder was "skipped, never followed" while it is served (the hook in tests/conftest.py fails on it)."""
    logdir = tmp_path / "logs"
    logdir.mkdir()
    os.symlink(built_logdir / "orders-0", logdir / "orders-0")
    link = tmp_path / "link"
    os.symlink(logdir, link)
    t = Tree(LogDir(link))
    try:
        assert t.listdir("") == ["orders-0"]
        assert t.read_file("orders-0/records.jsonl") == expected_jsonl(built_logdir, "orders-0")
    finally:
        t.close()


def test_list_limit_counts_records_not_offsets_in_a_compacted_partition(tmp_path):
    """SPEC §3: by-offset/ lists every offset while the partition holds at most --list-limit records;
    a compacted partition holds fewer records than its offsets span."""
    rows = [(BASE_TS + i, b"k%d" % i, b"v%d" % i, ()) for i in range(4)]
    write_segment(
        tmp_path / "compacted-0",
        0,
        [
            encode_batch(rows[:3], base_offset=0, offset_deltas=[0, 2, 5], last_offset_delta=6),  # 0, 2, 5
            encode_batch(rows[:2], base_offset=10),  # 10, 11
        ],
    )  # offsets 0..11 (12), records 5
    for limit, listed in (
        (5, ["0.json", "2.json", "5.json", "10.json", "11.json"]),
        (12, ["0.json", "2.json", "5.json", "10.json", "11.json"]),
        (4, ["0-11.jsonl"]),
    ):
        t = Tree(LogDir(tmp_path), list_limit=limit)
        try:
            assert t.listdir("compacted-0/by-offset") == listed, limit
        finally:
            t.close()
    t = Tree(LogDir(tmp_path), list_limit=6)
    try:  # the count follows appends: 5, then 7 records
        assert len(t.listdir("compacted-0/by-offset")) == 5
        with LogDir(tmp_path, writable=True) as writer:
            writer.log("compacted-0").append_records(sample_records(0, 2))
        assert t.partitions.state("compacted-0").refresh(force=True)
        assert t.listdir("compacted-0/by-offset") == ["0-13.jsonl"]
    finally:
        t.close()


def test_an_alias_partition_folder_is_not_served(logdir_copy, caplog):
    """review9 R9-9: a link to another partition folder of LOGDIR is not a partition of its own in the
    mount: not listed, ENOENT, named once in the log (before: the same log listed again under the
    link's name)."""
    os.symlink("orders-0", logdir_copy / "extra-0")
    tree = tree_of(logdir_copy)
    try:
        assert "extra-0" not in tree.listdir("") and "orders-0" in tree.listdir("")
        with pytest.raises(NotFound):
            tree.resolve("extra-0")
        with pytest.raises(NotFound):
            tree.resolve("extra-0/records.jsonl")
        tree.listdir("")
    finally:
        tree.close()
    said = [r.getMessage() for r in caplog.records]
    assert len(said) == 1 and "extra-0: a link to orders-0" in said[0] and "skipped" in said[0], said


def test_a_partition_folder_looked_up_on_the_loop(logdir_copy):
    """Root.lookup_now (the FUSE loop's lookup of a partition folder, one lstat since issue 25): a folder
    is a PartitionDir whose lookup reply has the folder's time as that lstat saw it, and a later getattr
    stats again; a link (maybe an alias), a missing name or a plain file is None (a worker's lookup
    says what it is)."""
    os.symlink("orders-0", logdir_copy / "extra-0")
    (logdir_copy / "plain-0").write_bytes(b"")
    tree = tree_of(logdir_copy)
    try:
        folder = logdir_copy / "orders-0"
        node = tree.root.lookup_now("orders-0")
        assert node is not None and node.name == "orders-0"
        assert node.attr().mtime_ns == os.stat(folder).st_mtime_ns
        os.utime(folder, ns=(10**18, 10**18))
        assert node.attr().mtime_ns == 10**18  # the lookup's time is used once: a getattr sees the change
        for name in ("extra-0", "missing-0", "plain-0"):
            assert tree.root.lookup_now(name) is None
    finally:
        tree.close()
