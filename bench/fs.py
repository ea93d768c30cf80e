"""The mounted filesystem, measured on mixed and uniform records (bench/records.py), in one run.

Tables printed (each number measured in this run, on this machine, with whatever else it was doing):

1. Per kind, one partition of ``--records`` records (default 1,000,000; 100 a batch, uncompressed):
   ``cat records.jsonl`` through a fresh mount with an empty size cache (the first sizing included)
   vs ``cat segments/*.log`` through the same mount (bytes per second of each file, and the ratio),
   a second ``cat records.jsonl``; after an unmount, a remount on the same cache: the first ``stat`` of
   ``records.jsonl``; ``by-offset/N.json`` open+read from Python for random N (p50, p99); the daemon's
   peak RSS.
2. ``ls -l MOUNT/*/records.jsonl`` over ``--partitions`` partitions (default 100) of
   ``--partition-records`` mixed records each, with the cache filled by ``kafkafs index``.
3. ``by-offset/N.json`` random N on a partition of 10^4 records vs one of ``--big`` records (default
   10^8: one batch's bytes appended again and again, the engine giving each its offsets and indexing
   it; about 9 GB, deleted afterwards unless ``--work`` keeps it). ``--big 0`` skips it. Twice: with
   the big log as found (on a machine whose page cache does not hold 9 GB, a random batch is a disk
   read), and with the sampled batches read into the page cache beforehand by the engine in this
   process (the mount's own work, apart from the disk).
4. The daemon's RSS while a large view is read end to end: the big partition's ``records.jsonl``
   (sizing included), or ``by-offset/0-<M>.jsonl`` with ``--rss-records M``, for at most ``--rss-seconds``.

    python bench/fs.py [--records N] [--kinds mixed,uniform] [--big N] [--work DIR]
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.records import batches  # noqa: E402
from kafkafs.storage.config import Settings  # noqa: E402
from kafkafs.storage.log import Log  # noqa: E402
from kafkafs.storage.logdir import LogDir  # noqa: E402

SETTINGS = Settings({"segment.bytes": 64 * 1024 * 1024})
BIG_SETTINGS = Settings({"segment.bytes": 1024 * 1024 * 1024})


# ---------------------------------------------------------------------------------------------- data


def build(logdir: Path, name: str, kind: str, records: int, settings: Settings = SETTINGS) -> None:
    topic, _, partition = name.rpartition("-")
    logdir.mkdir(parents=True, exist_ok=True)
    with LogDir(logdir, settings, writable=True) as d:
        append_all(d.create_partition(topic, int(partition)), batches(kind, records))


def append_all(log: Log, raws: Iterable[bytes]) -> None:
    """Append the batches ``raws`` to ``log`` 200 at a time, without a flush."""
    chunk: list[bytes] = []
    for raw in raws:
        chunk.append(raw)
        if len(chunk) == 200:
            log.append_batches(b"".join(chunk), flush=False)
            chunk = []
    if chunk:
        log.append_batches(b"".join(chunk), flush=False)


def build_repeated(logdir: Path, name: str, records: int) -> None:
    """``records`` records as one 100-record mixed batch appended over and over: the engine gives each
    copy its base offset (outside the CRC) and indexes it as a broker would."""
    topic, _, partition = name.rpartition("-")
    one = next(batches("mixed", 100))
    per_append = 2000
    logdir.mkdir(parents=True, exist_ok=True)
    with LogDir(logdir, BIG_SETTINGS, writable=True) as d:
        log = d.create_partition(topic, int(partition))
        block = one * per_append
        written = 0
        started = time.monotonic()
        while written < records:
            n = min(per_append, (records - written) // 100)
            log.append_batches(block if n == per_append else one * n, flush=False)
            written += n * 100
            if written % (10_000_000) < per_append * 100:
                rate = written / (time.monotonic() - started)
                print(f"  big partition: {written:,}/{records:,} records ({rate:,.0f}/s)", file=sys.stderr)


def log_bytes(logdir: Path, name: str) -> int:
    return sum(p.stat().st_size for p in (logdir / name).glob("*.log"))


# ---------------------------------------------------------------------------------------------- mounts


class Mounted:
    """A mount of ``logdir`` at ``mnt`` (``kafkafs mount LOGDIR MNT -f ARGS``) by the kafkafs of checkout
    ``tree`` (``python -m`` imports it from its cwd), up once ``mnt`` is a mount point (120 s at most);
    :meth:`close`, or the end of a ``with`` block, unmounts it."""

    def __init__(self, logdir: Path, mnt: Path, *args: str, tree: Path = ROOT) -> None:
        mnt.mkdir(parents=True, exist_ok=True)
        self.mnt = mnt
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "kafkafs.cli", "mount", str(logdir), str(mnt), "-f", *args],
            cwd=tree,
            stderr=subprocess.PIPE,
        )
        deadline = time.monotonic() + 120
        while not os.path.ismount(mnt):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"mount failed: {self.proc.stderr.read().decode() if self.proc.stderr else ''}")
            time.sleep(0.01)

    def cpu_seconds(self) -> float:
        """User + system CPU the daemon has used so far (less sensitive to the machine's load than wall time)."""
        fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def loop_cpu_seconds(self) -> float:
        """User + system CPU of the daemon's main thread so far: the FUSE loop (pyfuse3 + trio), which answers
        every request in turn; the rest of :meth:`cpu_seconds` is its worker and rendering threads."""
        fields = Path(f"/proc/{self.proc.pid}/task/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def status(self, field: str) -> float:
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
        return float("nan")

    def close(self) -> None:
        subprocess.run(["fusermount3", "-u", str(self.mnt)], capture_output=True)
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            subprocess.run(["fusermount3", "-uz", str(self.mnt)], capture_output=True)
            self.proc.wait()

    def __enter__(self) -> Mounted:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def cat(path: Path) -> tuple[float, int]:
    """Read a file to the end in 128 KiB reads; (seconds, bytes), the open (and its stat) included."""
    start = time.perf_counter()
    n = 0
    with open(path, "rb", buffering=0) as f:
        os.fstat(f.fileno())
        while True:
            data = f.read(128 * 1024)
            if not data:
                break
            n += len(data)
    return time.perf_counter() - start, n


def cat_all(paths: list[Path]) -> tuple[float, int]:
    start = time.perf_counter()
    n = sum(cat(p)[1] for p in paths)
    return time.perf_counter() - start, n


def by_offset_latency(
    part: Path, n_records: int, samples: int, seed: int = 3, warm: Path | None = None
) -> tuple[float, float]:
    """p50 and p99 (ms) of open+read of ``by-offset/N.json`` for random N. No N falls in the same
    100-record batch as any of the 32 before it: every sample finds and decodes its batch (the mount
    keeps the last 16 decoded), so a small partition gets no help from caches that a large one would
    not get. ``warm``: the partition folder whose batches for those N are read beforehand, in this
    process through the engine (nothing the mount sees), so the samples find them in the page cache:
    that measures the mount's own work apart from the disk."""
    rng = random.Random(seed)
    for offset in rng.sample(range(n_records), min(50, n_records)):  # warm-up: the loop, the workers
        (part / "by-offset" / f"{offset}.json").read_bytes()
    offsets: list[int] = []
    recent: list[int] = []
    for _ in range(samples):
        offset = rng.randrange(n_records)
        while offset // 100 in recent:
            offset = rng.randrange(n_records)
        recent = [offset // 100, *recent[:31]]
        offsets.append(offset)
    if warm is not None:
        from kafkafs.storage.log import Log

        engine = Log.open(warm)
        try:
            for offset in offsets:
                engine.locate(offset)
        finally:
            engine.close()
    lat = []
    for offset in offsets:
        start = time.perf_counter()
        with open(part / "by-offset" / f"{offset}.json", "rb") as f:
            f.read()
        lat.append(time.perf_counter() - start)
    lat.sort()
    return statistics.median(lat) * 1e3, lat[int(len(lat) * 0.99) - 1] * 1e3


def mbps(nbytes: int, seconds: float) -> str:
    return f"{nbytes / seconds / 1e6:,.1f} MB/s"


# ---------------------------------------------------------------------------------------------- sections


def section(title: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {title}", file=sys.stderr, flush=True)


def per_kind(work: Path, kind: str, records: int, samples: int, rows: list) -> None:
    section(f"{kind}: {records:,} records")
    logdir = work / f"logs-{kind}"
    name = "orders-0"
    if not (logdir / name).is_dir():
        start = time.perf_counter()
        build(logdir, name, kind, records)
        print(f"built {records:,} {kind} records in {time.perf_counter() - start:.1f} s", file=sys.stderr)
    cache = work / f"cache-{kind}"
    shutil.rmtree(cache, ignore_errors=True)
    seg = log_bytes(logdir, name)
    m = Mounted(logdir, work / f"mnt-{kind}", "--cache-dir", str(cache))
    try:
        part = m.mnt / name
        cpu_before = m.cpu_seconds()
        t_first, json_bytes = cat(part / "records.jsonl")
        cpu_first = m.cpu_seconds() - cpu_before
        t_seg, seg_read = cat_all(sorted((part / "segments").glob("*.log")))
        assert seg_read == seg
        t_second, _ = cat(part / "records.jsonl")
        first_rate = json_bytes / t_first
        seg_rate = seg / t_seg
        rows.append((kind, "log / JSON size", f"{seg / 1e6:,.1f} MB / {json_bytes / 1e6:,.1f} MB"))
        rows.append((kind, "cat segments/*.log (same mount)", f"{mbps(seg, t_seg)} ({t_seg:.2f} s)"))
        rows.append((kind, "cat records.jsonl, fresh mount, empty cache",
                     f"{mbps(json_bytes, t_first)} ({t_first:.2f} s, sizing included) = "
                     f"{first_rate / seg_rate:.0%} of segments (target >= 30%)"))
        rows.append((kind, "cat records.jsonl, second read",
                     f"{mbps(json_bytes, t_second)} ({t_second:.2f} s) = {json_bytes / t_second / seg_rate:.0%} "
                     f"of segments (target >= 60%)"))
        rows.append((kind, "records/s, first read", f"{records / t_first:,.0f} rec/s; daemon CPU {cpu_first:.2f} s "
                     f"(user+sys, sizing and reads)"))
        p50, p99 = by_offset_latency(part, records, samples)
        rows.append((kind, f"by-offset/N.json open+read, random N of {records:,}",
                     f"p50 {p50:.2f} ms, p99 {p99:.2f} ms (target 0.5 / 2)"))
        start = time.perf_counter()
        listed = os.listdir(part / "by-offset")
        t_ls = time.perf_counter() - start
        rows.append((kind, "list by-offset/ (past --list-limit: one range per segment)",
                     f"{t_ls * 1e3:.1f} ms for {len(listed)} names"))
        rows.append((kind, "daemon peak RSS (VmHWM) after all of the above", f"{m.status('VmHWM'):,.0f} MiB"))
    finally:
        m.close()
    stats = []
    for _ in range(3):
        m = Mounted(logdir, work / f"mnt-{kind}", "--cache-dir", str(cache))
        try:
            start = time.perf_counter()
            size = os.stat(m.mnt / name / "records.jsonl").st_size
            stats.append(time.perf_counter() - start)
            assert size == json_bytes
        finally:
            m.close()
    rows.append((kind, "remount (cache kept): first stat of records.jsonl",
                 ", ".join(f"{s * 1e3:.0f} ms" for s in stats) + " (target <= 200 ms)"))


def many_partitions(work: Path, partitions: int, per: int, rows: list) -> None:
    section(f"{partitions} partitions")
    logdir = work / "logs-many"
    if not logdir.is_dir():
        build(logdir, "many-0", "mixed", per)
        for p in range(1, partitions):
            shutil.copytree(logdir / "many-0", logdir / f"many-{p}")
            (logdir / f"many-{p}" / "partition.metadata").unlink(missing_ok=True)
    cache = work / "cache-many"
    shutil.rmtree(cache, ignore_errors=True)
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "kafkafs.cli", "index", str(logdir), "--cache-dir", str(cache)],
                          cwd=ROOT, capture_output=True, text=True)
    t_index = time.perf_counter() - start
    if done.returncode:
        raise SystemExit(f"kafkafs index failed: {done.stderr}")
    label = f"{partitions} partitions x {per:,} mixed records"
    rows.append((label, "kafkafs index (empty cache)", f"{t_index:.1f} s: {done.stderr.strip().splitlines()[-1]}"))
    m = Mounted(logdir, work / "mnt-many", "--cache-dir", str(cache))
    try:
        start = time.perf_counter()
        out = subprocess.run(f"ls -l {m.mnt}/*/records.jsonl | wc -l", shell=True, capture_output=True, text=True)
        t_ls = time.perf_counter() - start
        rows.append((label, "ls -l MOUNT/*/records.jsonl, fresh mount, cache filled",
                     f"{t_ls * 1e3:.0f} ms for {out.stdout.strip()} files (target <= 1 s)"))
    finally:
        m.close()


def big_partition(work: Path, big: int, samples: int, rss_records: int, rss_seconds: float, rows: list) -> None:
    section(f"big partition: {big:,} records")
    small_dir = work / "logs-small"
    if not small_dir.is_dir():
        build_repeated(small_dir, "big-0", 10_000)
    big_dir = work / "logs-big"
    if not big_dir.is_dir():
        start = time.perf_counter()
        build_repeated(big_dir, "big-0", big)
        print(f"built {big:,} records ({log_bytes(big_dir, 'big-0') / 1e9:.1f} GB) in "
              f"{time.perf_counter() - start:.0f} s", file=sys.stderr)
    gb = log_bytes(big_dir, "big-0") / 1e9
    for warm in (False, True):  # as found (the big log mostly on disk), then its batches in the page cache
        results = {}
        for seed, (label, logdir, n) in enumerate(
            (("10^4", small_dir, 10_000), (f"{big:.0e}".replace("+0", "") if big else "", big_dir, big)), 3 + 10 * warm
        ):
            m = Mounted(logdir, work / "mnt-big", "--cache-dir", str(work / "cache-big"))
            try:
                results[label] = by_offset_latency(
                    m.mnt / "big-0", n, samples, seed=seed, warm=logdir / "big-0" if warm else None
                )
            finally:
                m.close()
        (l1, (s50, s99)), (l2, (b50, b99)) = results.items()
        how = "batches in the page cache" if warm else "as found"
        rows.append(("by-offset", f"random N.json open+read, {l1} records, {how}", f"p50 {s50:.2f} ms, p99 {s99:.2f} ms"))
        rows.append(("by-offset", f"random N.json open+read, {l2} records ({gb:.1f} GB), {how}",
                     f"p50 {b50:.2f} ms, p99 {b99:.2f} ms; p50 {b50 / s50 - 1:+.0%}, p99 {b99 / s99 - 1:+.0%} "
                     f"vs {l1} (target within 20%)"))

    section("RSS while reading the big partition")
    m = Mounted(big_dir, work / "mnt-big", "--cache-dir", str(work / "cache-big"))
    try:
        last = min(rss_records, big) - 1 if rss_records else big - 1
        name = f"by-offset/0-{last}.jsonl" if rss_records else "records.jsonl"
        path = m.mnt / "big-0" / name
        peak = [0.0]
        stop = threading.Event()

        def sample() -> None:
            while not stop.is_set():
                peak[0] = max(peak[0], m.status("VmRSS"))
                time.sleep(0.2)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        start = time.perf_counter()
        n = 0
        with open(path, "rb", buffering=0) as f:
            t_open = time.perf_counter() - start
            while time.perf_counter() - start < rss_seconds:
                data = f.read(128 * 1024)
                if not data:
                    break
                n += len(data)
        elapsed = time.perf_counter() - start
        stop.set()
        sampler.join()
        whole = "end to end" if not data else "until the time limit"
        rows.append(("RSS", f"read {name} of the big partition ({log_bytes(big_dir, 'big-0') / 1e9:.1f} GB of log) "
                            f"{whole} ({elapsed:.0f} s)",
                     f"{n / 1e9:.2f} GB of JSON read ({mbps(n, elapsed)}; open+size {t_open:.1f} s); daemon RSS peak "
                     f"{peak[0]:,.0f} MiB (sampled every 0.2 s), VmHWM {m.status('VmHWM'):,.0f} MiB"))
    finally:
        m.close()


# ---------------------------------------------------------------------------------------------- main


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--kinds", default="mixed,uniform")
    parser.add_argument("--samples", type=int, default=2000)
    parser.add_argument("--partitions", type=int, default=100)
    parser.add_argument("--partition-records", type=int, default=10_000)
    parser.add_argument("--big", type=int, default=100_000_000)
    parser.add_argument("--rss-records", type=int, default=0,
                        help="read by-offset/0-<N-1>.jsonl of the big partition for RSS (0: all of records.jsonl)")
    parser.add_argument("--rss-seconds", type=float, default=900.0)
    parser.add_argument("--work", help="build (and reuse) the log directories here instead of a temporary folder")
    args = parser.parse_args()

    work = Path(args.work) if args.work else Path(tempfile.mkdtemp(prefix="kafkafs-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    rows: list[tuple[str, str, str]] = []
    load = os.getloadavg()
    try:
        for kind in args.kinds.split(","):
            per_kind(work, kind, args.records, args.samples, rows)
        if args.partitions:
            many_partitions(work, args.partitions, args.partition_records, rows)
        if args.big:
            big_partition(work, args.big, args.samples, args.rss_records, args.rss_seconds, rows)
    finally:
        if not args.work:
            shutil.rmtree(work, ignore_errors=True)
        print_table(rows, load)


def print_table(rows: list[tuple[str, str, str]], load: tuple[float, float, float]) -> None:
    if not rows:
        return
    print(f"\nkafkafs mount, {os.cpu_count()} CPUs, load average at start {load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f}, "
          f"now {os.getloadavg()[0]:.1f}\n")
    print_rows(rows, "data")


def print_rows(rows: list[tuple[str, str, str]], first: str) -> None:
    """``rows`` (first column, what, result) as a Markdown table, as README's bench tables are; ``first``
    heads the first column."""
    w1 = max(len(first), *(len(r[0]) for r in rows))
    w2 = max(len("what"), *(len(r[1]) for r in rows))
    print(f"| {first.ljust(w1)} | {'what'.ljust(w2)} | result |")
    print(f"|{'-' * (w1 + 2)}|{'-' * (w2 + 2)}|--------|")
    for a, b, c in rows:
        print(f"| {a.ljust(w1)} | {b.ljust(w2)} | {c} |")


if __name__ == "__main__":
    main()
