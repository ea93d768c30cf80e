"""Whole-file readers of a read-only mount while a live broker appends (issue 20; SPEC §3 "Live": a read
that races an append returns whole lines of records that exist, never bytes that were not written).

A kafka-python producer writes the fixed mix (text, JSON, binary, empty and null values, null keys,
headers) to a topic whose segments roll every 16 KB, while reader threads read ``records.jsonl`` of the
running broker's partition whole, again and again, each read in a thread of its own (a read that takes
over 30 s is a hang). Afterwards every read must be whole lines (no NUL byte, no cut line), its records
the partition's from offset 0 on with no gap, each equal to what a kafka-python consumer fetches over
the wire for that offset (rendered by SPEC §3's rules in livecheck.py, not by kafkafs).

The default run takes ``BROKER_READERS_SECONDS`` (10) seconds with 4 readers. The slow one is issue 20's
done-when beside a broker: 8 readers of ``records.jsonl``, ``by-offset/`` and ``by-time/`` for
``BROKER_READERS_SLOW_SECONDS`` (600) while the producer sends 2,000 records/s; every read must equal
what ``kafkafs consume`` prints for the same records (tests/faults/readers.py), and consume what the
consumer fetches over the wire.
"""

from __future__ import annotations

import json
import os
import random
import threading
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.faults.readers import check_reads, consume_lines, kinds, read_or_error, run_readers

from .harness import Broker
from .livecheck import expected_line
from .workloads import SMALL_SEGMENTS, record_of

SECONDS = float(os.environ.get("BROKER_READERS_SECONDS", "10"))  # 5,000 records, a dozen segment rolls
SLOW_SECONDS = float(os.environ.get("BROKER_READERS_SLOW_SECONDS", "600"))


def soak_records_jsonl(broker: Broker, mnt: Path) -> Path:
    """Create topic ``soak`` (segments of 16 KB) and wait until the mount at ``mnt`` shows its
    ``soak-0/records.jsonl``."""
    broker.create_topic("soak", configs=SMALL_SEGMENTS)
    path = mnt / "soak-0" / "records.jsonl"
    deadline = time.monotonic() + 30
    while not path.exists():  # the mount sees the new partition
        assert time.monotonic() < deadline, "the mount never showed soak-0"
        time.sleep(0.1)
    return path


