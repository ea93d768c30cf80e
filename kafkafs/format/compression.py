"""Kafka's five compression codecs: bytes in, bytes out.

``compress`` writes what the Kafka Java client writes: a gzip member, snappy in snappy-java's "xerial"
framing (32 KiB chunks), an LZ4 frame with independent 64 KiB blocks (the only kind Kafka's reader
accepts) and a zstd frame at level 3.

``decompress`` is bounded: it never produces more than ``max_size`` bytes, whatever the input claims.
Output that would be larger raises ``UninflatableBatch`` ("... inflates past N bytes", a
``CorruptRecordError``): valid data (Kafka stores and serves such a batch; a bomb with a valid CRC is one
too) that a reader does not hold in memory, not damage (R15-7). Every library error becomes
``CorruptRecordError``; its ``position`` is None, since only the caller knows where the
compressed bytes sit in the file.

How the bound is kept, per codec:

- gzip: stdlib ``zlib`` with ``max_length`` (faster than cramjam's gzip here, and natively bounded).
- snappy: raw blocks declare their length up front (checked before decoding); xerial chunks are raw
  blocks, each checked and decoded on its own.
- lz4, zstd: cramjam's ``decompress_into`` a scratch ``bytearray``; cramjam stops with "failed to
  write whole buffer" when it is full, and the buffer doubles (from 16 times the compressed size, at
  least 256 KiB) until the output fits; its last size is ``max_size`` itself, and output that does not
  fit that is over the limit. CPython zero-fills a new bytearray, so the buffer is sized to the batch,
  never to the limit; a thread keeps one of up to 8 MiB for reuse. The result is copied out once.

``inflate_pieces`` inflates the same data a piece at a time, for a batch too large to hold inflated
(R15-7): memory goes with the piece, not with the batch. gzip through ``zlib`` (``max_length``), zstd
through the ``zstandard`` package's stream reader (cramjam's zstd has no bounded streaming output),
an LZ4 frame block by block (cramjam's block decoder; independent blocks, as Kafka writes and reads
them), snappy chunk by chunk (a chunk or a raw block inflating past ``max_chunk`` is still refused).

Legacy LZ4 (magic 0, Kafka < 0.10, KAFKA-3160) wrote a wrong frame-descriptor checksum, computed over
the magic number as well. ``decompress`` recognises exactly that wrong value and patches it before
decoding, so no flag is needed; any other checksum mismatch is corruption.

Misuse by the caller (an unknown codec given to ``compress``, a negative ``max_size``) is a ValueError;
a buffer too large to reserve is ``RecordTooLargeError``, never MemoryError.
"""

from __future__ import annotations

import enum
import struct
import threading
import zlib
from collections.abc import Callable, Iterator

import cramjam

from kafkafs.errors import CorruptRecordError, RecordTooLargeError, UninflatableBatch

from . import Buffer

__all__ = ["Codec", "codec_by_name", "compress", "decompress", "inflate_pieces"]



class Codec(enum.IntEnum):
    """Compression codec ids: bits 0-2 of a batch's (or legacy message's) attributes."""

    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4


_BY_NAME = {"gzip": Codec.GZIP, "snappy": Codec.SNAPPY, "lz4": Codec.LZ4, "zstd": Codec.ZSTD}


def codec_by_name(name: str) -> Codec:
    """The codec of a ``compression.type`` name; ``none``, ``uncompressed``, ``producer`` (keep what the
    producer sent) and anything else mean no compression for batches kafkafs encodes itself."""
    return _BY_NAME.get(name, Codec.NONE)


# ---------------------------------------------------------------------------------------------- compress

GZIP_LEVEL = 6  # java.util.zip.Deflater's default, which Kafka keeps unless compression.gzip.level is set
ZSTD_LEVEL = 3  # Kafka's compression.zstd.level default
SNAPPY_CHUNK = 32 * 1024  # snappy-java's default block size
LZ4_BLOCK = 64 * 1024  # Kafka's LZ4 block size (BD byte 0x40)

XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = XERIAL_MAGIC + struct.pack(">ii", 1, 1)  # version 1, minimum compatible version 1

