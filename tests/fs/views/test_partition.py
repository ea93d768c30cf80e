"""PartitionState: one partition of the mount (the size of ``records.jsonl``, ranges per segment),
against the engine's own rendering."""

from __future__ import annotations

from ..conftest import expected_jsonl


def test_records_size(tree, built_logdir):
    state = tree.partitions.state("orders-0")
    assert state.composition().total == len(expected_jsonl(built_logdir, "orders-0"))
    assert state.cached_composition() is state.composition()  # known now: nothing rendered again


def test_listed_records_and_segment_ranges(tree):
    state = tree.partitions.state("orders-0")
    log = state.log
    assert state.listed_records() == log.log_end_offset - log.log_start_offset
    ranges = list(state.segment_ranges(0))
    assert [r.first for r in ranges] == log.segments.bases()
    assert ranges[-1].last == log.log_end_offset - 1
    assert all(a.last + 1 == b.first for a, b in zip(ranges, ranges[1:], strict=False))
    assert [r.first for r in state.segment_ranges(ranges[2].first)] == [r.first for r in ranges[2:]]


def test_a_roll_seen_while_records_jsonl_is_composed_keeps_the_rolled_segments_last_batches(tmp_path, monkeypatch):
    """A read-only mount beside a broker that rolls: the segment the broker rolled got its last batches
    just before the roll. A refresh used to put the new segment in the log before it read the rolled
    one's growth, so a reader composing records.jsonl in between (another thread) laid the rolled
    segment out to its old size and the new segment after it; the shape of the composition (the last
    segment's base and size) did not change when the rolled one's size was read, so records.jsonl kept
    skipping those batches (the records after them in their place) until the next append (seen beside a
    live broker, trust3's notes). Seen failing: the batch appended before the roll was missing."""
    from kafkafs.format.jsonview import render_batch_jsonl
    from kafkafs.fs.views.partition import PartitionState
    from kafkafs.fs.views.reading import PieceCache
    from kafkafs.storage.log import Log
    from kafkafs.storage.segment import LogSegment

    from ...storage.helpers import config, open_log, record
    from ..conftest import read_view

    cfg = config(segment_bytes=1 << 20)
    writer = open_log(tmp_path / "t-0", cfg)  # the broker: it writes the partition's files
    for i in range(2):
        writer.append_records([record(b"%d-%d" % (i, k)) for k in range(5)])
    reader = Log.open(tmp_path / "t-0", cfg)
    state = PartitionState("t-0", 0, reader, "auto")

    def read_all() -> bytes:
        view, cache, out = state.composition(), PieceCache(), b""
        while chunk := read_view(state, view, len(out), 1000, cache):
            out += chunk
        return out

    def expected() -> bytes:
        return b"".join(render_batch_jsonl("t", 0, b) for b in writer.read())

    assert read_all() == expected()
    writer.append_records([record(b"last-%d" % k) for k in range(5)])  # the active segment's last batch
    writer.roll()
    writer.append_records([record(b"next-%d" % k) for k in range(5)])  # the first batch of the new one
    rolled = reader.segments.last()
    real = LogSegment.refresh
    composed = []

    def refresh(segment: LogSegment) -> int:
        if segment is rolled and not composed:  # another reader composes records.jsonl just now
            composed.append(state.composition())
        return real(segment)

    monkeypatch.setattr(LogSegment, "refresh", refresh)
    state.refresh(force=True)
    assert composed and len(reader.segments) == 2
    monkeypatch.setattr(LogSegment, "refresh", real)
    assert read_all() == expected()
    assert state.composition().total == len(expected())
    reader.close()
    writer.close()


