"""``kafkafs dump`` against Kafka's ``DumpLogSegments`` format strings, quoted from
core/src/main/scala/kafka/tools/DumpLogSegments.scala (Kafka 3.x) and, where Kafka 4.x changed them,
tools/src/main/java/org/apache/kafka/tools/DumpLogSegments.java (Kafka 4.x), line by line.

Expected values are read from the files by the test itself (struct, from Kafka's documented layouts),
never from kafkafs.
"""

from __future__ import annotations

import io
import mmap
import os
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from kafkafs.dump import DumpOptions, dump_files
from kafkafs.errors import CorruptRecordError
from tests.kafka_layout import batch, batch_fields, control_batch, walk_batches, write_producer_snapshot

OFFSETS_12 = "kafka-logs-a/__consumer_offsets-12"


def dump(*files, **options) -> tuple[int, list[str], list[str]]:
    out, err = io.StringIO(), io.StringIO()
    rc = dump_files([str(f) for f in files], out, err, DumpOptions(**options))
    return rc, out.getvalue().split("\n")[:-1], err.getvalue().split("\n")[:-1]


def cli(*args: str) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, "-m", "kafkafs.cli", "dump", *args], capture_output=True, timeout=120)
    assert b"Traceback" not in proc.stderr, proc.stderr.decode()
    return proc


def kafka_batch_line(pos: int, f: dict) -> str:
    """printBatchLevel, magic 2:
    print("baseOffset: " + batch.baseOffset + " lastOffset: " + batch.lastOffset + " count: " + batch.countOrNull +
      " baseSequence: " + batch.baseSequence + " lastSequence: " + batch.lastSequence +
      " producerId: " + batch.producerId + " producerEpoch: " + batch.producerEpoch +
      " partitionLeaderEpoch: " + batch.partitionLeaderEpoch + " isTransactional: " + batch.isTransactional +
      " isControl: " + batch.isControlBatch + " deleteHorizonMs: " + batch.deleteHorizonMs)
    println(" position: " + accumulativeBytes + " " + batch.timestampType + ": " + batch.maxTimestamp +
      " size: " + batch.sizeInBytes + " magic: " + batch.magic +
      " compresscodec: " + batch.compressionType.name + " crc: " + batch.checksum + " isvalid: " + batch.isValid)
    """
    a = f["attributes"]
    last_seq = -1 if f["baseSequence"] == -1 else f["baseSequence"] + f["lastOffsetDelta"]
    horizon = f"OptionalLong[{f['firstTimestamp']}]" if a & 0x40 else "OptionalLong.empty"
    codec = ["none", "gzip", "snappy", "lz4", "zstd"][a & 7]
    b = lambda x: "true" if x else "false"  # noqa: E731
    return (
        f"baseOffset: {f['baseOffset']} lastOffset: {f['baseOffset'] + f['lastOffsetDelta']} count: {f['recordCount']}"
        f" baseSequence: {f['baseSequence']} lastSequence: {last_seq} producerId: {f['producerId']}"
        f" producerEpoch: {f['producerEpoch']} partitionLeaderEpoch: {f['partitionLeaderEpoch']}"
        f" isTransactional: {b(a & 0x10)} isControl: {b(a & 0x20)} deleteHorizonMs: {horizon}"
        f" position: {pos} {'LogAppendTime' if a & 8 else 'CreateTime'}: {f['maxTimestamp']}"
        f" size: {f['batchLength'] + 12} magic: 2 compresscodec: {codec} crc: {f['crc']} isvalid: true"
    )


def test_log_batches_of_the_broker_segment(fixtures_dir):
    # println(s"Dumping $file"); println(s"Log starting offset: $startOffset")
    segment = fixtures_dir / OFFSETS_12 / "00000000000000000000.log"
    rc, lines, err = dump(segment)
    assert rc == 0 and err == []
    assert lines[:2] == [f"Dumping {segment}", "Log starting offset: 0"]
    expected = [kafka_batch_line(pos, f) for pos, f in walk_batches(segment.read_bytes())]
    assert len(expected) == 147
    assert lines[2:] == expected


def test_offset_index_entries(fixtures_dir):
    # println(s"offset: ${entry.offset} position: ${entry.position}")
    index = fixtures_dir / OFFSETS_12 / "00000000000000000000.index"
    data = index.read_bytes()
    entries = [struct.unpack_from(">II", data, i) for i in range(0, len(data), 8)]
    rc, lines, err = dump(index)
    assert rc == 0 and err == []
    assert lines == [f"Dumping {index}"] + [f"offset: {rel} position: {pos}" for rel, pos in entries]
    assert len(entries) == 14
    # println(s"$file is empty.")
    empty = fixtures_dir / OFFSETS_12 / "00000000000000000862.index"
    assert dump(empty)[1] == [f"Dumping {empty}", f"{empty} is empty."]


def test_time_index_entries(fixtures_dir):
    # println(s"timestamp: ${entry.timestamp} offset: ${entry.offset}")
    for base in ("00000000000000000000", "00000000000000000862"):
        index = fixtures_dir / OFFSETS_12 / f"{base}.timeindex"
        data = index.read_bytes()
        entries = [struct.unpack_from(">qI", data, i) for i in range(0, len(data), 12)]
        rc, lines, err = dump(index)
        assert rc == 0 and err == [], err
        assert lines == [f"Dumping {index}"] + [f"timestamp: {ts} offset: {int(base) + rel}" for ts, rel in entries]
    assert len(entries) == 1


def test_verify_index_only_and_sanity_check(fixtures_dir, tmp_path):
    folder = tmp_path / "__consumer_offsets-12"
    shutil.copytree(fixtures_dir / OFFSETS_12, folder)
    os.chmod(folder, 0o755)
    index, timeindex = folder / "00000000000000000000.index", folder / "00000000000000000000.timeindex"
    rc, lines, err = dump(index, timeindex, verify_index_only=True)
    assert (rc, lines, err) == (0, [f"Dumping {index}", f"Dumping {timeindex}"], [])
    # println(s"$file passed sanity check.")
    rc, lines, _ = dump(index, timeindex, index_sanity_check=True)
    assert lines == [f"Dumping {index}", f"{index} passed sanity check.", f"Dumping {timeindex}", f"{timeindex} passed sanity check."]
    # entry 2 names offset 121 instead of 120; time entry 1 has a timestamp one below its batch's
    for path in (index, timeindex):
        os.chmod(path, 0o644)
    data = bytearray(index.read_bytes())
    rel, pos = struct.unpack_from(">II", data, 8)
    struct.pack_into(">I", data, 8, rel + 1)
    index.write_bytes(bytes(data))
    tdata = bytearray(timeindex.read_bytes())
    ts, trel = struct.unpack_from(">qI", tdata, 12)
    struct.pack_into(">q", tdata, 12, ts - 1)
    timeindex.write_bytes(bytes(tdata))
    rc, lines, err = dump(index, timeindex, verify_index_only=True)
    assert rc == 1
    # System.err.println(s"Mismatches in :$fileName"); System.err.println(s"  Index offset: $indexOffset, log offset: $logOffset")
    # System.err.println("Found timestamp mismatch in :" + fileName)
    # System.err.println("  Index timestamp: %d, log timestamp: %d".format(m._1, m._2))
    assert err == [
        f"Mismatches in :{index}",
        f"  Index offset: {rel + 1}, log offset: {rel}",
        f"Found timestamp mismatch in :{timeindex}",
        f"  Index timestamp: {ts - 1}, log timestamp: {ts}",
    ]
    # sanity: "Index file %s is corrupt, found %d bytes which is neither positive nor a multiple of 8"
    index.write_bytes(bytes(data) + b"\0\0\0")
    rc, lines, err = dump(index, index_sanity_check=True)
    assert rc == 1 and lines == [f"Dumping {index}"]
    assert err == [f"kafkafs: Index file {index} is corrupt, found {len(data) + 3} bytes which is neither positive nor a multiple of 8"]


