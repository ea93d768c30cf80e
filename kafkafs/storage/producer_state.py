"""Producer state and its ``<offset>.snapshot`` files, as Kafka's ``ProducerStateManager`` keeps them.

For every producer id seen in the log (batches with a producer id: idempotent and transactional
producers): its epoch, its last batch (last sequence, last offset, offset delta, max timestamp), the
coordinator epoch of its last transaction marker and the first offset of its transaction in progress.
Kafka's rules (``ProducerAppendInfo``):

- a data batch sets the epoch (a new epoch forgets the older batch), records itself as the last
  batch, and starts a transaction at its base offset if it is transactional and none is in progress;
- a COMMIT or ABORT marker sets the epoch and the coordinator epoch, ends the transaction, and keeps
  the last batch; the timestamp becomes the marker batch's.

Snapshots (format in :mod:`kafkafs.format.producer_snapshot`) are taken where Kafka takes them: when a
segment rolls (named by the new segment's base offset) and at a clean close (named by the log end
offset); only past the latest snapshot, as Kafka's ``takeSnapshot``. Loading reads the latest snapshot at or
below the log end offset and replays only the batches after it, so neither this engine nor a broker
rescans the log (Kafka, after a clean shutdown, trusts a snapshot at the log end offset as is).
Truncation removes the snapshots past the new end; retention removes a deleted segment's snapshot.

Thread safety: not thread-safe; the Log calls it under its lock.
"""

from __future__ import annotations

import logging
import os
import struct
import time
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import CorruptRecordError, UnsafeFileError
from ..format import Buffer
from ..format.batch import BatchHeader, decode_batch
from ..format.producer_snapshot import (
    ProducerEntry,
    parse_producer_snapshot,
    render_producer_snapshot,
    snapshot_file_name,
)
from .dirlock import holder_of
from .leader_epochs import read_regular_file
from .names import snapshot_offset
from .safefiles import write_atomically

if TYPE_CHECKING:
    from .segment import LogSegment

__all__ = ["ProducerState", "apply_batch", "snapshot_offsets", "unreadable_snapshots", "remove_unreadable_snapshots"]

log = logging.getLogger("kafkafs.producer_state")

_INT_MAX = 2**31 - 1

#: A snapshot written this recently (seconds) may still be being written (review26 R26-3).
IN_FLIGHT_SECONDS = 5.0
#: How long a reader waits before reading an in-flight snapshot again (seconds).
REREAD_AFTER = 0.2


def _last_sequence(h: BatchHeader) -> int:
    if h.base_sequence < 0:
        return -1
    if h.base_sequence > _INT_MAX - h.last_offset_delta:
        return h.last_offset_delta - (_INT_MAX - h.base_sequence) - 1
    return h.base_sequence + h.last_offset_delta


def _marker(buf: Buffer, h: BatchHeader) -> tuple[int, int] | None:
    """(type id, coordinator epoch) of a transaction marker batch, None for other control batches."""
    try:
        batch = decode_batch(buf, h, validate=False)
    except CorruptRecordError:
        return None
    if not batch.keys or batch.keys[0] is None or len(batch.keys[0]) < 4:
        return None
    kind = struct.unpack_from(">h", batch.keys[0], 2)[0]
    value = batch.values[0]
    if kind not in (0, 1) or value is None or len(value) < 6:
        return None
    return kind, struct.unpack_from(">i", value, 2)[0]


def apply_batch(entries: dict[int, ProducerEntry], buf: Buffer, h: BatchHeader) -> None:
    """Update ``entries`` with one batch (as appended: its offsets final)."""
    pid = h.producer_id
    if h.magic < 2 or pid < 0:
        return
    old = entries.get(pid)
    if h.is_control:
        marker = _marker(buf, h)
        if marker is None:
            return
        base = old or ProducerEntry(pid, h.producer_epoch, -1, -1, 0, h.max_timestamp)
        entries[pid] = base._replace(
            epoch=h.producer_epoch,
            coordinator_epoch=marker[1],
            current_txn_first_offset=-1,
            timestamp=h.max_timestamp,
        )
        return
    txn_first = old.current_txn_first_offset if old is not None else -1
    if h.is_transactional and txn_first < 0:
        txn_first = h.base_offset
    entries[pid] = ProducerEntry(
        pid,
        h.producer_epoch,
        _last_sequence(h),
        h.last_offset,
        h.last_offset_delta,
        h.max_timestamp,
        old.coordinator_epoch if old is not None else -1,
        txn_first,
    )


