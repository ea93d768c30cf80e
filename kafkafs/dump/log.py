"""Batches and records of a ``.log`` (or a KRaft ``.checkpoint`` snapshot), as ``DumpLogSegments.dumpLog``.

The batches are walked as Kafka's ``FileLogInputStream`` walks them: fewer than 18 bytes left, or a
batch that reaches past the end, ends the walk quietly, and what is left is reported as
``Found N invalid bytes at the end of NAME`` (unless ``--max-bytes`` cut the file). A size below a
message's minimum, or a magic below 0, ends it too; Kafka dies with a stack trace there, kafkafs says
why on standard error and reports the rest as invalid bytes. What Kafka prints and walks past, kafkafs
prints too, and counts as damage (exit 1): a negative base offset, a v2 length below the 61-byte header
(the header is read past it, the batch is invalid). A magic of 3 to 127 is a v2 batch to Kafka (its line
says the magic) and to every kafkafs reader: printed as Kafka prints it, no damage. Offsets out of
order between batches (:func:`~kafkafs.storage.validation.offsets_problem`, the rule ``verify`` and the
readers keep: a base offset below the end of the batch before it or below the segment's base, a negative
``lastOffsetDelta``) are printed as Kafka prints them, said on standard error and damage (exit 1; Kafka's
tool exits 0); a forward gap (compaction) is not. A legacy compressed wrapper is judged by its own
(last) offset: inner offsets that overlap the entry before it are printed as Kafka prints them
("Non-consecutive offsets"), exit 0 (README).

The file is read, never mapped: a page the disk will not give is a read's EIO (the batches before it
printed, one line, exit 1), where a map's page would kill the process with SIGBUS. Its size is taken
once; a file that ends before it while it is read (a writer truncated it, a file system whose reads end
before its stat size) ends the dump the same way: the batches before printed, one line, exit 1.
"""

from __future__ import annotations

import os
import re
import struct
from typing import TextIO

from ..errors import CorruptRecordError
from ..format.batch import LOG_OVERHEAD, V2_HEADER_SIZE, BatchHeader, read_batch_header, validate_batch
from ..storage.index_read import DISK_ERRNOS
from ..storage.safefiles import open_file
from ..storage.validation import offsets_problem
from .indexes import java_path
from .options import INT_MAX, DumpOptions
from .records import RecordPrinter, increment_sequence

__all__ = ["dump_log", "batch_line", "TIMESTAMP_TYPES", "CODEC_NAMES"]

TIMESTAMP_TYPES = {-1: "NoTimestampType", 0: "CreateTime", 1: "LogAppendTime"}
CODEC_NAMES = {0: "none", 1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}
_HEADER_SIZE_UP_TO_MAGIC = 17  # offset i64, size i32, [partitionLeaderEpoch | crc] i32, magic i8
_MIN_SIZE = 14  # Kafka's LegacyRecord.RECORD_OVERHEAD_V0, the smallest size it accepts here
_V2_OVERHEAD = 61
_DELETE_HORIZON = 0x40
_PREFIX = struct.Struct(">qi")
_V2_FIELDS = struct.Struct(">qiibIhiqqqhii")  # Kafka's DefaultRecordBatch header, 61 bytes
_SNAPSHOT_NAME = re.compile(r"^(\d{20})-(\d{10})\.checkpoint$")
BOOTSTRAP_SNAPSHOT = "bootstrap.checkpoint"


def _bool(flag: bool) -> str:
    return "true" if flag else "false"


def codec_name(attributes: int) -> str:
    """Kafka's codec name; ids 5-7, which Kafka's ``CompressionType.forId`` rejects, as ``unknown(N)``."""
    codec = attributes & 0x07
    return CODEC_NAMES.get(codec, f"unknown({codec})")


def batch_line(h: BatchHeader, position: int, valid: bool) -> str:
    """``printBatchLevel``: for magic 2 ``"baseOffset: " + ... + " deleteHorizonMs: " + ...``, for
    older ``"offset: " + lastOffset``, then ``" position: " + ... + " isvalid: " + ...``."""
    if h.magic >= 2:
        last_seq = -1 if h.base_sequence == -1 else increment_sequence(h.base_sequence, h.last_offset_delta)
        horizon = (
            f"OptionalLong[{h.first_timestamp}]" if h.attributes & _DELETE_HORIZON else "OptionalLong.empty"
        )
        head = (
            f"baseOffset: {h.base_offset} lastOffset: {h.last_offset} count: {h.record_count} "
            f"baseSequence: {h.base_sequence} lastSequence: {last_seq} producerId: {h.producer_id} "
            f"producerEpoch: {h.producer_epoch} partitionLeaderEpoch: {h.partition_leader_epoch} "
            f"isTransactional: {_bool(h.is_transactional)} isControl: {_bool(h.is_control)} "
            f"deleteHorizonMs: {horizon}"
        )
    else:
        head = f"offset: {h.base_offset}"  # a legacy entry's offset field: its last offset
    return (
        f"{head} position: {position} {TIMESTAMP_TYPES[h.timestamp_type]}: {h.max_timestamp} "
        f"size: {h.size} magic: {h.magic} compresscodec: {codec_name(h.attributes)} crc: {h.crc} "
        f"isvalid: {_bool(valid)}"
    )


