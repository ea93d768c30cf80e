"""What ``--print-data-log`` shows of a record's key and value: Kafka's message parsers.

- default (``StringDecoder``): the bytes as UTF-8 text (malformed bytes become U+FFFD, as Java's
  ``new String(bytes, UTF_8)`` does);
- ``--offsets-decoder`` (``OffsetsMessageParser``): key ``{"type":"1","data":{..}}``, value
  ``{"version":"3","data":{..}}`` or ``<DELETE>`` (Kafka writes ``type`` and ``version`` as JSON strings
  here); ``Unknown record type N at offset O, skipping.`` / ``Error at offset O, skipping. REASON``;
- ``--transaction-log-decoder`` (``TransactionLog.formatRecordKeyAndValue``): key
  ``transaction_metadata::transactionalId=ID``, value ``producerId:P,producerEpoch:E,state=S,
  partitions=[t-0,..],txnLastUpdateTimestamp=T,txnTimeoutMs=N`` or ``<DELETE>``;
- ``--cluster-metadata-decoder`` (``ClusterMetadataLogMessageParser``): no key, value
  ``{"type":"FEATURE_LEVEL_RECORD","version":0,"data":{..}}`` or ``Error at O, skipping. REASON``.

The decoding itself is the decoders' (``kafkafs.format.decoders``); this module only lays it out.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

from ..errors import CorruptRecordError, KafkafsError
from .javatext import java_utf8
from .scala import grown, hash_order, int32, java_string_hash, table_size_for

__all__ = ["make_parser", "Parser", "TXN_STATES", "to_json"]

Parser = Callable[[int, "bytes | None", "bytes | None"], "tuple[str | None, str | None]"]

#: TransactionState ids as ``__transaction_state`` stores them, and the names Kafka prints.
TXN_STATES = {
    0: "Empty",
    1: "Ongoing",
    2: "PrepareCommit",
    3: "PrepareAbort",
    4: "CompleteCommit",
    5: "CompleteAbort",
    6: "Dead",
    7: "PrepareEpochFence",
}


def _text(b: bytes | None) -> str | None:
    return None if b is None else java_utf8(b)  # as Kafka's StringDecoder (new String(bytes, UTF_8))


def _plain(obj: Any) -> Any:
    """The decoders' ``{"$base64": s}`` as Jackson writes a byte array: the bare base64 string."""
    if isinstance(obj, dict):
        if len(obj) == 1 and "$base64" in obj:
            return obj["$base64"]
        return {k: _plain(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_plain(v) for v in obj]
    return obj


def to_json(obj: Any) -> str:
    """Compact JSON as Jackson writes it (byte arrays as bare base64)."""
    return json.dumps(_plain(obj), separators=(",", ":"), ensure_ascii=False)


def _string_parser(_offset: int, key: bytes | None, value: bytes | None) -> tuple[str | None, str | None]:
    return _text(key), _text(value)


class _SerdeError(Exception):
    """A record Kafka's ``CoordinatorRecordSerde`` refuses, with its message."""


def _coordinator_read(buf: bytes, what: str, names: dict[int, str], suffix: str, kind: int | None = None):
    """``CoordinatorRecordSerde``'s ``readVersion`` and ``readMessage`` of the key (``kind`` None) or the
    value of a record of type ``kind``: (version, fields). Kafka's generated readers stop after the last
    field, so bytes after it are ignored (unlike a metadata record's). ``_SerdeError`` in Kafka's words,
    ``LookupError`` for a key of an unknown type."""
    from ..format.decoders.schema import message

    if len(buf) < 2:
        raise _SerdeError(f"Could not read version from {what}'s buffer.")
    version = int.from_bytes(buf[:2], "big", signed=True)
    name = names.get(version if kind is None else kind)
    if name is None:
        raise LookupError(version)
    name += suffix
    try:
        return version, message(name).read(buf, version, 2, whole=False)
    except CorruptRecordError as exc:
        raise _SerdeError(
            f"Could not read record with version {version} from {what}'s buffer due to: {_java_cause(name, version, exc.reason)}."
        ) from None


def _java_cause(name: str, version: int, reason: str) -> str:
    """What the generated Java reader's exception says where the decoders said ``reason``."""
    if reason.startswith(f"{name} has no version"):
        return f"Can't read version {version} of {name}"  # UnsupportedVersionException
    reason = reason.removeprefix(f"{name} v{version}: ")
    wanted = re.fullmatch(r"message truncated: (\d+) bytes wanted at \d+, (\d+) left", reason)
    if wanted:  # ByteBufferAccessor.readArray
        return f"Error reading byte array of {wanted.group(1)} byte(s): only {wanted.group(2)} byte(s) available"
    if reason.startswith("message truncated"):  # a BufferUnderflowException, which has no message
        return "null"
    return reason


def _offsets_parser() -> Parser:
    from ..format.decoders.internal import OFFSETS_RECORD_TYPES, decode_members

    def parse(offset: int, key: bytes | None, value: bytes | None) -> tuple[str | None, str | None]:
        if key is None:
            return (
                f"Failed to decode message at offset {offset} using offset topic decoder (message had a missing key)",
                None,
            )
        try:
            kind, k = _coordinator_read(key, "key", OFFSETS_RECORD_TYPES, "Key")
            v = None if value is None else _coordinator_read(value, "value", OFFSETS_RECORD_TYPES, "Value", kind)
        except LookupError as exc:
            return f"Unknown record type {exc.args[0]} at offset {offset}, skipping.", None
        except _SerdeError as exc:
            return f"Error at offset {offset}, skipping. {exc}", None
        shown_key = to_json({"type": str(kind), "data": k})
        if v is None:
            return shown_key, "<DELETE>"
        if OFFSETS_RECORD_TYPES.get(kind) == "GroupMetadata":
            decode_members(v[1])
        return shown_key, to_json({"version": str(v[0]), "data": v[1]})

    return parse


def _partitions(data: dict) -> str:
    """``txnMetadata.topicPartitions.mkString("[", ",", "]")``: the partitions in the iteration order of
    the Scala 2.13 ``mutable.HashSet`` that ``TransactionLog.readTxnRecordValue`` fills (one
    ``addPartitions(...toSet)`` per topic entry, none when the state is Empty). Its table grows by
    ``sizeHint`` and, for sets of up to four (``Set1``..``Set4``, added one by one), by its load factor;
    it iterates bucket by bucket (index = improved hash & (length - 1)), each bucket in ascending
    improved hash (``h ^ (h >>> 16)`` of ``TopicPartition.hashCode``)."""
    if data.get("transactionStatus") == 0:  # Empty: Kafka adds no partitions
        return "[]"
    length = 16
    members: dict[tuple[str, int], int] = {}
    for entry in data.get("transactionPartitions") or []:
        topic = str(entry.get("topic"))
        ids = list(dict.fromkeys(entry.get("partitionIds") or []))
        length = max(length, table_size_for(int((len(ids) + 1) / 0.75)))  # addAll's sizeHint
        for pid in ids:
            if len(ids) <= 4:  # Set1..Set4 are added one by one: add() may grow the table first
                length = grown(length, len(members))
            # TopicPartition.hashCode
            members.setdefault((topic, pid), int32(31 * (31 + pid) + java_string_hash(topic)))
    return "[" + ",".join(f"{topic}-{pid}" for topic, pid in hash_order(members, length)) + "]"


def _transaction_parser() -> Parser:
    from ..format.decoders.schema import message

    key_schema, value_schema = message("TransactionLogKey"), message("TransactionLogValue")

    def parse(offset: int, key: bytes | None, value: bytes | None) -> tuple[str | None, str | None]:
        # TransactionLog.readTxnRecordKey / readTxnRecordValue: a version outside the schema's is an
        # UnknownKey (or Kafka's IllegalStateException); the generated readers ignore trailing bytes
        version = int.from_bytes(key[:2], "big", signed=True) if key and len(key) >= 2 else -1
        try:
            k = key_schema.read(key or b"", version, 2, whole=False)
        except (KafkafsError, ValueError):
            return f"unknown::version={version}", None
        shown_key = f"transaction_metadata::transactionalId={k.get('transactionalId')}"
        if value is None:
            return shown_key, "<DELETE>"
        value_version = int.from_bytes(value[:2], "big", signed=True) if len(value) >= 2 else -1
        if value_version not in value_schema.valid:
            return shown_key, (f"Error at offset {offset}, skipping. "
                               f"Unknown version {value_version} from the transaction log message value")
        try:
            v = {"data": value_schema.read(value, value_version, 2, whole=False)}
        except (KafkafsError, ValueError) as exc:
            return shown_key, f"Error at offset {offset}, skipping. {getattr(exc, 'reason', exc)}"
        d = v.get("data") or {}
        status = d.get("transactionStatus")
        state = TXN_STATES.get(status, f"Unknown({status})") if isinstance(status, int) else status
        return shown_key, (
            f"producerId:{d.get('producerId')},producerEpoch:{d.get('producerEpoch')},state={state},"
            f"partitions={_partitions(d)},txnLastUpdateTimestamp={d.get('transactionLastUpdateTimestampMs')},"
            f"txnTimeoutMs={d.get('transactionTimeoutMs')}"
        )

    return parse


def _uvarint_short(buf: bytes, pos: int, entity: str) -> tuple[int, int]:
    """``AbstractApiMessageSerde.unsignedIntToShort``: an unsigned varint that must fit a short, or a
    ``ValueError`` with Kafka's words (``ByteUtils.readUnsignedVarint``: at most 5 bytes)."""
    value, shift = 0, 0
    while True:
        if pos >= len(buf) or shift > 28:
            raise ValueError(f"Error while reading {entity}")
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            break
        shift += 7
    value = int32(value)
    if value > 0x7FFF:
        raise ValueError(f"Value for {entity} was too large.")
    return int32(value << 16) >> 16, pos  # (short) val


def _metadata_error(value: bytes | None) -> str:
    """The message of the ``MetadataParseException`` that ``MetadataRecordSerde.read`` throws for a
    ``value`` the decoders refused."""
    from ..format.decoders.internal import metadata_types

    buf = value or b""
    try:
        frame, pos = _uvarint_short(buf, 0, "frame version")
        if frame == 0:
            return ("Could not deserialize metadata record with frame version 0. Note that upgrades from the "
                    "preview release of KRaft in 2.8 to newer versions are not supported.")
        if frame != 1:
            return (f"Could not deserialize metadata record due to unknown frame version {frame}"
                    "(only frame version 1 is supported)")
        api_key, pos = _uvarint_short(buf, pos, "type")
        version, pos = _uvarint_short(buf, pos, "version")
    except ValueError as exc:
        return str(exc)
    m = metadata_types().get(api_key)
    if m is None:
        return f"org.apache.kafka.common.errors.UnsupportedVersionException: Unknown metadata id {api_key}"
    try:
        m.read(buf, version, pos)
    except CorruptRecordError as exc:
        left = re.search(r"(\d+) byte\(s\) left over at the end$", exc.reason)
        if left:
            return f"Found {left.group(1)} byte(s) of garbage after {api_key}"
    return f"Failed to deserialize record with type {api_key}"


def _metadata_parser() -> Parser:
    from ..format.decoders import metadata_record

    def parse(offset: int, _key: bytes | None, value: bytes | None) -> tuple[str | None, str | None]:
        try:
            if value is None:
                raise CorruptRecordError("the record has no value")
            m = metadata_record(value)
        except (KafkafsError, ValueError):
            return None, f"Error at {offset}, skipping. {_metadata_error(value)}"
        return None, to_json({"type": m.get("type"), "version": m.get("version"), "data": m.get("data")})

    return parse


def make_parser(decoder: str | None) -> Parser:
    """The parser for ``--offsets-decoder`` ("offsets"), ``--transaction-log-decoder``
    ("transaction-log"), ``--cluster-metadata-decoder`` ("cluster-metadata"), or the string decoder."""
    if decoder is None:
        return _string_parser
    factories = {
        "offsets": _offsets_parser,
        "transaction-log": _transaction_parser,
        "cluster-metadata": _metadata_parser,
    }
    return factories[decoder]()
