"""``kafkafs consume``: records as JSON lines (SPEC §3), with kcat's habits.

Where to start, per partition (``-o``/``--offset``/``--from-offset``, kcat's forms):
``beginning``/``earliest`` (the log start offset), ``end``/``latest`` (the log end offset: nothing
until new records come, with ``--follow``), ``N`` (absolute; clamped into the log), ``-N`` (N before
the end), ``s@TS`` (the first record with timestamp >= TS, epoch ms, as Kafka's ``offsetsForTimes``).
``e@TS`` stops before the first record with timestamp >= TS. ``--from-time TS`` is ``s@TS`` that also
takes ISO-8601. ``-c``/``--count`` stops after that many records in all.

A topic without a partition number (``orders``, or ``-t orders`` without ``-p``) reads every partition
of the topic. Records are interleaved by timestamp (ties by partition, then offset), as a consumer of
the whole topic would roughly see them; ``--no-interleave`` prints one partition after the other, in
partition order. A name that is a partition folder (``orders-1``) is that partition alone.
"""

from __future__ import annotations

import argparse
import heapq
import os
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, BinaryIO

from .consume_spans import SpanPool, span_chunks, spannable
from .errors import CorruptRecordError, InvalidInput, InvalidName
from .format.decoders import decoder_for
from .format.jsonview import render_batch_jsonl, render_raw_jsonl_count, render_raw_jsonl_lines
from .format.timestamps import format_timestamp, parse_timestamp
from .storage.log import Log
from .storage.logdir import LogDir
from .storage.names import parse_partition_dir_name

__all__ = ["OffsetSpec", "parse_offset_spec", "resolve_partitions", "consume", "add_consume_arguments", "start_from_args"]

_NUMBER = re.compile(r"[+-]?\d+")


@dataclass(frozen=True)
class OffsetSpec:
    """Where to start: ``kind`` is "beginning", "end", "offset" (``value`` >= 0), "tail" (``value``
    records before the end) or "time" (``value`` ms)."""

    kind: str
    value: int = 0


def parse_offset_spec(text: str) -> OffsetSpec:
    """kcat's ``-o`` value; ``InvalidInput`` for anything else."""
    t = text.strip()
    low = t.lower()
    if low in ("beginning", "earliest", "oldest", "first"):
        return OffsetSpec("beginning")
    if low in ("end", "latest", "newest", "last"):
        return OffsetSpec("end")
    if _NUMBER.fullmatch(t):
        n = int(t)
        return OffsetSpec("tail", -n) if n < 0 else OffsetSpec("offset", n)
    if low.startswith("s@"):
        return OffsetSpec("time", parse_timestamp(t[2:]))
    raise InvalidInput(
        f"not an offset: {text!r} (use beginning|earliest, end|latest, N, -N from the end, or s@TIMESTAMP_MS)"
    )


def start_offset(log_: Log, spec: OffsetSpec) -> int:
    """The first offset ``spec`` names in ``log_``, within [log start, log end]."""
    lo, hi = log_.log_start_offset, log_.log_end_offset
    if spec.kind == "beginning":
        return lo
    if spec.kind == "end":
        return hi
    if spec.kind == "tail":
        return max(hi - spec.value, lo)
    if spec.kind == "time":
        found = log_.offset_for_timestamp(spec.value)
        return found[0] if found else hi
    return min(max(spec.value, lo), hi)


def past_end_note(log_: Log, spec: OffsetSpec) -> str | None:
    """What ``consume`` says on stderr when ``spec`` asks for a start past the partition's last record
    (SPEC §4: a script and a person can tell "no records there" from "nothing printed"); None when the
    start is within the log (or is its end, asked for by name)."""
    end = log_.log_end_offset
    if spec.kind == "offset" and spec.value >= end:
        asked = f"offset {spec.value}"
    elif spec.kind == "time" and log_.offset_for_timestamp(spec.value) is None:
        asked = format_timestamp(spec.value)
    else:
        return None
    name = f"{log_.topic}-{log_.partition}"
    if end <= log_.log_start_offset:
        return f"{name}: nothing at or after {asked}: the partition holds no records (its next offset is {end})"
    return f"{name}: nothing at or after {asked}: the partition ends at offset {end - 1} (its next offset is {end})"


