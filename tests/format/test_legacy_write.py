"""Writing a compressed magic 0/1 message again (what compaction does to one that loses records): read
back by kafkafs's reader and by kafka-python's, offsets and timestamps as Kafka's builder sets them."""

from __future__ import annotations

import pytest

from kafkafs.format.compression import Codec
from kafkafs.format.legacy import decode_legacy_entry
from kafkafs.format.legacy_write import encode_legacy_wrapper

from .test_legacy import MB, oracle, ours

ROWS = [(100, 1_700_000_000_005, b"a", b"1"), (103, 1_700_000_000_001, None, b"2"), (107, 1_700_000_000_003, b"c", None)]


@pytest.mark.parametrize(("magic", "codec"), [(0, Codec.GZIP), (0, Codec.SNAPPY), (1, Codec.GZIP), (1, Codec.SNAPPY),
                                              (1, Codec.LZ4)])
@pytest.mark.parametrize("log_append_time", [None, 1_800_000_000_000])
def test_a_rewritten_wrapper_reads_back_with_its_gaps(magic, codec, log_append_time):
    entry = encode_legacy_wrapper(ROWS, magic=magic, codec=codec, log_append_time=log_append_time)
    decoded = decode_legacy_entry(entry, 0, MB)
    assert decoded.offsets == [100, 103, 107] and decoded.last_offset == 107
    assert (decoded.keys, decoded.values) == ([b"a", None, b"c"], [b"1", b"2", None])
    if magic == 0:
        assert decoded.timestamps == [-1, -1, -1]
    elif log_append_time is None:  # CreateTime: the wrapper carries the largest inner timestamp
        assert decoded.timestamps == [r[1] for r in ROWS] and decoded.max_timestamp == 1_700_000_000_005
    else:
        assert decoded.timestamp_type == 1 and decoded.timestamps == [log_append_time] * 3
    assert ours(decoded) == oracle(entry)  # kafka-python reads the same records


def test_what_no_legacy_wrapper_holds_is_refused():
    with pytest.raises(ValueError):
        encode_legacy_wrapper([], magic=1, codec=Codec.GZIP)
    with pytest.raises(ValueError):
        encode_legacy_wrapper(ROWS, magic=1, codec=Codec.ZSTD)
    with pytest.raises(ValueError):
        encode_legacy_wrapper(ROWS, magic=2, codec=Codec.GZIP)
