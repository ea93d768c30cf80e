"""Kafka's internal topics as their writers meant them (SPEC §8), through the generic schema reader.

* Coordinator records (Kafka's ``CoordinatorRecordSerde``): a key is ``i16 type`` then the key message
  whose definition declares that ``apiKey`` (``"type": "coordinator-key"``); a value is ``i16 version``
  then the value message of the key's type at that version (a version outside its ``validVersions`` is
  refused); a null value is a tombstone; bytes after the last field are ignored, as Kafka's generated
  readers do. Shown as ``kafka-dump-log`` prints them, with numbers for ``type`` and ``version``:
  ``{"type": 1, "data": {...}}`` and ``{"version": 3, "data": {...}}``. Three topics hold them:
  ``__consumer_offsets`` (the group coordinator's records: classic groups, KIP-848 consumer groups,
  share groups, streams groups), ``__share_group_state`` (the share coordinator's) and
  ``__transaction_state`` (the transaction coordinator's). A group-metadata value of protocol type
  ``consumer`` has each member's ``subscription`` and ``assignment`` decoded as the consumer protocol
  writes them (``i16 version`` then the message); bytes that do not decode stay base64.
* ``__cluster_metadata`` and ``__remote_log_metadata``: a value is framed ``uvarint frameVersion (1),
  uvarint apiKey, uvarint version`` then the record (Kafka's AbstractApiMessageSerde); shown as
  ``{"type": "FEATURE_LEVEL_RECORD", "version": 0, "data": {...}}``. KRaft control records
  (LeaderChangeMessage, SnapshotHeader/Footer, KRaftVersion, Voters) carry their own ``version`` field
  first and are read at version 0, as Kafka's ControlRecordUtils does.
* Control records of any topic: the key ``{"version": 0, "type": 2}`` (exactly 4 bytes, Kafka's
  ControlRecordTypeSchema), a transaction marker's value ``{"version": 0, "coordinatorEpoch": 5}``
  (exactly 6 bytes, EndTxnMarker).

Every function raises :class:`CorruptRecordError` when its bytes do not decode. Stateless, thread-safe.
"""

from __future__ import annotations

import struct
from functools import cache

from ...errors import CorruptRecordError
from ..varint import encode_uvarint
from .definitions import kafka_version, names_from
from .fields import MessageObject
from .schema import Message, _Reader, message

__all__ = [
    "offsets_key",
    "offsets_value",
    "transaction_key",
    "transaction_value",
    "share_state_key",
    "share_state_value",
    "coordinator_key",
    "coordinator_value",
    "record_types",
    "metadata_record",
    "metadata_types",
    "remote_log_metadata_record",
    "remote_log_metadata_types",
    "control_key",
    "control_value",
    "CONTROL_MESSAGES",
    "COORDINATORS",
    "TXN_STATES",
    "with_state_name",
]

_I16 = struct.Struct(">h")

#: The coordinator whose records each internal topic holds (the jar its definitions come from).
COORDINATORS: dict[str, str] = {
    "offsets": "kafka-group-coordinator",
    "share-state": "kafka-share-coordinator",
    "transactions": "kafka-transaction-coordinator",
}

#: TransactionState ids as ``__transaction_state`` stores them, and the names Kafka prints for them.
TXN_STATES: dict[int, str] = {
    0: "Empty",
    1: "Ongoing",
    2: "PrepareCommit",
    3: "PrepareAbort",
    4: "CompleteCommit",
    5: "CompleteAbort",
    6: "Dead",
    7: "PrepareEpochFence",
}

#: The KRaft control record types (ControlRecordType ids) and the message their value holds.
CONTROL_MESSAGES: dict[int, str] = {
    2: "LeaderChangeMessage",
    3: "SnapshotHeaderRecord",
    4: "SnapshotFooterRecord",
    5: "KRaftVersionRecord",
    6: "VotersRecord",
}


def definitions_version() -> str:
    """The Kafka release whose definitions decode (renders change with it: caches key on it)."""
    return kafka_version()


def _i16(data: bytes, what: str) -> int:
    if data is None or len(data) < 2:
        raise CorruptRecordError(f"{what} too short for its version")
    value: int = _I16.unpack_from(data, 0)[0]
    return value


