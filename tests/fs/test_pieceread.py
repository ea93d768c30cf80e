"""read_parts and read_cached: a view's bytes from its pieces, rendered on demand or only from a cache."""

from __future__ import annotations

from kafkafs.fs.caches import PieceCache
from kafkafs.fs.layout import Pieces
from kafkafs.fs.pieceread import Part, read_cached, read_parts


def _pieces(texts: list[bytes]) -> Pieces:
    pieces = Pieces()
    for i, text in enumerate(texts):
        pieces.add(0, i * 100, 100, len(text), i)
    return pieces


def test_read_parts_spans_pieces_and_parts_and_read_cached_needs_every_piece():
    a, b = [b"abc", b"defg"], [b"hij"]
    pa, pb = _pieces(a), _pieces(b)
    parts = [Part(pa, 2, 0), Part(pb, 1, 7)]
    starts = [0, 7]
    texts = {id(pa): a, id(pb): b}
    whole = b"abcdefghij"
    for offset in range(len(whole) + 1):
        for size in (1, 2, 5, 20):
            got = read_parts(parts, starts, offset, size, lambda p, i: texts[id(p)][i])
            assert got == whole[offset : offset + size]
    cache = PieceCache()
    cache.put((pa, 0), memoryview(b"abc"))
    cache.put((pa, 1), b"defg")
    assert read_cached(parts, starts, 1, 5, cache) == b"bcdef"
    assert read_cached(parts, starts, 5, 4, cache) is None  # "hij" is not rendered yet
    cache.put((pb, 0), b"hij")
    assert read_cached(parts, starts, 5, 4, cache) == b"fghi"
