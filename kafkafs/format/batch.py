"""RecordBatch v2 (magic 2) and legacy magic 0/1 entries: one import for the whole batch format.

Three levels of work, cheapest first:

* :func:`read_batch_header` / :func:`scan_batches` (:mod:`.batchheader`): the fixed header only, no
  records touched; what index rebuilding, offset lookups and recovery need.
* :func:`decode_batch`: one whole batch into columns (:class:`DecodedBatch`), CRC-checked and
  decompressed here, its records decoded by the compiled kernel (:mod:`.kernel`) or, without it, by
  the pure-Python reference (:func:`.records.decode_records`), which the kernel matches byte for byte.
* :func:`encode_batch` (:mod:`.encode`): records into the bytes of one batch, with its CRC.
"""

from __future__ import annotations

from ..errors import CorruptRecordError
from . import Buffer
from . import compression as _compression
from . import kernel as _kernel
from .batchheader import (
    _COMPRESSION_MASK,
    CREATE_TIME,
    DEFAULT_MAX_INFLATED_BYTES,
    LOG_APPEND_TIME,
    LOG_OVERHEAD,
    NO_PRODUCER_ID,
    NO_TIMESTAMP,
    V2_HEADER_SIZE,
    BatchHeader,
    batch_header_at,
    read_batch_header,
    scan_batches,
    validate_batch,
)
from .compression import Codec
from .encode import (
    batch_groups,
    encode_batch,
    encode_control_batch,
    encode_records,
    set_base_offset,
    set_log_append_time,
    set_partition_leader_epoch,
)
from .records import NO_HEADERS, DecodedBatch, Header, Record, control_type_of, decode_records

__all__ = [
    "BatchHeader",
    "DecodedBatch",
    "Record",
    "Header",
    "Codec",
    "read_batch_header",
    "batch_header_at",
    "scan_batches",
    "decode_batch",
    "records_section",
    "batch_groups",
    "encode_batch",
    "encode_records",
    "encode_control_batch",
    "control_type_of",
    "validate_batch",
    "set_base_offset",
    "set_partition_leader_epoch",
    "set_log_append_time",
    "LOG_OVERHEAD",
    "V2_HEADER_SIZE",
    "DEFAULT_MAX_INFLATED_BYTES",
    "NO_TIMESTAMP",
    "NO_PRODUCER_ID",
    "CREATE_TIME",
    "LOG_APPEND_TIME",
]


def _header_at(buf: Buffer, header: BatchHeader | int) -> BatchHeader:
    if isinstance(header, BatchHeader):
        return header
    return batch_header_at(buf, header)


def records_section(buf: Buffer, header: BatchHeader, max_inflated_bytes: int = DEFAULT_MAX_INFLATED_BYTES) -> bytes:
    """The records of the v2 batch ``header`` of ``buf``, decompressed (bounded by
    ``max_inflated_bytes``); the CRC is the caller's to check first."""
    data = buf[header.position + V2_HEADER_SIZE : header.end]
    if not isinstance(data, bytes):
        data = bytes(data)
    codec = header.attributes & _COMPRESSION_MASK
    if codec:
        if codec > 4:
            raise CorruptRecordError(f"unknown compression type {codec}", header.position)
        try:
            data = _compression.decompress(Codec(codec), data, max_inflated_bytes)
        except CorruptRecordError as exc:
            raise CorruptRecordError(exc.reason, header.position) from None
    return data


def decode_batch(
    buf: Buffer,
    header: BatchHeader | int = 0,
    *,
    validate: bool = True,
    max_inflated_bytes: int = DEFAULT_MAX_INFLATED_BYTES,
    ordered: bool = True,
    inner_crcs: bool = False,
) -> DecodedBatch:
    """Decode the whole batch at ``header`` (a :class:`BatchHeader` or a position) into columns.

    Raises :class:`CorruptRecordError` (position relative to ``buf``) for anything that does not parse,
    including a batch cut short by the end of ``buf``. ``validate``: every CRC the batch carries is
    checked: a v2 batch's, a legacy message's, and a legacy wrapper's inner messages' own, as Kafka's
    consumer does (``check.crcs``): readers treat an inner message that fails it as they treat a v2
    batch that fails its CRC, damage to the reads that need it. ``ordered``: a legacy wrapper's inner
    offsets that go backwards, or that do not end at the wrapper's offset, are damage (a dump that
    prints what Kafka's tool prints passes False: see :mod:`.legacy`). ``inner_crcs``: the inner
    messages' CRCs without the wrapper's (``verify``, which checks the wrapper's itself).
    """
    header = _header_at(buf, header)
    if validate:
        validate_batch(buf, header)
    if header.magic != 2:
        return _decode_legacy(buf, header, max_inflated_bytes, ordered, inner_crcs or validate)
    data = records_section(buf, header, max_inflated_bytes)
    return decode_records_at(data, header)


def decode_records_at(data: bytes, header: BatchHeader) -> DecodedBatch:
    """:func:`decode_records` by the kernel when it is built, errors placed at the batch's position."""
    try:
        if _kernel.KERNEL is not None:
            return _kernel.decode_records(data, header)
        return decode_records(data, header)
    except CorruptRecordError as exc:
        raise CorruptRecordError(exc.reason, header.position) from None
    except (IndexError, ValueError, OverflowError) as exc:
        raise CorruptRecordError(f"records do not parse: {exc}", header.position) from None


def _decode_legacy(
    buf: Buffer, header: BatchHeader, max_inflated_bytes: int, ordered: bool, inner_crcs: bool = False
) -> DecodedBatch:
    from .legacy import decode_legacy_entry

    entry = decode_legacy_entry(buf, header.position, max_inflated_bytes, validate_crc=False, ordered=ordered,
                                inner_crcs=inner_crcs)
    offsets = entry.offsets
    if offsets:
        header = header._replace(base_offset=offsets[0], last_offset_delta=offsets[-1] - offsets[0],
                                 record_count=len(offsets))
    return DecodedBatch(header, offsets, entry.timestamps, entry.keys, entry.values,
                        [NO_HEADERS] * len(offsets))
