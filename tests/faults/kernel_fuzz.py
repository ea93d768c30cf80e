"""A coverage-guided fuzz target for the compiled kernel: every entry point, under AddressSanitizer and
UndefinedBehaviorSanitizer, each result held to the Python reference (issue 20).

The kernel is built with clang for it (``scripts/build_kernel.py --fuzz --out DIR``: ASan, UBSan, any
UBSan report aborts, and libFuzzer's coverage counters), atheris drives it (libFuzzer in a Python
process; its ``asan_with_fuzzer.so`` is preloaded so that the sanitizers' runtime comes first), and the
Python reference under test is instrumented by atheris too, so that new paths on either side count.
``scripts/fuzz_setup.sh`` installs clang and atheris and builds the kernel into ``.fuzz/``;
``scripts/fuzz_kernel.sh`` runs this file with libFuzzer's flags:

    scripts/fuzz_kernel.sh -runs=1000000 -timeout=1 .fuzz/corpus

One input is ``[target][PARAMS bytes of parameters][payload]``: the target byte picks the entry point,
the parameters (zero-padded when the input is short) pick modes, bounds, offsets and a record filter,
and the payload is the bytes under test (a records section, a buffer of batches, a JSON value, ...).
Batches in a payload get their CRC-32C recomputed unless a parameter says not to, so that the fuzzer
reaches the records behind the checksum. Targets and their references:

- ``section``: ``decode``, ``render`` (every ``what``, bounds, a filter), ``render_columns``, against
  :func:`.records.decode_records`, :func:`.jsonrender.render_lines` and :meth:`.RecordFilter.accepts`;
  ``keys_section`` against :func:`.keyindex.section_entries_reference`; ``ArrowBuilder.add_section``
  against the Spark reader's Python columns.
- ``span``: ``render_span`` (lines and lengths, order of offsets, a filter) against
  :func:`.jsonspan.reference_span`; ``render_span_into`` (into a slice of a bigger buffer, room for all,
  some or none of the lines) against :func:`.jsonspan.reference_span_into`, bytes outside its slice
  untouched; ``span_cuts``; ``keys_span`` against ``span_entries_reference``.
- ``batch``: the raw per-batch path (``render_raw_jsonl`` with bounds and a filter,
  ``render_raw_record_pretty`` for offsets in and around the batch) with and without the kernel.
- ``value``: ``render_value``, ``indent_json`` against :mod:`.jsonembed`.
- ``hash``: ``crc32c`` (table and instruction) against the crc32c package, ``md5_halves`` against hashlib.
- ``omap``: ``omap_put`` / ``omap_retain`` against :class:`.OffsetMap`'s Python loops, slot for slot.
- ``entries``: ``keys_sort``, ``keys_find``, ``keys_counts``, ``keys_table`` against their references.
- ``lines``: the write path, ``encode_lines`` (lines to a v2 batch: group bounds, a size limit, a codec)
  against :func:`.lineencode.encode_lines`'s reference (``reference=True``), group after group, errors
  included.

A difference raises :class:`Difference` (libFuzzer saves the input as ``crash-*``); a sanitizer report
aborts; an input that takes over a second of CPU raises :class:`Hang`, and one that runs past libFuzzer's
``-timeout`` (wall) seconds is a ``timeout-*``.
"""

from __future__ import annotations

import atexit
import base64
import hashlib
import importlib.util
import os
import struct
import sys
import time
from array import array

PARAMS = 48
TARGETS = ("section", "span", "batch", "value", "hash", "omap", "entries", "lines")
MODES = ("auto", "string", "base64")
_INTERESTING = (0, 1, -1, 2, 5, 7, 100, 1000, 2**31 - 1, -(2**31), 2**32, 2**63 - 1, -(2**63), 2**40)


class Difference(AssertionError):
    """The kernel and the Python reference disagree on an input."""


