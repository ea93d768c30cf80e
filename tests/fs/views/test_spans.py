"""Sizing and reading through the kernel's span walk: batches it does not take (compressed, damaged)
interleaved with the ones it takes, batches longer than a chunk, and split points for threads."""

from __future__ import annotations

import pytest

from kafkafs.errors import CorruptRecordError
from kafkafs.format.encode import encode_batch
from kafkafs.format.jsonview import render_batch_jsonl
from kafkafs.fs.views import layout as spans
from kafkafs.fs.views.layout import SegmentLayout
from kafkafs.fs.views.layoutcache import LayoutCache
from kafkafs.fs.views.partition import PartitionState
from kafkafs.fs.views.reading import PieceCache
from kafkafs.storage.config import Settings
from kafkafs.storage.logdir import LogDir

from ..conftest import BASE_TS, read_view


def _records(start: int, n: int, size: int = 20) -> list:
    return [(BASE_TS + i, b"k%d" % i, b'{"n":%d,"pad":"%s"}' % (i, b"x" * size), [("h", b"\x00")]) for i in range(start, start + n)]


def _build(path, codecs: list[int]) -> None:
    """One partition, one segment: a batch per codec (0 plain, 1 gzip, 2 plain and longer than a chunk)."""
    with LogDir(path, Settings({"segment.bytes": 1 << 30}), writable=True) as d:
        log = d.create_partition("mix", 0)
        start = 0
        for codec in codecs:
            records = _records(start, 5, 500 if codec == 2 else 20)
            log.append_batches(encode_batch(records, compression=codec % 2))
            start += 5


def _expected(path) -> bytes:
    with LogDir(path) as d:
        log = d.log("mix-0")
        return b"".join(render_batch_jsonl("mix", 0, b) for b in log.read())


def _read_all(state: PartitionState) -> bytes:
    view = state.composition()
    cache = PieceCache()
    out = b""
    while chunk := read_view(state, view, len(out), 1000, cache):
        out += chunk
    return out


@pytest.mark.parametrize("group", [1, 300, 1 << 16])
def test_spans_and_single_batches_interleaved(tmp_path, monkeypatch, group):
    from kafkafs.fs.views import layout

    monkeypatch.setattr(layout, "GROUP_BYTES", group)
    monkeypatch.setattr(spans, "CHUNK_BYTES", 700)  # batches cut off by the chunk's end, some longer than it
    _build(tmp_path, [0, 0, 1, 0, 1, 1, 0, 2, 0, 0, 1, 2])
    want = _expected(tmp_path)
    with LogDir(tmp_path) as d:
        state = PartitionState("mix-0", 0, d.log("mix-0"), "auto", cache=LayoutCache(None))
        assert state.composition().total == len(want)
        assert _read_all(state) == want


@pytest.mark.allow_warnings("a damaged batch is logged")
def test_a_damaged_batch_between_spans_is_its_own_bad_piece(tmp_path, caplog):
    _build(tmp_path, [0, 0, 0, 0])
    log_file = next((tmp_path / "mix-0").glob("*.log"))
    with LogDir(tmp_path) as d:
        views = [view for _segment, view in d.log("mix-0").batches()]
    data = bytearray(log_file.read_bytes())
    data[views[2].position + 70] ^= 0xFF  # inside the third batch's records: its CRC fails
    log_file.write_bytes(bytes(data))
    with LogDir(tmp_path) as d:
        state = PartitionState("mix-0", 0, d.log("mix-0"), "auto", cache=LayoutCache(None))
        layout = state.composition().parts[0].layout
        assert isinstance(layout, SegmentLayout) and len(layout.bad) == 1
        (bad,) = layout.bad
        assert layout.positions[bad] == views[2].position
        cache = PieceCache()
        for i in range(len(layout)):
            if i == bad:
                with pytest.raises(CorruptRecordError):
                    state.render_piece(layout, i, cache)
            else:
                assert len(state.render_piece(layout, i, cache)) == layout.ends[i] - layout.start(i)


def test_split_points_are_batch_boundaries(tmp_path):
    with LogDir(tmp_path, Settings({"segment.bytes": 1 << 30, "index.interval.bytes": 256}), writable=True) as d:
        log = d.create_partition("mix", 0)
        for start in range(0, 400, 5):
            log.append_batches(encode_batch(_records(start, 5)))
    with LogDir(tmp_path) as d:
        log = d.log("mix-0")
        segment = log.segments.first()
        boundaries = {view.position for _segment, view in log.batches()}
        points = spans.split_points(segment, 4)
        assert len(points) == 3 and points == sorted(points) and set(points) <= boundaries


@pytest.mark.parametrize("codecs", [[0] * 40, [0] * 15 + [1] + [0] * 24])
def test_a_large_segment_is_sized_in_parts_on_threads(tmp_path, monkeypatch, codecs):
    """Cut at offset-index positions, sized on threads, laid end to end: the same bytes as one pass; a
    part that meets a batch the kernel does not take leaves the rest to one pass from there."""
    from kafkafs.fs.views import sizing

    with LogDir(tmp_path, Settings({"segment.bytes": 1 << 30, "index.interval.bytes": 256}), writable=True) as d:
        log = d.create_partition("mix", 0)
        for k, codec in enumerate(codecs):
            log.append_batches(encode_batch(_records(5 * k, 5), compression=codec))
    want = _expected(tmp_path)
    starts = []
    original = sizing.lay_out_span

    def counted(renderer, segment, start, end, *rest, **kw):
        starts.append(start)
        return original(renderer, segment, start, end, *rest, **kw)

    monkeypatch.setattr(sizing, "lay_out_span", counted)
    monkeypatch.setattr(sizing, "SPLIT_BYTES", 1024)
    with LogDir(tmp_path) as d:
        state = PartitionState("mix-0", 0, d.log("mix-0"), "auto", cache=LayoutCache(None))
        jobs = state.sizing_jobs()
        sizing.size_layouts(jobs, state.cache, threads=4)
        assert len(starts) == 4 and sorted(starts)[0] == 0 and len(set(starts)) == 4  # 4 parts, in any thread order
        layout = jobs[0].layout
        assert layout.current() and not layout.bad and layout.total() == len(want)
        assert state.composition().total == len(want) and _read_all(state) == want
