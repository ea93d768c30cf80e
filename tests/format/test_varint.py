import pytest
from hypothesis import given
from hypothesis import strategies as st

from kafkafs.errors import CorruptRecordError
from kafkafs.format.varint import encode_uvarint, encode_varint, encode_varlong, read_varint, read_varlong


@pytest.mark.parametrize(
    "value, encoded",
    [
        (0, b"\x00"),
        (-1, b"\x01"),
        (1, b"\x02"),
        (63, b"\x7e"),
        (-64, b"\x7f"),
        (64, b"\x80\x01"),
        (2**31 - 1, b"\xfe\xff\xff\xff\x0f"),
        (-(2**31), b"\xff\xff\xff\xff\x0f"),
    ],
)
def test_known_encodings(value, encoded):
    assert encode_varint(value) == encoded
    assert read_varint(encoded, 0) == (value, len(encoded))


@given(st.integers(-(2**31), 2**31 - 1))
def test_varint_round_trip(value):
    data = encode_varint(value)
    assert read_varint(data + b"\xff", 0) == (value, len(data))


@given(st.integers(-(2**63), 2**63 - 1))
def test_varlong_round_trip(value):
    data = encode_varlong(value)
    assert len(data) <= 10
    assert read_varlong(b"\x00" + data, 1) == (value, 1 + len(data))


def test_too_long_is_corrupt():
    with pytest.raises(CorruptRecordError, match="longer than 5"):
        read_varint(b"\x80\x80\x80\x80\x80\x01", 0)
    with pytest.raises(CorruptRecordError, match="longer than 10"):
        read_varlong(b"\x80" * 10 + b"\x01", 0)


def test_truncated_is_an_index_error():
    """Reading past the end is an IndexError (no check per byte): the record decoder's caller says it
    is damage."""
    with pytest.raises(IndexError):
        read_varint(b"\x80\x80", 0)
    with pytest.raises(IndexError):
        read_varlong(b"\xff", 0)


def test_agrees_with_kafka_python():
    from kafka.record.util import decode_varint as kp_decode
    from kafka.record.util import encode_varint as kp_encode

    for value in [0, 1, -1, 300, -300, 2**31 - 1, -(2**31), 2**40, -(2**62)]:
        out = bytearray()
        kp_encode(value, out.append)
        assert bytes(out) == encode_varlong(value)
        assert kp_decode(encode_varlong(value), 0)[0] == value


@given(st.integers(0, 2**70))
def test_uvarint_is_base128_little_endian(raw):
    """The unsigned form the decoders' writers use: 7 bits a byte, low first, high bit = more."""
    data = encode_uvarint(raw)
    assert all(b & 0x80 for b in data[:-1]) and data[-1] < 0x80
    assert sum((b & 0x7F) << (7 * i) for i, b in enumerate(data)) == raw


def test_uvarint_of_a_negative_is_refused():
    with pytest.raises(ValueError):
        encode_uvarint(-1)


def test_out_of_range_is_corrupt():
    with pytest.raises(CorruptRecordError, match="out of 32-bit range"):
        read_varint(b"\xff\xff\xff\xff\x1f", 0)
