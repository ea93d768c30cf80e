"""Streams of ``records.jsonl``: the file a name lookup returns is an append-only stream (one
*generation* of the file; the words: :mod:`.layout`).

``tail -f`` on a FUSE mount polls: every second it ``fstat()``\\ s its descriptor, prints "file truncated"
and starts again from byte 0 when the size is below its position, and otherwise reads from its position
to the end. The kernel stops every read at the inode's size. So for an open ``records.jsonl`` to be
followed right, the inode's bytes must never change and its size must only grow, always to the end of
a line. Compaction and retention rewrite segments below the end: the file a new ``cat`` must see is
then another one, shorter.

Hence generations. :class:`RecordsStream` is one inode of a partition's ``records.jsonl``: a view
(:class:`~.partition.Composition`) that only ever grows. While the partition only grows, the
view is the partition's current composition. When the composition changes in any other way (segments
removed by retention, a compaction swap, a truncation, the schemas records render with:
:meth:`~.partition.PartitionState.use_decoder`), the stream becomes *detached*: it keeps the
parts it had where they were and is followed by the records past its last offset
(:func:`handle_view`, below), and :meth:`RecordsGenerations.current` gives new lookups
a new stream whose view is the current composition. Every open of an inode shares its stream; its
``st_size`` is the stream's total, which never shrinks and always ends a line. A detached stream lives
as long as its inode: the tree's node holds it and the inode table drops the node when the kernel
forgets the inode. Its old parts read the segments they were laid out from, which stay readable for
``file.delete.delay.ms``; after that, a read back there is ESTALE.

A reader may lag behind the size it was shown (``tail -f`` blocked on a slow pipe): the bytes it has
not read yet may come from a segment that compaction or retention removes meanwhile. So when segments
go (the partition's change event, from the cleaner's thread, before ``file.delete.delay.ms`` runs out)
and when a stream advances, the ``.log`` of every part still ahead of its slowest open reader whose
segment was removed is held open (:class:`_Pinned`): its bytes stay readable after the file is deleted,
until every open reader is past it (by :data:`PIN_MARGIN`: the kernel reads whole pages) or closed; then
a detached stream lets go of those parts too (:meth:`RecordsStream._let_go`: one placeholder stands for
their bytes, a read back there is ESTALE), so that one open for days keeps what is ahead of it only. A
stream that no open reads and that can no longer be opened (rewritten since, its lookup older than
:data:`OPEN_GRACE_S`) lets go of them the same way when segments go and when its last reader closes
(:meth:`RecordsStream.let_go_unread`): the kernel may hold its inode for long, and its view must not keep
every segment it showed (review15 R15-5). A
descriptor the handle budget had closed is opened again by inode, under the segment's name or renamed
``.deleted`` (:meth:`~kafkafs.storage.segment_files.SegmentFiles.hold`). Beside another process's cleaner
a stream may be handed a composition laid out just before a removal was noticed (the segment closed
already): such parts are never shown, the view is laid out again (:meth:`RecordsStream._move_to`).

``tail -F`` (by name) sees the file replaced after a swap, reopens it and prints the new file from
its start: that is what it does for any replaced file.

How a stream moves on when segments below the end change (:func:`handle_view`): compaction swaps
merged segments in and retention deletes the first ones, so the file's earlier bytes shrink and every
later byte moves. A reader in the middle of the file (``cat``, ``tail -f`` following the end) must not
see the moved bytes at the positions it is reading. So a stream keeps the composition it last read,
and gets the current one when the file only grew; otherwise its own parts stay where they are (the
last one grown if it is still current), followed by what the current composition holds past the last
offset they cover: the parts of later segments, and, when a merged segment holds records past that
offset too, a layout of those records alone (:func:`layout_after`). The bytes it has read stay where
they were and the records appended since follow them.

Threads: both classes are safe to share; a stream advances under its own lock (so two requests never
move its view out of order), the generations of a partition change under theirs. The functions work
over immutable compositions: safe from any thread.
"""

