"""``kafkafs dump --json``: each line Kafka's tool would print, as one JSON object (for scripts).

The objects are read back from Kafka's own lines, so they carry exactly what the text says:
``{"batch": {"baseOffset": 0, ..., "deleteHorizonMs": null, "isvalid": true}}``,
``{"record": {"offset": 0, ..., "headerKeys": ["trace"], "key": "k", "payload": "hi"}}``,
``{"entry": {"offset": 60, "position": 4388}}`` (index, time index, snapshot, transaction index and
epoch entries), ``{"dumping": FILE}``, ``{"logStartingOffset": 0}``,
``{"invalidBytes": 7, "file": NAME}``, ``{"message": TEXT}`` for any other line. Numbers become JSON
numbers, ``true``/``false`` booleans, ``OptionalLong.empty`` null and ``OptionalLong[N]`` N. Kafka's
lines themselves (the default output) never change.
"""

from __future__ import annotations

import json
import re
from typing import Any, TextIO

__all__ = ["JsonLines", "line_to_object"]

_FIELD = re.compile(r"(?:^|\s)([A-Za-z][A-Za-z]*):\s(\S+)")
_INT = re.compile(r"-?\d+")
_OPTIONAL = re.compile(r"OptionalLong\[(-?\d+)\]")


def _value(text: str) -> Any:
    if _INT.fullmatch(text):
        return int(text)
    if text in ("true", "false"):
        return text == "true"
    if text in ("OptionalLong.empty", "null"):
        return None
    m = _OPTIONAL.fullmatch(text)
    if m:
        return int(m.group(1))
    return text


def _fields(text: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, raw in _FIELD.findall(text):
        out[name] = _value(raw)
    return out


def _record(line: str) -> dict[str, Any]:
    body = line[1:] if line.startswith("|") else line
    payload = key = None
    if " payload: " in body or body.startswith("payload: "):
        body, _, payload = body.partition("payload: ")
    if " key: " in body or body.lstrip().startswith("key: "):
        body, _, key = body.partition("key: ")
        key = key.rstrip()
    extra = None
    for label in (" LeaderChange: ", " SnapshotHeader ", " SnapshotFooter ", " KRaftVersion ", " KRaftVoters "):
        if label in body:
            body, _, text = body.partition(label)
            extra = (label.strip().rstrip(":"), json.loads(text))
    headers = re.search(r"headerKeys: \[(.*?)\]", body)
    record = _fields(re.sub(r"headerKeys: \[.*?\]", "", body))
    if headers is not None:
        record["headerKeys"] = [k for k in headers.group(1).split(",") if k]
    if extra is not None:
        record[extra[0]] = extra[1]
    if key is not None:
        record["key"] = key
    if payload is not None:
        record["payload"] = payload
    return {"record": record}


def line_to_object(line: str) -> dict[str, Any]:
    """The JSON object for one line of Kafka's output."""
    if line.startswith("Dumping "):
        return {"dumping": line[len("Dumping ") :]}
    m = re.fullmatch(r"Found (\d+) invalid bytes at the end of (.*)", line)
    if m:
        return {"invalidBytes": int(m.group(1)), "file": m.group(2)}
    m = re.fullmatch(r"Log starting offset: (-?\d+)", line)
    if m:
        return {"logStartingOffset": int(m.group(1))}
    m = re.fullmatch(r"Snapshot end offset: (-?\d+), epoch: (-?\d+)", line)
    if m:
        return {"snapshotEndOffset": int(m.group(1)), "epoch": int(m.group(2))}
    if line.startswith("|") or line.startswith(" payload: "):
        return _record(line)
    if line.startswith(("baseOffset: ", "offset: ")) and " isvalid: " in line:
        return {"batch": _fields(line)}
    if re.match(r"[A-Za-z]+: \S", line):
        return {"entry": _fields(line)}
    return {"message": line}


class JsonLines:
    """A text stream that turns each whole line written to it into a JSON line on ``out``.
    Not shared between threads."""

    def __init__(self, out: TextIO) -> None:
        self.out = out
        self._pending = ""

    def write(self, text: str) -> int:
        data = self._pending + text
        *lines, self._pending = data.split("\n")
        for line in lines:
            self.out.write(json.dumps(line_to_object(line), ensure_ascii=False, separators=(",", ":")) + "\n")
        return len(text)

    def flush(self) -> None:
        if self._pending:
            self.write("\n")
        self.out.flush()
