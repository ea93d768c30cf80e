"""What makes a batch in a segment invalid: the rule that ``verify`` reports and readers refuse by.

``recover`` (and every writable open after an unclean shutdown) cuts only where Kafka's recovery cuts
(:mod:`.recovery_walk`: sizes and CRCs, and offsets that do not fit the segment); the offsets rules
here it keeps to only where Kafka would discard a whole segment. ``verify`` reports every batch this
module rejects (issue 9, finding 6:
a batch whose CRC holds can still be damaged, in the fields before the CRC or in records whose count or
codec bits lie). Records that do not decode in a batch whose CRC holds are damage to ``verify`` and to
every reader, but ``recover`` keeps the batch, as Kafka's ``LogSegment.recover`` does (it checks the
size and the CRC only: a broker keeps serving that batch and every one after it).

A batch is rejected when:

- its header or CRC does not hold (:func:`~kafkafs.format.batch.validate_batch`);
- its offsets do not follow (:func:`order_problem`, the rule every reader keeps too): the base offset
  below the segment's base or below the end of the batch before it (the base offset is outside the CRC),
  a negative ``lastOffsetDelta``, or offsets that run to or past the base offset of the batch after it
  (the next segment's base offset, for the last batch of a segment; a legacy compressed wrapper's first
  offset is its first inner message's, :func:`first_offset`). Two neighbours that overlap are
  both damage to a reader and to ``verify``: which one of them lies, the bytes cannot say (``recover``
  keeps both, as Kafka's recovery does, see :mod:`.recovery_walk`);
- its records do not decode (``deep``, the default; :func:`records_problem`): a record count that does
  not match the records, a compression codec id that is not one of Kafka's, a body that does not
  inflate, or a legacy wrapper's inner message whose own CRC fails (Kafka's consumer refuses it; its
  recovery, checking the wrapper's only, keeps it). A body that inflates past the limit a reader holds
  in memory (:class:`~kafkafs.errors.UninflatableBatch`: an 80 MiB record, or a bomb) is not rejected:
  Kafka stores and serves it (R15-7); a v2 batch's records are decoded a run at a time instead
  (:mod:`kafkafs.format.bigbatch`), a legacy wrapper's are not.

Thread safety: pure functions of their arguments.
"""

from __future__ import annotations

from collections.abc import Generator, Iterator

from ..errors import CorruptRecordError, RecordTooLargeError, UninflatableBatch
from ..format.batch import BatchHeader, decode_batch, validate_batch
from ..format.bigbatch import check_in_pieces
from .records import BatchView

__all__ = ["batch_problem", "records_problem", "order_problem", "offsets_problem", "in_order", "checked_order",
           "first_offset", "kept_problem"]


def order_problem(
    header: BatchHeader, *, next_offset: int | None, following: int | None, segment_base: int | None = None
) -> str | None:
    """Why the offsets of the batch ``header`` do not fit between its neighbours, or None when they do.

    ``next_offset``: one past the last offset of the batch before it in the file (None: none, or not
    known); ``following``: the base offset of the batch after it (the next segment's base offset for
    the last batch of a segment; None: none yet, or not known); ``segment_base``: the segment's base
    offset, below which no offset of it may lie. Only header fields: the offsets are outside the CRC.
    """
    return offsets_problem(header.base_offset, header.last_offset_delta, header.magic, next_offset=next_offset,
                           following=following, segment_base=segment_base)


def offsets_problem(
    base_offset: int, last_offset_delta: int, magic: int, *, next_offset: int | None, following: int | None,
    segment_base: int | None = None,
) -> str | None:
    """:func:`order_problem` on the three header fields it reads, for a walk that reads them by their
    position in the bytes (:func:`~kafkafs.format.batchheader.v2_offsets`) rather than whole headers."""
    if segment_base is not None and base_offset < segment_base:
        return f"offset {base_offset} is below the segment's base {segment_base}"
    if next_offset is not None and base_offset < next_offset:
        return f"offsets go backwards ({base_offset} after {next_offset - 1})"
    if magic >= 2 and last_offset_delta < 0:
        return f"negative lastOffsetDelta {last_offset_delta}"
    if following is not None and base_offset + last_offset_delta + 1 > following:
        return f"offsets run past the next batch's base ({base_offset + last_offset_delta}, then {following})"
    return None


def in_order(
    views: Iterator[BatchView], *, next_offset: int | None, upper: int | None = None, segment_base: int | None = None
) -> Iterator[tuple[BatchView, str | None]]:
    """``(view, order problem or None)`` for each batch of a walk through one segment (``views`` from
    :meth:`~kafkafs.storage.segment_files.SegmentFiles.batches`, or ``read_from``), each judged between
    the batch before it and the one after it (:func:`order_problem`): a batch is handed on once the
    header after it was read, or the walk ended (then ``upper``, the next segment's base offset, is
    what follows it; None when the walk stopped at damage it raises, or at the end of what is written).
    ``next_offset``: one past the last offset of the batch before the first (None: not known).
    Damage the walk raises is raised after the batch before it was handed on."""
    pending: BatchView | None = None
    pending_first = 0
    try:
        for view in views:
            h = view.header
            first = h.base_offset if h.magic == 2 or not h.attributes & 0x07 else first_offset(view)
            if pending is not None:
                yield pending, _order(pending, pending_first, next_offset, first, segment_base)
                next_offset = pending.header.next_offset
            pending, pending_first = view, first
    except CorruptRecordError:
        if pending is not None:
            yield pending, _order(pending, pending_first, next_offset, None, segment_base)
        raise
    if pending is not None:
        yield pending, _order(pending, pending_first, next_offset, upper, segment_base)