from __future__ import annotations

import logging
import os
import threading
import time
import weakref
from collections.abc import Callable
from typing import NamedTuple

from ...errors import CorruptRecordError, SegmentClosedError
from ...storage.handles import BUDGET, FileHandle
from ...storage.names import DELETED
from ...storage.segment import LogSegment
from ...storage.segments import LogSegments
from .layout import Layout, SegmentLayout
from .partition import Composition, PartitionState
from .piececache import AHEAD_PIECES
from .reading import Bytes, Part, PieceCache, read_parts
from .render import Renderer

__all__ = ["RecordsStream", "RecordsGenerations", "handle_view", "layout_after", "PIN_MARGIN", "OPEN_GRACE_S"]

log = logging.getLogger("kafkafs.fs")

#: Removed segments stay held open while an open reader is less than this many bytes past their part.
PIN_MARGIN = 256 * 1024

#: The base offset of a :class:`_Passed` piece (no segment has it).
PASSED_BASE = -1

# ---------------------------------------------------------------------------------------------- views


def layout_after(renderer: Renderer, layout: Layout, lo: int) -> SegmentLayout | None:
    """A layout of the segment ``layout`` was laid out from, from offset ``lo`` on, rendered as ``layout``
    is (with its own renderer when it names one, else ``renderer``)."""
    segment = layout.segment_at(0)
    if segment is None:
        return None
    renderer = layout.renderer if layout.renderer is not None else renderer
    after = SegmentLayout(segment, lo, layout.upper if isinstance(layout, SegmentLayout) else None, renderer)
    after.extend(renderer)
    return after


class _Passed(Layout):
    """The start of a detached stream that it let go of (:meth:`RecordsStream._let_go`): parts that every
    open reader had passed (by :data:`PIN_MARGIN`), laid out from segments that have left the log. One
    piece of their bytes, of no segment (base :data:`PASSED_BASE`): a read back there is ESTALE, as a
    read back into a removed segment is once ``file.delete.delay.ms`` is over. So a ``tail -f`` kept open
    for days over a partition that compacts keeps the parts still ahead of it, not every part it had."""

    __slots__ = ("_first",)

    def __init__(self, total: int, first_offset: int, last_offset: int) -> None:
        super().__init__()
        self._first = first_offset
        self.add(PASSED_BASE, 0, 0, total, last_offset)

    def first_offset(self) -> int:
        return self._first


def _last_offset(part: Part) -> int:
    return part.layout.last_offsets[part.pieces - 1] if part.pieces else -1


def handle_view(
    prev: Composition | None, cur: Composition, layout_from: Callable[[Layout, int], Layout | None] | None = None
) -> Composition:
    """The view of a stream that last read ``prev``, now that the partition's composition is ``cur``.
    ``layout_from(layout, lo)``: a layout of the same segment from offset ``lo`` on (None: skip it)."""
    if prev is None or prev is cur or not prev.parts:
        return cur
    old = [p.layout for p in prev.parts]
    new = [p.layout for p in cur.parts]
    if len(new) >= len(old) and all(a is b for a, b in zip(old, new, strict=False)):
        return cur  # it only grew
    parts = list(prev.parts)
    starts = list(prev.starts)
    counts = {id(p.layout): p.pieces for p in cur.parts}
    last = parts[-1]
    grown = counts.get(id(last.layout), 0)
    if grown > last.pieces:  # the segment it ended in got more records (and may have rolled since)
        parts[-1] = last = Part(last.layout, grown, last.start)
    total = last.start + last.layout.total(last.pieces)
    covered = _last_offset(last)
    mine = {id(p) for p in old}
    for part in cur.parts:
        if id(part.layout) in mine or not part.pieces:
            continue
        if _last_offset(part) <= covered:
            _said_below(part, prev.parts)
            continue
        layout: Layout | None = part.layout
        count = part.pieces
        assert layout is not None
        if layout.first_offset() <= covered:
            # a merged segment also holds records appended after this stream's last offset
            layout = layout_from(layout, covered + 1) if layout_from is not None else None
            if layout is None or not len(layout):
                continue
            count = len(layout)
        parts.append(Part(layout, count, total))
        starts.append(total)
        total += layout.total(count)
        covered = max(covered, layout.last_offsets[count - 1])
    return Composition(cur.shape, parts, starts, total)


