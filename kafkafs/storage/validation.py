"""What makes a batch in a segment invalid: the one rule that ``recover`` cuts by and ``verify`` reports.

``recover`` (and every writable open after an unclean shutdown) truncates a segment at the first batch
this module rejects; ``verify`` reports every batch it rejects. Sharing the rule means a directory that
``recover`` left is one that ``verify`` accepts (issue 9, finding 6: a batch whose CRC holds can still
be damaged, in the fields before the CRC or in records whose count or codec bits lie).

A batch is rejected when:

- its header or CRC does not hold (:func:`~kafkafs.format.batch.validate_batch`);
- its offsets do not follow: the base offset below the segment's base or below the end of the batch
  before it (the base offset is outside the CRC), a negative ``lastOffsetDelta``, or a last offset at or
  past the next segment's base offset;
- its records do not decode (``deep``, the default): a record count that does not match the records,
  a compression codec id that is not one of Kafka's, a body that does not inflate, or inflates past the
  limit (a decompression bomb).

Thread safety: pure functions of their arguments.
"""

from __future__ import annotations

from ..errors import CorruptRecordError, RecordTooLargeError
from ..format.batch import BatchHeader, decode_batch, validate_batch

__all__ = ["batch_problem"]


def batch_problem(
    buf: bytes,
    header: BatchHeader,
    *,
    next_offset: int,
    segment_base: int,
    upper: int | None = None,
    deep: bool = True,
) -> str | None:
    """Why the batch at ``header`` in ``buf`` is invalid, or None when it is valid.

    ``next_offset``: one past the last offset of the batch before it (the segment's base offset for
    the first); ``upper``: the next segment's base offset, which no offset here may reach.
    """
    try:
        validate_batch(buf, header)
    except CorruptRecordError as exc:
        return exc.reason
    h = header
    if h.base_offset < segment_base:
        return f"offset {h.base_offset} is below the segment's base {segment_base}"
    if h.base_offset < next_offset:
        return f"offsets go backwards ({h.base_offset} after {next_offset - 1})"
    if h.magic >= 2 and h.last_offset_delta < 0:
        return f"negative lastOffsetDelta {h.last_offset_delta}"
    if upper is not None and h.last_offset >= upper:
        return f"last offset {h.last_offset} reaches the next segment's base {upper}"
    if deep:
        try:
            decode_batch(buf, h, validate=False)
        except CorruptRecordError as exc:
            return exc.reason
        except RecordTooLargeError as exc:  # no memory to inflate it into: not a batch kafkafs can read
            return str(exc)
    return None