def test_time_index_offsets_not_found_name_their_file(fixtures_dir, tmp_path):
    # Kafka 4.4.0's kafka-dump-log (run on this very file): "The following indexed offsets are not found
    # in :" + the file's absolute path, then "Indexed offset: N, found log offset: M" (3.x said "in the log.")
    folder = tmp_path / "__consumer_offsets-12"
    shutil.copytree(fixtures_dir / OFFSETS_12, folder)
    os.chmod(folder, 0o755)
    timeindex = folder / "00000000000000000000.timeindex"
    os.chmod(timeindex, 0o644)
    tdata = bytearray(timeindex.read_bytes())
    ts, trel = struct.unpack_from(">qI", tdata, 24)  # entry 2: a batch's last offset, one off
    struct.pack_into(">I", tdata, 32, trel - 1)
    timeindex.write_bytes(bytes(tdata))
    rc, _lines, err = dump(timeindex)
    assert rc == 1
    assert err == [
        f"The following indexed offsets are not found in :{timeindex}",
        f"Indexed offset: {trel - 1}, found log offset: {trel}",
    ]


SNAPSHOT_OF_TWO = "kafka-logs-a/nikhilDemo-0/00000000000000000003.snapshot"  # a broker's: 2 producers, 102 bytes


@pytest.mark.parametrize("damage, message", [
    # what Kafka 4.4.0's kafka-dump-log prints for each (run on these very bytes): readSnapshot's
    # CorruptSnapshotException on one line of stderr, exit 0 there (kafkafs: exit 1, damage found); a
    # buffer that ends too soon is Java's BufferUnderflowException, whose message is null
    (lambda b: b[:0], "Snapshot failed schema validation: null"),
    (lambda b: b[:1], "Snapshot failed schema validation: null"),
    (lambda b: b[:5], "Snapshot failed schema validation: null"),
    (lambda b: b[:8], "Snapshot failed schema validation: null"),
    (lambda b: b[:10], "Snapshot failed schema validation: Tried to allocate a collection of size 2, but there are only 0 bytes remaining."),
    (lambda b: b[:12], "Snapshot failed schema validation: null"),
    (lambda b: b[:101], "Snapshot failed schema validation: null"),
    (lambda b: b[:6] + b"\xff\xff\xff\xff" + b[10:], "Snapshot failed schema validation: non-nullable field producerEntries was serialized as null"),
    (lambda b: b[:6] + b"\x00\x00\x00\x09" + b[10:], "Snapshot failed schema validation: null"),
    (lambda b: b"\x00\x00" + b[2:], "Snapshot failed schema validation: Snapshot contained an unknown file version 0"),
], ids=["empty", "1", "5", "8", "10", "12", "101", "count-1", "count9", "version0"])
def test_damaged_snapshots_in_kafkas_words(fixtures_dir, tmp_path, damage, message):
    snapshot = tmp_path / "00000000000000000003.snapshot"
    snapshot.write_bytes(damage((fixtures_dir / SNAPSHOT_OF_TWO).read_bytes()))
    assert dump(snapshot) == (1, [f"Dumping {snapshot}"], [message])


def test_bytes_after_a_snapshots_entries_are_ignored_as_kafka_ignores_them(fixtures_dir, tmp_path):
    # Kafka's readSnapshot reads the entries and checks the CRC over the rest of the file: trailing bytes
    # that the CRC covers are no damage (Kafka 4.4.0's kafka-dump-log prints both producers, exit 0)
    import crc32c

    good = (fixtures_dir / SNAPSHOT_OF_TWO).read_bytes()
    longer = bytearray(good + b"\0\1\2")
    struct.pack_into(">I", longer, 2, crc32c.crc32c(bytes(longer[6:])))
    snapshot = tmp_path / "00000000000000000003.snapshot"
    snapshot.write_bytes(bytes(longer))
    rc, lines, err = dump(snapshot)
    assert (rc, err) == (0, []) and len(lines) == 3
    assert lines[1].startswith("producerId: 10000 producerEpoch: 0 ") and lines[2].startswith("producerId: 7000 ")


def test_time_index_entries_find_their_batch_as_kafkas_binary_search_does(fixtures_dir, tmp_path):
    # dumpTimeIndex finds each entry's batch from OffsetIndex.lookup(offset).position: Kafka's binary
    # search (AbstractIndex.indexSlotRangeFor). With offset index entry 4 damaged (relative offset -5),
    # Kafka 4.4.0's kafka-dump-log (run on this very copy) still finds every time entry's batch (no "not
    # found"; a scan that stops at the first entry past the target did not) and reports only the offset
    # index's own mismatch
    folder = tmp_path / "__consumer_offsets-12"
    shutil.copytree(fixtures_dir / OFFSETS_12, folder)
    os.chmod(folder, 0o755)
    index, timeindex = folder / "00000000000000000000.index", folder / "00000000000000000000.timeindex"
    os.chmod(index, 0o644)
    data = bytearray(index.read_bytes())
    rel, pos = struct.unpack_from(">iI", data, 4 * 8)
    struct.pack_into(">i", data, 4 * 8, -5)
    index.write_bytes(bytes(data))
    rc, _lines, err = dump(index, timeindex, verify_index_only=True)
    assert err == [f"Mismatches in :{index}", f"  Index offset: -5, log offset: {rel}"], err


def test_empty_and_sane_index_lines_print_the_path_as_java_does(fixtures_dir, tmp_path):
    # println(file + " is empty.") / println(file + " passed sanity check."): a java.io.File, so "a//b" is "a/b"
    folder = tmp_path / "__consumer_offsets-12"
    shutil.copytree(fixtures_dir / OFFSETS_12, folder)
    empty = f"{folder}//00000000000000000862.index"
    sane = f"{folder}//00000000000000000000.index"
    assert dump(empty)[1] == [f"Dumping {folder}/00000000000000000862.index", f"{folder}/00000000000000000862.index is empty."]
    assert dump(sane, index_sanity_check=True)[1] == [
        f"Dumping {folder}/00000000000000000000.index", f"{folder}/00000000000000000000.index passed sanity check."
    ]


@pytest.mark.parametrize("version", [5, -1])
def test_txn_index_entry_of_an_unknown_version_in_kafkas_words(tmp_path, version):
    # Kafka 4.4.0's kafka-dump-log stops there with a stack trace, printing no entry: 'KafkaException:
    # Unexpected aborted transaction version 5 in transaction index /abs/path, supported version range is
    # 0 to 0'; kafkafs prints that message on one line (README: kafkafs's deviation), exit 1
    txn = tmp_path / "00000000000000000010.txnindex"
    good = struct.pack(">hqqqq", 0, 7, 3, 9, 3)
    txn.write_bytes(good + struct.pack(">hqqqq", version, 8, 10, 12, 13) + good)
    assert dump(txn) == (1, [f"Dumping {txn}"], [
        f"kafkafs: Unexpected aborted transaction version {version} in transaction index {txn}, "
        "supported version range is 0 to 0"
    ])


def test_state_files(fixtures_dir, tmp_path):
    folder = fixtures_dir / OFFSETS_12
    snapshot = folder / "00000000000000000869.snapshot"
    assert dump(snapshot) == (0, [f"Dumping {snapshot}"], [])  # the broker's: no producers
    # issue 19 finding 5: Kafka 4's kafka-dump-log takes a broker's state files and ignores them, exit 0
    for state in (folder / "leader-epoch-checkpoint", folder / "partition.metadata",
                  fixtures_dir / "kafka-logs-a/meta.properties"):
        if state.exists():
            assert dump(state) == (0, [f"Dumping {state}"], [f"Ignoring unknown file {state}"])
            proc = cli(str(state))
            assert proc.returncode == 0 and proc.stdout.decode() == f"Dumping {state}\n", proc.stderr
            assert f"Ignoring unknown file {state}" in proc.stderr.decode()
    # Kafka 4.4's kafka-dump-log (run on such a file: tests/broker/test_dump_vs_kafka.py): "... lastTimestamp: T",
    # then " firstSequence: ..." only for a producer with batch metadata; no space at the end without one
    mine = tmp_path / "00000000000000000042.snapshot"
    mine.write_bytes(write_producer_snapshot([(7, 1, 9, 40, 4, 1234, 3, 36), (8, 0, -1, -1, 0, 99, -1, -1)]))
    assert dump(mine)[1] == [
        f"Dumping {mine}",
        "producerId: 7 producerEpoch: 1 coordinatorEpoch: 3 currentTxnFirstOffset: OptionalLong[36] lastTimestamp: 1234 "
        "firstSequence: 5 lastSequence: 9 lastOffset: 40 offsetDelta: 4 timestamp: 1234",
        "producerId: 8 producerEpoch: 0 coordinatorEpoch: -1 currentTxnFirstOffset: OptionalLong.empty lastTimestamp: 99",
    ]
    good = mine.read_bytes()
    mine.write_bytes(good[:-1] + b"\1")
    rc, _lines, err = dump(mine)
    assert rc == 1 and err[0].startswith("Snapshot is corrupt (CRC is no longer valid). Stored crc: ")
    # a version this reader does not know: Kafka 4.4's line (kafka-dump-log run on such a file)
    mine.write_bytes(b"\x00\x02" + good[2:])
    rc, lines, err = dump(mine)
    assert (rc, lines, err) == (
        1, [f"Dumping {mine}"], ["Snapshot failed schema validation: Snapshot contained an unknown file version 2"]
    )
    # println(s"version: ${abortedTxn.version} producerId: ${abortedTxn.producerId} firstOffset: ${abortedTxn.firstOffset} " +
    #   s"lastOffset: ${abortedTxn.lastOffset} lastStableOffset: ${abortedTxn.lastStableOffset}")
    txn = tmp_path / "00000000000000000000.txnindex"
    txn.write_bytes(struct.pack(">hqqqq", 0, 7, 3, 9, 3) + struct.pack(">hqqqq", 0, 8, 10, 12, 13))
    assert dump(txn)[1] == [
        f"Dumping {txn}",
        "version: 0 producerId: 7 firstOffset: 3 lastOffset: 9 lastStableOffset: 3",
        "version: 0 producerId: 8 firstOffset: 10 lastOffset: 12 lastStableOffset: 13",
    ]
    # System.err.println(s"Ignoring unknown file $file")
    meta = fixtures_dir / "kafka-logs-a/meta.properties"
    assert dump(meta)[1:] == ([f"Dumping {meta}"], [f"Ignoring unknown file {meta}"])


