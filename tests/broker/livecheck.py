"""What the broker tests compare a mount against: records fetched over the wire, rendered by the rules of
SPEC §3 (written here from the SPEC, not taken from kafkafs), and the aborted ranges read from the
broker's own ``.txnindex`` files with ``struct``."""

from __future__ import annotations

import base64
import json
import struct
from pathlib import Path
from typing import Any


def shown(data: bytes | None) -> Any:
    """A key, value or header value as the JSON view shows it (SPEC §3, ``--values auto``): null; the
    embedded JSON of a UTF-8 object or array; the string of other UTF-8; ``{"$base64": ..}`` else."""
    if data is None:
        return None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return {"$base64": base64.b64encode(data).decode()}
    stripped = text.strip()
    if stripped[:1] in ("{", "["):
        try:
            return json.loads(text)
        except ValueError:
            pass
    return text


def expected_line(record) -> dict[str, Any]:
    """A kafka-python ``ConsumerRecord`` as the mount's JSON object (without ``producerId``)."""
    return {
        "topic": record.topic,
        "partition": record.partition,
        "offset": record.offset,
        "timestamp": record.timestamp,
        "timestampType": "LogAppendTime" if record.timestamp_type == 1 else "CreateTime",
        "key": shown(record.key),
        "value": shown(record.value),
        "headers": [{"key": k, "value": shown(v)} for k, v in record.headers],
    }


def data_lines(text: str) -> list[dict[str, Any]]:
    """The JSON objects of a records.jsonl, control records left out, ``producerId`` dropped (the
    consumer does not see either)."""
    out = []
    for line in text.splitlines():
        obj = json.loads(line)
        if "control" in obj:
            continue
        obj.pop("producerId", None)
        out.append(obj)
    return out


def aborted_ranges(partition_dir: Path) -> list[tuple[int, int, int]]:
    """(producerId, firstOffset, lastOffset) of every aborted transaction in the partition's
    ``.txnindex`` files (34-byte entries: version i16, producerId, firstOffset, lastOffset, LSO)."""
    out = []
    for path in sorted(partition_dir.glob("*.txnindex")):
        data = path.read_bytes()
        for pos in range(0, len(data) - len(data) % 34, 34):
            _v, pid, first, last, _lso = struct.unpack_from(">hqqqq", data, pos)
            out.append((pid, first, last))
    return out


def committed(lines_with_pid: list[dict[str, Any]], aborted: list[tuple[int, int, int]]) -> list[dict[str, Any]]:
    """What a read_committed consumer sees of ``lines_with_pid`` (records.jsonl objects, control lines
    kept out, ``producerId`` still there): records of aborted transactions left out."""
    out = []
    for obj in lines_with_pid:
        pid = obj.get("producerId")
        if pid is not None and any(p == pid and f <= obj["offset"] <= last for p, f, last in aborted):
            continue
        obj = dict(obj)
        obj.pop("producerId", None)
        out.append(obj)
    return out
