"""RecordBatch v2 built from Kafka's documented layout (kafka.apache.org/documentation/#recordbatch), with
the codec libraries themselves (zlib, zstandard, lz4, python-snappy): an independent writer for tests of
kafkafs's readers, streaming, so that a batch inflating to GBs is built without holding it."""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterable, Iterator

import crc32c

from tests.kafka_layout import varint

CODECS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}


def zigzag(value: int) -> bytes:
    """Kafka's signed varint (:func:`tests.kafka_layout.varint`, the tests' one writer of it)."""
    return varint(value)


def _field(data: bytes | None) -> bytes:
    return zigzag(-1) if data is None else zigzag(len(data)) + data


def record(offset_delta: int, ts_delta: int, key: bytes | None, value: bytes | None,
           headers: Iterable[tuple[str, bytes]] = ()) -> bytes:
    headers = list(headers)
    body = (b"\x00" + zigzag(ts_delta) + zigzag(offset_delta) + _field(key) + _field(value) + zigzag(len(headers))
            + b"".join(_field(k.encode()) + _field(v) for k, v in headers))
    return zigzag(len(body)) + body


def _compressed(codec: str, pieces: Iterator[bytes]) -> bytes:
    if codec == "none":
        return b"".join(pieces)
    if codec == "gzip":
        c = zlib.compressobj(6, zlib.DEFLATED, 31)
        return b"".join(c.compress(p) for p in pieces) + c.flush()
    if codec == "zstd":
        import zstandard

        c = zstandard.ZstdCompressor(level=3, write_content_size=False).compressobj()  # as a streaming producer
        return b"".join(c.compress(p) for p in pieces) + c.flush()
    if codec == "lz4":
        import lz4.frame

        c = lz4.frame.LZ4FrameCompressor(block_size=lz4.frame.BLOCKSIZE_MAX64KB, block_linked=False,
                                         content_checksum=False)
        return c.begin() + b"".join(c.compress(p) for p in pieces) + c.flush()
    if codec == "snappy":  # snappy-java's framing: header, then (big-endian length, raw block) per 32 KiB
        import snappy

        out = [b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1)]
        for p in pieces:
            for i in range(0, len(p), 32768):
                block = snappy.compress(p[i : i + 32768])
                out.append(struct.pack(">i", len(block)) + block)
        return b"".join(out)
    raise ValueError(codec)


def batch(base_offset: int, base_ts: int, count: int, records: Iterator[bytes], codec: str = "zstd",
          last_offset_delta: int | None = None, max_ts: int | None = None, cut: int = 0,
          compressed: bytes | None = None) -> bytes:
    """One batch of ``count`` records (the bytes ``records`` yields, any pieces of them), compressed;
    ``max_ts``: its records' largest timestamp (default ``base_ts + count - 1``: record i at ``base_ts + i``,
    as these tests write them); ``cut``: that many bytes of the compressed data left out (the CRC computed
    over what is left); ``compressed``: the body as it is (``records`` unused)."""
    body = _compressed(codec, records) if compressed is None else compressed
    body = body[: len(body) - cut]
    last = count - 1 if last_offset_delta is None else last_offset_delta
    after_crc = struct.pack(">hiqqqhii", CODECS[codec], last, base_ts, base_ts + count - 1 if max_ts is None else max_ts,
                            -1, -1, -1, count) + body
    head = struct.pack(">ib", -1, 2) + struct.pack(">I", crc32c.crc32c(after_crc))  # no leader epoch yet
    return struct.pack(">qi", base_offset, len(head) + len(after_crc)) + head + after_crc


def zstd_zeros_frame(prefix: bytes, zeros: int) -> bytes:
    """A zstd frame (RFC 8878) of ``prefix`` then ``zeros`` zero bytes, made by hand: a raw block, then RLE
    blocks of 128 KiB (4 bytes each: 2 GiB of zeros in 64 KB, with no compressor run)."""
    def block(kind: int, size: int, last: bool) -> bytes:
        return (int(last) | kind << 1 | size << 3).to_bytes(3, "little")

    out = [b"\x28\xb5\x2f\xfd", b"\x00", b"\x38"]  # magic; no content size; window 2^17 (128 KiB)
    out.append(block(0, len(prefix), not zeros) + prefix)
    step = 128 << 10
    while zeros:
        n = min(step, zeros)
        zeros -= n
        out.append(block(1, n, not zeros) + b"\x00")
    return b"".join(out)
