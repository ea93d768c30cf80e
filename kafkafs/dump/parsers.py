"""What ``--print-data-log`` shows of a record's key and value: Kafka's message parsers
(tools/src/main/java/org/apache/kafka/tools/DumpLogSegments.java, Kafka 4.x).

- default (``StringDecoder``): the bytes as UTF-8 text (malformed bytes become U+FFFD, as Java's
  ``new String(bytes, UTF_8)`` does);
- ``--offsets-decoder``, ``--transaction-log-decoder``, ``--share-group-state-decoder``
  (``CoordinatorRecordMessageParser`` over the group, transaction and share coordinators' serdes): key
  ``{"type":"1","data":{..}}``, value ``{"version":"3","data":{..}}`` or ``<DELETE>`` (Kafka writes
  ``type`` and ``version`` as JSON strings here); ``Unknown record type N at offset O, skipping.`` /
  ``Error at offset O, skipping. REASON``;
- ``--cluster-metadata-decoder`` (``ClusterMetadataLogMessageParser``): no key, value
  ``{"type":"FEATURE_LEVEL_RECORD","version":0,"data":{..}}`` or ``Error at O, skipping. REASON``;
- ``--remote-log-metadata-decoder`` (``RemoteMetadataLogMessageParser``): no key, value the Java
  ``toString`` of the record Kafka's ``RemoteLogMetadataSerde`` makes (:mod:`.remote`) or
  ``Error at offset O, skipping. REASON``.

The decoding itself is the decoders' (``kafkafs.format.decoders``); this module only lays it out.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

from ..errors import CorruptRecordError, KafkafsError
from ..format.javatext import java_utf8
from .metadata_errors import metadata_error

__all__ = ["make_parser", "Parser", "to_json", "DECODERS"]

Parser = Callable[[int, "bytes | None", "bytes | None"], "tuple[str | None, str | None]"]

#: ``kafka-dump-log``'s decoder flags and the parser each names.
DECODERS = {
    "--offsets-decoder": "offsets",
    "--transaction-log-decoder": "transaction-log",
    "--cluster-metadata-decoder": "cluster-metadata",
    "--remote-log-metadata-decoder": "remote-log-metadata",
    "--share-group-state-decoder": "share-group-state",
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


class _UnknownType(Exception):
    """``Deserializer.UnknownRecordTypeException``."""


def _coordinator_read(kind: str, key: bytes, value: bytes | None):
    """``CoordinatorRecordSerde.deserialize``: (record type, key fields, (version, value fields) or None
    for a tombstone). Kafka's generated readers stop after the last field, so bytes after it are
    ignored (unlike a metadata record's). ``_SerdeError`` in Kafka's words, ``_UnknownType``."""
    from ..format.decoders.internal import record_types
    from ..format.decoders.schema import message

    types = record_types(kind)
    if len(key) < 2:
        raise _SerdeError("Could not read version from key's buffer.")
    record_type = int.from_bytes(key[:2], "big", signed=True)
    base = types.get(record_type)
    if base is None:
        raise _UnknownType(record_type)
    key_message = message(base + "Key")
    # Kafka reads a key at its record type; a key's generated reader ignores the version (every field
    # of a key is in every version): read at the lowest
    read_at = record_type if record_type in key_message.valid else key_message.valid.lo
    try:
        fields = key_message.read(key, read_at, 2, whole=False)
    except CorruptRecordError as exc:
        raise _SerdeError(f"Could not read record with version {record_type} from key's buffer due to: "
                          f"{_java_cause(base + 'Key', record_type, exc.reason)}.") from None
    if value is None:
        return record_type, fields, None
    if len(value) < 2:
        raise _SerdeError("Could not read version from value's buffer.")
    version = int.from_bytes(value[:2], "big", signed=True)
    value_message = message(base + "Value")
    if version not in value_message.valid:
        raise _SerdeError(f"Found an unknown record version {version} for {record_type} type")
    try:
        data = value_message.read(value, version, 2, whole=False)
    except CorruptRecordError as exc:
        raise _SerdeError(f"Could not read record with version {version} from value's buffer due to: "
                          f"{_java_cause(base + 'Value', version, exc.reason)}.") from None
    return record_type, fields, (version, data)


def _java_cause(name: str, version: int, reason: str) -> str:
    """What the generated Java reader's exception says where the decoders said ``reason``."""
    reason = reason.removeprefix(f"{name} v{version}: ")
    wanted = re.fullmatch(r"message truncated: (\d+) bytes wanted at \d+, (\d+) left", reason)
    if wanted:  # ByteBufferAccessor.readArray
        return f"Error reading byte array of {wanted.group(1)} byte(s): only {wanted.group(2)} byte(s) available"
    if reason.startswith("message truncated"):  # a BufferUnderflowException, which has no message
        return "null"
    return reason


def _coordinator_parser(kind: str) -> Parser:
    """``CoordinatorRecordMessageParser`` over the serde of ``kind``'s coordinator."""
    from ..format.decoders.internal import decode_members, record_types, with_state_name

    group_metadata = kind == "offsets"

    def parse(offset: int, key: bytes | None, value: bytes | None) -> tuple[str | None, str | None]:
        if key is None:
            # Kafka throws here ("... using the specified decoder (message had a missing key)") and
            # dies with a stack trace; kafkafs says it on the record's line and goes on
            return (
                f"Failed to decode message at offset {offset} using the specified decoder (message had a missing key)",
                None,
            )
        try:
            record_type, k, v = _coordinator_read(kind, key, value)
        except _UnknownType as exc:
            return f"Unknown record type {exc.args[0]} at offset {offset}, skipping.", None
        except _SerdeError as exc:
            return f"Error at offset {offset}, skipping. {exc}", None
        shown_key = to_json({"type": str(record_type), "data": k})
        if v is None:
            return shown_key, "<DELETE>"
        data = v[1]
        if group_metadata and record_types(kind).get(record_type) == "GroupMetadata":
            decode_members(data)
        if kind == "transactions":
            data = with_state_name({"version": v[0], "data": data})["data"]  # type: ignore[index]  # v is the (version, state) pair parsed above
        return shown_key, to_json({"version": str(v[0]), "data": data})

    return parse


def _metadata_parser() -> Parser:
    from ..format.decoders import metadata_record

    def parse(offset: int, _key: bytes | None, value: bytes | None) -> tuple[str | None, str | None]:
        try:
            if value is None:
                raise CorruptRecordError("the record has no value")
            m = metadata_record(value, any_version=True)  # a newer version: as Kafka's reader reads it
        except (KafkafsError, ValueError):
            return None, f"Error at {offset}, skipping. {metadata_error(value)}"
        return None, to_json({"type": m.get("type"), "version": m.get("version"), "data": m.get("data")})

    return parse


#: Kafka 4.4's ``RemoteMetadataLogMessageParser`` hands a null value (a tombstone) to the serde unchecked:
#: the NullPointerException's message, as Java 17 (what its tools need) words it.
_REMOTE_NULL_VALUE = ('Cannot invoke "java.nio.ByteBuffer.remaining()" because the return value of '
                      '"org.apache.kafka.common.record.internal.Record.value()" is null')


def _remote_log_metadata_parser() -> Parser:
    from .remote import remote_log_metadata_text

    def parse(offset: int, _key: bytes | None, value: bytes | None) -> tuple[str | None, str | None]:
        if value is None:
            return None, f"Error at offset {offset}, skipping. {_REMOTE_NULL_VALUE}"
        try:
            return None, remote_log_metadata_text(value)
        except ValueError as exc:
            return None, f"Error at offset {offset}, skipping. {exc}"

    return parse


def make_parser(decoder: str | None) -> Parser:
    """The parser of a value of :data:`DECODERS`, or the string decoder for None."""
    if decoder is None:
        return _string_parser
    if decoder == "cluster-metadata":
        return _metadata_parser()
    if decoder == "remote-log-metadata":
        return _remote_log_metadata_parser()
    return _coordinator_parser({"offsets": "offsets", "transaction-log": "transactions",
                                "share-group-state": "share-state"}[decoder])
