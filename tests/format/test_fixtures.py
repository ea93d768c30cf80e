"""Every batch a real broker (and other clients' test suites) wrote decodes, with valid CRCs."""

from pathlib import Path

import orjson
import pytest

from kafkafs.format.batch import decode_batch, scan_batches, validate_batch
from kafkafs.format.jsonview import render_batch_jsonl, render_record

from ..conftest import FIXTURES


def _files():
    logs = sorted(FIXTURES.glob("kafka-logs-*/*/*.log"))
    vectors = sorted(FIXTURES.glob("vectors/*.bin"))
    return logs + vectors


@pytest.mark.parametrize("path", _files(), ids=lambda p: f"{p.parent.name}/{p.name}")
def test_every_batch_decodes_and_validates(path: Path):
    data = path.read_bytes()
    end = 0
    for header in scan_batches(data):
        validate_batch(data, header)
        batch = decode_batch(data, header)
        assert len(batch) == header.record_count
        if len(batch):
            assert batch.offsets[0] >= header.base_offset
            assert batch.offsets[-1] <= header.last_offset
            for line in render_batch_jsonl("t", 0, batch).splitlines():
                orjson.loads(line)
        end = header.end
    assert end == len(data), "no trailing bytes in a cleanly written file"


def test_consumer_offsets_segment_counts():
    data = (FIXTURES / "kafka-logs-a/__consumer_offsets-12/00000000000000000000.log").read_bytes()
    headers = list(scan_batches(data))
    assert len(headers) == 147
    assert headers[0].base_offset == 0 and headers[-1].last_offset == 861


def _wanjohi():
    data = (FIXTURES / "kafka-logs-b/wanjohi-0/00000000000000000000.log").read_bytes()
    return [decode_batch(data, h) for h in scan_batches(data)]


def test_wanjohi_record_3_json_view():
    batches = _wanjohi()
    batch = next(b for b in batches if 3 in b.offsets)
    line = render_record("wanjohi", 0, batch, batch.offsets.index(3))
    assert line == (
        b'{"topic":"wanjohi","partition":0,"offset":3,"timestamp":1722036335387,'
        b'"timestampType":"CreateTime","key":null,'
        b'"value":{"id":1,"firstname":"wanjohi","lastname":"Lewis"},'
        b'"headers":[{"key":"__TypeId__","value":"DevLewi.kafka.payload.Student"}]}\n'
    )


def test_wanjohi_offsets_4_and_5_carry_a_header_and_json():
    records = {o: (b, i) for b in _wanjohi() for i, o in enumerate(b.offsets)}
    for offset in (4, 5):
        batch, i = records[offset]
        obj = orjson.loads(render_record("wanjohi", 0, batch, i))
        assert obj["headers"][0]["key"] == "__TypeId__"
        assert isinstance(obj["value"], dict) and obj["value"]["id"] == 1
    assert list(orjson.loads(render_record("wanjohi", 0, *records[5]))) == [
        "topic", "partition", "offset", "timestamp", "timestampType", "key", "value", "headers",
    ]
