"""The JSON lines of decoded records (SPEC §3): the pure-Python reference renderer.

A record renders as one compact object with keys in this order::

    {"topic", "partition", "offset", "timestamp", "timestampType", "key", "value", "headers"}

plus ``"control"`` (Kafka's name for the marker's type) for a record of a control batch and then
``"producerId"`` for a record of a transactional batch, and a newline. Keys, values and header values
render by :func:`.jsonembed.render_value`; the topic and header keys are JSON strings. In mode
``auto`` a control record's key and a transaction marker's value show decoded (SPEC §8,
:func:`control_key_json`, :func:`control_value_json`).

The compiled kernel renders the same bytes from a batch's raw records; this module is what it is
tested against, and what serves legacy (magic 0/1) batches and machines without the kernel.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from functools import lru_cache
from typing import Literal

from ..errors import InvalidInput
from .jsonembed import json_string, render_value, view_auto, view_base64, view_string
from .records import DecodedBatch, control_type_of

__all__ = [
    "ValuesMode",
    "VALUES_MODES",
    "TIMESTAMP_TYPES",
    "check_mode",
    "record_object",
    "line_prefix",
    "render_lines",
    "select_indexes",
    "control_key_json",
    "control_value_json",
]

_CONTROL_KEY = struct.Struct(">hh")  # ControlRecordTypeSchema: version, type
_MARKER = struct.Struct(">hi")  # EndTxnMarker: version, coordinatorEpoch

VALUES_MODES: tuple[str, ...] = ("auto", "string", "base64")
ValuesMode = Literal["auto", "string", "base64"]
TIMESTAMP_TYPES = {0: "CreateTime", 1: "LogAppendTime", -1: "CreateTime"}
_VIEWS = {"auto": view_auto, "string": view_string, "base64": view_base64}


def control_key_json(key: bytes | None, mode: str) -> bytes:
    """A control record's key: ``{"version":0,"type":1}`` in mode auto when it is exactly 4 bytes
    (Kafka's ControlRecordTypeSchema), else as any key renders."""
    if mode == "auto" and key is not None and len(key) == 4:
        return b'{"version":%d,"type":%d}' % _CONTROL_KEY.unpack(key)
    return render_value(key, mode)


def control_value_json(key: bytes | None, value: bytes | None, mode: str) -> bytes:
    """A control record's value: a transaction marker's (key type 0 ABORT or 1 COMMIT) of exactly 6 bytes
    as ``{"version":0,"coordinatorEpoch":5}`` in mode auto (Kafka's EndTxnMarker), else as any value
    renders (a KRaft control record's value is decoded by the metadata log's decoder)."""
    if (mode == "auto" and key is not None and len(key) == 4 and _CONTROL_KEY.unpack(key)[1] in (0, 1)
            and value is not None and len(value) == 6):
        return b'{"version":%d,"coordinatorEpoch":%d}' % _MARKER.unpack(value)
    return render_value(value, mode)


def check_mode(mode: str) -> None:
    if mode not in _VIEWS:
        raise InvalidInput(f"values mode must be one of {', '.join(VALUES_MODES)}, not {mode!r}")


def record_object(topic: str, partition: int, batch: DecodedBatch, index: int, mode: str = "auto") -> dict[str, object]:
    """The JSON object of record ``index`` of ``batch`` as a dict in SPEC key order, embedded JSON as
    ``orjson.Fragment``: a record at a time, through a dict (``orjson.dumps`` of it gives the line)."""
    check_mode(mode)
    view = _VIEWS[mode]
    header = batch.header
    obj = {
        "topic": topic,
        "partition": partition,
        "offset": batch.offsets[index],
        "timestamp": batch.timestamps[index],
        "timestampType": TIMESTAMP_TYPES[header.timestamp_type],
        "key": view(batch.keys[index]),
        "value": view(batch.values[index]),
        "headers": [{"key": k, "value": view(v)} for k, v in batch.headers[index]],
    }
    if header.is_control:
        if mode == "auto":
            import orjson

            key, value = batch.keys[index], batch.values[index]
            obj["key"] = orjson.Fragment(control_key_json(key, mode))
            obj["value"] = orjson.Fragment(control_value_json(key, value, mode))
        obj["control"] = control_type_of(batch.keys[index])
    if header.is_transactional:
        obj["producerId"] = header.producer_id
    return obj


@lru_cache(maxsize=4096)
def line_prefix(topic: str, partition: int) -> bytes:
    """The bytes every line of a partition starts with, up to the offset's digits."""
    return b'{"topic":' + json_string(topic.encode()) + b',"partition":%d,"offset":' % partition


def select_indexes(
    batch: DecodedBatch, lo: int | None, hi: int | None, ts_lo: int | None, ts_hi: int | None
) -> list[int]:
    """Indexes of the records with ``lo <= offset <= hi`` and ``ts_lo <= timestamp < ts_hi`` (None: no
    bound), in order."""
    offsets = batch.offsets
    timestamps = batch.timestamps
    return [
        i
        for i in range(len(offsets))
        if (lo is None or offsets[i] >= lo)
        and (hi is None or offsets[i] <= hi)
        and (ts_lo is None or timestamps[i] >= ts_lo)
        and (ts_hi is None or timestamps[i] < ts_hi)
    ]


def render_lines(topic: str, partition: int, batch: DecodedBatch, mode: str, indexes: Iterable[int]) -> list[bytes]:
    """The JSON line (newline included) of each record ``indexes`` names, in that order."""
    check_mode(mode)
    header = batch.header
    prefix = line_prefix(topic, partition)
    middle = b',"timestampType":"' + TIMESTAMP_TYPES[header.timestamp_type].encode() + b'","key":'
    control = header.is_control
    producer = b',"producerId":%d' % header.producer_id if header.is_transactional else b""
    offsets, timestamps, keys, values, headers = batch.offsets, batch.timestamps, batch.keys, batch.values, batch.headers
    out = []
    for i in indexes:
        parts = [
            prefix,
            b"%d" % offsets[i],
            b',"timestamp":%d' % timestamps[i],
            middle,
            control_key_json(keys[i], mode) if control else render_value(keys[i], mode),
            b',"value":',
            control_value_json(keys[i], values[i], mode) if control else render_value(values[i], mode),
            b',"headers":[',
            b",".join(
                b'{"key":' + json_string(k.encode()) + b',"value":' + render_value(v, mode) + b"}"
                for k, v in headers[i]
            ),
            b"]",
        ]
        if control:
            parts.append(b',"control":"' + control_type_of(keys[i]).encode() + b'"')
        parts.append(producer)
        parts.append(b"}\n")
        out.append(b"".join(parts))
    return out


