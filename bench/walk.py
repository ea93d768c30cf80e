"""A whole-tree walk of a mount: ``ls -lR``, ``find -size``, ``du``, what each costs a name, and the daemon's
memory before, after, and once the kernel forgot what the walk looked up (review24 R24-5: `ls -lR` of 200
partitions x 5,000 records took 57 min and left the daemon at 975 MB, never given back).

The log directory: ``--partitions`` partitions of ``--records`` mixed records each (bench/many.py's build:
one segment each, the active one, as a broker's partitions mostly are), and with ``--keyed N`` one more
partition ``k-0`` of N records (one active segment of a few MB: a broker's shape for by-key/, whose
lookups scanned it whole, once a name). Rows, each on a fresh mount with an empty cache:

* ``ls -lR MNT``: seconds, names listed, microseconds a name, the daemon's CPU;
* ``find MNT -size +0`` and ``du -s MNT``, right after (the kernel keeps what ls -lR was told, within
  its timeouts);
* the daemon's RSS after mounting, after the walk, and after ``echo 2 > /proc/sys/vm/drop_caches`` has the
  kernel forget the inodes (when this process may write it: root), with the inodes the daemon still
  holds (``statfs``'s f_files);
* with ``--keyed``: ``ls -l MNT/k-0/by-key`` alone.

``--against DIR``: the same rows by another checkout's mount (before/after in one run; the two are run
one after the other, so the machine's load may differ between them: the load average is printed).

    python bench/walk.py [--partitions 20] [--records 5000] [--keyed 30000] [--against /path/to/main] [--work DIR]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.fs import Mounted  # noqa: E402
from bench.many import build  # noqa: E402

DROP_CACHES = Path("/proc/sys/vm/drop_caches")


def _load() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


def timed(cmd: str) -> tuple[float, bytes]:
    start = time.perf_counter()
    out = subprocess.run(["sh", "-c", cmd], capture_output=True, check=False).stdout
    return time.perf_counter() - start, out


def forget_all() -> bool:
    """Have the kernel drop its dentries and inodes (the mount gets their forgets); False when not allowed."""
    try:
        os.sync()
        DROP_CACHES.write_text("2\n")
    except OSError:
        return False
    time.sleep(2.0)  # the forgets come in batches
    return True


def walk(tree: Path, logdir: Path, work: Path, keyed: bool) -> list[tuple[str, str]]:
    cache = work / "cache"
    shutil.rmtree(cache, ignore_errors=True)
    mnt = work / "mnt"
    rows = []
    m = Mounted(logdir, mnt, "--cache-dir", str(cache), tree=tree)
    try:
        rss0 = m.status("VmRSS")
        cpu0 = m.cpu_seconds()
        seconds, out = timed(f"ls -lR {mnt}")
        cpu = m.cpu_seconds() - cpu0
        names = sum(1 for line in out.splitlines() if line[:1] in (b"-", b"d"))
        rows.append(("ls -lR MNT", f"{seconds:.1f} s, {names:,} names, {seconds / names * 1e6:.0f} us a name, "
                                   f"daemon CPU {cpu:.1f} s ({cpu / names * 1e6:.0f} us a name)"))
        rss1 = m.status("VmRSS")
        seconds, out = timed(f"find {mnt} -size +0 | wc -l")
        rows.append(("find MNT -size +0, after", f"{seconds:.1f} s ({int(out or 0):,} names)"))
        seconds, out = timed(f"du -s {mnt}")
        rows.append(("du -s MNT, after", f"{seconds:.1f} s"))
        held = os.statvfs(mnt).f_files
        rss2 = m.status("VmRSS")
        dropped = forget_all()
        after = (f", after drop_caches {m.status('VmRSS'):.0f} MB with {os.statvfs(mnt).f_files:,} inodes held"
                 if dropped else " (drop_caches not allowed here)")
        rows.append(("daemon RSS", f"mounted {rss0:.0f} MB, after ls -lR {rss1:.0f} MB, after find+du {rss2:.0f} MB "
                                   f"with {held:,} inodes held{after}"))
        if keyed:
            forget_all()
            cpu0 = m.cpu_seconds()
            seconds, out = timed(f"ls -l {mnt}/k-0/by-key")
            cpu = m.cpu_seconds() - cpu0
            names = max(out.count(b"\n") - 1, 1)
            rows.append(("ls -l MNT/k-0/by-key", f"{seconds:.1f} s, {names:,} names, {seconds / names * 1e3:.2f} ms a "
                                                 f"name, daemon CPU {cpu:.1f} s"))
    finally:
        m.close()
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--partitions", type=int, default=20)
    parser.add_argument("--records", type=int, default=5000)
    parser.add_argument("--keyed", type=int, default=0, help="records of one more partition k-0 (0: none)")
    parser.add_argument("--against", type=Path, help="another checkout: the same rows by its mount")
    parser.add_argument("--work", type=Path, help="keep the data here (made once, reused)")
    args = parser.parse_args()
    work = args.work or Path(tempfile.mkdtemp(prefix="kafkafs-walk-"))
    logdir = work / "logs"
    build(logdir, "t", args.partitions, args.records)
    if args.keyed:
        build(logdir, "k", 1, args.keyed)
    trees = [("this checkout", ROOT)] + ([("against " + str(args.against), args.against)] if args.against else [])
    try:
        for label, tree in trees:
            load = _load()
            rows = walk(tree, logdir, work, bool(args.keyed))
            print(f"\n{label}: {args.partitions} partitions x {args.records:,} records"
                  f"{f' + k-0 of {args.keyed:,}' if args.keyed else ''} (load {load} -> {_load()})")
            for what, result in rows:
                print(f"  {what:28} {result}")
    finally:
        if args.work is None:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