@cache
def record_types(kind: str) -> dict[int, str]:
    """A coordinator's record types (``kind``: a key of :data:`COORDINATORS`): the key's leading i16
    to the record's base name (``"OffsetCommit"``: ``OffsetCommitKey`` / ``OffsetCommitValue``), from the
    ``apiKey`` of every ``coordinator-key`` definition, as Kafka's generated CoordinatorRecordType."""
    out: dict[int, str] = {}
    for name in names_from(COORDINATORS[kind]):
        m = message(name)
        if m.spec.get("type") == "coordinator-key" and m.api_key is not None and name.endswith("Key"):
            out[m.api_key] = name[: -len("Key")]
    return dict(sorted(out.items()))


def coordinator_key(kind: str, data: bytes) -> MessageObject:
    """A coordinator record's key: ``{"type": 1, "data": {...}}``. Kafka's generated readers ignore the
    version a key is read at (every field of a key is in every version): read at its lowest."""
    record_type = _i16(data, "key")
    base = record_types(kind).get(record_type)
    if base is None:
        raise CorruptRecordError(f"unknown record type {record_type}")
    m = message(base + "Key")
    version = record_type if record_type in m.valid else m.valid.lo
    return {"type": record_type, "data": m.read(data, version, 2, whole=False)}


def coordinator_value(kind: str, data: bytes | None, key: bytes) -> MessageObject | None:
    """A coordinator record's value: ``{"version": 3, "data": {...}}``, None for a tombstone."""
    if data is None:
        return None
    record_type = _i16(key, "key")
    base = record_types(kind).get(record_type)
    if base is None:
        raise CorruptRecordError(f"unknown record type {record_type}")
    version = _i16(data, "value")
    m = message(base + "Value")
    if version not in m.valid:
        raise CorruptRecordError(f"Found an unknown record version {version} for {record_type} type")
    return {"version": version, "data": m.read(data, version, 2, whole=False)}


def offsets_key(data: bytes) -> MessageObject:
    """A ``__consumer_offsets`` key: ``{"type": 1, "data": {"group", "topic", "partition"}}``."""
    return coordinator_key("offsets", data)


def offsets_value(data: bytes | None, key: bytes | None = None) -> MessageObject | None:
    """A ``__consumer_offsets`` value: ``{"version": 3, "data": {...}}``, None for a tombstone. The key
    (when given) names the value's type; without it an offset commit is assumed unless the value only
    decodes as group metadata (then bytes after the last field tell the two apart)."""
    if data is None:
        return None
    if key is not None:
        out = coordinator_value("offsets", data, key)
        assert out is not None
        if record_types("offsets").get(_i16(key, "key")) == "GroupMetadata":
            decode_members(out["data"])
        return out
    version = _i16(data, "offsets value")
    error: CorruptRecordError | None = None
    for name in ("OffsetCommit", "GroupMetadata"):
        try:
            body = message(name + "Value").read(data, version, 2, whole=True)
        except CorruptRecordError as exc:
            error = error or exc
            continue
        if name == "GroupMetadata":
            decode_members(body)
        return {"version": version, "data": body}
    assert error is not None  # every name failed, so error is set
    raise error


def decode_members(body: MessageObject) -> None:
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


def transaction_key(data: bytes) -> MessageObject:
    """A ``__transaction_state`` key: ``{"type": 0, "data": {"transactionalId": "..."}}``."""
    return coordinator_key("transactions", data)


def transaction_value(data: bytes | None, key: bytes | None = None) -> MessageObject | None:
    """A ``__transaction_state`` value: ``{"version": 1, "data": {...}}``, None for a tombstone (every
    transaction record is of type 0: the key is not needed)."""
    return coordinator_value("transactions", data, key if key is not None else b"\x00\x00")


def with_state_name(value: MessageObject | None) -> MessageObject | None:
    """A decoded ``__transaction_state`` value as ``kafka-dump-log --transaction-log-decoder`` prints it:
    ``transactionStatus`` as the state's name (``"Ongoing"``), or its number as a string when Kafka
    knows no such state (Kafka 4.x's TransactionLogMessageParser)."""
    if value is None or "transactionStatus" not in value["data"]:
        return value
    status = value["data"]["transactionStatus"]
    data = dict(value["data"], transactionStatus=TXN_STATES.get(status, str(status)))
    return {"version": value["version"], "data": data}


def share_state_key(data: bytes) -> MessageObject:
    """A ``__share_group_state`` key: ``{"type": 0, "data": {"groupId", "topicId", "partition"}}``."""
    return coordinator_key("share-state", data)


