"""Filtered streams: the records of segments a filter keeps, sized exactly, read from anywhere, against
the engine's records filtered here (every batch kind: plain, gzip, legacy-free, a decoder's topic)."""

from __future__ import annotations

import random

import pytest

from kafkafs.errors import CorruptRecordError
from kafkafs.format.decoders import decoder_for
from kafkafs.format.jsonview import render_batch_jsonl
from kafkafs.format.recordfilter import RecordFilter
from kafkafs.fs.views import filtered
from kafkafs.fs.views.filtered import FilteredStream, StreamPart
from kafkafs.fs.views.render import Renderer
from kafkafs.storage.config import Settings
from kafkafs.storage.logdir import LogDir

from ...storage.groupslogs import commit_key, commit_value
from ...storage.keylogs import fill


def _expected(log, keep, decoder=None) -> bytes:
    out = []
    for batch in log.read():
        idx = [i for i, o in enumerate(batch.offsets) if keep(o, batch.keys[i])]
        if idx:
            picked = type(batch)(batch.header, *[[col[i] for i in idx] for col in (
                batch.offsets, batch.timestamps, batch.keys, batch.values, batch.headers)])
            out.append(render_batch_jsonl(log.topic, log.partition, picked, "auto", decoder=decoder))
    return b"".join(out)


def _parts(log, keep) -> list[StreamPart]:
    parts = []
    for segment in log.segments:
        offsets = [o for b in log.read(segment.base_offset, segment.next_offset - 1) for o in b.offsets]
        bits = bytearray(max(segment.next_offset - segment.base_offset, 1) // 8 + 1)
        for o in offsets:
            if keep(o, None):
                rel = o - segment.base_offset
                bits[rel >> 3] |= 1 << (rel & 7)
        parts.append(StreamPart(segment, RecordFilter(bits=bytes(bits), bits_base=segment.base_offset), 0, segment.size))
    return parts


@pytest.mark.parametrize("compression", ["none", "gzip"])
def test_a_stream_is_the_filtered_records(tmp_path, monkeypatch, compression):
    monkeypatch.setattr(filtered, "MARK_BYTES", 2000)  # many marks: reads start from the middle
    (tmp_path / "logs").mkdir()
    with LogDir(tmp_path / "logs", Settings({"segment.bytes": 20000, "compression.type": compression}),
                writable=True) as logdir:
        log = logdir.create_partition("t", 0)
        fill(log, random.Random(4), 200)

        def keep(offset, _key):
            return offset % 3 == 0

        stream = FilteredStream(Renderer("t", 0, "auto"), _parts(log, keep))
        want = _expected(log, keep)
        assert stream.total == len(want) > 0
        rng = random.Random(2)
        for _ in range(200):
            at = rng.randrange(len(want) + 5)
            size = rng.choice([1, 100, 4096, 131072])
            assert stream.read(at, size) == want[at : at + size]
        got = b"".join(stream.read(at, 4096) for at in range(0, len(want), 4096))
        assert got == want


def test_a_decoders_topic_renders_decoded(tmp_path):
    (tmp_path / "logs").mkdir()
    with LogDir(tmp_path / "logs", writable=True) as logdir:
        log = logdir.create_partition("__consumer_offsets", 0)
        log.append_records([(1, commit_key("g", "t", i % 4), commit_value(i), ()) for i in range(40)])
        decoder = decoder_for("__consumer_offsets")
        stream = FilteredStream(Renderer(log.topic, 0, "auto", decoder=decoder), _parts(log, lambda o, k: o >= 36))
        want = _expected(log, lambda o, k: o >= 36, decoder)
        assert stream.read(0, 1 << 20) == want and stream.total == len(want)
        assert b'"offset":39' in want and b'"type":1' in want


def test_damage_fails_the_reads_that_need_it(tmp_path, caplog):
    (tmp_path / "logs").mkdir()
    with LogDir(tmp_path / "logs", writable=True) as logdir:
        log = logdir.create_partition("t", 0)
        for i in range(20):
            log.append_records([(1, b"k", b"v%d" % i, ())])
    path = tmp_path / "logs" / "t-0" / "00000000000000000000.log"
    data = bytearray(path.read_bytes())
    data[-5] ^= 0xFF  # the last batch
    path.write_bytes(bytes(data))
    with LogDir(tmp_path / "logs") as logdir:
        log = logdir.log("t-0")
        parts = [StreamPart(s, RecordFilter(bits=b"\xff" * 4, bits_base=0), 0, s.size) for s in log.segments]
        with pytest.raises(CorruptRecordError):
            FilteredStream(Renderer("t", 0, "auto"), parts)
    assert "corrupt batch" in caplog.text
