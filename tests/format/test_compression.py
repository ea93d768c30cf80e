"""Codecs: round trips, Kafka's framing, independent encoders and decoders, the inflate bound, damage."""

import gzip
import io
import os
import struct
import time

import cramjam
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kafkafs.errors import CorruptRecordError
from kafkafs.format.compression import Codec, codec_by_name, compress, decompress, xxh32

from ..conftest import FIXTURES

kcodec = pytest.importorskip("kafka.codec")

CODECS = list(Codec)
COMPRESSED = [c for c in Codec if c != Codec.NONE]
MB = 1 << 20


def _text(n: int) -> bytes:
    words = b"kafka log segment offset index batch record key value header timestamp ".split()
    out = bytearray()
    i = 0
    while len(out) < n:
        out += words[(i * 7 + i // 3) % len(words)] + b" %d " % (i % 1000)
        i += 1
    return bytes(out[:n])


SAMPLES = {
    "empty": b"",
    "one": b"x",
    "text": _text(5000),
    "random": os.urandom(3000),
    # crosses snappy's 32 KiB chunks and LZ4's 64 KiB blocks, not on a boundary
    "large": _text(3 * 65536 + 17) + os.urandom(40000),
}


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name)
@pytest.mark.parametrize("name", SAMPLES)
def test_round_trip(codec, name):
    data = SAMPLES[name]
    packed = compress(codec, data)
    assert isinstance(packed, bytes)
    assert decompress(codec, packed, len(data)) == data
    assert decompress(codec, memoryview(packed), len(data) + 100) == data


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name)
def test_memoryview_input_with_offset(codec):
    data = SAMPLES["large"]
    holder = bytearray(b"junk" + data + b"tail")
    view = memoryview(holder)[4 : 4 + len(data)]
    assert compress(codec, view) == compress(codec, data)
    packed = compress(codec, data)
    framed = memoryview(b"zz" + packed + b"!")[2:-1]
    assert decompress(codec, framed, len(data)) == data


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name)
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.binary(max_size=3000) | st.binary(max_size=50).map(lambda b: b * 200))
def test_round_trip_hypothesis(codec, data):
    assert decompress(codec, compress(codec, data), len(data)) == data


@pytest.mark.parametrize("codec", COMPRESSED, ids=lambda c: c.name)
def test_limit_is_inclusive(codec):
    data = SAMPLES["text"]
    packed = compress(codec, data)
    assert decompress(codec, packed, len(data)) == data
    with pytest.raises(CorruptRecordError, match=f"inflates past {len(data) - 1} bytes"):
        decompress(codec, packed, len(data) - 1)


def test_none_codec_is_bounded_too():
    assert decompress(Codec.NONE, b"abc", 3) == b"abc"
    with pytest.raises(CorruptRecordError, match="inflates past 2"):
        decompress(Codec.NONE, b"abc", 2)


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name)
def test_zero_limit(codec):
    assert decompress(codec, compress(codec, b""), 0) == b""


# ------------------------------------------------------------------------------------- Kafka's framing


def test_lz4_frame_is_what_kafka_writes():
    frame = compress(Codec.LZ4, _text(3 * 65536))
    assert frame[:4] == b"\x04\x22\x4d\x18"
    assert frame[4] == 0x60  # version 1, independent blocks, no checksums, no content size
    assert frame[5] == 0x40  # 64 KiB blocks
    assert frame[6] == (xxh32(frame[4:6]) >> 8) & 0xFF
    assert frame[-4:] == b"\0\0\0\0"
    pos, blocks = 7, 0
    while True:
        (size,) = struct.unpack_from("<I", frame, pos)
        if size == 0:
            break
        assert (size & 0x7FFFFFFF) <= 65536
        pos += 4 + (size & 0x7FFFFFFF)
        blocks += 1
    assert blocks == 3 and pos + 4 == len(frame)


def test_lz4_incompressible_block_is_stored():
    data = os.urandom(1000)
    frame = compress(Codec.LZ4, data)
    (size,) = struct.unpack_from("<I", frame, 7)
    assert size == 0x80000000 | 1000
    assert frame[11:1011] == data
    assert decompress(Codec.LZ4, frame, 1000) == data


def test_empty_lz4_frame_is_header_and_end_mark():
    assert compress(Codec.LZ4, b"") == b"\x04\x22\x4d\x18\x60\x40\x82\0\0\0\0"


def test_snappy_is_xerial_framed_in_32k_chunks():
    data = _text(100_000)
    packed = compress(Codec.SNAPPY, data)
    assert packed[:16] == b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1)
    pos, total = 16, 0
    while pos < len(packed):
        (length,) = struct.unpack_from(">i", packed, pos)
        chunk = packed[pos + 4 : pos + 4 + length]
        total += len(cramjam.snappy.decompress_raw(chunk))
        pos += 4 + length
        assert total % 32768 == 0 or total == len(data)
    assert total == len(data)


