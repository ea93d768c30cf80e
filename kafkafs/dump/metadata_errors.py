"""What Kafka's ``AbstractApiMessageSerde.read`` says when a framed metadata record does not decode (the
``MetadataParseException`` messages that ``kafka-dump-log`` prints after ``Error at ...``), for
``--cluster-metadata-decoder`` and ``--remote-log-metadata-decoder``."""

from __future__ import annotations

import re

from ..errors import CorruptRecordError
from .scala import int32

__all__ = ["metadata_error"]


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


def metadata_error(value: bytes | None, types: dict | None = None) -> str:
    """The message of the ``MetadataParseException`` that ``AbstractApiMessageSerde.read`` throws for a
    ``value`` the decoders refused (``types``: the record definitions by apiKey; the cluster
    metadata's by default)."""
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
    m = (metadata_types() if types is None else types).get(api_key)
    if m is None:
        return f"org.apache.kafka.common.errors.UnsupportedVersionException: Unknown metadata id {api_key}"
    try:
        m.read(buf, version, pos, any_version=True)  # as Kafka reads a newer version
    except CorruptRecordError as exc:
        left = re.search(r"(\d+) byte\(s\) left over at the end$", exc.reason)
        if left:
            return f"Found {left.group(1)} byte(s) of garbage after {api_key}"
    return f"Failed to deserialize record with type {api_key}"
