"""SegmentFiles: a segment's files and their life (lazy opening, the handle budget, renames, deletion,
what a rebuild changed)."""

from __future__ import annotations

from pathlib import Path

from kafkafs.format.batch import encode_batch, read_batch_header
from kafkafs.storage.handles import HandleBudget
from kafkafs.storage.segment import LogSegment

from .helpers import config


def _segment(tmp_path: Path, n: int = 0, **kw) -> LogSegment:
    segment = LogSegment(tmp_path, 0, config(index_interval_bytes=1), writable=True, **kw)
    if n:
        data = b"".join(encode_batch([(1000 + i, None, b"v", ())], base_offset=i) for i in range(n))
        headers, pos = [], 0
        while pos < len(data):
            headers.append(read_batch_header(data, pos))
            pos = headers[-1].end
        segment.append(data, headers)
    return segment


def test_a_known_size_opens_nothing_until_read(tmp_path: Path) -> None:
    _segment(tmp_path, 5).close()
    budget = HandleBudget(10)
    segment = LogSegment(tmp_path, 0, config(), size=(tmp_path / "00000000000000000000.log").stat().st_size, budget=budget)
    assert segment not in budget and segment._records is None and segment._offset_index is None
    assert [v.header.base_offset for v in segment.batches()] == [0, 1, 2, 3, 4]
    assert segment in budget
    segment.release_handles()
    assert segment._records is not None and segment._records._handle is None
    assert len(list(segment.batches())) == 5  # reopened on use
    segment.close()
    assert segment not in budget


def test_index_state_tells_what_a_rebuild_changed(tmp_path: Path) -> None:
    segment = _segment(tmp_path, 6)
    segment.close()
    segment = LogSegment(tmp_path, 0, config(index_interval_bytes=1), writable=True)
    before = segment.index_state()
    segment.recover()
    assert segment.index_state() == before  # rebuilt exactly as written: nothing changed
    segment.close()
    (tmp_path / "00000000000000000000.timeindex").unlink()
    segment = LogSegment(tmp_path, 0, config(index_interval_bytes=1), writable=True)
    before = segment.index_state()
    assert before["00000000000000000000.timeindex"] == (False,) and not (tmp_path / "00000000000000000000.timeindex").exists()
    segment.recover()
    after = segment.index_state()
    assert [name for name in after if after[name] != before[name]] == ["00000000000000000000.timeindex"]
    segment.close()


def test_change_suffix_moves_every_file_and_delete_removes_them(tmp_path: Path) -> None:
    segment = _segment(tmp_path, 3)
    segment.flush()
    segment.change_suffix(".deleted")
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == ["00000000000000000000.index.deleted", "00000000000000000000.log.deleted",
                     "00000000000000000000.timeindex.deleted"]
    assert segment.suffix == ".deleted" and segment.log_path.name == "00000000000000000000.log.deleted"
    assert len(list(segment.batches())) == 3  # open descriptors stay valid
    segment.delete()
    assert list(tmp_path.iterdir()) == []
