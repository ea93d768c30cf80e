"""The broker's state files of one partition, kept in step with its Log: ``leader-epoch-checkpoint``,
the producer-state ``.snapshot`` files and ``partition.metadata``.

The Log calls one hook per event (load, append, roll, truncation, retention, close); each hook applies
the rule of Kafka's ``UnifiedLog`` / ``LogLoader`` for that event, so that a broker loading the folder
finds what it would have written itself:

- load (writable): epoch entries past the log end or before the log start are cut
  (``truncateFromEnd`` / ``truncateFromStart``); of the snapshots not at a segment's base only the
  latest stays (``removeStraySnapshots``), then those past the log end or at or below the log start
  go (``truncateAndReload``); a missing or
  unreadable checkpoint is rebuilt from the batches' leader epochs (as ``LogSegment.recover`` assigns
  them) at the first write or the close, so that opening stays fast;
- append: every v2 batch's leader epoch is assigned at its base offset; producers are updated;
- roll: a snapshot named by the new segment's base offset (``UnifiedLog.roll``);
- truncation: epochs from the new end go, snapshots past it go, the producer state is reloaded;
- retention: a deleted segment's snapshot goes, epochs are cut at the new log start;
- close (writable, after appends): a snapshot at the log end offset if it is past the latest
  (``UnifiedLog.close``).

The producer state is loaded lazily (from the latest snapshot, then only the batches after it; without
one from the first segment's start, below the log start too: review10 R10-10), the first time
something needs it. Thread safety: the Log calls these under its lock; readers of
``epochs.entries`` and ``topic_id`` see whole values.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from ..errors import CorruptRecordError
from ..format import Buffer
from ..format.batch import BatchHeader
from .leader_epochs import LeaderEpochCache
from .partition_metadata import read_topic_id
from .producer_state import ProducerState, snapshot_offsets

if TYPE_CHECKING:  # the Log makes its StateFiles: they know it as the LocalLog it is built on
    from .local_log import LocalLog
    from .segment import LogSegment

__all__ = ["StateFiles"]


class StateFiles:
    """See the module's docstring."""

    def __init__(self, log: LocalLog) -> None:
        self.log = log
        self.epochs = LeaderEpochCache(log.dir, writable=log.writable)
        self.topic_id = read_topic_id(log.dir)
        self._producers: ProducerState | None = None
        self._appended = False  # since the open: a clean close then snapshots the producers
        self._rebuild_epochs = False

    # ---------------------------------------------------------------------------------------- producers

    def producers(self) -> ProducerState:
        """The producer state at the log end offset (loaded on first use)."""
        state = self._producers
        if state is None:
            log = self.log
            state = ProducerState(log.dir, writable=log.writable)
            state.load(log.segments.values(), log.log_start_offset, log.log_end_offset)
            self._producers = state
        return state

    def ongoing_transactions(self) -> dict[int, int]:
        """producer id -> first offset of its transaction in progress, at the log end."""
        return self.producers().ongoing_transactions()

    # ---------------------------------------------------------------------------------------- hooks

    def on_load(self) -> None:
        """Cheap steps only (an open must stay fast on thousands of segments); a missing or unreadable
        checkpoint is rebuilt from the batches at the first write (:meth:`_ensure_epochs`)."""
        log = self.log
        # the partition's epoch never goes back, whatever truncation removes from the checkpoint
        seen = self.epochs.latest_epoch
        if log.writable:
            if not self.epochs.path.exists() or not self.epochs.loaded_ok:
                self._rebuild_epochs = True
                seen = self._last_batch_epoch()
            else:
                self.epochs.truncate_from_end(log.log_end_offset)
                self.epochs.truncate_from_start(log.log_start_offset)
            state = ProducerState(log.dir, writable=True)
            state.remove_stray_snapshots(log.segments.bases())
            state.remove_out_of_range(log.log_start_offset, log.log_end_offset)
        latest = max((e for e in (seen, self.epochs.latest_epoch) if e is not None), default=None)
        if latest is not None:
            log.leader_epoch = max(log.leader_epoch, latest)

    def _last_batch_epoch(self) -> int | None:
        """The highest leader epoch in the last segment that holds a batch."""
        for segment in reversed(list(self.log.segments.values())):
            epochs = [h.partition_leader_epoch for h in self._headers([segment]) if h.magic >= 2]
            if epochs:
                return max(epochs)
        return None

    def _ensure_epochs(self) -> None:
        """Rebuild a missing or unreadable checkpoint from the batches' leader epochs (as Kafka's
        ``LogSegment.recover`` assigns them), once."""
        if self._rebuild_epochs:
            self._rebuild_epochs = False
            self.epochs.entries = []
            self.epochs.loaded_ok = False  # written even when no batch has an epoch
            self.epochs.assign_batches(self._headers(self.log.segments.values()))
            self.epochs.truncate_from_start(self.log.log_start_offset)

    def _headers(self, segments: Iterable[LogSegment]) -> Iterable[BatchHeader]:
        for segment in segments:
            try:
                for view in segment.batches(0):
                    yield view.header
            except CorruptRecordError:  # damage ends the walk; recovery deals with it
                return

    def on_append(self, buf: Buffer, headers: Sequence[BatchHeader]) -> None:
        self._appended = True
        self._ensure_epochs()
        self.epochs.assign_batches(headers)
        if self._producers is not None:
            self._producers.append(buf, headers)
        elif any(h.producer_id >= 0 for h in headers):
            self.producers()  # loads through the log end, these batches included

    def on_roll(self, new_base: int) -> None:
        self.producers().take_snapshot(new_base, self.log.log_start_offset)

    def on_truncate(self, offset: int) -> None:
        self._ensure_epochs()
        self.epochs.truncate_from_end(offset)
        ProducerState(self.log.dir, writable=self.log.writable).truncate(offset)
        self._producers = None

    def on_truncate_fully(self, offset: int) -> None:
        self._rebuild_epochs = False
        self.epochs.clear()
        state = ProducerState(self.log.dir, writable=self.log.writable)
        state.clear(offset)
        self._producers = state

    def on_segments_deleted(self, base_offsets: Iterable[int], log_start_offset: int) -> None:
        self._ensure_epochs()
        state = ProducerState(self.log.dir, writable=self.log.writable)
        for base in base_offsets:
            state.remove_snapshot(base)
        self.epochs.truncate_from_start(log_start_offset)

    def on_close(self) -> None:
        log = self.log
        if not log.writable:
            return
        self._ensure_epochs()
        end = log.log_end_offset
        if not self._appended and self._producers is None:
            return  # nothing appended since the open: the folder stays as it was
        if end <= max(snapshot_offsets(log.dir), default=log.log_start_offset):
            return  # nothing new since the latest snapshot (Kafka's takeSnapshot writes none either)
        self.producers().take_snapshot(end, log.log_start_offset)

    def describe(self) -> dict[str, object]:
        """For ``partition.json``; a read-only log reads the files again (a broker may be writing them)."""
        if not self.log.writable:
            self.epochs = LeaderEpochCache(self.log.dir, writable=False)
            self.topic_id = read_topic_id(self.log.dir)
        return {
            "topicId": self.topic_id,
            "leaderEpoch": self.epochs.latest_epoch,
            "leaderEpochs": [{"epoch": e, "startOffset": s} for e, s in self.epochs.entries],
            "producerSnapshots": snapshot_offsets(self.log.dir),
        }