def _is_valid(buf, h: BatchHeader) -> bool:
    if h.magic >= 2 and h.size < _V2_OVERHEAD:
        return False
    try:
        validate_batch(buf, h)
        return True
    except CorruptRecordError:
        return False


def _kafka_header(buf, pos: int, end: int) -> BatchHeader | None:
    """The batch at ``pos`` as Kafka's ``FileLogInputStream.nextBatch`` takes it (its size already
    checked against the minimum and the end): any magic past 1 is a v2 batch whose 61-byte header is
    read from ``pos`` whatever its length says, and a negative base offset is printed as it is (the
    storage engine's reader calls both damage); magic 0 and 1 as the engine reads them. None where only
    part of a batch is left; ``CorruptRecordError`` where Kafka stops with a stack trace."""
    magic = struct.unpack_from(">b", buf, pos + _HEADER_SIZE_UP_TO_MAGIC - 1)[0]
    if magic > 1:
        if pos + V2_HEADER_SIZE > len(buf):
            raise CorruptRecordError(
                f"Failed to read `DefaultRecordBatch` header: expected {V2_HEADER_SIZE} bytes, "
                f"the file ends after {len(buf) - pos}",
                pos,
            )
        return BatchHeader(pos, *_V2_FIELDS.unpack_from(buf, pos))
    if magic < 0:
        raise CorruptRecordError(f"Invalid magic used in LegacyRecord: {magic}", pos)
    return read_batch_header(buf, pos, end)


def _as_v2(h: BatchHeader) -> BatchHeader:
    """A batch of magic 3 and up is read as v2, as Kafka reads it (its line still says its magic)."""
    return h._replace(magic=2) if h.magic > 2 else h


def _start_line(name: str, err: TextIO) -> tuple[str | None, bool]:
    """The line Kafka prints before the batches (None for none), and whether the name was usable."""
    base = os.path.basename(name)
    if base.endswith(".log"):
        head = base.split(".")[0]
        if not head.isdigit():
            print(f"kafkafs: error: {name}: not a segment name (<20-digit base offset>.log)", file=err)
            return None, False
        return f"Log starting offset: {int(head)}", True
    if base == BOOTSTRAP_SNAPSHOT:
        return "KRaft bootstrap snapshot", True
    m = _SNAPSHOT_NAME.match(base)
    if m is None:
        print(
            f"kafkafs: error: {name}: not a KRaft snapshot name (<20-digit offset>-<10-digit epoch>.checkpoint)",
            file=err,
        )
        return None, False
    return f"Snapshot end offset: {int(m.group(1))}, epoch: {int(m.group(2))}", True


#: How much one read of :class:`_File` asks for at least.
_READ_BYTES = 1 << 20


class _Unreadable(Exception):
    """The disk would not give the bytes from ``position`` on (``error``: its EIO)."""

    def __init__(self, position: int, error: OSError) -> None:
        super().__init__(position, error)
        self.position, self.error = position, error


class _Shrank(Exception):
    """The file ended at ``position``, before the size it had when the dump began (a writer cut it, or a
    file system's read ended before its stat size)."""

    def __init__(self, position: int) -> None:
        super().__init__(position)
        self.position = position


class _File:
    """A file read forward through a window of at least :data:`_READ_BYTES`, never mapped: a page the
    disk will not give is an EIO for a read, where a map's page kills the process with SIGBUS (review11
    R11-4; a page read fine once and evicted can fail the next time). One caller."""

    def __init__(self, fd: int, size: int) -> None:
        self.fd, self.size = fd, size
        self._start = 0
        self._window = b""

    def read(self, position: int, n: int) -> bytes:
        """The bytes ``[position, position + n)`` (fewer at the end of the file, as its size was when the
        dump began); :class:`_Unreadable` naming the first position the disk would not give,
        :class:`_Shrank` where the file ends before that size now."""
        n = max(0, min(n, self.size - position))
        start = position - self._start
        if start < 0 or start + n > len(self._window):
            self._start, self._window = position, self._pread(position, max(n, _READ_BYTES), n)
            start = 0
        got = self._window[start : start + n]
        if len(got) < n:
            raise _Shrank(position + len(got))
        return got

    def _pread(self, position: int, n: int, need: int) -> bytes:
        """Up to ``n`` bytes from ``position``, fewer where the disk fails past the first ``need``."""
        n = min(n, self.size - position)
        out = bytearray()
        while len(out) < n:  # a short read stops before a page the disk will not give: read on to its error
            try:
                chunk = os.pread(self.fd, n - len(out), position + len(out))
            except OSError as exc:
                if exc.errno not in DISK_ERRNOS:
                    raise
                if len(out) >= need:  # enough for now: the next read meets it where it needs it
                    break
                raise _Unreadable(position + len(out), exc) from None
            if not chunk:  # the file is shorter now
                break
            out += chunk
        return bytes(out)


