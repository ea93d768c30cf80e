"""Issue 9, finding 6: what ``verify`` rejects (one rule: storage/validation.py), ``recover`` cuts where
Kafka's ``LogSegment.recover`` cuts (storage/recovery_walk.py): it checks sizes, CRCs and that offsets
fit the segment, so a batch whose records do not decode, or whose offsets go backwards or jump (the
base offset is outside the CRC), is kept with every one after it, and ``recover`` exits 1 saying so,
as ``verify`` still reports it (issue 20, reviewa2's finding; review11 R11-9).

Damage that keeps the CRC valid: fields it covers changed and the CRC recomputed (a buggy writer), or
the base offset, which it does not cover."""

from __future__ import annotations

import struct
import subprocess
import sys
from pathlib import Path

import pytest

from kafkafs.format.batch import read_batch_header
from kafkafs.format.crc import crc32c
from kafkafs.format.jsonview import ProducerRecord
from kafkafs.storage.config import Settings
from kafkafs.storage.logdir import LogDir
from kafkafs.storage.validation import batch_problem


def _cli(*args: str) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, "-m", "kafkafs.cli", *args], capture_output=True, timeout=120)
    assert b"Traceback" not in proc.stderr, proc.stderr.decode()
    return proc


def _build(path: Path) -> Path:
    path.mkdir(parents=True)
    settings = Settings({"segment.bytes": 4096, "index.interval.bytes": 256})
    with LogDir(path, settings, writable=True) as logdir:
        log = logdir.create_partition("t", 0)
        for i in range(60):
            log.append_records([ProducerRecord(1000 + i, b"k%d" % i, b"value %d " % i * 4, ()) for _ in range(3)])
    return path


def _positions(seg: Path) -> list[int]:
    data = seg.read_bytes()
    out, pos = [], 0
    while pos < len(data):
        h = read_batch_header(data, pos)
        out.append(pos)
        pos = h.end
    return out


def _reseal(data: bytearray, pos: int) -> None:
    length = struct.unpack_from(">i", data, pos + 8)[0]
    struct.pack_into(">I", data, pos + 17, crc32c(bytes(data[pos + 21 : pos + 12 + length])))


def _record_count(data: bytearray, pos: int) -> None:
    struct.pack_into(">i", data, pos + 57, struct.unpack_from(">i", data, pos + 57)[0] + 1)
    _reseal(data, pos)


def _codec(bits: int):
    def damage(data: bytearray, pos: int) -> None:
        attrs = struct.unpack_from(">h", data, pos + 21)[0]
        struct.pack_into(">h", data, pos + 21, (attrs & ~7) | bits)
        _reseal(data, pos)

    return damage


def _last_offset_delta(data: bytearray, pos: int) -> None:
    struct.pack_into(">i", data, pos + 23, 7)
    _reseal(data, pos)


def _base_offset_up(data: bytearray, pos: int) -> None:
    struct.pack_into(">q", data, pos, struct.unpack_from(">q", data, pos)[0] + 10_000)


def _base_offset_down(data: bytearray, pos: int) -> None:
    struct.pack_into(">q", data, pos, 0)


DAMAGE = {
    "record-count": _record_count,
    "codec-5": _codec(5),
    "codec-7": _codec(7),
    "gzip-bits-on-plain-records": _codec(1),
    "last-offset-delta": _last_offset_delta,
    "base-offset-up": _base_offset_up,
    "base-offset-down": _base_offset_down,
}


#: damage inside the records (the header's count and codec bits lie): the batch decodes to nothing
RECORDS_DAMAGE = {"record-count", "codec-5", "codec-7", "gzip-bits-on-plain-records"}


#: offset damage Kafka's recovery cuts: a base offset below its segment's (``ensureOffsetInRange``; Kafka
#: cannot load the segment). The other offset damage here it keeps (no index entry goes wrong: ``recover``
#: rebuilds indexes every 4096 bytes, and these segments are smaller).
CUT = {("base-offset-down", "last-segment-middle")}


