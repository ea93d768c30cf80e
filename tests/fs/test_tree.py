"""The virtual tree without a kernel: names, contents, sizes, ranges, growth, damage, appends."""

from __future__ import annotations

import json
import os
import random
import shutil
from pathlib import Path

import orjson
import pytest

from kafkafs.errors import CorruptRecordError, InvalidInput, InvalidName
from kafkafs.format.batch import Codec, encode_batch
from kafkafs.format.jsonview import ProducerRecord, parse_timestamp, render_record_pretty
from kafkafs.fs.layout import GROUP_BYTES
from kafkafs.fs.tree import NotFound, NotPermitted, Tree
from kafkafs.storage.logdir import LogDir

from ..storage.helpers import read_offset
from .conftest import BASE_TS, SMALL_SEGMENTS, build_logdir, expected_jsonl, sample_records


def tree_of(path: Path, *, rw: bool = False, mode: str = "auto") -> Tree:
    return Tree(LogDir(path, SMALL_SEGMENTS, writable=rw), mode=mode, rw=rw)


@pytest.fixture
def tree(built_logdir):
    t = tree_of(built_logdir)
    yield t
    t.close()


def engine_records(path: Path, name: str):
    with LogDir(path) as d:
        return list(d.log(name).records())


# ---------------------------------------------------------------------------------------------- layout


def test_listing(tree):
    top = tree.listdir("")
    assert top[:3] == ["orders-0", "events-3", "empty-0"] or sorted(top[:3]) == ["empty-0", "events-3", "orders-0"]
    assert set(top[3:]) == {".kafka_cleanshutdown", "log-start-offset-checkpoint", "recovery-point-offset-checkpoint"}
    assert tree.listdir("orders-0") == ["records.jsonl", "by-offset", "by-time", "segments", "partition.json"]
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


@pytest.mark.parametrize("mode", ["auto", "string", "base64"])
def test_records_jsonl_is_the_engines_rendering(built_logdir, mode):
    t = tree_of(built_logdir, mode=mode)
    try:
        for name in ("orders-0", "events-3", "empty-0"):
            data = t.read_file(f"{name}/records.jsonl")
            assert data == expected_jsonl(built_logdir, name, mode=mode)
            assert t.resolve(f"{name}/records.jsonl").attr().size == len(data)
            for line in data.splitlines():
                json.loads(line)
    finally:
        t.close()


def test_records_jsonl_random_reads(tree, built_logdir):
    whole = expected_jsonl(built_logdir, "orders-0")
    handle = tree.resolve("orders-0/records.jsonl").open(False)
    rng = random.Random(1)
    for _ in range(300):
        off = rng.randrange(len(whole) + 10)
        size = rng.choice([1, 7, 100, 4096, 131072])
        assert handle.read(off, size) == whole[off : off + size]