_below_said: set[str] = set()
_below_lock = threading.Lock()


def _said_below(part: Part, seen: list[Part]) -> None:
    """Warn once per segment file when ``part``, behind a stream's end, is of a segment that appeared
    below (or between) the segments the stream read: its offsets (from its base offset to its last)
    meet none of theirs. A compaction's rewrite of segments it read meets them (a merged segment keeps
    the base offset of the first segment it replaces and holds records of each). The stream does not
    go back for it."""
    if not len(part.layout.bases):
        return
    base, last = part.layout.bases[0], _last_offset(part)
    if any(p.pieces and len(p.layout.bases) and base <= _last_offset(p) and p.layout.bases[0] <= last for p in seen):
        return
    first = part.layout.first_offset()
    segment = part.layout.segment_at(0)
    name = str(segment.log_path) if segment is not None else f"offsets {first}..{_last_offset(part)}"
    with _below_lock:
        if name in _below_said:
            return
        _below_said.add(name)
    log.warning("records.jsonl: %s appeared below what an open reader has read (offsets %d..%d): that reader "
                "does not go back for them; they show when the file is opened again", name, first,
                _last_offset(part))


def _advance(state: PartitionState, prev: Composition | None, cur: Composition) -> Composition:
    """What a stream that last showed ``prev`` shows now that the partition's composition is ``cur``."""
    return handle_view(prev, cur, lambda layout, lo: layout_after(state.renderer, layout, lo))


# ---------------------------------------------------------------------------------------------- streams

#: An open this soon after the lookup that returned its stream reads that stream, rewritten since or
#: not (:meth:`RecordsStream.outdated_for_open`).
OPEN_GRACE_S = 0.5

#: How many times a stream lays its view out again when the composition it was given already shows a
#: segment the log let go (:meth:`RecordsStream._move_to`); then it shows it anyway, held open if it can be.
MOVE_TRIES = 4


def _left_log(segment: LogSegment, segments: LogSegments) -> bool:
    """Whether ``segment`` is no longer the log's (removed, or another file swapped in at its base)."""
    return segments.get(segment.base_offset) is not segment or segment.suffix == DELETED


def _new_parts_gone(old: Composition | None, view: Composition, segments: LogSegments) -> bool:
    """Whether a part of ``view`` that ``old`` did not show (a new one, or one grown since) is of a
    segment that left the log."""
    shown = {(id(p.layout), p.pieces) for p in old.parts} if old is not None else set()
    for part in reversed(view.parts):
        if (id(part.layout), part.pieces) in shown:
            break  # the parts before it are old ones
        segment = part.layout.segment_at(0)
        if segment is not None and _left_log(segment, segments):
            return True
    return False


