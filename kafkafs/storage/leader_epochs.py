"""The partition's ``leader-epoch-checkpoint``, kept as Kafka's ``LeaderEpochFileCache`` keeps it.

Entries ``(epoch, start offset)``: the first offset written in each leader epoch, epochs and offsets
strictly increasing. Kafka's rules, which a broker loading the folder relies on:

- ``assign(epoch, offset)`` on append (and in recovery) for each batch: a new entry when the epoch is
  not the latest, or the same epoch now starts earlier; entries that would break monotonicity (epoch or
  start offset at or above the new one's) are removed first. The file is rewritten when it changed.
- ``truncate_from_end(offset)`` with the log: entries starting at or past ``offset`` go.
- ``truncate_from_start(offset)`` when the log start offset moves forward: entries that start at or
  before it go, the last of them kept with its start moved to ``offset``.
- ``clear()`` when the log is emptied and restarted.

The file is written as Kafka's ``CheckpointFile`` writes it (version 0, count, ``epoch offset`` lines;
to a ``.tmp`` file, fsynced, renamed). Kafka creates it empty with the log; so does :meth:`create`.
Thread safety: callers serialise writes (the Log's lock); reads of :attr:`entries` see a whole list.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import CorruptRecordError, UnsafeFileError
from ..format.checkpoint import EPOCH_CHECKPOINT_FILE, parse_epoch_checkpoint, render_epoch_checkpoint
from .safefiles import read_regular_file, write_atomically

if TYPE_CHECKING:
    from ..format.batch import BatchHeader

__all__ = ["LeaderEpochCache", "read_regular_file"]

class LeaderEpochCache:
    """``leader-epoch-checkpoint`` of one partition folder (see the module's docstring)."""

    def __init__(self, directory: Path, *, writable: bool) -> None:
        self.path = Path(directory) / EPOCH_CHECKPOINT_FILE
        self.writable = writable
        self.entries: list[tuple[int, int]] = []
        self.loaded_ok = True
        try:
            self.entries = parse_epoch_checkpoint(read_regular_file(self.path))
        except FileNotFoundError:
            pass
        except (OSError, CorruptRecordError, UnsafeFileError):
            self.loaded_ok = False  # rewritten from the log's batches by the next flush

    def __repr__(self) -> str:
        return f"LeaderEpochCache({self.entries})"

    @property
    def latest_epoch(self) -> int | None:
        return self.entries[-1][0] if self.entries else None

    def create(self) -> None:
        """An empty checkpoint for a new partition (Kafka's ``CheckpointFile`` creates the file)."""
        if self.writable and not self.path.exists():
            self._flush()

    def _flush(self) -> None:
        if self.writable:
            write_atomically(self.path, render_epoch_checkpoint(self.entries))

    def assign(self, epoch: int, start_offset: int) -> bool:
        """Record that ``epoch`` starts at ``start_offset``; True (and the file rewritten) if it changed."""
        if epoch < 0:
            return False
        latest = self.entries[-1] if self.entries else None
        if latest is not None and latest[0] == epoch and start_offset >= latest[1]:
            return False
        self.entries = [(e, s) for e, s in self.entries if e < epoch and s < start_offset]
        self.entries.append((epoch, start_offset))
        self._flush()
        return True

    def assign_batches(self, headers: Iterable[BatchHeader]) -> None:
        """``assign`` for each v2 batch header, in order, with one write at the end."""
        changed = False
        flush, self._flush = self._flush, lambda: None  # type: ignore[method-assign]  # put off while assigning
        try:
            for h in headers:
                if h.magic >= 2 and h.partition_leader_epoch >= 0:
                    changed |= self.assign(h.partition_leader_epoch, h.base_offset)
        finally:
            self._flush = flush  # type: ignore[method-assign]  # and put back
        if changed or not self.loaded_ok:
            self.loaded_ok = True
            self._flush()

    def truncate_from_end(self, end_offset: int) -> None:
        """Remove the entries that start at or past ``end_offset`` (the log was truncated there)."""
        if self.entries and self.entries[-1][1] >= end_offset:
            self.entries = [(e, s) for e, s in self.entries if s < end_offset]
            self._flush()

    def truncate_from_start(self, start_offset: int) -> None:
        """The log now starts at ``start_offset``: entries at or before it go, the last of them kept
        as ``(its epoch, start_offset)``."""
        removed = [(e, s) for e, s in self.entries if s <= start_offset]
        if not removed:
            return
        updated = [(removed[-1][0], start_offset), *((e, s) for e, s in self.entries if s > start_offset)]
        if updated != self.entries:
            self.entries = updated
            self._flush()

    def clear(self) -> None:
        """No entries (the log was emptied)."""
        if self.entries or not self.path.exists():
            self.entries = []
            self._flush()
