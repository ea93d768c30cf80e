"""``kafkafs produce``: lines on a descriptor, grouped as the ``append`` file groups one write, appended
through the compiled write path (:mod:`kafkafs.format.lineencode`)."""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, NamedTuple

from .errors import InvalidInput, InvalidName, UsageError, note_os_error
from .format.compression import codec_by_name
from .format.lineencode import encode_lines
from .storage.append_rules import RecordRefused, check_batches
from .storage.config import SettingsUnreadable, recorded_refusal
from .storage.kraft import METADATA_PARTITION, recorded_topic_configs
from .storage.logdir import LogDir
from .storage.names import parse_partition_dir_name, refuse_internal_topic
from .storage.strays import (
    NEW_PARTITION_REFUSED,
    stray_consequence,
    stray_partitions,
    unnamed_partitions,
    unnamed_refusal,
)

__all__ = ["read_line_blobs", "produce", "produce_refusal", "Produced", "MAX_LINES", "MAX_BYTES",
           "stops_between_batches", "count_records", "appended_before"]

log = logging.getLogger("kafkafs.produce")


def count_records(n: int) -> str:
    """``1 record``, ``2 records``."""
    return f"{n} record" if n == 1 else f"{n} records"


def appended_before(n: int) -> str:
    """``the record before it was appended``, ``the 2 records before it were appended``."""
    return "the record before it was appended" if n == 1 else f"the {n} records before it were appended"

#: A group (one batch, appended at once): at most this many lines, cut once its lines reach MAX_BYTES,
#: so that a batch stays under ``max.message.bytes``.
MAX_LINES = 1000
MAX_BYTES = 512 * 1024


def read_line_blobs(fd: int) -> Iterator[tuple[int, bytes]]:
    """Complete lines as they arrive on ``fd``, as ``(first line number, lines)``: the complete lines of
    one ``read()`` joined by their newlines (without the last), as the ``append`` file takes one
    ``write()``; :func:`kafkafs.format.lineencode.encode_lines` cuts them into groups of
    :data:`MAX_LINES` / :data:`MAX_BYTES`. A last line without a newline counts at end of input."""
    pending = b""
    number = 1
    while True:
        chunk = _read(fd)
        if not chunk:
            if pending:
                yield number, pending
            return
        data = pending + chunk
        cut = data.rfind(b"\n")
        if cut < 0:
            pending = data
            continue
        blob = data[:cut]
        pending = data[cut + 1 :]
        yield number, blob
        number += blob.count(b"\n") + 1


class Produced(NamedTuple):
    """What :func:`produce` appended: how many records, their first and last offsets, and the failure
    that stopped it (a bad line: the groups before it are appended), or None. An OS error (a full
    disk) is raised, noted with how many records the groups before it appended (``note_os_error``)."""

    total: int
    first_offset: int | None
    last_offset: int | None
    failure: str | None


class Terminated(KeyboardInterrupt):
    """SIGTERM while :func:`produce` runs: it stops as for Ctrl-C, and the exit status says SIGTERM."""

    exit_code = 128 + signal.SIGTERM
    said = "SIGTERM"


class HungUp(KeyboardInterrupt):
    """SIGHUP (the terminal closed) while :func:`produce` runs: it stops as for Ctrl-C, exit 128 + 1."""

    exit_code = 128 + signal.SIGHUP
    said = "SIGHUP"


def _terminated(_signum: int, _frame: object) -> None:
    raise Terminated


def _hung_up(_signum: int, _frame: object) -> None:
    raise HungUp


_STOPS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def _read(fd: int) -> bytes:
    """``os.read`` of ``fd``, the one place where a stop signal held by :func:`stops_between_batches` is
    taken (as a KeyboardInterrupt): between batches, where nothing is half-written."""
    held = signal.pthread_sigmask(signal.SIG_UNBLOCK, _STOPS)
    try:
        return os.read(fd, 1 << 20)
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, held)