LZ4_MAGIC = b"\x04\x22\x4d\x18"
# FLG 0x60: version 01, independent blocks, no block or content checksum, no content size.
# BD 0x40: 64 KiB maximum block size. HC: (xxh32(FLG BD) >> 8) & 0xff, checked in the tests.
_LZ4_HEADER = LZ4_MAGIC + b"\x60\x40\x82"
_LZ4_END_MARK = b"\x00\x00\x00\x00"
_LZ4_UNCOMPRESSED = 0x80000000

_I32 = struct.Struct(">i")
_U32LE = struct.Struct("<I")
_GZIP_OS_UNKNOWN = 0xFF


def compress(codec: Codec, data: Buffer) -> bytes:
    """``data`` compressed by ``codec``, framed as the Kafka Java client frames it."""
    if codec == Codec.NONE:
        return bytes(data)
    if codec == Codec.GZIP:
        member = bytearray(zlib.compress(data, GZIP_LEVEL, 31))  # wbits 31: a gzip member
        # zlib names the OS it ran on (3, Unix) in header byte 9; java.util.zip.GZIPOutputStream writes
        # 255 ("unknown") since JDK 16, and Kafka 4 runs on Java 17 or newer: the broker's bytes
        member[9] = _GZIP_OS_UNKNOWN
        return bytes(member)
    if codec == Codec.SNAPPY:
        return _xerial_compress(memoryview(data))
    if codec == Codec.LZ4:
        return _lz4_frame_compress(memoryview(data))
    if codec == Codec.ZSTD:
        return bytes(cramjam.zstd.compress(data, level=ZSTD_LEVEL))
    raise ValueError(f"unknown codec {codec!r}")


def _xerial_compress(view: memoryview) -> bytes:
    parts = [_XERIAL_HEADER]
    for start in range(0, len(view), SNAPPY_CHUNK):
        block = cramjam.snappy.compress_raw(view[start : start + SNAPPY_CHUNK])
        parts.append(_I32.pack(len(block)))
        parts.append(bytes(block))
    return b"".join(parts)


def _lz4_frame_compress(view: memoryview) -> bytes:
    parts = [_LZ4_HEADER]
    for start in range(0, len(view), LZ4_BLOCK):
        chunk = view[start : start + LZ4_BLOCK]
        block = cramjam.lz4.compress_block(chunk, store_size=False)
        if len(block) < len(chunk):
            parts.append(_U32LE.pack(len(block)))
            parts.append(bytes(block))
        else:  # incompressible: stored as is, flagged by the high bit of the size, as Kafka does
            parts.append(_U32LE.pack(len(chunk) | _LZ4_UNCOMPRESSED))
            parts.append(bytes(chunk))
    parts.append(_LZ4_END_MARK)
    return b"".join(parts)


# -------------------------------------------------------------------------------------------- decompress

_scratch = threading.local()


_SCRATCH_KEEP = 8 * 1024 * 1024  # a thread keeps a buffer up to this size for the next batch
_SCRATCH_START = 256 * 1024


def _scratch_buffer(size: int) -> memoryview:
    """A buffer of exactly ``size`` bytes to inflate into: the thread's cached one when it is big
    enough, else a new one (cached when not larger than ``_SCRATCH_KEEP``). ``bytearray(n)`` writes
    all n bytes, so buffers are sized to the batch at hand rather than to the limit."""
    buf = getattr(_scratch, "buf", None)
    if buf is None or len(buf) < size:
        try:
            buf = bytearray(size)
        except MemoryError:
            raise RecordTooLargeError(f"cannot reserve {size} bytes to inflate a batch into") from None
        if size <= _SCRATCH_KEEP:
            _scratch.buf = buf
    return memoryview(buf)[:size]


def _too_big(name: str, max_size: int) -> UninflatableBatch:
    """Output over the limit: the batch's reader places it (:meth:`UninflatableBatch.of_batch`)."""
    return UninflatableBatch(f"{name} data inflates past {max_size} bytes", limit=max_size)


# cramjam's messages when the output buffer is full (io::Write on a slice; zstd's own for one-shot frames)
_FULL_MESSAGES = ("failed to write whole buffer", "Destination buffer is too small")


def _library_error(name: str, error: Exception, max_size: int) -> CorruptRecordError:
    message = str(error)
    if any(m in message for m in _FULL_MESSAGES):
        return _too_big(name, max_size)
    return CorruptRecordError(f"{name} data is corrupt: {message}")