@pytest.mark.parametrize("kind", sorted(set(DAMAGE) - RECORDS_DAMAGE))
@pytest.mark.parametrize("which", ["first-segment-middle", "last-segment-middle"])
def test_finding6_recover_cuts_where_kafka_cuts_what_verify_rejects(tmp_path, kind, which):
    logdir = _build(tmp_path / "logs")
    segments = sorted((logdir / "t-0").glob("*.log"))
    assert len(segments) >= 3
    seg = segments[0] if which.startswith("first") else segments[-1]
    positions = _positions(seg)
    pos = positions[len(positions) // 2] if which == "first-segment-middle" or kind != "base-offset-down" else positions[2]
    data = bytearray(seg.read_bytes())
    DAMAGE[kind](data, pos)
    seg.write_bytes(bytes(data))
    before = _cli("verify", str(logdir))
    assert before.returncode == 1, before.stdout.decode()
    files = {p.name: p.read_bytes() for p in segments}
    rec = _cli("recover", str(logdir))
    assert rec.returncode == 1, rec.stdout.decode() + rec.stderr.decode()  # damage found (and cut or kept)
    after = _cli("verify", str(logdir))
    if (kind, which) not in CUT:  # kept, as Kafka keeps it, and said; still damage to verify
        out = rec.stdout.decode()
        assert "whose offsets do not follow, as Kafka's recovery keeps them" in out and "truncated" not in out, out
        assert {p.name: p.read_bytes() for p in sorted((logdir / "t-0").glob("*.log"))} == files
        assert after.returncode == 1 and "offsets go backwards" in after.stdout.decode(), after.stdout.decode()
        return
    assert after.returncode == 0, after.stdout.decode()
    # the cut is at the damaged batch, or at the next one when the damaged batch is whole in itself but
    # what follows no longer does (offsets that jumped forward): everything before it survives
    following = [p for p in positions if p > pos]
    assert seg.exists() and seg.stat().st_size in (pos, following[0] if following else pos)


@pytest.mark.parametrize("kind", sorted(RECORDS_DAMAGE))
@pytest.mark.parametrize("which", ["first-segment-middle", "last-segment-middle"])
def test_recover_keeps_a_batch_whose_records_do_not_decode_as_kafka_does(tmp_path, kind, which):
    """Seen failing before: recover cut the batch and every segment after it (the first segment's case
    lost two thirds of the log)."""
    logdir = _build(tmp_path / "logs")
    segments = sorted((logdir / "t-0").glob("*.log"))
    seg = segments[0] if which.startswith("first") else segments[-1]
    positions = _positions(seg)
    pos = positions[len(positions) // 2]
    data = bytearray(seg.read_bytes())
    DAMAGE[kind](data, pos)
    seg.write_bytes(bytes(data))
    files = {p.name: p.read_bytes() for p in segments}
    before = _cli("verify", str(logdir))
    assert before.returncode == 1, before.stdout.decode()
    rec = _cli("recover", str(logdir))
    out = rec.stdout.decode()
    assert rec.returncode == 1, out + rec.stderr.decode()  # the damage verify reports: found, and said
    assert "kept 1 batch(es) whose records do not decode or whose offsets do not follow, as Kafka's recovery keeps them" in out, out
    assert f"{seg.name} position {pos}" in out and "truncated" not in out and "deleted segment" not in out
    assert {p.name: p.read_bytes() for p in sorted((logdir / "t-0").glob("*.log"))} == files  # not a byte cut
    after = _cli("verify", str(logdir))
    assert after.returncode == 1 and f"{seg.name} position {pos}" in after.stdout.decode()  # still damage


def test_batch_problem_accepts_what_the_engine_writes(tmp_path):
    logdir = _build(tmp_path / "logs")
    for seg in sorted((logdir / "t-0").glob("*.log")):
        data = seg.read_bytes()
        base = int(seg.name[:20])
        nxt = base
        for pos in _positions(seg):
            h = read_batch_header(data, pos)
            assert batch_problem(data, h, next_offset=nxt, segment_base=base) is None
            nxt = h.next_offset
