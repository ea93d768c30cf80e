"""One kernel entry point over hostile batches, from several threads at once, held to the Python reference.

Run in a subprocess by tests/format/test_kernel_gil.py (a GIL deadlock hangs this process, not pytest):

    python -m tests.format.gil_worker ENTRY [CHECKED_KERNEL.so]

ENTRY is one of :data:`ENTRIES`. With a path, that build of the kernel (``build_kernel.py --gil-check``,
where a take or release of the GIL in the wrong state aborts) stands in for ``kafkafs.format._kernel``.
The batches hold records whose header keys are not UTF-8 and escape to six times their size, so every
output buffer grows while the kernel renders without the GIL. Prints ``ok ENTRY`` and exits 0 when every
thread's every result equals the reference; a difference raises (exit 1).
"""

from __future__ import annotations

import importlib.util
import struct
import sys
import threading

from tests.kafka_layout import record

THREADS = 4
ROUNDS = 3
MODES = ("auto", "string", "base64")
ENTRIES = ("render", "render_span", "render_span_lengths", "render_span_into", "render_columns", "decode", "pretty",
           "arrow")

# header keys that are not UTF-8 (each kind Python's 'replace' handles differently), padded with control
# bytes that JSON escapes as \u00XX: a key of 16 bytes renders as up to ~90
HOSTILE_KEYS = [b"\xff" + b"\x01" * 15, b"\xed\xa0\x80" + b"\x02" * 13, b"a\xc3" + b"\x1f" * 14,
                b"\xf0\x9f\x98" + b"\x03" * 13, b"\xe0\x80\x80" + b"\x04" * 13, b"\x80\xbf" + b"\x05" * 14]


def hostile_section(count: int = 100) -> bytes:
    """A records section (Kafka's documented layout) of ``count`` small JSON records, each with four
    binary header keys, as a librdkafka producer can write them."""
    out = bytearray()
    for i in range(count):
        headers = [(HOSTILE_KEYS[(i + h) % len(HOSTILE_KEYS)], b'{"h":%d}' % h) for h in range(4)]
        out += record(i, i, b"key-%d" % i, b'{"n": %d}' % i, headers)
    return bytes(out)


def hostile_batch(base: int = 0, count: int = 100) -> bytes:
    """A whole uncompressed v2 batch around :func:`hostile_section`, its CRC-32C by the crc32c package."""
    import crc32c

    after = struct.pack(">hiqqqhii", 0, count - 1, 1000, 1000 + count, -1, -1, -1, count) + hostile_section(count)
    body = struct.pack(">iBI", 0, 2, crc32c.crc32c(after)) + after
    return struct.pack(">qi", base, len(body)) + body


def _load(checked: str | None) -> None:
    if checked:
        spec = importlib.util.spec_from_file_location("kafkafs.format._kernel", checked)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        sys.modules["kafkafs.format._kernel"] = module


def _cases(entry: str):
    """(callable, expected) pairs for one entry point: the kernel's call and the reference's result."""
    from kafkafs.format import jsonembed, kernel
    from kafkafs.format.batch import read_batch_header
    from kafkafs.format.jsonrender import line_prefix, render_lines
    from kafkafs.format.jsonspan import reference_span, render_span_jsonl
    from kafkafs.format.records import decode_records

    assert kernel.KERNEL is not None, "the kernel is not built"
    buf = b"".join(hostile_batch(base) for base in (0, 100, 200))
    header = read_batch_header(buf, 0)
    data = buf[61 : header.size]
    batch = decode_records(data, header)
    prefix = line_prefix("hostile", 3)
    cases = []
    for mode in MODES:
        lines = render_lines("hostile", 3, batch, mode, range(len(batch)))
        if entry == "render":
            ends = [sum(map(len, lines[: i + 1])) for i in range(len(lines))]
            joined = b"".join(lines)
            for what, expected in ((0, joined), (1, [len(x) for x in lines]), (2, (joined, batch.offsets, ends)),
                                   (3, (joined, len(lines)))):
                cases.append((lambda m=mode, w=what: kernel.render_raw(prefix, data, header, m, None, None, None,
                                                                       None, w), expected))
        elif entry in ("render_span", "render_span_lengths"):
            lengths = entry == "render_span_lengths"
            ref = reference_span("hostile", 3, buf, mode, lengths=lengths)
            assert ref.consumed == len(buf)
            cases.append((lambda m=mode, n=lengths: tuple(render_span_jsonl("hostile", 3, buf, m, lengths=n)),
                          tuple(ref)))
        elif entry == "render_span_into":
            from kafkafs.format.jsonspan import render_span_into

            ref = reference_span("hostile", 3, buf, mode)

            def into(m=mode, size=len(ref.data)):  # noqa: B008 - bound per mode, as the lambdas above
                out = bytearray(size + 7)
                got = render_span_into("hostile", 3, buf, memoryview(out)[:size + 3], 3, m)
                return bytes(out[3 : 3 + got.written]), got.consumed, got.lines, got.full

            cases.append((into, (ref.data, ref.consumed, ref.lines, False)))
        elif entry == "render_columns":
            cases.append((lambda m=mode: kernel.render_columns(prefix, batch, m, 0, len(batch)), b"".join(lines)))
        elif entry == "pretty":
            from kafkafs.format.jsonview import render_raw_record_pretty

            for i in (0, 57, 99):
                expected = (jsonembed.indent_json(lines[i][:-1]) + b"\n", batch.timestamps[i])
                cases.append((lambda m=mode, o=i: render_raw_record_pretty("hostile", 3, buf[: header.size], o, m),
                              expected))
    if entry == "decode":
        def columns(b):
            return b.offsets, b.timestamps, b.keys, b.values, [list(map(tuple, h)) for h in b.headers]

        cases.append((lambda: columns(kernel.decode_records(data, header)), columns(batch)))
    elif entry == "arrow":
        from kafkafs.spark.arrowcols import KernelColumns
        from kafkafs.spark.plan import ScanSpec

        def keys():
            built = KernelColumns(True)
            built.add_section("hostile", 3, data, header, 0, None)
            got = built.build(ScanSpec(include_headers=True)).column("headers").to_pylist()
            return [[h["key"] for h in hs] for hs in got]

        cases.append((keys, [[k for k, _v in hs] for hs in batch.headers]))
    assert cases, entry
    return cases


def main(argv: list[str]) -> int:
    entry = argv[0]
    _load(argv[1] if len(argv) > 1 else None)
    cases = _cases(entry)
    failures: list[str] = []

    def run() -> None:
        try:
            for _ in range(ROUNDS):
                for call, expected in cases:
                    got = call()
                    if got != expected:
                        failures.append(f"{entry}: the kernel's result differs from the reference's")
                        return
        except BaseException as exc:  # noqa: BLE001 - reported, then the process fails
            failures.append(f"{entry}: {exc!r}")

    threads = [threading.Thread(target=run) for _ in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if failures:
        print("\n".join(failures[:5]), file=sys.stderr)
        return 1
    print(f"ok {entry}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
