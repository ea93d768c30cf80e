"""A records.jsonl handle's view across compaction and retention (handleview.handle_view)."""

from __future__ import annotations

from kafkafs.fs.handleview import handle_view
from kafkafs.fs.layout import Part, Pieces
from kafkafs.fs.partition import Composition


def _layout(*sizes: int) -> Pieces:
    p = Pieces()
    for i, n in enumerate(sizes):
        p.add(0, i * 100, 100, n, i)
    return p


def _comp(*layouts: Pieces) -> Composition:
    parts, starts, total = [], [], 0
    for layout in layouts:
        parts.append(Part(layout, len(layout), total))
        starts.append(total)
        total += layout.total()
    return Composition(("shape", len(layouts)), parts, starts, total)


def test_a_handle_follows_growth_and_keeps_its_bytes_across_a_swap():
    a, b, c, active = _layout(10, 10), _layout(20), _layout(5), _layout(7)
    before = _comp(a, b, c, active)
    assert handle_view(None, before) is before
    rolled = _layout(3)
    grown = _comp(a, b, c, active, rolled)
    assert handle_view(before, grown) is grown
    merged = _layout(12)  # compaction swapped one segment in for a, b and c
    after = _comp(merged, active, rolled)
    view = handle_view(grown, after)
    assert [p.pieces for p in view.parts] == [a, b, c, active, rolled]
    assert view.starts == grown.starts and view.total == grown.total  # nothing moved for this handle
    assert handle_view(None, after) is after  # a new open sees the compacted file


def test_after_a_roll_and_a_merge_the_handle_gets_the_later_segments_only():
    a, active = _layout(10, 10), _layout(5, 5)  # last offsets 0, 1 and 0, 1: offsets stand for order
    a.last_offsets[:] = type(a.last_offsets)("q", [0, 1])
    active.last_offsets[:] = type(a.last_offsets)("q", [2, 3])
    before = _comp(a, active)
    merged, new_active = _layout(4, 4), _layout(6)  # the old active rolled and was merged with a
    merged.last_offsets[:] = type(a.last_offsets)("q", [1, 4])  # 4: appended after the handle's read
    new_active.last_offsets[:] = type(a.last_offsets)("q", [5])
    after = _comp(merged, new_active)
    asked = []

    def layout_from(pieces, lo):
        asked.append((pieces, lo))
        tail = _layout(4)
        tail.last_offsets[:] = type(a.last_offsets)("q", [4])
        return tail

    view = handle_view(before, after, layout_from)
    assert asked == [(merged, 4)]
    assert [p.pieces for p in view.parts][:2] == [a, active] and view.parts[3].pieces is new_active
    assert view.starts[:2] == before.starts and view.total == before.total + 4 + 6