class _Pinned:
    """A removed segment's ``.log`` held open: what rendering needs of a segment (``read_at``,
    ``log_path``); the descriptor closes when the last reference goes.

    Its descriptor is one of the handle budget's (review24 R24-6/R24-4: hundreds of streams beside a
    broker that deletes segments held one each outside it, and the mount ran out of descriptors): when
    the budget is over its limit an old pin gives its descriptor back and its next read opens the file
    again by inode, under its name or renamed ``.deleted`` (:meth:`~kafkafs.storage.segment_files.
    SegmentFiles.hold`); once the file is gone from the disk too, a read there is ESTALE (as for a
    segment no pin held). A pin whose file is gone from the disk holds the only copy of those bytes:
    it is kept while such pins take at most half of the budget (:data:`_KEPT`); past that the oldest
    give theirs back too (their lagging readers get ESTALE there rather than every request EMFILE).
    Safe from any thread (releasing is one reference store; ``pinned`` runs under the budget's lock)."""

    __slots__ = ("handle", "log_path", "segment", "__weakref__")

    def __init__(self, handle: FileHandle, segment: LogSegment) -> None:
        self.handle: FileHandle | None = handle
        self.log_path = segment.log_path
        self.segment = segment
        BUDGET.opened(self, 1)

    @property
    def pinned(self) -> bool:
        """Kept when the file is gone from the disk and such pins take at most half of the budget
        (checked when the budget would release it)."""
        handle = self.handle
        if handle is None:
            return False
        if self in _KEPT:
            return True
        try:
            gone = os.fstat(handle.fd).st_nlink == 0
        except OSError:
            return False
        if gone and len(_KEPT) < BUDGET.limit // 2:
            _KEPT.add(self)
            return True
        return False

    def release_handles(self) -> None:
        self.handle = None
        _KEPT.discard(self)

    def read_at(self, position: int, size: int) -> bytes:
        handle = self.handle
        if handle is None:
            handle = self.handle = self.segment.hold()  # SegmentClosedError (ESTALE) when it is gone
            BUDGET.opened(self, 1)
        return os.pread(handle.fd, size, position)


#: Pins whose file is gone from the disk that the budget keeps (see :class:`_Pinned`): at most half of
#: its limit. Changed under the budget's lock (``pinned``) or by one reference drop (``release_handles``).
_KEPT: weakref.WeakSet[_Pinned] = weakref.WeakSet()


class _Pin(NamedTuple):
    """A part held open for a stream's readers: its end byte in the stream, and its ``.log``."""

    end: int
    pinned: _Pinned


