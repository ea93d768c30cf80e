"""What a FUSE file system costs before kafkafs does any work: bare libfuse in C against bare pyfuse3 + trio.

Both serve the same two files and nothing else: ``big`` (the bytes of a file given, read with pread
into a buffer at each request, as kafkafs reads a segment) and ``tiny`` (5 bytes from memory). Each
counts the read requests the kernel sends it and their sizes. Rows (medians of ``--repeat`` runs,
interleaved, one run on this machine with whatever else it is doing):

* open+read of ``tiny`` from Python, p50 and p99 (the floor under ``by-offset/N.json``);
* ``cat big > /dev/null`` in MB/s, with the requests' count and mean size (the floor under
  ``cat records.jsonl``: a request's cost divided by its size);
* each of those through a plain file on disk (no FUSE), for scale.

The C file system is compiled here with gcc against the machine's libfuse 3 (``libfuse3-dev``); it runs
single-threaded (``-s``), as pyfuse3's trio loop does, and multi-threaded (libfuse's default).

    python bench/fuse_floor.py [--file PATH] [--samples 2000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

C_SOURCE = r"""
#define FUSE_USE_VERSION 34
#include <fuse_lowlevel.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int big_fd;
static off_t big_size;
static long n_reads, n_bytes;
static const char TINY[] = "hello";

static void stat_of(fuse_ino_t ino, struct stat *st) {
    memset(st, 0, sizeof *st);
    st->st_ino = ino;
    if (ino == 1) { st->st_mode = S_IFDIR | 0555; st->st_nlink = 2; return; }
    st->st_mode = S_IFREG | 0444;
    st->st_nlink = 1;
    st->st_size = ino == 2 ? big_size : (off_t)strlen(TINY);
}

static void op_lookup(fuse_req_t req, fuse_ino_t parent, const char *name) {
    struct fuse_entry_param e;
    memset(&e, 0, sizeof e);
    if (parent != 1 || (strcmp(name, "big") && strcmp(name, "tiny"))) { fuse_reply_err(req, ENOENT); return; }
    e.ino = strcmp(name, "big") == 0 ? 2 : 3;
    e.attr_timeout = e.entry_timeout = 1.0;
    stat_of(e.ino, &e.attr);
    fuse_reply_entry(req, &e);
}

static void op_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi) {
    (void)fi;
    struct stat st;
    stat_of(ino, &st);
    fuse_reply_attr(req, &st, 1.0);
}

static void op_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi) {
    (void)ino;
    fi->keep_cache = 0;
    fuse_reply_open(req, fi);
}

static void op_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, struct fuse_file_info *fi) {
    (void)fi;
    __atomic_add_fetch(&n_reads, 1, __ATOMIC_RELAXED);
    if (ino == 3) {
        size_t n = strlen(TINY);
        if ((size_t)off >= n) { fuse_reply_buf(req, NULL, 0); return; }
        fuse_reply_buf(req, TINY + off, n - off < size ? n - off : size);
        return;
    }
    char *buf = malloc(size);
    ssize_t got = pread(big_fd, buf, size, off);
    if (got < 0) fuse_reply_err(req, errno);
    else {
        __atomic_add_fetch(&n_bytes, got, __ATOMIC_RELAXED);
        fuse_reply_buf(req, buf, (size_t)got);
    }
    free(buf);
}

static const struct fuse_lowlevel_ops ops = {
    .lookup = op_lookup, .getattr = op_getattr, .open = op_open, .read = op_read,
};

