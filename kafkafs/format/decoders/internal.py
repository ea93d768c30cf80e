"""Kafka's internal topics as their writers meant them (SPEC §8), through the generic schema reader.

* ``__consumer_offsets``: a key is ``i16 type`` then the key message of that type (0 and 1 offset
  commit, 2 group metadata, 3.. the new group coordinator's records); a value is ``i16 version`` then
  the value message of the key's type at that version; a null value is a tombstone. Shapes as
  ``kafka-dump-log --offsets-decoder`` prints them, with numbers for ``type`` and ``version``:
  ``{"type": 1, "data": {...}}`` and ``{"version": 3, "data": {...}}``. A group-metadata value of
  protocol type ``consumer`` has each member's ``subscription`` and ``assignment`` decoded as the
  consumer protocol writes them (``i16 version`` then the message); bytes that do not decode stay base64.
* ``__transaction_state``: ``i16 version`` + TransactionLogKey, ``i16 version`` + TransactionLogValue.
* ``__cluster_metadata``: a value is framed ``uvarint frameVersion (1), uvarint apiKey, uvarint
  version`` then the record (Kafka's AbstractApiMessageSerde); shown as ``{"type":
  "FEATURE_LEVEL_RECORD", "version": 0, "data": {...}}``. KRaft control records (LeaderChangeMessage,
  SnapshotHeader/Footer, KRaftVersion, Voters) carry their own ``version`` field first and are read
  at version 0, as Kafka's ControlRecordUtils does; their key is ``{"version": 0, "type": 2}``.

Every function raises :class:`CorruptRecordError` when its bytes do not decode. Stateless, thread-safe.
"""

from __future__ import annotations

import struct
from functools import cache

from ...errors import CorruptRecordError
from ..varint import encode_uvarint
from .schema import Message, _Reader, message, message_names

__all__ = [
    "offsets_key",
    "offsets_value",
    "transaction_key",
    "transaction_value",
    "metadata_record",
    "metadata_types",
    "control_key",
    "control_value",
    "CONTROL_MESSAGES",
    "OFFSETS_RECORD_TYPES",
]

_I16 = struct.Struct(">h")

#: The record type (the key's leading i16) of ``__consumer_offsets`` to its key/value message names,
#: as Kafka's GroupCoordinatorRecordSerde maps them.
OFFSETS_RECORD_TYPES: dict[int, str] = {
    0: "OffsetCommit",
    1: "OffsetCommit",
    2: "GroupMetadata",
    3: "ConsumerGroupMetadata",
    4: "ConsumerGroupPartitionMetadata",
    5: "ConsumerGroupMemberMetadata",
    6: "ConsumerGroupTargetAssignmentMetadata",
    7: "ConsumerGroupTargetAssignmentMember",
    8: "ConsumerGroupCurrentMemberAssignment",
    9: "ShareGroupPartitionMetadata",
    10: "ShareGroupMemberMetadata",
    11: "ShareGroupMetadata",
    12: "ShareGroupTargetAssignmentMetadata",
    13: "ShareGroupTargetAssignmentMember",
    14: "ShareGroupCurrentMemberAssignment",
    15: "ShareGroupStatePartitionMetadata",
}

#: The KRaft control record types (ControlRecordType ids) and the message their value holds.
CONTROL_MESSAGES: dict[int, str] = {
    2: "LeaderChangeMessage",
    3: "SnapshotHeaderRecord",
    4: "SnapshotFooterRecord",
    5: "KRaftVersionRecord",
    6: "VotersRecord",
}


def _i16(data: bytes, what: str) -> int:
    if data is None or len(data) < 2:
        raise CorruptRecordError(f"{what} too short for its version")
    return _I16.unpack_from(data, 0)[0]


def offsets_key(data: bytes) -> dict:
    """A ``__consumer_offsets`` key: ``{"type": 1, "data": {"group", "topic", "partition"}}``."""
    kind = _i16(data, "offsets key")
    name = OFFSETS_RECORD_TYPES.get(kind)
    if name is None:
        raise CorruptRecordError(f"unknown __consumer_offsets record type {kind}")
    return {"type": kind, "data": message(name + "Key").read(data, kind, 2, whole=False)}


