"""LogSegments: lookups by base offset over the skip list return segments."""

from __future__ import annotations

from pathlib import Path

from kafkafs.storage.segment import LogSegment
from kafkafs.storage.segments import LogSegments, is_sealed

from .helpers import config


def _segments(tmp_path: Path, bases: list[int]) -> LogSegments:
    out = LogSegments()
    for base in bases:
        out.add(LogSegment(tmp_path, base, config(), size=0))
    return out


def test_lookups(tmp_path: Path) -> None:
    segs = _segments(tmp_path, [30, 0, 10, 20])
    assert len(segs) == 4 and 10 in segs and 11 not in segs
    assert segs.bases() == [0, 10, 20, 30]
    assert [s.base_offset for s in segs] == [0, 10, 20, 30]
    assert segs.first().base_offset == 0 and segs.last() is segs.active and segs.active.base_offset == 30  # type: ignore[union-attr]
    assert segs.floor(15).base_offset == 10 and segs.floor(10).base_offset == 10  # type: ignore[union-attr]
    assert segs.floor(-1) is None
    assert segs.higher(10).base_offset == 20 and segs.higher(30) is None  # type: ignore[union-attr]
    assert segs.lower(10).base_offset == 0 and segs.lower(0) is None  # type: ignore[union-attr]
    assert segs.get(20).base_offset == 20 and segs.get(21) is None  # type: ignore[union-attr]


def test_sealed_is_followed_by_a_later_segment(tmp_path: Path) -> None:
    segs = _segments(tmp_path, [0, 10, 20])
    assert [segs.is_sealed(b) for b in (0, 10, 20)] == [True, True, False]
    assert [is_sealed(segs.upper(b)) for b in (0, 10, 20)] == [True, True, False]
    segs.add(LogSegment(tmp_path, 30, config(), size=0))  # a roll: the one before is sealed from now on
    assert segs.is_sealed(20) and not segs.is_sealed(30)


def test_ranges(tmp_path: Path) -> None:
    segs = _segments(tmp_path, [0, 10, 20, 30])
    assert [s.base_offset for s in segs.from_offset(15)] == [10, 20, 30]
    assert [s.base_offset for s in segs.from_offset(-5)] == [0, 10, 20, 30]  # below the first: all
    assert [s.base_offset for s in segs.values(10, 30)] == [10, 20]
    assert [s.base_offset for s in segs.values(None, 20)] == [0, 10]
    assert [s.base_offset for s in segs.after(10)] == [20, 30]


def test_changes(tmp_path: Path) -> None:
    segs = _segments(tmp_path, [0, 10])
    replaced = LogSegment(tmp_path, 10, config(), size=0)
    old = segs.get(10)
    assert segs.add(replaced) is old and segs.get(10) is replaced
    assert segs.remove(0) is not None and segs.remove(0) is None
    assert segs.bases() == [10]
    segs.clear()
    assert not segs and segs.last() is None and list(segs.from_offset(0)) == []