class RecordsStream:
    """One generation of a partition's ``records.jsonl`` (one inode of it): an append-only stream.

    Threads: safe to share; it advances under its own lock (views only move forward), and its readers'
    positions and its pinned segments change under a second one, never taken before the first."""

    def __init__(self, state: PartitionState, number: int) -> None:
        self.state = state
        self.number = number
        #: the partition's rewrites when this stream was made (a later one: it is no longer the file)
        self.rewrites = state.rewrites
        #: when a lookup last returned this stream (``time.monotonic()``): see :meth:`outdated_for_open`
        self.looked_up = time.monotonic()
        #: True once the partition's composition stopped being a continuation of this stream
        self.detached = False
        self._view: Composition | None = None
        self._seen: Composition | None = None  # the composition the view was last advanced to
        #: (view, seen) as one object, so that a reader without the lock gets a pair that belongs together
        self._shown: tuple[Composition, Composition] | None = None
        self._lock = threading.Lock()
        self._readers: dict[int, int] = {}  # id(open handle) -> the end of what it has read
        self._pins: dict[int, _Pin] = {}  # id(layout) -> the part's end and its .log
        self._pin_lock = threading.Lock()
        #: the partition's rewrites when removed segments were last looked for: an append removes
        #: none, so advancing the view looks again only after a rewrite
        self._pinned_at = -1
        #: the pieces of the next open, its start rendered before it came (:meth:`prepare`)
        self._spare: PieceCache | None = None
        #: True once :meth:`let_go_unread` let go of parts no open had read: an open is refused then
        self._gone_unread = False
        #: the largest size the kernel was given in this inode's attributes (:meth:`told`): a read that
        #: shows bytes past it must first have the kernel drop them (records another process appended,
        #: seen before the mount's invalidator told the kernel: a ``stat`` after that read lagged)
        self.told_size = 0

    def __repr__(self) -> str:
        total = self._view.total if self._view is not None else None
        return f"<RecordsStream {self.state.name}#{self.number} total={total}{' detached' if self.detached else ''}>"

    def told(self, size: int) -> None:
        """The kernel was given ``size`` in this inode's attributes (or told to drop them, and will ask
        again before it counts past ``size``). Takes no lock (the FUSE loop calls it): two at once may keep
        the smaller, which costs one more drop of the attributes, never a size kept too long."""
        if size > self.told_size:
            self.told_size = size

    @property
    def view(self) -> Composition | None:
        """The stream as far as it was last advanced (None before the first time)."""
        return self._view

    def advance(self) -> Composition:
        """The stream with what the partition holds now: the bytes it had, and the records since."""
        with self._lock:  # the composition is asked under the lock: views only move forward in time
            cur = self.state.composition()
            if cur is self._seen and self._view is not None:
                return self._view
            return self._move_to(cur)

    def view_if_current(self) -> Composition | None:
        """The view when it already shows the partition's current composition (nothing to advance),
        else None; takes no lock and renders nothing (safe on the FUSE loop)."""
        shown = self._shown  # one read: a view and the composition it was advanced to
        if shown is None:
            return None
        view, seen = shown
        return view if self.state.cached_composition() is seen else None

    def move_now(self, current: Composition) -> bool:
        """Advance to ``current`` (a composition already known) when that renders nothing and no other
        thread is advancing the stream: it has no view yet, or already shows ``current``. For the FUSE
        loop; False means "ask :meth:`advance` in a worker"."""
        if not self._lock.acquire(blocking=False):
            return False
        try:
            if self._view is None:
                self._move_to(current)  # nothing shown yet: the view is the composition itself
                return True
            return self._seen is current
        finally:
            self._lock.release()

    def quick_view(self) -> Composition | None:
        """The view without rendering anything: as last advanced, or the partition's composition when
        it is known and this stream has none yet (None otherwise)."""
        view = self._view
        if view is not None:
            return view
        with self._lock:
            if self._view is None:
                current = self.state.cached_composition()
                if current is not None:
                    self._move_to(current)
            return self._view

    def _move_to(self, cur: Composition) -> Composition:
        """Advance to ``cur`` (callers hold ``_lock``). ``cur`` may have been laid out just before another
        process's compaction or retention was noticed and the segments it removed closed (review8 R8-4:
        ``tail -f`` read such a part and died, ESTALE). A part new to the view whose segment left the log
        is never shown, nor is a view whose laying out met a closed segment: the view is made again from
        the composition as it is now, which holds what is left of those records at their offsets (what
        the cleaner dropped is skipped, as a consumer fetching then would skip it). The check and the
        publishing are one step under ``_pin_lock``, which the log's change listener (:meth:`pin_removed`)
        takes too: a segment removed after that is held open for the readers by the listener, before the
        log closes it."""
        old = self._view
        state = self.state
        for attempt in range(MOVE_TRIES):
            try:
                view = _advance(state, old, cur)  # lays out what a merged segment holds past the view's end
            except SegmentClosedError:
                if attempt == MOVE_TRIES - 1:
                    raise
                cur = state.composition()  # that segment went meanwhile: what replaced it is laid out
                continue
            if old is not None and view.total < old.total:  # never: a stream that shrank would cut lines
                log.error("%s: records.jsonl view would shrink from %d to %d bytes", state.name, old.total, view.total)
                return old
            with self._pin_lock:
                gone = _new_parts_gone(old, view, state.log.segments)
                if not gone or attempt == MOVE_TRIES - 1:  # else not shown: laid out again below
                    if view is not cur:
                        self.detached = True
                        if self._readers:
                            view = self._let_go(view)
                    self._view, self._seen = view, cur
                    self._shown = (view, cur)
                    if self._readers and (gone or self._pinned_at != state.rewrites):
                        self._pinned_at = state.rewrites
                        self._pin_gone(view)
                    return view
            cur = state.composition()
        raise AssertionError("unreachable")

    # -- the next open

    def prepare(self) -> bool:
        """Render the start of the file for an open that is expected soon (a reader going through the
        partitions in order, :meth:`~kafkafs.fs.tree.partitions.Partitions.reading_to_end`), into the
        pieces the next open takes (:meth:`take_spare`): its first segment whole, up to
        :data:`~.reading.FILE_AHEAD_BYTES` (:meth:`~.reading.PieceRenderer.render_file_start`; else
        its first span here, then the spans up to :data:`~.piececache.AHEAD_PIECES` after it on
        prefill threads, as a first read would have them rendered); the reader's reads are answered
        from memory (a damaged batch is left to them: its read says what is wrong). Blocks (a thread of its own): advances the view first. True
        when it made a spare; False when there is nothing to do (an empty file, a spare kept already)."""
        view = self.advance()
        if not view.parts or not view.total:
            return False
        cache = PieceCache(renderer=self.state.piece_renderer)
        with self._pin_lock:
            if self._spare is not None:
                return False
            self._spare = cache  # taken by an open even while its span renders (the read waits for it)
        part = view.parts[0]
        renderer = self.state.piece_renderer
        if not renderer.render_file_start(part.layout, part.pieces, cache):
            renderer.render_start(part.layout, 0, cache, AHEAD_PIECES)
        return True

    def take_spare(self) -> PieceCache | None:
        """For an open: the pieces :meth:`prepare` rendered for it (once), else None."""
        with self._pin_lock:
            spare, self._spare = self._spare, None
        return spare

    def drop_spare(self) -> None:
        """Let go of what :meth:`prepare` rendered if no open took it (its memory is bounded by the
        caller: the streams prepared last keep theirs)."""
        spare = self.take_spare()
        if spare is not None:
            spare.stop()

    # -- readers

    def outdated_for_open(self) -> bool:
        """Whether an open of this stream is refused (ESTALE: the kernel looks the name up again and opens
        the current file): compaction or retention rewrote the partition since it was made, and the
        kernel kept its name without a lookup for over :data:`OPEN_GRACE_S`. An open right after its
        lookup reads the file that lookup returned, as an open a moment earlier would: the kernel's one
        retry after an ESTALE looks up and opens at once, and another rewrite in between failed it for
        the caller (review8 R8-3, beside a broker's cleaner)."""
        return self.rewrites != self.state.rewrites and time.monotonic() - self.looked_up > OPEN_GRACE_S

    def opened(self, handle: object) -> None:
        """A new open (``handle``) reads from the start. The segments its parts were laid out from are
        held open for it when the log let some go meanwhile (a change noticed after the open was allowed:
        :func:`~kafkafs.fs.tree.partition_nodes._require_current`); one that is gone already refuses the
        open, :class:`~kafkafs.errors.SegmentClosedError` (ESTALE: the kernel looks the name up again)."""
        with self._pin_lock:
            self._readers[id(handle)] = 0
            view = self._view
            if not self._gone_unread and (view is None or self.state.rewrites == self.rewrites
                                            or self._pin_gone(view)):
                return
            del self._readers[id(handle)]
            self._unpin()
        raise SegmentClosedError(f"{self.state.name}/records.jsonl: a segment it shows was removed (compaction or "
                                 "retention) before it was opened")

    def released(self, handle: object, wait: bool = True) -> bool:
        """``handle`` was closed; ``wait=False`` (on the FUSE loop): False, and nothing done, when the
        lock is busy (a rewrite is pinning segments: a worker then waits for it)."""
        if not self._pin_lock.acquire(blocking=wait):
            return False
        try:
            self._readers.pop(id(handle), None)
            self._unpin()
            last = not self._readers
        finally:
            self._pin_lock.release()
        if last:
            self.let_go_unread(wait)
        return True

    def shows_damage(self) -> bool:
        """Whether the view as last advanced holds a piece that cannot be read (a damaged batch, bytes the
        disk would not give: :attr:`~.layout.Layout.bad`): an open then reads with direct I/O, so that
        a read ending before it can be short (:meth:`read` ``short``; review23 R23-14)."""
        view = self._view
        return view is not None and any(part.layout.bad for part in view.parts)

    def read(self, handle: object, offset: int, size: int, cache: PieceCache, short: bool = False) -> Bytes:
        """Bytes ``offset .. offset+size`` for the open ``handle``; records appended since the stream
        last advanced follow when the read reaches its end. ``short`` (a file read with direct I/O): a
        read that meets a piece that cannot be read after some bytes gives those (whole lines), and the
        next read, which starts at it, fails (:func:`~.reading.read_parts`)."""
        view = self._view
        if view is None or offset + size > view.total:
            view = self.advance()
        pins = self._pins
        state = self.state

        def render(layout: Layout, i: int) -> bytes | memoryview:
            pin = pins.get(id(layout))
            return state.render_piece(layout, i, cache, pin.pinned if pin is not None else None)

        data = read_parts(view.parts, view.starts, offset, size, render, cache.where, short_at_damage=short)
        self.note_read(handle, offset + len(data))
        return data

    def note_read(self, handle: object, end: int, wait: bool = True) -> None:
        """``handle`` has read up to byte ``end``; ``wait=False`` (on the FUSE loop): skip it when the
        lock is busy (the next read tells again)."""
        if not self._pin_lock.acquire(blocking=wait):
            return
        try:
            if end > self._readers.get(id(handle), end):
                self._readers[id(handle)] = end
                if self._pins:
                    self._unpin()
        finally:
            self._pin_lock.release()

    def pin_removed(self) -> None:
        """Hold open the ``.log`` of every part still ahead of the slowest open reader whose segment
        compaction or retention removed from the log (see the module's docstring). Called by the log's
        change listener, after the segments left the log and before a read-only log closes them."""
        rewrites = self.state.rewrites
        with self._pin_lock:
            view = self._view  # under the lock: a view being published (_move_to) is seen whole or not yet
            if view is None or not self._readers:
                unread = view is not None
            else:
                unread = False
                self._pinned_at = rewrites
                self._pin_gone(view)
        if unread:
            self.let_go_unread()

    def let_go_unread(self, wait: bool = True) -> None:
        """When no open reads this stream and none can come any more (:meth:`outdated_for_open`): let go of
        the parts at the start of its view whose segments left the log (as :meth:`_let_go`; its size stays)
        and of what it was advanced to, so that an inode the kernel holds keeps no segment that is gone
        (review15 R15-5). Best effort: nothing is done while the stream advances (its next call does it)
        or, with ``wait=False`` (the FUSE loop), while a rewrite pins segments."""
        if not self.outdated_for_open() or not self._lock.acquire(blocking=False):
            return
        spare = None
        try:
            if not self._pin_lock.acquire(blocking=wait):
                return
            try:
                view = self._view
                if view is None or self._readers:
                    return
                passed = self._let_go(view, view.total)
                if passed is view:
                    return
                self._gone_unread = True
                self.detached = True
                self._view, self._seen, self._shown = passed, None, None
                spare, self._spare = self._spare, None
            finally:
                self._pin_lock.release()
        finally:
            self._lock.release()
        if spare is not None:
            spare.stop()

    def _let_go(self, view: Composition, low: int | None = None) -> Composition:
        """``view`` without the parts at its start that every open reader has passed (by :data:`PIN_MARGIN`;
        ``low``: the parts that end there or before, when no open reads it) and whose segments left the
        log: one :class:`_Passed` piece stands for their bytes (callers hold ``_pin_lock``; a detached
        stream's view, whose new opens are refused)."""
        if low is None:
            low = min(self._readers.values()) - PIN_MARGIN
        segments = self.state.log.segments
        n = 0
        for part, start in zip(view.parts, view.starts, strict=True):
            if start + part.layout.total(part.pieces) > low:
                break
            segment = part.layout.segment_at(0)
            if not isinstance(part.layout, _Passed) and (segment is None or not _left_log(segment, segments)):
                break
            n += 1
        if n == 0 or n == 1 and isinstance(view.parts[0].layout, _Passed):
            return view
        last = view.parts[n - 1]
        end = view.starts[n - 1] + last.layout.total(last.pieces)
        if end <= 0:
            return view
        passed = _Passed(end, view.parts[0].layout.first_offset(), _last_offset(last))
        for part in view.parts[:n]:
            self._pins.pop(id(part.layout), None)
        return Composition(view.shape, [Part(passed, 1, 0), *view.parts[n:]], [0, *view.starts[n:]], view.total)

    def _pin_gone(self, view: Composition) -> bool:
        """Hold open the segments of ``view``'s parts ahead of the slowest reader that left the log (callers
        hold ``_pin_lock``); False when one of them could not be held (its file is gone: reads there are
        ESTALE)."""
        segments = self.state.log.segments
        low = min(self._readers.values()) - PIN_MARGIN
        held = True
        for part, start in zip(reversed(view.parts), reversed(view.starts), strict=True):
            layout = part.layout
            end = start + layout.total(part.pieces)
            if end <= low:
                break  # parts end in order: every one before it is behind the readers too
            segment = layout.segment_at(0)  # a composition's part: one segment's layout
            if segment is None or not _left_log(segment, segments):
                continue
            pin = self._pins.get(id(layout))
            if pin is not None:
                if pin.end < end:  # the part grew after it was held
                    self._pins[id(layout)] = _Pin(end, pin.pinned)
                continue
            try:
                handle = segment.hold()
            except (SegmentClosedError, CorruptRecordError, OSError):
                held = False  # already gone: reads there are ESTALE
                continue
            self._pins[id(layout)] = _Pin(end, _Pinned(handle, segment))
        return held

    def _unpin(self) -> None:
        """Let go of what every open reader is past (callers hold ``_pin_lock``)."""
        if not self._readers:
            self._pins.clear()
            return
        low = min(self._readers.values()) - PIN_MARGIN
        for key in [k for k, pin in self._pins.items() if pin.end <= low]:
            del self._pins[key]