def offsets_value(data: bytes | None, key: bytes | None = None) -> dict | None:
    """A ``__consumer_offsets`` value: ``{"version": 3, "data": {...}}``, None for a tombstone. The key
    (when given) names the value's type; without it an offset commit is assumed unless the value only
    decodes as group metadata."""
    if data is None:
        return None
    version = _i16(data, "offsets value")
    if key is not None:
        names = [OFFSETS_RECORD_TYPES.get(_i16(key, "offsets key"))]
        if names[0] is None:
            raise CorruptRecordError(f"unknown __consumer_offsets record type {_i16(key, 'offsets key')}")
    else:
        names = ["OffsetCommit", "GroupMetadata"]
    error: CorruptRecordError | None = None
    for name in names:
        try:
            # Kafka's generated readers stop after the last field: bytes after it are ignored (as
            # kafka-dump-log's decoder does), unless the type is guessed, where they tell the two apart
            body = message(f"{name}Value").read(data, version, 2, whole=key is None)
        except CorruptRecordError as exc:
            error = error or exc
            continue
        if name == "GroupMetadata":
            decode_members(body)
        return {"version": version, "data": body}
    raise error  # type: ignore[misc]  # names is never empty: every name failed, so error is set


def decode_members(body: dict) -> None:
    """Each member's subscription and assignment decoded in place, as DumpLogSegments does for groups of
    protocol type ``consumer``; bytes that do not decode keep their base64."""
    if body.get("protocolType") != "consumer":
        return
    import base64

    for member in body.get("members") or ():
        for field, name in (("subscription", "ConsumerProtocolSubscription"),
                            ("assignment", "ConsumerProtocolAssignment")):
            text = member.get(field)
            if not isinstance(text, str):
                continue
            raw = base64.b64decode(text)
            try:
                version = _i16(raw, field)
                schema = message(name)
                # a newer version parses as the newest known, as Kafka's ConsumerProtocol does
                member[field] = schema.read(raw, min(version, schema.valid.hi), 2, whole=version <= schema.valid.hi)
            except CorruptRecordError:
                pass


def transaction_key(data: bytes) -> dict:
    """A ``__transaction_state`` key: ``{"type": 0, "data": {"transactionalId": "..."}}``."""
    version = _i16(data, "transaction key")
    return {"type": version, "data": message("TransactionLogKey").read(data, version, 2, whole=False)}


def transaction_value(data: bytes | None) -> dict | None:
    """A ``__transaction_state`` value: ``{"version": 1, "data": {...}}``, None for a tombstone."""
    if data is None:
        return None
    version = _i16(data, "transaction value")
    return {"version": version, "data": message("TransactionLogValue").read(data, version, 2, whole=False)}


@cache
def metadata_types() -> dict[int, Message]:
    """Every ``__cluster_metadata`` record definition by its apiKey."""
    out = {}
    for name in message_names():
        m = message(name)
        if m.spec.get("type") == "metadata" and m.api_key is not None:
            out[m.api_key] = m
    return out


def metadata_record(data: bytes) -> dict:
    """A ``__cluster_metadata`` value: ``{"type": "FEATURE_LEVEL_RECORD", "version": 0, "data": {...}}``."""
    if data is None:
        raise CorruptRecordError("a metadata record has no value")
    r = _Reader(bytes(data))
    frame = r.uvarint()
    if frame != 1:
        raise CorruptRecordError(f"metadata record frame version {frame} (only 1 is known)")
    api_key = r.uvarint()
    version = r.uvarint()
    m = metadata_types().get(api_key)
    if m is None:
        raise CorruptRecordError(f"unknown metadata record type {api_key}")
    return {"type": m.type_name, "version": version, "data": m.read(r.buf, version, r.pos)}


def metadata_frame(type_name_or_key: str | int, version: int, data: dict) -> bytes:
    """The bytes of a metadata record (the reverse of :func:`metadata_record`), for building logs."""
    types = metadata_types()
    if isinstance(type_name_or_key, str):
        m = next(m for m in types.values() if m.type_name == type_name_or_key)
    else:
        m = types[type_name_or_key]
    assert m.api_key is not None  # every metadata record type has its api key
    return bytes([1]) + encode_uvarint(m.api_key) + encode_uvarint(version) + m.write(data, version)


def control_key(data: bytes | None) -> dict:
    """A control record's key, ``{"version": 0, "type": 2}`` (Kafka's ControlRecordType key schema)."""
    if data is None or len(data) < 4:
        raise CorruptRecordError("a control record key has fewer than 4 bytes")
    version, kind = struct.unpack_from(">hh", data, 0)
    return {"version": version, "type": kind}


def control_value(key: bytes | None, data: bytes | None) -> dict:
    """A control record's value: a transaction marker's ``{"version", "coordinatorEpoch"}``, or the KRaft
    message of the key's type read at version 0 (its own ``version`` field comes first)."""
    kind = control_key(key)["type"]
    if kind in (0, 1):
        if data is None or len(data) < 6:
            raise CorruptRecordError("an end transaction marker has fewer than 6 bytes")
        version, epoch = struct.unpack_from(">hi", data, 0)
        return {"version": version, "coordinatorEpoch": epoch}
    name = CONTROL_MESSAGES.get(kind)
    if name is None or data is None:
        raise CorruptRecordError(f"unknown control record type {kind}")
    return message(name).read(data, 0)
