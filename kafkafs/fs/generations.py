"""Generations of ``records.jsonl``: the file a name lookup returns is an append-only stream.

``tail -f`` on a FUSE mount polls: every second it ``fstat()``\\ s its descriptor, prints "file truncated"
and starts again from byte 0 when the size is below its position, and otherwise reads from its position
to the end. The kernel stops every read at the inode's size. So for an open ``records.jsonl`` to be
followed right, the inode's bytes must never change and its size must only grow, always to the end of
a line. Compaction and retention rewrite segments below the end: the file a new ``cat`` must see is
then another one, shorter.

Hence generations. :class:`RecordsStream` is one inode of a partition's ``records.jsonl``: a view
(:class:`~kafkafs.fs.partition.Composition`) that only ever grows. While the partition only grows, the
view is the partition's current composition. When the composition changes in any other way (segments
removed by retention, a compaction swap, a truncation), the stream becomes *detached*: it keeps the
parts it had where they were and is followed by the records past its last offset
(:func:`~kafkafs.fs.handleview.handle_view`), and :meth:`RecordsGenerations.current` gives new lookups
a new stream whose view is the current composition. Every open of an inode shares its stream; its
``st_size`` is the stream's total, which never shrinks and always ends a line. A detached stream lives
as long as its inode: the tree's node holds it and the inode table drops the node when the kernel
forgets the inode. Its old parts read the segments they were laid out from, which stay readable for
``file.delete.delay.ms`` (then ESTALE; ``tail -f`` never reads back).

``tail -F`` (by name) sees the file replaced after a swap, reopens it and prints the new file from
its start: that is what it does for any replaced file.

Threads: both classes are safe to share; a stream advances under its own lock (so two requests never
move its view out of order), the generations of a partition change under theirs.
"""

from __future__ import annotations

import logging
import threading

from .handleview import handle_view, layout_after
from .partition import Composition, PartitionState

__all__ = ["RecordsStream", "RecordsGenerations"]

log = logging.getLogger("kafkafs.fs")


class RecordsStream:
    """One generation of a partition's ``records.jsonl`` (one inode of it): an append-only stream."""

    def __init__(self, state: PartitionState, number: int) -> None:
        self.state = state
        self.number = number
        #: True once the partition's composition stopped being a continuation of this stream
        self.detached = False
        self._view: Composition | None = None
        self._seen: Composition | None = None  # the composition the view was last advanced to
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        total = self._view.total if self._view is not None else None
        return f"<RecordsStream {self.state.name}#{self.number} total={total}{' detached' if self.detached else ''}>"

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
        old = self._view
        state = self.state
        view = handle_view(old, cur, lambda pieces, lo: layout_after(state.renderer, pieces, lo))
        if old is not None and view.total < old.total:  # never: a stream that shrank would cut lines
            log.error("%s: records.jsonl view would shrink from %d to %d bytes", state.name, old.total, view.total)
            return old
        if view is not cur:
            self.detached = True
        self._view, self._seen = view, cur
        return view


class RecordsGenerations:
    """The streams of one partition's ``records.jsonl``: the current one, for new lookups."""

    def __init__(self, state: PartitionState) -> None:
        self.state = state
        self._current: RecordsStream | None = None
        self._count = 0
        self._lock = threading.Lock()

    def _new(self) -> RecordsStream:
        self._count += 1
        self._current = RecordsStream(self.state, self._count)
        return self._current

    def current(self) -> RecordsStream:
        """The stream a lookup gets: the current one, advanced; a new one if that one got detached."""
        with self._lock:
            stream = self._current or self._new()
            stream.advance()
            if stream.detached:
                stream = self._new()
                stream.advance()
            return stream

    def peek(self) -> RecordsStream:
        """The current stream as it is (a directory listing must not render anything)."""
        with self._lock:
            return self._current or self._new()
