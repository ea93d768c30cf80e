"""Rendering a span of a segment: whole batches straight from their bytes, filters on offsets and
timestamps, lengths without building the output, damage placed in its file."""

from __future__ import annotations

import pytest

from kafkafs.errors import CorruptRecordError
from kafkafs.format.jsonview import render_batch_jsonl
from kafkafs.fs.views.render import NO_FILTER, Filter, Renderer, header_skips
from kafkafs.storage.logdir import LogDir

RENDERER = Renderer("orders", 0, "auto")


def _segment_and_views(built_logdir):
    logdir = LogDir(built_logdir)
    log = logdir.log("orders-0")
    segment = log.segments.first()
    return logdir, segment, list(segment.batches())


def test_a_span_renders_as_the_engine_does(built_logdir):
    logdir, segment, views = _segment_and_views(built_logdir)
    try:
        want = b"".join(render_batch_jsonl("orders", 0, v.decode()) for v in views)
        assert RENDERER.render(segment, 0, segment.size, NO_FILTER) == want
        lengths = [RENDERER.length(v, str(segment.log_path), NO_FILTER) for v in views]
        assert sum(lengths) == len(want)
    finally:
        logdir.close()


def test_a_span_renders_into_a_buffer_that_it_fills_exactly(built_logdir):
    """render_into writes what render gives into the caller's buffer, when it fills it exactly (the
    rendered size known from the layout); a buffer of another size says False (the caller renders the
    usual way). Compressed batches (the fixture's mix) are rendered by the Python path in between."""
    logdir, segment, views = _segment_and_views(built_logdir)
    try:
        want = RENDERER.render(segment, 0, segment.size, NO_FILTER)
        assert RENDERER.renders_into(NO_FILTER) and not RENDERER.renders_into(Filter(lo=1))
        big = bytearray(b"#" * (len(want) + 10))
        assert RENDERER.render_into(segment, 0, segment.size, memoryview(big)[5 : 5 + len(want)])
        assert bytes(big[5 : 5 + len(want)]) == want and big[:5] == b"#####" and big[-5:] == b"#####"
        for size in (len(want) - 1, len(want) + 1):
            assert not RENDERER.render_into(segment, 0, segment.size, memoryview(bytearray(size)))
    finally:
        logdir.close()


def test_filters_on_offsets_and_timestamps(built_logdir):
    logdir, segment, views = _segment_and_views(built_logdir)
    try:
        first = views[0].header
        lo, hi = first.base_offset + 1, views[1].header.base_offset
        got = RENDERER.render(segment, 0, segment.size, Filter(lo=lo, hi=hi))
        lines = got.splitlines()
        assert len(lines) == hi - lo + 1 and lines[0].startswith(b'{"topic":"orders","partition":0,"offset":%d' % lo)
        flt = Filter(ts_lo=first.max_timestamp + 1)
        assert header_skips(first, flt) and not header_skips(first, NO_FILTER)
        assert RENDERER.length(views[0], str(segment.log_path), flt) == 0
    finally:
        logdir.close()


def test_damage_is_placed_in_its_file(built_logdir, tmp_path):
    logdir, segment, views = _segment_and_views(built_logdir)
    try:
        raw = bytearray(views[0].raw())
        raw[-1] ^= 0xFF  # the CRC no longer matches
        bad = views[0]._replace(buf=bytes(raw), base=0)
        bad = bad._replace(header=bad.header._replace(position=0))
        with pytest.raises(CorruptRecordError) as info:
            RENDERER.length(bad, "x.log", NO_FILTER)
        assert info.value.file == "x.log"
    finally:
        logdir.close()


def test_damage_that_names_no_file_is_said_once_per_reason(caplog):
    """A damage without a file (its reason says where) is logged once per reason: a second, different
    one was never said (both were keyed (None, None))."""
    import logging

    from kafkafs.fs.views.render import report_corrupt

    first = CorruptRecordError("fix7 test: the key index of X fails its checks")
    second = CorruptRecordError("fix7 test: the key index of Y fails its checks")
    with caplog.at_level(logging.ERROR, logger="kafkafs.fs"):
        for exc in (first, second, first, CorruptRecordError(first.reason), second):
            report_corrupt(exc)
    assert [r.getMessage() for r in caplog.records] == [first.reason, second.reason]


def test_one_damage_said_with_and_without_its_position_is_logged_once(caplog):
    """review15 R15-9: a record-level damage was logged twice, once "at position None" (from a reader
    that did not know where its batch starts), then at its position."""
    import logging

    from kafkafs.fs.views.render import report_corrupt

    reason = "r15-9 test: record count 2147483647 cannot fit in 130 bytes"
    with caplog.at_level(logging.ERROR, logger="kafkafs.fs"):
        report_corrupt(CorruptRecordError(reason, None, "/r15-9/t-0/00000000000000000000.log"))
        report_corrupt(CorruptRecordError(reason, 171, "/r15-9/t-0/00000000000000000000.log"))
    said = [r.getMessage() for r in caplog.records]
    assert said == [f"corrupt batch in /r15-9/t-0/00000000000000000000.log: {reason}"]
