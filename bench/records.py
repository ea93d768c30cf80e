"""The records every benchmark measures on: ``mixed`` (what a broker partition holds) and ``uniform``.

``mixed`` cycles, deterministically from a seed, through: JSON objects (some with spaces, so the view
compacts them), UTF-8 text with non-ASCII characters and characters to escape, binary values
(base64 in the view), null keys, records with headers (some header values binary, some null), and
tombstones (null values). ``uniform`` is the old benchmark's shape: about 100-byte JSON objects with
a plain key, no headers.

    from bench.records import batches, segment_bytes
    data = segment_bytes("mixed", 1_000_000)           # one uncompressed segment, 100 records a batch
    for raw in batches("uniform", 10_000, base_offset=0): ...

Importable from bench/fs.py and bench/spark.py (``sys.path`` holds bench/'s parent when run as
``python bench/NAME.py`` from the repository root; they may also ``sys.path.insert`` it).
"""

from __future__ import annotations

import random
from collections.abc import Iterator

from kafkafs.format.batch import Codec, encode_batch

__all__ = ["KINDS", "records", "batches", "segment_bytes", "BASE_TIMESTAMP"]

KINDS = ("mixed", "uniform")
BASE_TIMESTAMP = 1_763_700_000_000

_WORDS = ["Zürich", "naïve", "café", "東京", "Ωmega", "straße", "😀 ok", "tab\there", 'say "hi"', "back\\slash",
          "plain", "order", "payment", "ascii only text"]
_STATUS = ["paid", "open", "refunded", "failed"]


def _mixed(i: int, rng: random.Random) -> tuple[bytes | None, bytes | None, tuple]:
    kind = i % 10
    key: bytes | None = b"customer-%05d" % rng.randrange(100_000)
    headers: tuple = ()
    if kind in (0, 1, 2):  # compact JSON object
        value = (
            b'{"order":%d,"customer":"c-%05d","amount":%d.%02d,"currency":"EUR","status":"%s","items":[%d,%d]}'
            % (i, rng.randrange(100_000), rng.randrange(1000), rng.randrange(100),
               _STATUS[rng.randrange(4)].encode(), rng.randrange(50), rng.randrange(50))
        )
    elif kind == 3:  # JSON with whitespace, to compact
        value = b'{ "event": "click", "x": %d, "y": %d, "tags": [ "a", "b" ] }' % (rng.randrange(2000), rng.randrange(2000))
        key = None
    elif kind in (4, 5):  # UTF-8 text, non-ASCII and characters to escape
        value = " ".join(rng.choice(_WORDS) for _ in range(rng.randrange(3, 12))).encode()
    elif kind == 6:  # binary
        value = rng.randbytes(rng.randrange(16, 120))
        key = rng.randbytes(8)
    elif kind == 7:  # JSON value with headers, one header value binary
        value = b'{"id":%d,"ok":true,"note":null}' % i
        headers = (("trace-id", b"%032x" % rng.getrandbits(128)), ("content-type", b"application/json"),
                   ("sig", rng.randbytes(16)))
    elif kind == 8:  # text value, null key, headers with a null value
        value = f"message {i} — {rng.choice(_WORDS)}".encode()
        key = None
        headers = (("source", "tëst".encode()), ("empty", None))
    else:  # tombstone
        value = None
    return key, value, headers


def _uniform(i: int, rng: random.Random) -> tuple[bytes | None, bytes | None, tuple]:
    value = (
        b'{"order":%d,"customer":"c-%05d","amount":%d.%02d,"currency":"EUR","status":"paid","n":%d}'
        % (i, rng.randrange(100_000), rng.randrange(1000), rng.randrange(100), i % 100)
    )
    return b"c-%05d" % rng.randrange(100_000), value, ()


def records(kind: str, count: int, start: int = 0, seed: int = 7) -> Iterator[tuple[int, bytes | None, bytes | None, tuple]]:
    """``count`` records ``(timestamp, key, value, headers)`` of ``kind``, numbered from ``start``."""
    make = {"mixed": _mixed, "uniform": _uniform}[kind]
    rng = random.Random(seed * 1_000_003 + start)
    for i in range(start, start + count):
        key, value, headers = make(i, rng)
        yield BASE_TIMESTAMP + i, key, value, headers


def batches(
    kind: str, count: int, *, base_offset: int = 0, per_batch: int = 100, codec: Codec = Codec.NONE, seed: int = 7
) -> Iterator[bytes]:
    """Encoded v2 batches of ``per_batch`` records holding ``count`` records from ``base_offset``."""
    offset = base_offset
    end = base_offset + count
    while offset < end:
        n = min(per_batch, end - offset)
        yield encode_batch(list(records(kind, n, offset, seed)), base_offset=offset, compression=codec,
                           partition_leader_epoch=0)
        offset += n


def segment_bytes(kind: str, count: int, *, per_batch: int = 100, codec: Codec = Codec.NONE, seed: int = 7) -> bytes:
    """One segment's bytes (batches back to back, from offset 0)."""
    return b"".join(batches(kind, count, per_batch=per_batch, codec=codec, seed=seed))