def snapshot_offsets(directory: Path) -> list[int]:
    """The offsets of the regular ``<offset>.snapshot`` files in ``directory``, ascending."""
    out = []
    try:
        with os.scandir(directory) as it:
            for entry in it:
                offset = snapshot_offset(entry.name)
                if offset is not None and entry.is_file(follow_symlinks=False):
                    out.append(offset)
    except FileNotFoundError:
        pass
    return sorted(out)


def unreadable_snapshots(directory: Path) -> list[tuple[str, str]]:
    """(file name, why) for each regular ``<offset>.snapshot`` in ``directory`` that Kafka's reader
    refuses (``CorruptSnapshotException``: a CRC mismatch, a cut or unknown layout), in offset order.
    Damage (SPEC §4): a broker's load deletes such a file and rebuilds the producer state from an
    earlier snapshot or the log, as :meth:`ProducerState.load` reads past it; ``kafkafs recover`` removes
    it (:func:`remove_unreadable_snapshots`) and ``verify`` says it. A file that cannot be read (an OS
    error) is left to the caller's other reads."""
    out = []
    for off in snapshot_offsets(directory):
        name = snapshot_file_name(off)
        try:
            parse_producer_snapshot(read_regular_file(directory / name))
        except CorruptRecordError as exc:
            out.append((name, exc.reason))
        except (OSError, UnsafeFileError):
            continue
    return out


def remove_unreadable_snapshots(directory: Path) -> list[tuple[str, str]]:
    """Delete the snapshots :func:`unreadable_snapshots` finds (as a broker's load deletes them:
    ``removeAndDeleteSnapshot``); return them. Only for a writer holding the log directory's lock."""
    found = unreadable_snapshots(directory)
    for name, _why in found:
        try:
            os.unlink(directory / name)
        except FileNotFoundError:
            pass
    return found


