"""The compiled record reader (aiokafka's, when installed) and the pure-Python reference decoder give
the same columns; on damaged bytes they differ only where a varint is written in more bytes than needed
(which the compiled reader misreads), which is why decode_batch uses it only after a CRC check."""

import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kafkafs.errors import CorruptRecordError
from kafkafs.format import batch as batch_module
from kafkafs.format.batch import V2_HEADER_SIZE, encode_batch, read_batch_header

pytestmark = pytest.mark.skipif(batch_module._CompiledBatch is None, reason="aiokafka is not installed")

maybe_bytes = st.one_of(st.none(), st.binary(max_size=40))
records_strategy = st.lists(
    st.tuples(
        st.integers(-(2**40), 2**42),
        maybe_bytes,
        maybe_bytes,
        st.lists(st.tuples(st.text(max_size=8), maybe_bytes), max_size=3).map(tuple),
    ),
    min_size=1,
    max_size=15,
)


_NON_MINIMAL_VARINT = re.compile(rb"[\x80-\xff]\x00")


def _columns(decoded):
    return (
        decoded.offsets,
        decoded.timestamps,
        decoded.keys,
        decoded.values,
        [tuple((h.key, h.value) for h in hs) for hs in decoded.headers],
    )


def _split(data: bytes):
    header = read_batch_header(data)
    return header, data[V2_HEADER_SIZE : header.end]


@settings(max_examples=200, suppress_health_check=[HealthCheck.too_slow])
@given(records=records_strategy, base=st.integers(0, 2**40), log_append=st.booleans())
def test_same_columns(records, base, log_append):
    data = encode_batch(records, base_offset=base, log_append_time=7 if log_append else None)
    header, section = _split(data)
    compiled = batch_module._decode_records_compiled(section, header)
    if compiled is not None:  # None: left to the reference (see _decode_records_compiled)
        assert _columns(compiled) == _columns(batch_module._decode_records(section, header))


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    records=records_strategy,
    flips=st.lists(st.tuples(st.integers(0, 4000), st.integers(1, 255)), min_size=1, max_size=3),
)
def test_on_damaged_bytes_the_decoders_differ_only_by_non_minimal_varints(records, flips):
    header, section = _split(encode_batch(records))
    damaged = bytearray(section)
    for pos, xor in flips:
        damaged[pos % len(damaged)] ^= xor
    damaged = bytes(damaged)
    if _NON_MINIMAL_VARINT.search(damaged):
        return  # a byte with the continuation bit, then zero: possibly a non-minimal varint
    compiled = batch_module._decode_records_compiled(damaged, header)
    try:
        reference = batch_module._decode_records(damaged, header)
    except (CorruptRecordError, IndexError, ValueError, OverflowError):
        reference = None
    if compiled is not None:
        assert reference is not None and _columns(compiled) == _columns(reference)


def test_text_payloads_take_the_compiled_path():
    records = [(1_763_700_000_000 + i, b"key-%d" % i, b'{"n":%d}' % i, (("h", b"v"),)) for i in range(100)]
    header, section = _split(encode_batch(records))
    compiled = batch_module._decode_records_compiled(section, header)
    assert compiled is not None
    assert _columns(compiled) == _columns(batch_module._decode_records(section, header))


def test_unchecked_bytes_take_the_reference_decoder(monkeypatch):
    calls = []
    real = batch_module._decode_records_compiled
    monkeypatch.setattr(batch_module, "_decode_records_compiled", lambda *a: calls.append(1) or real(*a))
    data = encode_batch([(5, b"k", b"v", ())] * 3)
    batch_module.decode_batch(data, validate=False)
    assert calls == []
    batch_module.decode_batch(data, validate=True)
    assert calls == [1]


def test_a_non_minimal_varint_is_read_as_kafka_reads_it():
    # a timestampDelta of 0 written in two bytes (80 00) in an otherwise valid batch
    records = bytes.fromhex("0e" "00" "8000" "00" "01" "01" "00")
    header = read_batch_header(encode_batch([(5, None, None, ())]))
    header = header._replace(record_count=1, batch_length=header.batch_length + 1)
    assert batch_module._decode_records(records, header).timestamps == [5]


def test_the_reference_decoder_alone_passes_the_round_trip(monkeypatch):
    monkeypatch.setattr(batch_module, "_CompiledBatch", None)
    records = [(i, b"k%d" % i, b"v" * i, (("h", b"x"),)) for i in range(30)]
    decoded = batch_module.decode_batch(encode_batch(records, base_offset=5))
    assert decoded.offsets == list(range(5, 35)) and decoded.values[3] == b"vvv"
