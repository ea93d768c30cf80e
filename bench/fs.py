"""The mounted filesystem, measured: one partition of N records (default 1,000,000), one table.

* ``cat records.jsonl`` through the mount (records/s, MB/s), after the first ``stat`` (which lays the
  whole partition out once to learn the exact size; timed separately), next to ``cat segments/*.log``
  through the same mount (the FUSE ceiling) and the engine's in-process decode + render rate;
* ``by-offset/N.json`` open+read latency for random N (median, p99);
* ``ls by-offset | wc -l`` time, and the daemon's peak RSS (VmHWM) after all of the above;
* append throughput through ``append`` on a ``--rw`` mount (128 KiB writes of whole lines, then close),
  into a partition ``bench-0`` made with ``mkdir`` through the mount.

    python bench/fs.py [--records N] [--append-records N] [--keep DIR]
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
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kafkafs.format.jsonview import ProducerRecord, render_batch_jsonl  # noqa: E402
from kafkafs.storage.config import Settings  # noqa: E402
from kafkafs.storage.logdir import LogDir  # noqa: E402

SETTINGS = Settings({"segment.bytes": 64 * 1024 * 1024})
TOPIC = "orders-0"


def build(path: Path, records: int) -> None:
    path.mkdir(parents=True, exist_ok=True)
    rng = random.Random(7)
    ts = 1_763_700_000_000
    with LogDir(path, SETTINGS, writable=True) as d:
        log = d.create_partition("orders", 0)
        offset = 0
        while offset < records:
            n = min(100, records - offset)
            batch = [
                ProducerRecord(
                    ts + offset + i,
                    b"c-%05d" % rng.randrange(100000),
                    b'{"order":%d,"customer":"c-%05d","amount":%d.%02d,'
                    b'"currency":"EUR","status":"paid","n":%d}'
                    % (offset + i, rng.randrange(100000), rng.randrange(1000), rng.randrange(100), i),
                    (),
                )
                for i in range(n)
            ]
            log.append_records(batch)
            offset += n


def engine_rate(path: Path) -> tuple[float, int, int]:
    with LogDir(path, SETTINGS) as d:
        log = d.log(TOPIC)
        start = time.perf_counter()
        n = size = 0
        for batch in log.read():
            size += len(render_batch_jsonl("orders", 0, batch))
            n += len(batch)
        return time.perf_counter() - start, n, size


class Mounted:
    def __init__(self, logdir: Path, mnt: Path, *args: str) -> None:
        mnt.mkdir(parents=True, exist_ok=True)
        self.mnt = mnt
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "kafkafs.fs.mount", str(logdir), str(mnt), "-f", *args],
            cwd=ROOT,
            stderr=subprocess.PIPE,
        )
        deadline = time.monotonic() + 30
        while not os.path.ismount(mnt):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(
                    f"mount failed: {self.proc.stderr.read().decode() if self.proc.stderr else ''}"
                )
            time.sleep(0.02)

    def peak_rss_mb(self) -> float:
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
        return float("nan")

    def close(self) -> None:
        subprocess.run(["fusermount3", "-u", str(self.mnt)], capture_output=True)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            subprocess.run(["fusermount3", "-uz", str(self.mnt)], capture_output=True)


def timed(cmd: str) -> tuple[float, str]:
    start = time.perf_counter()
    out = subprocess.run(["sh", "-c", cmd], capture_output=True, check=True).stdout.decode()
    return time.perf_counter() - start, out


def drop_caches() -> None:
    try:
        subprocess.run(["sync"], check=False)
        Path("/proc/sys/vm/drop_caches").write_text("3\n")
    except OSError:
        pass


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--append-records", type=int, default=200_000)
    parser.add_argument("--samples", type=int, default=1000)
    parser.add_argument("--keep", help="build (or reuse) the log directory here instead of a temporary one")
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="kafkafs-bench-"))
    logdir = Path(args.keep) if args.keep else work / "logs"
    rows: list[tuple[str, str]] = []
    try:
        if not (logdir / TOPIC).is_dir():
            start = time.perf_counter()
            build(logdir, args.records)
            print(f"built {args.records:,} records in {time.perf_counter() - start:.1f} s", file=sys.stderr)
        seconds, n, size = engine_rate(logdir)
        rows.append(
            (
                "engine decode+render (in process)",
                f"{n / seconds:,.0f} rec/s  {size / seconds / 1e6:,.0f} MB/s",
            )
        )

        drop_caches()
        m = Mounted(logdir, work / "mnt")
        try:
            part = m.mnt / TOPIC
            t_stat, out = timed(f"stat -c %s {part}/records.jsonl")
            rows.append(
                ("first stat records.jsonl (lays out all)", f"{t_stat:.2f} s  ({int(out) / 1e6:,.0f} MB)")
            )
            t_cat, _ = timed(f"cat {part}/records.jsonl > /dev/null")
            rows.append(
                (
                    "cat records.jsonl",
                    f"{n / t_cat:,.0f} rec/s  {size / t_cat / 1e6:,.0f} MB/s  ({t_cat:.2f} s)",
                )
            )
            seg_bytes = sum(p.stat().st_size for p in (logdir / TOPIC).glob("*.log"))
            t_seg, _ = timed(f"cat {part}/segments/*.log > /dev/null")
            rows.append(
                (
                    "cat segments/*.log (FUSE ceiling)",
                    f"{n / t_seg:,.0f} rec/s  {seg_bytes / t_seg / 1e6:,.0f} MB/s  ({t_seg:.2f} s)",
                )
            )
            t_grep, out = timed(f"grep -c order {part}/records.jsonl")
            rows.append(
                ("grep -c over records.jsonl (page cache warm)", f"{t_grep:.2f} s  ({int(out):,} lines)")
            )

            rng = random.Random(3)
            lat = []
            for offset in rng.sample(range(n), min(args.samples, n)):
                start = time.perf_counter()
                with open(part / "by-offset" / f"{offset}.json", "rb") as f:
                    f.read()
                lat.append(time.perf_counter() - start)
            lat.sort()
            rows.append(
                (
                    "by-offset/N.json open+read, random N",
                    f"median {statistics.median(lat) * 1e3:.2f} ms  "
                    f"p99 {lat[int(len(lat) * 0.99) - 1] * 1e3:.2f} ms",
                )
            )
            t_cat1, _ = timed(f"cat {part}/by-offset/{n // 2}.json > /dev/null")
            rows.append(("`cat by-offset/N.json` (incl. process start)", f"{t_cat1 * 1e3:.1f} ms"))

            t_ls, out = timed(f"ls {part}/by-offset | wc -l")
            rows.append(("ls by-offset | wc -l", f"{t_ls:.2f} s  ({int(out):,} names)"))
            t_range, _ = timed(f"cat {part}/by-offset/{n // 4}-{n // 4 + 99_999}.jsonl > /dev/null")
            rows.append(("cat by-offset/<100,000-record range>.jsonl", f"{t_range:.2f} s"))
            rows.append(("daemon peak RSS (VmHWM)", f"{m.peak_rss_mb():,.0f} MiB"))
        finally:
            m.close()

        m = Mounted(logdir, work / "mnt-rw", "--rw")
        try:
            line = (
                b'{"key":"c-00001","value":{"order":1,"customer":"c-00001","amount":1.5,"currency":"EUR"}}\n'
            )
            per_write = (128 * 1024) // len(line)
            chunk = line * per_write
            writes = max(1, args.append_records // per_write)
            start = time.perf_counter()
            target = m.mnt / "bench-0"  # a partition of its own, made through the mount
            if not target.exists():
                os.mkdir(target)
            fd = os.open(target / "append", os.O_WRONLY | os.O_APPEND)
            try:
                for _ in range(writes):
                    os.write(fd, chunk)
            finally:
                os.close(fd)
            t_app = time.perf_counter() - start
            total = writes * per_write
            rows.append(
                (
                    "append (128 KiB writes, close = fsync)",
                    f"{total / t_app:,.0f} rec/s  {total * len(line) / t_app / 1e6:,.1f} MB/s  "
                    f"({total:,} records)",
                )
            )
        finally:
            m.close()
    finally:
        shutil.rmtree(work, ignore_errors=True)

    width = max(len(k) for k, _ in rows)
    print(f"\nkafkafs mount, one partition of {n:,} records ({size / 1e6:,.0f} MB as JSON lines)\n")
    print(f"| {'what'.ljust(width)} | result |")
    print(f"|{'-' * (width + 2)}|--------|")
    for k, v in rows:
        print(f"| {k.ljust(width)} | {v} |")


if __name__ == "__main__":
    main()