def resolve_partitions(logdir: LogDir, name: str | None, topic: str | None, partition: int | None) -> list[str]:
    """The partition folders to read: ``name`` as a partition folder, else as a topic (every partition);
    ``-t``/``-p`` kcat style. ``InvalidName`` when nothing matches."""
    names = logdir.partition_names()
    if name is not None and (topic is not None or partition is not None):
        raise InvalidInput("give either TOPIC[-PARTITION] or -t TOPIC [-p N], not both")
    if name is None:
        if topic is None:
            raise InvalidInput("which topic? give TOPIC[-PARTITION] or -t TOPIC")
        if partition is not None:
            name = f"{topic}-{partition}"
            if name not in names:
                raise InvalidName(f"no partition {name} in {logdir.path}")
            return [name]
        name = topic
    if name in names:
        return [name]
    matches = [n for n in names if parse_partition_dir_name(n)[0] == name]
    if not matches:
        raise InvalidName(f"no partition {name} and no topic {name} in {logdir.path}")
    return matches


@dataclass(eq=False)
class _Reader:
    """One partition's lines from ``next_offset``, with their timestamps (for the interleaving)."""

    log: Log
    next_offset: int
    mode: str
    stop_ts: int | None
    decoder: Any
    done: bool = False

    def lines(self) -> Iterator[tuple[int, int, int, bytes]]:
        """(timestamp, partition, offset, line) of every record now in the log past ``next_offset``."""
        log_ = self.log
        if self.done or self.next_offset >= log_.log_end_offset:
            return
        for batch in log_.read(self.next_offset, validate=True):
            self.next_offset = max(self.next_offset, batch.header.next_offset)
            if not len(batch):
                continue
            kwargs = {"decoder": self.decoder} if self.decoder is not None else {}
            rendered = render_batch_jsonl(log_.topic, log_.partition, batch, self.mode, **kwargs).split(b"\n")
            for i, offset in enumerate(batch.offsets):
                ts = batch.timestamps[i]
                if self.stop_ts is not None and ts >= self.stop_ts:
                    self.done = True
                    return
                yield ts, log_.partition, offset, rendered[i] + b"\n"

    def chunks(self, remaining: int | None) -> Iterator[tuple[bytes, int]]:
        """The lines of whole batches at once, ``(lines, how many)``, at most ``remaining`` records in
        all: the fast path (no interleaving, no ``e@TS``): spans of many batches on every core
        (:mod:`.consume_spans`) when nothing limits the count, else one kernel call per batch."""
        log_ = self.log
        if self.done or self.next_offset >= log_.log_end_offset:
            return
        if remaining is None and spannable(self.mode, self.decoder):
            yield from span_chunks(self, _pool())
            return
        for segment, view in log_.batches(self.next_offset):
            lines, n = self.batch_lines(segment, view, remaining)
            if n:
                yield lines, n
            if remaining is not None:
                remaining -= n
                if remaining <= 0:
                    return

    def batch_lines(self, segment: Any, view: Any, remaining: int | None = None) -> tuple[bytes, int]:
        """``(lines, how many)`` of one batch from ``next_offset`` on (at most ``remaining`` records),
        advancing ``next_offset`` past it: the batch-by-batch way, which :mod:`.consume_spans` also
        takes for what a span does not. Damage is raised at the segment's path and the batch's position."""
        log_ = self.log
        lo = self.next_offset
        self.next_offset = max(lo, view.header.next_offset)
        try:
            if remaining is None:
                return render_raw_jsonl_count(log_.topic, log_.partition, view.raw(), self.mode, decoder=self.decoder, lo=lo)
            lines, _offsets, ends = render_raw_jsonl_lines(
                log_.topic, log_.partition, view.raw(), self.mode, decoder=self.decoder, lo=lo
            )
        except CorruptRecordError as exc:
            raise exc.at(str(segment.log_path), view.position) from None
        n = len(ends)
        if n > remaining:
            n = remaining
            lines = lines[: ends[n - 1]]
        return lines, n


_POOL: SpanPool | None = None


