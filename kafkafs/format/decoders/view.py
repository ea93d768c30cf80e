"""The JSON view of a decoded partition: SPEC §3's line layout with keys and values shown as their
writers meant them (SPEC §8), through a per-partition :class:`Decoder`.

A decoder turns one key or value into a Python object (or says it does not recognise it, and the
record shows the generic SPEC §3 rendering); a record whose key or value came from a Schema Registry
schema also gains ``"keySchemaId"`` / ``"valueSchemaId"``, placed right after ``"key"`` / ``"value"``.
Lines are built like the generic renderer's: a column at a time, one format string per batch.
Decoders are immutable after construction and safe to share across threads.
"""

from __future__ import annotations

import base64
from binascii import b2a_base64
from itertools import chain
from typing import Any

import orjson

from ...errors import CorruptRecordError
from ..jsonembed import json_string, render_value
from ..jsonrender import TIMESTAMP_TYPES, control_key_json, control_value_json, line_prefix
from ..jsonview import render_batch_jsonl
from ..records import DecodedBatch, control_type_of
from . import internal

__all__ = ["Decoder", "InternalDecoder", "GENERIC"]

_dumps = orjson.dumps

#: Returned by :meth:`Decoder.key` / :meth:`Decoder.value` for bytes the decoder does not recognise.
GENERIC = object()


def _bytes_default(obj: object) -> dict[str, str]:
    if isinstance(obj, (bytes, bytearray, memoryview)):
        return {"$base64": b2a_base64(obj, newline=False).decode("ascii")}
    raise TypeError(f"{type(obj).__name__} is not JSON")


def dumps_json(obj: object) -> bytes:
    """A decoded object as compact JSON; bytes in it as ``{"$base64": ...}``."""
    return _dumps(obj, default=_bytes_default)


def generic_json(data: bytes | None) -> bytes:
    """Bytes as SPEC §3 renders them in mode ``auto``: what an undecoded key or value shows."""
    return render_value(data, "auto")


_generic = generic_json


class Decoder:
    """Renders the records of one partition, decoding what it recognises; subclasses define
    :meth:`key` and :meth:`value`, each returning ``(object, schema_id or None)`` or ``(GENERIC, None)``."""

    def key(self, data: bytes | None, control: bool) -> tuple[object, int | None]:
        return GENERIC, None

    def value(self, key: bytes | None, data: bytes | None, control: bool) -> tuple[object, int | None]:
        return GENERIC, None

    def wants(self, batch: DecodedBatch) -> bool:
        """Whether any record of ``batch`` may decode (else the generic fast path renders it)."""
        return True

    # ------------------------------------------------------------------------------- rendering

    def _column(self, batch: DecodedBatch, keys: list[bytes | None], values: list[bytes | None],
                which: str) -> list[bytes]:
        control = batch.header.is_control
        out: list[bytes] = []
        add = out.append
        if which == "key":
            for k in keys:
                obj, sid = self.key(k, control)
                if obj is GENERIC:
                    text = control_key_json(k, "auto") if control else _generic(k)
                else:
                    text = dumps_json(obj)
                add(text if sid is None else text + b',"keySchemaId":%d' % sid)
        else:
            for k, v in zip(keys, values, strict=True):
                obj, sid = self.value(k, v, control)
                if obj is GENERIC:
                    text = control_value_json(k, v, "auto") if control else _generic(v)
                else:
                    text = dumps_json(obj)
                add(text if sid is None else text + b',"valueSchemaId":%d' % sid)
        return out

    def render_batch_jsonl(
        self, topic: str, partition: int, batch: DecodedBatch, start: int = 0, stop: int | None = None
    ) -> bytes:
        """Records ``start:stop`` of ``batch`` as JSON lines (SPEC §3 key order, §8 contents)."""
        n = len(batch.offsets)
        if stop is None or stop > n:
            stop = n
        if start >= stop:
            return b""
        if start or stop != n:
            batch = DecodedBatch(
                batch.header, batch.offsets[start:stop], batch.timestamps[start:stop], batch.keys[start:stop],
                batch.values[start:stop], batch.headers[start:stop],
            )
        if not self.wants(batch):
            return render_batch_jsonl(topic, partition, batch, "auto")
        header = batch.header
        keys = batch.keys
        columns = [batch.offsets, batch.timestamps, self._column(batch, keys, keys, "key"),
                   self._column(batch, keys, batch.values, "value")]
        if any(batch.headers):
            columns.append([
                b",".join(b'{"key":' + json_string(k.encode()) + b',"value":' + _generic(v) + b"}" for k, v in hs)
                for hs in batch.headers
            ])
            headers_slot = b"%b"
        else:
            headers_slot = b""
        tail = b',"producerId":%d' % header.producer_id if header.is_transactional else b""
        if header.is_control:
            columns.append([b',"control":"' + control_type_of(k).encode() + b'"' + tail for k in keys])
            tail = b"%b"
        else:
            tail = tail.replace(b"%", b"%%")
        fmt = (
            line_prefix(topic, partition).replace(b"%", b"%%")
            + b'%d,"timestamp":%d,"timestampType":"'
            + TIMESTAMP_TYPES[header.timestamp_type].encode()
            + b'","key":%b,"value":%b,"headers":['
            + headers_slot
            + b"]"
            + tail
            + b"}\n"
        )
        # one format string for the whole batch, one formatting call
        return (fmt * len(batch.offsets)) % tuple(chain.from_iterable(zip(*columns, strict=True)))

    def record_object(self, topic: str, partition: int, batch: DecodedBatch, index: int) -> dict[str, Any]:
        """Record ``index`` of ``batch`` as a dict in the same key order as its line, plain JSON values."""
        record: dict[str, Any] = orjson.loads(self.render_batch_jsonl(topic, partition, batch, index, index + 1))
        return record