class ProducerState:
    """The producers of one partition up to ``map_end_offset`` (exclusive), and its snapshot files."""

    def __init__(self, directory: Path, *, writable: bool) -> None:
        self.dir = Path(directory)
        self.writable = writable
        self.entries: dict[int, ProducerEntry] = {}
        self.map_end_offset = 0
        self.loaded_from: int | None = None  # the snapshot offset the state was read from, if any
        self.replayed_batches = 0  # batches read from the log at load

    def __repr__(self) -> str:
        return f"<ProducerState {len(self.entries)} producers up to {self.map_end_offset}>"

    def path(self, offset: int) -> Path:
        return self.dir / snapshot_file_name(offset)

    def load(self, segments: Iterable[LogSegment], log_start_offset: int, log_end_offset: int) -> None:
        """From the latest readable snapshot at or below ``log_end_offset``, then the batches after it;
        without one, from the start of the first segment, not from ``log_start_offset``: a broker's
        producer state keeps what it saw below a log start that kafka-delete-records or retention inside
        a segment moved (``onLogStartOffsetIncremented`` drops no producer), a transaction begun there
        still open (review10 R10-10). Writable: snapshots past the log end (left by a truncation or a
        crash) are removed first."""
        segments = list(segments)
        offsets = snapshot_offsets(self.dir)
        if self.writable:
            for off in [o for o in offsets if o > log_end_offset]:
                self._remove(off)
        self.entries, self.map_end_offset, self.loaded_from = {}, log_start_offset, None
        candidates = [o for o in offsets if o <= log_end_offset]
        for off in reversed(candidates):
            entries = self._read_snapshot(off, newest=off == candidates[-1])
            if entries is None:
                continue
            self.entries = {e.producer_id: e for e in entries}
            self.map_end_offset, self.loaded_from = off, off
            break
        self.replayed_batches = 0
        if self.loaded_from is None and segments:
            self.map_end_offset = min(self.map_end_offset, segments[0].base_offset)
        if self.map_end_offset < log_end_offset:
            self.replay(segments, self.map_end_offset)
        self.map_end_offset = max(self.map_end_offset, log_end_offset)

    def _read_snapshot(self, off: int, *, newest: bool) -> list[ProducerEntry] | None:
        """The entries of ``<off>.snapshot``; None (said) when it cannot be read. A reader beside a live
        broker meets the newest one as the broker writes it in place at a roll (empty or partial for a
        moment): when the log directory's ``.lock`` is held by another process or the file was written
        in the last :data:`IN_FLIGHT_SECONDS`, it is read again after :data:`REREAD_AFTER`, and if still
        unreadable said at INFO (in flight, not damage: review26 R26-3). Damage where nothing is writing
        (a stopped directory) stays a WARNING (SPEC §3: local damage, logged); a file gone since it was
        listed (deleted by retention) is said at DEBUG."""
        path = self.path(off)
        read_again = False
        while True:
            try:
                return parse_producer_snapshot(read_regular_file(path))
            except FileNotFoundError:
                log.debug("%s: producer snapshot %d gone since it was listed; an earlier one is used", self.dir, off)
                return None
            except (OSError, CorruptRecordError, UnsafeFileError) as exc:
                failed: Exception = exc
            if read_again or not (newest and not self.writable and not isinstance(failed, UnsafeFileError)
                                  and self._in_flight(path)):
                break
            read_again = True
            time.sleep(REREAD_AFTER)
        if read_again:
            log.info("%s: producer snapshot %d unreadable while it is being written (%s); an earlier one is used",
                     self.dir, off, failed)
        else:
            log.warning("%s: producer snapshot %d unreadable (%s); an earlier one is used", self.dir, off, failed)
        return None

    def _in_flight(self, path: Path) -> bool:
        """Whether the snapshot ``path`` may be being written now: another process (a running broker)
        holds the log directory's ``.lock``, or the file changed in the last :data:`IN_FLIGHT_SECONDS`."""
        try:
            if time.time() - os.stat(path).st_mtime < IN_FLIGHT_SECONDS:
                return True
        except OSError:
            return False
        return holder_of(self.dir.parent) is not None

    def replay(self, segments: Iterable[LogSegment], from_offset: int) -> None:
        """Apply the batches of ``segments`` whose last offset is at or past ``from_offset``."""
        for segment in segments:
            if segment.next_offset <= from_offset:
                continue
            try:
                for view in segment.batches(0):
                    h = view.header
                    if h.last_offset >= from_offset:
                        apply_batch(self.entries, view.buf, h)
                        self.replayed_batches += 1
            except CorruptRecordError:
                break  # recovery deals with the damage; the state covers what precedes it

    def append(self, buf: Buffer, headers: Iterable[BatchHeader]) -> None:
        """Batches just appended (their offsets assigned)."""
        for h in headers:
            apply_batch(self.entries, buf, h)
            self.map_end_offset = h.next_offset

    def ongoing_transactions(self) -> dict[int, int]:
        """producer id -> first offset of its transaction in progress."""
        return {
            pid: e.current_txn_first_offset
            for pid, e in self.entries.items()
            if e.current_txn_first_offset >= 0
        }

    def take_snapshot(self, offset: int, log_start_offset: int = 0) -> bool:
        """Write ``<offset>.snapshot`` (the state must reach ``offset``); True if written. As Kafka's
        ``takeSnapshot``, only past the latest snapshot (or the log start offset when there is none)."""
        if not self.writable or offset <= max(snapshot_offsets(self.dir), default=log_start_offset):
            return False
        entries = sorted(self.entries.values())
        write_atomically(self.path(offset), render_producer_snapshot(entries))
        return True

    def _remove(self, offset: int) -> None:
        try:
            os.unlink(self.path(offset))
        except FileNotFoundError:
            pass

    def remove_snapshot(self, offset: int) -> None:
        """Delete the snapshot named ``offset`` (its segment was deleted)."""
        if self.writable:
            self._remove(offset)

    def remove_out_of_range(self, log_start_offset: int, log_end_offset: int) -> None:
        """Kafka's ``truncateAndReload`` at every load: the snapshots past the log end, and those at or
        below the log start offset, go."""
        if self.writable:
            for off in snapshot_offsets(self.dir):
                if off > log_end_offset or off <= log_start_offset:
                    self._remove(off)

    def remove_stray_snapshots(self, segment_bases: Iterable[int]) -> None:
        """Kafka's ``removeStraySnapshots`` at every load: of the snapshots not named by a segment's base
        offset, only the latest stays, and only when it is at or past the last segment's base."""
        if not self.writable:
            return
        bases = set(segment_bases)
        strays = [off for off in snapshot_offsets(self.dir) if off not in bases]
        for off in strays[:-1]:
            self._remove(off)
        if strays and bases and strays[-1] < max(bases):
            self._remove(strays[-1])

    def truncate(self, offset: int) -> None:
        """The log was cut at ``offset``: snapshots past it go; the state must be loaded again."""
        if self.writable:
            for off in snapshot_offsets(self.dir):
                if off > offset:
                    self._remove(off)

    def clear(self, offset: int) -> None:
        """The log was emptied and restarts at ``offset``: no producers, no snapshots."""
        if self.writable:
            for off in snapshot_offsets(self.dir):
                self._remove(off)
        self.entries, self.map_end_offset, self.loaded_from = {}, offset, None
