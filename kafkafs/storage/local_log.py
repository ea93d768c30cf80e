"""LocalLog: one partition folder's segments and what reads and maintains them (Kafka's LocalLog).

The segments are a :class:`~kafkafs.storage.segments.LogSegments` keyed by base offset. Reads take no
lock: the skip list is safe for readers while the single writer inserts and removes, and segments
publish their size after their bytes. Rolls, truncation and retention serialise on one lock.
``wait_for_records`` lets a follower (``tail -f``, ``consume --follow``) sleep until new records
arrive, from this process or (read-only logs, via :meth:`LocalLog.refresh`) from another one.

Segments removed by retention are renamed ``.deleted`` and their files removed ``file.delete.delay.ms``
later (:meth:`LocalLog.delete_expired_files`), so that readers still in them can finish; a writable
open removes whatever ``.deleted`` files a previous run left. Appends, loading and transactions are
:class:`~kafkafs.storage.log.Log`'s.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Self

from ..errors import CorruptRecordError, InvalidInput, OffsetOutOfRange, UnsafeFileError
from ..format.batch import DecodedBatch, Record
from .config import LogConfig
from .handles import HandleBudget
from .names import (
    DELETED,
    INDEX_EXTENSIONS,
    LOG,
    SWAP,
    committed_swaps,
    log_file_base_offset,
    parse_partition_dir_name,
    segment_file_name,
)
from .records import BatchView
from .safefiles import (
    folder_identity,
    fsync_directory,
    regular_files_in_order,
    require_writable,
)
from .segment import LogSegment
from .segments import LogSegments
from .transactions import ProducerTransactions

if TYPE_CHECKING:
    from .recovery import RecoveryReport

__all__ = ["LocalLog", "fsync_directory"]

log = logging.getLogger("kafkafs.log")


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def _file_id(path: Path) -> int | None:
    try:
        return os.stat(path).st_ino
    except OSError:
        return None


class LocalLog:
    """One partition folder's segments: reading, rolling, flushing, truncating, retention, followers.

    Threads: safe to share. Readers take no lock; the single writer's changes serialise on ``_lock``.
    """

    def __init__(self, directory: str | os.PathLike[str], config: LogConfig | None = None, *, writable: bool = False,
                 clock: Callable[[], int] = _now_ms, budget: HandleBudget | None = None) -> None:
        self.dir = directory if isinstance(directory, Path) else Path(directory)  # (Path(a Path) parses it again)
        #: The partition folder's name, ``<topic>-<partition>``.
        self.name = self.dir.name
        self.topic, self.partition = parse_partition_dir_name(self.dir.name)
        self.config = config or LogConfig()
        self.writable = writable
        #: Milliseconds since the epoch: timestamps without one, LogAppendTime, ``segment.ms``, ``flush.ms``.
        self.clock = clock
        self.budget = budget
        self.segments = LogSegments()
        self._lock = threading.RLock()
        self._appended = threading.Condition(threading.Lock())
        self._log_start_offset = 0
        self._unflushed_messages = 0
        self._last_flush_ms = clock()
        self._dir_dirty = False  # files created or removed since the folder was last fsynced
        self.recovery_point = 0
        self.leader_epoch = 0
        self.last_recovery: RecoveryReport | None = None  # the report of the load
        self._listeners: list[Callable[[LocalLog], None]] = []
        self._closed = False
        #: Whether a write (an append, a flush, a roll, a truncation, a segment swap or deletion) failed with
        #: an OS error: the folder may hold half of it, so the log directory's close marks no clean
        #: shutdown (the next writer or broker recovers it).
        self.write_failed = False
        #: Undecided transactions (producer id -> first offset); None until first needed after an open.
        self._txn: ProducerTransactions | None = None
        #: Segments renamed ``.deleted``, with the clock's time of the rename, waiting for their files to go.
        self._pending_deletion: list[tuple[int, LogSegment]] = []
        #: Counts segment replacements (compaction swaps): views that cache what a segment renders to
        #: compare it to notice a swap, which changes neither the first nor the last segment.
        self.generation = 0
        self._dir_mtime = 0  # read-only logs: the folder's mtime when last looked for swapped segments
        self._recheck: LogSegment | None = None  # read-only logs: the segment rolled at the last refresh
        st: os.stat_result | None
        try:  # (one stat: the folder's identity and its mtime before the load lists it, issue 25)
            st = os.stat(self.dir)
        except OSError:
            st = None
        #: read-only logs: the folder a refresh lists (see refresh)
        self._dir_id = (st.st_dev, st.st_ino) if st is not None else None
        #: read-only logs: the folder's mtime before the load's listing (its first look, :func:`load_segments`)
        self._mtime_at_open = st.st_mtime_ns if st is not None else None
        #: read-only logs: the segments taken from a committed swap's ``.swap`` file, until they follow its
        #: rename to the plain name (see :meth:`_take_swaps`)
        self._swapped_in: dict[int, LogSegment] = {}


    def _take_mtime_at_open(self) -> int | None:
        """The folder's mtime from the open's stat, once (the load's listing; a later load stats again)."""
        mtime, self._mtime_at_open = self._mtime_at_open, None
        return mtime
    def use_config(self, config: LogConfig) -> None:
        """Read-only logs: the topic's settings changed (a broker recorded others: see
        :meth:`~kafkafs.storage.logdir.LogDir.follow_recorded`); the log and its segments read by them
        from now on."""
        with self._lock:
            self.config = config
            for segment in self.segments:
                segment.config = config

    def _new_segment(self, base_offset: int, *, size: int | None = None) -> LogSegment:
        return LogSegment(self.dir, base_offset, self.config, writable=self.writable, clock=self.clock,
                          budget=self.budget, size=size)

    def _add_segment(self, base_offset: int) -> LogSegment:
        """A new, empty active segment (writable logs; stale index files at that base are removed)."""
        for ext in INDEX_EXTENSIONS:
            try:
                os.unlink(self.dir / segment_file_name(base_offset, ext))
            except FileNotFoundError:
                pass
        segment = self._new_segment(base_offset)
        segment.become_active()
        self.segments.add(segment)
        self._dir_dirty = True
        return segment

    @property
    def log_start_offset(self) -> int:
        return self._log_start_offset

    @log_start_offset.setter
    def log_start_offset(self, value: int) -> None:
        self._log_start_offset = value

    @property
    def active_segment(self) -> LogSegment | None:
        return self.segments.last()

    @property
    def log_end_offset(self) -> int:
        """The next offset to be written (Kafka's LEO)."""
        segment = self.segments.last()
        if segment is None:
            return self._log_start_offset
        if segment.size == 0:
            return segment.base_offset
        return segment.next_offset

    def size_in_bytes(self) -> int:
        return sum(s.size for s in self.segments)

    def refresh(self) -> bool:
        """Notice what another process appended (new segments, a longer active segment); return True
        if the log end offset may have moved. Writable logs know their own appends."""
        if self.writable or self._closed:
            return False
        before = self.segments.end_mark(self._log_start_offset)
        dropped: list[LogSegment] = []  # segments whose files went: closed once the listeners ran (below)
        with self._lock:
            self._folder_renewed(dropped)  # its segments, all dropped, tell the listeners
            known = set(self.segments.bases())
            try:  # listed again while new segments show: a segment missed below a later one would be a gap
                names = regular_files_in_order(self.dir, log_file_base_offset, known)
            except FileNotFoundError:
                return False
            listed = [b for b in map(log_file_base_offset, names) if b is not None]
            if vanished := known.difference(listed):
                names, listed = self._confirm_vanished(names, listed, vanished)
            previous = self.segments.last()
            swapping = any(name.endswith(SWAP) for name in names)
            merged = self._take_swaps(names, dropped) if swapping or self._swapped_in else []
            bases = sorted(b for b in listed if not any(s < b < end for s, end in merged))
            fresh = [base for base in bases if base not in known]
            rolled = previous is not None and bool(fresh) and fresh[-1] > previous.base_offset
            recheck, self._recheck = self._recheck, previous if rolled else None
            if previous is not None and rolled:
                # The writer rolled: read the rolled segment's last batches, then call it sealed, before the
                # new one is put in (records.jsonl composed meanwhile laid it out short; a key scan took a
                # batch being written for a torn one). The next refresh reads it again (a read that failed).
                previous.refresh()
                previous.active = False
            elif recheck is not None and recheck is not previous and recheck is self.segments.get(recheck.base_offset):
                recheck.refresh()
            for base in fresh:
                try:
                    self.segments.add(self._new_segment(base))
                except (CorruptRecordError, UnsafeFileError):  # gone again already, or replaced by a link
                    continue
            for base in known - set(bases) - {s for s, _end in merged}:  # gone, or merged into a swap's segment
                if (seg := self.segments.remove(base)) is not None:
                    dropped.append(seg)
            last = self.segments.last()
            if previous is not None and previous is not last and not rolled:
                # Read its growth before the swap check (which judges a never-opened segment by its size).
                previous.refresh()
                previous.active = False
            try:
                replaced = self._replaced_segments(names, known, dropped)
            except (CorruptRecordError, UnsafeFileError, FileNotFoundError):  # gone again already
                replaced = False
            self._dir_mtime = 0 if swapping else self._dir_mtime  # the next look checks for the swapped-in file
            if last is not None:
                last.active = True
                last.refresh()
            first = self.segments.first()
            if first is not None and first.base_offset > self._log_start_offset:
                self._log_start_offset = first.base_offset
            if dropped:  # a rewrite for every view, also where the segments' count and ends stay the same
                self.generation += 1
        after = self.segments.end_mark(self._log_start_offset)
        changed = after != before or replaced or bool(dropped)
        if changed:
            self._notify()
        for seg in dropped:  # after the listeners held open what open readers have yet to read (review8 R8-4)
            seg.close_handlers()
        return changed

    def _folder_renewed(self, dropped: list[LogSegment]) -> None:
        """The folder is another one (a topic deleted and made again, review8 R8-6): drop every segment."""
        if (now := folder_identity(self.dir)) is None or now == self._dir_id:
            return
        dropped.extend(self.segments)
        self.segments.clear()
        self._dir_id, self._log_start_offset, self._recheck, self._dir_mtime, self._txn = now, 0, None, 0, None
        self.generation += 1

    def _confirm_vanished(self, names: list[str], listed: list[int], vanished: set[int]) -> tuple[list[str], list[int]]:
        """``names`` and their ``.log`` bases ``listed``, with the ``.log`` or ``.log.swap`` name of each known
        segment the listing lacks (``vanished``) that a look at the name itself finds: a listing is no
        snapshot, and one that runs while a swap renames its file to the plain name may show neither name
        (the segment would go, the log start rise past it)."""
        for base in sorted(vanished):
            if _file_id(self.dir / (name := segment_file_name(base, LOG))) is not None:
                names, listed = [*names, name], [*listed, base]
            elif _file_id(self.dir / (name := segment_file_name(base, LOG, SWAP))) is not None:
                names = [*names, name]
        return names, listed

    def _take_swaps(self, names: Sequence[str], dropped: list[LogSegment],
                    committed: list[int] | None = None) -> list[tuple[int, int]]:
        """Read-only logs: the merged segment of each swap in ``names`` that a broker's recovery would complete
        (:func:`~kafkafs.storage.names.committed_swaps`) becomes the segment at its base, read from its
        ``.swap`` file (held open: the descriptor stays valid when the file takes its plain name), and the
        segments its offset range covers go, as Kafka's ``LogLoader`` replaces them. Kafka's
        ``replaceSegments`` renames what the swap replaces ``.deleted`` before the ``.swap`` takes its plain
        name: in between, the records of segments rolled since the last look that it took in are in that
        file alone (review8 R8-8). Returns ``(base, end)`` of each swap taken; the replaced and covered
        segments go to ``dropped``. ``committed``: the committed swaps of ``names`` when the caller knows
        them already (a load's listing)."""
        for base, taken in list(self._swapped_in.items()):
            if self.segments.get(base) is not taken:
                del self._swapped_in[base]
            elif _file_id(taken.log_path) != taken.records.file_id:  # the swap finished: its plain name
                taken.follow_suffix("")
                del self._swapped_in[base]
        merged: list[tuple[int, int]] = []
        for base in committed_swaps(names) if committed is None else committed:
            swap_id = _file_id(self.dir / segment_file_name(base, LOG, SWAP))
            current = self.segments.get(base)
            if current is None or swap_id is None or current.records.file_id != swap_id:
                opened = self._open_swap(base)
                if opened is None:
                    continue  # gone again: the next look sees where
                taken = opened
                if current is not None and current.records.file_id == taken.records.file_id:
                    taken.close_handlers()  # renamed to its plain name since; taken before
                    taken = current
                else:
                    if (old := self.segments.add(taken)) is not None:
                        dropped.append(old)
                    self.generation += 1
                    if taken.suffix == SWAP:
                        self._swapped_in[base] = taken
                current = taken
            try:
                end = max(current.next_offset, base + 1)
            except (CorruptRecordError, OSError):
                end = base + 1  # its reads say what is wrong; the segments above stay until they go
            for covered in list(self.segments.values(base + 1, end)):
                self.segments.remove(covered.base_offset)
                dropped.append(covered)
            merged.append((base, end))
        return merged

    def _take_swaps_at_load(self, committed: list[int]) -> None:
        """Read-only logs, once loaded: the committed swaps the load's listing showed (``committed``, their
        base offsets) taken (:meth:`_take_swaps`), so that a first reader sees what a broker's recovery
        would make of a folder left inside a swap. The load's own listing: a second one cost a partition's
        open ~14% of its time (issue 25); a swap made since either is taken by the next refresh."""
        dropped: list[LogSegment] = []
        self._take_swaps((), dropped, committed)
        for segment in dropped:
            segment.close_handlers()

    def _open_swap(self, base: int) -> LogSegment | None:
        """A read-only segment of the ``.swap`` file at ``base`` (opened now), or of its plain name when it
        took it meanwhile; None when neither can be opened."""
        for suffix in (SWAP, ""):
            try:
                taken = LogSegment(self.dir, base, self.config, writable=False, clock=self.clock,
                                   budget=self.budget, suffix=suffix)
            except (CorruptRecordError, UnsafeFileError):
                continue
            if suffix == SWAP:
                taken.records.next_path = self.dir / segment_file_name(base, LOG)
            return taken
        return None

    def _replaced_segments(self, names: list[str], known: set[int], dropped: list[LogSegment]) -> bool:
        """Reopen the sealed segments another process's compaction swapped in under the same name, when
        the folder changed since the last look (the old objects are left to their readers)."""
        mtime, self._dir_mtime = self._dir_mtime, os.stat(self.dir).st_mtime_ns
        last = self.segments.last()
        swapped = [] if mtime == self._dir_mtime else [
            b for b in map(log_file_base_offset, names)
            if b in known and (old := self.segments.get(b)) is not None and old is not last and old.replaced_on_disk()]
        for base in swapped:
            self.segments.add(self._new_segment(base))  # a file gone again: refresh catches it
            self.generation += 1
        # review8 R8-2: what a swap replaced is renamed away before the new file takes its name (replaceSegments'
        # order): listed a moment ago, gone now; a segment this refresh took just before the swap too (live4.py)
        for base in set(self.segments.bases()).difference(swapped) if swapped else ():
            if (old := self.segments.get(base)) is not None and old is not last and not old.log_path.exists() \
                    and base not in self._swapped_in:
                self.segments.remove(base)  # kept, its base cut the new segment short ("corrupt batch", EIO)
                dropped.append(old)
        return bool(swapped)

    def batches(
        self, from_offset: int | None = None, to_offset: int | None = None
    ) -> Iterator[tuple[LogSegment, BatchView]]:
        """Every batch holding an offset in ``from_offset..to_offset`` (inclusive), oldest first, with
        its segment. Batches are not decoded."""
        if from_offset is None or from_offset < self._log_start_offset:
            from_offset = self._log_start_offset
        segment = self.segments.floor(from_offset) or self.segments.first()
        # a segment read once is not read again (a gap after a truncated segment would loop); held: ids stay
        visited: list[LogSegment] = []
        seen: set[int] = set()
        expect: int | None = None  # one past the last offset of the batch before (None: not known)
        while segment is not None:
            visited.append(segment)
            seen.add(id(segment))
            base = segment.base_offset
            if to_offset is not None and base > to_offset:
                return
            upper = self.segments.upper(base)  # offsets out of order raise (SPEC §4: never skipped silently)
            views = (segment.read_from(from_offset, ordered=True, upper=upper) if base <= from_offset
                     else segment.ordered_batches(expect, upper))
            for view in views:
                h = view.header
                if to_offset is not None and h.base_offset > to_offset:
                    return
                if h.last_offset < from_offset:
                    continue
                yield segment, view
                if to_offset is not None and h.last_offset >= to_offset:
                    return  # done: whatever follows (maybe damage) is not read
                from_offset = h.last_offset + 1
                expect = h.next_offset
            # Next: the segment that now holds ``from_offset`` when compaction swapped a merged segment
            # in at or below it while we read, else the one after this.
            floor = self.segments.floor(from_offset)
            swapped = floor is not None and id(floor) not in seen
            segment = floor if swapped else self.segments.higher(base)

    def read(
        self, from_offset: int | None = None, to_offset: int | None = None, *, validate: bool = True
    ) -> Iterator[DecodedBatch]:
        """Decoded batches from ``from_offset``, the first and last trimmed to the bounds;
        ``OffsetOutOfRange`` past the log end offset; an offset below the log start reads from there. When
        the end cannot be read (the active segment's OSError: EACCES, EIO), the sealed segments are read,
        and the read of the active one raises it (fix58: nothing of the partition was read)."""
        if from_offset is not None:
            try:
                end: int | None = self.log_end_offset
            except OSError:
                end = None
            if end is not None and from_offset > end:
                raise OffsetOutOfRange(f"offset {from_offset} is past the log end offset {end}")
        lo = self._log_start_offset if from_offset is None else max(from_offset, self._log_start_offset)
        for segment, view in self.batches(lo, to_offset):
            batch = view.decode(validate=validate, file=str(segment.log_path))
            if batch.offsets and (batch.offsets[0] < lo or (to_offset is not None and batch.offsets[-1] > to_offset)):
                batch = batch.between(lo, to_offset)
            yield batch

    def records(self, from_offset: int | None = None, to_offset: int | None = None) -> Iterator[Record]:
        """Every record as (offset, timestamp, key, value, headers): convenient, not the hot path."""
        for batch in self.read(from_offset, to_offset):
            yield from batch

    def locate(self, offset: int, *, nowait: bool = False) -> BatchView | None:
        """The batch that holds ``offset``, undecoded, with its segment (``view.segment``): skip list floor,
        offset index, one interval of the ``.log``. None when the offset is not in the log (below the start,
        past the end, or in a gap that compaction left); a v2 batch found past a gap is not returned for an
        offset before it. The caller decodes or renders it; ``CorruptRecordError`` when the bytes on the way
        are damaged. ``nowait``: only what the page cache holds, else :class:`~kafkafs.errors.WouldBlock`."""
        if offset < self._log_start_offset or offset >= self.log_end_offset:
            return None
        found = self.segments.find(offset, nowait=nowait)
        if found is None:
            return None
        segment, view = found
        if view.header.base_offset > offset and view.header.magic == 2:
            return None
        return view._replace(segment=segment)

    def offset_for_timestamp(self, timestamp: int) -> tuple[int, int] | None:
        """``(offset, timestamp)`` of the first record at or past the log start whose timestamp is >=
        ``timestamp`` (Kafka's ``offsetsForTimes``), or None when every record is older. Segments are
        tried in order; the first whose largest timestamp reaches it is searched through its time index."""
        start = self._log_start_offset
        for segment in self.segments.from_offset(start):
            sealed = self.segments.is_sealed(segment.base_offset)  # a torn batch is damage there
            if segment.size == 0 or segment.max_timestamp < timestamp and segment.max_timestamp_sure:
                if sealed and segment.size:
                    segment.check_whole()
                continue
            found = segment.find_offset_by_timestamp(timestamp, start, sealed=sealed)
            if found is not None:
                return found
        return None

    def _require_writable(self) -> None:
        require_writable(self.dir, self.writable, self._closed)

    @contextlib.contextmanager
    def _writing(self) -> Iterator[None]:
        """Around a change of the folder: an OS error inside sets :attr:`write_failed`, and goes on."""
        try:
            yield
        except OSError:
            self.write_failed = True
            raise

    def roll(self, next_offset: int | None = None) -> LogSegment:
        """Seal the active segment and start a new one at ``max(next_offset, log end offset)`` (Kafka's
        ``roll``); an empty active segment already there is kept as it is."""
        self._require_writable()
        with self._lock:
            base = max(next_offset or 0, self.log_end_offset)
            active = self.active_segment
            if active is not None:
                if active.base_offset == base and active.size == 0:
                    return active
                if base < active.base_offset or self.segments.get(base) is not None:
                    raise InvalidInput(f"cannot roll to {base}: the active segment starts at {active.base_offset}")
                active.on_become_inactive()  # fsynced by the next flush, which starts at the recovery point
            return self._add_segment(base)

    def flush(self) -> None:
        """fsync everything from the recovery point on (and the folder, if files came or went); the
        recovery point becomes the log end offset."""
        with self._lock:
            if not self.writable or self._closed:
                return
            with self._writing():
                for segment in self.segments.from_offset(self.recovery_point):
                    segment.flush()
                if self._dir_dirty:
                    fsync_directory(self.dir)
                    self._dir_dirty = False
            self.recovery_point = self.log_end_offset
            self._unflushed_messages = 0
            self._last_flush_ms = self.clock()

    def truncate_to(self, offset: int) -> bool:
        """Drop every record at or past ``offset`` (whole batches, as Kafka does: the batch holding
        ``offset`` goes too); False when there was nothing past it (Kafka's ``truncateTo``)."""
        self._require_writable()
        if offset < 0:
            raise InvalidInput(f"cannot truncate to a negative offset {offset}")
        with self._lock:
            if offset >= self.log_end_offset:
                return False
            first = self.segments.first()
            if first is None or first.base_offset > offset:
                self.truncate_fully_and_start_at(offset)
                return True
            for segment in list(self.segments.after(offset)):
                self.segments.remove(segment.base_offset)
                segment.delete()
            active = self.active_segment
            assert active is not None
            active.truncate_to(offset)
            active.active = True
            self._dir_dirty = True
            self._txn = None  # rebuilt from the log when next needed
            self._log_start_offset = min(offset, self._log_start_offset)
            self.recovery_point = min(self.recovery_point, self.log_end_offset)
            return True

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Delete every segment and start empty at ``offset`` (Kafka's ``truncateFullyAndStartAt``)."""
        self._require_writable()
        with self._lock:
            for segment in list(self.segments):
                self.segments.remove(segment.base_offset)
                segment.delete()
            self._add_segment(offset)
            self._log_start_offset = offset
            self.recovery_point = min(self.recovery_point, offset)
            self._txn = ProducerTransactions()

    def delete_segments(self, segments: list[LogSegment], reason: str = "") -> None:
        """Remove whole segments (retention): their files are renamed ``.deleted`` and removed
        ``file.delete.delay.ms`` later (:meth:`delete_expired_files`); the log start offset moves past
        them. The active segment is never removed: a new empty one replaces it."""
        self._require_writable()
        with self._lock:
            for segment in segments:
                if segment is self.active_segment:
                    self.roll()
                end = segment.next_offset
                self.segments.remove(segment.base_offset)
                self._log_start_offset = max(self._log_start_offset, end)
                self.schedule_deletion(segment)
                if reason:
                    log.info("%s: segment %d marked for deletion (%s)", self.name, segment.base_offset, reason)
            first = self.segments.first()
            if first is not None:
                self._log_start_offset = max(self._log_start_offset, first.base_offset)
        self.delete_expired_files()
        self._notify()  # readers learn at once that segments went (a mount's open files keep theirs)

    def replace_segments(self, new: LogSegment, old: Sequence[LogSegment]) -> bool:
        """Swap a cleaned segment in for the sealed segments ``old`` it was copied from (Kafka's
        ``replaceSegments``). ``new`` is flushed and named ``.cleaned``; it is renamed ``.swap`` (the
        commit point: recovery completes a swap from there on), put in the skip list, the old segments
        are renamed ``.deleted`` (their files go ``file.delete.delay.ms`` later, readers still in them
        finish) and ``new`` takes its plain name. Readers see the new segment at its base before the
        old ones above it go, so an overlap, never a gap. False, and ``new`` deleted, when one of
        ``old`` is no longer in the log (retention removed it meanwhile) or has become the active one."""
        self._require_writable()
        with self._lock:
            active = self.active_segment
            if not old or any(self.segments.get(s.base_offset) is not s or s is active for s in old):
                new.delete()
                return False
            new.change_suffix(SWAP)
            fsync_directory(self.dir)
            self.segments.add(new)
            for segment in old:
                if segment.base_offset != new.base_offset:
                    self.segments.remove(segment.base_offset)
            for segment in old:
                self.schedule_deletion(segment)
            new.change_suffix("")
            fsync_directory(self.dir)
            self._dir_dirty = False
            self.generation += 1
        self._notify()
        return True

    def schedule_deletion(self, segment: LogSegment) -> None:
        """Rename a segment that is no longer part of the log ``.deleted``; its files go once
        ``file.delete.delay.ms`` has passed (Kafka's asynchronous delete)."""
        self._require_writable()
        with self._lock:
            segment.change_suffix(DELETED)
            self._dir_dirty = True
            self._pending_deletion.append((self.clock(), segment))

    def pending_deletions(self) -> list[LogSegment]:
        """The segments renamed ``.deleted`` whose files are still there."""
        with self._lock:
            return [segment for _ts, segment in self._pending_deletion]

    def delete_expired_files(self, now_ms: int | None = None) -> list[str]:
        """Remove the files of the ``.deleted`` segments renamed at least ``file.delete.delay.ms`` before
        ``now_ms`` (default: the log's clock); return the ``.log`` names removed."""
        if not self._pending_deletion:
            return []
        with self._lock:
            now = self.clock() if now_ms is None else now_ms
            delay = self.config.file_delete_delay_ms
            due = [(ts, seg) for ts, seg in self._pending_deletion if now - ts >= delay]
            if not due:
                return []
            self._pending_deletion = [(ts, seg) for ts, seg in self._pending_deletion if now - ts < delay]
            names = []
            for _ts, segment in due:
                names.append(segment.log_path.name)
                segment.delete()
            self._dir_dirty = True
            return names

    def add_listener(self, callback: Callable[[LocalLog], None]) -> None:
        """Call ``callback(log)`` after every append (from the appending thread)."""
        self._listeners.append(callback)

    def _notify(self) -> None:
        with self._appended:
            self._appended.notify_all()
        for callback in list(self._listeners):
            callback(self)

    def close(self) -> None:
        """Flush (writable) and close every segment; the active one is sealed (final time index entry,
        trimmed indexes), as a broker leaves it at a clean shutdown."""
        with self._lock:
            if self._closed:
                return
            try:
                if self.writable:
                    self.delete_expired_files()
                    self.flush()
                active = self.active_segment
                for segment in self.segments:
                    segment.close(seal=self.writable and segment is active)
                for _ts, segment in self._pending_deletion:  # their files stay until the next writable open
                    segment.close_handlers()
                self._pending_deletion = []
                if self.writable and self._dir_dirty:
                    fsync_directory(self.dir)
            finally:
                self._closed = True

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
