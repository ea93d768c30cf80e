"""render_span_into (the kernel's span walk writing its lines straight into a caller's buffer, for the
mount's reads: issue 25) against render_span_jsonl and the pure-Python reference_span_into, byte for
byte: at every place in the buffer, with room to spare, exactly enough, and too little by a byte or by
whole batches; nothing written outside the slice it was given, a filter and the order of offsets as
render_span takes them. (Its GIL handling: tests/format/test_kernel_gil.py, entry render_span_into.)"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kafkafs.format import kernel
from kafkafs.format.jsonspan import SpanInto, reference_span_into, render_span_into, render_span_jsonl
from kafkafs.format.recordfilter import RecordFilter

from .test_kernel_differential import MODES, _batch, _section, record, span_buffer

pytestmark = pytest.mark.skipif(kernel.KERNEL is None, reason="the compiled kernel is not built")

_FILL = 0xA5


def _expected(buf: bytes, mode: str, room: int, **kw) -> SpanInto:
    """What render_span_into must say for ``room`` bytes: render_span_jsonl's batches whose lines fit."""
    whole = render_span_jsonl("topic.x", 7, buf, mode, **kw)
    keep = 0
    while keep < len(whole.line_ends) and whole.line_ends[keep] <= room:
        keep += 1
    written = whole.line_ends[keep - 1] if keep else 0
    return SpanInto(written, whole.batch_ends[keep - 1] if keep else 0, whole.batch_ends[:keep],
                    whole.last_offsets[:keep], whole.line_ends[:keep],
                    whole.lines if keep == len(whole.line_ends) else whole.data[:written].count(b"\n"),
                    keep < len(whole.line_ends)), whole.data[:written]


def _check(buf: bytes, mode: str, room: int, before: int, at: int, after: int, **kw) -> None:
    """A slice of ``room + at`` bytes of a bigger buffer (``before`` bytes before it, ``after`` past it):
    the lines at ``at`` of the slice, nothing changed before ``at`` nor outside the slice."""
    want, data = _expected(buf, mode, room, **kw)
    big = bytearray([_FILL]) * (before + at + room + after)
    view = memoryview(big)[before : before + at + room]
    got = render_span_into("topic.x", 7, buf, view, at, mode, **kw)
    assert got == want
    assert bytes(big[before + at : before + at + got.written]) == data
    assert big[: before + at] == bytearray([_FILL]) * (before + at)
    assert big[before + at + room :] == bytearray([_FILL]) * after
    ref = bytearray([_FILL]) * (at + room)
    assert reference_span_into("topic.x", 7, buf, ref, at, mode, **kw) == want
    assert bytes(ref[at : at + want.written]) == data


@settings(max_examples=300, deadline=None)
@given(span_buffer(), st.sampled_from(MODES), st.none() | st.integers(-1, 2**40 + 50), st.booleans(),
       st.none() | st.integers(0, 2**40 + 60), st.integers(0, 3), st.integers(-300, 300), st.integers(0, 40),
       st.integers(0, 40))
def test_spans_render_into_alike(buf, mode, min_offset, final, upper, which, slack, before, after):
    """Room for: every line (+ slack), exactly up to one batch's end (+ slack), or none."""
    kw = {"min_offset": min_offset, "final": final, "upper": upper}
    whole = render_span_jsonl("topic.x", 7, buf, mode, **kw)
    ends = [0, *whole.line_ends]
    room = max(0, (len(whole.data) if which == 0 else ends[which % len(ends)]) + slack)
    _check(buf, mode, room, before, 0, after, **kw)
    _check(buf, mode, room, before, 17, after, **kw)


def _good_span(batches: int, per: int, value: bytes) -> bytes:
    out, base = [], 0
    for _ in range(batches):
        records = [(0, i, b"key-%d" % i, value, [(b"h", b"v")], 0) for i in range(per)]
        out.append(_batch(_section(records), per, 0, base, per - 1))
        base += per
    return b"".join(out)


@pytest.mark.parametrize("value", [b'{"n":1,"s":"x"}', b"plain text \xc3\xa9", b"\xff\x00binary", b"\"q\"\\\n" * 30])
def test_every_room_from_nothing_to_everything(value):
    """Every room size around each batch's end (where the writers' room checks, which ask for more than
    they write, meet the end of the slice): the batches that fit are taken, at every byte."""
    buf = _good_span(4, 3, value)
    for mode in MODES:
        whole = render_span_jsonl("t", 0, buf, mode)
        for end in [0, *whole.line_ends]:
            for room in range(max(0, end - 260), end + 260):
                _check(buf, mode, room, 3, 5, 3)


@given(st.lists(record, max_size=4), st.sampled_from(MODES), st.integers(0, 400))
def test_a_filter_renders_into_alike(records, mode, room):
    buf = _batch(_section([(ts, abs(d) % 5, k, v, h, p) for ts, d, k, v, h, p in records]), len(records), 0, 0, 10)
    flt = RecordFilter(key=b"k")
    _check(buf, mode, room, 2, 3, 2, record_filter=flt)


def test_bad_arguments():
    buf = _good_span(1, 1, b"x")
    with pytest.raises(TypeError):
        render_span_into("t", 0, buf, b"read-only bytes", 0)
    for at in (-1, 11):
        with pytest.raises(ValueError):
            render_span_into("t", 0, buf, bytearray(10), at)
    assert render_span_into("t", 0, buf, bytearray(10), 10).full
