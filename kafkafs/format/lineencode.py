"""Lines into RecordBatch v2 bytes: the write path of ``append`` and ``kafkafs produce`` (SPEC §3 "Writes").

:func:`encode_lines` takes a group of lines of a buffer (split at ``\\n``, the last line ending at the end
of the buffer) and gives the bytes of the batch that holds their records, as the reference does:
:func:`~.appendlines.parse_lines` for each line, then :func:`~.encode.encode_batch` of the records (cut
by :func:`~.encode.batch_groups` when one batch could not stay within ``max.message.bytes``). The
compiled kernel (``_kernel_lines.h``) does it in one pass when it is built: plain lines copied, record
objects parsed by its own JSON scanner, varints, CRC (and the codec's compression) with no Python
object per record; a line it is not sure of is parsed by the reference parser, which also raises the
error of a bad line (``line N: ...``). Both give the same bytes (tests/format/test_kernel_lines.py).
"""

from __future__ import annotations

from typing import NamedTuple

from ..errors import InvalidInput
from . import compression as _compression
from . import kernel as _kernel
from .appendlines import ProducerRecord, parse_lines, parse_record_line
from .compression import Codec
from .encode import batch_groups, encode_batch

__all__ = ["LineGroup", "encode_lines"]

_NO_LIMIT = 1 << 62


class LineGroup(NamedTuple):
    """``data``: the batch (or batches) of one group's records; ``end``: where the next group starts in
    the buffer (``len(buffer) + 1`` once its last line is taken); ``taken``: the lines taken."""

    data: bytes
    end: int
    taken: int


def _group(buf: bytes, start: int, max_lines: int, max_bytes: int) -> tuple[list[bytes], int]:
    """The lines from ``start`` as ``kafkafs produce`` groups them (until ``max_lines`` lines, or their
    bytes reach ``max_bytes``), and where the next group starts."""
    lines: list[bytes] = []
    size = 0
    pos = start
    while pos <= len(buf) and len(lines) < max_lines and size < max_bytes:
        nl = buf.find(b"\n", pos)
        end = len(buf) if nl < 0 else nl
        lines.append(buf[pos:end])
        size += end - pos
        pos = end + 1
    return lines, pos


def encode_lines(
    buf: bytes,
    start: int = 0,
    *,
    now: int,
    codec: Codec | int = Codec.NONE,
    max_message_bytes: int,
    leader_epoch: int = -1,
    first_number: int = 1,
    max_lines: int | None = None,
    max_bytes: int | None = None,
    reference: bool = False,
) -> LineGroup:
    """The records of the lines of ``buf`` from byte ``start`` (a group: every line, or until
    ``max_lines`` lines or ``max_bytes`` bytes of lines) as v2 batch bytes, timestamps None taken as
    ``now``, the topic's ``codec``; ``first_number`` is the number of the first line (for errors). A bad
    line raises :class:`InvalidInput` naming it, and nothing of the group is given. ``reference=True``: the
    Python definition (what the kernel is held to) even where the kernel is built. Thread-safe."""
    lines_limit = max_lines or _NO_LIMIT
    bytes_limit = max_bytes or _NO_LIMIT
    kernel = None if reference else _kernel.KERNEL
    if kernel is not None:
        codec = Codec(codec)
        compress = None if codec == Codec.NONE else (lambda body: _compression.compress(codec, body))
        data, end, count = kernel.encode_lines(
            buf, start, lines_limit, bytes_limit, first_number, now, max_message_bytes, leader_epoch,
            int(codec), compress, _parse,
        )
        if data is not None:
            return LineGroup(data, end, count)
        # several batches, or a number out of range: the reference's, of the lines the kernel counted
        lines_limit, bytes_limit = count, _NO_LIMIT
    lines, end = _group(buf, start, lines_limit, bytes_limit)
    records = parse_lines(lines, first_number)
    rows = [(now if r[0] is None else r[0], r[1], r[2], tuple(r[3])) for r in records]
    data = b"".join(
        encode_batch(group, compression=codec, partition_leader_epoch=leader_epoch)
        for group in batch_groups(rows, max_message_bytes)
    )
    return LineGroup(data, end, len(lines))


def _parse(line: bytes, number: int) -> ProducerRecord:
    try:
        return parse_record_line(line)
    except InvalidInput as exc:
        raise InvalidInput(f"line {number}: {exc}") from None