@contextmanager
def stops_between_batches() -> Iterator[None]:
    """SIGINT, SIGTERM and SIGHUP stop ``produce`` only while it waits for input (review22 R22-3): they are
    held everywhere else (opening the log directory, appending, closing it: a batch is never cut, the
    close puts the clean-shutdown marker back) and taken in :func:`read_line_blobs`, as a KeyboardInterrupt
    (:class:`Terminated`, :class:`HungUp`); one that comes while it is held is raised as the block ends.
    SIGTERM and SIGHUP get their handlers here (in the main thread, where signals are taken); a SIGHUP
    ignored (``nohup``) stays ignored."""
    main = threading.current_thread() is threading.main_thread()
    previous: list[tuple[signal.Signals, Any]] = []
    if main:
        previous.append((signal.SIGTERM, signal.signal(signal.SIGTERM, _terminated)))
        if signal.getsignal(signal.SIGHUP) == signal.SIG_DFL:
            previous.append((signal.SIGHUP, signal.signal(signal.SIGHUP, _hung_up)))
    held = signal.pthread_sigmask(signal.SIG_BLOCK, _STOPS)
    try:
        yield
    finally:
        try:
            signal.pthread_sigmask(signal.SIG_SETMASK, held)  # one held meanwhile is raised here
        finally:
            for signum, handler in previous:
                signal.signal(signum, handler)


@contextmanager
def _stops_wait() -> Iterator[None]:
    """A signal that stops produce (SIGINT, SIGTERM) waits until the append under way and its count are
    done (it is raised as the block ends), so that what produce says it appended is what the log holds."""
    held = signal.pthread_sigmask(signal.SIG_BLOCK, _STOPS)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, held)


def produce_refusal(logdir: LogDir, name: str) -> str | None:
    """Why ``produce`` appends nothing to partition ``name`` of ``logdir`` (existing or not), or None: the
    settings a broker recorded cannot be trusted for its topic (:func:`~.storage.config.recorded_refusal`),
    or a whole metadata log does not name its topic, or names it with another id than the folder's
    (:func:`~.storage.strays.unnamed_partitions`, review19 R19-5): a broker of this directory has no such
    partition (a producer's request for it fails: UNKNOWN_TOPIC_OR_PARTITION), sets the folder aside as
    a stray and serves none of its records, and its settings would be guessed."""
    topic = parse_partition_dir_name(name)[0]
    refusal = recorded_refusal(logdir.settings, [topic], "no record is appended by guessed settings")
    if refusal is not None:
        return f"{logdir.path}: refused: {refusal}"
    why = unnamed_partitions(logdir.path, [name], logdir.settings.recorded_topic_ids()).get(name)
    if why is None:
        return None
    return f"{name}: refused: " + unnamed_refusal(why, NEW_PARTITION_REFUSED)


def leader_epoch_refusal(logdir: LogDir, name: str, epoch: int) -> str | None:
    """Why ``produce --leader-epoch epoch`` is refused for partition ``name`` of ``logdir`` (a usage
    error), or None: an epoch above the partition's current leader epoch, as the directory's metadata
    log records it (review21 R21-6: a broker of the directory then cuts it out of its epoch cache, WARN,
    and the log's epochs go back). Not judged when the metadata log does not name the partition."""
    topic, partition = parse_partition_dir_name(name)
    if not (logdir.path / METADATA_PARTITION).is_dir():
        return None
    recorded = recorded_topic_configs(logdir.path, partitions=True)
    named = (recorded.topics or {}).get(topic)
    if recorded.damage is not None or named is None:
        return None
    current = recorded.leader_epochs.get(named[0], {}).get(partition)
    if current is None or epoch <= current:
        return None
    return (f"--leader-epoch {epoch} is above the leader epoch {current} the metadata log ({METADATA_PARTITION}) "
            f"records for {name}: a broker of this directory would cut it out of its epoch cache")


