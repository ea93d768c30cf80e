"""What an open ``records.jsonl`` reads when segments below the end change under it.

Compaction swaps merged segments in and retention deletes the first ones: the file's earlier bytes
shrink, and every later byte moves. A reader in the middle of the file (``cat``, ``tail -f`` following
the end) must not see the moved bytes at the positions it is reading. So each handle keeps the
composition it last read (:class:`~kafkafs.fs.partition.Composition`: segment layouts end to end), and
:func:`handle_view` gives it the current one when the file only grew; otherwise its own parts stay
where they are (the last one grown if it is still current), followed by what the current composition
holds past the last offset they cover: the parts of later segments, and, when a merged segment holds
records past that offset too, a layout of those records alone (``layout_from``). The bytes the handle
has read stay where they were and the records appended since follow them. A new open, or a read from
byte 0 again, sees the current file. The old parts read the segments they were laid out from, which
stay readable for ``file.delete.delay.ms`` after compaction or retention renamed them ``.deleted``.

Functions over immutable compositions: safe from any thread (``layout_from`` must be too).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .layout import Part, Pieces, Renderer, SegmentLayout

__all__ = ["handle_view", "layout_after"]


def layout_after(renderer: Renderer, pieces: Pieces, lo: int) -> Pieces | None:
    """A layout of the segment ``pieces`` were laid out from, from offset ``lo`` on."""
    segment = getattr(pieces, "segment", None)
    if segment is None:
        return None
    layout = SegmentLayout(segment, lo)
    layout.extend(renderer)
    return layout


def _last_offset(part: Part) -> int:
    return part.pieces.last_offsets[part.count - 1] if part.count else -1


def _first_offset(pieces: Any) -> int:
    lo = getattr(pieces, "lo", None)
    if lo is not None:
        return lo
    return pieces.last_offsets[0] if len(pieces.last_offsets) else -1


def handle_view(prev: Any, cur: Any, layout_from: Callable[[Pieces, int], Pieces | None] | None = None) -> Any:
    """The view of a handle that last read ``prev``, now that the partition's composition is ``cur``.
    ``layout_from(pieces, lo)``: a layout of the same segment from offset ``lo`` on (None: skip it)."""
    if prev is None or prev is cur or not prev.parts:
        return cur
    old = [p.pieces for p in prev.parts]
    new = [p.pieces for p in cur.parts]
    if len(new) >= len(old) and all(a is b for a, b in zip(old, new, strict=False)):
        return cur  # it only grew
    parts = list(prev.parts)
    starts = list(prev.starts)
    counts = {id(p.pieces): p.count for p in cur.parts}
    last = parts[-1]
    grown = counts.get(id(last.pieces), 0)
    if grown > last.count:  # the segment it ended in got more records (and may have rolled since)
        parts[-1] = last = Part(last.pieces, grown, last.start)
    total = last.start + last.pieces.total(last.count)
    covered = _last_offset(last)
    mine = {id(p) for p in old}
    for part in cur.parts:
        if id(part.pieces) in mine or not part.count or _last_offset(part) <= covered:
            continue
        pieces, count = part.pieces, part.count
        if _first_offset(pieces) <= covered:
            # a merged segment also holds records appended after this handle's last offset
            pieces = layout_from(pieces, covered + 1) if layout_from is not None else None
            if pieces is None or not len(pieces):
                continue
            count = len(pieces)
        parts.append(Part(pieces, count, total))
        starts.append(total)
        total += pieces.total(count)
        covered = max(covered, pieces.last_offsets[count - 1])
    return type(cur)(cur.shape, parts, starts, total)
