"""LogDir: a whole ``log.dirs`` entry: its partitions, checkpoints, clean-shutdown marker and lock.

One writer per log directory: a writable LogDir takes Kafka's ``.lock`` (a POSIX ``fcntl`` lock, the
kind Java's ``FileChannel.tryLock`` takes, so a running broker and kafkafs exclude each other). Readers
take no lock and may read a directory a broker owns.

The clean-shutdown marker ``.kafka_cleanshutdown`` is what its presence says; its content is what Kafka
3.7 writes, ``{"version":0,"brokerEpoch":-1}`` (-1: no broker epoch, as a ZooKeeper-mode broker writes
it). Older brokers left it empty, and later ones write the fields as strings; all are read.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import threading
from collections.abc import Iterator
from pathlib import Path

from ..errors import CorruptRecordError, InvalidName, LogDirLocked
from ..format.checkpoint import parse_offset_checkpoint, render_offset_checkpoint
from .config import Settings
from .handles import raise_open_file_limit
from .kraft import recorded_topic_configs
from .log import Log, fsync_directory, parse_partition_dir_name

__all__ = ["LogDir", "CLEAN_SHUTDOWN_FILE", "LOCK_FILE", "CLEANER_OFFSET_FILE", "clean_shutdown_content",
           "parse_clean_shutdown"]

log = logging.getLogger("kafkafs.logdir")

CLEAN_SHUTDOWN_FILE = ".kafka_cleanshutdown"
LOCK_FILE = ".lock"
RECOVERY_POINT_FILE = "recovery-point-offset-checkpoint"
LOG_START_FILE = "log-start-offset-checkpoint"
CLEANER_OFFSET_FILE = "cleaner-offset-checkpoint"
#: The broker epoch kafkafs writes in the clean-shutdown marker: none (Kafka's -1).
NO_BROKER_EPOCH = -1

_held_locks: set[str] = set()  # fcntl locks are per process: keep two LogDirs of ours apart too
_held_guard = threading.Lock()


def clean_shutdown_content(broker_epoch: int = NO_BROKER_EPOCH) -> bytes:
    """The clean-shutdown marker's content, byte for byte as Kafka 3.7 writes it."""
    return b'{"version":0,"brokerEpoch":%d}' % broker_epoch


def parse_clean_shutdown(data: bytes) -> int:
    """The broker epoch a clean-shutdown marker records, -1 when none: an empty file (older brokers),
    ``{"version":0,"brokerEpoch":N}`` (3.7) or ``{"version":"0","broker_epoch":"N"}`` (later ones).
    Content that does not parse counts as no epoch (Kafka logs a warning and goes on: the file's
    presence is what marks the clean shutdown)."""
    if not data.strip():
        return NO_BROKER_EPOCH
    try:
        content = json.loads(data)
        value = content.get("brokerEpoch", content.get("broker_epoch", NO_BROKER_EPOCH))
        return int(value)
    except (ValueError, TypeError, AttributeError):
        log.warning("the clean-shutdown marker does not parse: %r", bytes(data[:100]))
        return NO_BROKER_EPOCH


def write_atomically(path: Path, data: bytes) -> None:
    """Write to ``path.tmp``, fsync, rename over ``path``, fsync the folder (Kafka's checkpoint way)."""
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    fsync_directory(path.parent)