@pytest.fixture
def segment(tmp_path) -> Path:
    folder = tmp_path / "t-0"
    folder.mkdir()
    path = folder / "00000000000000000000.log"
    ts = 1_700_000_000_000
    path.write_bytes(
        batch(0, [(b"k", b"hi", (("trace", b"1"), ("h2", None))), (None, b"there", ())], leader_epoch=3,
              producer_id=7, producer_epoch=1, base_sequence=5, first_ts=ts)
        + batch(2, [(b"a", "é".encode(), ())], producer_id=9, producer_epoch=0, base_sequence=0, attributes=0x10, first_ts=ts + 5)
        + control_batch(3, 1, 4, 9, 0, ts + 6)
        + batch(4, [(b"z", None, ())], attributes=0x08 | 0x40, first_ts=ts + 7, max_ts=ts + 50)
        + batch(6, [(None, b"g1", ()), (None, b"g2", ())], attributes=1, first_ts=ts + 8, offset_deltas=[0, 1])
    )
    return path


def test_records_lines(segment):
    # print(s"${prefix}offset: ${record.offset} ${batch.timestampType}: ${record.timestamp} " +
    #   s"keySize: ${record.keySize} valueSize: ${record.valueSize}")
    # print(" sequence: " + record.sequence + " headerKeys: " + record.headers.map(_.key).mkString("[", ",", "]"))
    # print(s" endTxnMarker: ${endTxnMarker.controlType} coordinatorEpoch: ${endTxnMarker.coordinatorEpoch}")
    # print(s"${prefix}key: $key"); print(s" payload: $payload")
    rc, lines, err = dump(segment, print_data_log=True)
    assert rc == 0 and err == ["Non-consecutive offsets in " + str(segment), "  4 is followed by 6"]
    ts = 1_700_000_000_000
    batches = dict(walk_batches(segment.read_bytes()))
    assert lines[2] == kafka_batch_line(0, batches[0])
    assert lines[3] == f"| offset: 0 CreateTime: {ts} keySize: 1 valueSize: 2 sequence: 5 headerKeys: [trace,h2] key: k payload: hi"
    assert lines[4] == f"| offset: 1 CreateTime: {ts + 1} keySize: -1 valueSize: 5 sequence: 6 headerKeys: [] payload: there"
    assert lines[6] == f"| offset: 2 CreateTime: {ts + 5} keySize: 1 valueSize: 2 sequence: 0 headerKeys: [] key: a payload: é"
    assert " isTransactional: true isControl: true " in lines[7]
    assert lines[8] == f"| offset: 3 CreateTime: {ts + 6} keySize: 4 valueSize: 6 sequence: -1 headerKeys: [] endTxnMarker: COMMIT coordinatorEpoch: 4"
    assert lines[9].startswith("baseOffset: 4 ") and f"deleteHorizonMs: OptionalLong[{ts + 7}] " in lines[9]
    assert f" LogAppendTime: {ts + 50} " in lines[9]
    assert lines[10] == f"| offset: 4 LogAppendTime: {ts + 50} keySize: 1 valueSize: -1 sequence: -1 headerKeys: [] key: z"
    assert " compresscodec: gzip " in lines[11]
    assert lines[12:] == [f"| offset: {6 + i} CreateTime: {ts + 8 + i} keySize: -1 valueSize: 2 sequence: -1 headerKeys: [] payload: g{i + 1}" for i in range(2)]
    for pos, f in batches.items():
        assert kafka_batch_line(pos, f) in lines
    # --skip-record-metadata: only the key and payload remain, the first of them after "| " (Kafka 4.x's
    # printRecordContents); a control record's line is empty ("This flag also skips control records")
    _rc, lines, _ = dump(segment, print_data_log=True, skip_record_metadata=True)
    assert lines[3:5] == ["| key: k payload: hi", "| payload: there"]
    assert lines[8] == ""
    # --deep-iteration alone: metadata, no key/payload
    _rc, lines, _ = dump(segment, deep_iteration=True)
    assert lines[3] == f"| offset: 0 CreateTime: {ts} keySize: 1 valueSize: 2 sequence: 5 headerKeys: [trace,h2]"


def test_truncated_last_batch_and_max_bytes(segment):
    # println(s"Found $trailingBytes invalid bytes at the end of ${file.getName}")
    whole = segment.read_bytes()
    segment.write_bytes(whole[:-7])
    last_pos, last = walk_batches(whole)[-1]
    rc, lines, err = dump(segment)
    assert rc == 1
    assert lines[-1] == f"Found {len(whole) - 7 - last_pos} invalid bytes at the end of {segment.name}"
    assert sum(line.startswith("baseOffset:") for line in lines) == 4
    proc = cli(str(segment))
    assert proc.returncode == 1
    assert proc.stdout.decode().splitlines()[-1] == lines[-1]
    # --max-bytes: batches that fit, and no invalid-bytes line (Kafka prints it only without --max-bytes)
    segment.write_bytes(whole)
    rc, lines, _ = dump(segment, max_bytes=last_pos + 10)
    assert rc == 0 and sum(line.startswith("baseOffset:") for line in lines) == 4 and not lines[-1].startswith("Found")


@pytest.mark.parametrize("codec", [5, 6, 7])
def test_unknown_codec_is_one_clear_line(tmp_path, codec):
    folder = tmp_path / "t-0"
    folder.mkdir()
    path = folder / "00000000000000000000.log"
    path.write_bytes(batch(0, [(None, b"x", ())]) + batch(1, [(None, b"y", ())], attributes=codec))
    proc = cli("--deep-iteration", str(path))
    assert proc.returncode == 1
    out = proc.stdout.decode().splitlines()
    assert out[4].startswith("baseOffset: 1 lastOffset: 1 ")
    assert f" compresscodec: unknown({codec}) " in out[4] and out[4].endswith("isvalid: true")
    assert proc.stderr.decode().splitlines() == [f"kafkafs: {path}: position 69: Unknown compression type id: {codec}"]


def test_kraft_snapshot_and_files_option(fixtures_dir):
    # println("KRaft bootstrap snapshot"); print(s" SnapshotHeader ${SnapshotHeaderRecordJsonConverter.write(...)}")
    boot = fixtures_dir / "kafka-logs-c/bootstrap.checkpoint"
    log = fixtures_dir / "kafka-logs-c/__cluster_metadata-0/00000000000000000000.log"
    proc = cli("--deep-iteration", "--files", f"{boot},{log}")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.decode().splitlines()
    assert lines[:2] == [f"Dumping {boot}", "KRaft bootstrap snapshot"]
    assert lines[3].endswith('headerKeys: [] SnapshotHeader {"version":0,"lastContainedLogTimestamp":0}')
    # System.out.print(" LeaderChange: " + LeaderChangeMessageJsonConverter.write(..)) (Kafka 4.x)
    assert any(line.endswith('headerKeys: [] LeaderChange: {"version":0,"leaderId":1,"voters":[{"voterId":1}],'
                             '"grantingVoters":[{"voterId":1}]}') for line in lines)


