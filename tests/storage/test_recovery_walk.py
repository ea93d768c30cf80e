"""The recovery walk cuts where Kafka's ``LogSegment.recover`` cuts (review11 R11-9, SPEC §9): sizes and
CRCs, offsets that do not fit the segment; offsets that go backwards or jump are kept (and said) unless
an index entry Kafka rebuilds would not be past the last one (Kafka then gives the segment up; the walk
says so, and a ``strict`` walk cuts from the first batch whose offsets do not follow)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kafkafs.storage.recovery_walk import KafkaDiscardsSegment, RecoveryWalk
from tests.storage.helpers import batch, headers_of, open_log, write_segment


def _walk(tmp_path: Path, batches: list[bytes], *, base: int = 0, interval: int = 4096,
          strict: bool = False) -> tuple[RecoveryWalk, list, list[tuple[int, int, int, int, int]]]:
    """Walk a segment of ``batches`` (base offset ``base``): (the walk, its steps, the batches' headers)."""
    directory = tmp_path / "t-0"
    directory.mkdir(parents=True, exist_ok=True)
    write_segment(directory, base, batches)
    log = open_log(directory, writable=False)
    try:
        segment = log.segments.last()
        assert segment is not None
        walk = RecoveryWalk(base, None, interval, strict=strict)
        steps = list(walk.steps(segment.batches(0)))
        walk.finish()
        return walk, steps, headers_of(b"".join(batches))
    finally:
        log.close()


def _batches(bases: list[int], ts: list[int] | None = None) -> list[bytes]:
    return [batch(1, base_offset=b, ts=(ts[i] if ts else 1000 + i)) for i, b in enumerate(bases)]


def test_offsets_that_go_backwards_or_jump_are_kept_and_said(tmp_path):
    data = _batches([0, 1, 2, 3, 1, 5, 6, 12, 8, 9])  # 4th batch back to 1, 8th up to 12
    walk, steps, headers = _walk(tmp_path, data)
    assert walk.cut is None and walk.valid == sum(len(d) for d in data)
    kept = {h[1]: s.kept for s, h in zip(steps, headers, strict=True) if s.kept}
    assert kept == {3: "offsets run past the next batch's base (3, then 1)", 1: "offsets go backwards (1 after 3)",
                    12: "offsets run past the next batch's base (12, then 8)", 8: "offsets go backwards (8 after 12)"}
    assert walk.next_offset == 10  # the last batch's, as Kafka's readNextOffset


def test_an_index_entry_not_past_the_last_one_is_where_kafka_gives_the_segment_up(tmp_path):
    size = len(batch(1))
    # an index entry every 2 batches (at batches 2, 4, 6, ...): batch 4 goes back to 1, below entry 2's offset
    data = _batches([0, 1, 2, 3, 1, 5, 6, 7])
    with pytest.raises(KafkaDiscardsSegment, match=r"its index entry \(offset 1\) is not past the last one \(2\)"):
        _walk(tmp_path / "a", data, interval=size + 1)
    walk, steps, headers = _walk(tmp_path / "b", data, interval=size + 1, strict=True)
    assert walk.cut == f"position {headers[4][0]}: offsets go backwards (1 after 3)" and walk.rejected == walk.cut
    assert walk.valid == headers[4][0] and len(steps) == 4 and walk.next_offset == 4


def test_a_time_index_entry_before_the_last_one_gives_the_segment_up(tmp_path):
    size = len(batch(1))
    # batch 3 goes back to 0 with the largest timestamp: the segment's final time index entry (offset 0)
    # would be before the entry written at batch 2 (offset 2)
    data = _batches([0, 1, 2, 0], ts=[1000, 1001, 1002, 2000])
    with pytest.raises(KafkaDiscardsSegment, match=r"segment's end: its time index entry \(offset 0\) is before"):
        _walk(tmp_path, data, interval=size + 1)


def test_sizes_crcs_and_offsets_that_do_not_fit_the_segment_are_cut(tmp_path):
    data = _batches([0, 1, 2, 3])
    broken = bytearray(data[2])
    broken[-1] ^= 0xFF  # the CRC no longer holds
    walk, steps, headers = _walk(tmp_path / "crc", [data[0], data[1], bytes(broken), data[3]])
    assert walk.cut is not None and "CRC mismatch" in walk.cut and walk.valid == headers[2][0] and len(steps) == 2
    # a base offset below the segment's base: Kafka's ensureOffsetInRange, it cannot load the segment
    walk, steps, headers = _walk(tmp_path / "below", _batches([100, 101, 90, 103]), base=100)
    assert walk.cut == f"position {headers[2][0]}: offset 90 is below the segment's base 100"
    assert walk.valid == headers[2][0]
    # a torn tail: the end of the data (the caller cuts what is past ``valid``), no batch rejected
    walk, _steps, headers = _walk(tmp_path / "torn", [data[0], data[1][:30]])
    assert walk.valid == headers[0][3] and walk.rejected is None
