"""Whole-file readers beside appends read whole lines of records that exist (issue 20, defect 2; SPEC §3
"Live"): never a NUL byte, never a byte that differs from what ``consume`` prints for the same record.

With a ``--rw`` mount appending, 2.2% of whole-file reads of ``records.jsonl`` returned runs of NUL
bytes where the file grew during the read: a read that ends at the end of the file makes the kernel
zero the rest of its last page, and when the file grows the kernel shows the new size before it drops
that page (fs/fuse: the size is set, then the pages are invalidated). Files that grow are now read with
direct I/O. :func:`run_readers` is also the long measurement (``KAFKAFS_READERS_SECONDS``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from kafkafs.storage.logdir import LogDir
from tests.fs.conftest import ROOT

SECONDS = float(os.environ.get("KAFKAFS_READERS_SECONDS", "8"))


def _consume(logdir: Path) -> dict[int, bytes]:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    out = subprocess.run([sys.executable, "-m", "kafkafs", "consume", str(logdir), "live-0"], env=env,
                         capture_output=True, timeout=600, check=True).stdout
    return {json.loads(line)["offset"]: line for line in out.splitlines()}


def run_readers(mount: Path, seconds: float, *, readers: int = 8, rate: int = 2000) -> dict:
    """Append ``rate`` records a second through ``mount``'s ``append`` for ``seconds`` while ``readers``
    threads read ``records.jsonl``, ``by-offset/<first>-<last>.jsonl``, ``by-offset/<n>.json``,
    ``by-time/<ts>.json`` and ``by-time/<ts1>..<ts2>.jsonl`` (a window a second in the past) whole (each
    read in a thread of its own, so a hang is seen); returns what they read, for checking."""
    stop = threading.Event()
    reads: list[tuple[str, bytes]] = []
    hangs: list[str] = []
    errors: list[str] = []
    appended = [0]
    started_ms = int(time.time() * 1000)

    def writer() -> None:
        fd = os.open(mount / "live-0" / "append", os.O_WRONLY)
        n, batch, start = 0, max(rate // 100, 1), time.monotonic()
        try:
            while not stop.is_set():
                os.write(fd, b"".join(b'{"key": "k%d", "value": {"n": %d, "pad": "%s"}}\n' % (n % 97, n + i, b"x" * (n % 50))
                                      for i in range(batch)))
                n += batch
                appended[0] = n
                time.sleep(max(0.0, start + n / rate - time.monotonic()))
        finally:
            os.close(fd)

    def reader(i: int) -> None:
        k = 0
        while not stop.is_set():
            k += 1
            n = appended[0]
            kind = (i + k) % 6
            now = int(time.time() * 1000)
            if kind < 2 or n < 10:
                name = "records.jsonl"
            elif kind == 2:
                name = f"by-offset/{max(n - 300, 0)}-{n + 500}.jsonl"
            elif kind == 3:
                name = f"by-offset/{max(n - 5, 0)}.json"
            elif kind == 4 and now - started_ms > 3000:  # a second in the past: its records are all written
                name = f"by-time/{now - 3000}..{now - 1000}.jsonl"
            else:
                name = f"by-time/{max(now - 2000, started_ms)}.json"
            path = mount / "live-0" / name
            got: list = []
            t = threading.Thread(target=lambda p=path, out=got: out.append(_read(p)), daemon=True)
            t.start()
            t.join(30)
            if t.is_alive():
                hangs.append(name)
                return
            if isinstance(got[0], Exception):
                errors.append(f"{name}: {got[0]!r}")
            else:
                reads.append((name, got[0]))

    threads = [threading.Thread(target=writer)] + [threading.Thread(target=reader, args=(i,)) for i in range(readers)]
    for t in threads:
        t.start()
    time.sleep(seconds)
    stop.set()
    for t in threads:
        t.join(60)
    return {"reads": reads, "hangs": hangs, "errors": errors, "appended": appended[0],
            "rate": appended[0] / max(time.time() - started_ms / 1000, 1e-9)}


def _read(path: Path) -> bytes | Exception:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as exc:
        return exc


def _kinds(result: dict) -> dict[str, int]:
    kinds: dict[str, int] = {}
    for name, _data in result["reads"]:
        kind = name.split("/")[0] + ("/range" if name.endswith(".jsonl") and "/" in name else "")
        kinds[kind] = kinds.get(kind, 0) + 1
    return kinds


def check_reads(result: dict, expected: dict[int, bytes]) -> dict:
    """Count the reads whose bytes are not whole lines of records that ``consume`` prints alike."""
    bad, nul, lines = [], 0, 0
    ordered = sorted((o, json.loads(line)) for o, line in expected.items())
    for name, data in result["reads"]:
        if b"\x00" in data:
            nul += 1
        if name.endswith(".json"):
            record = json.loads(data)
            line = expected.get(record["offset"])
            if line is None or json.loads(line) != record:
                bad.append(f"{name}: {data[:80]!r}")
            elif name.startswith("by-time/"):  # the first record at or after the time asked
                ts = int(name[len("by-time/") : -len(".json")])
                first = next((o for o, rec in ordered if rec["timestamp"] >= ts), None)
                if first != record["offset"]:
                    bad.append(f"{name}: offset {record['offset']}, not the first at or after {ts} ({first})")
            continue
        if name.startswith("by-time/"):  # every record in the window, in offset order, and no other
            lo, hi = (int(t) for t in name[len("by-time/") : -len(".jsonl")].split(".."))
            want = b"".join(expected[o] + b"\n" for o, rec in ordered if lo <= rec["timestamp"] < hi)
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


def test_whole_file_readers_beside_appends_read_only_records_that_exist(tmp_path, mounted):
    logdir = tmp_path / "logs"
    logdir.mkdir()
    with LogDir(logdir, writable=True) as d:
        d.create_partition("live", 0)
    m = mounted(logdir, "--rw")
    started = time.monotonic()
    result = run_readers(m.path, SECONDS, readers=4, rate=1000)
    m.stop()
    took = time.monotonic() - started
    checked = check_reads(result, _consume(logdir))
    assert not result["hangs"], result["hangs"]
    assert not result["errors"], result["errors"][:5]
    assert checked["nul"] == 0 and not checked["bad"], (checked["nul"], checked["bad"][:5])
    assert checked["reads"] > 20 and result["appended"] > 1000, (checked, result["appended"], took)


@pytest.mark.slow
def test_ten_minutes_of_readers_beside_appends(tmp_path, mounted):
    """Issue 20's done-when: 8 readers, 10 minutes, 2,000 records/s (set KAFKAFS_READERS_SECONDS)."""
    logdir = tmp_path / "logs"
    logdir.mkdir()
    with LogDir(logdir, writable=True) as d:
        d.create_partition("live", 0)
    m = mounted(logdir, "--rw")
    seconds = float(os.environ.get("KAFKAFS_READERS_SECONDS", "600"))
    started = time.monotonic()
    result = run_readers(m.path, seconds)
    m.stop()
    checked = check_reads(result, _consume(logdir))
    print(f"\nreaders: {seconds:.0f} s ({time.monotonic() - started:.0f} s in all), {result['appended']} records "
          f"appended, {checked['reads']} reads, {checked['lines']} lines, {checked['nul']} with NUL bytes, "
          f"{len(checked['bad'])} differing, {len(result['hangs'])} hangs, {len(result['errors'])} errors; "
          f"{result['rate']:.0f} records/s; by kind {_kinds(result)}; load {os.getloadavg()}")
    assert not result["hangs"] and not result["errors"] and checked["nul"] == 0 and not checked["bad"]