def test_cli_mistakes(tmp_path):
    proc = cli(str(tmp_path / "nothing.log"))
    assert proc.returncode == 2 and proc.stderr.decode().count("\n") == 1
    assert cli().returncode == 2


@pytest.mark.parametrize("flag", ["--max-bytes", "--max-message-size"])
def test_negative_sizes_are_usage_errors(segment, flag):
    # Kafka's FileRecords.slice(0, -1) throws IllegalArgumentException; kafkafs printed nothing, exit 0
    proc = cli(str(segment), flag, "-1")
    assert proc.returncode == 2 and proc.stdout == b""
    err = proc.stderr.decode()
    assert err.count("\n") == 1 and flag in err


def _string(buf: bytes, at: int) -> tuple[str, int]:
    (n,) = struct.unpack_from(">h", buf, at)
    return buf[at + 2 : at + 2 + n].decode(), at + 2 + n


def test_offsets_decoder(fixtures_dir):
    # OffsetsMessageParser: json.set("type", new TextNode(version.toString)); json.set("data", messageAsJson)
    #   value: json.set("version", new TextNode(version.toString)); a tombstone: "<DELETE>"
    import json

    from kafkafs.format.batch import decode_batch, read_batch_header

    segment = fixtures_dir / OFFSETS_12 / "00000000000000000000.log"
    rc, lines, err = dump(segment, decoder="offsets")
    assert rc == 0 and err == []
    record_lines = [line for line in lines if line.startswith("| offset: ")]
    assert len(record_lines) == 862
    buf = segment.read_bytes()
    commits = 0
    by_offset = {int(line.split()[2]): line for line in record_lines}
    for pos, _f in walk_batches(buf):
        b = decode_batch(buf, read_batch_header(buf, pos))
        for offset, key, value in zip(b.offsets, b.keys, b.values, strict=True):
            line = by_offset[offset]
            shown_key = json.loads(line.split(" key: ", 1)[1].split(" payload: ", 1)[0])
            kind = struct.unpack_from(">h", key)[0]
            group, at = _string(key, 2)
            assert shown_key["type"] == str(kind) and shown_key["data"]["group"] == group
            if value is None:
                assert line.endswith(" payload: <DELETE>")
                continue
            shown = json.loads(line.split(" payload: ", 1)[1])
            assert shown["version"] == str(struct.unpack_from(">h", value)[0])
            if kind == 1:  # OffsetCommitKey: group, topic, partition; OffsetCommitValue v3 by hand
                topic, at = _string(key, at)
                assert shown_key["data"] == {"group": group, "topic": topic, "partition": struct.unpack_from(">i", key, at)[0]}
                version, off, epoch = struct.unpack_from(">hqi", value)
                assert version == 3
                metadata, at = _string(value, 14)
                (commit_ts,) = struct.unpack_from(">q", value, at)
                assert shown["data"] == {"offset": off, "leaderEpoch": epoch, "metadata": metadata, "commitTimestamp": commit_ts}
                commits += 1
    assert commits > 800


def test_cluster_metadata_and_transaction_decoders(fixtures_dir, tmp_path):
    # ClusterMetadataLogMessageParser: json.set("type", new TextNode(MetadataRecordType.fromId(..).toString))
    #   json.set("version", new IntNode(..)); json.set("data", ..); "No keys for metadata records"
    import json

    log = fixtures_dir / "kafka-logs-c/__cluster_metadata-0/00000000000000000000.log"
    rc, lines, err = dump(log, decoder="cluster-metadata")
    assert rc == 0 and err == []
    payloads = [json.loads(line.split(" payload: ", 1)[1]) for line in lines if " payload: " in line]
    assert len(payloads) > 4000 and all(list(p) == ["type", "version", "data"] for p in payloads)
    assert all(" key: " not in line for line in lines)
    assert any(p["type"] == "FEATURE_LEVEL_RECORD" and p["data"]["name"] == "metadata.version" for p in payloads)
    # Kafka 4.x's TransactionLogMessageParser: the coordinator records' JSON, transactionStatus by name
    folder = tmp_path / "__transaction_state-0"
    folder.mkdir()
    key = struct.pack(">hh", 0, 3) + b"tx1"
    value = (struct.pack(">hqhib", 0, 42, 5, 60000, 1) + struct.pack(">i", 1) + struct.pack(">h", 6) + b"orders"
             + struct.pack(">iii", 2, 0, 1) + struct.pack(">qq", 1700000000123, 1700000000000))
    path = folder / "00000000000000000000.log"
    path.write_bytes(batch(0, [(key, value, ()), (key, None, ()), (key, value[:16] + b"\x63" + value[17:], ())]))
    rc, lines, err = dump(path, decoder="transaction-log")
    assert rc == 0 and err == []
    assert lines[3].endswith(
        ' key: {"type":"0","data":{"transactionalId":"tx1"}} payload: {"version":"0","data":{"producerId":42,'
        '"producerEpoch":5,"transactionTimeoutMs":60000,"transactionStatus":"Ongoing","transactionPartitions":'
        '[{"topic":"orders","partitionIds":[0,1]}],"transactionLastUpdateTimestampMs":1700000000123,'
        '"transactionStartTimestampMs":1700000000000}}'
    )
    assert lines[4].endswith(' key: {"type":"0","data":{"transactionalId":"tx1"}} payload: <DELETE>')
    assert '"transactionStatus":"99",' in lines[5]  # a state Kafka does not know: its number as a string


def _txn_value(status: int, entries: list[tuple[str, list[int]]]) -> bytes:
    """A TransactionLogValue v0: producerId 42, epoch 5, timeout 60000, ``status``, ``entries``."""
    out = struct.pack(">hqhib", 0, 42, 5, 60000, status) + struct.pack(">i", len(entries))
    for topic, ids in entries:
        out += struct.pack(">h", len(topic.encode())) + topic.encode() + struct.pack(">i", len(ids))
        out += b"".join(struct.pack(">i", i) for i in ids)
    return out + struct.pack(">qq", 1700000000123, 1700000000000)


def test_java_hashmap_order():
    # expected orders printed by JDK 17's HashMap<String, ?>.keySet() after computeIfAbsent(key, ..) for
    # each call in turn, as DumpLogSegments fills its maps (review7 R5: a new key goes to the head of
    # its bucket, and the table grows on the call after it holds more keys than its threshold)
    from kafkafs.dump.javaorder import java_hashmap_order
    from kafkafs.dump.scala import java_string_hash

    assert java_string_hash("orders") == -1008770331 and java_string_hash("é") == 233
    logs = "/logs/t-0/00000000000000000000.log", "/logs/t-0/00000000000000000100.log", "/logs/t-1/00000000000000000000.log"
    assert java_hashmap_order([logs[0], logs[0], logs[1], logs[2]]) == [logs[1], logs[0], logs[2]]
    indexes = [f"/d/{i * 100:020d}.index" for i in range(13)]
    # 13 keys in 13 calls: the table stays at 16 buckets; 3 and 10, 4 and 1 share one, the later first
    assert java_hashmap_order(indexes) == [indexes[i] for i in [7, 10, 3, 6, 4, 1, 12, 5, 9, 0, 11, 2, 8]]
    # one call more (for a key already there): the table grows to 32 first
    order = [7, 6, 12, 9, 11, 2, 8, 10, 3, 4, 1, 5, 0]
    assert java_hashmap_order([*indexes, indexes[0]]) == [indexes[i] for i in order]


