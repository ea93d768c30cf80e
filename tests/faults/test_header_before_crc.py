"""A lookup passes over a batch by header fields inside its CRC only once the CRC holds (review23
R23-12/R23-13).

lastOffsetDelta and maxTimestamp are inside a v2 batch's CRC. A lookup by offset (``consume -o N``,
``by-offset/N.json``, an offset range) passed over a batch whose damaged lastOffsetDelta said it ends
before N, and a lookup by time (``consume --from-time``, ``-o s@TS``, ``by-time/``) one whose damaged
maxTimestamp said it is older: both answered from the next batch, exit 0, nothing said, although the
batch that may hold the answer cannot be read (Kafka's consumer fails on such a batch: check.crcs). The
damaged batch is now said (exit 1, EIO) where the answer may lie in it; a lookup whose answer lies past
the next batch's base offset (outside the CRC) is answered as before.
"""

from __future__ import annotations

import errno
import json
import struct
from pathlib import Path

import pytest

from kafkafs.format.jsonview import ProducerRecord
from kafkafs.storage.config import Settings
from kafkafs.storage.logdir import LogDir

from .test_offset_order import BASE_TS, SEGMENT, _batch_positions, _build, _kafkafs, _offsets


def _damaged(tmp_path: Path, at: int, value: bytes) -> tuple[Path, int]:
    """Offsets 0..299 in batches of 10; batch 12 (120..129) with ``value`` written at ``at`` of its header
    (its CRC no longer holds). (logdir, the batch's position)."""
    logdir = _build(tmp_path / "logs")
    pos = _batch_positions(logdir / SEGMENT)[12][0]
    buf = bytearray((logdir / SEGMENT).read_bytes())
    buf[pos + at : pos + at + len(value)] = value
    (logdir / SEGMENT).write_bytes(bytes(buf))
    return logdir, pos


def test_consume_from_an_offset_says_a_batch_whose_last_offset_is_damaged(tmp_path):
    logdir, pos = _damaged(tmp_path, 23, struct.pack(">i", 0))  # it claims 120..120
    for args in (("-o", "125"), ("-o", "121", "-c", "1")):
        done = _kafkafs("consume", str(logdir), "t-0", *args)
        assert done.returncode == 1, (args, done.stdout[:200])
        assert f"position {pos}: CRC mismatch" in done.stderr.decode()
        assert _offsets(done.stdout) == []
    done = _kafkafs("consume", str(logdir), "t-0", "-o", "135", "-c", "2")  # past the next batch's base: no doubt
    assert done.returncode == 0 and _offsets(done.stdout) == [135, 136]


def test_consume_from_a_time_says_a_batch_whose_max_timestamp_is_damaged(tmp_path):
    logdir, pos = _damaged(tmp_path, 35, struct.pack(">q", BASE_TS))  # it claims to be older than 121
    for args in (("--from-time", str(BASE_TS + 121)), ("-o", f"s@{BASE_TS + 121}", "-c", "1")):
        done = _kafkafs("consume", str(logdir), "t-0", *args)
        assert done.returncode == 1, (args, done.stdout[:200])
        assert f"position {pos}: CRC mismatch" in done.stderr.decode()
        assert _offsets(done.stdout) == []


def test_the_mount_answers_eio_where_the_answer_may_lie_in_the_damaged_batch(tmp_path, mounted):
    logdir, _pos = _damaged(tmp_path / "a", 23, struct.pack(">i", 0))
    timed, _ = _damaged(tmp_path / "b", 35, struct.pack(">q", BASE_TS))
    m, t = mounted(logdir), mounted(timed)
    m.allow_errors = t.allow_errors = True
    for path in (m / "t-0" / "by-offset" / "125.json", m / "t-0" / "by-offset" / "125-135.jsonl",
                 t / "t-0" / "by-time" / f"{BASE_TS + 121}.json",
                 t / "t-0" / "by-time" / f"{BASE_TS + 121}..{BASE_TS + 140}.jsonl",
                 t / "t-0" / "by-time" / f"{BASE_TS + 50}..{BASE_TS + 200}.jsonl"):  # met inside the range
        with pytest.raises(OSError) as exc:
            path.read_bytes()
        assert exc.value.errno == errno.EIO, path
    assert json.loads((m / "t-0" / "by-offset" / "135.json").read_bytes())["offset"] == 135
    assert "CRC mismatch" in m.log() and "Traceback" not in m.log() + t.log()


def _damaged_segment_end(tmp_path: Path) -> tuple[Path, int, int]:
    """Segments of 40 offsets; the last batch of the first (30..39) with its maxTimestamp set below every
    record's (its CRC no longer holds), and no time index (a copy without it, or one a check distrusts:
    the segment's largest timestamp is then read from the batches' headers, as Kafka's
    ``loadLargestTimestamp`` does). (logdir, the batch's position, a timestamp of its records)."""
    logdir = _build(tmp_path / "logs", segment_bytes=1000)
    pos = _batch_positions(logdir / SEGMENT)[-1][0]
    buf = bytearray((logdir / SEGMENT).read_bytes())
    buf[pos + 35 : pos + 43] = struct.pack(">q", BASE_TS)
    (logdir / SEGMENT).write_bytes(bytes(buf))
    (logdir / SEGMENT).with_suffix(".timeindex").unlink()
    return logdir, pos, BASE_TS + 38