def test_gzip_is_one_member():
    packed = compress(Codec.GZIP, SAMPLES["text"])
    assert packed[:3] == b"\x1f\x8b\x08"
    assert gzip.decompress(packed) == SAMPLES["text"]


def test_xxh32_known_values():
    assert xxh32(b"") == 0x02CC5D05
    assert xxh32(b"a") == 0x550D7456
    assert xxh32(b"abc") == 0x32D153FF
    assert xxh32(b"Nobody inspects the spammish repetition") == 0xE2293B2F
    xxhash = pytest.importorskip("xxhash")
    for n in range(40):
        data = os.urandom(n)
        assert xxh32(data) == xxhash.xxh32_intdigest(data)
        assert xxh32(data, 7) == xxhash.xxh32_intdigest(data, 7)


# ------------------------------------------------------------------------ other libraries, both ways


INDEPENDENT_ENCODERS = {
    Codec.GZIP: kcodec.gzip_encode,
    Codec.SNAPPY: lambda d: kcodec.snappy_encode(d, xerial_compatible=True),
    Codec.LZ4: kcodec.lz4_encode,
    Codec.ZSTD: kcodec.zstd_encode,
}
INDEPENDENT_DECODERS = {
    Codec.GZIP: kcodec.gzip_decode,
    Codec.SNAPPY: kcodec.snappy_decode,
    Codec.LZ4: kcodec.lz4_decode,
    Codec.ZSTD: kcodec.zstd_decode,
}


@pytest.mark.parametrize("codec", COMPRESSED, ids=lambda c: c.name)
@pytest.mark.parametrize("name", ["one", "text", "random", "large"])
def test_we_read_kafka_python(codec, name):
    data = SAMPLES[name]
    assert decompress(codec, INDEPENDENT_ENCODERS[codec](data), len(data)) == data


@pytest.mark.parametrize("codec", COMPRESSED, ids=lambda c: c.name)
@pytest.mark.parametrize("name", ["one", "text", "random", "large"])
def test_kafka_python_reads_us(codec, name):
    data = SAMPLES[name]
    assert INDEPENDENT_DECODERS[codec](compress(codec, data)) == data


def test_raw_snappy_block():
    snappy = pytest.importorskip("snappy")
    for data in (b"x", SAMPLES["text"], SAMPLES["large"]):
        assert decompress(Codec.SNAPPY, snappy.compress(data), len(data)) == data
    with pytest.raises(CorruptRecordError, match="inflates past"):
        decompress(Codec.SNAPPY, snappy.compress(SAMPLES["text"]), 100)


def test_other_lz4_frame_flavours():
    lz4_frame = pytest.importorskip("lz4.frame")
    data = SAMPLES["large"]
    for linked in (False, True):
        for checksum in (False, True):
            for store_size in (False, True):
                frame = lz4_frame.compress(
                    data, block_linked=linked, content_checksum=checksum, store_size=store_size
                )
                assert decompress(Codec.LZ4, frame, len(data)) == data
    assert lz4_frame.decompress(compress(Codec.LZ4, data)) == data


def test_zstd_streams_without_content_size_and_concatenated_frames():
    zstandard = pytest.importorskip("zstandard")
    data = SAMPLES["large"]
    out = io.BytesIO()
    with zstandard.ZstdCompressor(level=3).stream_writer(out, closefd=False) as writer:
        for i in range(0, len(data), 10_000):  # written in pieces and flushed, as zstd-jni streams
            writer.write(data[i : i + 10_000])
            writer.flush()
    streamed = out.getvalue()
    assert zstandard.get_frame_parameters(streamed).content_size == zstandard.CONTENTSIZE_UNKNOWN
    assert decompress(Codec.ZSTD, streamed, len(data)) == data
    plain = zstandard.ZstdCompressor(write_content_size=False)
    two = plain.compress(b"first ") + plain.compress(b"second")
    assert decompress(Codec.ZSTD, two, 12) == b"first second"
    with pytest.raises(CorruptRecordError, match="inflates past 11"):
        decompress(Codec.ZSTD, two, 11)
    assert zstandard.ZstdDecompressor().decompress(compress(Codec.ZSTD, data)) == data


