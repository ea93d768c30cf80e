"""The kernel's pieces for consume's merge (format/_kernel_merge.h) against the Python reference, byte for
byte: ``render_span_lines`` (a span's lines with each one's timestamp and end) against ``reference_span``,
and ``render`` with ``what=4`` (one records section's lines, offsets, timestamps and ends) against the reference's
decode and render. The Merger's order is held to heapq.merge's in tests/cli/test_consume_merge.py."""

from __future__ import annotations

from array import array

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from kafkafs.format import kernel
from kafkafs.format.jsonrender import line_prefix
from kafkafs.format.jsonspan import reference_span
from kafkafs.format.jsonview import render_raw_jsonl_stamped
from tests.format.test_kernel_differential import (
    MODES,
    _header,
    _kernel,
    _ref_render,
    _reference,
    _section,
    attributes,
    bound,
    int64,
    record,
    span_buffer,
)

pytestmark = pytest.mark.skipif(kernel.KERNEL is None, reason="the compiled kernel is not built")


def _q(values) -> bytes:
    return array("q", values).tobytes()


@given(span_buffer(), st.sampled_from(MODES))
def test_span_lines_render_alike(buf, mode):
    ref = reference_span("topic.x", 7, buf, mode)
    data, consumed, batches, last, stamps, ends = kernel.KERNEL.render_span_lines(
        line_prefix("topic.x", 7), buf, kernel.MODES[mode]
    )
    assert (data, consumed, batches) == (ref.data, ref.consumed, len(ref.batch_ends))
    assert last == (ref.last_offsets[-1] if ref.last_offsets else -1)
    lines = ref.data.splitlines(keepends=True)
    assert ends == _q([sum(map(len, lines[: i + 1])) for i in range(len(lines))])
    assert stamps == _q([orjson.loads(line)["timestamp"] for line in lines])


@given(st.lists(record, max_size=6), attributes, int64, int64, int64, st.sampled_from(MODES),
       st.tuples(bound, bound, bound, bound))
def test_stamped_render_alike(records, attrs, base_offset, first_ts, max_ts, mode, bounds):
    data = _section(records)
    header = _header(len(records), attrs, base_offset, first_ts, max_ts, 4242)
    got = _kernel(kernel.render_raw, line_prefix("topic.x", 7), data, header, mode, *bounds, 4)
    ref = _reference(_ref_render, data, header, mode, *bounds)
    if ref == "refused":
        assert got == "refused"
        return
    lines, offsets = ref
    stamps = [orjson.loads(line)["timestamp"] for line in lines]
    ends = [sum(map(len, lines[: i + 1])) for i in range(len(lines))]
    assert got == (b"".join(lines), _q(offsets), _q(stamps), _q(ends))


def test_stamped_lines_of_a_whole_batch_match_the_python_way(monkeypatch):
    """render_raw_jsonl_stamped of a batch: the kernel's answer and the Python fallback's are the same."""
    from kafkafs.format.batch import encode_batch

    raw = encode_batch([(5, b"k", b'{"a": 1}', ()), (3, None, b"x", (("h", b"\xff"),))], base_offset=10,
                       log_append_time=None)
    got = render_raw_jsonl_stamped("t", 0, raw)
    monkeypatch.setattr(kernel, "KERNEL", None)
    assert render_raw_jsonl_stamped("t", 0, raw) == got
    assert got[1:3] == (_q([10, 11]), _q([5, 3]))