class LogDir:
    """A log directory: ``open`` it, list and open partitions, ``close`` it."""

    def __init__(self, path: str | os.PathLike[str], settings: Settings | None = None, *, writable: bool = False) -> None:
        self.path = Path(path)
        # the topic settings a KRaft broker recorded in this directory's metadata log, below ``settings``
        self.settings = (settings or Settings()).with_recorded(lambda: recorded_topic_configs(self.path))
        self.writable = writable
        self._logs: dict[str, Log] = {}
        self._guard = threading.RLock()
        self._lock_fd: int | None = None
        self._closed = False
        if not self.path.is_dir():
            raise InvalidName(f"{self.path}: no such log directory")
        raise_open_file_limit()
        if writable:
            self._take_lock()
        #: Whether the last writer closed cleanly; partitions opened later skip recovery when it did.
        self.clean_shutdown = (self.path / CLEAN_SHUTDOWN_FILE).exists()
        #: The broker epoch in the marker (-1 when none, or when there is no marker).
        self.clean_shutdown_broker_epoch = NO_BROKER_EPOCH
        if self.clean_shutdown:
            try:
                self.clean_shutdown_broker_epoch = parse_clean_shutdown((self.path / CLEAN_SHUTDOWN_FILE).read_bytes())
            except OSError:
                pass
        self.recovery_points = self._read_checkpoint(RECOVERY_POINT_FILE)
        self.log_start_offsets = self._read_checkpoint(LOG_START_FILE)
        if writable and self.clean_shutdown:
            # From now until a clean close, a crash must lead to recovery: the marker goes, durably,
            # before anything is written (else a power loss could bring it back over a torn append).
            os.unlink(self.path / CLEAN_SHUTDOWN_FILE)
            fsync_directory(self.path)

    # ------------------------------------------------------------------------------------------ lock

    def _take_lock(self) -> None:
        key = str(self.path.resolve())
        with _held_guard:
            if key in _held_locks:
                raise LogDirLocked(f"{self.path} is already open for writing in this process")
            fd = os.open(self.path / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                os.close(fd)
                raise LogDirLocked(
                    f"{self.path} is locked by another writer (a broker or kafkafs holds {LOCK_FILE}); "
                    "open it read-only instead"
                ) from None
            _held_locks.add(key)
            self._lock_fd = fd
            self._lock_key = key

    def _release_lock(self) -> None:
        if self._lock_fd is not None:
            fcntl.lockf(self._lock_fd, fcntl.LOCK_UN)
            os.close(self._lock_fd)
            self._lock_fd = None
            with _held_guard:
                _held_locks.discard(self._lock_key)

    # ------------------------------------------------------------------------------------------ checkpoints

    def _read_checkpoint(self, name: str) -> dict[tuple[str, int], int]:
        path = self.path / name
        try:
            return parse_offset_checkpoint(path.read_bytes())
        except FileNotFoundError:
            return {}
        except CorruptRecordError as exc:
            log.warning("%s: %s; ignoring it", path, exc.reason)
            return {}

    def write_checkpoints(self) -> None:
        """Recovery points and log start offsets of every open partition, merged with the files'."""
        if not self.writable:
            return
        recovery = dict(self.recovery_points)
        starts = dict(self.log_start_offsets)
        for log_ in self._logs.values():
            key = (log_.topic, log_.partition)
            recovery[key] = log_.recovery_point
            starts[key] = log_.log_start_offset
        present = {parse_partition_dir_name(n) for n in self.partition_names()}
        recovery = {k: v for k, v in recovery.items() if k in present}
        starts = {k: v for k, v in starts.items() if k in present}
        write_atomically(self.path / RECOVERY_POINT_FILE, render_offset_checkpoint(recovery))
        write_atomically(self.path / LOG_START_FILE, render_offset_checkpoint(starts))
        self.recovery_points, self.log_start_offsets = recovery, starts

    def cleaner_offsets(self) -> dict[tuple[str, int], int]:
        """``cleaner-offset-checkpoint``: how far the cleaner has compacted each partition."""
        return self._read_checkpoint(CLEANER_OFFSET_FILE)

    def update_cleaner_checkpoint(self, updates: dict[tuple[str, int], int]) -> None:
        """Merge ``updates`` into ``cleaner-offset-checkpoint`` (written atomically); partitions whose
        folder is gone are dropped, as Kafka does."""
        if not self.writable:
            from ..errors import ReadOnlyError

            raise ReadOnlyError(f"{self.path} is open read-only")
        offsets = self.cleaner_offsets()
        offsets.update(updates)
        present = {parse_partition_dir_name(n) for n in self.partition_names()}
        offsets = {k: v for k, v in offsets.items() if k in present}
        write_atomically(self.path / CLEANER_OFFSET_FILE, render_offset_checkpoint(offsets))

    # ------------------------------------------------------------------------------------------ partitions

    def partition_names(self) -> list[str]:
        """The partition folders, sorted by topic then partition number."""
        out = []
        try:
            entries = list(os.scandir(self.path))
        except FileNotFoundError:
            return []
        for entry in entries:
            if not entry.is_dir():
                continue
            try:
                out.append((parse_partition_dir_name(entry.name), entry.name))
            except InvalidName:
                continue
        return [name for _key, name in sorted(out)]

    def __iter__(self) -> Iterator[Log]:
        for name in self.partition_names():
            yield self.log(name)

    def log(self, name: str) -> Log:
        """The partition folder ``name`` (``topic-N``), opened on first use (recovered if needed)."""
        with self._guard:
            existing = self._logs.get(name)
            if existing is not None:
                return existing
            topic, partition = parse_partition_dir_name(name)
            directory = self.path / name
            if not directory.is_dir():
                raise InvalidName(f"no partition {name} in {self.path}")
            key = (topic, partition)
            opened = Log.open(
                directory,
                self.settings.for_topic(topic),
                writable=self.writable,
                log_start_offset=self.log_start_offsets.get(key),
                recovery_point=self.recovery_points.get(key),
                clean_shutdown=self.clean_shutdown,
            )
            self._logs[name] = opened
            return opened

    def create_partition(self, topic: str, partition: int) -> Log:
        """Create ``topic-partition`` with an empty first segment; InvalidName for a bad name."""
        name = f"{topic}-{partition}"
        parse_partition_dir_name(name)
        with self._guard:
            directory = self.path / name
            if directory.exists():
                return self.log(name)
            if not self.writable:
                from ..errors import ReadOnlyError

                raise ReadOnlyError(f"{self.path} is open read-only")
            directory.mkdir()
            opened = Log.open(directory, self.settings.for_topic(topic), writable=True, clean_shutdown=True)
            self._logs[name] = opened
            return opened

    def open_logs(self) -> list[Log]:
        with self._guard:
            return list(self._logs.values())

    # ------------------------------------------------------------------------------------------ close

    def flush(self) -> None:
        for log_ in self.open_logs():
            log_.flush()
        self.write_checkpoints()

    def delete_expired_files(self) -> list[str]:
        """Remove the files of the open partitions' ``.deleted`` segments whose ``file.delete.delay.ms``
        has passed; return their ``.log`` names."""
        names: list[str] = []
        if self.writable:
            for log_ in self.open_logs():
                names.extend(log_.delete_expired_files())
        return names

    def close(self) -> None:
        """Flush and close every partition (removing the ``.deleted`` files whose delay has passed; the
        rest go at the next writable open), write the checkpoints and the clean-shutdown marker, unlock."""
        if self._closed:
            return
        self._closed = True
        try:
            for log_ in self.open_logs():
                log_.close()
            if self.writable:
                self.write_checkpoints()
                write_atomically(self.path / CLEAN_SHUTDOWN_FILE, clean_shutdown_content())
        finally:
            self._release_lock()

    def __enter__(self) -> LogDir:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