def test_gzip_members_and_trailing_bytes():
    two = gzip.compress(b"abc") + gzip.compress(b"def")
    assert decompress(Codec.GZIP, two, 6) == b"abcdef"
    with pytest.raises(CorruptRecordError, match="inflates past 5"):
        decompress(Codec.GZIP, two, 5)
    # Java's GZIPInputStream ignores bytes after a member that do not start another one
    assert decompress(Codec.GZIP, gzip.compress(b"abc") + b"\0\0\0", 3) == b"abc"


def test_legacy_lz4_wrong_header_checksum():
    """KAFKA-3160: Kafka < 0.10 hashed the magic number into the descriptor checksum."""
    data = SAMPLES["text"]
    frame = bytearray(compress(Codec.LZ4, data))
    frame[6] = (xxh32(bytes(frame[:6])) >> 8) & 0xFF
    assert frame[6] != 0x82
    assert decompress(Codec.LZ4, bytes(frame), len(data)) == data
    frame[6] ^= 0x01  # neither right nor the known wrong value
    with pytest.raises(CorruptRecordError, match="descriptor checksum"):
        decompress(Codec.LZ4, bytes(frame), len(data))


def test_legacy_lz4_from_kafka_python():
    pytest.importorskip("xxhash")
    data = SAMPLES["large"]
    assert decompress(Codec.LZ4, kcodec.lz4_encode_old_kafka(data), len(data)) == data


def _record_section(path, batch_index=0):
    """The compressed records section of the n-th v2 batch of a fixture file."""
    data = path.read_bytes()
    pos = 0
    for _ in range(batch_index):
        pos += 12 + struct.unpack_from(">i", data, pos + 8)[0]
    end = pos + 12 + struct.unpack_from(">i", data, pos + 8)[0]
    codec = struct.unpack_from(">h", data, pos + 21)[0] & 7
    return Codec(codec), data[pos + 61 : end]


@pytest.mark.parametrize(
    "name",
    [
        "sarama_gzipped_record.bin",
        "sarama_snappy_record.bin",
        "sarama_lz4_record.bin",
        "kafka-go_v2c-v2c_recordset.bin",
    ],
)
def test_other_clients_batches(name):
    path = FIXTURES / "vectors" / name
    if not path.exists():
        pytest.skip("shared fixtures missing")
    codec, section = _record_section(path)
    assert codec != Codec.NONE
    out = decompress(codec, section, MB)
    assert out == INDEPENDENT_DECODERS[codec](section)
    assert len(out) > 0


# -------------------------------------------------------------------------------------- the bound


def _bombs():
    zeros = bytes(10 * MB)
    bombs = {codec.name: (codec, compress(codec, zeros)) for codec in COMPRESSED}
    bombs["SNAPPY-raw"] = (Codec.SNAPPY, bytes(cramjam.snappy.compress_raw(zeros)))
    try:
        import zstandard
    except ImportError:
        return bombs
    no_size = zstandard.ZstdCompressor(write_content_size=False).compress(zeros)
    bombs["ZSTD-no-content-size"] = (Codec.ZSTD, no_size)
    return bombs


BOMBS = _bombs()


@pytest.mark.parametrize("name", BOMBS)
def test_bomb_stops_at_the_limit_quickly(name):
    codec, packed = BOMBS[name]
    assert len(packed) < 2 * MB
    start = time.perf_counter()
    with pytest.raises(CorruptRecordError, match=f"inflates past {MB} bytes") as info:
        decompress(codec, packed, MB)
    assert time.perf_counter() - start < 0.5
    assert info.value.position is None


def test_absurd_limit_is_not_a_memory_error():
    packed = compress(Codec.LZ4, b"hello")
    # buffers are sized to the data, not to the limit
    assert decompress(Codec.LZ4, packed, 1 << 50) == b"hello"
    assert decompress(Codec.LZ4, packed, 5) == b"hello"