def decompress(codec: Codec, data: Buffer, max_size: int) -> bytes:
    """``data`` inflated by ``codec``; at most ``max_size`` bytes, else ``UninflatableBatch``; data a codec
    cannot inflate is ``CorruptRecordError``.

    Accepts snappy either xerial-framed or as one raw block, an LZ4 frame (including Kafka < 0.10's
    wrong header checksum), one or more zstd frames with or without a content size, and one or more
    gzip members (bytes after the last member that do not start another are ignored, as Java does).
    """
    if max_size < 0:
        raise ValueError("max_size must not be negative")
    if codec == Codec.NONE:
        if len(data) > max_size:
            raise _too_big("uncompressed", max_size)
        return bytes(data)
    if codec == Codec.GZIP:
        return _gunzip(data, max_size)
    if codec == Codec.SNAPPY:
        return _unsnappy(memoryview(data), max_size)
    if codec == Codec.LZ4:
        return _unlz4(data, max_size)
    if codec == Codec.ZSTD:
        declared = _zstd_content_size(data)
        if declared is not None and declared > max_size:  # said by its frame: not inflated to find out
            raise _too_big("zstd", max_size)
        return _into_scratch(cramjam.zstd.decompress_into, "zstd", data, max_size)
    raise CorruptRecordError(f"unknown compression codec {int(codec)}")


_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
_FCS_BYTES = (0, 2, 4, 8)  # by the frame header descriptor's top two bits (0: 1 byte when single-segment)
_DICT_ID_BYTES = (0, 1, 2, 4)


def _zstd_content_size(data: Buffer) -> int | None:
    """The content size the first zstd frame of ``data`` declares (RFC 8878 3.1.1.1), None when it
    declares none (a streaming producer's, such as Kafka's) or the header does not parse (the decoder
    says what is wrong)."""
    if len(data) < 6 or bytes(data[:4]) != _ZSTD_MAGIC:
        return None
    fhd = data[4]
    single = fhd & 0x20
    size = _FCS_BYTES[fhd >> 6] or (1 if single else 0)
    pos = 5 + (0 if single else 1) + _DICT_ID_BYTES[fhd & 0x03]
    if not size or len(data) < pos + size:
        return None
    declared = int.from_bytes(bytes(data[pos : pos + size]), "little")
    return declared + 256 if size == 2 else declared


def _into_scratch(decompress_into: Callable[[Buffer, memoryview], int], name: str, data: Buffer, max_size: int) -> bytes:
    """Inflate into a buffer that starts near the likely size and doubles while the output does not
    fit, up to ``max_size`` (then the data is over the limit)."""
    capacity = min(max_size, max(_SCRATCH_START, 16 * len(data)))
    while True:
        out = _scratch_buffer(capacity)
        try:
            n = decompress_into(data, out)
        except cramjam.DecompressionError as e:
            if capacity < max_size and any(m in str(e) for m in _FULL_MESSAGES):
                capacity = min(max_size, capacity * 2)
                del out  # the smaller buffer goes before the larger one is made (peak: max_size, not 1.5 times)
                continue
            del out
            _shrink_scratch()  # an oversized or corrupt batch: do not keep what it grew
            raise _library_error(name, e, max_size) from None
        return bytes(out[:n])


def _shrink_scratch() -> None:
    """Give back the thread's scratch buffer if a failed batch grew it past the starting size (a
    decompression bomb must not leave every worker thread holding ``_SCRATCH_KEEP`` bytes)."""
    buf = getattr(_scratch, "buf", None)
    if buf is not None and len(buf) > _SCRATCH_START:
        _scratch.buf = None


_GZIP_MAGIC = b"\x1f\x8b"
_GZIP_STEP = 8 * 1024 * 1024


def _gunzip(data: Buffer, max_size: int) -> bytes:
    parts: list[bytes] = []
    total = 0
    rest: Buffer = data
    while True:
        inflater = zlib.decompressobj(31)
        while True:  # a step at a time: output over the limit is found holding the limit, not twice it
            asked = min(max_size - total + 1, _GZIP_STEP)
            try:
                # Ask for one byte more than allowed: getting it proves the output too large.
                part = inflater.decompress(rest, asked)
            except zlib.error as e:
                raise CorruptRecordError(f"gzip data is corrupt: {e}") from None
            total += len(part)
            if total > max_size:
                del part, parts  # the error's traceback keeps this frame: not its 64 MiB (finding 7)
                raise _too_big("gzip", max_size)
            parts.append(part)
            rest = inflater.unconsumed_tail
            if inflater.eof or (not rest and len(part) < asked):  # the end, or no more input and none held
                break
        if not inflater.eof:
            raise CorruptRecordError("gzip data is truncated")
        rest = inflater.unused_data
        if rest[:2] != _GZIP_MAGIC:
            break
    parts = [part for part in parts if part]
    return parts[0] if len(parts) == 1 else b"".join(parts)