def share_state_value(data: bytes | None, key: bytes) -> MessageObject | None:
    """A ``__share_group_state`` value (ShareSnapshotValue or ShareUpdateValue by the key's type)."""
    return coordinator_value("share-state", data, key)


def _api_messages(artifact: str) -> dict[int, Message]:
    out: dict[int, Message] = {}
    for name in names_from(artifact):
        m = message(name)
        if m.spec.get("type") == "metadata" and m.api_key is not None:
            out[m.api_key] = m
    return dict(sorted(out.items()))


@cache
def metadata_types() -> dict[int, Message]:
    """Every ``__cluster_metadata`` record definition by its apiKey."""
    return _api_messages("kafka-metadata")


@cache
def remote_log_metadata_types() -> dict[int, Message]:
    """Every ``__remote_log_metadata`` record definition by its apiKey (Kafka's RemoteLogMetadataSerde)."""
    return _api_messages("kafka-storage")


def _framed(data: bytes | None, types: dict[int, Message], what: str, any_version: bool = False) -> MessageObject:
    if data is None:
        raise CorruptRecordError(f"a {what} record has no value")
    r = _Reader(bytes(data))
    frame = r.uvarint()
    if frame != 1:
        raise CorruptRecordError(f"{what} record frame version {frame} (only 1 is known)")
    api_key = r.uvarint()
    version = r.uvarint()
    m = types.get(api_key)
    if m is None:
        raise CorruptRecordError(f"unknown {what} record type {api_key}")
    return {"type": m.type_name, "version": version, "data": m.read(r.buf, version, r.pos, any_version=any_version)}


def metadata_record(data: bytes, any_version: bool = False) -> MessageObject:
    """A ``__cluster_metadata`` value: ``{"type": "FEATURE_LEVEL_RECORD", "version": 0, "data": {...}}``.
    A version the definitions do not know is an error (the JSON view keeps such bytes, SPEC §8) unless
    ``any_version`` (kafka-dump-log reads it as Kafka's generated reader does)."""
    return _framed(data, metadata_types(), "metadata", any_version)


def remote_log_metadata_record(data: bytes | None) -> MessageObject:
    """A ``__remote_log_metadata`` value, framed as a metadata record:
    ``{"type": "REMOTE_LOG_SEGMENT_METADATA_RECORD", "version": 0, "data": {...}}``."""
    return _framed(data, remote_log_metadata_types(), "remote log metadata")


def metadata_frame(type_name_or_key: str | int, version: int, data: MessageObject, types: dict[int, Message] | None = None) -> bytes:
    """The bytes of a metadata record (the reverse of :func:`metadata_record`; ``types``:
    :func:`remote_log_metadata_types` for a remote log metadata record), for building logs."""
    types = metadata_types() if types is None else types
    if isinstance(type_name_or_key, str):
        m = next(m for m in types.values() if m.type_name == type_name_or_key)
    else:
        m = types[type_name_or_key]
    assert m.api_key is not None  # every metadata record type has its api key
    return bytes([1]) + encode_uvarint(m.api_key) + encode_uvarint(version) + m.write(data, version)


def control_key(data: bytes | None) -> MessageObject:
    """A control record's key, ``{"version": 0, "type": 2}`` (Kafka's ControlRecordTypeSchema): exactly
    4 bytes, so that nothing is left out."""
    if data is None or len(data) != 4:
        raise CorruptRecordError("a control record key that is not 4 bytes")
    version, kind = struct.unpack_from(">hh", data, 0)
    return {"version": version, "type": kind}


def control_value(key: bytes | None, data: bytes | None) -> MessageObject:
    """A control record's value: a transaction marker's ``{"version", "coordinatorEpoch"}``, or the KRaft
    message of the key's type read at version 0 (its own ``version`` field comes first)."""
    kind = control_key(key)["type"]
    if kind in (0, 1):
        if data is None or len(data) != 6:
            raise CorruptRecordError("an end transaction marker value that is not 6 bytes")
        version, epoch = struct.unpack_from(">hi", data, 0)
        return {"version": version, "coordinatorEpoch": epoch}
    name = CONTROL_MESSAGES.get(kind)
    if name is None or data is None:
        raise CorruptRecordError(f"unknown control record type {kind}")
    return message(name).read(data, 0)