def _order(view: BatchView, first: int, next_offset: int | None, following: int | None,
           segment_base: int | None) -> str | None:
    """:func:`order_problem` of ``view`` whose first offset is ``first`` (:func:`first_offset`)."""
    h = view.header
    if first == h.base_offset:
        return order_problem(h, next_offset=next_offset, following=following, segment_base=segment_base)
    problem = offsets_problem(first, h.last_offset - first, h.magic, next_offset=next_offset, following=following,
                              segment_base=segment_base)
    return None if problem is None else f"{problem} in the compressed message at offset {h.last_offset}"


def first_offset(view: BatchView) -> int:
    """The first offset of the batch at ``view``: its header's base offset, but for a legacy (magic 0/1)
    compressed wrapper, whose header holds only its last offset, the first of its inner messages (they
    are inflated to find it). A wrapper whose first inner offset is not past the batch before it is
    where a reader would drop records without a word (review6 F11; Kafka's consumer drops what lies below
    its fetch position, its dump tool says "Non-consecutive offsets"). A wrapper whose records do not
    decode gives its header's offset (its damage is said where its records are read)."""
    h = view.header
    if h.magic == 2 or not h.attributes & 0x07:
        return h.base_offset
    try:
        offsets = decode_batch(view.buf, h, validate=False).offsets
    except (CorruptRecordError, RecordTooLargeError):
        return h.base_offset
    return offsets[0] if offsets else h.base_offset


def checked_order(
    views: Iterator[BatchView], file: str, *, next_offset: int | None, upper: int | None = None,
    segment_base: int | None = None,
) -> Generator[BatchView, None, None]:
    """The batches of :func:`in_order`, for a reader: a batch whose offsets do not fit its neighbours
    raises :class:`CorruptRecordError` at ``file`` and its position, where a reader would otherwise skip
    records or show offsets out of order (SPEC §4: never skipped silently)."""
    for view, problem in in_order(views, next_offset=next_offset, upper=upper, segment_base=segment_base):
        if problem is not None:
            raise CorruptRecordError(problem, view.position, file)
        yield view


def batch_problem(
    buf: bytes,
    header: BatchHeader,
    *,
    next_offset: int,
    segment_base: int,
    following: int | None = None,
    deep: bool = True,
) -> str | None:
    """Why the batch at ``header`` in ``buf`` is invalid, or None when it is valid.

    ``next_offset``: one past the last offset of the batch before it (the segment's base offset for
    the first); ``following``: the base offset of the batch after it (the next segment's base offset
    for the last), which no offset here may reach (:func:`order_problem`).
    """
    try:
        validate_batch(buf, header)
    except CorruptRecordError as exc:
        return exc.reason
    problem = order_problem(header, next_offset=next_offset, following=following, segment_base=segment_base)
    if problem is not None:
        return problem
    return records_problem(buf, header) if deep else None


def records_problem(buf: bytes, header: BatchHeader) -> str | None:
    """Why the records of the batch at ``header`` (its CRC checked already) do not decode, or None. A v2
    batch that inflates past the limit (:class:`~kafkafs.errors.UninflatableBatch`: valid data, R15-7) has
    its records decoded a run at a time (:func:`~kafkafs.format.bigbatch.check_in_pieces`, as ``verify``
    checks them); a legacy wrapper past it is None (kept, not damage; ``verify`` notes it)."""
    try:
        decode_batch(buf, header, validate=False, inner_crcs=True)
    except UninflatableBatch:
        if header.magic != 2:
            return None
        try:
            check_in_pieces(buf, header)
        except UninflatableBatch:  # a piece past the limit (a snappy chunk): not decoded, kept
            return None
        except CorruptRecordError as exc:
            return exc.reason
    except CorruptRecordError as exc:
        return exc.reason
    except RecordTooLargeError as exc:  # no memory to inflate it into: not a batch kafkafs can read
        return str(exc)
    return None


def kept_problem(view: BatchView, order: str | None, next_offset: int) -> str | None:
    """Why readers refuse a batch that a recovery keeps, as Kafka's does (None: nothing): its records do
    not decode (:func:`records_problem`), or it is a legacy compressed wrapper whose inner offsets overlap
    the batch before it (``order``, :func:`in_order`'s word; Kafka's recovery reads no inner message)."""
    why = records_problem(view.buf, view.header)
    if why is None and order is not None and first_offset(view) < next_offset:
        return order
    return why
