"""Range layouts (by-offset/<first>-<last>.jsonl, by-time/<ts1>..<ts2>.jsonl): growth, and what a time
range need not decode."""

from __future__ import annotations

import json

import orjson

from kafkafs.fs.tree.root import Tree
from kafkafs.storage.logdir import LogDir

from ..conftest import BASE_TS, expected_jsonl, late_log, tree_of


def test_growing_range_continues_where_it_stopped(logdir_copy):
    t = tree_of(logdir_copy, rw=True)
    try:
        growing = t.resolve("events-3/by-offset/2-400.jsonl")
        time_range = t.resolve(f"events-3/by-time/{BASE_TS + 1}..{BASE_TS + 10**6}.jsonl")
        assert growing.attr().size and time_range.attr().size
        handle = t.resolve("events-3/append").open(True)
        for i in range(30):
            handle.write(0, b"".join(b"more %d %d\n" % (i, j) for j in range(7)))
            if i % 4 == 0:
                t.resolve("events-3/records.jsonl").attr()  # lay out the active segment meanwhile
                growing.attr()
                time_range.attr()
        handle.flush()
        assert t.read_file("events-3/by-offset/2-400.jsonl") == expected_jsonl(
            logdir_copy, "events-3", 2, 400
        )
        assert growing.attr().size == len(expected_jsonl(logdir_copy, "events-3", 2, 400))
        lines = t.read_file(f"events-3/by-time/{BASE_TS + 1}..{BASE_TS + 10**6}.jsonl").splitlines()
        assert [json.loads(line)["offset"] for line in lines] == [1, 2, 3, 4]
        # newer records arrived, but a time range never ends: a late record (CreateTime) still joins it
        assert time_range.volatile()
        size = time_range.attr().size
        handle.write(0, b'{"value": "late", "timestamp": %d}\n' % (BASE_TS + 3))
        end = t.partitions.state("events-3").log.log_end_offset
        assert time_range.attr().size > size
        lines = t.read_file(f"events-3/by-time/{BASE_TS + 1}..{BASE_TS + 10**6}.jsonl").splitlines()
        assert [json.loads(line)["offset"] for line in lines] == [1, 2, 3, 4, end - 1]
        assert time_range.attr().size == len(b"".join(line + b"\n" for line in lines))
    finally:
        t.close()


def test_a_time_range_skips_what_cannot_hold_its_records(tmp_path, monkeypatch):
    """Sealed segments whose largest timestamp is below the range, and v2 batches whose header says
    the same, are not decoded."""
    from kafkafs.storage.records import BatchView

    records = late_log(tmp_path)
    decoded = []
    real = BatchView.decode

    def counting(self, *args, **kwargs):
        decoded.append(self.header.base_offset)
        return real(self, *args, **kwargs)

    monkeypatch.setattr(BatchView, "decode", counting)
    t = Tree(LogDir(tmp_path))
    try:
        ts1, ts2 = BASE_TS + 100_000, BASE_TS + 100_500
        data = t.read_file(f"late-0/by-time/{ts1}..{ts2}.jsonl")
        want = [r.offset for r in records if ts1 <= r.timestamp < ts2]
        assert [orjson.loads(line)["offset"] for line in data.splitlines()] == want
        old_blocks = {r.offset // 6 * 6 for r in records if r.timestamp < BASE_TS + 100_000}
        assert not old_blocks & set(decoded)
    finally:
        t.close()


def test_a_time_range_does_not_pass_over_a_torn_segment_by_its_timestamps(tmp_path, caplog):
    """A sealed segment whose records are older than the range, but whose last batch is cut: its largest
    timestamp does not count the cut batch, so the range cannot pass over it as holding nothing; the torn
    batch is damage for the range (as for consume --from-time and offset_for_timestamp), not a quiet gap.
    Seen failing: the range served the records around it with success."""
    import os

    import pytest

    from kafkafs.errors import CorruptRecordError
    from kafkafs.format.jsonview import ProducerRecord
    from kafkafs.storage.config import Settings

    with LogDir(tmp_path, Settings({"segment.bytes": 600}), writable=True) as d:
        log = d.create_partition("t", 0)
        for i in range(30):  # offsets 10-19 old, the rest new; four records a segment
            ts = 100 + i if 10 <= i < 20 else 5000 + i
            log.append_records([ProducerRecord(ts, None, b"v%03d-%s" % (i, b"x" * 60), ())])
        old = log.segments.get(12)
        assert old is not None and old.max_timestamp < 5000 and log.segments.is_sealed(12)
    t = tree_of(tmp_path)
    try:
        whole = t.read_file("t-0/by-time/5000..6000.jsonl")  # undamaged: the old segments pass over
        assert [orjson.loads(line)["offset"] for line in whole.splitlines()] == [*range(10), *range(20, 30)]
    finally:
        t.close()
    segment = tmp_path / "t-0" / f"{12:020d}.log"
    os.truncate(segment, segment.stat().st_size - 7)
    t = tree_of(tmp_path)
    try:
        with pytest.raises(CorruptRecordError, match="after the last whole batch of a sealed segment"):
            t.read_file("t-0/by-time/5000..6000.jsonl")
        assert "00000000000000000012.log at position" in caplog.text  # logged
        handle = t.resolve("t-0/by-time/5000..6000.jsonl").open(False)  # what precedes the damage reads
        try:
            before = handle.read(0, len(whole) // 3)  # records 0-9 are the first half
        finally:
            handle.release()
        assert before == whole[: len(before)] and before
    finally:
        t.close()
