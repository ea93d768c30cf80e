"""Record lines of ``--deep-iteration`` / ``--print-data-log``, as ``DumpLogSegments.dumpLog`` prints them.

One line a record::

    "| offset: " + offset + " " + timestampType + ": " + timestamp + " keySize: " + .. + " valueSize: " + ..
    [magic 2:] " sequence: " + sequence + " headerKeys: " + keys.mkString("[", ",", "]")
    [legacy:]  " isValid: " + isValid + " crc: " + checksum  (Kafka 3.x added a stray "}"; 4.x does not)
    [control:] " endTxnMarker: COMMIT coordinatorEpoch: N" | " LeaderChange: {..}" | " SnapshotHeader {..}" | ...
    [--print-data-log, data batches:] " key: " + key + " payload: " + payload

``--skip-record-metadata`` leaves out everything before ``key:``; then the line starts ``| key: ..``
(or ``| payload: ..`` when there is no key), and a control record's line is empty (Kafka 4.x:
"This flag also skips control records").
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Callable
from typing import TextIO

from ..errors import CorruptRecordError, RecordNotShown, UninflatableBatch
from ..format.batch import BatchHeader, decode_batch, decode_records_at
from ..format.bigbatch import record_runs
from ..format.compression import Codec, decompress
from ..format.decoders import control_value
from ..format.records import CONTROL_TYPES
from .options import DumpOptions
from .parsers import make_parser, to_json

__all__ = ["RecordPrinter", "increment_sequence"]

_I16 = struct.Struct(">h")
_MARKER = struct.Struct(">hi")  # EndTransactionMarker value: version, coordinatorEpoch
_INT_MAX = 2**31 - 1


def _int(value: int) -> int:
    """``value`` as a Java ``int`` holds it (two's complement, 32 bits: overflow wraps)."""
    return (value + 2**31) % 2**32 - 2**31


def increment_sequence(sequence: int, increment: int) -> int:
    """Kafka's ``DefaultRecordBatch.incrementSequence`` in Java's ``int`` arithmetic: sequences wrap
    past 2**31 - 1 to 0, and a hostile negative increment wraps as Java's does."""
    if sequence > _int(_INT_MAX - increment):
        return _int(_int(increment - _int(_INT_MAX - sequence)) - 1)
    return _int(sequence + increment)


def _sequence(base_sequence: int, delta: int) -> int:
    """A record's sequence as ``DefaultRecordBatch`` reads it: -1 for a negative base sequence (the
    batch line's ``lastSequence`` is -1 only for -1 itself), else the base incremented."""
    return -1 if base_sequence < 0 else increment_sequence(base_sequence, delta)


def _control_text(key: bytes | None, value: bytes | None) -> str:
    """What Kafka prints after a control record's metadata; CorruptRecordError where Kafka throws."""
    if key is None or len(key) < 4:
        raise CorruptRecordError(
            "Invalid value size found for end control record key. Must have at least 4 bytes, but found only "
            f"{0 if key is None else len(key)}"
        )
    version, type_id = struct.unpack_from(">hh", key)
    if version < 0:
        raise CorruptRecordError(
            f"Invalid version found for control record: {version}. May indicate data corruption"
        )
    name = CONTROL_TYPES.get(type_id, "UNKNOWN")
    if name in ("ABORT", "COMMIT"):
        if value is None or len(value) < _MARKER.size:
            raise CorruptRecordError(
                f"Invalid value size found for end transaction marker: {0 if value is None else len(value)}"
            )
        _v, coordinator_epoch = _MARKER.unpack_from(value)
        return f" endTxnMarker: {name} coordinatorEpoch: {coordinator_epoch}"
    label = _KRAFT_LABELS.get(name)
    if label is not None:
        try:
            return f" {label} {to_json(control_value(key, value))}"
        except CorruptRecordError:
            pass  # shown by its type, as any other
    return f" controlType: {name}({type_id})"


#: How Kafka labels the JSON of KRaft's control records.
_KRAFT_LABELS = {
    "LEADER_CHANGE": "LeaderChange:",
    "SNAPSHOT_HEADER": "SnapshotHeader",
    "SNAPSHOT_FOOTER": "SnapshotFooter",
    "KRAFT_VERSION": "KRaftVersion",
    "KRAFT_VOTERS": "KRaftVoters",
}


def _legacy_crcs(buf, h: BatchHeader, valid: bool) -> list[tuple[int, bool]]:
    """The CRC of each message of a legacy entry and whether it holds (Kafka's ``LegacyRecord.isValid``):
    the entry's own (``valid``, as its batch line says), or its inner messages' when compressed."""
    codec = h.attributes & 0x07
    if codec == 0:
        return [(h.crc, valid)]
    message = bytes(buf[h.position + 12 : h.end])
    at = 14 if h.magic == 1 else 6
    (key_len,) = struct.unpack_from(">i", message, at)
    at += 4 + max(key_len, 0)
    (value_len,) = struct.unpack_from(">i", message, at)
    inner = decompress(Codec(codec), message[at + 4 : at + 4 + value_len], 64 << 20)
    crcs, pos = [], 0
    while pos + 16 <= len(inner):
        (size,) = struct.unpack_from(">i", inner, pos + 8)
        (crc,) = struct.unpack_from(">I", inner, pos + 12)
        crcs.append((crc, zlib.crc32(inner[pos + 16 : pos + 12 + size]) == crc))
        pos += 12 + size
    return crcs


class RecordPrinter:
    """Prints the records of one file's batches; remembers the offset gaps (Kafka's non-consecutive
    pairs). Not shared between threads."""

    def __init__(self, options: DumpOptions, name: str, err: TextIO) -> None:
        self.options = options
        self.name = name
        self.err = err
        self.parse: Callable[[int, bytes | None, bytes | None], tuple[str | None, str | None]] | None = (
            make_parser(options.decoder) if options.print_data_log else None
        )
        self.last_offset = -1
        self.gaps: list[tuple[int, int]] = []

    def _fail(self, position: int, reason: str) -> int:
        print(f"kafkafs: {self.name}: position {position}: {reason}", file=self.err)
        return 1

    def print_batch(self, buf, h: BatchHeader, write: Callable[[str], object], valid: bool = True,
                    position: int | None = None) -> int:
        """Write the batch's record lines (``valid``: whether the batch's CRC holds, as its line says);
        return 1 if they could not all be read, else 0. ``position``: the batch's in its file, when
        ``h.position`` is its place in ``buf`` only."""
        at = h.position if position is None else position
        if h.magic >= 2 and h.record_count == 0:
            return 0  # DefaultRecordBatch.iterator(): no records, nothing read (bytes after them unchecked)
        if h.attributes & 0x07 > 4:
            return self._fail(at, f"Unknown compression type id: {h.attributes & 0x07}")
        try:
            batch = decode_batch(buf, h, validate=False, ordered=False)
            crcs = _legacy_crcs(buf, h, valid) if h.magic < 2 else None
        except UninflatableBatch as exc:  # valid data not inflated at once (R15-7)
            if h.magic >= 2:
                return self._print_in_pieces(buf, h, at, write)
            said = self._fail(at, f"offsets {exc.offsets_text(self.last_offset + 1)}: records not shown: the batch "
                                  f"inflates past {exc.size_text}")
            if exc.next_offset is not None:
                self.last_offset = max(self.last_offset, exc.next_offset - 1)
            return said
        except (CorruptRecordError, struct.error) as exc:
            return self._fail(at, f"records do not decode: {getattr(exc, 'reason', exc)}")
        return self._print_decoded(batch, h, at, write, crcs, valid)

    def _print_in_pieces(self, buf, h: BatchHeader, at: int, write: Callable[[str], object]) -> int:
        """The records of a v2 batch too large to inflate at once, decoded a run at a time
        (:func:`~kafkafs.format.bigbatch.record_runs`); a record not held is said (no gap after it)."""
        problems = 0
        try:
            for run in record_runs(buf, h):
                if isinstance(run, RecordNotShown):
                    problems += self._fail(at, f"offsets {run.offsets_text()}: record not shown: {run.reason}")
                    if run.next_offset is not None:
                        self.last_offset = max(self.last_offset, run.next_offset - 1)
                    continue
                data, n = run
                try:
                    batch = decode_records_at(bytes(data), h._replace(record_count=n))
                finally:
                    data.release()
                problems += self._print_decoded(batch, h, at, write, None, True)
        except UninflatableBatch as exc:  # a piece past the limit (a snappy chunk): said, no gap after it
            problems += self._fail(at, f"offsets {exc.offsets_text(self.last_offset + 1)}: records not shown: "
                                       f"the batch inflates past {exc.size_text}")
            if exc.next_offset is not None:
                self.last_offset = max(self.last_offset, exc.next_offset - 1)
        except CorruptRecordError as exc:
            problems += self._fail(at, f"records do not decode: {exc.reason}")
        return problems

    def _print_decoded(self, batch, h: BatchHeader, at: int, write: Callable[[str], object],
                       crcs: list[tuple[int, bool]] | None, valid: bool) -> int:
        """Write the record lines of the decoded ``batch`` (of header ``h``)."""
        opts = self.options
        ts_name = {-1: "NoTimestampType", 0: "CreateTime", 1: "LogAppendTime"}[h.timestamp_type]
        v2 = h.magic >= 2
        control = h.is_control
        problems = 0
        for i, offset in enumerate(batch.offsets):
            # Kafka 4.4 compares even a file's first record with -1 + 1 (3.x skipped the first)
            if offset != self.last_offset + 1:
                self.gaps.append((self.last_offset, offset))
            self.last_offset = offset
            key, value = batch.keys[i], batch.values[i]
            parts = []
            prefix = "| "
            if not opts.skip_record_metadata:
                prefix = " "
                parts.append(
                    f"| offset: {offset} {ts_name}: {batch.timestamps[i]} keySize: {-1 if key is None else len(key)} "
                    f"valueSize: {-1 if value is None else len(value)}"
                )
                if v2:
                    keys = ",".join(hk for hk, _hv in batch.headers[i])
                    parts.append(
                        f" sequence: {_sequence(h.base_sequence, offset - h.base_offset)} headerKeys: [{keys}]"
                    )
                else:
                    crc, ok = crcs[i] if crcs is not None and i < len(crcs) else (h.crc, valid)
                    parts.append(f" isValid: {'true' if ok else 'false'} crc: {crc}")
                if control:
                    try:
                        parts.append(_control_text(key, value))
                    except CorruptRecordError as exc:
                        problems += self._fail(at, f"offset {offset}: {exc.reason}")
            if self.parse is not None and not control:
                shown_key, payload = self.parse(offset, key, value)
                if shown_key is not None:
                    parts.append(f"{prefix}key: {shown_key}")
                    prefix = " "
                if payload is not None:
                    parts.append(f"{prefix}payload: {payload}")
            parts.append("\n")
            write("".join(parts))
        return problems