def _unsnappy(view: memoryview, max_size: int) -> bytes:
    if len(view) >= len(_XERIAL_HEADER) and view[: len(XERIAL_MAGIC)] == XERIAL_MAGIC:
        return _unxerial(view, max_size)
    try:
        size = cramjam.snappy.decompress_raw_len(view)
    except cramjam.DecompressionError as e:
        raise CorruptRecordError(f"snappy data is corrupt: {e}") from None
    if size > max_size:
        raise _too_big("snappy", max_size)
    try:
        return bytes(cramjam.snappy.decompress_raw(view))
    except cramjam.DecompressionError as e:
        raise CorruptRecordError(f"snappy data is corrupt: {e}") from None


def _xerial_blocks(view: memoryview) -> Iterator[memoryview]:
    """The raw snappy blocks of snappy-java's stream (after its 16-byte header: big-endian i32 length,
    block), one at a time; CorruptRecordError where a length does not fit."""
    pos, end = len(_XERIAL_HEADER), len(view)
    while pos < end:
        if end - pos < 4:
            raise CorruptRecordError("snappy (xerial) data is truncated in a chunk length")
        (length,) = _I32.unpack_from(view, pos)
        pos += 4
        if length <= 0 or length > end - pos:
            raise CorruptRecordError(f"snappy (xerial) chunk length {length} does not fit the data")
        yield view[pos : pos + length]
        pos += length


def _unxerial(view: memoryview, max_size: int) -> bytes:
    """snappy-java's stream: 16-byte header, then (big-endian i32 length, raw snappy block)*. Each
    block's inflated size is in its own header, so the limit is checked before anything is inflated."""
    blocks: list[memoryview] = []
    total = 0
    for block in _xerial_blocks(view):  # every block's size first: a bomb is refused before anything is inflated
        try:
            total += cramjam.snappy.decompress_raw_len(block)
        except cramjam.DecompressionError as e:
            raise CorruptRecordError(f"snappy (xerial) data is corrupt: {e}") from None
        if total > max_size:
            raise _too_big("snappy", max_size)
        blocks.append(block)
    try:
        parts = [bytes(cramjam.snappy.decompress_raw(block)) for block in blocks]
    except cramjam.DecompressionError as e:
        raise CorruptRecordError(f"snappy (xerial) data is corrupt: {e}") from None
    return parts[0] if len(parts) == 1 else b"".join(parts)


def _unlz4(data: Buffer, max_size: int) -> bytes:
    try:
        return _into_scratch(cramjam.lz4.decompress_into, "lz4", data, max_size)
    except CorruptRecordError as e:
        if "headerChecksum" not in e.reason:
            raise
        fixed = _fix_kafka3160_checksum(data)
        if fixed is None:
            raise CorruptRecordError("lz4 frame descriptor checksum mismatch") from None
    return _into_scratch(cramjam.lz4.decompress_into, "lz4", fixed, max_size)


def _fix_kafka3160_checksum(data: Buffer) -> bytearray | None:
    """The frame with its descriptor checksum corrected, if it holds the KAFKA-3160 wrong one.

    Kafka < 0.10 hashed the magic number together with the descriptor (FLG, BD, optional content size
    and dictionary id). Returns None when the byte is neither right nor that known wrong value.
    """
    if len(data) < 7 or bytes(data[:4]) != LZ4_MAGIC:
        return None
    flg = data[4]
    hc_at = 6 + (8 if flg & 0x08 else 0) + (4 if flg & 0x01 else 0)
    if len(data) <= hc_at:
        return None
    header = bytes(data[:hc_at])
    if data[hc_at] != (xxh32(header) >> 8) & 0xFF:
        return None
    fixed = bytearray(data)
    fixed[hc_at] = (xxh32(header[4:]) >> 8) & 0xFF
    return fixed


_P1, _P2, _P3, _P4, _P5 = 0x9E3779B1, 0x85EBCA77, 0xC2B2AE3D, 0x27D4EB2F, 0x165667B1
_M32 = 0xFFFFFFFF


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (32 - r))) & _M32


