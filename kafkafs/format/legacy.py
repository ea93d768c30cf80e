"""Read-only decoding of legacy message sets (magic 0 and 1), as found in segments written before 0.11.

An entry is ``offset i64, size i32`` then a message of ``size`` bytes::

    crc u32 (CRC-32 of everything after it), magic i8, attributes i8,
    [timestamp i64, magic 1 only], key (i32 length, -1 null), value (i32 length, -1 null)

Attributes: bits 0-2 the codec, bit 3 (magic 1) LogAppendTime. A compressed message is a wrapper whose
value is an inner message set, compressed. The rules for what is inside, as Kafka's
``AbstractLegacyRecordBatch`` reads it:

- inner messages are never compressed themselves, carry the wrapper's magic, and there is at least one;
- magic 0: inner offsets are absolute, and the wrapper's offset is the last of them (Kafka's
  ``MemoryRecordsBuilder`` writes it so; 0 is taken as a client's set, as for magic 1);
- inner offsets strictly increase (offsets that go backwards are damage, SPEC §4; Kafka's reader does
  not check, its ``kafka-dump-log --deep-iteration`` says "Non-consecutive offsets");
- magic 1: inner offsets are relative, and the wrapper's offset is the absolute offset of the LAST inner
  message, so ``absolute = wrapper offset - last inner offset + inner offset`` (gaps left by compaction
  survive). A wrapper offset of 0 means base 0 (some librdkafka versions wrote that);
- magic 1: inner messages take the wrapper's timestamp type, and with LogAppendTime also its timestamp;
  the wrapper's timestamp is the entry's max timestamp.

Stricter than Kafka, since no writer produces these: bytes left over after a message's value, or after
the last whole inner message (Java stops silently at a cut-off inner message), are corruption. Inner
messages carry their own CRC; with ``validate_crc`` it is checked along with the wrapper's, with
``inner_crcs`` alone (the wrapper's checked already): Kafka's recovery checks the wrapper's only, its
consumer (``check.crcs``) every inner one, so one that fails is damage to ``verify``, named by its offset.

Errors are ``CorruptRecordError`` whose position is the entry's start (inner positions would be in
decompressed bytes, meaningless in a file); the reason says what and where inside.
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass, field

from kafkafs.errors import CorruptRecordError, UninflatableBatch
from kafkafs.format import Buffer
from kafkafs.format.compression import Codec, decompress

__all__ = [
    "LOG_OVERHEAD",
    "LegacyEntry",
    "LegacyHeader",
    "decode_legacy_entry",
    "legacy_entry_size",
]

LOG_OVERHEAD = 12  # offset i64 + size i32
MIN_MESSAGE_SIZE = {0: 14, 1: 22}  # crc, magic, attributes, [timestamp], key length, value length
_MIN_SIZE = MIN_MESSAGE_SIZE[0]

_PREFIX = struct.Struct(">qi")  # offset, size
_HEAD = struct.Struct(">IbB")  # crc, magic, attributes (read at entry + 12)
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")

_TIMESTAMP_TYPE_BIT = 0x08
NO_TIMESTAMP = -1
NO_TIMESTAMP_TYPE = -1


@dataclass(slots=True)
class LegacyHeader:
    """What the outer message says, without inflating it (enough for recovery and index rebuilds)."""

    position: int
    size: int  # whole entry, including the 12-byte offset/size prefix
    magic: int
    attributes: int
    crc: int
    last_offset: int  # the entry's offset field: the last offset it holds
    max_timestamp: int  # the outer timestamp (magic 1), else -1
    timestamp_type: int  # 0 CreateTime, 1 LogAppendTime, -1 none (magic 0)

    @property
    def codec(self) -> Codec:
        return Codec(self.attributes & 0x07)


@dataclass(slots=True)
class LegacyEntry(LegacyHeader):
    """A decoded entry: its header and one column per record field (headers are always empty)."""

    offsets: list[int] = field(default_factory=list)
    timestamps: list[int] = field(default_factory=list)
    keys: list[bytes | None] = field(default_factory=list)
    values: list[bytes | None] = field(default_factory=list)


def legacy_entry_size(buf: Buffer, pos: int) -> int | None:
    """Bytes of the entry at ``pos`` (prefix included), or None if ``buf`` ends before it does.

    A size field below the smallest message is corruption; a size reaching past the end of ``buf`` is a
    partial entry (a torn write or simply not yet read): None, for the caller to decide.
    """
    if pos < 0:
        raise CorruptRecordError("negative position", pos)
    if len(buf) - pos < LOG_OVERHEAD:
        return None
    size: int = _PREFIX.unpack_from(buf, pos)[1]
    if size < _MIN_SIZE:
        raise CorruptRecordError(f"message size {size} is below the minimum of {_MIN_SIZE}", pos)
    if len(buf) - pos - LOG_OVERHEAD < size:
        return None
    return LOG_OVERHEAD + size


def decode_legacy_entry(
    buf: Buffer, pos: int, max_size: int, validate_crc: bool = True, *, ordered: bool = True,
    inner_crcs: bool = False,
) -> LegacyEntry:
    """Decode the entry at ``pos`` into columns; a compressed wrapper yields all its inner records.

    ``max_size`` bounds the inflated inner message set of a wrapper. With ``validate_crc`` the CRC of
    the outer message and of every inner one is checked; with ``inner_crcs`` every inner one's only. With ``ordered`` (readers), inner offsets that
    go backwards, or a magic 0 wrapper not at its last inner offset, are corruption; a dump passes
    False and prints them as Kafka's tool does. The entry must be whole (see
    ``legacy_entry_size``); a truncated one is corruption here.
    """
    h, message = _read_outer(buf, pos, validate_crc)
    entry = LegacyEntry(
        h.position, h.size, h.magic, h.attributes, h.crc, h.last_offset, h.max_timestamp, h.timestamp_type
    )
    codec_id = h.attributes & 0x07
    key, value = _key_value(message, h.magic, pos, "message")
    if codec_id == Codec.NONE:
        entry.offsets.append(h.last_offset)
        entry.timestamps.append(h.max_timestamp)
        entry.keys.append(key)
        entry.values.append(value)
        return entry
    if value is None:
        raise CorruptRecordError("compressed message has a null value", pos)
    try:
        inner = decompress(Codec(codec_id), value, max_size)
    except UninflatableBatch as e:  # the wrapper's first offset is inside what does not inflate
        raise e.of_batch(pos, None, h.last_offset + 1) from None
    except CorruptRecordError as e:
        raise CorruptRecordError(e.reason, pos) from None
    _decode_inner(inner, entry, validate_crc or inner_crcs, ordered)
    return entry


def _read_outer(
    buf: Buffer, pos: int, validate_crc: bool
) -> tuple[LegacyHeader, bytes]:
    size = legacy_entry_size(buf, pos)
    if size is None:
        raise CorruptRecordError(f"entry is truncated: {len(buf) - pos} bytes left", pos)
    # One private copy of the message: slices of it are bytes, and no view of the caller's buffer
    # (maybe an mmap) outlives this call.
    message = bytes(buf[pos + LOG_OVERHEAD : pos + size])
    (offset,) = _I64.unpack_from(buf, pos)
    crc, magic, attributes = _HEAD.unpack_from(message)
    _check_message(message, magic, pos, "message")
    if attributes & 0x07 > Codec.LZ4:  # zstd came with magic 2; 5-7 were never codecs
        raise CorruptRecordError(f"compression codec {attributes & 0x07} is not valid for magic {magic}", pos)
    if validate_crc:
        _check_crc(message, crc, pos, "message")
    if magic == 1:
        (timestamp,) = _I64.unpack_from(message, 6)
        timestamp_type = 1 if attributes & _TIMESTAMP_TYPE_BIT else 0
    else:
        timestamp, timestamp_type = NO_TIMESTAMP, NO_TIMESTAMP_TYPE
    header = LegacyHeader(pos, size, magic, attributes, crc, offset, timestamp, timestamp_type)
    return header, message


def _check_message(message: bytes, magic: int, pos: int, what: str) -> None:
    if magic not in MIN_MESSAGE_SIZE:
        raise CorruptRecordError(f"{what} magic {magic} is not a legacy format (0 or 1)", pos)
    if len(message) < MIN_MESSAGE_SIZE[magic]:
        raise CorruptRecordError(
            f"{what} size {len(message)} is below the minimum of {MIN_MESSAGE_SIZE[magic]} for magic {magic}",
            pos,
        )


def _check_crc(message: bytes, stored: int, pos: int, what: str) -> None:
    computed = zlib.crc32(memoryview(message)[4:])
    if computed != stored:
        raise CorruptRecordError(
            f"{what} crc mismatch: stored {stored:#010x}, computed {computed:#010x}", pos
        )


def _key_value(message: bytes, magic: int, pos: int, what: str) -> tuple[bytes | None, bytes | None]:
    """Key and value of a message whose header has been checked; they must fill it exactly."""
    at = 14 if magic == 1 else 6  # after crc, magic, attributes [, timestamp]
    fields: list[bytes | None] = []
    for name in ("key", "value"):
        if len(message) - at < 4:
            raise CorruptRecordError(f"{what} ends inside its {name} length", pos)
        (length,) = _I32.unpack_from(message, at)
        at += 4
        if length == -1:
            fields.append(None)
            continue
        if length < 0 or length > len(message) - at:
            raise CorruptRecordError(
                f"{what} {name} length {length} does not fit the {len(message) - at} bytes left", pos
            )
        fields.append(message[at : at + length])
        at += length
    if at != len(message):
        raise CorruptRecordError(f"{what} has {len(message) - at} bytes after its value", pos)
    return fields[0], fields[1]


def _decode_inner(inner: bytes, entry: LegacyEntry, validate_crc: bool, ordered: bool = True) -> None:
    """Fill ``entry``'s columns from the inflated message set of its wrapper."""
    pos = entry.position
    log_append = entry.timestamp_type == 1
    offsets = entry.offsets
    timestamps = entry.timestamps
    at = 0
    end = len(inner)
    bad_crc: tuple[int, int, int] | None = None  # (index, stored, computed) of the first that fails
    while at < end:
        if end - at < LOG_OVERHEAD:
            raise CorruptRecordError(f"inner message set ends inside a message header at byte {at}", pos)
        offset, size = _PREFIX.unpack_from(inner, at)
        if size < _MIN_SIZE or size > end - at - LOG_OVERHEAD:
            raise CorruptRecordError(f"inner message size {size} at byte {at} does not fit", pos)
        message = inner[at + LOG_OVERHEAD : at + LOG_OVERHEAD + size]
        at += LOG_OVERHEAD + size
        crc, magic, attributes = _HEAD.unpack_from(message)
        _check_message(message, magic, pos, "inner message")
        if magic != entry.magic:
            raise CorruptRecordError(
                f"inner message magic {magic} differs from its wrapper's {entry.magic}", pos
            )
        if attributes & 0x07:
            raise CorruptRecordError("inner message is compressed again (nested wrappers)", pos)
        if validate_crc and bad_crc is None:
            computed = zlib.crc32(memoryview(message)[4:])
            if computed != crc:  # said once its offset is known (magic 1: once the last one is)
                bad_crc = (len(offsets), crc, computed)
        key, value = _key_value(message, magic, pos, "inner message")
        offsets.append(offset)
        if magic == 0:
            timestamps.append(NO_TIMESTAMP)
        elif log_append:
            timestamps.append(entry.max_timestamp)
        else:
            timestamps.append(_I64.unpack_from(message, 6)[0])
        entry.keys.append(key)
        entry.values.append(value)
    if not offsets:
        raise CorruptRecordError("compressed message holds no inner messages", pos)
    for i in range(1, len(offsets) if ordered else 0):
        if offsets[i] <= offsets[i - 1]:
            raise CorruptRecordError(
                f"inner offsets go backwards: {offsets[i - 1]} is followed by {offsets[i]}", pos
            )
    if ordered and entry.magic == 0 and entry.last_offset != 0 and offsets[-1] != entry.last_offset:
        # Kafka writes a magic 0 wrapper at its last inner offset (inner offsets are absolute): any other
        # offset puts records before or after their neighbours in the log, where no reader looks (0: a
        # client's set that no broker assigned offsets to, as for magic 1)
        raise CorruptRecordError(
            f"wrapper offset {entry.last_offset} is not its last inner offset {offsets[-1]}", pos
        )
    if entry.magic == 1 and entry.last_offset != 0:
        last_inner = offsets[-1]
        if entry.last_offset < last_inner:
            raise CorruptRecordError(
                f"wrapper offset {entry.last_offset} is below its last inner offset {last_inner}", pos
            )
        base = entry.last_offset - last_inner
        entry.offsets = [base + o for o in offsets]
    if bad_crc is not None:
        index, stored, computed = bad_crc
        raise CorruptRecordError(
            f"inner message at offset {entry.offsets[index]}: crc mismatch: stored {stored:#010x}, "
            f"computed {computed:#010x}", pos
        )