int main(int argc, char *argv[]) {
    /* floor BIGFILE MOUNTPOINT [-s] */
    big_fd = open(argv[1], O_RDONLY);
    struct stat st;
    fstat(big_fd, &st);
    big_size = st.st_size;
    char *fargs[] = {argv[0], NULL};
    struct fuse_args args = FUSE_ARGS_INIT(1, fargs);
    struct fuse_session *se = fuse_session_new(&args, &ops, sizeof ops, NULL);
    if (se == NULL || fuse_set_signal_handlers(se) != 0 || fuse_session_mount(se, argv[2]) != 0) return 1;
    int single = argc > 3 && strcmp(argv[3], "-s") == 0;
    int rc;
    if (single) rc = fuse_session_loop(se);
    else {
        struct fuse_loop_config *config = fuse_loop_cfg_create();
        rc = fuse_session_loop_mt(se, config);
        fuse_loop_cfg_destroy(config);
    }
    fuse_session_unmount(se);
    fuse_remove_signal_handlers(se);
    fuse_session_destroy(se);
    fprintf(stderr, "reads %ld bytes %ld\n", n_reads, n_bytes);
    return rc;
}
"""

PY_SOURCE = r'''
import errno, os, stat, sys
import pyfuse3, trio

BIG = os.open(sys.argv[1], os.O_RDONLY)
SIZE = os.fstat(BIG).st_size
TINY = b"hello"
counts = [0, 0]

class Ops(pyfuse3.Operations):
    def _attr(self, ino):
        a = pyfuse3.EntryAttributes()
        a.st_ino = ino
        a.entry_timeout = a.attr_timeout = 1.0
        if ino == pyfuse3.ROOT_INODE:
            a.st_mode, a.st_nlink = stat.S_IFDIR | 0o555, 2
        else:
            a.st_mode, a.st_nlink = stat.S_IFREG | 0o444, 1
            a.st_size = SIZE if ino == 2 else len(TINY)
        return a

    async def lookup(self, parent, name, ctx=None):
        if parent != pyfuse3.ROOT_INODE or name not in (b"big", b"tiny"):
            raise pyfuse3.FUSEError(errno.ENOENT)
        return self._attr(2 if name == b"big" else 3)

    async def getattr(self, ino, ctx=None):
        return self._attr(ino)

    async def open(self, ino, flags, ctx):
        return pyfuse3.FileInfo(fh=ino)

    async def read(self, fh, off, size):
        counts[0] += 1
        if fh == 3:
            return TINY[off:off + size]
        data = os.pread(BIG, size, off)
        counts[1] += len(data)
        return data

async def main():
    try:
        await pyfuse3.main()
    finally:
        pass

opts = set(pyfuse3.default_options)
opts.discard("default_permissions")
pyfuse3.init(Ops(), sys.argv[2], opts)
try:
    trio.run(main)
finally:
    pyfuse3.close(unmount=True)
    print(f"reads {counts[0]} bytes {counts[1]}", file=sys.stderr)
'''


class Mount:
    def __init__(self, cmd: list[str], mnt: Path) -> None:
        self.mnt = mnt
        mnt.mkdir(parents=True, exist_ok=True)
        self.proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 30
        while not os.path.ismount(mnt):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"{cmd[0]} did not mount: {self.proc.stderr.read() if self.proc.stderr else ''}")
            time.sleep(0.01)

    def close(self) -> tuple[int, int]:
        subprocess.run(["fusermount3", "-u", str(self.mnt)], capture_output=True)
        try:
            _out, err = self.proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            subprocess.run(["fusermount3", "-uz", str(self.mnt)], capture_output=True)
            _out, err = self.proc.communicate()
        for line in err.splitlines():
            if line.startswith("reads "):
                _, reads, _, nbytes = line.split()
                return int(reads), int(nbytes)
        return 0, 0


def tiny_latency(path: Path, samples: int) -> tuple[float, float]:
    lat = []
    for i in range(samples + 50):
        start = time.perf_counter()
        with open(path, "rb") as f:
            f.read()
        if i >= 50:
            lat.append(time.perf_counter() - start)
    lat.sort()
    return statistics.median(lat) * 1e6, lat[int(len(lat) * 0.99) - 1] * 1e6


def cat_seconds(path: Path) -> float:
    start = time.perf_counter()
    subprocess.run(["cat", str(path)], stdout=subprocess.DEVNULL, check=True)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--file", help="the big file to serve (default: 256 MB of random bytes)")
    parser.add_argument("--samples", type=int, default=2000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="kafkafs-fuse-floor-"))
    load = os.getloadavg()
    try:
        big = Path(args.file) if args.file else work / "big.bin"
        if not args.file:
            with open(big, "wb") as f:
                for _ in range(256):
                    f.write(os.urandom(1 << 20))
        tiny = work / "tiny.txt"
        tiny.write_bytes(b"hello")
        (work / "floor.c").write_text(C_SOURCE)
        (work / "floor.py").write_text(PY_SOURCE)
        flags = subprocess.run(["pkg-config", "--cflags", "--libs", "fuse3"], capture_output=True, text=True,
                               check=True).stdout.split()
        subprocess.run(["gcc", "-O2", "-o", str(work / "floor"), str(work / "floor.c"), *flags], check=True)
        size = big.stat().st_size
        systems = {
            "libfuse C, one thread (-s)": [str(work / "floor"), str(big), str(work / "m"), "-s"],
            "libfuse C, multi-threaded": [str(work / "floor"), str(big), str(work / "m")],
            "pyfuse3 + trio": [sys.executable, str(work / "floor.py"), str(big), str(work / "m")],
        }
        results: dict[str, dict[str, list]] = {name: {"p50": [], "p99": [], "cat": [], "reads": []} for name in systems}
        results["no FUSE (the files on disk)"] = {"p50": [], "p99": [], "cat": [], "reads": []}
        for _ in range(args.repeat):
            for name, cmd in systems.items():
                m = Mount(cmd, work / "m")
                try:
                    p50, p99 = tiny_latency(m.mnt / "tiny", args.samples)
                finally:
                    m.close()
                m = Mount(cmd, work / "m")  # a mount of its own, so that its requests are the cats' alone
                try:
                    cat_seconds(m.mnt / "big")  # the source file into the page cache
                    t = cat_seconds(m.mnt / "big")
                finally:
                    reads, nbytes = m.close()
                r = results[name]
                r["p50"].append(p50)
                r["p99"].append(p99)
                r["cat"].append(t)
                r["reads"].append(reads / 2)
            p50, p99 = tiny_latency(tiny, args.samples)
            r = results["no FUSE (the files on disk)"]
            r["p50"].append(p50)
            r["p99"].append(p99)
            r["cat"].append(cat_seconds(big))
        print(f"\nFUSE floor, {os.cpu_count()} CPUs, kernel {os.uname().release}, load average at start "
              f"{load[0]:.2f} / {load[1]:.2f} / {load[2]:.2f}, at the end {os.getloadavg()[0]:.2f}; medians of "
              f"{args.repeat} interleaved runs; big = {size / 1e6:,.0f} MB\n")
        print("| file system | tiny open+read p50 / p99 | cat big | read requests for one cat, mean size |")
        print("|---|---|---|---|")
        for name, r in results.items():
            cat = statistics.median(r["cat"])
            reqs = ""
            if r["reads"]:
                n = statistics.median(r["reads"])
                reqs = f"{n:,.0f}, {size / n / 1024:,.0f} KiB" if n > 0 else ""
            print(f"| {name} | {statistics.median(r['p50']):.0f} / {statistics.median(r['p99']):.0f} µs | "
                  f"{size / cat / 1e6:,.0f} MB/s | {reqs} |")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