def test_files_with_problems_are_reported_in_kafkas_map_order(tmp_path):
    # Kafka 4.4's DumpLogSegments keeps its findings in java.util.HashMaps keyed by getAbsolutePath and
    # prints them by iterating the maps: the files come in the maps' hash order, not in the order dumped;
    # a file's gaps are a TreeMap, in ascending order
    from kafkafs.dump.javaorder import java_hashmap_order

    logs = []
    for p in range(6):
        folder = tmp_path / f"t-{p}"
        folder.mkdir()
        path = folder / "00000000000000000000.log"
        path.write_bytes(batch(0, [(None, b"a", ())]) + batch(5, [(None, b"b", ())]) + batch(9, [(None, b"c", ())]))
        logs.append(str(path))
    rc, lines, err = dump(*logs, deep_iteration=True)
    assert rc == 0
    named = [line.removeprefix("Non-consecutive offsets in ") for line in err if line.startswith("Non-consecutive")]
    assert named == java_hashmap_order([log for log in logs for _gap in range(2)]) and sorted(named) == sorted(logs)
    assert err[1:3] == ["  0 is followed by 5", "  5 is followed by 9"]


def test_cluster_metadata_decoder_errors_in_kafkas_words(tmp_path):
    # ClusterMetadataLogMessageParser prints s"Error at ${record.offset}, skipping. ${e.getMessage}" with
    # the MetadataParseException of AbstractApiMessageSerde.read
    name = b"metadata.version"
    good = bytes([1, 12, 0, len(name) + 1]) + name + b"\x00\x14\x00"  # FeatureLevelRecord v0
    cases = [
        (bytes([0, 12, 0]), "Could not deserialize metadata record with frame version 0. Note that upgrades "
         "from the preview release of KRaft in 2.8 to newer versions are not supported."),
        (bytes([5, 12, 0]), "Could not deserialize metadata record due to unknown frame version 5(only frame "
         "version 1 is supported)"),
        (b"", "Error while reading frame version"),
        (None, "Error while reading frame version"),
        (bytes([1]), "Error while reading type"),
        (bytes([1, 12]), "Error while reading version"),
        (bytes([1, 0xFF, 0xFF, 0x03, 0]), "Value for type was too large."),
        (bytes([1, 0x7F, 0]), "org.apache.kafka.common.errors.UnsupportedVersionException: Unknown metadata id 127"),
        (good[:-3], "Failed to deserialize record with type 12"),
        (good + b"GARB", "Found 4 byte(s) of garbage after 12"),
    ]
    folder = tmp_path / "__cluster_metadata-0"
    folder.mkdir()
    path = folder / "00000000000000000000.log"
    path.write_bytes(batch(0, [(None, value, ()) for value, _ in cases] + [(None, good, ())]))
    rc, lines, err = dump(path, decoder="cluster-metadata")
    payloads = [line.split(" payload: ", 1)[1] for line in lines if " payload: " in line]
    assert payloads[:-1] == [f"Error at {i}, skipping. {said}" for i, (_, said) in enumerate(cases)]
    assert payloads[-1] == '{"type":"FEATURE_LEVEL_RECORD","version":0,"data":{"name":"metadata.version","featureLevel":20}}'


def test_a_metadata_record_of_a_newer_version_is_read_as_kafkas_reader_reads_it(tmp_path):
    # Kafka 4.4.0's kafka-dump-log --cluster-metadata-decoder (run on these records) reads a version past
    # the definition's field by field ("version":9), and says "garbage" for bytes after it; the JSON view
    # keeps such a value's bytes (SPEC §8)
    name = b"metadata.version"
    body = bytes([len(name) + 1]) + name + b"\x00\x14\x00"
    folder = tmp_path / "__cluster_metadata-0"
    folder.mkdir()
    path = folder / "00000000000000000000.log"
    path.write_bytes(batch(0, [(None, bytes([1, 12, 9]) + body, ()), (None, bytes([1, 12, 9]) + body + b"xx", ()),
                               (None, bytes([1, 2, 5, 2]) + b"t" + bytes(16) + b"\x00", ())]))
    _rc, lines, _err = dump(path, decoder="cluster-metadata")
    assert [line.split(" payload: ", 1)[1] for line in lines if " payload: " in line] == [
        '{"type":"FEATURE_LEVEL_RECORD","version":9,"data":{"name":"metadata.version","featureLevel":20}}',
        "Error at 1, skipping. Found 2 byte(s) of garbage after 12",
        '{"type":"TOPIC_RECORD","version":5,"data":{"name":"t","topicId":"AAAAAAAAAAAAAAAAAAAAAA"}}',
    ]
    from kafkafs.format.decoders import metadata_record

    with pytest.raises(CorruptRecordError):
        metadata_record(bytes([1, 12, 9]) + body)  # the records' own view: an unknown version stays bytes


def test_offsets_and_transaction_decoders_read_as_kafkas_serdes(tmp_path):
    # CoordinatorRecordSerde: readVersion / readMessage, whose messages DumpLogSegments prints after
    # "Error at offset N, skipping. "; Kafka's generated readers stop after the last field, so bytes
    # after it do not matter (for both internal topics)
    key = struct.pack(">hh", 1, 1) + b"g" + struct.pack(">h", 1) + b"t" + struct.pack(">i", 0)
    value = struct.pack(">hqihq", 3, 42, 0, 0, 1700000000000)
    cases = [
        (b"\x00", value, "Error at offset 0, skipping. Could not read version from key's buffer."),
        (struct.pack(">h", 99) + b"xx", value, "Unknown record type 99 at offset 1, skipping."),
        (key, struct.pack(">h", 9) + value[2:], "Error at offset 2, skipping. Found an unknown record version 9 "
         "for 1 type"),
        (key, b"\x00", "Error at offset 3, skipping. Could not read version from value's buffer."),
        (key, value[:6], "Error at offset 4, skipping. Could not read record with version 3 from value's buffer "
         "due to: null."),  # a BufferUnderflowException
        (key[:5] + struct.pack(">h", 5) + b"ab", value, "Error at offset 5, skipping. Could not read record with "
         "version 1 from key's buffer due to: Error reading byte array of 5 byte(s): only 2 byte(s) available."),
        (key + b"KK", value + b"VV", '{"type":"1","data":{"group":"g","topic":"t","partition":0}}'),
    ]
    folder = tmp_path / "__consumer_offsets-0"
    folder.mkdir()
    path = folder / "00000000000000000000.log"
    path.write_bytes(batch(0, [(k, v, ()) for k, v, _ in cases]))
    rc, lines, err = dump(path, decoder="offsets")
    shown = [line.split(" key: ", 1)[1] for line in lines if " key: " in line]
    assert [line.split(" payload: ")[0] for line in shown] == [said for _, _, said in cases]
    assert shown[-1].endswith(' payload: {"version":"3","data":{"offset":42,"leaderEpoch":0,"metadata":"",'
                              '"commitTimestamp":1700000000000}}')
    folder = tmp_path / "__transaction_state-0"
    folder.mkdir()
    path = folder / "00000000000000000000.log"
    txn_key = struct.pack(">hh", 0, 3) + b"tx1"
    path.write_bytes(batch(0, [(txn_key + b"KK", _txn_value(1, [("orders", [0])]) + b"VV", ()),
                               (txn_key, struct.pack(">h", 7) + _txn_value(1, [])[2:], ())]))
    rc, lines, err = dump(path, decoder="transaction-log")
    assert lines[3].endswith(' key: {"type":"0","data":{"transactionalId":"tx1"}} payload: {"version":"0","data":'
                             '{"producerId":42,"producerEpoch":5,"transactionTimeoutMs":60000,"transactionStatus":'
                             '"Ongoing","transactionPartitions":[{"topic":"orders","partitionIds":[0]}],'
                             '"transactionLastUpdateTimestampMs":1700000000123,"transactionStartTimestampMs":1700000000000}}')
    assert lines[4].endswith(" key: Error at offset 1, skipping. Found an unknown record version 7 for 0 type")


def test_coordinator_records_with_impossible_lengths_in_the_generated_readers_words(tmp_path):
    # the generated Java readers (Kafka 4.4.0's kafka-dump-log, run on these records): a null where the
    # field may not be null, and an array count past the bytes left
    def string(text: str) -> bytes:
        return struct.pack(">h", len(text)) + text.encode()

    key = struct.pack(">h", 2) + string("g")
    head = struct.pack(">h", 3) + string("consumer") + struct.pack(">i", 1) + string("range") + string("m")
    cases = [
        (head + struct.pack(">qi", 0, 1000), "Tried to allocate a collection of size 1000, but there are only 0 "
         "bytes remaining.."),
        (head + struct.pack(">qi", 0, -1), "non-nullable field members was serialized as null."),
        (struct.pack(">hh", 3, -1), "non-nullable field protocolType was serialized as null."),
    ]
    folder = tmp_path / "__consumer_offsets-0"
    folder.mkdir()
    path = folder / "00000000000000000000.log"
    path.write_bytes(batch(0, [(key, value, ()) for value, _ in cases]))
    _rc, lines, _err = dump(path, decoder="offsets")
    shown = [line.split(" key: ", 1)[1] for line in lines if " key: " in line]
    assert shown == [
        f"Error at offset {i}, skipping. Could not read record with version 3 from value's buffer due to: {said}"
        for i, (_, said) in enumerate(cases)
    ]


