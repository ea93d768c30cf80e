"""The ``.timeindex`` file: timestamp -> offset (Kafka's ``TimeIndex``).

The file, its map and their life are :class:`~kafkafs.storage.index.AbstractIndex`'s (threads: see
there); this class only says what an entry means.
"""

from __future__ import annotations

from kafkafs.errors import InvalidInput
from kafkafs.format import Buffer
from kafkafs.format import index as fmt
from kafkafs.format.index import TimestampOffset

from .index import AbstractIndex

__all__ = ["TimeIndex", "TimestampOffset"]


class TimeIndex(AbstractIndex[TimestampOffset]):
    """Timestamp -> offset: each entry is the largest timestamp so far and the offset that holds it.

    The last slot is kept for the entry written when the segment rolls, so the index is "full" one
    entry early, as in Kafka.
    """

    layout = fmt.TIME_INDEX
    _offset_field = fmt.TIME_OFFSET

    def _parse(self, buf: Buffer | None, slot: int) -> TimestampOffset:
        assert buf is not None  # a slot is only asked of a mapped index
        ts, rel = fmt.decode_time_entry(buf, slot)
        return TimestampOffset(ts, self._base_offset + rel)

    def _empty_last(self) -> TimestampOffset:
        return TimestampOffset(fmt.NO_TIMESTAMP, self._base_offset)

    def _check(self, buf: Buffer, entries: int, log_size: int | None) -> str | None:
        return fmt.check_time_index(buf, entries)

    def is_full(self) -> bool:
        st = self._snapshot()
        return st.entries >= st.max_entries - 1

    def maybe_append(self, timestamp: int, offset: int, skip_full_check: bool = False) -> None:
        """Append ``(timestamp, offset)`` if ``timestamp`` is larger than the last entry's (Kafka's rules).

        An equal timestamp is skipped silently: that is the roll or close entry repeating the last one.
        ``InvalidInput`` when the offset is smaller than the last entry's, the timestamp smaller than the
        last entry's, or the index is full (``skip_full_check``, for the roll entry, lets the reserved
        last slot be used).
        """
        with self._lock:
            st = self._writable_state()
            if not skip_full_check and st.entries >= st.max_entries - 1:
                raise InvalidInput(
                    f"{self._path}: attempt to append to a full time index ({st.entries} entries)"
                )
            last = st.last
            if st.entries and offset < last.offset:
                raise InvalidInput(
                    f"{self._path}: offset {offset} is smaller than the last time-indexed offset {last.offset}"
                )
            if st.entries and timestamp < last.timestamp:
                raise InvalidInput(
                    f"{self._path}: timestamp {timestamp} is smaller than the last indexed timestamp {last.timestamp}"
                )
            if timestamp > last.timestamp:
                rel = self.relative_offset(offset)
                self._write_entry(st, fmt.encode_time_entry(timestamp, rel), TimestampOffset(timestamp, offset))

    def lookup(self, target_timestamp: int) -> TimestampOffset:
        """The entry with the greatest timestamp <= the target; ``(fmt.NO_TIMESTAMP, base_offset)`` if none."""
        st = self._snapshot()
        slot = fmt.floor_slot(st.mm or b"", st.entries, target_timestamp, fmt.TIME_KEY)
        return TimestampOffset(fmt.NO_TIMESTAMP, self._base_offset) if slot < 0 else self._parse(st.mm, slot)
