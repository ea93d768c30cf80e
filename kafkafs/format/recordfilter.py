"""Which records a reader wants, decided from their bytes before anything is rendered: ``consume --key``,
``--key-base64``, ``--header NAME[=VALUE]``, and the table's kept offsets (a bitmap).

A :class:`RecordFilter` is the definition (:meth:`RecordFilter.accepts`, the Python reference) and what
the compiled kernel is handed (:meth:`RecordFilter.kernel_arg`, ``_kernel_filter.h``): both say the
same of every record (tests/format/test_recordfilter.py). Its conditions all hold for a record it
accepts:

- ``key``: the record's key equals these bytes (a null key equals nothing);
- ``headers``: for each ``(name, value)``, the record has a header whose key is ``name`` and, unless
  ``value`` is None, whose value equals ``value`` (a null header value equals nothing). A header key
  that was not valid UTF-8 (its decoded text holds U+FFFD) matches no name;
- ``bits``: bit ``offset - bits_base`` of this bitmap (little-endian bit order within each byte) is set.

Immutable; thread-safe.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from .records import Header

__all__ = ["RecordFilter", "KernelFilter", "MAX_HEADERS"]

#: What the kernel's ``filter_parse`` takes: key, (header name as UTF-8, value) pairs, bitmap, its base.
KernelFilter = tuple[
    bytes | None, tuple[tuple[bytes, bytes | None], ...], "bytes | bytearray | memoryview | None", int
]

#: Header conditions a filter may hold (the kernel's FILTER_MAX_HEADERS).
MAX_HEADERS = 8
_REPLACEMENT = "\ufffd"


@dataclass(frozen=True)
class RecordFilter:
    key: bytes | None = None
    headers: tuple[tuple[str, bytes | None], ...] = ()
    bits: bytes | bytearray | memoryview | None = None
    bits_base: int = 0

    def __post_init__(self) -> None:
        if len(self.headers) > MAX_HEADERS:
            raise ValueError(f"at most {MAX_HEADERS} header conditions")

    @property
    def empty(self) -> bool:
        """True when it accepts every record."""
        return self.key is None and not self.headers and self.bits is None

    def with_bits(self, bits: bytes | bytearray | memoryview | None, base: int) -> RecordFilter:
        return RecordFilter(self.key, self.headers, bits, base)

    def kernel_arg(self) -> KernelFilter:
        """The tuple the kernel's ``filter_parse`` takes."""
        return (
            self.key,
            tuple((name.encode("utf-8", "surrogatepass"), value) for name, value in self.headers),
            self.bits,
            self.bits_base,
        )

    def accepts(self, offset: int, key: bytes | None, headers: Sequence[Header]) -> bool:
        """Whether the record passes (``headers`` as decoded: keys as text)."""
        bits = self.bits
        if bits is not None:
            rel = offset - self.bits_base
            if rel < 0 or rel >= len(bits) * 8 or not bits[rel >> 3] & (1 << (rel & 7)):
                return False
        if self.key is not None and key != self.key:
            return False
        for name, value in self.headers:
            for h in headers:
                if h.key == name and _REPLACEMENT not in h.key and (value is None or h.value == value):
                    break
            else:
                return False
        return True