class RecordsGenerations:
    """The streams of one partition's ``records.jsonl``: the current one, for new lookups.

    Threads: safe to share; the current stream changes under a lock, and :meth:`_changed` runs in the
    thread that changed the log (the cleaner's, an appender's)."""

    def __init__(self, state: PartitionState) -> None:
        self.state = state
        self._current: RecordsStream | None = None
        self._count = 0
        self._lock = threading.Lock()
        self._streams: weakref.WeakSet[RecordsStream] = weakref.WeakSet()  # every one an inode still holds
        self._rewrites = state.rewrites
        state.add_listener(self._changed)

    def _new(self) -> RecordsStream:
        self._count += 1
        self._current = RecordsStream(self.state, self._count)
        self._streams.add(self._current)
        return self._current

    def _changed(self, state: PartitionState) -> None:
        """Segments went (compaction, retention): open readers keep the ones they have yet to read."""
        if state.rewrites == self._rewrites:
            return
        self._rewrites = state.rewrites
        for stream in list(self._streams):
            stream.pin_removed()

    def _fresh(self) -> RecordsStream:
        """The current stream, or a new one when the partition was rewritten since it was made."""
        stream = self._current
        if stream is None or stream.rewrites != self.state.rewrites:
            stream = self._new()
        return stream

    def current(self) -> RecordsStream:
        """The stream a lookup gets: the current one, advanced; a new one if that one got detached."""
        with self._lock:
            stream = self._fresh()
            stream.advance()
            if stream.detached:
                stream = self._new()
                stream.advance()
            stream.looked_up = time.monotonic()
            return stream

    def current_now(self) -> RecordsStream | None:
        """:meth:`current` when it renders nothing and waits for nobody (the composition is known, no
        other thread holds the locks): for a lookup on the FUSE loop; None means "ask in a worker"."""
        composition = self.state.cached_composition()
        if composition is None or not self._lock.acquire(blocking=False):
            return None
        try:
            stream = self._fresh()
            if stream.detached or not stream.move_now(composition):
                return None
            stream.looked_up = time.monotonic()
            return stream
        finally:
            self._lock.release()

    def peek(self) -> RecordsStream:
        """The current stream without advancing it (a directory listing must not render anything)."""
        with self._lock:
            return self._fresh()