def _control(key: bytes | None, value: bytes | None, which: str) -> tuple[object, None]:
    """A control record's key or value decoded (a KRaft control record's value by its message);
    GENERIC leaves it to :func:`~kafkafs.format.jsonrender.control_key_json` / ``control_value_json``."""
    try:
        if which == "key":
            return internal.control_key(key), None
        return internal.control_value(key, value), None
    except CorruptRecordError:
        return GENERIC, None


class InternalDecoder(Decoder):
    """One of Kafka's internal topics (``kind``, a value of :data:`~kafkafs.format.decoders.INTERNAL_TOPICS`):
    coordinator records (``offsets``, ``transactions``, ``share-state``) or framed metadata records
    (``metadata``, ``remote-log-metadata``)."""

    _COORDINATORS = ("offsets", "transactions", "share-state")
    _FRAMED = ("metadata", "remote-log-metadata")

    def __init__(self, kind: str) -> None:
        if kind not in self._COORDINATORS + self._FRAMED:
            raise ValueError(kind)
        self.kind = kind
        #: names what this decoder renders, for caches of rendered sizes (the mount's ``--cache-dir``); the
        #: last number is how it renders (2: strings that are not UTF-8 read as Java reads them, where 1
        #: left the record's bytes)
        self.identity = f"kafkafs.internal:{kind}:{internal.definitions_version()}:2"
        self._framed = internal.metadata_record if kind == "metadata" else internal.remote_log_metadata_record

    def key(self, data: bytes | None, control: bool) -> tuple[object, int | None]:
        if control:
            return _control(data, None, "key")
        if data is None or self.kind in self._FRAMED:
            return GENERIC, None
        try:
            return internal.coordinator_key(self.kind, data), None
        except CorruptRecordError:
            return GENERIC, None

    def value(self, key: bytes | None, data: bytes | None, control: bool) -> tuple[object, int | None]:
        if control:
            return _control(key, data, "value")
        if data is None:
            return None, None
        try:
            if self.kind == "offsets":
                return internal.offsets_value(data, key), None
            if self.kind in self._COORDINATORS:
                if key is None:
                    return GENERIC, None
                decoded = internal.coordinator_value(self.kind, data, key)
                return (internal.with_state_name(decoded) if self.kind == "transactions" else decoded), None
            return self._framed(data), None
        except CorruptRecordError:
            if self.kind in self._FRAMED:  # SPEC §8: an unknown type or version keeps its bytes as base64
                return {"$base64": base64.b64encode(data).decode("ascii")}, None
            return GENERIC, None
