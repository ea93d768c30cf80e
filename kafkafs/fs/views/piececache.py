"""The pieces an open file keeps (the words: :mod:`.layout`), and the claims on those being rendered.

:class:`PieceCache` holds the last rendered pieces of one open file, so the FUSE loop answers most reads
from memory. Whoever renders a span claims its pieces first and settles them after: a read that needs a
piece being rendered waits for it instead of rendering it again, spans of one file render on several
threads at once, and the FUSE loop waits for a span without sending the read to a worker. What is
rendered ahead of the reader (:class:`Ahead`) is :class:`~.reading.PieceRenderer`'s work.
"""

from __future__ import annotations

import logging
import sys
import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Protocol

from .layout import Layout
from .render import SegmentBytes

__all__ = [
    "Bytes", "PieceCache", "Ahead", "SpanRenderer", "SPAN_PIECES", "AHEAD_PIECES", "PIECES_KEPT", "RENDERS_AHEAD",
    "NOT_RENDERING", "KEPT", "WILL_WAKE", "BufferPool", "RUN_BUFFERS",
]

log = logging.getLogger("kafkafs.fs")

Bytes = bytes | memoryview


class SpanRenderer(Protocol):
    """What renders ahead of a reader (:class:`~.reading.PieceRenderer`)."""

    def span_end(self, layout: Layout, i: int) -> int: ...

    def start_prefill(self, ahead: Ahead, cache: PieceCache, span: tuple[int, int]) -> None: ...


#: A span is at most this many pieces.
SPAN_PIECES = 8
#: A reader finds the pieces up to this many after the one it reads rendered, or being rendered, on a
#: prefill thread: two spans, so that the next one is ready while the reader's reply is sent.
AHEAD_PIECES = 2 * SPAN_PIECES
#: Pieces an open file keeps: the span being read, what is rendered ahead of it (up to a span past
#: AHEAD_PIECES), and one more span.
PIECES_KEPT = 5 * SPAN_PIECES


#: Spans of an unfiltered view render side by side into one buffer a *block* of this many pieces (spans
#: stop at its end), so that a read across two spans of a block is one slice of it, with no join.
BLOCK_PIECES = 2 * SPAN_PIECES
#: A block larger than this (giant batches) is not made: its spans render on their own.
BLOCK_MAX_BYTES = 32 << 20
#: Blocks an open file holds on to (besides those its kept pieces are slices of).
BLOCKS_KEPT = 3

#: Spans of one open file rendered at the same time ahead of its reader, each on a prefill thread (the
#: kernel releases the GIL while it renders, so on two cores two spans render at once while the FUSE
#: loop answers from those already rendered).
RENDERS_AHEAD = 2

#: What :meth:`PieceCache.wake_when_rendered` says.
NOT_RENDERING, KEPT, WILL_WAKE = 0, 1, 2


def _uninitialized(size: int) -> bytearray:
    """A bytearray of ``size`` bytes left as malloc gives them: a block is written whole before any of
    it is read (zeroing a 4 MB block first cost 10% of the render's time)."""
    return _new_bytearray(None, size)


def _zeroed(size: int) -> bytearray:
    return bytearray(size)


try:
    import ctypes

    _new_bytearray = ctypes.pythonapi.PyByteArray_FromStringAndSize  # the C API: NULL leaves it unset
    _new_bytearray.restype = ctypes.py_object
    _new_bytearray.argtypes = (ctypes.c_void_p, ctypes.c_ssize_t)
    _allocate = _uninitialized
except (ImportError, AttributeError):  # an interpreter without ctypes' pythonapi
    _allocate = _zeroed

#: A new buffer of a size, for bytes that are written whole before any of them is read.
allocate = _allocate

#: What :data:`RUN_BUFFERS` holds on to at most, in use or free (issue 25: a first ``cat`` of 200 partitions
#: found a free buffer 196 times of 203 with 32 MiB, the daemon's RSS after it 76-79 MiB instead of 132-139).
RUN_POOL_BYTES = 32 << 20
#: Its buffers' sizes are multiples of this.
RUN_POOL_STEP = 1 << 20