def _pool() -> SpanPool:
    """The worker threads that render spans (one per CPU this process may use, at most 4), shared by
    every consume of the process."""
    global _POOL
    if _POOL is None:
        try:
            cpus = len(os.sched_getaffinity(0))
        except (AttributeError, OSError):
            cpus = os.cpu_count() or 1
        _POOL = SpanPool(min(cpus, 4))
    return _POOL


def consume(
    logdir: LogDir,
    names: list[str],
    out: BinaryIO,
    *,
    spec: OffsetSpec,
    stop_ts: int | None = None,
    count: int | None = None,
    follow: bool = False,
    interleave: bool = True,
    mode: str = "auto",
    registry=None,
) -> int:
    """Print the records of ``names`` (partition folders) to ``out``; return how many were printed.
    ``registry``: a Schema Registry's schemas (:func:`kafkafs.storage.schemas.load_registry`)."""
    readers = []
    for name in names:
        log_ = logdir.log(name)
        readers.append(_Reader(log_, start_offset(log_, spec), mode, stop_ts, decoder_for(log_.topic, registry, mode)))
    printed = 0
    whole_batches = stop_ts is None and (len(readers) == 1 or not interleave)
    while True:
        if whole_batches:
            for r in readers:
                for lines, n in r.chunks(None if count is None else count - printed):
                    out.write(lines)
                    printed += n
                    if count is not None and printed >= count:
                        out.flush()
                        return printed
            out.flush()
            if not follow:
                return printed
            _wait(readers)
            continue
        if interleave and len(readers) > 1:
            streams: Iterator = heapq.merge(*(r.lines() for r in readers))
        else:
            streams = (item for r in readers for item in r.lines())
        for _ts, _p, _o, line in streams:
            out.write(line)
            printed += 1
            if count is not None and printed >= count:
                out.flush()
                return printed
        out.flush()
        if not follow or all(r.done for r in readers):
            return printed
        _wait(readers)


def _wait(readers: list[_Reader]) -> None:
    """Until some partition has records past what was read (a second at most between checks)."""
    if len(readers) == 1:
        r = readers[0]
        while not r.log.wait_for_records(r.next_offset - 1, timeout=1.0):
            pass
        return
    while True:
        for r in readers:
            if r.log.wait_for_records(r.next_offset - 1, timeout=0):
                return
        time.sleep(0.2)


def _count(text: str) -> int:
    """``-c N``: how many records, 0 or more."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid int value: {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{value} is not a count (0 or more)")
    return value


def add_consume_arguments(p: argparse.ArgumentParser) -> None:
    """``kafkafs consume``'s own arguments (values, schemas and settings come from the command line)."""
    p.add_argument("partition", nargs="?", metavar="TOPIC[-PARTITION]", help="a partition folder, or a whole topic")
    p.add_argument("-t", "--topic", help="the topic (kcat style; every partition unless -p)")
    p.add_argument("-p", dest="partition_number", type=int, metavar="N", help="the partition (with -t)")
    p.add_argument("-o", "--offset", "--from-offset", dest="offset", action="append", metavar="OFFSET",
                   help="beginning|earliest, end|latest, N, -N (from the end), s@TS (start), e@TS (stop)")
    p.add_argument("--from-time", metavar="TS", help="first record at or after TS (epoch ms or ISO-8601 UTC)")
    p.add_argument("-c", "--count", "--max-records", dest="count", type=_count, metavar="N", help="stop after N records")
    p.add_argument("-f", "--follow", action="store_true", help="keep printing new records")
    p.add_argument("-e", dest="exit_at_end", action="store_true", help="exit at the end (the default; kcat's -e)")
    p.add_argument("--no-interleave", action="store_true", help="a whole topic partition by partition, not by time")


def start_from_args(args: argparse.Namespace) -> tuple[OffsetSpec, int | None]:
    """(where to start, the timestamp to stop before) from ``-o`` (repeatable) and ``--from-time``."""
    spec, stop_ts = OffsetSpec("beginning"), None
    for item in args.offset or []:
        if item.lower().startswith("e@"):
            stop_ts = parse_timestamp(item[2:])
        else:
            spec = parse_offset_spec(item)
    if args.from_time is not None:
        spec = OffsetSpec("time", parse_timestamp(args.from_time))
    return spec, stop_ts