def xxh32(data: bytes, seed: int = 0) -> int:
    """XXH32 (the hash of LZ4 frame checksums), in plain Python: only used on a few header bytes."""
    n = len(data)
    p = 0
    if n >= 16:
        lanes = [(seed + _P1 + _P2) & _M32, (seed + _P2) & _M32, seed & _M32, (seed - _P1) & _M32]
        while p + 16 <= n:
            for i in range(4):
                word = int.from_bytes(data[p : p + 4], "little")
                lanes[i] = _rotl((lanes[i] + word * _P2) & _M32, 13) * _P1 & _M32
                p += 4
        acc = (_rotl(lanes[0], 1) + _rotl(lanes[1], 7) + _rotl(lanes[2], 12) + _rotl(lanes[3], 18)) & _M32
    else:
        acc = (seed + _P5) & _M32
    acc = (acc + n) & _M32
    while p + 4 <= n:
        acc = _rotl((acc + int.from_bytes(data[p : p + 4], "little") * _P3) & _M32, 17) * _P4 & _M32
        p += 4
    while p < n:
        acc = _rotl((acc + data[p] * _P5) & _M32, 11) * _P1 & _M32
        p += 1
    acc ^= acc >> 15
    acc = acc * _P2 & _M32
    acc ^= acc >> 13
    acc = acc * _P3 & _M32
    acc ^= acc >> 16
    return acc


# ------------------------------------------------------------------------------------- inflate_pieces
# A batch too large to inflate at once (R15-7 step 2): its records are read a piece at a time.

_LZ4_BLOCK_SIZES = {4: 64 << 10, 5: 256 << 10, 6: 1 << 20, 7: 4 << 20}  # BD bits 4-6: the largest block


def inflate_pieces(codec: Codec, data: Buffer, piece: int, max_chunk: int) -> Iterator[bytes]:
    """``data`` inflated by ``codec``, a piece at a time: pieces of at most ``piece`` bytes (gzip, zstd),
    or the codec's own unit (an LZ4 block, at most 4 MiB; a snappy chunk, at most ``max_chunk``, else
    ``UninflatableBatch``, as is an LZ4 frame whose blocks depend on the ones before). Data a codec cannot inflate is ``CorruptRecordError``, raised after the pieces
    before it. Checksums inside an LZ4 frame (optional, Kafka writes none) are not checked here: the
    batch's CRC covers them."""
    if codec == Codec.GZIP:
        return _gunzip_pieces(data, piece)
    if codec == Codec.ZSTD:
        return _zstd_pieces(data, piece)
    if codec == Codec.LZ4:
        return _lz4_pieces(memoryview(data), max_chunk)
    if codec == Codec.SNAPPY:
        return _snappy_pieces(memoryview(data), max_chunk)
    if codec == Codec.NONE:
        view = memoryview(data)
        return (bytes(view[i : i + piece]) for i in range(0, len(view), piece))
    raise CorruptRecordError(f"unknown compression codec {int(codec)}")


def _gunzip_pieces(data: Buffer, piece: int) -> Iterator[bytes]:
    rest: Buffer = data
    while True:  # one gzip member after the other, as _gunzip reads them
        inflater = zlib.decompressobj(31)
        while True:
            try:
                part = inflater.decompress(rest, piece)
            except zlib.error as e:
                raise CorruptRecordError(f"gzip data is corrupt: {e}") from None
            rest = inflater.unconsumed_tail
            if part:
                yield part
            if inflater.eof:
                break
            if not part and not rest:
                raise CorruptRecordError("gzip data is truncated")
        rest = inflater.unused_data
        if rest[:2] != _GZIP_MAGIC:
            return


#: zstd input fed to the decoder at a time: a block gives at most 128 KiB from 4 bytes (an RLE block), so
#: one feed gives at most ~16 MiB whatever the frame says
_ZSTD_FEED = 512


