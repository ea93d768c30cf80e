"""What ``kafkafs consume`` reads: the partition folders a name (or kcat's ``-t``/``-p``) names, and where
each starts (``-o``, kcat's forms); :mod:`.consume` reads them from there and prints.

Where to start, per partition (``-o``/``--offset``/``--from-offset``, kcat's forms):
``beginning``/``earliest`` (the log start offset), ``end``/``latest`` (the log end offset: nothing
until new records come, with ``--follow``), ``N`` (absolute; clamped into the log), ``-N`` (N before
the end), ``s@TS`` (the first record with timestamp >= TS, epoch ms, as Kafka's ``offsetsForTimes``).

A topic without a partition number (``orders``, or ``-t orders`` without ``-p``) is every partition of
the topic. A name that is a partition folder (``orders-1``) is that partition alone; ``-t`` always
names a topic, as kcat's does (``-t orders-1``: topic ``orders-1``, folders ``orders-1-0``, ...).
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass

from .errors import CorruptRecordError, InvalidInput, InvalidName, UninflatableBatch
from .format.batch import read_batch_header
from .format.bigbatch import first_at_or_after
from .format.timestamps import format_timestamp, parse_target_time
from .storage.log import Log
from .storage.logdir import LogDir
from .storage.names import parse_partition_dir_name
from .storage.partition_folders import alias_reason

__all__ = ["OffsetSpec", "parse_offset_spec", "start_offset", "end_if_known", "read_to_end", "past_end_note",
           "resolve_partitions"]

log = logging.getLogger("kafkafs.consume")  # consume's own words

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
        # kcat's -N is N from the end, -0 included (start at the end: nothing old), not offset 0
        return OffsetSpec("tail", -n) if t.startswith("-") else OffsetSpec("offset", n)
    if low.startswith("s@"):
        return OffsetSpec("time", parse_target_time(t[2:]))
    raise InvalidInput(
        f"not an offset: {text!r} (use beginning|earliest, end|latest, N, -N from the end, or s@TIMESTAMP_MS)"
    )


def end_if_known(log_: Log) -> int | None:
    """``log_``'s log end offset; None when its active segment cannot be read (an OSError: EACCES, EIO),
    which its end is read from: a reader reads the sealed segments before it, and the read of the active
    one meets the error and says it (fix58: such a partition printed nothing, its sealed records too)."""
    try:
        return log_.log_end_offset
    except OSError:
        return None


def read_to_end(reader_next_offset: int, log_: Log) -> bool:
    """Whether a reader at ``reader_next_offset`` has read ``log_`` to its end (not when the end is not
    known: :func:`end_if_known`)."""
    end = end_if_known(log_)
    return end is not None and reader_next_offset >= end


def start_offset(log_: Log, spec: OffsetSpec) -> int:
    """The first offset ``spec`` names in ``log_``, within [log start, log end]. A start that needs the
    end when it cannot be read (:func:`end_if_known`) raises its OSError."""
    lo, hi = log_.log_start_offset, end_if_known(log_)
    if spec.kind == "beginning":
        return lo
    if spec.kind in ("end", "tail"):
        end = hi if hi is not None else log_.log_end_offset  # (unknown: raises the OSError again)
        return end if spec.kind == "end" else max(end - spec.value, lo)
    if spec.kind == "time":
        found = _offset_at_time(log_, spec.value)
        if found is not None:
            return found
        return hi if hi is not None else log_.log_end_offset
    return max(spec.value, lo) if hi is None else min(max(spec.value, lo), hi)


def _offset_at_time(log_: Log, timestamp: int) -> int | None:
    """The offset of the first record whose timestamp is >= ``timestamp`` (None: every record is older).
    When it is in a batch too large to inflate at once (its header's largest timestamp reaches it, R15-7),
    that v2 batch's records are decoded a run at a time up to it (:func:`~.format.bigbatch.first_at_or_after`);
    a legacy wrapper's first offset (consume says it is not shown and goes on after it)."""
    try:
        found = log_.offset_for_timestamp(timestamp)
    except UninflatableBatch as exc:
        if exc.next_offset is None:
            raise
        first = exc.base_offset if exc.base_offset is not None else exc.next_offset - 1
        got = next(iter(log_.batches(first)), None)
        if got is not None and got[1].header.magic == 2 and got[1].header.next_offset == exc.next_offset:
            raw = got[1].raw()
            header = read_batch_header(raw, 0)
            try:
                if header is None:
                    raise CorruptRecordError("the batch's header does not parse")
                inside = first_at_or_after(raw, header, timestamp)
            except CorruptRecordError:
                inside = first  # damage: the read from the batch meets it and says so
            first = inside if inside is not None else exc.next_offset
        return max(first, log_.log_start_offset)
    return found[0] if found else None


def past_end_note(log_: Log, spec: OffsetSpec) -> str | None:
    """What ``consume`` says on stderr when ``spec`` asks for a start past the partition's last record
    (SPEC §4: a script and a person can tell "no records there" from "nothing printed"); None when the
    start is within the log (or is its end, asked for by name)."""
    end = log_.log_end_offset
    if spec.kind == "offset" and spec.value >= end:
        asked = f"offset {spec.value}"
    elif spec.kind == "time" and _offset_at_time(log_, spec.value) is None:
        asked = format_timestamp(spec.value)
    else:
        return None
    name = f"{log_.topic}-{log_.partition}"
    if end <= log_.log_start_offset:
        return f"{name}: nothing at or after {asked}: the partition holds no records (its next offset is {end})"
    return f"{name}: nothing at or after {asked}: the partition ends at offset {end - 1} (its next offset is {end})"


def resolve_partitions(logdir: LogDir, name: str | None, topic: str | None, partition: int | None) -> list[str]:
    """The partition folders to read: ``name`` as a partition folder, else as a topic (every partition);
    ``-t``/``-p`` kcat style: ``-t`` names a topic, always (``-t a-1`` is topic ``a-1``, every partition,
    as kcat reads it, never partition 1 of topic ``a``). ``InvalidName`` when nothing matches, or when
    the partition asked is an alias of another one (a link to its folder: the same log twice); a topic's
    aliases are left out with a warning."""
    if name is not None and name.endswith("/") and name.strip("/"):
        name = name.rstrip("/")  # a shell's completion of the folder (no topic has a / in its name)
    aliases = logdir.aliases()
    names = logdir.partition_names()
    for asked in (name, f"{topic}-{partition}" if topic is not None and partition is not None else None):
        if asked in aliases:
            raise InvalidName(f"{alias_reason(logdir.path, asked, aliases[asked])}: not read; read {aliases[asked]}")
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
        matches = _topic_partitions(names, topic)
        _skip_aliases(logdir, aliases, topic, matches)
        if not matches:
            hint = ""
            if topic in names:
                folder_topic, number = parse_partition_dir_name(topic)
                hint = f" ({topic} is partition {number} of topic {folder_topic}: -t {folder_topic} -p {number})"
            raise InvalidName(f"no topic {topic} in {logdir.path}{hint}")
        return matches
    if name in names:
        return [name]
    matches = _topic_partitions(names, name)
    _skip_aliases(logdir, aliases, name, matches)
    if not matches:
        raise InvalidName(f"no partition {name} and no topic {name} in {logdir.path}")
    return matches


def _topic_partitions(names: list[str], topic: str) -> list[str]:
    return [n for n in names if parse_partition_dir_name(n)[0] == topic]


def _skip_aliases(logdir: LogDir, aliases: dict[str, str], topic: str, matches: list[str]) -> None:
    """The aliases among ``topic``'s partition folders: each named in a warning (or, when the topic has
    nothing else, in the error: InvalidName)."""
    mine = _topic_partitions(list(aliases), topic)
    if mine and not matches:
        raise InvalidName(f"{alias_reason(logdir.path, mine[0], aliases[mine[0]])}: not read; read {aliases[mine[0]]}")
    for alias in mine:
        log.warning("%s: skipped, read as %s only", alias_reason(logdir.path, alias, aliases[alias]), aliases[alias])