def test_a_uuid_cut_short_is_javas_buffer_underflow(tmp_path):
    # ShareSnapshotKey (groupId, topicId uuid, partition) cut inside its UUID: the generated reader reads
    # two longs, and Java's BufferUnderflowException has no message; Kafka 4.4.0's kafka-dump-log
    # --share-group-state-decoder says "due to: null." (not the byte array reader's words)
    key = struct.pack(">hh", 0, 1) + b"g" + bytes(16) + struct.pack(">i", 0)
    folder = tmp_path / "__share_group_state-0"
    folder.mkdir()
    path = folder / "00000000000000000000.log"
    path.write_bytes(batch(0, [(key[:5], None, ()), (key[:10], None, ())]))
    _rc, lines, _err = dump(path, decoder="share-group-state")
    assert [line.split(" key: ", 1)[1] for line in lines if " key: " in line] == [
        f"Error at offset {i}, skipping. Could not read record with version 0 from key's buffer due to: null."
        for i in (0, 1)
    ]


def test_paths_are_printed_as_java_files_print_them(segment, monkeypatch):
    # println(s"Dumping $file") and getAbsolutePath print a java.io.File, which collapses runs of "/"
    # and drops a trailing one (it printed the name as typed)
    from kafkafs.dump.indexes import _absolute, java_path

    assert java_path("a//b///c.log") == "a/b/c.log" and java_path("dir/") == "dir" and java_path("/") == "/"
    assert java_path("./x/../y.log") == "./x/../y.log"  # File does not resolve . and ..
    monkeypatch.chdir(segment.parent.parent)
    assert _absolute("t-0//x.index") == f"{segment.parent}/x.index"
    rc, lines, err = dump("t-0//" + segment.name)
    assert lines[0] == f"Dumping t-0/{segment.name}"


def test_legacy_message_sets(tmp_path):
    # printBatchLevel, magic < 2: print("offset: " + batch.lastOffset), then the same " position: ..." tail;
    # record lines of legacy batches: " isValid: " + record.isValid() + " crc: " + record.checksum() (Kafka 4.x;
    # Kafka 3.x's Scala printed a stray "}" after the checksum, 4.x's Java does not)
    import zlib

    from kafka.record.legacy_records import LegacyRecordBatchBuilder

    folder = tmp_path / "t-0"
    folder.mkdir()
    data = b""
    for magic in (0, 1):
        builder = LegacyRecordBatchBuilder(magic=magic, compression_type=0, batch_size=1 << 16)
        # offsets 0 and 1 (two entries at offset 0 are damage, R23-3: dump exits 1)
        builder.append(magic, timestamp=1_700_000_000_000 if magic else None, key=b"k", value=b"v")
        data += bytes(builder.build())
    path = folder / "00000000000000000000.log"
    path.write_bytes(data)
    crcs, pos = [], 0
    while pos < len(data):
        (size,) = struct.unpack_from(">i", data, pos + 8)
        crc = struct.unpack_from(">I", data, pos + 12)[0]
        assert crc == zlib.crc32(data[pos + 16 : pos + 12 + size])
        crcs.append((pos, size + 12, crc))
        pos += 12 + size
    rc, lines, _err = dump(path, deep_iteration=True)
    assert rc == 0
    (p0, s0, c0), (p1, s1, c1) = crcs
    assert lines[2:] == [
        f"offset: 0 position: {p0} NoTimestampType: -1 size: {s0} magic: 0 compresscodec: none crc: {c0} isvalid: true",
        f"| offset: 0 NoTimestampType: -1 keySize: 1 valueSize: 1 isValid: true crc: {c0}",
        f"offset: 1 position: {p1} CreateTime: 1700000000000 size: {s1} magic: 1 compresscodec: none crc: {c1} isvalid: true",
        f"| offset: 1 CreateTime: 1700000000000 keySize: 1 valueSize: 1 isValid: true crc: {c1}",
    ]