def _segment_base(name: str) -> int | None:
    """A ``.log``'s base offset, from its name (None for a KRaft snapshot)."""
    base = os.path.basename(name)
    return int(base.split(".")[0]) if base.endswith(".log") else None


def dump_log(name: str, out: TextIO, err: TextIO, options: DumpOptions, errors) -> int:
    """Print the batches of ``name`` (and records when deep); return how many problems were found."""
    first, usable = _start_line(name, err)
    if not usable:
        return 1
    if first is not None:
        print(first, file=out)
    with os.fdopen(open_file(name, os.O_RDONLY, follow=True), "rb") as f:  # never a FIFO waited on
        size = os.fstat(f.fileno()).st_size
        return _dump_batches(name, _File(f.fileno(), size), out, err, options, errors)


def _dump_batches(name: str, file: _File, out: TextIO, err: TextIO, options: DumpOptions, errors) -> int:
    problems = 0
    end = min(file.size, options.max_bytes)
    printer = RecordPrinter(options, name, err) if options.deep_iteration else None
    pos = 0
    write = out.write
    segment_base = _segment_base(name)
    before: tuple[int, int] | None = None  # (position, next offset) of the batch before
    try:
        while end - pos > _HEADER_SIZE_UP_TO_MAGIC:
            _offset, size = _PREFIX.unpack_from(file.read(pos, LOG_OVERHEAD), 0)
            if size < _MIN_SIZE:
                print(  # Kafka's CorruptRecordException, where its tool stops with a stack trace
                    f"kafkafs: Found record size {size} smaller than minimum record overhead ({_MIN_SIZE}) "
                    f"in file {java_path(name)}.",
                    file=err,
                )
                problems += 1
                break
            if pos > end - LOG_OVERHEAD - size:
                break
            # the batch, and at least a v2 header (Kafka reads 61 bytes whatever the length says), from
            # the file as far as it goes; positions in it are relative, the lines say the file's
            buf = file.read(pos, max(LOG_OVERHEAD + size, V2_HEADER_SIZE))
            try:
                h = _kafka_header(buf, 0, min(end - pos, len(buf)))
            except CorruptRecordError as exc:
                print(f"kafkafs: {name}: position {pos}: {exc.reason}", file=err)
                problems += 1
                break
            if h is None:
                break
            valid = _is_valid(buf, _as_v2(h))
            if not valid or h.attributes & 0x07 > 4 or h.base_offset < 0:
                problems += 1
            v2 = _as_v2(h)
            order = offsets_problem(v2.base_offset, v2.last_offset_delta, v2.magic, following=None,
                                    next_offset=None if before is None else before[1], segment_base=segment_base)
            if order is not None:  # Kafka's tool prints them (its gaps with --deep-iteration), exits 0
                both = ""
                if before is not None and v2.base_offset < before[1]:
                    both = f"; the batch before it is at position {before[0]}, both are damaged"
                print(f"kafkafs: {name}: position {pos}: {order}{both}", file=err)
                problems += 1
            before = (pos, v2.next_offset)
            write(batch_line(h, pos, valid) + "\n")
            if printer is not None:
                problems += printer.print_batch(buf, _as_v2(h), write, valid, position=pos)
            pos += h.end
        trailing = end - pos
        if trailing > 0 and options.max_bytes == INT_MAX:
            write(f"Found {trailing} invalid bytes at the end of {os.path.basename(name)}\n")
            problems += 1
    except _Unreadable as exc:  # the batches before it were printed; what follows cannot be read
        print(f"kafkafs: error: cannot read {name} from position {exc.position} (the batch at position {pos} "
              f"on): {(exc.error.strerror or str(exc.error)).lower()}", file=err)
        problems += 1
    except _Shrank as exc:  # Kafka's tool stops with an EOFException there (readFullyOrFail)
        print(f"kafkafs: error: {name} ended at position {exc.position} while it was read (the batch at "
              f"position {pos}; it was {file.size} bytes when the dump began: it shrank)", file=err)
        problems += 1
    if printer is not None:
        errors.non_consecutive(name, printer.gaps)
    return problems
