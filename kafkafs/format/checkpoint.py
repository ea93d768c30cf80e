"""Kafka's checkpoint files, parsed and rendered (sans-io).

A checkpoint is text: a version line, an entry-count line, then one entry a line. Kafka writes it with
``\\n`` line ends, to a temporary file that it fsyncs and renames (the storage layer does that part).

- Offset checkpoints (``recovery-point-offset-checkpoint``, ``log-start-offset-checkpoint``,
  ``cleaner-offset-checkpoint``, ``replication-offset-checkpoint``): ``topic partition offset``.
- ``leader-epoch-checkpoint`` (one per partition folder): ``epoch startOffset``.

Parsing follows Kafka's ``CheckpointFile`` reader, so that what a broker accepts is accepted here and what
it rejects is rejected here: an empty file, or one with only a version line, holds no entries; the
version must be the expected one; numbers are decimal with an optional sign and nothing else around
them; fields are separated by runs of spaces or tabs and trailing ones are ignored, leading ones are
not; a blank entry line is malformed; the count must match the entries. A later duplicate of a topic
partition wins, as in Kafka's map. Anything else raises ``CorruptRecordError`` whose reason names the
line and whose position is the byte offset where that line starts.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from typing import TypeVar

from kafkafs.errors import CorruptRecordError, InvalidInput

__all__ = [
    "OFFSET_CHECKPOINT_VERSION",
    "EPOCH_CHECKPOINT_VERSION",
    "OFFSET_CHECKPOINT_FILES",
    "EPOCH_CHECKPOINT_FILE",
    "parse_offset_checkpoint",
    "render_offset_checkpoint",
    "parse_epoch_checkpoint",
    "render_epoch_checkpoint",
]

OFFSET_CHECKPOINT_VERSION = 0
EPOCH_CHECKPOINT_VERSION = 0

#: The offset checkpoint files at the top of a log directory.
OFFSET_CHECKPOINT_FILES = (
    "recovery-point-offset-checkpoint",
    "log-start-offset-checkpoint",
    "cleaner-offset-checkpoint",
    "replication-offset-checkpoint",
)
#: The leader epoch checkpoint inside each partition folder.
EPOCH_CHECKPOINT_FILE = "leader-epoch-checkpoint"

_INT32 = (-(2**31), 2**31 - 1)
_INT64 = (-(2**63), 2**63 - 1)

# Java's BufferedReader.readLine ends a line at \n, \r or \r\n, nothing else (unlike str.splitlines).
_LINE_END = re.compile(r"\r\n|\r|\n")
# Java's "\\s+" inside one line: space, tab, vertical tab, form feed.
_FIELD_SEP = re.compile(r"[ \t\x0b\x0c]+")
_NUMBER = re.compile(r"[+-]?[0-9]+")
# Kafka's topic names. Parsing accepts any token, as Kafka does; rendering writes only real names.
_TOPIC = re.compile(r"[a-zA-Z0-9._-]{1,249}")

T = TypeVar("T")


class _Line:
    """One line of a checkpoint, with where it is (1-based line number, byte offset) for errors."""

    __slots__ = ("text", "number", "start")

    def __init__(self, text: str, number: int, start: int) -> None:
        self.text = text
        self.number = number
        self.start = start

    def error(self, what: str) -> CorruptRecordError:
        return CorruptRecordError(f"checkpoint line {self.number}: {what}: {self.text!r}", self.start)


def _lines(data: str | bytes) -> list[_Line]:
    if isinstance(data, str):
        text = data
    else:
        try:
            text = bytes(data).decode("utf-8")
        except UnicodeDecodeError as e:
            raise CorruptRecordError(f"checkpoint is not UTF-8: {e.reason}", e.start) from None
    lines: list[_Line] = []
    pos = 0  # character index into text
    byte_pos = 0
    number = 1
    for m in _LINE_END.finditer(text):
        chunk = text[pos : m.start()]
        lines.append(_Line(chunk, number, byte_pos))
        byte_pos += len(chunk.encode("utf-8", "surrogatepass")) + (m.end() - m.start())
        pos = m.end()
        number += 1
    if pos < len(text):  # a last line without a line end still counts, as with readLine
        lines.append(_Line(text[pos:], number, byte_pos))
    return lines


def _number(line: _Line, token: str, bounds: tuple[int, int], what: str) -> int:
    if not _NUMBER.fullmatch(token):
        raise line.error(f"{what} is not a number")
    value = int(token)
    if not bounds[0] <= value <= bounds[1]:
        raise line.error(f"{what} out of range")
    return value


def _fields(line: _Line, n: int) -> list[str]:
    # Like Java's String.split: a leading separator gives an empty first field, trailing ones vanish.
    parts = _FIELD_SEP.split(line.text)
    while parts and parts[-1] == "":
        parts.pop()
    if len(parts) != n or "" in parts:
        raise line.error(f"expected {n} fields")
    return parts


def _parse(data: str | bytes, version: int, entry: Callable[[_Line], T]) -> list[T]:
    lines = _lines(data)
    if not lines:
        return []
    found = _number(lines[0], lines[0].text, _INT32, "version")
    if found != version:
        raise lines[0].error(f"unrecognised version {found}, expected {version}")
    if len(lines) == 1:
        return []
    count = _number(lines[1], lines[1].text, _INT32, "entry count")
    entries = [entry(line) for line in lines[2:]]
    if len(entries) != count:
        raise CorruptRecordError(
            f"checkpoint line 2: expected {count} entries but found {len(entries)}", lines[1].start
        )
    return entries


def _offset_entry(line: _Line) -> tuple[tuple[str, int], int]:
    topic, partition, offset = _fields(line, 3)
    return (topic, _number(line, partition, _INT32, "partition")), _number(line, offset, _INT64, "offset")


def _epoch_entry(line: _Line) -> tuple[int, int]:
    epoch, start_offset = _fields(line, 2)
    return _number(line, epoch, _INT32, "epoch"), _number(line, start_offset, _INT64, "start offset")


def parse_offset_checkpoint(
    data: str | bytes, *, version: int = OFFSET_CHECKPOINT_VERSION
) -> dict[tuple[str, int], int]:
    """``{(topic, partition): offset}`` from an offset checkpoint file's content."""
    return dict(_parse(data, version, _offset_entry))


