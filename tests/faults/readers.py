"""Whole-file readers of a partition's ``records.jsonl``, ``by-offset/`` and ``by-time/`` beside appends,
and the check of what they read against ``kafkafs consume`` (issue 20; SPEC §3 "Live": a read that races
an append returns whole lines of records that exist, never bytes that were not written). Used by
test_readers_during_appends.py (appends through a ``--rw`` mount) and tests/broker/
test_readers_beside_broker.py (a broker appends beside a read-only mount)."""

from __future__ import annotations

import bisect
import hashlib
import itertools
import json
import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

ROOT = Path(__file__).resolve().parents[2]


def consume_lines(logdir: Path, partition: str = "live-0") -> dict[int, bytes]:
    """What ``kafkafs consume`` prints for ``partition``, line by line, by offset."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    out = subprocess.run([sys.executable, "-m", "kafkafs", "consume", str(logdir), partition], env=env,
                         capture_output=True, timeout=600, check=True).stdout
    return {json.loads(line)["offset"]: line for line in out.splitlines()}


#: A read of ``records.jsonl`` is kept per chunk of this many bytes (:class:`Chunk`), so a read that
#: differs says where.
CHUNK = 1 << 20
_OFFSET = re.compile(rb'"offset":(-?\d+)')


class Chunk(NamedTuple):
    """One :data:`CHUNK` of a read: a digest of its bytes, and the first line that starts in it (its
    position in the read and its record's offset; -1 when there is none)."""

    digest: bytes
    line: int
    offset: int


class WholeRead(NamedTuple):
    """A whole read of ``records.jsonl``, kept as what checks it: after ten minutes at 2,000 records/s
    the file is over 100 MB, and thousands of reads of it do not fit in memory. ``kept``: a file holding
    its bytes, for a read that disagreed with an earlier one (:func:`run_readers`' ``keep``); ``began``
    and ``took``: when (monotonic seconds) and for how long it was read."""

    size: int
    nul: bool
    chunks: tuple[Chunk, ...]
    kept: str | None = None
    began: float = 0.0
    took: float = 0.0


def _digest(data: bytes | memoryview) -> bytes:
    return hashlib.blake2b(data, digest_size=16).digest()


def _first_line(data: bytes, start: int, end: int) -> tuple[int, int]:
    """The first line that starts in ``data[start:end]`` and its offset ((-1, -1): none)."""
    at = 0
    if start:
        newline = data.find(b"\n", start - 1, end - 1)
        if newline < 0:
            return -1, -1
        at = newline + 1
    found = _OFFSET.search(data, at, min(at + 200, len(data)))
    return at, int(found.group(1)) if found else -1


def whole_read(data: bytes, began: float = 0.0, took: float = 0.0) -> WholeRead:
    view = memoryview(data)
    chunks = tuple(Chunk(_digest(view[k : k + CHUNK]), *_first_line(data, k, min(k + CHUNK, len(data))))
                   for k in range(0, len(data), CHUNK))
    return WholeRead(len(data), b"\x00" in data, chunks, None, began, took)


def offset_breaks(data: bytes) -> tuple[list[tuple[int, int, int]], int | None]:
    """Where the offsets of ``data``'s lines do not follow on (byte, offset before, offset there), and
    the last offset: the records these tests write have no gaps, so a break is records missing or
    repeated."""
    breaks, prev = [], None
    for m in re.finditer(rb'(?:^|\n)\{[^\n]{0,80}?"offset":(-?\d+)', data):
        o = int(m.group(1))
        if prev is not None and o != prev + 1:
            breaks.append((m.start(), prev, o))
        prev = o
    return breaks, prev


class _Keeper:
    """Keeps the bytes of the first few reads of ``records.jsonl`` that are wrong, in ``folder``: a read
    whose chunks disagree with what an earlier read had at the same place (the file only grows: a whole
    chunk never changes) is scanned (:func:`offset_breaks`); kept when its offsets break, else it is
    taken as the right one for the places it disagreed on (the earlier read was the wrong one)."""

    def __init__(self, folder: Path | None, most: int = 4) -> None:
        self.folder = folder
        self.most = most
        self.seen: dict[int, bytes] = {}
        self.kept = 0
        self.lock = threading.Lock()

    def check(self, read: WholeRead, data: bytes) -> WholeRead:
        whole = read.size // CHUNK  # the last chunk of a read may be cut: not compared
        with self.lock:
            if all(self.seen.setdefault(k, chunk.digest) == chunk.digest for k, chunk in enumerate(read.chunks[:whole])):
                return read
        breaks, _last = offset_breaks(data)
        with self.lock:
            if not breaks:
                self.seen.update((k, chunk.digest) for k, chunk in enumerate(read.chunks[:whole]))
                return read
            if self.folder is None or self.kept >= self.most:
                return read
            self.kept += 1
            path = self.folder / f"read-{self.kept}-{read.size}.jsonl"
        self.folder.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        return read._replace(kept=str(path))


#: The appender of :func:`run_readers`, run as ``python -c _WRITER APPEND RATE BATCH SECONDS``: it
#: writes ``RATE`` records a second to ``APPEND`` for ``SECONDS``, as a producer does: a write() every
#: ``BATCH / RATE`` s carrying ``BATCH`` records while it keeps pace, and, when a write took longer
#: (waiting behind readers' requests), the records that fell due meanwhile (at most 10 x ``BATCH``), as
#: a producer's next batch holds what arrived while the last one was in flight. After each write it
#: prints the records written, the seconds since it began and the records that write carried.
_WRITER = """
import os, sys, time
path, rate, batch, seconds = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
fd = os.open(path, os.O_WRONLY)
n, start = 0, time.monotonic()
while time.monotonic() - start < seconds:
    due = int((time.monotonic() - start) * rate) - n
    k = min(max(batch, due), 10 * batch)
    os.write(fd, b"".join(b'{"key": "k%d", "value": {"n": %d, "pad": "%s"}}\\n' % (n % 97, n + i, b"x" * (n % 50))
                          for i in range(k)))
    n += k
    print(n, time.monotonic() - start, k, flush=True)
    time.sleep(max(0.0, start + n / rate - time.monotonic()))
os.close(fd)
"""


def run_readers(mount: Path, seconds: float, *, readers: int = 8, rate: int = 2000, partition: str = "live-0",
                progress: Callable[[], tuple[int, int]] | None = None, batch: int | None = None,
                keep: Path | None = None) -> dict:
    """Append ``rate`` records a second through ``mount``'s ``append`` for ``seconds`` while ``readers``
    threads read ``records.jsonl``, ``by-offset/<first>-<last>.jsonl``, ``by-offset/<n>.json``,
    ``by-time/<ts>.json`` and ``by-time/<ts1>..<ts2>.jsonl`` (a window a second in the past), and when this
    appends, ``table.jsonl``, ``by-key/k0.jsonl`` and ``by-key/k0.json`` whole (each
    read in a thread of its own, so a hang is seen: a read not done in 300 s; one over 30 s is slow); returns what they read, for checking (a read of
    ``records.jsonl`` as a :class:`WholeRead`). Each write() carries ``batch`` records (``rate / 100``
    unless said). With ``progress``, someone else appends (a broker) and
    ``progress()`` says ``(n, now_ms)``: the first ``n`` records are written, and so is every record
    with a timestamp below ``now_ms - 1000``; without it, this appends and ``now_ms`` is the clock.
    ``keep``: a folder for the bytes of the first reads of ``records.jsonl`` that disagree with an
    earlier read (see :class:`_Keeper`), for the check to say what differs."""
    stop = threading.Event()
    keeper = _Keeper(keep)
    reads: list[tuple[str, bytes | WholeRead]] = []
    slowest = [0.0, ""]
    hangs: list[str] = []  # reads still not done after 300 s: a frozen mount
    slow: list[tuple[str, float]] = []  # reads that took over 30 s, and how long
    errors: list[str] = []
    appended = [0]
    wrote_for = [0.0]  # seconds the writer ran
    writes: list[int] = []  # the records each write() carried
    started_ms = int(time.time() * 1000)

    def writer() -> None:  # a producer of its own: another process, so these threads' checks never slow it
        per_write = batch or max(rate // 100, 1)
        proc = subprocess.Popen([sys.executable, "-c", _WRITER, str(mount / partition / "append"), str(rate),
                                 str(per_write), str(seconds)], stdout=subprocess.PIPE, text=True)
        assert proc.stdout is not None
        for line in proc.stdout:  # "<records written> <seconds since the first write> <records in it>"
            n, took, k = line.split()
            appended[0], wrote_for[0] = int(n), float(took)
            writes.append(int(k))
        if proc.wait() != 0:
            errors.append(f"the writer exited {proc.returncode}")

    def reader(i: int) -> None:
        k = 0
        while not stop.is_set():
            k += 1
            n, now = (appended[0], int(time.time() * 1000)) if progress is None else progress()
            kind = (i + k) % 9
            if kind < 2 or n < 10:
                name = "records.jsonl"
            elif kind == 2:
                name = f"by-offset/{max(n - 300, 0)}-{n + 500}.jsonl"
            elif kind == 3:
                name = f"by-offset/{max(n - 5, 0)}.json"
            elif kind == 4 and now - started_ms > 3000:  # a second in the past: its records are all written
                name = f"by-time/{now - 3000}..{now - 1000}.jsonl"
            elif kind >= 6 and progress is None:  # the key views (review8 R8-1): the writer's first key is k0
                name = ("table.jsonl", "by-key/k0.jsonl", "by-key/k0.json")[kind - 6]
            else:
                name = f"by-time/{max(now - 2000, started_ms)}.json"
            path = mount / partition / name
            got: list = []
            t = threading.Thread(target=lambda p=path, out=got: out.append(read_or_error(p)), daemon=True)
            began = time.monotonic()
            t.start()
            t.join(30)
            if t.is_alive():  # slow (a whole file of 100+ MB on a loaded machine) or frozen
                t.join(270)
                if t.is_alive():
                    hangs.append(name)
                    return
            took = time.monotonic() - began
            if took > 30:
                slow.append((name, round(took, 1)))
            if took > slowest[0]:
                slowest[:] = [took, name]
            if isinstance(got[0], Exception):
                errors.append(f"{name}: {got[0]!r}")
            else:
                reads.append((name, keeper.check(whole_read(got[0], began, took), got[0]) if name == "records.jsonl"
                              else got[0]))

    threads = [threading.Thread(target=reader, args=(i,)) for i in range(readers)]
    if progress is None:
        threads.append(threading.Thread(target=writer))
    for t in threads:
        t.start()
    time.sleep(seconds)
    stop.set()
    for t in threads:
        t.join(60)
    return {"reads": reads, "hangs": hangs, "slow": slow, "errors": errors, "appended": appended[0], "slowest": tuple(slowest),
            "rate": appended[0] / max(wrote_for[0], 1e-9), "writes": writes}


def read_or_error(path: Path) -> bytes | Exception:
    """The whole of ``path``, or the OSError that reading it raised."""
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as exc:
        return exc


def kinds(result: dict) -> dict[str, int]:
    kinds: dict[str, int] = {}
    for name, _data in result["reads"]:
        kind = name.split("/")[0] + ("/range" if name.endswith(".jsonl") and "/" in name else "")
        kinds[kind] = kinds.get(kind, 0) + 1
    return kinds


def check_whole_reads(reads: list[WholeRead], expected: dict[int, bytes]) -> tuple[list[str], int]:
    """Each read of ``records.jsonl`` must be the start of what ``consume`` prints, ending at the end of a
    line (nothing deletes or compacts: the file only grows); returns the differing reads and the lines
    they held. A read that differs is told by where (:func:`explain_read`)."""
    stream = b"".join(expected[o] + b"\n" for o in sorted(expected))
    line_ends = list(itertools.accumulate(len(expected[o]) + 1 for o in sorted(expected)))
    digests: dict[int, bytes] = {}  # consume's whole chunks

    def digest_at(k: int, size: int) -> bytes:
        start = k * CHUNK
        if start + CHUNK > size:  # a read's last, cut chunk
            return _digest(memoryview(stream)[start:size])
        if k not in digests:
            digests[k] = _digest(memoryview(stream)[start : start + CHUNK])
        return digests[k]

    bad, lines = [], 0
    for read in sorted(reads, key=lambda r: r.size):
        held = bisect.bisect_right(line_ends, read.size)
        if read.size > len(stream):
            bad.append(f"records.jsonl: {read.size} bytes, consume printed only {len(stream)}")
            continue
        differ = next((k for k, chunk in enumerate(read.chunks) if chunk.digest != digest_at(k, read.size)), None)
        if differ is not None:
            bad.append(f"records.jsonl: {read.size} bytes differ from consume's first {read.size} bytes: "
                       + explain_read(read, differ, stream, line_ends, sorted(expected)))
        elif read.size and (held == 0 or line_ends[held - 1] != read.size):
            bad.append(f"records.jsonl: {read.size} bytes end mid-line")
        lines += held
    return bad, lines


def explain_read(read: WholeRead, k: int, stream: bytes, line_ends: list[int], offsets: list[int]) -> str:
    """Where ``read`` (chunk ``k`` the first that differs) parts from consume's ``stream``: the offsets at
    the chunks' first lines, and, when its bytes were kept, the first differing line and every place
    its offsets do not follow on (records missing, repeated or out of place)."""

    def offset_at(pos: int) -> str:
        i = bisect.bisect_right(line_ends, pos)
        start = line_ends[i - 1] if i else 0
        return f"{offsets[i]}" + ("" if start == pos else f" (+{pos - start} bytes into its line)") if i < len(offsets) else "past the end"

    said = [f"chunk {k} (bytes {k * CHUNK}..) differs first"]
    for j in range(k, min(k + 3, len(read.chunks))):
        chunk = read.chunks[j]
        if chunk.line >= 0:
            said.append(f"chunk {j}: read has offset {chunk.offset} at byte {chunk.line}, consume {offset_at(chunk.line)}")
    said.append(f"read began at {read.began:.1f} s (monotonic), took {read.took:.1f} s")
    if read.kept:
        data = Path(read.kept).read_bytes()
        first = next((i for i in range(k * CHUNK, len(data)) if data[i] != stream[i]), None)
        if first is not None:
            start = data.rfind(b"\n", 0, first) + 1
            got = data[start : data.find(b"\n", first)][:160]
            said.append(f"first differing byte {first}: consume's line there is offset {offset_at(start)}; "
                        f"the read's line is {got!r}")
        breaks, prev = offset_breaks(data)
        said.append(f"kept in {read.kept}; offsets break {len(breaks)} times (byte, offset before, offset there): "
                    f"{breaks[:8]}; last offset {prev}")
    return "; ".join(said)


class Times:
    """consume's records by timestamp, for the by-time checks: bisection over the running largest
    timestamp (a million records and thousands of reads make a scan per read take half an hour)."""

    def __init__(self, expected: dict[int, bytes]) -> None:
        self.offsets = sorted(expected)
        self.stamps = [json.loads(expected[o])["timestamp"] for o in self.offsets]
        self.highest = list(itertools.accumulate(self.stamps, max))
        self.in_order = self.highest == self.stamps

    def first_at_or_after(self, ts: int) -> int | None:
        """The first offset whose timestamp is >= ``ts`` (Kafka's offsetsForTimes)."""
        i = bisect.bisect_left(self.highest, ts)
        return self.offsets[i] if i < len(self.offsets) else None

    def window(self, lo: int, hi: int) -> list[int]:
        """The offsets with ``lo <= timestamp < hi``, in offset order."""
        i = bisect.bisect_left(self.highest, lo)
        if self.in_order:
            return self.offsets[i : bisect.bisect_left(self.stamps, hi, lo=i)]
        return [o for o, t in zip(self.offsets[i:], self.stamps[i:], strict=True) if lo <= t < hi]


def check_reads(result: dict, expected: dict[int, bytes]) -> dict:
    """Count the reads whose bytes are not whole lines of records that ``consume`` prints alike."""
    whole = [data for _name, data in result["reads"] if isinstance(data, WholeRead)]
    bad, lines = check_whole_reads(whole, expected)
    nul = sum(read.nul for read in whole)
    times = Times(expected)
    for name, data in result["reads"]:
        if isinstance(data, WholeRead):
            continue
        if b"\x00" in data:
            nul += 1
        if name.endswith(".json"):
            try:
                record = json.loads(data)
            except ValueError:  # cut short, or NUL filler
                bad.append(f"{name}: not one JSON record ({len(data)} bytes): {data[-80:]!r}")
                continue
            line = expected.get(record["offset"])
            if line is None or json.loads(line) != record:
                bad.append(f"{name}: {data[:80]!r}")
            elif name.startswith("by-time/"):  # the first record at or after the time asked
                ts = int(name[len("by-time/") : -len(".json")])
                first = times.first_at_or_after(ts)
                if first != record["offset"]:
                    bad.append(f"{name}: offset {record['offset']}, not the first at or after {ts} ({first})")
            continue
        if name.startswith("by-time/"):  # every record in the window, in offset order, and no other
            lo, hi = (int(t) for t in name[len("by-time/") : -len(".jsonl")].split(".."))
            want = b"".join(expected[o] + b"\n" for o in times.window(lo, hi))
            if data != want:
                bad.append(f"{name}: {len(data)} bytes, consume's records in that window are {len(want)}")
            lines += data.count(b"\n")
            continue
        if data and not data.endswith(b"\n"):
            bad.append(f"{name}: ends mid-line ({len(data)} bytes)")
            continue
        for line in data.splitlines():
            lines += 1
            try:
                offset = json.loads(line)["offset"]
            except ValueError:
                bad.append(f"{name}: not a JSON line: {line[:80]!r}")
                break
            if expected.get(offset) != line:
                bad.append(f"{name}: offset {offset} differs from consume's line")
                break
    return {"reads": len(result["reads"]), "lines": lines, "bad": bad, "nul": nul}