def test_legacy_records_say_whether_their_crc_holds(tmp_path):
    # LegacyRecord.isValid(): the message's stored CRC equals the CRC-32 of magic..end; for a compressed
    # wrapper, each inner message's own (the wrapper's line says the wrapper's)
    import gzip
    import zlib

    from kafka.record.legacy_records import LegacyRecordBatchBuilder

    def message(offset: int, value: bytes, break_crc: bool = False) -> bytes:
        builder = LegacyRecordBatchBuilder(magic=1, compression_type=0, batch_size=1 << 16)
        builder.append(0, timestamp=1_700_000_000_000, key=b"k", value=value)
        raw = bytearray(builder.build())
        struct.pack_into(">q", raw, 0, offset)
        if break_crc:
            raw[-1] ^= 1  # the value's last byte: the stored CRC no longer holds
        return bytes(raw)

    folder = tmp_path / "t-0"
    folder.mkdir()
    plain = message(0, b"v0", break_crc=True)
    inner = message(0, b"v1") + message(1, b"v2", break_crc=True)  # relative inner offsets (magic 1)
    body = struct.pack(">bbq", 1, 1, 1_700_000_000_000) + struct.pack(">i", -1)
    packed = gzip.compress(inner, mtime=0)
    body += struct.pack(">i", len(packed)) + packed
    wrapper = struct.pack(">qiI", 2, 4 + len(body), zlib.crc32(body)) + body
    path = folder / "00000000000000000000.log"
    path.write_bytes(plain + wrapper)
    crc_of = [struct.unpack_from(">I", m, 12)[0] for m in (plain, inner[: len(inner) // 2], inner[len(inner) // 2 :])]
    rc, lines, _err = dump(path, deep_iteration=True)
    records = [line for line in lines if line.startswith("| ")]
    assert records == [
        f"| offset: 0 CreateTime: 1700000000000 keySize: 1 valueSize: 2 isValid: false crc: {crc_of[0]}",
        f"| offset: 1 CreateTime: 1700000000000 keySize: 1 valueSize: 2 isValid: true crc: {crc_of[1]}",
        f"| offset: 2 CreateTime: 1700000000000 keySize: 1 valueSize: 2 isValid: false crc: {crc_of[2]}",
    ]
    assert "isvalid: false" in lines[2] and "isvalid: true" in lines[4]


def test_sequences_wrap_as_javas_ints(tmp_path):
    # DefaultRecordBatch.incrementSequence in Java int arithmetic, as Kafka 4.4.0's kafka-dump-log prints
    # these very batches: a negative lastOffsetDelta wraps (1 + -3 -> 2147483646), 2**31 - 1 + 1 -> 0; a
    # base sequence below -1 is incremented on the batch line, and a record's sequence is -1 for it
    folder = tmp_path / "t-0"
    folder.mkdir()
    data = batch(0, [(b"k", b"v", ())], base_sequence=1, producer_id=5, producer_epoch=0, offset_deltas=[-3])
    data += batch(10, [(b"k", b"v", ()), (b"k", b"w", ())], base_sequence=-5, producer_id=5, producer_epoch=0)
    data += batch(20, [(b"k", b"v", ()), (b"k", b"w", ())], base_sequence=2**31 - 1, producer_id=5, producer_epoch=0)
    path = folder / "00000000000000000000.log"
    path.write_bytes(data)
    _rc, lines, _err = dump(path, deep_iteration=True)
    sequences = [
        (line.split(" baseSequence: ")[1].split(" producerId")[0] if line.startswith("baseOffset") else line.split(" sequence: ")[1])
        for line in lines[2:]
    ]
    assert sequences == [
        "1 lastSequence: 2147483646", "2147483646 headerKeys: []",
        "-5 lastSequence: -4", "-1 headerKeys: []", "-1 headerKeys: []",
        "2147483647 lastSequence: 0", "2147483647 headerKeys: []", "0 headerKeys: []",
    ]


def test_hostile_headers_kafka_prints_and_walks_past(tmp_path):
    # FileLogInputStream.nextBatch checks only size >= 14 and the end; a magic past 1 is a
    # DefaultRecordBatch (header read as 61 bytes from the batch's position). So Kafka 4.4.0's
    # kafka-dump-log (run on such files) prints a negative base offset, a magic-3 batch (as v2, its CRC
    # holds) and a v2 batch whose length is below its header (isvalid: false, the walk goes on from the
    # length it gives), and a batch of count 0 has no records to read (bytes after them unchecked).
    # kafkafs prints the same lines and exits 1 (damage found), but for the magic-3 batch: a v2 batch to
    # Kafka and to every kafkafs reader, no damage (exit 0; it exited 1 before, fix18).
    folder = tmp_path / "t-0"
    folder.mkdir()
    path = folder / "00000000000000000000.log"
    three = [batch(o, [(b"k", b"v%d" % o, ())]) for o in (0, 1, 2)]

    def lines_of(data: bytes, **options) -> tuple[int, list[str], list[str]]:
        path.write_bytes(data)
        return dump(path, **options)

    negative = bytearray(b"".join(three))
    struct.pack_into(">q", negative, len(three[0]), -7)  # baseOffset is outside the CRC
    rc, lines, err = lines_of(bytes(negative), deep_iteration=True)
    p1 = len(three[0])
    assert rc == 1 and err[-3:] == ["Non-consecutive offsets in " + str(path), "  -7 is followed by 2", "  0 is followed by -7"]
    assert lines[4] == kafka_batch_line(p1, batch_fields(bytes(negative), p1))
    assert lines[4].startswith("baseOffset: -7 lastOffset: -7 ")
    assert lines[5].startswith("| offset: -7 CreateTime: ") and len(lines) == 8

    magic3 = bytearray(b"".join(three))
    magic3[p1 + 16] = 3  # the magic is outside the CRC too
    rc, lines, err = lines_of(bytes(magic3), deep_iteration=True)
    assert rc == 0 and err == []
    assert lines[4] == kafka_batch_line(p1, batch_fields(bytes(magic3), p1)).replace(" magic: 2 ", " magic: 3 ")
    assert lines[5].startswith("| offset: 1 CreateTime: ") and len(lines) == 8

    short = bytearray(b"".join(three))
    struct.pack_into(">i", short, p1 + 8, 48)  # 12 + 48 = 60 bytes, one short of the v2 header
    rc, lines, err = lines_of(bytes(short))
    line = kafka_batch_line(p1, batch_fields(bytes(short), p1))
    assert rc == 1 and lines[3] == line.replace(" isvalid: true", " isvalid: false")
    assert lines[4:] == [f"Found {len(short) - p1 - 60} invalid bytes at the end of {path.name}"]

    empty = bytearray(batch(0, [(b"k", b"v", ())]))
    struct.pack_into(">i", empty, 57, 0)  # recordCount 0, the record's bytes still there
    from kafkafs.format.crc import crc32c

    struct.pack_into(">I", empty, 17, crc32c(bytes(empty[21:])))
    rc, lines, err = lines_of(bytes(empty), print_data_log=True)
    assert (rc, err) == (0, []) and lines[2:] == [kafka_batch_line(0, batch_fields(bytes(empty), 0))]


def test_a_size_below_kafkas_minimum_is_said_in_kafkas_words(tmp_path):
    # zeros after the last batch (a preallocated log): Kafka 4.4.0's tool stops with
    # 'CorruptRecordException: Found record size 0 smaller than minimum record overhead (14) in file F.';
    # kafkafs says that on one line and counts the rest as invalid bytes (README), exit 1
    folder = tmp_path / "t-0"
    folder.mkdir()
    path = folder / "00000000000000000000.log"
    path.write_bytes(batch(0, [(b"k", b"v", ())]) + bytes(100))
    rc, lines, err = dump(f"{folder}//{path.name}")
    assert rc == 1 and lines[-1] == f"Found 100 invalid bytes at the end of {path.name}"
    assert err == [f"kafkafs: Found record size 0 smaller than minimum record overhead (14) in file {path}."]


def test_json_output_follows_kafkas_lines(fixtures_dir, segment):
    # kafkafs's own option (Kafka's PR #18910 asked for one): the same lines, each as a JSON object
    import json

    log = fixtures_dir / OFFSETS_12 / "00000000000000000000.log"
    rc, lines, _ = dump(log, json=True)
    objects = [json.loads(line) for line in lines]
    assert rc == 0 and objects[0] == {"dumping": str(log)} and objects[1] == {"logStartingOffset": 0}
    for obj, (pos, f) in zip(objects[2:], walk_batches(log.read_bytes()), strict=True):
        b = obj["batch"]
        assert (b["baseOffset"], b["position"], b["crc"], b["size"], b["count"]) == (
            f["baseOffset"], pos, f["crc"], f["batchLength"] + 12, f["recordCount"])
        assert b["deleteHorizonMs"] is None and b["isvalid"] is True
    _rc, text, _ = dump(segment, print_data_log=True)
    _rc, lines, _ = dump(segment, print_data_log=True, json=True)
    assert len(lines) == len(text)
    records = [json.loads(line)["record"] for line in lines if line.startswith('{"record"')]
    assert records[0] == {"offset": 0, "CreateTime": 1_700_000_000_000, "keySize": 1, "valueSize": 2, "sequence": 5,
                          "headerKeys": ["trace", "h2"], "key": "k", "payload": "hi"}
    assert records[3]["endTxnMarker"] == "COMMIT" and records[3]["coordinatorEpoch"] == 4
    assert json.loads(lines[9])["batch"]["deleteHorizonMs"] == 1_700_000_000_007


def test_a_path_dump_does_not_take_alone_is_a_usage_error_a_file_of_no_kind_is_ignored(tmp_path, fixtures_dir, segment):
    # SPEC §4: a path that is not what the command takes exits 2, in one line
    meta = fixtures_dir / "kafka-logs-a/meta.properties"
    badly_named = tmp_path / "abc.log"
    badly_named.write_bytes(segment.read_bytes())
    stranger = tmp_path / "notes.txt"
    stranger.write_text("hello\n")
    proc = cli(str(badly_named))  # a segment name without its base offset: Kafka stops with a stack trace
    assert proc.returncode == 2 and proc.stdout == b"", proc.stderr
    lines = [line for line in proc.stderr.decode().splitlines() if "record kernel" not in line]
    assert len(lines) == 1 and lines[0].startswith(f"kafkafs: error: {badly_named}: not a "), lines
    # a file of no kind dump knows, alone too: Kafka's two lines, exit 0 (review6 F7; the real tool's
    # lines in tests/broker/test_dump_vs_kafka.py)
    proc = cli(str(stranger))
    assert (proc.returncode, proc.stdout.decode()) == (0, f"Dumping {stranger}\n"), proc.stderr
    assert f"Ignoring unknown file {stranger}" in proc.stderr.decode()
    # in a mix, Kafka's "Ignoring unknown file" and the others dumped, as kafka-dump-log does
    proc = cli(str(meta), str(segment))
    assert proc.returncode == 0, proc.stderr
    assert f"Ignoring unknown file {meta}" in proc.stderr.decode()
    assert f"Dumping {segment}" in proc.stdout.decode()


# what JDK 17's new String(bytes, UTF_8) makes of malformed UTF-8 (each case run through java), which is
# what kafka-dump-log prints for such a key or payload; Python's errors="replace" differs on some
JAVA_UTF8 = {
    "edae55": "\ufffdU", "eda080": "\ufffd", "e08080": "\ufffd" * 3, "e0a0": "\ufffd", "f0808080": "\ufffd" * 4,
    "f4908080": "\ufffd" * 4, "f5808080": "\ufffd" * 4, "c080": "\ufffd" * 2, "c2": "\ufffd", "f09f98": "\ufffd",
    "f09f9841": "\ufffdA", "80ff": "\ufffd" * 2, "e18041": "\ufffdA", "f09f": "\ufffd",
}


def test_bytes_that_are_not_utf8_print_as_java_decodes_them():
    from kafkafs.format.javatext import java_utf8

    assert {h: java_utf8(bytes.fromhex(h)) for h in JAVA_UTF8} == JAVA_UTF8
    assert java_utf8("é ✓ 😀".encode()) == "é ✓ 😀"


def test_dump_reads_the_log_and_never_maps_it(tmp_path, monkeypatch):
    """fix17's leftover of review11 R11-4: dump read a .log through once, then mapped it and walked the
    map; a page that read fine once, was evicted and then failed killed the process with SIGBUS. Now it
    walks windows of pread (a failing page is an EIO it says); the same lines with windows smaller than a
    batch as with the default ones."""
    folder = tmp_path / "t-0"
    folder.mkdir()
    path = folder / "00000000000000000000.log"
    path.write_bytes(b"".join(batch(o, [(b"k%d" % o, b"v" * (o * 7), ())]) for o in range(40)) + b"\0" * 30)
    whole = dump(path, deep_iteration=True, print_data_log=True)

    def no_map(*args, **kwargs):
        raise AssertionError("dump mapped the file")

    monkeypatch.setattr(mmap, "mmap", no_map)
    import kafkafs.dump.log as dump_log_module

    for window in (1 << 20, 97, 1):
        monkeypatch.setattr(dump_log_module, "_READ_BYTES", window)
        assert dump(path, deep_iteration=True, print_data_log=True) == whole, window
    assert whole[0] == 1 and len(whole[1]) == 2 + 40 * 2 + 1 and whole[1][-1].startswith("Found 30 invalid bytes")


def test_an_active_segments_preallocated_index_is_no_damage(segment):
    """review17 R17-2: a killed (or running) broker's active segment keeps its .index and .timeindex
    preallocated, zero-filled; Kafka's tool reads slot 0 as an entry at the base offset, prints the
    mismatch, exits 0 (as it does on any mismatch). The lines are Kafka's; the exit code is 0 here too,
    as verify calls the files no damage. The same zeros in a sealed segment's (trimmed) index are damage."""
    index, timeindex = segment.with_suffix(".index"), segment.with_suffix(".timeindex")
    index.write_bytes(bytes(8 * 512))
    timeindex.write_bytes(bytes(12 * 512))
    rc, lines, err = dump(index, timeindex)
    assert lines == [f"Dumping {index}", "offset: 0 position: 0", f"Dumping {timeindex}", "timestamp: 0 offset: 0"]
    assert err == [f"Mismatches in :{index}", "  Index offset: 0, log offset: 1",
                   f"The following indexed offsets are not found in :{timeindex}", "Indexed offset: 0, found log offset: 1"]
    assert rc == 0
    assert cli(str(index), str(timeindex)).returncode == 0
    shutil.copy(segment, segment.with_name("00000000000000000008.log"))  # now sealed: a later segment
    assert dump(index, timeindex)[0] == 1
    assert dump(index)[0] == 1 and dump(timeindex)[0] == 1


def test_offsets_out_of_order_between_batches_are_damage(tmp_path):
    """review23 R23-3: a batch whose base offset goes back below the end of the batch before it ("128 is
    followed by 3") was printed as Kafka prints it and dump exited 0, where verify and consume call the same
    bytes damage (exit 1). The lines stay Kafka's; one line on stderr says it, exit 1, with or without
    --deep-iteration. A forward gap (compaction) is no damage, nor a legacy wrapper whose inner offsets
    overlap the entry before it (printed as Kafka prints it, README)."""
    from tests.format.test_legacy import overlapping_wrapper_segment

    folder = tmp_path / "t-0"
    folder.mkdir()
    path = folder / "00000000000000000000.log"

    def run(*bases: int, deltas: int = 2, **options) -> tuple[int, list[str], list[str]]:
        path.write_bytes(b"".join(batch(b, [(None, b"v", ())] * (deltas + 1)) for b in bases))
        return dump(path, **options)

    positions = [0]
    for b in (0, 10):
        positions.append(positions[-1] + len(batch(b, [(None, b"v", ())] * 3)))
    assert run(0, 10, 20)[0] == 0  # gaps forward: compaction
    assert run(0, 10, 20, deep_iteration=True)[0] == 0
    backwards = run(0, 10, 3)  # 12 is followed by 3
    deep = run(0, 10, 3, deep_iteration=True)
    assert [ln for ln in deep[1] if not ln.startswith("|")] == backwards[1] and len(backwards[1]) == 5
    said = (f"kafkafs: {path}: position {positions[2]}: offsets go backwards (3 after 12); the batch before it "
            f"is at position {positions[1]}, both are damaged")
    assert backwards[0] == 1 and backwards[2] == [said]
    assert deep[0] == 1 and deep[2] == [said, f"Non-consecutive offsets in {path}", "  2 is followed by 10",
                                        "  12 is followed by 3"]
    overlap = run(0, 2, 5)  # 0..2, then 2..4: the second begins inside the first
    assert overlap[0] == 1 and overlap[2] == [f"kafkafs: {path}: position {positions[1]}: offsets go backwards "
                                              "(2 after 2); the batch before it is at position 0, both are damaged"]
    assert run(0, 3, 6)[0] == 0  # exactly consecutive
    below = folder / "00000000000000000005.log"
    below.write_bytes(batch(6, [(None, b"v", ())]) + batch(5, [(None, b"v", ())]))
    rc, _lines, err = dump(below)
    assert rc == 1 and err == [f"kafkafs: {below}: position {len(batch(6, [(None, b'v', ())]))}: offsets go backwards "
                               f"(5 after 6); the batch before it is at position 0, both are damaged"]
    below.write_bytes(batch(4, [(None, b"v", ())]))  # below the segment's base offset, as verify says
    assert dump(below)[0] == 1 and dump(below)[2] == [f"kafkafs: {below}: position 0: offset 4 is below the "
                                                      "segment's base 5"]
    path.write_bytes(overlapping_wrapper_segment(0))  # the legacy wrapper's inner overlap: Kafka's lines, exit 0
    rc, _lines, err = dump(path, deep_iteration=True)
    assert rc == 0 and err == [f"Non-consecutive offsets in {path}", "  4 is followed by 4"]


def test_a_log_that_shrinks_while_it_is_read_is_one_line(tmp_path, monkeypatch):
    """review23 R23-4: dump took a .log's size once and trusted every read to reach it; a file truncated
    while it was read (a broker or recover cutting the active segment) or a file system whose reads end
    before its stat size ended in a traceback (struct.error). Now the batches before are printed, one line
    says where the file ended, exit 1."""
    import kafkafs.dump.log as dump_log_module

    folder = tmp_path / "t-0"
    folder.mkdir()
    path = folder / "00000000000000000000.log"
    batches = [batch(o, [(b"k", b"v" * 50, ())]) for o in range(6)]
    path.write_bytes(b"".join(batches))
    size = path.stat().st_size
    whole = dump(path, deep_iteration=True)
    assert whole[0] == 0 and len(whole[1]) == 2 + 6 * 2
    monkeypatch.setattr(dump_log_module, "_READ_BYTES", len(batches[0]))  # one window a batch
    real_pread = dump_log_module._File._pread
    for cut in (2 * len(batches[0]), 2 * len(batches[0]) + 5, 2 * len(batches[0]) + 30):  # at, in the third batch
        path.write_bytes(b"".join(batches))
        calls = []

        def truncating_pread(self, position, n, need, cut=cut, calls=calls):
            calls.append(position)
            if len(calls) == 2:  # a writer cuts the file after the first batch was read
                os.truncate(path, cut)
            return real_pread(self, position, n, need)

        monkeypatch.setattr(dump_log_module._File, "_pread", truncating_pread)
        rc, lines, err = dump(path, deep_iteration=True)  # struct.error at a batch's end (the review's)
        assert rc == 1 and lines == whole[1][: 2 + 2 * 2], lines
        assert err == [f"kafkafs: error: {path} ended at position {cut} while it was read (the batch at position "
                       f"{2 * len(batches[0])}; it was {size} bytes when the dump began: it shrank)"]
    # a file system whose reads end before the size its stat gives (FUSE without direct_io)
    monkeypatch.setattr(dump_log_module._File, "_pread", real_pread)
    real_fstat = os.fstat

    def bigger(fd):
        st = real_fstat(fd)
        return os.stat_result((*st[:6], st.st_size + 1000, *st[7:]))

    monkeypatch.setattr(os, "fstat", bigger)
    rc, lines, err = dump(path)
    assert rc == 1 and len(lines) == 2 + 2  # the two whole batches, then the end said
    assert err == [f"kafkafs: error: {path} ended at position {cut} while it was read (the batch at position "
                   f"{2 * len(batches[0])}; it was {cut + 1000} bytes when the dump began: it shrank)"]
