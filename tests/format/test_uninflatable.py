"""R15-7: a batch whose records inflate past the limit is :class:`UninflatableBatch` (valid data that
kafkafs does not decode), with the batch's offsets, kept through every re-placing of the error; a codec
error never is (it stays damage)."""

from __future__ import annotations

import pickle

import pytest

from kafkafs.errors import CorruptRecordError, UninflatableBatch, said_again
from kafkafs.format.batch import Codec, decode_batch, encode_batch
from kafkafs.format.compression import compress, decompress
from kafkafs.format.legacy import decode_legacy_entry
from kafkafs.storage.records import BatchView

from .test_legacy import message, wrapper

COMPRESSED = [c for c in Codec if c != Codec.NONE]
DATA = b"kafka log segment " * 400


@pytest.mark.parametrize("codec", COMPRESSED, ids=lambda c: c.name)
def test_past_the_limit_is_uninflatable_and_a_codec_error_is_not(codec):
    packed = compress(codec, DATA)
    with pytest.raises(UninflatableBatch, match=f"inflates past {len(DATA) - 1} bytes") as info:
        decompress(codec, packed, len(DATA) - 1)
    assert info.value.limit == len(DATA) - 1
    with pytest.raises(CorruptRecordError) as bad:  # cut in the middle: a codec error, under the limit
        decompress(codec, packed[: len(packed) // 2], len(DATA))
    assert not isinstance(bad.value, UninflatableBatch), bad.value


@pytest.mark.parametrize("codec", COMPRESSED, ids=lambda c: c.name)
def test_a_batch_says_its_offsets_and_keeps_them_when_placed(codec):
    records = [(1_763_700_000_000 + i, b"k%d" % i, DATA, ()) for i in range(3)]
    buf = b"\0" * 7 + encode_batch(records, base_offset=40, compression=codec)
    with pytest.raises(UninflatableBatch) as info:
        decode_batch(buf, 7, max_inflated_bytes=len(DATA))
    exc = info.value
    assert (exc.position, exc.base_offset, exc.next_offset, exc.limit) == (7, 40, 43, len(DATA))
    assert decode_batch(buf, 7).offsets == [40, 41, 42]  # the default limit holds it
    view = BatchView(buf, decode_batch(buf, 7).header, 1000)
    with pytest.raises(UninflatableBatch) as placed:
        view.decode(max_inflated_bytes=len(DATA), file="seg.log")
    assert (placed.value.position, placed.value.file) == (1007, "seg.log")
    assert (placed.value.base_offset, placed.value.next_offset) == (40, 43)
    moved = exc.at("x.log", 100)
    assert isinstance(moved, UninflatableBatch) and (moved.position, moved.file, moved.next_offset) == (107, "x.log", 43)
    assert str(moved) == f"x.log: position 107: {codec.name.lower()} data inflates past {len(DATA)} bytes"
    again = pickle.loads(pickle.dumps(moved))
    assert type(again) is UninflatableBatch and again.__dict__ == moved.__dict__ and str(again) == str(moved)
    said = moved.in_partition("t-3", 0)
    assert said.not_shown() == f"offsets 40..42 of t-3 not shown: a batch inflates past {len(DATA)} bytes"
    assert UninflatableBatch("x", limit=64 << 20).size_text == "64 MiB"


def test_a_legacy_wrapper_says_its_next_offset():
    inner = message(8, 1, key=b"k", value=DATA) + message(9, 1, key=b"k", value=DATA)
    buf = wrapper(1, Codec.GZIP, inner, 9)
    with pytest.raises(UninflatableBatch) as info:
        decode_legacy_entry(buf, 0, len(DATA))
    assert (info.value.base_offset, info.value.next_offset, info.value.position) == (None, 10, 0)
    assert info.value.in_partition("t-0", 8).offsets_text() == "8..9"


def test_a_kept_reason_is_said_again_as_what_it_was():
    kept = said_again("zstd data inflates past 67108864 bytes", 12, "a.log")
    assert isinstance(kept, UninflatableBatch) and kept.limit == 64 << 20 and (kept.position, kept.file) == (12, "a.log")
    other = said_again("CRC mismatch", 12, "a.log")
    assert type(other) is CorruptRecordError
