"""Issue 9, finding 7: a mount that read decompression bombs (each cleanly EIO) gives the memory back."""

from __future__ import annotations

import errno
import threading
from pathlib import Path

from kafkafs.format.batch import Codec, encode_batch

BOMB_BYTES = 100 * 1024 * 1024  # past the 64 MiB a batch may inflate to


def _rss_mib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) // 1024
    raise AssertionError("no VmRSS")


def test_finding7_memory_of_decompression_bombs_is_given_back(mounted, tmp_path):
    logdir = tmp_path / "logs"
    logdir.mkdir()
    (logdir / "plain-0").mkdir()
    (logdir / "plain-0" / "00000000000000000000.log").write_bytes(
        encode_batch([(1_763_700_000_000, None, b"hello", ())])
    )
    names = []
    for codec in (Codec.GZIP, Codec.SNAPPY, Codec.LZ4, Codec.ZSTD):
        for n in range(3):
            name = f"bomb-{codec.name.lower()}-{n}"
            (logdir / f"{name}-0").mkdir()
            batch = encode_batch([(1_763_700_000_000, None, bytes(BOMB_BYTES), ())], compression=codec)
            (logdir / f"{name}-0" / "00000000000000000000.log").write_bytes(batch)
            names.append(f"{name}-0")
    m = mounted(logdir)
    m.allow_errors = True  # each bomb is logged as damage
    assert (m / "plain-0" / "records.jsonl").read_bytes().count(b"\n") == 1
    before = _rss_mib(m.proc.pid)
    errors: list[object] = []

    def read_all() -> None:
        for _ in range(2):
            for name in names:
                try:
                    (m / name / "records.jsonl").read_bytes()
                    errors.append(f"{name}: read without error")
                except OSError as exc:
                    if exc.errno != errno.EIO:
                        errors.append(exc)

    threads = [threading.Thread(target=read_all) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    assert not errors, errors[:5]
    assert (m / "plain-0" / "records.jsonl").read_bytes().count(b"\n") == 1
    after = _rss_mib(m.proc.pid)
    assert m.proc.poll() is None
    assert after - before < 120, f"RSS went from {before} MiB to {after} MiB and stayed there"
