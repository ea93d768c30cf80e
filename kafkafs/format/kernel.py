"""The compiled record kernel (``_kernel``, C), when it is built; None otherwise.

The kernel decodes the records section of a v2 batch and renders its JSON lines in one pass, byte for
byte as the Python reference (:mod:`.records`, :mod:`.jsonembed`, :mod:`.jsonrender`) does; it only
reads bytes that the Python layer has CRC-checked and decompressed. Callers go through :mod:`.batch`
and :mod:`.jsonview`, which fall back to the reference when :data:`KERNEL` is None (a machine where
the extension was not built); :func:`missing_note` is the one line to warn with. The kernel keeps no
state between calls and releases the GIL while it renders, so threads may call it at once.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ..errors import CorruptRecordError
from . import Buffer
from .batchheader import BatchHeader
from .jsonembed import indent_json as _indent_reference
from .records import NO_HEADERS, DecodedBatch, Header

if TYPE_CHECKING:
    from .recordfilter import KernelFilter

try:
    from . import _kernel as KERNEL  # type: ignore[attr-defined]  # noqa: N812  # compiled: no source for mypy

    KERNEL.setup(CorruptRecordError, Header, NO_HEADERS)
    _MISSING = None
except ImportError as exc:  # pragma: no cover - depends on the build
    KERNEL = None
    _MISSING = str(exc)

__all__ = [
    "KERNEL", "MODES", "missing_note", "decode_records", "render_raw", "render_columns", "render_value", "indent_json",
]

MODES = {"auto": 0, "string": 1, "base64": 2}


def missing_note() -> str | None:
    """One line saying the kernel is missing and what that costs, or None when it is built."""
    if KERNEL is not None:
        return None
    return (
        "the compiled record kernel (kafkafs.format._kernel) is not built, so records render through the "
        f"slower Python reference ({_MISSING}); build it with `pip install -e .` or scripts/build_kernel.py"
    )


def decode_records(data: bytes, header: BatchHeader) -> DecodedBatch:
    """:func:`.records.decode_records`, compiled (same columns, same errors without a position)."""
    columns = KERNEL.decode(
        data, header.base_offset, header.first_timestamp, header.max_timestamp, header.attributes, header.record_count
    )
    return DecodedBatch(header, *columns)


def render_raw(
    prefix: bytes,
    data: Buffer,
    header: BatchHeader,
    mode: str,
    lo: int | None,
    hi: int | None,
    ts_lo: int | None,
    ts_hi: int | None,
    what: int,
    record_filter: KernelFilter | None = None,
) -> bytes | list[int] | tuple[Any, ...]:
    """The lines of the records section ``data`` of v2 batch ``header`` that pass the bounds (and the
    filter, :meth:`~.recordfilter.RecordFilter.kernel_arg`): ``what`` 0 the bytes, 1 each line's length,
    2 ``(bytes, offsets, line ends)``."""
    rendered: bytes | list[int] | tuple[Any, ...] = KERNEL.render(
        prefix, data, header.base_offset, header.first_timestamp, header.max_timestamp, header.attributes,
        header.producer_id, header.record_count, MODES[mode], lo, hi, ts_lo, ts_hi, what, record_filter,
    )
    return rendered


def _list(column: Sequence[Any]) -> list[Any]:
    return column if type(column) is list else list(column)


def render_columns(prefix: bytes, batch: DecodedBatch, mode: str, start: int, stop: int) -> bytes:
    """Records ``start:stop`` of a decoded batch as JSON lines."""
    h = batch.header
    lines: bytes = KERNEL.render_columns(
        prefix, _list(batch.offsets), _list(batch.timestamps), _list(batch.keys), _list(batch.values),
        _list(batch.headers), h.timestamp_type == 1, h.is_control, h.is_transactional, h.producer_id, MODES[mode],
        start, stop,
    )
    return lines


def render_value(data: bytes | None, mode: str) -> bytes:
    """:func:`.jsonembed.render_value`, compiled."""
    value: bytes = KERNEL.render_value(data, MODES[mode])
    return value


def indent_json(compact: bytes, step: bytes = b"  ") -> bytes:
    """:func:`.jsonembed.indent_json`, compiled when the kernel is built (the same bytes for any input)."""
    if KERNEL is None:
        return _indent_reference(compact, step)
    indented: bytes = KERNEL.indent_json(compact, step)
    return indented