def parse_epoch_checkpoint(
    data: str | bytes, *, version: int = EPOCH_CHECKPOINT_VERSION
) -> list[tuple[int, int]]:
    """``[(epoch, start_offset), ...]`` in file order from a ``leader-epoch-checkpoint``'s content."""
    return _parse(data, version, _epoch_entry)


def _render(version: int, lines: list[str]) -> bytes:
    return "".join([f"{version}\n{len(lines)}\n", *(line + "\n" for line in lines)]).encode("utf-8")


def _checked(value: int, bounds: tuple[int, int], what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not bounds[0] <= value <= bounds[1]:
        raise InvalidInput(f"checkpoint {what} must be an integer in [{bounds[0]}, {bounds[1]}]: {value!r}")
    return value


def render_offset_checkpoint(
    entries: Mapping[tuple[str, int], int] | Iterable[tuple[tuple[str, int], int]],
    *,
    version: int = OFFSET_CHECKPOINT_VERSION,
) -> bytes:
    """The bytes of an offset checkpoint, entries sorted by (topic, partition) so output is stable.

    Kafka writes its map in hash order; order carries no meaning, so sorting loses nothing.
    """
    items = entries.items() if isinstance(entries, Mapping) else entries
    table: dict[tuple[str, int], int] = {}
    for (topic, partition), offset in items:
        if not isinstance(topic, str) or not _TOPIC.fullmatch(topic):
            raise InvalidInput(f"checkpoint topic is not a valid topic name: {topic!r}")
        table[(topic, _checked(partition, _INT32, "partition"))] = _checked(offset, _INT64, "offset")
    lines = [f"{topic} {partition} {offset}" for (topic, partition), offset in sorted(table.items())]
    return _render(version, lines)


def render_epoch_checkpoint(
    entries: Iterable[tuple[int, int]], *, version: int = EPOCH_CHECKPOINT_VERSION
) -> bytes:
    """The bytes of a ``leader-epoch-checkpoint``, entries in the order given (Kafka's is by epoch)."""
    lines = [
        f"{_checked(epoch, _INT32, 'epoch')} {_checked(start, _INT64, 'start offset')}"
        for epoch, start in entries
    ]
    return _render(version, lines)