def produce(logdir: LogDir, name: str, fd: int, *, no_create: bool = False, leader_epoch: int | None = None) -> Produced:
    """Append the lines of ``fd`` to partition ``name`` of ``logdir`` (created once there is something
    valid to put in it, unless ``no_create``), a group at a time; a bad line stops it (exit 1, SPEC §4)."""
    topic, partition = parse_partition_dir_name(name)
    refuse_internal_topic(topic)
    # max.message.bytes, segment.bytes, compression.type, ...: never guessed (review17 R17-4, review19 R19-5)
    refusal = produce_refusal(logdir, name)
    if refusal is not None:  # before the partition is opened or made: nothing changed
        raise SettingsUnreadable(refusal)
    if leader_epoch is not None:
        refusal = leader_epoch_refusal(logdir, name, leader_epoch)
        if refusal is not None:
            raise UsageError(refusal)
    exists = name in logdir.partition_names(aliases=True)  # an alias is refused as it opens
    if not exists and no_create:
        raise InvalidName(f"no partition {name} in {logdir.path} (drop --no-create to create it)")
    log_ = logdir.log(name) if exists else None
    if log_ is not None:  # a folder a broker of the directory sets aside (a new one: create_partition says it)
        for why in stray_partitions(logdir.path, [name]).values():
            log.warning("%s: %s: %s (appended all the same)", name, why, stray_consequence(name))
    config = log_.config if log_ is not None else logdir.settings.for_topic(topic)
    codec = codec_by_name(config.compression_type)
    total, first_offset, last_offset = 0, None, None
    previous = signal.signal(signal.SIGTERM, _terminated) if threading.current_thread() is threading.main_thread() else None
    try:
        for first_line, blob in read_line_blobs(fd):
            start = 0
            while start <= len(blob):
                try:
                    group = encode_lines(
                        blob, start, now=log_.clock() if log_ is not None else time.time_ns() // 1_000_000,
                        codec=codec, max_message_bytes=config.max_batch_bytes, first_number=first_line,
                        max_lines=MAX_LINES, max_bytes=MAX_BYTES,
                    )
                except InvalidInput as exc:
                    done = f"; {appended_before(total)}" if total else ""
                    return Produced(total, first_offset, last_offset, f"{exc}; nothing from its batch was appended{done}")
                with _stops_wait():
                    try:
                        if log_ is None:  # a refused record creates no partition
                            check_batches(group.data, config, name, time.time_ns() // 1_000_000)
                            log_ = logdir.create_partition(topic, partition)
                            print(f"kafkafs: created partition {name}", file=sys.stderr)
                        if leader_epoch is not None:
                            log_.set_leader_epoch(leader_epoch)
                        result = log_.append_batches(group.data, client=True)
                    except RecordRefused as exc:
                        done = f"; {appended_before(total)}" if total else ""
                        return Produced(total, first_offset, last_offset,
                                        f"{exc.at_line(first_line)}; nothing from its batch was appended{done}")
                    except OSError as exc:  # a full disk, ...: its line says what the groups before it appended
                        if total:
                            note_os_error(exc, f"; {appended_before(total)}")
                        raise
                    total += group.taken
                    first_line += group.taken
                    start = group.end
                    first_offset = result.first_offset if first_offset is None else first_offset
                    last_offset = result.last_offset
        return Produced(total, first_offset, last_offset, None)
    except KeyboardInterrupt as exc:  # Ctrl-C or SIGTERM: said with what was appended (R12-9), then stopped
        how = getattr(exc, "said", "interrupted")
        if total:
            print(f"kafkafs: {how}: {appended_before(total)} to {name}, at offsets "
                  f"{first_offset}..{last_offset} (do not send them again)", file=sys.stderr)
        else:
            print(f"kafkafs: {how}: nothing was appended", file=sys.stderr)
        raise
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
        if log_ is not None:
            log_.flush()