def test_a_lookup_by_time_never_passes_over_a_segment_by_a_damaged_largest_timestamp(tmp_path, mounted):
    """fix60's left-over: the segment's largest timestamp (the tail scan's batch headers) came from a damaged
    batch too; a lookup by time skipped the whole segment by it and answered from the next one (offset
    40, exit 0), although the answer lies in the damaged batch. Now it is said: exit 1, EIO (as for a
    damaged batch a lookup passes over inside a segment: any later answer may lie in it too)."""
    logdir, pos, ts = _damaged_segment_end(tmp_path)
    for args in (("--from-time", str(ts), "-c", "2"), ("-o", f"s@{ts}", "-c", "1")):
        done = _kafkafs("consume", str(logdir), "t-0", *args)
        assert done.returncode == 1, (args, done.stdout[:200])  # before: 0, offsets 40, 41
        assert f"position {pos}: CRC mismatch" in done.stderr.decode()
        assert _offsets(done.stdout) == []
    done = _kafkafs("consume", str(logdir), "t-0", "--from-time", str(BASE_TS + 15), "-c", "2")  # before it
    assert done.returncode == 0 and _offsets(done.stdout) == [15, 16]
    m = mounted(logdir)
    m.allow_errors = True
    for path in (m / "t-0" / "by-time" / f"{ts}.json", m / "t-0" / "by-time" / f"{ts}..{ts + 10}.jsonl"):
        with pytest.raises(OSError) as exc:
            path.read_bytes()
        assert exc.value.errno == errno.EIO, path
    assert json.loads((m / "t-0" / "by-time" / f"{BASE_TS + 15}.json").read_bytes())["offset"] == 15
    assert json.loads((m / "t-0" / "by-offset" / "45.json").read_bytes())["offset"] == 45
    assert "CRC mismatch" in m.log() and "Traceback" not in m.log()


def test_spark_prunes_no_segment_by_a_damaged_largest_timestamp(tmp_path):
    from kafkafs.spark.positions import sealed_max_timestamp
    from kafkafs.storage.logdir import LogDir

    logdir, _pos, _ts = _damaged_segment_end(tmp_path)
    with LogDir(logdir) as d:
        first, second = list(d.log("t-0").segments)[:2]
        assert sealed_max_timestamp(first) is None  # before: BASE_TS + 29: pruned for a time past it
        assert not first.max_timestamp_sure and second.max_timestamp_sure
        assert sealed_max_timestamp(second) == BASE_TS + 79


def test_consume_from_a_time_on_a_copy_without_index_files_says_the_damaged_batch(tmp_path, mounted):
    """review27 R27-5: a copy that did not keep its index files (README supports one) is looked up through
    an in-memory index whose skip by time is read from the batches' maxTimestamp; a batch whose damaged
    maxTimestamp says it is older was passed over: consume --from-time / -o s@TS and by-time/ answered
    from the next batch (offset 130), exit 0, nothing said. Now as with the index files: exit 1, EIO."""
    logdir = tmp_path / "logs"
    logdir.mkdir()
    with LogDir(logdir, Settings({}), writable=True) as d:
        log = d.create_partition("t", 0)
        for b in range(40):  # > 4 KB a batch: each is an entry of the in-memory index, read from its header
            log.append_records([ProducerRecord(BASE_TS + n, None, b'{"n":%d,"pad":"%s"}' % (n, b"x" * 420), ())
                                for n in range(b * 10, b * 10 + 10)])
    pos = next(p for p, base, _last in _batch_positions(logdir / SEGMENT) if base == 120)
    buf = bytearray((logdir / SEGMENT).read_bytes())
    buf[pos + 35 : pos + 43] = struct.pack(">q", BASE_TS)  # 120..129 claim to be older than 120's timestamp
    (logdir / SEGMENT).write_bytes(bytes(buf))
    for name in ("t-0/00000000000000000000.index", "t-0/00000000000000000000.timeindex"):
        (logdir / name).unlink()
    for args in (("--from-time", str(BASE_TS + 125), "-c", "2"), ("-o", f"s@{BASE_TS + 120}", "-c", "1")):
        done = _kafkafs("consume", str(logdir), "t-0", *args)
        assert done.returncode == 1, (args, done.stdout[:200])  # before: 0, offsets 130, 131
        assert f"position {pos}: CRC mismatch" in done.stderr.decode()
        assert _offsets(done.stdout) == []
    done = _kafkafs("consume", str(logdir), "t-0", "--from-time", str(BASE_TS + 115), "-c", "2")  # before it
    assert done.returncode == 0 and _offsets(done.stdout) == [115, 116]
    m = mounted(logdir)
    m.allow_errors = True
    for path in (m / "t-0" / "by-time" / f"{BASE_TS + 125}.json",
                 m / "t-0" / "by-time" / f"{BASE_TS + 125}..{BASE_TS + 140}.jsonl"):
        with pytest.raises(OSError) as exc:
            path.read_bytes()  # before: offset 130, and the range from 130
        assert exc.value.errno == errno.EIO, path
    assert json.loads((m / "t-0" / "by-time" / f"{BASE_TS + 115}.json").read_bytes())["offset"] == 115
    assert "CRC mismatch" in m.log() and "Traceback" not in m.log()
