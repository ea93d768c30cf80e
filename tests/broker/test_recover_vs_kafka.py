"""``kafkafs recover`` keeps what Kafka's recovery keeps (SPEC §2, §9; issue 20, reviewa2's finding;
review11 R11-9).

Kafka's ``LogSegment.recover`` checks a batch's size, its CRC (``ensureValid``) and that its last offset
fits the segment; it does not decode the records, nor compare a batch's offsets with its neighbours'. A
batch whose CRC holds but whose records do not decode (a record count of 0 with records after it, a
varint of six bytes, an unknown codec id) is kept by a broker, with every batch after it; so is a batch
whose base offset (outside the CRC) moved backwards or forwards, as long as the index entries Kafka
rebuilds stay increasing. ``kafkafs recover`` cut them and everything after them; now both leave the
same bytes, and a broker on kafkafs's result serves what a broker serves after its own recovery.
Where an index entry would not be past the last one, Kafka empties the whole segment (and deletes every
later one); kafkafs cuts from the first batch whose offsets do not follow instead (README).
"""

from __future__ import annotations

import re
import shutil
import struct

from kafkafs.format.crc import crc32c

from .harness import kafkafs

#: ``moved``: batches of one record each, an index entry every few batches
MOVED_BATCHES, MOVED_INTERVAL = 40, 400


def _positions(data: bytes) -> list[int]:
    out, pos = [], 0
    while pos + 12 <= len(data):
        out.append(pos)
        pos += 12 + struct.unpack_from(">i", data, pos + 8)[0]
    return out


def _reseal(data: bytearray, pos: int) -> None:
    length = struct.unpack_from(">i", data, pos + 8)[0]
    struct.pack_into(">I", data, pos + 17, crc32c(bytes(data[pos + 21 : pos + 12 + length])))


def _count_zero(data: bytearray, pos: int) -> None:
    struct.pack_into(">i", data, pos + 57, 0)


def _varint_long(data: bytearray, pos: int) -> None:
    data[pos + 61 : pos + 66] = b"\xff\xff\xff\xff\xff"


def _codec_7(data: bytearray, pos: int) -> None:
    attrs = struct.unpack_from(">h", data, pos + 21)[0]
    struct.pack_into(">h", data, pos + 21, (attrs & ~7) | 7)


def _index_batches(positions: list[int], interval: int) -> list[int]:
    """The batches (their numbers) Kafka's recovery writes an index entry for: each one that starts more
    than ``interval`` bytes after the last entry's batch (``LogSegment.recover``)."""
    out, last = [], 0
    for i, pos in enumerate(positions):
        if pos - last > interval:
            out.append(i)
            last = pos
    return out


