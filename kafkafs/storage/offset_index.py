"""The ``.index`` file: offset -> position of the batch holding it (Kafka's ``OffsetIndex``).

The file, its map and their life are :class:`~kafkafs.storage.index.AbstractIndex`'s (threads: see
there); this class only says what an entry means.
"""

from __future__ import annotations

from kafkafs.errors import InvalidInput
from kafkafs.format import Buffer
from kafkafs.format import index as fmt
from kafkafs.format.index import OffsetPosition

from .index import AbstractIndex, IndexState

__all__ = ["OffsetIndex", "OffsetPosition"]


class OffsetIndex(AbstractIndex[OffsetPosition]):
    """Offset -> position of the batch holding it; sparse, one entry per ``index.interval.bytes``."""

    layout = fmt.OFFSET_INDEX

    def _parse(self, buf: Buffer | None, slot: int) -> OffsetPosition:
        assert buf is not None  # a slot is only asked of a mapped index
        rel, pos = fmt.decode_offset_entry(buf, slot)
        return OffsetPosition(self._base_offset + rel, pos)

    def _empty_last(self) -> OffsetPosition:
        return OffsetPosition(self._base_offset, 0)

    def _check(self, buf: Buffer, entries: int, log_size: int | None) -> str | None:
        return fmt.check_offset_index(buf, entries, log_size)

    @property
    def last_offset(self) -> int:
        """The last indexed offset, or the base offset when empty."""
        return self._snapshot().last.offset

    def append(self, offset: int, position: int) -> None:
        """Add ``offset`` (the last offset of the batch starting at ``position``).

        The offset must be larger than the last one; ``InvalidInput`` otherwise, when the index is full,
        or when the offset or position does not fit an entry.
        """
        with self._lock:
            st = self._writable_state()
            if st.entries >= st.max_entries:
                raise InvalidInput(f"{self._path}: attempt to append to a full index ({st.entries} entries)")
            if st.entries and offset <= st.last.offset:
                raise InvalidInput(
                    f"{self._path}: offset {offset} is not larger than the last indexed offset {st.last.offset}"
                )
            rel = self.relative_offset(offset)
            if not 0 <= position <= fmt.MAX_POSITION:
                raise InvalidInput(f"{self._path}: position {position} does not fit an index entry")
            self._write_entry(st, fmt.encode_offset_entry(rel, position), OffsetPosition(offset, position))

    def _floor(self, st: IndexState[OffsetPosition], target_offset: int) -> tuple[int, OffsetPosition]:
        """The slot of the entry with the greatest offset <= ``target_offset`` (-1: none) and that
        entry, ``(base_offset, 0)`` when there is none."""
        rel = target_offset - self._base_offset
        if st.entries == 0 or rel < 0:
            return -1, OffsetPosition(self._base_offset, 0)
        slot = fmt.floor_slot(st.mm or b"", st.entries, min(rel, 2**32 - 1), fmt.OFFSET_KEY)
        return slot, OffsetPosition(self._base_offset, 0) if slot < 0 else self._parse(st.mm, slot)

    def lookup(self, target_offset: int) -> OffsetPosition:
        """The entry with the greatest offset <= ``target_offset``; ``(base_offset, 0)`` if none is."""
        return self._floor(self._snapshot(), target_offset)[1]

    def lookup_bounded(self, target_offset: int) -> tuple[OffsetPosition, int | None]:
        """:meth:`lookup`'s entry, and the position of the entry two past it (None if there is none):
        the batch holding ``target_offset`` ends by then. That batch starts after the floor entry's
        batch and no later than the next entry's, and the next entry's batch ends where the one
        after it (or a batch between) starts, so a lookup needs no byte from that position on."""
        st = self._snapshot()
        slot, floor = self._floor(st, target_offset)
        if target_offset < self._base_offset or slot + 2 >= st.entries:
            return floor, None
        return floor, self._parse(st.mm, slot + 2).position
