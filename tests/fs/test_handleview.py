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


def test_nothing_shared_keeps_the_old_view():
    old = _comp(_layout(5))
    assert handle_view(old, _comp(_layout(6))) is old