def _move_bases(broker) -> dict[str, tuple[bytes, str, int]]:
    """Move one batch's base offset in each ``moved`` partition (outside the CRC): moved-0 down by 3 and
    moved-1 up by 5, at batches Kafka writes no index entry for (its recovery keeps them); moved-2 down
    by 3 at one it does, below the entry before (its recovery gives the segment up). ``{partition: (its
    .log now, what recover says of it, the moved batch's number)}``."""
    out = {}
    for p, by, indexed in ((0, -3, False), (1, 5, False), (2, -3, True)):
        seg = broker.partition_dir(f"moved-{p}") / "00000000000000000000.log"
        data = bytearray(seg.read_bytes())
        positions = _positions(data)
        assert len(positions) == MOVED_BATCHES
        entries = _index_batches(positions, MOVED_INTERVAL)
        assert len(entries) > 5, entries
        if indexed:
            at = next(i for i in entries if i >= MOVED_BATCHES // 2 and max(e for e in entries if e < i) >= i + by)
        else:  # neither it nor the next batch (whose offsets go backwards from a raised one) gets an entry
            at = next(i for i in range(MOVED_BATCHES // 2, MOVED_BATCHES - 2) if i not in entries and i + 1 not in entries)
        struct.pack_into(">q", data, positions[at], at + by)
        seg.write_bytes(bytes(data))
        if indexed:
            said = "truncated"
        elif by < 0:
            said = f"position {positions[at]}: offsets go backwards ({at + by} after {at - 1})"
        else:
            said = f"position {positions[at + 1]}: offsets go backwards ({at + 1} after {at + by})"
        out[f"moved-{p}"] = (bytes(data), said, at)
    return out


def _served(broker, partition: int) -> list[tuple[int, bytes]]:
    return [(r.offset, r.value) for r in broker.consume_all("moved", partition)]


def test_recover_and_the_brokers_recovery_keep_the_same_bytes(make_broker, tmp_path):
    broker = make_broker({"log.cleaner.enable": "false"})
    broker.create_topic("kept", partitions=1)
    broker.create_topic("moved", partitions=3, configs={"index.interval.bytes": MOVED_INTERVAL})
    producer = broker.producer(linger_ms=0, acks="all")
    for i in range(12):  # one batch each
        producer.send("kept", value=b"value %d" % i, key=b"k%d" % i, partition=0).get(timeout=30)
    for p in range(3):
        for i in range(MOVED_BATCHES):  # one batch each, timestamps increasing
            producer.send("moved", value=b"moved %d %s" % (i, b"x" * 100), partition=p,
                          timestamp_ms=1_763_700_000_000 + i).get(timeout=30)
    broker.stop()
    seg = broker.partition_dir("kept-0") / "00000000000000000000.log"
    data = bytearray(seg.read_bytes())
    positions = _positions(data)
    assert len(positions) == 12
    damaged = {positions[3]: _count_zero, positions[6]: _varint_long, positions[9]: _codec_7}
    for pos, damage in damaged.items():
        damage(data, pos)
        _reseal(data, pos)  # the CRC holds: a buggy writer, not a torn disk
    seg.write_bytes(bytes(data))
    moved = _move_bases(broker)

    ours = tmp_path / "ours"
    shutil.copytree(broker.log_dir, ours)
    done = kafkafs("recover", ours)
    assert done.returncode == 1, done.stdout + done.stderr  # damage found (verify would say so), and said
    lines = {line.split(": ", 1)[0]: line for line in done.stdout.splitlines() if ": " in line}
    assert "kept 3 batch(es) whose records do not decode or whose offsets do not follow, as Kafka's recovery " \
        "keeps them" in lines["kept-0"] and "truncated" not in lines["kept-0"], done.stdout
    assert (ours / "kept-0" / seg.name).read_bytes() == bytes(data)
    # R11-9: moved base offsets are kept and said, as Kafka keeps them, but where Kafka gives the segment up
    for name, (_moved, said, _at) in moved.items():
        assert said in lines[name], (said, lines[name])
    for p in (0, 1):
        assert (ours / f"moved-{p}" / seg.name).read_bytes() == moved[f"moved-{p}"][0], p
    kept_in_2 = (ours / "moved-2" / seg.name).read_bytes()
    assert moved["moved-2"][0].startswith(kept_in_2)
    assert _positions(kept_in_2) == _positions(moved["moved-2"][0])[: moved["moved-2"][2]]
    damaged_copy = tmp_path / "damaged"
    shutil.copytree(broker.log_dir, damaged_copy)

    # a broker on kafkafs's result: it loads with no recovery and serves every batch
    shutil.rmtree(broker.log_dir)
    shutil.copytree(ours, broker.log_dir)
    broker.start()
    for p in range(3):
        broker.assert_no_recovery(f"moved-{p}")
    served_ours = {p: _served(broker, p) for p in range(3)}
    broker.stop()
    shutil.rmtree(broker.log_dir)
    shutil.copytree(damaged_copy, broker.log_dir)

    # the broker recovers the same damaged directory: an unclean start, from offset 0
    (broker.log_dir / ".kafka_cleanshutdown").unlink(missing_ok=True)
    checkpoint = broker.log_dir / "recovery-point-offset-checkpoint"
    checkpoint.write_text(re.sub(r"^(kept|moved) (\d) \d+$", r"\1 \2 0", checkpoint.read_text(), flags=re.M))
    broker.start()
    recovered = broker.recovery_lines("kept-0")
    print("\n".join(recovered))
    assert any("Recovering unflushed segment 0" in line for line in recovered), broker.log_report(
        broker.loader_lines("kept-0"), "no 'Recovering unflushed segment 0' for kept-0; the loader's")
    broker.wait_high_watermark("kept", 0, 12)
    served_kafka = {p: _served(broker, p) for p in range(3)}
    broker.stop()
    assert seg.read_bytes() == bytes(data) == (ours / "kept-0" / seg.name).read_bytes()
    for p in (0, 1):  # Kafka's recovery keeps every batch: the same bytes, the same indexes, the same records
        for suffix in (".log", ".index", ".timeindex"):
            name = seg.with_suffix(suffix).name
            assert (broker.partition_dir(f"moved-{p}") / name).read_bytes() == (
                ours / f"moved-{p}" / name).read_bytes(), (p, suffix)
        assert served_ours[p] == served_kafka[p] and len(served_kafka[p]) >= MOVED_BATCHES - 5, p
    # moved-2: Kafka's recovery emptied the segment (an index entry not past the last one); kafkafs's
    # deviation (README) keeps the batches before the one whose offsets went backwards
    assert (broker.partition_dir("moved-2") / seg.name).stat().st_size == 0
    assert served_kafka[2] == []
    assert served_ours[2] == [(i, b"moved %d %s" % (i, b"x" * 100)) for i in range(moved["moved-2"][2])]