def test_a_rolled_segments_size_read_late_is_not_served_from_the_old_composition(tmp_path, monkeypatch):
    """The composition's shape holds the size of the segment before the last: the segment the writer
    rolled may be read to its final size after the new one is listed (here its size read at the roll
    fails, and a later read gets it), and records.jsonl composed on its old size must not be served
    after that. Seen failing before the shape held it: the rolled segment's last batch stayed missing."""
    import errno

    from kafkafs.format.jsonview import render_batch_jsonl
    from kafkafs.fs.views.partition import PartitionState
    from kafkafs.fs.views.reading import PieceCache
    from kafkafs.storage.log import Log
    from kafkafs.storage.records import FileRecords

    from ...storage.helpers import config, open_log, record
    from ..conftest import read_view

    cfg = config(segment_bytes=1 << 20)
    writer = open_log(tmp_path / "t-0", cfg)
    for i in range(2):
        writer.append_records([record(b"%d-%d" % (i, k)) for k in range(5)])
    reader = Log.open(tmp_path / "t-0", cfg)
    state = PartitionState("t-0", 0, reader, "auto")

    def read_all() -> bytes:
        view, cache, out = state.composition(), PieceCache(), b""
        while chunk := read_view(state, view, len(out), 1000, cache):
            out += chunk
        return out

    def expected() -> bytes:
        return b"".join(render_batch_jsonl("t", 0, b) for b in writer.read())

    assert read_all() == expected()
    writer.append_records([record(b"last-%d" % k) for k in range(5)])
    writer.roll()
    writer.append_records([record(b"next-%d" % k) for k in range(5)])
    rolled = reader.segments.last()
    real = FileRecords.stat_size

    def failing(records: FileRecords) -> int:
        if records is rolled.records:
            raise OSError(errno.EIO, "Input/output error")
        return real(records)

    monkeypatch.setattr(FileRecords, "stat_size", failing)
    state.refresh(force=True)  # the roll is seen, the rolled segment's size is not
    monkeypatch.setattr(FileRecords, "stat_size", real)
    assert len(reader.segments) == 2
    assert read_all() != expected()  # composed on the rolled segment's old size (what was known)
    rolled.refresh()  # its size is read now
    assert read_all() == expected()
    reader.close()
    writer.close()


class _Hiding:
    """``os.scandir`` of a folder with the entries whose names start with ``prefix`` left out."""

    def __init__(self, entries, prefix: str) -> None:
        self.entries = entries
        self.prefix = prefix

    def __enter__(self):
        return (entry for entry in self.entries if not entry.name.startswith(self.prefix))

    def __exit__(self, *exc: object) -> None:
        self.entries.close()


def test_a_listing_that_missed_a_segment_below_a_later_one_leaves_no_gap_in_records_jsonl(tmp_path, monkeypatch):
    """A directory listing is no snapshot: a file created while readdir runs may be missed while one
    created after it is seen. Beside a broker rolling 16 KB segments (4,000 records/s, live5's notes)
    the mount's refresh listed segment 117680 but not 117359, the one before it, and put 117680 right
    after 117040; records.jsonl composed then skipped 117359's records, and its stream (which only
    grows) went on without them once the next refresh put 117359 in the middle. The listing is now
    taken again while it shows new segments. Seen failing before: the middle segment's records missing."""
    import os

    from kafkafs.format.jsonview import render_batch_jsonl
    from kafkafs.fs.views.partition import PartitionState
    from kafkafs.fs.views.reading import PieceCache
    from kafkafs.storage.log import Log

    from ...storage.helpers import config, open_log, record
    from ..conftest import read_view

    cfg = config(segment_bytes=1 << 20)
    folder = tmp_path / "t-0"
    writer = open_log(folder, cfg)  # the broker
    writer.append_records([record(b"first-%d" % k) for k in range(5)])
    reader = Log.open(folder, cfg)
    state = PartitionState("t-0", 0, reader, "auto")

    def read_all() -> bytes:
        view, cache, out = state.composition(), PieceCache(), b""
        while chunk := read_view(state, view, len(out), 1000, cache):
            out += chunk
        return out

    def expected() -> bytes:
        return b"".join(render_batch_jsonl("t", 0, b) for b in writer.read())

    assert read_all() == expected()
    for name in (b"middle", b"newest"):  # two rolls while the reader's next listing runs
        writer.roll()
        writer.append_records([record(b"%s-%d" % (name, k)) for k in range(5)])
    middle = writer.segments.bases()[1]
    real, listed = os.scandir, []

    def scandir(path):
        entries = real(path)
        if os.fspath(path) == os.fspath(folder) and not listed:  # the first listing missed the middle one
            listed.append(path)
            return _Hiding(entries, f"{middle:020d}.")
        return entries

    monkeypatch.setattr(os, "scandir", scandir)
    state.refresh(force=True)
    monkeypatch.setattr(os, "scandir", real)
    assert listed
    assert read_all() == expected()
    assert reader.segments.bases() == writer.segments.bases()
    reader.close()
    writer.close()