def load_kernel(path: str) -> object:
    """The build at ``path`` stands in for ``kafkafs.format._kernel`` (before kafkafs imports it)."""
    spec = importlib.util.spec_from_file_location("kafkafs.format._kernel", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    sys.modules["kafkafs.format._kernel"] = module
    return module


class Params:
    """Reads the parameter block one choice at a time (zeros past the end of a short input)."""

    def __init__(self, raw: bytes) -> None:
        self.raw = raw.ljust(PARAMS, b"\0")
        self.at = 0

    def byte(self) -> int:
        value = self.raw[self.at % PARAMS]
        self.at += 1
        return value

    def pick(self, choices):
        return choices[self.byte() % len(choices)]

    def flag(self) -> bool:
        return bool(self.byte() & 1)

    def small(self, n: int) -> int:
        return self.byte() % n

    def int64(self) -> int:
        """An interesting value, or a small one, or 8 bytes as a long."""
        kind = self.byte() % 4
        if kind == 0:
            return self.pick(_INTERESTING)
        if kind == 1:
            return self.byte() - 20
        if kind == 2:
            return struct.unpack(">q", bytes(self.byte() for _ in range(8)))[0]
        return self.byte() * 1000 + self.byte()

    def bound(self) -> int | None:
        return None if self.byte() % 3 == 0 else self.int64()


# ------------------------------------------------------------------------------------------ helpers


def _outcome(fn, *args, **kw):
    """A call's result, or the kind of error it raised (damage is 'refused', whatever its words)."""
    from kafkafs.errors import CorruptRecordError

    try:
        return fn(*args, **kw)
    except CorruptRecordError:
        return "refused"


def _reference_outcome(fn, *args, **kw):
    """The reference's outcome: a Python decoder may also stop on damage with IndexError/ValueError."""
    from kafkafs.errors import CorruptRecordError

    try:
        return fn(*args, **kw)
    except (CorruptRecordError, IndexError, ValueError, OverflowError):
        return "refused"


def _same(what: str, got, want) -> None:
    if got != want:
        raise Difference(f"{what}: kernel {_short(got)} != reference {_short(want)}")


def _short(value) -> str:
    text = repr(value)
    return text if len(text) < 600 else text[:600] + "..."


class _WithoutKernel:
    """``with _WithoutKernel():`` the public functions take the Python reference."""

    def __enter__(self):
        from kafkafs.format import kernel

        self.saved = kernel.KERNEL
        kernel.KERNEL = None

    def __exit__(self, *exc):
        from kafkafs.format import kernel

        kernel.KERNEL = self.saved


def reseal(buf: bytes) -> bytes:
    """Every batch's CRC-32C recomputed, walking the length fields (a cut-off tail left as it is)."""
    import crc32c

    out = bytearray(buf)
    pos = 0
    while len(out) - pos >= 61:
        length = struct.unpack_from(">i", out, pos + 8)[0]
        end = pos + 12 + length
        if length < 49 or end > len(out):
            break
        struct.pack_into(">I", out, pos + 17, crc32c.crc32c(bytes(out[pos + 21 : end])))
        pos = end
    return bytes(out)


def _filter(p: Params):
    from kafkafs.format.recordfilter import RecordFilter

    kind = p.small(6)
    if kind == 0:
        return RecordFilter(key=p.pick([b"a", b"", b"k", b"key-1", b"\xff"]))
    if kind == 1:
        names = [p.pick(["h", "", "trace", "\u00e9", "\ufffd", "k"]) for _ in range(1 + p.small(2))]
        return RecordFilter(headers=tuple((n, p.pick([None, b"1", b"", b"x"])) for n in names))
    if kind == 2:
        return RecordFilter(bits=bytes(p.byte() for _ in range(1 + p.small(8))), bits_base=p.int64() % 2**40)
    return None


def _header(p: Params, count: int):
    from kafkafs.format.batchheader import BatchHeader

    attrs = p.pick([0, 0x08, 0x10, 0x20, 0x30, 0x18, 0x38])
    return BatchHeader(0, p.int64(), 0, 0, 2, 0, attrs, max(count - 1, 0), p.int64(), p.int64(), p.int64(), 0, 0,
                       count)


# ------------------------------------------------------------------------------------------ targets


def check_section(p: Params, data: bytes) -> None:
    from kafkafs.format import kernel
    from kafkafs.format.jsonrender import line_prefix, render_lines, select_indexes
    from kafkafs.format.records import decode_records

    count = p.pick([p.small(8), p.small(40), p.int64() & 0x7FFFFFFF, -1])
    header = _header(p, count)
    mode = p.pick(MODES)
    bounds = (p.bound(), p.bound(), p.bound(), p.bound())
    record_filter = _filter(p)
    batch = _reference_outcome(decode_records, data, header)
    got = _outcome(kernel.decode_records, data, header)

    def columns(b):
        return b if isinstance(b, str) else (b.offsets, b.timestamps, b.keys, b.values,
                                             [[tuple(h) for h in hs] for hs in b.headers])

    _same("decode", columns(got), columns(batch))
    prefix = line_prefix("topic.x", 7)
    arg = None if record_filter is None else record_filter.kernel_arg()
    for what in range(4):
        got = _outcome(kernel.render_raw, prefix, data, header, mode, *bounds, what, arg)
        if batch == "refused":
            _same(f"render what={what}", got, "refused")
            continue
        indexes = select_indexes(batch, *bounds)
        if record_filter is not None:
            indexes = [i for i in indexes if record_filter.accepts(batch.offsets[i], batch.keys[i], batch.headers[i])]
        lines = render_lines("topic.x", 7, batch, mode, indexes)
        joined = b"".join(lines)
        ends, end = [], 0
        for line in lines:
            end += len(line)
            ends.append(end)
        want = [joined, [len(x) for x in lines], (joined, [batch.offsets[i] for i in indexes], ends),
                (joined, len(lines))][what]
        _same(f"render what={what} mode={mode} bounds={bounds} filter={record_filter}", got, want)
    if batch != "refused":
        n = len(batch)
        start, stop = p.small(n + 2), p.small(n + 2)
        want = b"".join(render_lines("topic.x", 7, batch, mode, range(start, min(stop, n))))
        _same("render_columns", kernel.render_columns(prefix, batch, mode, start, stop) if start < stop else b"",
              want if start < stop else b"")
    _section_entries(p, data, header, record_filter)
    _arrow(p, data, header)


def _section_entries(p: Params, data: bytes, header, record_filter) -> None:
    from kafkafs.format import keyindex

    if header.last_offset > 2**63 - 1:
        return  # read_batch_header refuses such a header: no caller hands it to keys_section
    seg_base = p.pick([0, header.base_offset, header.base_offset - 1, header.base_offset - 2**32])
    if seg_base < 0:
        seg_base = 0
    got = _outcome(keyindex.section_entries, data, header, seg_base, record_filter)
    want = _reference_outcome(keyindex.section_entries_reference, data, header, seg_base, record_filter)
    _same("keys_section", got, want)


def _arrow(p: Params, data: bytes, header) -> None:
    """The Spark reader's columns: the kernel's ArrowBuilder against scan.py's Python columns."""
    import bisect

    from kafkafs.format.records import decode_records
    from kafkafs.spark import scan
    from kafkafs.spark.arrowcols import KernelColumns
    from kafkafs.spark.plan import ScanSpec

    if header.base_offset < 0:
        return  # the scan only takes batches whose header reads (a base offset is never negative there)
    include_headers = p.flag()
    top = 2**63 - 1  # offsets and bounds are Kafka longs
    first = min(max(header.base_offset + p.small(6) - 2, 0), top)
    end = p.pick([None, min(header.base_offset + p.small(8), top), top])
    built, reference = KernelColumns(include_headers), scan._Columns(include_headers)
    got = _outcome(built.add_section, "t", 3, data, header, first, end)
    batch = _reference_outcome(decode_records, data, header)
    if batch == "refused":
        _same("arrow add_section", got, "refused")
        return
    _same("arrow add_section", got, None)
    offsets = batch.offsets
    lo = 0 if offsets[:1] and offsets[0] >= first else bisect.bisect_left(offsets, first)
    hi = len(offsets)
    if end is not None and offsets and offsets[-1] >= end:
        hi = bisect.bisect_left(offsets, end)
    reference.add("t", 3, batch, lo, hi)
    _same("arrow rows", built.rows, reference.rows)
    spec = ScanSpec(include_headers=include_headers)
    a, b = built.build(spec), reference.build(spec)
    if (a is None) != (b is None):
        raise Difference(f"arrow build: kernel {a} != reference {b}")
    if a is not None:
        import pyarrow as pa

        for name in a.schema.names:
            ka, rb = a.column(name), b.column(name)
            if name == "timestamp":
                ka, rb = ka.cast(pa.int64()), rb.cast(pa.int64())
            _same(f"arrow column {name}", ka.to_pylist(), rb.to_pylist())
        a.validate(full=True)


def check_span(p: Params, buf: bytes) -> None:
    from kafkafs.format import kernel, keyindex
    from kafkafs.format.jsonspan import reference_span, render_span_jsonl

    mode = p.pick(MODES)
    min_offset = p.pick([None, None, p.int64(), 0, 5])
    final = p.flag()
    upper = p.pick([None, None, p.int64() & (2**63 - 1), 10])
    record_filter = _filter(p)
    lengths = p.flag()
    kw = {"min_offset": min_offset, "final": final, "upper": upper, "record_filter": record_filter,
          "lengths": lengths}
    got = render_span_jsonl("topic.x", 7, buf, mode, **kw)
    want = reference_span("topic.x", 7, buf, mode, **kw)
    _same(f"render_span mode={mode} {kw}", (got.data, got.consumed, got.lines, got.batch_ends.tolist(),
                                            got.last_offsets.tolist(), got.line_ends.tolist()),
          (want.data, want.consumed, want.lines, want.batch_ends.tolist(), want.last_offsets.tolist(),
           want.line_ends.tolist()))
    _span_into(p, buf, mode, {k: v for k, v in kw.items() if k != "lengths"})
    step = 1 + p.small(255) * p.small(16)
    cut_min = -1 if min_offset is None else min_offset
    raw, expect = kernel.KERNEL.span_cuts(buf, step, cut_min, final, -1 if upper is None else upper)
    cuts = array("q")
    cuts.frombytes(raw)
    _same("span_cuts", (cuts.tolist(), expect), _cuts_reference(buf, step, cut_min, final, -1 if upper is None else upper))
    seg_base = max(p.int64() % 2**62, 0) if p.flag() else 0
    _same("keys_span", keyindex.span_entries(buf, seg_base, record_filter),
          keyindex.span_entries_reference(buf, seg_base, record_filter))


def _span_into(p: Params, buf: bytes, mode: str, kw: dict) -> None:
    """render_span_into in a slice of a bigger buffer, with room for every line, for up to a batch's lines
    and a few bytes either way, or none: the lines render_span_jsonl gives of the batches that fit, at
    ``at``, and not one byte changed before ``at`` or outside the slice."""
    from kafkafs.format.jsonspan import reference_span_into, render_span_into, render_span_jsonl

    whole = render_span_jsonl("topic.x", 7, buf, mode, **kw)
    ends = [0, *whole.line_ends.tolist()]
    room = max(0, ends[p.small(len(ends))] + p.pick([0, 0, -1, 1, -7, 40, -200]))
    at, before, after = p.pick([0, 0, 3, 64]), p.small(5), p.small(5)
    big = bytearray(b"\xa5") * (before + at + room + after)
    got = render_span_into("topic.x", 7, buf, memoryview(big)[before : before + at + room], at, mode, **kw)
    ref = bytearray(b"\xa5") * (at + room)
    want = reference_span_into("topic.x", 7, buf, ref, at, mode, **kw)
    _same(f"render_span_into room={room} at={at} mode={mode} {kw}",
          (bytes(big[before + at : before + at + got.written]), got.written, got.consumed, got.lines,
           got.batch_ends.tolist(), got.last_offsets.tolist(), got.line_ends.tolist(), got.full),
          (bytes(ref[at : at + want.written]), want.written, want.consumed, want.lines, want.batch_ends.tolist(),
           want.last_offsets.tolist(), want.line_ends.tolist(), want.full))
    _same("render_span_into outside its slice", (bytes(big[: before + at]), bytes(big[before + at + room :])),
          (b"\xa5" * (before + at), b"\xa5" * after))


def _cuts_reference(buf: bytes, step: int, min_offset: int, final: bool, upper: int) -> tuple[list[int], int]:
    """span_cuts' definition (tests/format/test_kernel_differential.py holds the same one)."""
    from tests.format.test_kernel_differential import _cuts_reference as reference

    return reference(buf, step, min_offset, final, upper)


def check_batch(p: Params, buf: bytes) -> None:
    from kafkafs.format.batch import read_batch_header
    from kafkafs.format.jsonview import render_raw_jsonl, render_raw_record_pretty

    mode = p.pick(MODES)
    record_filter = _filter(p)
    bounds = (p.bound(), p.bound(), p.bound(), p.bound())
    header = _reference_outcome(read_batch_header, buf, 0)
    if header in ("refused", None):
        return  # the raw paths take what Log.locate gives: a batch whose header reads
    one = buf[: header.end]
    got = _outcome(render_raw_jsonl, "t", 0, one, mode, record_filter=record_filter)
    with _WithoutKernel():
        want = _reference_outcome(render_raw_jsonl, "t", 0, one, mode, record_filter=record_filter)
    _same("render_raw_jsonl", got, want)
    from kafkafs.format.jsonview import _raw

    for what in range(4):
        got = _outcome(_raw, "t", 0, one, mode, None, *bounds, what, 2**26, record_filter)
        with _WithoutKernel():
            want = _reference_outcome(_raw, "t", 0, one, mode, None, *bounds, what, 2**26, record_filter)
        _same(f"raw what={what} bounds={bounds}", got, want)
    base = header.base_offset
    for offset in (base - 1, base, base + 1, base + p.small(10), header.last_offset, header.last_offset + 1):
        got = _outcome(render_raw_record_pretty, "t", 0, one, offset, mode, record_filter=record_filter)
        with _WithoutKernel():
            want = _reference_outcome(render_raw_record_pretty, "t", 0, one, offset, mode,
                                      record_filter=record_filter)
        _same(f"pretty offset={offset}", got, want)


def check_value(p: Params, data: bytes) -> None:
    from kafkafs.format import jsonembed, kernel

    mode = p.pick(MODES)
    _same(f"render_value {mode}", kernel.render_value(data, mode), jsonembed.render_value(data, mode))
    step = p.pick([b"  ", b"", b"\t", b"    ", b"\xff"])
    _same("indent_json", kernel.KERNEL.indent_json(data, step), jsonembed.indent_json(data, step))
    rendered = jsonembed.render_value(data, "auto")  # what the kernel indents in by-offset/ files
    _same("indent_json rendered", kernel.KERNEL.indent_json(rendered, b"  "), jsonembed.indent_json(rendered, b"  "))


def check_hash(p: Params, data: bytes) -> None:
    import crc32c

    from kafkafs.format import kernel

    skip = p.small(17)
    want = crc32c.crc32c(data[skip:])
    _same("crc32c", kernel.KERNEL.crc32c(data[skip:]), want)
    _same("crc32c table", kernel.KERNEL.crc32c(memoryview(data)[skip:], 0), want)
    hw = kernel.KERNEL.crc32c(data[skip:], 1)
    if hw not in (want, None):
        raise Difference(f"crc32c instruction {hw} != {want}")
    _same("md5_halves", kernel.KERNEL.md5_halves(data), struct.unpack("<qq", hashlib.md5(data).digest()))


def _keys_from(data: bytes, p: Params) -> list[bytes | None]:
    keys, pos = [], 0
    while pos < len(data) and len(keys) < 64:
        n = data[pos]
        pos += 1
        if n == 0xFF:
            keys.append(None)
            continue
        n %= 70
        keys.append(data[pos : pos + n])
        pos += n
    return keys


def check_omap(p: Params, data: bytes) -> None:
    from kafkafs.storage.offset_map import BYTES_PER_ENTRY, OffsetMap

    slots = 3 + p.small(60)
    load = p.pick([0.3, 0.9, 0.99, 1.0])
    try:
        kmap, rmap = OffsetMap(slots * BYTES_PER_ENTRY, load), OffsetMap(slots * BYTES_PER_ENTRY, load)
    except ValueError:
        return
    keys = _keys_from(data, p)
    offset = p.small(5)
    rounds = 1 + p.small(4)
    for r in range(rounds):
        part = keys[r::rounds]
        offsets = list(range(offset, offset + len(part)))
        offset += len(part) + p.small(4)
        limit = p.pick([None, p.small(12), kmap.max_entries])
        limit = None if limit is None else min(limit, kmap.max_entries)
        _same("omap_put", kmap.put_many(part, offsets, limit), rmap.put_many_py(part, offsets, limit))
        _same("omap columns", (kmap._lo.tobytes(), kmap._hi.tobytes(), kmap._offsets.tobytes(), kmap.size,
                               kmap.latest_offset),
              (rmap._lo.tobytes(), rmap._hi.tobytes(), rmap._offsets.tobytes(), rmap.size, rmap.latest_offset))
        probe = [p.int64() % 400 - 1 for _ in part]
        _same("omap_retain", list(kmap.retain_flags(part, probe)), [int(f) for f in rmap.retain_flags_py(part, probe)])


def check_entries(p: Params, data: bytes) -> None:
    from kafkafs.format import keyindex as ki

    size = ki.ENTRY_SIZE
    raw = data[: len(data) - len(data) % size]
    if p.flag():  # few distinct hashes, so that finds and tables meet the same hash again
        rows = [ki.ENTRY.unpack_from(raw, i) for i in range(0, len(raw), size)]
        raw = b"".join(ki.ENTRY.pack((a % 5) << 61 | a % 5, b % 3, rel % 300, flags % 4) for a, b, rel, flags in rows)
    got = bytearray(raw)
    ki.sort_entries(got)
    ordered = ki.sort_entries_reference(raw)
    _same("keys_sort", bytes(got), ordered)
    if raw:
        a, b, _rel, _f = ki.ENTRY.unpack_from(raw, (p.byte() % (len(raw) // size)) * size)
    else:
        a, b = 0, 0
    _same("keys_find", ki.find_entries(ordered, a, b), ki.find_entries_reference(ordered, a, b))
    bits = p.small(7)
    counts = array("Q", bytes(8 << bits))
    ki.prefix_counts(ordered, bits, counts)
    want = [0] * (1 << bits)
    for i in range(0, len(ordered), size):
        want[(ki.ENTRY.unpack_from(ordered, i)[0] >> (64 - bits)) if bits else 0] += 1
    _same("keys_counts", list(counts), want)
    n = 1 + p.small(3)
    slices = [ki.sort_entries_reference(raw[i * size :: 1][: size * (len(raw) // size // n)]) for i in range(n)]
    aborted, bitmaps = [], []
    for _ in slices:
        pairs = sorted(p.byte() + p.byte() for _ in range(p.small(3) * 2))
        aborted.append(array("I", pairs).tobytes() if pairs else None)
        bitmaps.append(bytearray(40) if p.flag() else None)
    tombstones = p.flag()
    mine = [None if b is None else bytearray(b) for b in bitmaps]
    _same("keys_table", ki.table_latest(slices, aborted, mine, tombstones),
          ki.table_latest_reference(slices, aborted, bitmaps, tombstones))
    _same("keys_table bitmaps", mine, bitmaps)


def check_lines(p: Params, data: bytes) -> None:
    from kafkafs.errors import InvalidInput
    from kafkafs.format.compression import Codec
    from kafkafs.format.lineencode import encode_lines

    # at most 16 lines: each group is a call of both sides, and the reference's Python is instrumented (slow
    # under the fuzzer: a 111-line input in groups of one line ran past a 5 s -timeout at nice 19)
    data = b"\n".join(data.split(b"\n")[:16])
    args = {"now": p.int64(), "codec": Codec.GZIP if p.small(8) == 0 else Codec.NONE,
            "max_message_bytes": p.pick([1 << 20, 200, 1000, 61]), "leader_epoch": p.pick([-1, 0, 3, 2**31 - 1]),
            "first_number": 1 + p.small(5), "max_lines": p.pick([None, 1, 2, 3, 1000]),
            "max_bytes": p.pick([None, None, 1, 10, 100])}

    def groups(reference: bool) -> list:
        out: list = []
        start, first = 0, args["first_number"]
        try:
            while start <= len(data):
                group = encode_lines(data, start, **{**args, "first_number": first}, reference=reference)
                out.append(group)
                first += group.taken
                start = group.end
        except InvalidInput as exc:
            out.append(("error", str(exc)))
        except (OverflowError, ValueError) as exc:  # a timestamp or epoch out of a field's range: both refuse
            out.append(("refused", type(exc).__name__))
        return out

    _same(f"encode_lines {args}", groups(False), groups(True))


CHECKS = {"section": check_section, "span": check_span, "batch": check_batch, "value": check_value,
          "hash": check_hash, "omap": check_omap, "entries": check_entries, "lines": check_lines}


#: An input that takes more CPU than this is a hang. CPU time, not wall time: the long run shares a
#: loaded machine at nice 19, where a process may wait seconds for a core (libFuzzer's own -timeout,
#: wall time, is the backstop for a true endless loop).
HANG_CPU_SECONDS = float(os.environ.get("KERNEL_FUZZ_HANG_SECONDS", "1.0"))
SLOWEST = [0.0]
COUNT = [0]


class Hang(Difference):
    """An input took more than :data:`HANG_CPU_SECONDS` of CPU."""


def one_input(data: bytes) -> None:
    """The fuzz target: one input through one entry point and its reference."""
    if not data:
        return
    target = TARGETS[data[0] % len(TARGETS)]
    p = Params(data[1 : 1 + PARAMS])
    payload = data[1 + PARAMS :]
    if target in ("span", "batch") and not p.byte() & 0x80:  # mostly: checksums made to hold
        payload = reseal(payload)
    started = time.process_time()
    CHECKS[target](p, payload)
    took = time.process_time() - started
    if took > SLOWEST[0]:
        SLOWEST[0] = took
    COUNT[0] += 1
    if COUNT[0] % 100_000 == 0:
        print(f"kernel_fuzz: {COUNT[0]} inputs checked, the slowest took {SLOWEST[0]:.3f} s of CPU", file=sys.stderr,
              flush=True)
    if took > HANG_CPU_SECONDS:
        raise Hang(f"{target}: {took:.2f} s of CPU for one input")


# ------------------------------------------------------------------------------------------ seeds


def seeds() -> list[bytes]:
    """A starting corpus: valid batches of every kind (kafka_layout.py's encoder, written from Kafka's
    documentation) and the GIL campaign's hostile batch, behind each target."""
    from tests import kafka_layout as kl
    from tests.format.gil_worker import hostile_batch

    recs = [(b"key-1", b'{"n":1,"s":"x"}', (("h", b"1"),)), (None, b"plain", ()), (b"k", None, (("trace", None),)),
            (b"\xff\xfe", b"\xc3\x28", ()), (b"a", b'[1,2,{"b":"\\u00e9"}]', ())]
    batches = [kl.batch(0, recs), kl.batch(5, recs[:2], producer_id=9, producer_epoch=0, attributes=0x10),
               kl.control_batch(7, 1, 0, 9, 0, 1_700_000_000_000), kl.batch(8, recs[2:], attributes=0x08),
               hostile_batch(11, 3)]
    span = b"".join(batches)
    out = []
    zero = bytes(PARAMS)
    for i, target in enumerate(TARGETS):
        t = bytes([i])
        if target == "section":
            for b in batches:
                params = bytearray(zero)
                params[0] = 0  # count: small
                out.append(t + bytes(params) + b[61:])
        elif target in ("span", "batch"):
            out.append(t + zero + span)
            out.append(t + zero + batches[0])
        elif target == "value":
            for v in [b'{"a":[1,{"b":null}],"c":"\\ud83d\\ude00"}', b"[]", b"\xff", b'"x"', b"  {} "]:
                out.append(t + zero + v)
        elif target in ("hash", "omap"):
            out.append(t + zero + bytes(range(256)))
        elif target == "lines":
            for lines in _LINE_SEEDS:
                out.append(t + zero + lines)
        else:
            out.append(t + zero + bytes(range(240)))
    # Inputs the long runs found, kept so that every short run starts from them:
    # a control batch whose key is null (put_value applied an offset to a null pointer; UBSan, 2026-11-26).
    out.append(base64.b64decode("AAIAAAAAEhoAMQAAAAACUrwAAAAAAAAAGhoaGhoaGhps5eXlGhoaGgAaGhplYWNlARQAhgYE//4EwygANAAICAJh2P///wA="))
    return out


_LINE_SEEDS = [
    b'{"topic":"t","partition":0,"offset":12,"timestamp":1763700000012,"timestampType":"CreateTime","key":"c-9",'
    b'"value":{"order":12,"amount":765.90,"e":-1.5E+07,"z":-0,"big":12345678901234567890,"items":[46,21],'
    b'"ok":true,"n":null},"headers":[{"key":"h","value":{"$base64":"AAE="}},{"key":"e","value":null}]}\nplain text',
    b'{"key":{"a":[1,{"b":"\\u00e9\\n"}]},"value":"tab\\there","headers":{"a":"b","c":[0.0]},"timestamp":-1}\n'
    b'{"value": [1, 2.50], "timestamp": "2026-11-21T10:00:00Z"}',
    b'{"value":1e309}\n{"value":01}\n{"value":"\\ud800"}\n{"key":"1234567890123456","value":1e400}',
]


def write_seeds(folder: str) -> None:
    os.makedirs(folder, exist_ok=True)
    for i, seed in enumerate(seeds()):
        with open(os.path.join(folder, f"seed-{i:03d}"), "wb") as f:
            f.write(seed)


def main(argv: list[str]) -> None:
    """``python -m tests.faults.kernel_fuzz KERNEL.so [libFuzzer flags and corpus folders]``."""
    import atheris

    load_kernel(argv[1])
    with atheris.instrument_imports(include=["kafkafs.format", "kafkafs.storage.offset_map", "kafkafs.spark"]):
        import kafkafs.format.batch
        import kafkafs.format.jsonembed
        import kafkafs.format.jsonrender
        import kafkafs.format.jsonspan
        import kafkafs.format.jsonview
        import kafkafs.format.keyindex
        import kafkafs.format.recordfilter
        import kafkafs.format.records
        import kafkafs.spark.arrowcols
        import kafkafs.spark.scan
        import kafkafs.storage.offset_map  # noqa: F401
    from kafkafs.format import kernel

    if kernel.KERNEL is not sys.modules["kafkafs.format._kernel"]:
        raise SystemExit("kernel_fuzz: the instrumented kernel did not stand in for kafkafs.format._kernel")
    import tests.format.test_kernel_differential  # noqa: F401 - span_cuts' definition, imported before the clock runs

    atexit.register(lambda: print(f"kernel_fuzz: {COUNT[0]} inputs checked, the slowest took {SLOWEST[0]:.3f} s of "
                                  "CPU", file=sys.stderr))
    corpora = [a for a in argv[2:] if not a.startswith("-")]
    if corpora and not os.listdir(corpora[0]):
        write_seeds(corpora[0])
    atheris.Setup([argv[0], *argv[2:]], one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main(sys.argv)
