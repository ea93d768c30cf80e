"""Planning without Spark: partitions, segments, byte ranges, pruning."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from kafkafs.errors import InvalidInput
from kafkafs.spark.discovery import discover_partitions
from kafkafs.spark.options import parse_read_options
from kafkafs.spark.plan import offset_for_timestamp
from kafkafs.spark.predicates import IntBounds, Predicates
from kafkafs.storage.logdir import LogDir

from .conftest import BASE_TS, engine_rows
from .helpers import plan, read_plan


def _segments(logdir: Path) -> dict[tuple[str, int], list[tuple[int, int, list[int]]]]:
    """(topic, partition) -> [(base offset, size, offset index positions)] of non-empty segments."""
    out = {}
    with LogDir(logdir) as ld:
        for log in ld:
            out[(log.topic, log.partition)] = [
                (base, seg.size, [e.position for e in seg.offset_index]) for base, seg in ((s.base_offset, s) for s in log.segments) if seg.size
            ]
    return out


def test_pieces_cover_every_segment_exactly(generated):
    segments = _segments(generated)
    assert all(len(v) >= 4 for v in segments.values() if sum(s[1] for s in v) > 30000), "the generated log has many segments"
    p = plan(generated)
    assert len(p.splits) == 1, "small pieces are packed into one split"
    by_segment: dict = {}
    for piece in p.pieces:
        by_segment.setdefault((piece.topic, piece.partition, piece.base_offset), []).append((piece.start, piece.end))
    for (topic, partition), segs in segments.items():
        for base, size, _positions in segs:
            assert by_segment[(topic, partition, base)] == [(0, size)]
    assert p.segments_pruned == 0
    assert read_plan(p) == engine_rows(generated)


def test_large_segments_split_at_index_entries(generated):
    segments = _segments(generated)
    p = plan(generated, maxBytesPerPartition=4000)
    assert len(p.splits) > sum(len(v) for v in segments.values())
    for split in p.splits:
        assert split.size <= 4000 or len(split.pieces) == 1
    for (topic, partition), segs in segments.items():
        for base, size, positions in segs:
            ranges = sorted((x.start, x.end) for x in p.pieces if (x.topic, x.partition, x.base_offset) == (topic, partition, base))
            assert ranges[0][0] == 0 and ranges[-1][1] == size
            for (_a, b), (c, _d) in zip(ranges, ranges[1:], strict=False):
                assert b == c and b in positions, "cuts are at offset index positions, contiguous"
            if size > 8000:
                assert len(ranges) >= 2
    assert read_plan(p) == engine_rows(generated)


def test_offset_bounds_prune_segments_and_start_at_the_index(generated):
    start, end = 320, 340
    p = plan(
        generated,
        topics="orders",
        startingOffsets=json.dumps({"orders": {"0": start, "1": -2}}),
        endingOffsets=json.dumps({"orders": {"0": end, "1": 40}}),
    )
    segs = {base: positions for base, _size, positions in _segments(generated)[("orders", 0)]}
    bases = sorted(segs)
    pieces0 = [x for x in p.pieces if x.partition == 0]
    wanted = [b for i, b in enumerate(bases) if b < end and (i + 1 == len(bases) or bases[i + 1] > start)]
    assert sorted({x.base_offset for x in pieces0}) == wanted
    assert p.segments_pruned >= len(bases) - len(wanted)
    with LogDir(generated) as ld:
        seg = ld.log("orders-0").segments.floor(start)
        assert pieces0[0].start == seg.offset_index.lookup(start).position > 0, "the scan starts at the index"
        assert pieces0[-1].end < seg.size, "and stops at the first index entry past the end"
    rows = read_plan(p)
    expect = [r for r in engine_rows(generated) if r[0] == "orders" and ((r[1] == 0 and start <= r[2] < end) or (r[1] == 1 and r[2] < 40))]
    assert rows == expect


def test_timestamp_options_follow_offsets_for_times(generated):
    everything = engine_rows(generated)
    for ts in (BASE_TS - 1000, BASE_TS + 1234, BASE_TS + 3001, BASE_TS + 5990):
        p = plan(generated, topics="orders", startingTimestamp=ts, endingTimestamp=ts + 777)
        expect = []
        for partition in (0, 1):
            rows = [r for r in everything if r[:2] == ("orders", partition)]
            first = next((r[2] for r in rows if r[3] >= ts), None)
            last = next((r[2] for r in rows if r[3] >= ts + 777), None)
            expect += [r for r in rows if first is not None and r[2] >= first and (last is None or r[2] < last)]
        assert read_plan(p) == expect, ts
    with pytest.raises(InvalidInput, match="No offset matched from request of topic-partition audit-0 and timestamp"):
        plan(generated, startingTimestamp=BASE_TS + 10**9)
    assert plan(generated, startingTimestamp=BASE_TS + 10**9, startingOffsetsByTimestampStrategy="latest").splits == []


def test_timestamp_maps_per_partition(generated):
    """startingOffsetsByTimestamp / endingOffsetsByTimestamp: Kafka's offsetsForTimes per partition; an
    end with no match is the latest offset, as in Spark."""
    everything = engine_rows(generated)
    ts0, ts1 = BASE_TS + 2000, BASE_TS + 4000
    p = plan(
        generated,
        topics="orders",
        startingOffsetsByTimestamp=json.dumps({"orders": {"0": ts0, "1": ts1}}),
        endingOffsetsByTimestamp=json.dumps({"orders": {"0": ts1, "1": BASE_TS + 10**9}}),
    )
    expect = []
    for partition, lo, hi in ((0, ts0, ts1), (1, ts1, None)):
        rows = [r for r in everything if r[:2] == ("orders", partition)]
        first = next(r[2] for r in rows if r[3] >= lo)
        last = next((r[2] for r in rows if hi is not None and r[3] >= hi), None)
        expect += [r for r in rows if r[2] >= first and (last is None or r[2] < last)]
    assert read_plan(p) == expect


def test_offset_for_timestamp_matches_a_scan(generated):
    with LogDir(generated) as ld:
        log = ld.log("orders-1")
        records = list(log.records())
        for ts in range(BASE_TS - 50, BASE_TS + 6100, 97):
            expect = next((off for off, t, *_ in records if t >= ts), None)
            assert offset_for_timestamp(log, ts) == expect


def test_time_filter_prunes_sealed_segments(generated):
    lo_ms = BASE_TS + 4500
    preds = Predicates(timestamp=IntBounds(lo=lo_ms * 1000))
    p = plan(generated, preds, topics="orders")
    assert p.segments_pruned > 0
    with LogDir(generated) as ld:
        log = ld.log("orders-0")
        for seg in list(log.segments)[:-1]:
            base = seg.base_offset
            if seg.time_index.last_entry.timestamp < lo_ms:
                assert all(x.base_offset != base for x in p.pieces if x.partition == 0)
    expect = [r for r in engine_rows(generated) if r[0] == "orders" and r[3] >= lo_ms]
    assert read_plan(p) == expect


@pytest.mark.allow_warnings("a cut segment on purpose")
def test_time_filter_reads_a_cut_sealed_segment(tmp_path):
    """A sealed segment whose time index says its records are older than the filter, but whose last batch
    is cut: it is not pruned (the cut batch's timestamps are not known), so its torn end meets onCorrupt
    (fail: the read fails; skip: the rows pass). Seen failing before: it was pruned and the read passed."""
    from kafkafs.errors import CorruptRecordError
    from kafkafs.format.jsonview import ProducerRecord
    from kafkafs.storage.config import Settings

    with LogDir(tmp_path, Settings({"segment.bytes": 600}), writable=True) as d:
        log = d.create_partition("t", 0)
        for i in range(30):  # offsets 10-19 old, the rest new; four records a segment
            ts = 100 + i if 10 <= i < 20 else 5000 + i
            log.append_records([ProducerRecord(ts, None, b"v%03d-%s" % (i, b"x" * 60), ())])
    preds = Predicates(timestamp=IntBounds(lo=5000 * 1000))
    whole = plan(tmp_path, preds)
    assert 12 not in {x.base_offset for x in whole.pieces} and whole.segments_pruned >= 2
    assert [r[2] for r in read_plan(whole)] == [*range(10), *range(20, 30)]
    segment = tmp_path / "t-0" / f"{12:020d}.log"
    os.truncate(segment, segment.stat().st_size - 7)
    cut = plan(tmp_path, preds)
    assert 12 in {x.base_offset for x in cut.pieces}
    with pytest.raises(CorruptRecordError, match="after the last whole batch of a sealed segment"):
        read_plan(cut)
    assert [r[2] for r in read_plan(plan(tmp_path, preds, onCorrupt="skip"))] == [*range(10), *range(20, 30)]


def test_partition_and_topic_predicates_prune_partitions(generated):
    p = plan(generated, Predicates(topics=frozenset({"orders"}), partition=IntBounds(1, 1, frozenset({1}))))
    assert {(x.topic, x.partition) for x in p.pieces} == {("orders", 1)}
    assert plan(generated, Predicates(topics=frozenset())).splits == []


def test_discovery(generated, tmp_path):
    opts = parse_read_options({"path": str(generated)})
    assert [(t, p) for _d, t, p in discover_partitions(opts)] == [("audit", 0), ("events", 0), ("orders", 0), ("orders", 1)]
    opts = parse_read_options({"path": str(generated), "topicPattern": "ord.*"})
    assert {t for _d, t, _p in discover_partitions(opts)} == {"orders"}
    opts = parse_read_options({"paths": json.dumps([str(generated), str(generated)])})
    assert len(discover_partitions(opts)) == 4, "the same directory twice is read once"
    twin = tmp_path / "twin"
    (twin / "orders-0").mkdir(parents=True)
    (twin / "__cluster_metadata-0").mkdir()
    with pytest.raises(InvalidInput, match="orders-0 is in both"):
        discover_partitions(parse_read_options({"paths": f"{generated},{twin}"}))
    assert discover_partitions(parse_read_options({"path": str(twin), "topics": "__cluster_metadata"}))
    assert [t for _d, t, _p in discover_partitions(parse_read_options({"path": str(twin)}))] == ["orders"]
    with pytest.raises(InvalidInput, match="no such log directory"):
        discover_partitions(parse_read_options({"path": str(tmp_path / "nope")}))
    glob = parse_read_options({"path": str(tmp_path / "tw*")})
    assert glob.paths == (str(twin),)
    with pytest.raises(InvalidInput, match="is a partition folder; load its log directory"):
        discover_partitions(parse_read_options({"path": str(generated / "orders-0")}))


def test_fixture_directories_plan_from_names_and_indexes(fixtures_dir):
    p = plan(fixtures_dir / "kafka-logs-a")
    names = {(x.topic, x.partition) for x in p.pieces}
    assert ("__consumer_offsets", 12) in names
    assert ("demo", 0) not in names and ("my-topic", 0) not in names, "empty segments give no piece"
    sizes = {(x.topic, x.partition, x.base_offset): x.end for x in p.pieces}
    assert sizes[("__consumer_offsets", 12, 0)] == os.path.getsize(
        fixtures_dir / "kafka-logs-a" / "__consumer_offsets-12" / "00000000000000000000.log"
    )
    cut = plan(fixtures_dir / "kafka-logs-a", topics="__consumer_offsets", maxBytesPerPartition=16384)
    assert len([x for x in cut.pieces if x.partition == 12 and x.base_offset == 0]) >= 3
    assert read_plan(cut) == read_plan(plan(fixtures_dir / "kafka-logs-a", topics="__consumer_offsets"))


def test_a_start_past_the_resolved_end_fails_as_sparks_kafka_source_does(generated):
    """Spark's Kafka source checks in each task that a range's start is not after its end, the end
    resolved (latest: the log end offset; read_committed: the last stable offset): "The resolved start
    offset N is greater than the resolved end offset M ..." (Spark 4; the whole text: test_offsets_match).
    A start past the end of the log was an empty read with no word."""
    with LogDir(generated) as ld:
        end = ld.log("orders-0").log_end_offset
    with pytest.raises(InvalidInput, match=f"The resolved start offset {end + 5} is greater than the resolved end "
                                           f"offset {end} for topic orders partition 0. Please investigate"):
        plan(generated, topics="orders", startingOffsets=json.dumps({"orders": {"0": end + 5, "1": -2}}))
    # a start at the end reads nothing, as in Spark
    p = plan(generated, topics="orders", startingOffsets=json.dumps({"orders": {"0": end, "1": -2}}))
    assert [r for r in read_plan(p) if r[1] == 0] == []


def test_discovery_reads_an_alias_partition_folder_once(tmp_path, caplog):
    """review9 R9-9: a link to another partition folder of the same log directory is that partition's
    log again: left out, named once (before: read twice, its rows under both topics)."""
    logs = tmp_path / "logs"
    (logs / "orders-0").mkdir(parents=True)
    os.symlink("orders-0", logs / "extra-0")
    caplog.set_level("WARNING")
    found = discover_partitions(parse_read_options({"path": str(logs)}))
    assert [(t, p) for _d, t, p in found] == [("orders", 0)]
    assert [r.getMessage() for r in caplog.records if "extra-0: a link to orders-0" in r.getMessage()]
