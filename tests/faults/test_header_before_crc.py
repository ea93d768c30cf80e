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