class BufferPool:
    """Buffers for bytes written whole before any of them is read (the start of a file rendered before
    its open: :meth:`~.reading.PieceRenderer.render_file_start`), used again once nothing refers to them
    any more: no memoryview of one is left (a kept piece, a reply being sent), so a new one is
    seldom made. A new buffer of a few MB is new memory to the kernel, page by page (a first ``cat``
    of 200 partitions rendered into one buffer a file faulted 285,000 pages and cost 0.5 CPU s more).

    :meth:`take` gives a bytearray of the size asked for, its bytes left as they were (old bytes of an
    earlier file, or as malloc gives them). The pool holds up to ``max_bytes`` of buffers, in use or
    not; beyond that a buffer is made as :func:`allocate` makes it and not kept. Safe from any thread."""

    def __init__(self, max_bytes: int = RUN_POOL_BYTES, step: int = RUN_POOL_STEP) -> None:
        self.max_bytes = max_bytes
        self.step = step
        self._guard = threading.Lock()
        #: (buffer, its capacity), the least recently taken first
        self._held: list[tuple[bytearray, int]] = []
        self._bytes = 0
        #: how many :meth:`take` calls found a free buffer, and how many made one
        self.reused = self.made = 0

    @staticmethod
    def _free(entry: tuple[bytearray, int]) -> bool:
        """Whether only the pool refers to ``entry``'s buffer: the entry, and this call's argument (a
        memoryview of it holds a reference, through its managed buffer, as long as it lives)."""
        return sys.getrefcount(entry[0]) <= 2

    def take(self, size: int) -> bytearray:
        """A buffer of ``size`` bytes, whose bytes are the caller's own until it lets go of it."""
        if _resize is None:
            return _allocate(size)
        with self._guard:
            for k, entry in enumerate(self._held):
                capacity = entry[1]
                if (capacity + 2) // 2 <= size <= capacity and self._free(entry):
                    try:  # within its allocation: no copy (PyByteArray_Resize's "minor" change)
                        _resize(entry[0], size)
                    except BufferError:  # pragma: no cover - a free buffer has no exports
                        continue
                    self._held.append(self._held.pop(k))
                    self.reused += 1
                    return entry[0]
        capacity = max(-(-size // self.step) * self.step, size)
        buffer = _allocate(capacity)
        _resize(buffer, size)
        with self._guard:
            self.made += 1
            k = 0
            while self._bytes + capacity > self.max_bytes and k < len(self._held):
                if self._free(self._held[k]):  # a free one nobody took of late: let go
                    self._bytes -= self._held.pop(k)[1]
                else:
                    k += 1
            if self._bytes + capacity <= self.max_bytes:
                self._held.append((buffer, capacity))
                self._bytes += capacity
        return buffer


_resize: Callable[[bytearray, int], int] | None = None
try:
    _resize_api = ctypes.pythonapi.PyByteArray_Resize  # the C API: within its allocation, a size changed in place
    _resize_api.restype = ctypes.c_int
    _resize_api.argtypes = (ctypes.py_object, ctypes.c_ssize_t)
    _resize = _resize_api
except (NameError, AttributeError):  # pragma: no cover - no ctypes: every buffer is new
    pass

#: The buffers that a file's start renders into before its open (:class:`BufferPool`).
RUN_BUFFERS = BufferPool()


class Block:
    """The buffer that the spans of pieces ``first..last`` of a layout render into, side by side (see
    :data:`BLOCK_PIECES`): piece ``j`` at ``layout.start(j) - base``; ``done[j - first]`` once its bytes
    are there (only those are ever read). ``done`` changes under the cache's guard."""

    __slots__ = ("buffer", "first", "last", "base", "done")

    def __init__(self, buffer: bytearray, first: int, last: int, base: int) -> None:
        self.buffer = buffer
        self.first = first
        self.last = last
        self.base = base
        self.done = bytearray(last - first + 1)


class Ahead:
    """Rendering ahead of the reader of one layout of an open file (see :class:`~.reading.PieceRenderer`): every
    piece up to ``want`` should be rendered; ``next`` is the first piece after the reader that no render
    has claimed yet; ``running``: prefill threads at it (:data:`RENDERS_AHEAD`, one more for a span a
    waiting read needs). Changed only under the cache's guard."""

    __slots__ = ("layout", "pinned", "next", "want", "running", "renderer")

    def __init__(self, layout: Layout, pinned: SegmentBytes | None, renderer: SpanRenderer) -> None:
        self.layout = layout
        self.pinned = pinned
        self.next = 0
        self.want = -1
        self.running = 0
        #: renders the spans (it holds no cache: no cycle keeps a closed file's pieces alive)
        self.renderer = renderer


class PieceCache:
    """The last rendered pieces of one open file, so 1 MiB reads in a row decode each batch once, and
    most of them are answered from memory on the FUSE loop.

    Thread-safe: the kernel may send reads of one open file from several threads at once. Whoever
    renders a span first *claims* its pieces (:meth:`claim`) and *settles* them when done (:meth:`settle`,
    rendered or not): a read that needs a claimed piece waits for it (:meth:`wait_rendered` in a thread,
    :meth:`wake_when_rendered` on the FUSE loop) instead of rendering it again, and spans of one file
    render on several threads at once. What is rendered ahead of the reader (:class:`Ahead`) changes
    under the cache's guard."""

    __slots__ = (
        "_items", "_at", "_guard", "_settled", "_claimed", "_wakers", "_blocks", "_runs", "_run_pieces", "capacity",
        "ahead", "renderer",
    )

    def __init__(self, capacity: int = PIECES_KEPT, renderer: SpanRenderer | None = None) -> None:
        self._items: OrderedDict[tuple[Layout, int], Bytes] = OrderedDict()
        #: where a piece rendered in a span starts in the span's bytes (its memoryview's ``obj``)
        self._at: dict[tuple[Layout, int], int] = {}
        self._guard = threading.Lock()
        #: notified whenever claims are settled
        self._settled = threading.Condition(self._guard)
        #: pieces being rendered now
        self._claimed: set[tuple[Layout, int]] = set()
        #: piece -> what to call once its claim is settled (:meth:`wake_when_rendered`)
        self._wakers: dict[tuple[Layout, int], list[Callable[[], object]]] = {}
        #: (layout, block number) -> the block its spans render into, oldest first
        self._blocks: dict[tuple[Layout, int], Block] = {}
        #: buffers rendered whole before their pieces were kept (:meth:`add_run`), while some are kept
        self._runs: list[bytearray] = []
        #: pieces of those kept (each one more than ``capacity`` would keep)
        self._run_pieces = 0
        self.capacity = capacity
        #: what is rendered ahead of the reader, for the layout it reads last (see :class:`~.reading.PieceRenderer`)
        self.ahead: Ahead | None = None
        #: what renders the file's spans when a read on the FUSE loop finds nothing rendered yet
        #: (:meth:`wake_when_rendered`; None: a worker renders the first span)
        self.renderer = renderer

    # -- claims

    def _free(self, key: tuple[Layout, int]) -> bool:
        return key not in self._items and key not in self._claimed

    def _claim(self, layout: Layout, i: int, last: int) -> int | None:
        """(Under the guard.) Claim pieces ``i..last``, stopping before one kept or claimed already; the
        last piece claimed, or None when piece ``i`` is kept or claimed."""
        if not self._free((layout, i)):
            return None
        j = i
        while j < last and self._free((layout, j + 1)):
            j += 1
        self._claimed.update((layout, k) for k in range(i, j + 1))
        return j

    def claim(self, layout: Layout, i: int, last: int) -> int | None:
        """Claim pieces ``i..last`` of ``layout`` for a render (see :meth:`_claim`); the caller
        :meth:`settle`\\ s them when done, whatever happens."""
        with self._guard:
            return self._claim(layout, i, last)

    def _claim_ahead(self, ahead: Ahead) -> tuple[int, int] | None:
        """(Under the guard.) Claim the next span to render ahead of the reader (pieces ``first..last``),
        or None when there is nothing more to do for now."""
        layout = ahead.layout
        i = ahead.next
        while i < len(layout) and not self._free((layout, i)):
            i += 1
        ahead.next = i
        if self.ahead is not ahead or i > ahead.want or i >= len(layout) or i in layout.bad:
            return None
        last = self._claim(layout, i, ahead.renderer.span_end(layout, i))
        assert last is not None
        ahead.next = last + 1
        return i, last

    def claim_ahead(self, ahead: Ahead) -> tuple[int, int] | None:
        """For a prefill thread at ``ahead``: the next span it renders (claimed), or None (it stops)."""
        with self._guard:
            got = self._claim_ahead(ahead)
            if got is None:
                ahead.running -= 1
            return got

    def stop_ahead(self, ahead: Ahead) -> None:
        """A prefill thread at ``ahead`` stops (a render failed: the read that needs it says why)."""
        with self._guard:
            ahead.running -= 1

    def settle(self, layout: Layout, first: int, last: int) -> None:
        """The render that claimed pieces ``first..last`` is over (they are kept, or not: a reader then
        renders them itself): whoever waits for them goes on."""
        woken: list[Callable[[], object]] = []
        with self._guard:
            for k in range(first, last + 1):
                key = (layout, k)
                self._claimed.discard(key)
                waiting = self._wakers.pop(key, None)
                if waiting:
                    woken.extend(waiting)
            self._settled.notify_all()
        for wake in woken:
            try:
                wake()
            except Exception as exc:  # the loop is gone (unmounting): nobody waits any more
                log.debug("waking a read failed: %r", exc)

    def wait_rendered(self, key: tuple[Layout, int]) -> Bytes | None:
        """In a thread: wait while piece ``key`` is being rendered; its bytes if kept, else None (it is
        neither kept nor claimed now)."""
        with self._guard:
            while key in self._claimed:
                self._settled.wait()
            data = self._items.get(key)
            if data is not None:
                self._items.move_to_end(key)
            return data

    def wake_when_rendered(self, key: tuple[Layout, int], wake: Callable[[], object]) -> int:
        """For the FUSE loop: :data:`WILL_WAKE` when piece ``key`` is being rendered (``wake()`` is
        called from the rendering thread once it is over; a piece that no render has claimed yet starts
        rendering now, on a prefill thread, and the layout it is in is followed from now on),
        :data:`KEPT` when it is kept now, :data:`NOT_RENDERING` when nobody renders it (a cache without
        a renderer whose file nothing was rendered for yet, or a damaged piece: a worker must)."""
        started = None
        with self._guard:
            if key in self._items:
                return KEPT
            if key not in self._claimed:
                ahead = self.ahead
                layout, i = key
                renderer = ahead.renderer if ahead is not None else self.renderer
                if renderer is None or i in layout.bad:
                    return NOT_RENDERING
                if ahead is None or ahead.layout is not layout:  # the first read, or the next segment: follow it
                    ahead = self.ahead = Ahead(layout, None, renderer)
                last = self._claim(layout, i, ahead.renderer.span_end(layout, i))
                assert last is not None
                ahead.running += 1
                started = ahead, (i, last)
            self._wakers.setdefault(key, []).append(wake)
        if started is not None:
            ahead, span = started
            ahead.renderer.start_prefill(ahead, self, span)
        return WILL_WAKE

    # -- rendering ahead

    def reached(self, layout: Layout, i: int, pieces: int | None = None) -> None:
        """A read used piece ``i`` of ``layout``: the ``pieces`` pieces after it (:data:`AHEAD_PIECES`
        unless said) are to be rendered ahead (prefill threads start on them, up to
        :data:`RENDERS_AHEAD`, each with its first span claimed)."""
        if pieces is None:
            pieces = AHEAD_PIECES
        spans = []
        with self._guard:
            ahead = self.ahead
            if ahead is None or ahead.layout is not layout:
                return  # this layout is not followed (yet): the read that renders it starts that
            ahead.want = i + pieces
            if ahead.next <= i:
                ahead.next = i + 1
            while ahead.running < RENDERS_AHEAD and (span := self._claim_ahead(ahead)) is not None:
                ahead.running += 1
                spans.append(span)
        for span in spans:
            ahead.renderer.start_prefill(ahead, self, span)

    def stop(self) -> None:
        """The file was closed: nothing more is rendered ahead for it (a span being rendered finishes)."""
        with self._guard:
            self.ahead = None

    def follow(self, ahead: Ahead, i: int, pieces: int | None = None) -> None:
        """Render ahead of the reader of ``ahead.layout`` from now on (the reader is at piece ``i``; the
        ``pieces`` after it), unless that layout is followed already."""
        with self._guard:
            current = self.ahead
            if current is None or current.layout is not ahead.layout or current.pinned is not ahead.pinned:
                self.ahead = ahead
        self.reached(ahead.layout, i, pieces)

    # -- blocks

    def block_for(self, layout: Layout, i: int, last: int) -> tuple[Block, int] | None:
        """The block that pieces ``i..last`` (one span, claimed) render into, and where piece ``i`` goes
        in its buffer; None when they are not in one block (a block holds the pieces laid out when it
        was made; giant ones are not made)."""
        number = i // BLOCK_PIECES
        key = (layout, number)
        with self._guard:
            block = self._blocks.get(key)
        if block is None:
            first = number * BLOCK_PIECES
            end = min(first + BLOCK_PIECES, len(layout)) - 1
            base = layout.start(first)
            if end < last or layout.ends[end] - base > BLOCK_MAX_BYTES:
                return None
            made = Block(_allocate(layout.ends[end] - base), first, end, base)
            with self._guard:
                block = self._blocks.setdefault(key, made)
                while len(self._blocks) > BLOCKS_KEPT:
                    del self._blocks[next(iter(self._blocks))]
        if last > block.last:
            return None
        return block, layout.start(i) - block.base

    def add_run(self, buffer: bytearray, pieces: int) -> None:
        """``buffer`` holds the bytes of the ``pieces`` pieces :meth:`put` next (rendered whole, then
        kept: :meth:`~.reading.PieceRenderer.render_file_start`), so a read across them is one slice of
        it. They are kept besides the usual ``capacity``, until they are the least recently used; the
        buffer is let go once none of them is kept."""
        with self._guard:
            self._runs.append(buffer)
            self._run_pieces += pieces
            self.capacity += pieces

    def rendered_into(self, block: Block, first: int, last: int) -> None:
        """Pieces ``first..last`` of ``block`` hold their bytes now (before they are :meth:`put`)."""
        with self._guard:
            block.done[first - block.first : last - block.first + 1] = b"\x01" * (last - first + 1)

    # -- pieces

    def __contains__(self, key: tuple[Layout, int]) -> bool:
        """Whether piece ``key`` is kept or being rendered."""
        with self._guard:
            return key in self._items or key in self._claimed

    def has(self, key: tuple[Layout, int]) -> bool:
        """Whether piece ``key`` is kept (without making it recently used)."""
        with self._guard:
            return key in self._items

    def get(self, key: tuple[Layout, int]) -> Bytes | None:
        with self._guard:
            data = self._items.get(key)
            if data is not None:
                self._items.move_to_end(key)  # least recently used goes first
            return data

    def put(self, key: tuple[Layout, int], data: Bytes, at: int | None = None) -> None:
        """Keep piece ``key``; ``at``: where it starts in the buffer it is a memoryview of (a span's)."""
        with self._guard:
            self._items[key] = data
            if at is None:
                self._at.pop(key, None)
            else:
                self._at[key] = at
            while len(self._items) > self.capacity:
                gone, evicted = self._items.popitem(last=False)
                self._at.pop(gone, None)
                if self._run_pieces and isinstance(evicted, memoryview) and any(evicted.obj is r for r in self._runs):
                    self._run_pieces -= 1  # the reader is past it: the usual capacity again, piece by piece
                    self.capacity -= 1
                    if not self._run_pieces:
                        self._runs.clear()

    def span_of(self, layout: Layout, i: int, j: int) -> tuple[bytes | bytearray, int] | None:
        """When pieces ``i`` and ``j`` (``i <= j``) of ``layout`` are kept as slices of one buffer, and
        every piece between them lies there too, rendered (a span's bytes, or a block whose pieces
        between are done): that buffer and where piece ``i`` starts in it; else None."""
        with self._guard:
            first = self._items.get((layout, i))
            at = self._at.get((layout, i))
            if first is None or at is None or not isinstance(first, memoryview):
                return None
            buffer = first.obj
            if not isinstance(buffer, (bytes, bytearray)):
                return None
            if j != i:
                last = self._items.get((layout, j))
                if last is None or (layout, j) not in self._at or not isinstance(last, memoryview) \
                        or last.obj is not buffer:
                    return None
                if isinstance(buffer, bytearray) and j > i + 1 and not any(buffer is run for run in self._runs):
                    # a block: are the pieces between rendered?
                    block = self._blocks.get((layout, i // BLOCK_PIECES))
                    if block is None or block.buffer is not buffer \
                            or block.done.find(0, i + 1 - block.first, j - block.first) != -1:
                        return None
                self._items.move_to_end((layout, i))
            self._items.move_to_end((layout, j))
            return buffer, at

    def where(self, layout: Layout, i: int) -> int | None:
        """Where piece ``i`` starts in the span it was rendered in (None: not kept, or not from a span)."""
        return self._at.get((layout, i))
