"""Reading a view's bytes from its pieces: :func:`read_parts` renders what it needs through a callback,
:func:`read_cached` takes only pieces already rendered (on the FUSE loop). Functions over append-only
layouts: safe from any thread."""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    from .layout import Pieces

__all__ = ["Part", "read_parts", "read_cached"]


class Part(NamedTuple):
    """One layout as a reader sees it: its first ``count`` pieces, placed at byte ``start``."""

    pieces: Pieces
    count: int
    start: int


def read_parts(
    parts: Sequence[Part],
    starts: Sequence[int],
    offset: int,
    size: int,
    render: Callable[[Pieces, int], bytes | memoryview],
) -> bytes:
    """Bytes ``offset .. offset+size`` of the view made of ``parts`` (``starts`` their start bytes).

    ``render(pieces, i)`` returns piece ``i``'s bytes (the caller caches and checks them).
    """
    out: list[bytes] = []
    want = size
    k = bisect_right(starts, offset) - 1
    if k < 0:
        k = 0
    pos = offset
    while want > 0 and k < len(parts):
        pieces, count, start = parts[k]
        rel = pos - start
        if rel >= pieces.total(count):
            k += 1
            continue
        i = pieces.piece_at(rel, count)
        while want > 0 and i < count:
            piece_start = pieces.start(i)
            data = render(pieces, i)
            chunk = data[rel - piece_start : rel - piece_start + want]
            out.append(chunk)
            want -= len(chunk)
            pos += len(chunk)
            rel += len(chunk)
            i += 1
        k += 1
    return b"".join(out)


class _NotRendered(Exception):
    pass


def read_cached(parts: Sequence[Part], starts: Sequence[int], offset: int, size: int, cache) -> bytes | None:
    """:func:`read_parts` from the pieces ``cache`` (a PieceCache) holds; None if one it needs is missing."""

    used: list = [None, -1]

    def cached(pieces: Pieces, i: int):
        used[0], used[1] = pieces, i
        data = cache.get((pieces, i))
        segment = getattr(pieces, "segment", None)
        if data is None or segment is not None and segment.suffix == ".deleted":
            raise _NotRendered  # a worker renders it, or says the segment is gone
        return data

    try:
        data = read_parts(parts, starts, offset, size, cached)
    except _NotRendered:
        return None
    if used[0] is not None:
        cache.reached(used[0], used[1])
    return data
