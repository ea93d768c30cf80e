"""What an open ``records.jsonl`` reads when segments below the end change under it.

Compaction swaps merged segments in and retention deletes the first ones: the file's earlier bytes
shrink, and every later byte moves. A reader in the middle of the file (``cat``, ``tail -f`` following
the end) must not see the moved bytes at the positions it is reading. So each handle keeps the
composition it last read (:class:`~kafkafs.fs.partition.Composition`: segment layouts end to end) and
:func:`handle_view` gives it the current one when the file only grew, or else its own parts up to the
first layout it shares with the current composition followed by the current parts from there: the
bytes the handle has read stay where they were, and the records appended since follow them. A new open
sees the current file. The old parts read the segments they were laid out from, which stay readable
for ``file.delete.delay.ms`` after compaction or retention renamed them ``.deleted``.

Pure functions over immutable compositions: safe from any thread.
"""

from __future__ import annotations

from typing import TypeVar

from .layout import Part

__all__ = ["handle_view"]

C = TypeVar("C")


def handle_view(prev: C | None, cur: C) -> C:
    """The view of a handle that last read ``prev``, now that the partition's composition is ``cur``."""
    if prev is None or prev is cur:
        return cur
    old = [p.pieces for p in prev.parts]  # type: ignore[attr-defined]
    new = [p.pieces for p in cur.parts]  # type: ignore[attr-defined]
    if len(new) >= len(old) and all(a is b for a, b in zip(old, new, strict=False)):
        return cur  # it only grew
    where = {id(layout): i for i, layout in enumerate(new)}
    for j, layout in enumerate(old):
        k = where.get(id(layout))
        if k is None or len(new) - k < len(old) - j:
            continue
        if all(a is b for a, b in zip(old[j:], new[k:], strict=False)):
            parts = list(prev.parts[:j])  # type: ignore[attr-defined]
            starts = list(prev.starts[:j])  # type: ignore[attr-defined]
            total = prev.starts[j]  # type: ignore[attr-defined]
            for part in cur.parts[k:]:  # type: ignore[attr-defined]
                parts.append(Part(part.pieces, part.count, total))
                starts.append(total)
                total += part.pieces.total(part.count)
            return type(cur)(cur.shape, parts, starts, total)  # type: ignore[attr-defined,call-arg]
    return prev  # nothing shared (every segment changed): the handle keeps what it had