def produce_soak(broker: Broker, rate: int, batch_size: int, stop: threading.Event, produced: list[int],
                 on_ack: Callable | None = None, after_burst: Callable[[], None] | None = None) -> None:
    """Send the fixed mix to ``soak-0`` at ``rate`` records a second until ``stop`` is set, in bursts of
    a fiftieth of a second; ``produced[0]`` is what was sent so far. ``on_ack`` is added as the callback
    of every send, ``after_burst`` runs after each burst."""
    client = broker.producer(linger_ms=2, batch_size=batch_size, acks=1)
    rng = random.Random(20)
    start = time.monotonic()
    n = 0
    while not stop.is_set():
        for _ in range(max(rate // 50, 1)):
            key, value, headers = record_of(n, rng)
            future = client.send("soak", key=key, value=value, headers=headers, partition=0)
            if on_ack is not None:
                future.add_callback(on_ack)
            n += 1
        produced[0] = n
        if after_burst is not None:
            after_burst()
        time.sleep(max(0.0, start + n / rate - time.monotonic()))
    client.flush()
    produced[0] = n


def readers_beside_broker(broker: Broker, mnt: Path, seconds: float, readers: int, rate: int) -> dict:
    """Produce ``rate`` records a second for ``seconds`` while ``readers`` threads read records.jsonl
    whole; then check every read against the consumer. Returns the counts."""
    path = soak_records_jsonl(broker, mnt)
    stop = threading.Event()
    reads: list[bytes] = []
    hangs: list[str] = []
    errors: list[str] = []
    produced = [0]

    def reader() -> None:
        while not stop.is_set():
            got: list = []
            t = threading.Thread(target=lambda out=got: out.append(read_or_error(path)), daemon=True)
            t.start()
            t.join(30)
            if t.is_alive():
                hangs.append("records.jsonl")
                return
            if isinstance(got[0], Exception):
                errors.append(repr(got[0]))
            else:
                reads.append(got[0])

    threads = [threading.Thread(target=produce_soak, args=(broker, rate, 4096, stop, produced))]
    threads += [threading.Thread(target=reader) for _ in range(readers)]
    started = time.monotonic()
    for t in threads:
        t.start()
    time.sleep(seconds)
    stop.set()
    for t in threads:
        t.join(120)
    took = time.monotonic() - started
    wire = {r.offset: expected_line(r) for r in broker.consume_all("soak", partition=0)}
    counts = {"seconds": round(took), "produced": produced[0], "rate": round(produced[0] / took),
              "segments": len(list(broker.partition_dir("soak-0").glob("*.log"))), "reads": len(reads),
              "lines": 0, "nul": 0, "bad": [], "hangs": hangs, "errors": errors, "fetched": len(wire)}
    # The file only grows (nothing is deleted or compacted), so every right read is a prefix of the longest
    # right one: a read equal to the start of a read already checked line by line is not parsed again.
    checked = b""
    for data in sorted(reads, key=len, reverse=True):
        if b"\x00" in data:
            counts["nul"] += 1
        if data and not data.endswith(b"\n"):
            counts["bad"].append(f"a read ends mid-line ({len(data)} bytes)")
            continue
        if checked.startswith(data):
            counts["lines"] += data.count(b"\n")
            continue
        bad = len(counts["bad"])
        for expect, line in enumerate(data.splitlines()):
            counts["lines"] += 1
            try:
                obj = json.loads(line)
            except ValueError:
                counts["bad"].append(f"not a JSON line: {line[:80]!r}")
                break
            if obj["offset"] != expect:
                counts["bad"].append(f"offset {obj['offset']} where {expect} was due")
                break
            obj.pop("producerId", None)
            if wire.get(expect) != obj:
                counts["bad"].append(f"offset {expect} differs from the consumer's record")
                break
        if len(counts["bad"]) == bad and len(data) > len(checked):
            checked = data
    return counts


def _check(counts: dict, min_reads: int) -> None:
    print(f"\nreaders beside the broker: { {k: v for k, v in counts.items() if k != 'bad'} }, "
          f"{len(counts['bad'])} bad; load {os.getloadavg()}")
    assert not counts["hangs"] and not counts["errors"], (counts["hangs"], counts["errors"][:5])
    assert counts["nul"] == 0 and not counts["bad"], (counts["nul"], counts["bad"][:5])
    assert counts["fetched"] == counts["produced"] and counts["reads"] >= min_reads, counts
    assert counts["segments"] >= 2, counts  # segments rolled under the readers


def test_whole_file_readers_beside_a_producing_broker(broker, mounted):
    m = mounted(broker.log_dir)
    _check(readers_beside_broker(broker, m.path, SECONDS, readers=4, rate=500), min_reads=10)


@pytest.mark.slow
def test_readers_of_every_kind_beside_a_producing_broker_long(broker, mounted, tmp_path):
    """Issue 20's done-when beside a broker: 8 readers of records.jsonl, by-offset/ and by-time/ of a
    read-only mount of the running broker's log directory, 2,000 records/s produced: 0 reads with a byte
    that differs from what ``kafkafs consume`` prints for the same records, 0 hangs."""
    m = mounted(broker.log_dir)
    soak_records_jsonl(broker, m.path)
    rate = 2000
    stop = threading.Event()
    produced = [0]
    acked = [0, 0]  # records the broker acknowledged, the largest timestamp among them
    lock = threading.Lock()
    samples: deque[tuple[float, int, int]] = deque()  # (monotonic, acked, largest timestamp)

    def on_ack(metadata) -> None:
        with lock:
            acked[0] = max(acked[0], metadata.offset + 1)
            acked[1] = max(acked[1], metadata.timestamp)

    def sample() -> None:
        with lock:
            samples.append((time.monotonic(), acked[0], acked[1]))

    def progress() -> tuple[int, int]:
        """What the mount surely shows: what the broker acknowledged 1.5 s ago (SPEC §3: appends show
        within a second). Timestamps are the producer's clock at send(), so every record with a
        timestamp below the largest acknowledged one was acknowledged too."""
        with lock:
            while len(samples) > 1 and samples[1][0] <= time.monotonic() - 1.5:
                samples.popleft()
            if not samples or samples[0][0] > time.monotonic() - 1.5:
                return 0, int(time.time() * 1000) - 60_000
            return samples[0][1], samples[0][2] + 1

    thread = threading.Thread(target=produce_soak, args=(broker, rate, 16384, stop, produced),
                              kwargs={"on_ack": on_ack, "after_burst": sample})
    started = time.monotonic()
    thread.start()
    try:
        result = run_readers(m.path, SLOW_SECONDS, readers=8, partition="soak-0", progress=progress,
                             keep=tmp_path / "differing")
    finally:
        stop.set()
        thread.join(120)
    took = time.monotonic() - started
    wire = {r.offset: expected_line(r) for r in broker.consume_all("soak", partition=0)}
    printed = consume_lines(broker.log_dir, "soak-0")
    consume_differs = [o for o, line in printed.items()
                       if {k: v for k, v in json.loads(line).items() if k != "producerId"} != wire.get(o)]
    checked = check_reads(result, printed)
    segments = len(list(broker.partition_dir("soak-0").glob("*.log")))
    print(f"\nreaders beside the broker: {took:.0f} s, {produced[0]} records produced ({produced[0] / took:.0f} "
          f"records/s), {len(wire)} fetched, {segments} segments, {checked['reads']} reads, {checked['lines']} lines, "
          f"{checked['nul']} with NUL bytes, {len(checked['bad'])} differing, {len(result['hangs'])} hangs (300 s), "
          f"{len(result['slow'])} reads over 30 s {result['slow'][:10]}, "
          f"{len(result['errors'])} errors; consume vs the wire: {len(consume_differs)} differing; by kind "
          f"{kinds(result)}; slowest read {result['slowest'][0]:.2f} s ({result['slowest'][1]}); "
          f"load {os.getloadavg()}")
    for line in checked["bad"][:30]:
        print("differs:", line)
    assert not result["hangs"] and not result["errors"], (result["hangs"][:5], result["errors"][:5])
    assert checked["nul"] == 0 and not checked["bad"], (checked["nul"], checked["bad"][:5])
    assert len(wire) == len(printed) == produced[0] and not consume_differs, (len(wire), len(printed), consume_differs[:5])
    assert segments >= 2 and checked["reads"] >= 100