def test_layout_is_compact(tree):
    state = tree.state("orders-0")
    comp = state.composition()
    segments = list(state.log.segments)
    pieces = sum(p.count for p in comp.parts)
    assert pieces <= sum(s.size // GROUP_BYTES + 1 for s in segments)
    assert sum(p.pieces.memory() for p in comp.parts) == pieces * 40


def test_one_record_batches(tmp_path):
    """Memory follows the segment's bytes, not its batch count; and the bytes are the same."""
    rows = [encode_batch([(BASE_TS + i, b"k", b'{"n":%d}' % i, ())], base_offset=i) for i in range(3000)]
    write_segment(tmp_path / "tiny-0", 0, rows)
    t = Tree(LogDir(tmp_path))
    try:
        data = t.read_file("tiny-0/records.jsonl", chunk=4096)
        assert data == expected_jsonl(tmp_path, "tiny-0")
        comp = t.state("tiny-0").composition()
        assert sum(p.count for p in comp.parts) <= len(b"".join(rows)) // GROUP_BYTES + 1
        assert t.read_file("tiny-0/by-offset/17-2500.jsonl") == expected_jsonl(tmp_path, "tiny-0", 17, 2500)
        assert json.loads(t.read_file("tiny-0/by-offset/2999.json"))["value"] == {"n": 2999}
    finally:
        t.close()


def test_growing_range_continues_where_it_stopped(logdir_copy):
    t = tree_of(logdir_copy, rw=True)
    try:
        growing = t.resolve("events-3/by-offset/2-400.jsonl")
        time_range = t.resolve(f"events-3/by-time/{BASE_TS + 1}..{BASE_TS + 10**6}.jsonl")
        assert growing.attr().size and time_range.attr().size
        handle = t.resolve("events-3/append").open(True)
        for i in range(30):
            handle.write(0, b"".join(b"more %d %d\n" % (i, j) for j in range(7)))
            if i % 4 == 0:
                t.resolve("events-3/records.jsonl").attr()  # lay out the active segment meanwhile
                growing.attr()
                time_range.attr()
        handle.flush()
        assert t.read_file("events-3/by-offset/2-400.jsonl") == expected_jsonl(
            logdir_copy, "events-3", 2, 400
        )
        assert growing.attr().size == len(expected_jsonl(logdir_copy, "events-3", 2, 400))
        lines = t.read_file(f"events-3/by-time/{BASE_TS + 1}..{BASE_TS + 10**6}.jsonl").splitlines()
        assert [json.loads(line)["offset"] for line in lines] == [1, 2, 3, 4]
        # newer records arrived, but a time range never ends: a late record (CreateTime) still joins it
        assert time_range.volatile()
        size = time_range.attr().size
        handle.write(0, b'{"value": "late", "timestamp": %d}\n' % (BASE_TS + 3))
        end = t.state("events-3").log.log_end_offset
        assert time_range.attr().size > size
        lines = t.read_file(f"events-3/by-time/{BASE_TS + 1}..{BASE_TS + 10**6}.jsonl").splitlines()
        assert [json.loads(line)["offset"] for line in lines] == [1, 2, 3, 4, end - 1]
        assert time_range.attr().size == len(b"".join(line + b"\n" for line in lines))
    finally:
        t.close()


def test_partition_json(tree):
    info = json.loads(tree.read_file("orders-0/partition.json"))
    assert info["topic"] == "orders" and info["partition"] == 0
    assert info["logStartOffset"] == 0 and info["logEndOffset"] == 1500
    assert len(info["segments"]) > 3 and {"baseOffset", "sizeBytes"} <= set(info["segments"][0])
    assert tree.resolve("orders-0/partition.json").attr().size == len(
        tree.read_file("orders-0/partition.json")
    )


# ---------------------------------------------------------------------------------------------- by-offset


def test_by_offset_listing_and_files(tree, built_logdir):
    names = tree.listdir("orders-0/by-offset")
    assert names == [f"{i}.json" for i in range(1500)]
    records = engine_records(built_logdir, "orders-0")
    with LogDir(built_logdir) as d:
        log = d.log("orders-0")
        for offset in (0, 1, 9, 10, 777, 1499):
            batch, i = read_offset(log, offset)
            data = tree.read_file(f"orders-0/by-offset/{offset}.json")
            assert data == render_record_pretty("orders", 0, batch, i)
            node = tree.resolve(f"orders-0/by-offset/{offset}.json")
            attr = node.attr()
            assert attr.size == len(data)
            assert attr.mtime_ns == records[offset].timestamp * 1_000_000
    for missing in ("1500.json", "99999.json", "01.json", "-1.json"):
        with pytest.raises(NotFound):
            tree.resolve(f"orders-0/by-offset/{missing}")


def test_by_offset_listing_resumes_from_ids(tree):
    node = tree.resolve("orders-0/by-offset")
    first = list(zip(range(25), node.entries(0), strict=False))
    next_id = first[-1][1][0]
    rest = [name for _id, name, _n in node.entries(next_id)]
    assert [e[1][1] for e in first] + rest == [f"{i}.json" for i in range(1500)]


def test_offset_ranges(tree, built_logdir):
    for first, last in ((0, 0), (0, 1499), (5, 14), (95, 433), (1490, 5000)):
        data = tree.read_file(f"orders-0/by-offset/{first}-{last}.jsonl")
        assert data == expected_jsonl(built_logdir, "orders-0", first, last)
        assert tree.resolve(f"orders-0/by-offset/{first}-{last}.jsonl").attr().size == len(data)
    assert tree.read_file("orders-0/by-offset/2000-3000.jsonl") == b""
    with pytest.raises(NotFound):
        tree.resolve("orders-0/by-offset/10-5.jsonl")


def test_offset_range_reuses_built_layouts(tree, built_logdir):
    tree.state("orders-0").composition()  # every segment laid out
    data = tree.read_file("orders-0/by-offset/3-1200.jsonl")
    assert data == expected_jsonl(built_logdir, "orders-0", 3, 1200)


# ---------------------------------------------------------------------------------------------- by-time


def test_by_time(tree, built_logdir):
    records = engine_records(built_logdir, "orders-0")
    data = tree.read_file(f"orders-0/by-time/{BASE_TS + 55}.json")
    assert json.loads(data)["offset"] == 6
    iso = "2025-11-21T04:40:00.123Z"
    ts = parse_timestamp(iso)
    want = next(r.offset for r in records if r.timestamp >= ts)
    assert json.loads(tree.read_file(f"orders-0/by-time/{iso}.json"))["offset"] == want
    with pytest.raises(NotFound):
        tree.resolve(f"orders-0/by-time/{BASE_TS + 10**9}.json")
    with pytest.raises(NotFound):
        tree.resolve("orders-0/by-time/tomorrow.json")


def test_time_ranges(tree, built_logdir):
    records = engine_records(built_logdir, "orders-0")
    for ts1, ts2 in (
        (BASE_TS, BASE_TS + 100),
        (BASE_TS + 5, BASE_TS + 5000),
        (BASE_TS - 10**6, BASE_TS + 10**9),
    ):
        data = tree.read_file(f"orders-0/by-time/{ts1}..{ts2}.jsonl")
        offsets = [orjson.loads(line)["offset"] for line in data.splitlines()]
        assert offsets == [r.offset for r in records if ts1 <= r.timestamp < ts2]
        assert tree.resolve(f"orders-0/by-time/{ts1}..{ts2}.jsonl").attr().size == len(data)
    assert tree.read_file(f"orders-0/by-time/{BASE_TS}..{BASE_TS}.jsonl") == b""
    with pytest.raises(NotFound):
        tree.resolve(f"orders-0/by-time/{BASE_TS + 9}..{BASE_TS}.jsonl")


def _late_log(path: Path) -> list:
    """``late-0``: CreateTime out of order. Blocks of records, one segment each, alternate between
    recent and old timestamps; inside a block, timestamps jump back and forth, and batches hold both."""
    rng = random.Random(11)
    with LogDir(path, SMALL_SEGMENTS, writable=True) as d:
        log = d.create_partition("late", 0)
        for block in range(6):
            base = BASE_TS + (0 if block % 2 else 100_000)
            for start in range(0, 60, 6):
                rows = [
                    ProducerRecord(base + rng.randrange(0, 5_000), None, b"b%d r%d" % (block, start + k), ())
                    for k in range(6)
                ]
                log.append_records(rows)
            log.roll()
        # a straggler: older than everything before it, at the very end
        log.append_records([ProducerRecord(BASE_TS - 1, None, b"straggler", ())])
    return engine_records(path, "late-0")


def test_time_ranges_with_timestamps_out_of_order(tmp_path):
    """SPEC: ``ts1..ts2`` holds every record with ts1 <= timestamp < ts2, in offset order; a record at
    or past ts2 does not end it (CreateTime need not grow with offsets)."""
    records = _late_log(tmp_path)
    assert sorted(r.timestamp for r in records) != [r.timestamp for r in records]
    rng = random.Random(3)
    bounds = [
        (BASE_TS, BASE_TS + 2_500),  # the old blocks only, from the first of them to the last
        (BASE_TS + 100_000, BASE_TS + 102_000),  # recent blocks, sealed segments skipped between
        (BASE_TS - 1, BASE_TS),  # only the straggler at the end
        (BASE_TS - 10, BASE_TS + 10**6),  # everything
        (BASE_TS + 10**6, BASE_TS + 10**7),  # nothing
    ]
    bounds += [
        tuple(sorted(rng.randrange(BASE_TS - 10, BASE_TS + 106_000) for _ in range(2))) for _ in range(25)
    ]
    t = Tree(LogDir(tmp_path))
    try:
        for ts1, ts2 in bounds:
            name = f"late-0/by-time/{ts1}..{ts2}.jsonl"
            data = t.read_file(name)
            got = [orjson.loads(line)["offset"] for line in data.splitlines()]
            assert got == [r.offset for r in records if ts1 <= r.timestamp < ts2], (ts1, ts2)
            assert t.resolve(name).attr().size == len(data)
            handle = t.resolve(name).open(False)
            assert handle.read(len(data) // 3, 1000) == data[len(data) // 3 : len(data) // 3 + 1000]
    finally:
        t.close()


def test_a_time_range_skips_what_cannot_hold_its_records(tmp_path, monkeypatch):
    """Sealed segments whose largest timestamp is below the range, and v2 batches whose header says
    the same, are not decoded."""
    from kafkafs.storage.records import BatchView

    records = _late_log(tmp_path)
    decoded = []
    real = BatchView.decode

    def counting(self, *args, **kwargs):
        decoded.append(self.header.base_offset)
        return real(self, *args, **kwargs)

    monkeypatch.setattr(BatchView, "decode", counting)
    t = Tree(LogDir(tmp_path))
    try:
        ts1, ts2 = BASE_TS + 100_000, BASE_TS + 100_500
        data = t.read_file(f"late-0/by-time/{ts1}..{ts2}.jsonl")
        want = [r.offset for r in records if ts1 <= r.timestamp < ts2]
        assert [orjson.loads(line)["offset"] for line in data.splitlines()] == want
        old_blocks = {r.offset // 6 * 6 for r in records if r.timestamp < BASE_TS + 100_000}
        assert not old_blocks & set(decoded)
    finally:
        t.close()


# ---------------------------------------------------------------------------------------------- segments


def test_segments_are_byte_identical(tree, built_logdir):
    listed = tree.listdir("orders-0/segments")
    on_disk = sorted(n for n in os.listdir(built_logdir / "orders-0") if not n.endswith((".tmp", ".deleted")))
    assert sorted(listed) == on_disk
    assert {"leader-epoch-checkpoint", "partition.metadata"} <= set(listed) and any(n.endswith(".snapshot") for n in listed)
    assert listed[:2] == ["leader-epoch-checkpoint", "partition.metadata"]
    for name in listed:
        assert tree.read_file(f"orders-0/segments/{name}") == (built_logdir / "orders-0" / name).read_bytes()
        assert (
            tree.resolve(f"orders-0/segments/{name}").attr().size
            == (built_logdir / "orders-0" / name).stat().st_size
        )


def test_segments_lists_every_file_but_transient_ones(logdir_copy):
    """SPEC §3: every file of the partition folder (producer snapshots, the state files, any other
    regular file); not files on their way in or out of the log, which vanish at any moment."""
    folder = logdir_copy / "events-3"
    first = sorted(folder.glob("*.log"))[0].name[:20]
    shown = [f"{first}.snapshot", "00000000000000000099.snapshot", "quorum-state", "notes.txt"]
    hidden = [f"{first}.log.deleted", f"{first}.index.deleted", f"{first}.log.cleaned", f"{first}.timeindex.swap",
              "leader-epoch-checkpoint.tmp"]
    for name in shown + hidden:
        (folder / name).write_bytes(b"x")
    t = tree_of(logdir_copy)
    try:
        listed = t.listdir("events-3/segments")
        assert set(shown) <= set(listed) and not set(hidden) & set(listed)
        assert listed[:3] == ["leader-epoch-checkpoint", "partition.metadata", "quorum-state"]
        assert listed[-1] == "notes.txt" and listed.index(f"{first}.snapshot") == listed.index(f"{first}.log") + 3
        for name in hidden:
            with pytest.raises(NotFound):
                t.resolve(f"events-3/segments/{name}")
        for name in listed:
            assert t.read_file(f"events-3/segments/{name}") == (folder / name).read_bytes()
        with pytest.raises(NotPermitted):
            t.resolve("events-3/segments/leader-epoch-checkpoint").open(True)
    finally:
        t.close()


def test_log_directory_files_at_the_top(fixtures_dir):
    logs = fixtures_dir / "kafka-logs-a"
    t = Tree(LogDir(logs))
    try:
        top = t.listdir("")
        files = sorted(n for n in os.listdir(logs) if (logs / n).is_file())
        assert sorted(n for n in top if not (logs / n).is_dir()) == files
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


# ---------------------------------------------------------------------------------------------- growth


def test_growth_seen_by_a_read_only_tree(logdir_copy):
    t = tree_of(logdir_copy)
    try:
        state = t.state("orders-0")
        before = t.resolve("orders-0/records.jsonl").attr().size
        seen = []
        t.add_listener(lambda s: seen.append(s.name))
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
        assert t.state("events-3").log.log_end_offset == 8
        with pytest.raises(InvalidInput):
            handle.write(0, b"\nfine\n{broken\n")
        assert t.state("events-3").log.log_end_offset == 8
        # the failed write was in the middle of the line "partial": that line went with it
        handle.write(0, b"-line")
        handle.flush()
        log = t.state("events-3").log
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


# ---------------------------------------------------------------------------------------------- odd logs


def write_segment(directory: Path, base: int, batches: list[bytes]) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / f"{base:020d}.log").write_bytes(b"".join(batches))


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
        good = handle.read(0, 1000)
        assert good.startswith(b'{"topic":"orders"')
        with pytest.raises(CorruptRecordError):
            handle.read(0, size)
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


def test_append_buffer_alone(logdir_copy):
    from kafkafs.fs.append import AppendBuffer

    with LogDir(logdir_copy, writable=True) as d:
        log = d.log("empty-0")
        buf = AppendBuffer(log)
        assert buf.write(b"no newline yet") is None
        with pytest.raises(InvalidInput):
            buf.write(b'\n{"nope": 1}\n')  # an unknown field: the whole write fails
        assert log.log_end_offset == 0 and buf.pending == b""  # ... and the line it ended went too
        with pytest.raises(InvalidInput):
            buf.write(b'\n{"nope": 1}\n')  # the same write again (a retry) fails the same way
        result = buf.write(b"first\n")
        assert (result.first_offset, result.last_offset) == (0, 0)
        buf.write(b"a\n")
        with pytest.raises(InvalidInput):
            buf.write(b"{bad\nc")  # not in the middle of a line: as if it never happened
        buf.write(b"b")
        with pytest.raises(InvalidInput):
            buf.write(b"\n{bad\n")  # in the middle of the line "b": "b" goes too
        buf.write(b"d")
        buf.flush()
        assert [r.value for r in log.records()] == [b"first", b"a", b"d"]
        assert log.recovery_point == log.log_end_offset


def _pieces(data: bytes, size: int = 1048528) -> list[bytes]:
    """``data`` as the kernel hands one large ``write()`` to the file system (``max_write`` bytes)."""
    return [data[i : i + size] for i in range(0, len(data), size)]


def test_a_line_too_large_is_dropped_whole(logdir_copy):
    """A 2,000,000-byte line comes in pieces; the last one fails (the record is too large). Nothing of
    it may be appended: not at close, not when the writer retries the failed piece."""
    from kafkafs.errors import RecordTooLargeError
    from kafkafs.fs.append import AppendBuffer
    from kafkafs.storage.config import Settings

    settings = Settings({"max.message.bytes": 1_500_000})  # the first piece alone would fit
    with LogDir(logdir_copy, settings, writable=True) as d:
        log = d.log("empty-0")
        buf = AppendBuffer(log)
        first, rest = _pieces(b"x" * 2_000_000 + b"\n")
        assert buf.write(first) is None
        with pytest.raises(RecordTooLargeError):
            buf.write(rest)
        with pytest.raises(RecordTooLargeError):
            buf.write(rest)  # stdio / Python retry the rest of a short write: the same piece again
        buf.flush()
        assert log.log_end_offset == 0
        # a line that grows past any record it could be fails as soon as it does, and its rest too
        pieces = _pieces(b"y" * 3_000_000 + b"\nnext\n")
        assert buf.write(pieces[0]) is None
        with pytest.raises(RecordTooLargeError):
            buf.write(pieces[1])
        assert buf.pending == b""
        with pytest.raises(RecordTooLargeError):
            buf.write(pieces[2])  # the rest of the dropped line, with its newline: the write fails
        buf.write(b"after\n")
        buf.flush()
        assert [r.value for r in log.records()] == [b"after"]
        # a record too large among good lines: the whole write fails
        with pytest.raises(RecordTooLargeError):
            buf.write(b"ok\n" + b"z" * 1_600_000 + b"\n")
        assert log.log_end_offset == 1


def test_a_large_write_of_small_lines_is_appended(logdir_copy):
    """Lines that one batch of max.message.bytes cannot hold go in several, appended as one."""
    from kafkafs.fs.append import AppendBuffer

    with LogDir(logdir_copy, writable=True) as d:
        log = d.log("empty-0")
        buf = AppendBuffer(log)
        lines = [b"line %07d" % i for i in range(80_000)]  # 1 MB of text, 1.6 MB as records
        data = b"\n".join(lines) + b"\n"
        for piece in _pieces(data):
            buf.write(piece)
        buf.flush()
        assert [r.value for r in log.records()] == lines
        batches = list(log.batches())
        assert len(batches) > 1 and all(view.size <= log.config.max_message_bytes for _s, view in batches)


def test_fsync_keeps_a_partial_line(logdir_copy):
    """fsync makes the complete lines durable; the partial one waits for its newline (or close)."""
    t = tree_of(logdir_copy, rw=True)
    try:
        log = t.state("events-3").log
        handle = t.resolve("events-3/append").open(True)
        handle.write(0, b"one\nab")
        handle.fsync()
        assert log.recovery_point == log.log_end_offset == 6
        handle.write(0, b"c")
        handle.fsync()
        handle.write(0, b"def\ntail")
        handle.fsync()
        assert log.log_end_offset == 7
        handle.flush()
        handle.release()
        assert [r.value for r in log.records(5)] == [b"one", b"abcdef", b"tail"]
    finally:
        t.close()


def test_appends_are_announced_before_the_write_returns(logdir_copy):
    t = tree_of(logdir_copy, rw=True)
    try:
        heard = []
        t.add_append_listener(
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


def test_a_truncated_log_is_laid_out_afresh(logdir_copy):
    t = tree_of(logdir_copy)
    try:
        before = t.read_file("events-3/records.jsonl")
        assert json.loads(t.read_file("events-3/by-offset/0.json"))["value"] == "event 0"
        with LogDir(logdir_copy, SMALL_SEGMENTS, writable=True) as d:
            log = d.log("events-3")
            log.truncate_to(3)
            log.append_records([ProducerRecord(None, None, b"rewritten", ())] * 2)
        t.state("events-3").refresh(force=True)
        after = t.read_file("events-3/records.jsonl")
        assert after == expected_jsonl(logdir_copy, "events-3") != before
        # the whole batch 0..4 was cut (Kafka truncates whole batches); offsets 0 and 1 hold new records
        assert json.loads(t.read_file("events-3/by-offset/0.json"))["value"] == "rewritten"
        with pytest.raises(NotFound):
            t.resolve("events-3/by-offset/4.json")
    finally:
        t.close()
