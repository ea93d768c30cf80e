"""``kafkafs recover`` keeps what Kafka's recovery keeps (SPEC §2, §9; issue 20, reviewa2's finding).

Kafka's ``LogSegment.recover`` checks a batch's size, its CRC (``ensureValid``) and its offset range;
it does not decode the records. A batch whose CRC holds but whose records do not decode (a record count
of 0 with records after it, a varint of six bytes, an unknown codec id) is kept by a broker, with every
batch after it. ``kafkafs recover`` cut it and everything after it; now both leave the same bytes.
"""

from __future__ import annotations

import re
import shutil
import struct

from kafkafs.format.crc import crc32c

from .harness import kafkafs


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


def test_recover_and_the_brokers_recovery_keep_the_same_bytes(make_broker, tmp_path):
    broker = make_broker({"log.cleaner.enable": "false"})
    broker.create_topic("kept", partitions=1)
    producer = broker.producer(linger_ms=0, acks="all")
    for i in range(12):  # one batch each
        producer.send("kept", value=b"value %d" % i, key=b"k%d" % i, partition=0).get(timeout=30)
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

    ours = tmp_path / "ours"
    shutil.copytree(broker.log_dir, ours)
    done = kafkafs("recover", ours)
    assert done.returncode == 1, done.stdout + done.stderr  # damage found (verify would say so), and said
    assert "kept 3 batch(es) whose records do not decode or overlap the entry before, as Kafka's recovery keeps them" in done.stdout, done.stdout
    assert "truncated" not in done.stdout
    assert (ours / "kept-0" / seg.name).read_bytes() == bytes(data)

    # the broker recovers the same damaged directory: an unclean start, from offset 0
    (broker.log_dir / ".kafka_cleanshutdown").unlink(missing_ok=True)
    checkpoint = broker.log_dir / "recovery-point-offset-checkpoint"
    checkpoint.write_text(re.sub(r"^kept 0 \d+$", "kept 0 0", checkpoint.read_text(), flags=re.M))
    broker.start()
    recovered = broker.recovery_lines("kept-0")
    print("\n".join(recovered))
    assert any("Recovering unflushed segment 0" in line for line in recovered), broker.log_report(
        broker.loader_lines("kept-0"), "no 'Recovering unflushed segment 0' for kept-0; the loader's")
    broker.wait_high_watermark("kept", 0, 12)
    broker.stop()
    assert seg.read_bytes() == bytes(data) == (ours / "kept-0" / seg.name).read_bytes()