def _zstd_pieces(data: Buffer, piece: int) -> Iterator[bytes]:
    """zstd frames (one after the other) through the ``zstandard`` package's decoder, fed a little input at
    a time (its stream reader bounds the output but takes a truncated frame for its end)."""
    import zstandard  # only for a batch too large to inflate at once: consume starts without it

    view = memoryview(data)
    pos, end = 0, len(view)
    decompressor = zstandard.ZstdDecompressor()
    while pos < end:
        inflater = decompressor.decompressobj()
        while not inflater.eof:
            if pos >= end:
                raise CorruptRecordError("zstd data is truncated")
            feed = bytes(view[pos : pos + _ZSTD_FEED])
            pos += len(feed)
            try:
                part = inflater.decompress(feed)
            except zstandard.ZstdError as e:
                if "memory" in str(e):  # a frame whose window is past the decoder's limit (128 MiB): not held
                    raise UninflatableBatch(f"zstd data needs a window past what kafkafs holds: {e}") from None
                raise CorruptRecordError(f"zstd data is corrupt: {e}") from None
            for start in range(0, len(part), piece):
                yield part[start : start + piece] if len(part) > piece else part
        pos -= len(inflater.unused_data)  # the next frame starts there


def _lz4_pieces(view: memoryview, max_chunk: int) -> Iterator[bytes]:
    """An LZ4 frame (or frames, one after the other) block by block: magic, FLG, BD, [content size],
    [dictionary id], header checksum; blocks as (u32le size, high bit: stored as is) [u32 checksum];
    end mark 0 [u32 content checksum]."""
    pos, end = 0, len(view)
    out: bytearray | None = None
    while True:
        if end - pos < 7 or bytes(view[pos : pos + 4]) != LZ4_MAGIC:
            raise CorruptRecordError("lz4 data is corrupt: not an LZ4 frame")
        flg, bd = view[pos + 4], view[pos + 5]
        if flg >> 6 != 1:
            raise CorruptRecordError(f"lz4 frame version {flg >> 6} is not supported")
        if not flg & 0x20:  # a block may refer to the ones before: not read in pieces (the batch is not shown)
            raise _too_big("lz4", max_chunk)
        block_max = _LZ4_BLOCK_SIZES.get((bd >> 4) & 0x07)
        if block_max is None:
            raise CorruptRecordError(f"lz4 frame block size code {(bd >> 4) & 0x07} is not valid")
        pos += 6 + (8 if flg & 0x08 else 0) + (4 if flg & 0x01 else 0)
        if pos >= end:
            raise CorruptRecordError("lz4 data is truncated in its frame descriptor")
        pos += 1  # the header checksum (checked by the one-shot reader; the batch's CRC covers it)
        block_checksum = 4 if flg & 0x10 else 0
        if out is None or len(out) < block_max:
            out = bytearray(block_max)
        while True:
            if end - pos < 4:
                raise CorruptRecordError("lz4 data is truncated in a block size")
            (size,) = _U32LE.unpack_from(view, pos)
            pos += 4
            if size == 0:
                break
            stored = size & _LZ4_UNCOMPRESSED
            size &= ~_LZ4_UNCOMPRESSED & _M32
            if size > block_max or size > end - pos:
                raise CorruptRecordError(f"lz4 block size {size} does not fit the frame")
            block = view[pos : pos + size]
            pos += size + block_checksum
            if stored:
                yield bytes(block)
                continue
            try:
                n = cramjam.lz4.decompress_block_into(block, memoryview(out)[:block_max])
            except cramjam.DecompressionError as e:
                raise CorruptRecordError(f"lz4 data is corrupt: {e}") from None
            yield bytes(out[:n])
        pos += 4 if flg & 0x04 else 0  # the content checksum
        if pos >= end or bytes(view[pos : pos + 4]) != LZ4_MAGIC:
            return  # bytes after the last frame that do not start another are ignored


def _snappy_pieces(view: memoryview, max_chunk: int) -> Iterator[bytes]:
    if not (len(view) >= len(_XERIAL_HEADER) and view[: len(XERIAL_MAGIC)] == XERIAL_MAGIC):
        yield _raw_snappy(view, max_chunk, "snappy")  # one raw block: it says its length up front
        return
    for block in _xerial_blocks(view):
        yield _raw_snappy(block, max_chunk, "snappy (xerial)")


def _raw_snappy(block: memoryview, max_size: int, name: str) -> bytes:
    try:
        if cramjam.snappy.decompress_raw_len(block) > max_size:
            raise _too_big("snappy", max_size)
        return bytes(cramjam.snappy.decompress_raw(block))
    except cramjam.DecompressionError as e:
        raise CorruptRecordError(f"{name} data is corrupt: {e}") from None