def test_scratch_memory_follows_the_batch_not_the_limit():
    import resource
    import threading

    packed = {c: compress(c, b"x" * 100_000) for c in (Codec.LZ4, Codec.ZSTD, Codec.SNAPPY)}
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss

    def work():
        for codec, data in packed.items():
            assert decompress(codec, data, 64 << 20) == b"x" * 100_000

    threads = [threading.Thread(target=work) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    grown_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
    assert grown_kib < 64 * 1024, f"peak RSS grew by {grown_kib} KiB for 8 threads of 100 kB batches"


# ----------------------------------------------------------------------------------------- damage


@pytest.mark.parametrize("codec", COMPRESSED, ids=lambda c: c.name)
@pytest.mark.parametrize("junk", [b"", b"\xff", b"garbage in, garbage out" * 5, bytes(range(256))])
def test_garbage_is_corrupt(codec, junk):
    with pytest.raises(CorruptRecordError):
        decompress(codec, junk, MB)


@pytest.mark.parametrize("codec", COMPRESSED, ids=lambda c: c.name)
def test_truncated_is_corrupt(codec):
    packed = compress(codec, SAMPLES["large"])
    for cut in (1, 2, 5, 17, len(packed) // 2, len(packed) - 4):
        with pytest.raises(CorruptRecordError):
            decompress(codec, packed[:-cut], MB)


@pytest.mark.parametrize("codec", COMPRESSED, ids=lambda c: c.name)
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_mutations_only_raise_corrupt(codec, data):
    packed = bytearray(compress(codec, SAMPLES["text"]))
    for _ in range(data.draw(st.integers(1, 4))):
        at = data.draw(st.integers(0, len(packed) - 1))
        packed[at] = data.draw(st.integers(0, 255))
    if data.draw(st.booleans()):
        del packed[data.draw(st.integers(0, len(packed))) :]
    limit = data.draw(st.sampled_from([0, 100, len(SAMPLES["text"]), MB]))
    try:
        out = decompress(codec, bytes(packed), limit)
    except CorruptRecordError:
        return
    assert len(out) <= limit


@pytest.mark.parametrize("codec", COMPRESSED, ids=lambda c: c.name)
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(junk=st.binary(max_size=300))
def test_random_bytes_only_raise_corrupt(codec, junk):
    for prefix in (
        b"",
        b"\x82SNAPPY\x00\0\0\0\1\0\0\0\1",
        b"\x04\x22\x4d\x18",
        b"\x28\xb5\x2f\xfd",
        b"\x1f\x8b\x08",
    ):
        try:
            out = decompress(codec, prefix + junk, 4096)
        except CorruptRecordError:
            continue
        assert len(out) <= 4096


def test_unknown_codec():
    with pytest.raises(CorruptRecordError, match="unknown compression codec 5"):
        decompress(5, b"x", 10)



def test_codec_by_name():
    assert codec_by_name("lz4") is Codec.LZ4 and codec_by_name("zstd") is Codec.ZSTD
    assert codec_by_name("producer") is Codec.NONE and codec_by_name("uncompressed") is Codec.NONE


def test_threads_do_not_share_output():
    from concurrent.futures import ThreadPoolExecutor

    inputs = [_text(1000 + 7919 * i) for i in range(16)]
    jobs = [(codec, data, compress(codec, data)) for codec in COMPRESSED for data in inputs]

    def run(job):
        codec, data, packed = job
        return all(decompress(codec, packed, MB) == data for _ in range(20))

    with ThreadPoolExecutor(8) as pool:
        assert all(pool.map(run, jobs))


def test_misuse_is_a_value_error():
    with pytest.raises(ValueError):
        compress(9, b"x")
    with pytest.raises(ValueError):
        decompress(Codec.GZIP, b"x", -1)


# ------------------------------------------------------------------------ gzip as Java writes it

_JAVA_GZIP = """
import java.io.*;
import java.util.zip.GZIPOutputStream;
public class JavaGzip {
    public static void main(String[] args) throws Exception {
        byte[] data = System.in.readAllBytes();
        ByteArrayOutputStream out = new ByteArrayOutputStream();
        // as Kafka's GzipCompression.wrapForOutput: a GZIPOutputStream of 8 KiB under a 16 KiB buffer
        try (OutputStream gz = new BufferedOutputStream(new GZIPOutputStream(out, 8 * 1024), 16 * 1024)) {
            gz.write(data);
        }
        System.out.write(out.toByteArray());
        System.out.flush();
    }
}
"""


def test_gzip_header_is_javas():
    """A broker (Java 17 or newer) writes header byte 9, the OS, as 255 (unknown); zlib writes 3 (Unix)."""
    packed = compress(Codec.GZIP, SAMPLES["text"])
    assert packed[:10] == b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff"


def test_gzip_bytes_equal_javas_gzip_output_stream(tmp_path):
    """The whole member equals what java.util.zip.GZIPOutputStream writes, where a JDK can run a
    single-file program (the JDK that runs the broker tests)."""
    import shutil
    import subprocess

    java = shutil.which("java")
    if java is None:
        pytest.skip("no java here")
    source = tmp_path / "JavaGzip.java"
    source.write_text(_JAVA_GZIP)
    for name, data in SAMPLES.items():
        run = subprocess.run([java, str(source)], input=data, capture_output=True, timeout=120)
        if run.returncode != 0 and b"compiler" in run.stderr.lower():
            pytest.skip("this Java cannot run a single-file program (no jdk.compiler)")
        assert run.returncode == 0, run.stderr.decode(errors="replace")
        assert compress(Codec.GZIP, data) == run.stdout, name
