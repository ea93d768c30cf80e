"""LogDir: a whole ``log.dirs`` entry: its partitions, checkpoints, clean-shutdown marker and lock.

One writer per log directory: a writable LogDir takes Kafka's ``.lock`` (a POSIX ``fcntl`` lock, the
kind Java's ``FileChannel.tryLock`` takes, so a running broker and kafkafs exclude each other). Readers
take no lock and may read a directory a broker owns.

The clean-shutdown marker ``.kafka_cleanshutdown`` is what its presence says; a clean close puts back
the marker it found (a KRaft broker's epoch kept) or, where there was none or damage was repaired, what
Kafka 3.7 writes with no broker epoch, ``{"version":0,"brokerEpoch":-1}``. Older brokers left it empty,
and later ones write the fields as strings; all are read.
"""

from __future__ import annotations

import errno
import fcntl
import json
import logging
import os
import stat
import threading
from collections.abc import Collection, Iterator
from pathlib import Path

from ..errors import (
    ConfigError,
    CorruptRecordError,
    InvalidInput,
    InvalidName,
    LogDirLocked,
    NeedsRecovery,
    ReadOnlyError,
    RecordTooLargeError,
    UnsafeFileError,
    UsageError,
    describe_os_error,
    doing,
    tag_os_error,
)
from ..format.checkpoint import parse_offset_checkpoint, render_offset_checkpoint
from .config import Settings, SettingsUnreadable, recorded_refusal
from .dirlock import LOCK_FILE, lock_holder, locked_error
from .handles import raise_open_file_limit
from .kraft import METADATA_PARTITION, RecordedConfigsReader, recorded_topic_configs
from .local_log import fsync_directory
from .log import Log
from .names import broker_refuses_folder, is_partition_file_name, parse_partition_dir_name
from .partition_folders import alias_reason, list_partition_folders
from .partition_metadata import ensure_partition_metadata, read_topic_id
from .publish_intent import unfinished_writes
from .recovery_plan import writer_refusal
from .safefiles import (
    check_partition_folder,
    file_mode,
    is_dir,
    is_link,
    make_dir,
    open_file,
    read_regular_file,
    write_atomically,
)
from .strays import assigned_elsewhere, unnamed_partitions, unnamed_refusal

__all__ = ["LogDir", "check_log_directory", "CLEAN_SHUTDOWN_FILE", "LOCK_FILE", "CLEANER_OFFSET_FILE", "clean_shutdown_content",
           "parse_clean_shutdown"]

log = logging.getLogger("kafkafs.logdir")

CLEAN_SHUTDOWN_FILE = ".kafka_cleanshutdown"
_METADATA_TOPIC = METADATA_PARTITION.rsplit("-", 1)[0]  # __cluster_metadata
RECOVERY_POINT_FILE = "recovery-point-offset-checkpoint"
LOG_START_FILE = "log-start-offset-checkpoint"
CLEANER_OFFSET_FILE = "cleaner-offset-checkpoint"
REPLICATION_OFFSET_FILE = "replication-offset-checkpoint"
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


#: Files that only a log directory holds at its top (Kafka's LogManager and KRaft's own).
_LOGDIR_FILES = frozenset({
    "meta.properties", RECOVERY_POINT_FILE, LOG_START_FILE, CLEANER_OFFSET_FILE, "replication-offset-checkpoint",
    LOCK_FILE, CLEAN_SHUTDOWN_FILE, "bootstrap.checkpoint",
})

def check_log_directory(path: str | os.PathLike[str], *, strict: bool = True) -> None:
    """:class:`UsageError` (SPEC §4: exit 2) unless ``path`` can be a log directory: it exists, is a
    directory, and is not a partition folder (which holds segment files). ``strict`` (commands that
    only make sense on an existing log directory: verify, recover, clean, consume) also refuses a
    non-empty folder with neither partition folders nor any of a log directory's own files."""
    p = Path(path)
    if not p.exists():
        raise UsageError(f"{path}: no such log directory")
    if not p.is_dir():
        raise UsageError(f"{path}: not a directory (a log directory holds <topic>-<partition> folders)")
    try:
        names = os.listdir(p)
    except OSError as exc:
        raise UsageError(describe_os_error(tag_os_error(exc, "read {path}"))) from None
    if any(is_partition_file_name(n) for n in names):
        hint = ""
        try:
            parse_partition_dir_name(p.resolve().name)
            hint = f"; give its log directory ({p.resolve().parent}), with --partition {p.resolve().name} where taken"
        except InvalidName:
            pass
        raise UsageError(f"{path} is a partition folder, not a log directory{hint}")
    if not strict or not names or _LOGDIR_FILES & set(names):
        return
    for name in names:
        try:
            parse_partition_dir_name(name)
        except InvalidName:
            continue
        if (p / name).is_dir():
            return
    raise UsageError(f"{path}: not a log directory (no <topic>-<partition> folders, no meta.properties or checkpoints)")


class LogDir:
    """A log directory: ``open`` it, list and open partitions, ``close`` it.

    Threads: safe to share; opening, creating and closing partitions and writing the checkpoints
    serialise on one lock, and each :class:`~kafkafs.storage.log.Log` says what it allows itself."""

    def __init__(self, path: str | os.PathLike[str], settings: Settings | None = None, *, writable: bool = False) -> None:
        self.path = Path(path)
        self._path_str = os.fspath(self.path)  # paths joined without pathlib (a partition's open: issue 25)
        # the topic settings a KRaft broker recorded in this directory's metadata log, below ``settings``
        # (read on first need; a read-only directory follows their changes: follow_recorded)
        self._recorded = RecordedConfigsReader(self.path)
        self.settings = (settings or Settings()).with_recorded(self._recorded.read)
        self.writable = writable
        self._logs: dict[str, Log] = {}
        self._early_close_failures: dict[str, Exception] = {}  # :meth:`close_log`'s, raised by close()
        self._guard = threading.RLock()
        self._lock_fd: int | None = None
        self._closed = False
        #: Partition folders a writer refused (they hold links), with the one-line reason.
        self.refused: dict[str, str] = {}
        #: Partition folders that a writable open could not read (a disk error, EIO), opened read-only
        #: instead by a caller that serves what it can (``read_only_fallback``: a ``--rw`` mount), with the
        #: one-line reason (naming the file): their appends are refused with EIO (SPEC §3: local damage).
        self.unreadable: dict[str, str] = {}
        self._aliases_said: set[str] = set()  # alias partition folders already named
        if not self.path.is_dir():
            raise InvalidName(f"{self.path}: no such log directory")
        raise_open_file_limit()
        if writable:
            self._take_lock()
        #: Whether the last writer closed cleanly; partitions opened later skip recovery when it did.
        self.clean_shutdown = (self.path / CLEAN_SHUTDOWN_FILE).exists()
        #: Partitions opened later recover from their recovery point on whatever the shutdown was
        #: (``kafkafs recover``), judging what they find by how the last writer stopped.
        self.recover_all = False
        #: Partitions refused because their recovery would cut whole batches: still unrecovered, so the
        #: close writes no clean-shutdown marker (the next writer or broker must recover them).
        self._unrecovered: set[str] = set()
        #: Why the close may not write the clean-shutdown marker although every log closed (a failure
        #: that may have left a log half-written: :meth:`note_failure`); None while nothing failed.
        self._failure: str | None = None
        #: Whether the close wrote the clean-shutdown marker (set by :meth:`close`).
        self.marked_clean = False
        #: Why the close did not write it (None when it did, or before the close).
        self.not_marked_because: str | None = None
        #: The broker epoch in the marker (-1 when none, or when there is no marker).
        self.clean_shutdown_broker_epoch = NO_BROKER_EPOCH
        #: The marker's bytes as found, written back by a clean close that found nothing to repair
        #: (:meth:`_marker_content`); None when there was none or it could not be read.
        self._marker_found: bytes | None = None
        if self.clean_shutdown:
            try:
                self._marker_found = read_regular_file(self.path / CLEAN_SHUTDOWN_FILE, follow=True)
                self.clean_shutdown_broker_epoch = parse_clean_shutdown(self._marker_found)
            except (OSError, UnsafeFileError):
                pass
        #: Partitions an unfinished Spark write (its driver died while appending) named when this
        #: writable LogDir opened, to the job: written to by nothing but `kafkafs recover`, which takes the
        #: job out (an append after it would leave the job's records for good: review22 R22-7).
        self._unfinished_jobs: dict[str, str] = {}
        if writable:
            self._unfinished_jobs = {name: job.job for job in unfinished_writes(self.path) for name in job.partitions}
        self.recovery_points = self._read_checkpoint(RECOVERY_POINT_FILE)
        self._log_start_stamp = self._stamp(LOG_START_FILE)  # taken before the read: a later change is seen
        self.log_start_offsets = self._read_checkpoint(LOG_START_FILE)
        if writable and self.clean_shutdown:
            # From now until a clean close, a crash must lead to recovery: the marker goes, durably,
            # before anything is written (else a power loss could bring it back over a torn append).
            with doing("remove {path}"):
                os.unlink(self.path / CLEAN_SHUTDOWN_FILE)
            fsync_directory(self.path)

    # ------------------------------------------------------------------------------------------ lock

    def _take_lock(self) -> None:
        key = str(self.path.resolve())
        with _held_guard:
            if key in _held_locks:
                raise LogDirLocked(f"{self.path} is already open for writing in this process")
            fd = open_file(self.path / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644, doing="take {path}")
            try:
                fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                holder = lock_holder(fd)
                os.close(fd)
                raise locked_error(self.path, holder) from None
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
            return parse_offset_checkpoint(read_regular_file(path, follow=True))  # a FIFO never blocks
        except FileNotFoundError:
            return {}
        except UnsafeFileError as exc:
            log.warning("%s; ignoring it", exc)
            return {}
        except CorruptRecordError as exc:
            log.warning("%s: %s; ignoring it", path, exc.reason)
            return {}

    def _stamp(self, name: str) -> tuple[int, int, int] | None:
        try:
            st = os.stat(self.path / name)
        except OSError:
            return None
        return st.st_ino, st.st_mtime_ns, st.st_size

    def reread_log_starts(self) -> list[Log]:
        """Read-only: when ``log-start-offset-checkpoint`` changed since it was read (a broker renames a
        new one into place, review8 R8-5), read it again and raise the log start of the open partitions
        it names higher (:meth:`~kafkafs.storage.local_log.LocalLog.advance_log_start`); partitions
        opened later take it at their load. Returns the logs whose start moved. One ``stat`` when
        nothing changed; a writable directory owns the file and returns at once."""
        if self.writable or self._closed:
            return []
        stamp = self._stamp(LOG_START_FILE)
        if stamp == self._log_start_stamp:
            return []
        starts = self._read_checkpoint(LOG_START_FILE)  # before the stamp: a read that fails is tried again
        self._log_start_stamp = stamp
        with self._guard:
            self.log_start_offsets = starts
            logs = list(self._logs.values())
        return [log_ for log_ in logs
                if (start := starts.get((log_.topic, log_.partition))) is not None and log_.advance_log_start(start)]

    def follow_recorded(self) -> list[str]:
        """Read-only: read the topic settings a KRaft broker recorded again where the metadata log
        changed (a topic created with settings of its own, ``kafka-configs --alter``, a snapshot: from
        where the last reading stopped, :meth:`~.kraft.RecordedConfigsReader.update`), so that
        :attr:`settings` and the open partitions of the topics whose settings changed (their
        ``config``) say the new ones. Returns those partitions' folder names. Blocks on the reading (a
        worker thread); when nothing changed, a listing of the metadata log's folder. A writable
        directory (no broker runs beside it) returns at once."""
        if self.writable or self._closed:
            return []
        tables = self._recorded.update()
        if tables is None:
            return []
        self.settings.replace_recorded(tables)
        changed: list[str] = []
        topics: set[str] = set()
        with self._guard:  # a partition opening meanwhile took its settings before: it is here once open
            for name, log_ in self._logs.items():
                config = self.settings.for_topic(log_.topic)
                if config != log_.config:
                    log_.use_config(config)
                    changed.append(name)
                    topics.add(log_.topic)
        if topics:
            log.info("%s: the settings a broker recorded for %s changed", self.path, ", ".join(sorted(topics)))
        return changed

    def write_checkpoints(self, *, keep: Collection[str] = ()) -> None:
        """Recovery points of every open partition, and the log starts of those whose start is above
        their first segment's base (as a broker writes them), merged with the files' other entries
        (the partitions not opened, and those named in ``keep``, keep what the files said); never the
        metadata log's (``__cluster_metadata-0``), which a broker does not write there."""
        if not self.writable:
            return
        recovery = dict(self.recovery_points)
        starts = dict(self.log_start_offsets)
        for name, log_ in self._logs.items():
            if name in keep or not log_.writable:
                continue
            key = (log_.topic, log_.partition)
            recovery[key] = log_.recovery_point
            # as Kafka's LogManager: only a log start above the first segment's base is checkpointed
            first = log_.segments.first()
            if first is not None and log_.log_start_offset > first.base_offset:
                starts[key] = log_.log_start_offset
            else:
                starts.pop(key, None)
        # the logs a broker's LogManager checkpoints: every partition folder but the metadata log, which
        # its raft layer keeps apart (recovered at every start, never in these files)
        present = {key for key in map(parse_partition_dir_name, self.partition_names(aliases=True))
                   if key[0] != _METADATA_TOPIC}
        recovery = {k: v for k, v in recovery.items() if k in present}
        starts = {k: v for k, v in starts.items() if k in present}
        self._write_checkpoint(RECOVERY_POINT_FILE, recovery)
        self._write_checkpoint(LOG_START_FILE, starts)
        self.recovery_points, self.log_start_offsets = recovery, starts

    def _write_checkpoint(self, name: str, entries: dict[tuple[str, int], int]) -> None:
        """Write an offset checkpoint file unless it already holds exactly ``entries`` (in whatever order:
        a broker writes them in its own), so a directory whose partitions did not move is left byte for
        byte (review20 R20-2)."""
        path = self.path / name
        try:
            if parse_offset_checkpoint(read_regular_file(path, follow=True)) == entries:
                return
        except (OSError, UnsafeFileError, CorruptRecordError):
            pass  # missing or damaged: written
        write_atomically(path, render_offset_checkpoint(entries))

    def checkpointed(self, topic: str, partition: int) -> dict[str, int | None]:
        """What the log directory's checkpoint files say of one partition now (read afresh: a broker
        may be rewriting them): ``highWatermark`` (replication-offset-checkpoint), ``recoveryPoint``,
        ``logStartOffset``, ``cleanerOffset``; None where a file has no entry."""
        key = (topic, partition)
        return {
            field: self._read_checkpoint(name).get(key)
            for field, name in (
                ("highWatermark", REPLICATION_OFFSET_FILE),
                ("recoveryPoint", RECOVERY_POINT_FILE),
                ("logStartOffset", LOG_START_FILE),
                ("cleanerOffset", CLEANER_OFFSET_FILE),
            )
        }

    def cleaner_offsets(self) -> dict[tuple[str, int], int]:
        """``cleaner-offset-checkpoint``: how far the cleaner has compacted each partition."""
        return self._read_checkpoint(CLEANER_OFFSET_FILE)

    def update_cleaner_checkpoint(self, updates: dict[tuple[str, int], int]) -> None:
        """Merge ``updates`` into ``cleaner-offset-checkpoint`` (written atomically); partitions whose
        folder is gone are dropped, as Kafka does."""
        if not self.writable:
            raise ReadOnlyError(f"{self.path} is open read-only")
        offsets = self.cleaner_offsets()
        offsets.update(updates)
        present = {parse_partition_dir_name(n) for n in self.partition_names(aliases=True)}
        offsets = {k: v for k, v in offsets.items() if k in present}
        write_atomically(self.path / CLEANER_OFFSET_FILE, render_offset_checkpoint(offsets))

    # ------------------------------------------------------------------------------------------ partitions

    def partition_names(self, *, aliases: bool = False) -> list[str]:
        """The partition folders, sorted by topic then partition number. A folder that is a link to
        another partition folder of this directory (an alias: the same log under a second name, see
        :mod:`.partition_folders`) is left out, and named once in a warning (unless :meth:`aliases`
        was asked first: its caller says it); ``aliases=True`` keeps it, unsaid (for writers, which
        refuse it in their own words)."""
        try:
            names, found = list_partition_folders(self.path)
        except FileNotFoundError:
            return []
        for alias, own in {} if aliases else found.items():  # kept: the caller refuses and says it
            if alias not in self._aliases_said:
                self._aliases_said.add(alias)
                log.warning("%s: skipped, read as %s only", alias_reason(self.path, alias, own), own)
        if aliases and found:
            names = sorted([*names, *found], key=parse_partition_dir_name)
        return names

    def aliases(self) -> dict[str, str]:
        """The alias partition folders (each with the folder whose log it is), which the caller names
        itself: :meth:`partition_names` no longer warns of them."""
        try:
            found = list_partition_folders(self.path)[1]
        except FileNotFoundError:
            return {}
        self._aliases_said.update(found)
        return found

    def alias_of(self, name: str) -> str | None:
        """The partition folder whose log the folder ``name`` shows again when it is an alias, else None
        (a look at the folder itself; the directory is listed only when the folder is a link)."""
        if not is_link(os.path.join(self._path_str, name)):
            return None
        try:
            return list_partition_folders(self.path)[1].get(name)
        except OSError:
            return None

    def topic_partition_names(self, topic: str) -> list[str]:
        """The partition folders of ``topic``, by partition number."""
        return [name for name in self.partition_names() if parse_partition_dir_name(name)[0] == topic]

    def __iter__(self) -> Iterator[Log]:
        for name in self.partition_names():
            yield self.log(name)

    def log(self, name: str, *, read_only_fallback: bool = False) -> Log:
        """The partition folder ``name`` (``topic-N``), opened on first use (recovered if needed).

        A writable log directory refuses a partition folder that holds a symbolic link
        (:class:`~kafkafs.errors.UnsafeFileError`, remembered in :attr:`refused`); with
        ``read_only_fallback`` such a partition is opened read-only instead (a ``--rw`` mount still
        serves its regular files)."""
        with self._guard:
            existing = self._logs.get(name)
            if existing is not None:
                return existing
            topic, partition = parse_partition_dir_name(name)
            directory = self.path / name
            # one lstat says both whether it is a folder and whether it is a link (an alias); a link is
            # followed by a second look (issue 25: fewer system calls per partition open)
            mode = file_mode(os.path.join(self._path_str, name), follow=False)
            linked = mode is not None and stat.S_ISLNK(mode)
            if not (mode is not None and stat.S_ISDIR(mode) or linked and is_dir(str(directory))):
                raise InvalidName(f"no partition {name} in {self.path}")
            key = (topic, partition)
            writable = self.writable and name not in self.refused
            if (not writable or read_only_fallback) and linked:  # an alias is never read (a writer refuses it below)
                own = self.alias_of(name)
                if own is not None:
                    raise InvalidName(f"{alias_reason(self.path, name, own)}: not read; read {own}")
            if writable:
                try:
                    check_partition_folder(directory)
                except UnsafeFileError as exc:
                    self.refused[name] = str(exc)
                    if not read_only_fallback:
                        raise
                    log.warning("%s; serving it read-only", exc)
                    writable = False
                job = self._unfinished_jobs.get(name) if writable and not self.recover_all else None
                if job is not None:
                    reason = (f"{name}: an unfinished Spark write (job {job}, its driver stopped while appending) "
                              "appended to it; `kafkafs recover` takes its records out, nothing is written before")
                    self.refused[name] = reason
                    self._unrecovered.add(name)
                    if not read_only_fallback:
                        raise NeedsRecovery(reason)
                    log.warning("%s; serving it read-only", reason)
                    writable = False
                if writable and read_only_fallback:  # a --rw mount: no append by guessed settings (review17 R17-4)
                    refusal = recorded_refusal(self.settings, [topic], "no record is appended to it")
                    if refusal is None:  # nor to a folder the metadata does not name (review19 R19-5)
                        why = unnamed_partitions(self.path, [name], self.settings.recorded_topic_ids()).get(name)
                        if why is not None:
                            refusal = unnamed_refusal(why, "no record is appended to it, nothing deleted or compacted")
                    if refusal is not None:
                        self.refused[name] = f"{name}: {refusal}"
                        log.warning("%s; serving it read-only", self.refused[name])
                        writable = False
            elif name in self.refused:
                if not read_only_fallback:
                    raise UnsafeFileError(self.refused[name])
                # refused by a caller that skips it (the mount's cleaner): say it where it is served
                log.warning("%s; serving it read-only", self.refused[name])
            try:
                opened = Log.open(
                    directory,
                    self.settings.for_topic(topic),
                    writable=writable,
                    log_start_offset=self.log_start_offsets.get(key),
                    # recover_all: from the first segment on (the checkpoint keeps the entry until it closes)
                    recovery_point=None if self.recover_all else self.recovery_points.get(key),
                    clean_shutdown=self.clean_shutdown,
                    recover_all=self.recover_all,
                )
            except UnsafeFileError as exc:  # a link made after the check, or a recovery that would cut batches
                if not writable:
                    raise
                self.refused[name] = str(exc)
                if isinstance(exc, NeedsRecovery):
                    self._unrecovered.add(name)
                if not read_only_fallback:
                    raise
                log.warning("%s; serving it read-only (nothing appended, deleted or compacted there)", exc)
                opened = self._open_read_only(directory, topic, key)
            except OSError as exc:  # a disk error (EIO) reading what a writer must read: nothing was changed
                if not (writable and read_only_fallback and exc.errno == errno.EIO):
                    raise
                self.refused[name] = self.unreadable[name] = describe_os_error(exc)
                self._unrecovered.add(name)  # not recovered: the next writer or broker must
                log.error("%s: %s; serving it read-only: the reads that need the unreadable bytes fail with EIO, "
                          "the rest stays readable, appends are refused with EIO", name, self.unreadable[name])
                opened = self._open_read_only(directory, topic, key)
            self._logs[name] = opened
            return opened

    def handle_unfinished(self, job: str) -> None:
        """Let the partitions of the unfinished Spark write ``job`` open writable in this LogDir: its
        caller judges them and takes the job out (:mod:`.publish_intent`)."""
        with self._guard:
            self._unfinished_jobs = {name: j for name, j in self._unfinished_jobs.items() if j != job}

    def _open_read_only(self, directory: Path, topic: str, key: tuple[str, int]) -> Log:
        """A partition a writer refused, opened read-only for a caller that serves what it can."""
        return Log.open(directory, self.settings.for_topic(topic), writable=False,
                        log_start_offset=self.log_start_offsets.get(key),
                        recovery_point=self.recovery_points.get(key))

    def writer_refusal(self, name: str) -> str | None:
        """Why a writer would refuse partition ``name`` (a link in it, or a recovery that would cut whole
        batches), asked of a read-only look (``clean --dry-run``) and remembered in :attr:`refused`
        as a writer's open would; None when a writer would take it."""
        if name in self.refused:
            return self.refused[name]
        try:
            check_partition_folder(self.path / name)
            log_ = self.log(name)
            topic, partition = parse_partition_dir_name(name)
            reason = writer_refusal(log_.dir, log_.segments, self.recovery_points.get((topic, partition)),
                                    self.clean_shutdown)
        except UnsafeFileError as exc:
            reason = str(exc)
        if reason is not None:
            self.refused[name] = reason
        return reason

    def create_partition(self, topic: str, partition: int) -> Log:
        """Create ``topic-partition`` with an empty first segment; InvalidName for a bad name."""
        name = f"{topic}-{partition}"
        parse_partition_dir_name(name)
        with self._guard:
            directory = self.path / name
            if directory.is_symlink() and not directory.exists() or directory.exists() and not directory.is_dir():
                raise InvalidName(f"{directory} exists and is not a folder: it cannot hold partition {name}")
            if directory.exists():
                return self.log(name)
            if not self.writable:
                raise ReadOnlyError(f"{self.path} is open read-only")
            recorded = _recorded_topic(self.path, topic, partition)
            with doing("create {path}"):
                make_dir(directory)  # owned as LOGDIR when running as root
            ensure_partition_metadata(directory, topic, recorded)
            opened = Log.open(directory, self.settings.for_topic(topic), writable=True, clean_shutdown=True)
            opened.state_files.epochs.create()
            opened.state_files.topic_id = read_topic_id(directory)
            self._logs[name] = opened
            return opened

    def close_log(self, name: str) -> None:
        """Close partition ``name`` now, as :meth:`close` would (its active segment sealed, its producer
        state snapshotted), and give its descriptors back: a writer that goes through a broker's
        directory one partition at a time (``recover``) holds only the one it works on, not three
        descriptors for each of thousands of partitions (review24 R24-3: EMFILE at any usual ``ulimit
        -n``). The closed log stays known (its recovery point and log start go into the checkpoints,
        its recovery into the marker's content); it is not written to again. A failure is raised by
        :meth:`close`, which then keeps its old checkpoint entries, as for a log that fails there."""
        with self._guard:
            log_ = self._logs.get(name)
        if log_ is None:
            return
        try:
            log_.close()
        except Exception as exc:  # raised at close(), after every other log closed
            self._early_close_failures.setdefault(name, exc)

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

    def note_failure(self, reason: str) -> None:
        """A writer's work failed in a way that may have left a log half-written (an OS error in the
        middle of a write, a recovery that stopped): the close still closes every log and writes the
        checkpoints, but not the clean-shutdown marker, so the next writer or broker recovers."""
        if self._failure is None:
            self._failure = reason

    def close(self) -> None:
        """Flush and close every partition (removing the ``.deleted`` files whose delay has passed; the
        rest go at the next writable open), write the checkpoints, then the clean-shutdown marker where
        it is true (:meth:`_marker_refusal`), unlock. Every log is closed even when one fails; the
        first failure is raised after the others closed, with no marker written (as Kafka's LogManager
        writes neither checkpoints nor marker unless every log of the directory closed). A log whose
        close failed keeps its old checkpoint entries."""
        if self._closed:
            return
        self._closed = True
        self._recorded.close()
        failures: list[Exception] = list(self._early_close_failures.values())
        failed: set[str] = set(self._early_close_failures)
        try:
            for log_ in self.open_logs():
                try:
                    log_.close()
                except Exception as exc:  # the others are closed all the same; the first is raised below
                    failures.append(exc)
                    failed.add(log_.dir.name)
            if self.writable:
                self.write_checkpoints(keep=failed)
                reason = (f"{sorted(failed)[0]} did not close" if failures else None) or self._marker_refusal()
                if reason is None:
                    write_atomically(self.path / CLEAN_SHUTDOWN_FILE, self._marker_content())
                    self.marked_clean = True
                else:
                    self.not_marked_because = reason
                    log.info("%s: no clean-shutdown marker written: %s", self.path, reason)
        finally:
            self._release_lock()
        if failures:
            raise failures[0]

    def _marker_content(self) -> bytes:
        """What a clean close writes in the marker: the marker it found, byte for byte (a KRaft broker's
        own epoch kept), unless a log's recovery repaired damage in this session, or there was none:
        then Kafka 3.7's content with no broker epoch (-1).

        Why the epoch is kept: a Kafka 3.7+ broker sends it to the controller when it registers, and a
        matching one says the broker stopped cleanly, so it stays an eligible leader of its partitions
        (KIP-966's ELR); -1 makes the controller treat the restart as unclean, and a partition whose last
        eligible replica this was then needs an unclean election (review20, R20-1: a 4.4 broker restarted
        on a directory kafkafs had only recovered "using an unclean election" for every partition). What
        kafkafs does to a cleanly stopped directory (append, retention, compaction, index rebuilds) keeps
        every record a follower had; cutting or replacing damaged bytes may not, so then it says -1."""
        if self._marker_found is not None and not any(
            log_.last_recovery is not None and log_.last_recovery.damaged() for log_ in self.open_logs()
        ):
            return self._marker_found
        return clean_shutdown_content()

    def _marker_refusal(self) -> str | None:
        """Why the clean-shutdown marker would not be true of every log in the directory, or None.

        The marker tells the next broker that no log needs recovery (Kafka's LogManager then loads every
        log without looking past its recovery point). A writer may say so only of what it knows: the
        marker was there when it opened the directory (every log was clean then, and it closed what it
        touched), or it recovered every log a broker loads from this directory itself (``recover``,
        ``clean``, a directory it created), Kafka's own two cases. Never after a failure that may have
        left a log half-written, nor while a refused partition stays unrecovered."""
        if self._failure is not None:
            return self._failure
        if self._unrecovered:
            return f"{sorted(self._unrecovered)[0]} still needs recovery"
        broken = [log_.dir.name for log_ in self.open_logs() if log_.write_failed]
        if broken:
            return f"a write to {broken[0]} failed"
        if self.clean_shutdown:
            return None
        for name in _folders_a_broker_loads(self.path):
            opened = self._logs.get(name)
            if opened is None or not opened.writable or name in self.refused:
                return (f"it had none when opened and {name} was not recovered "
                        "(run kafkafs recover to recover every partition and mark it)")
        return None

    def __enter__(self) -> LogDir:
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        if exc_type is None:
            self.close()
            return
        if not isinstance(exc, _NOTHING_WRITTEN):
            self.note_failure(f"the work stopped: {exc}")
        try:
            self.close()
        except OSError as failed:  # the error on its way out says what went wrong; this one follows it
            log.warning("%s: closing it after the failure said below failed too: %s", self.path,
                        describe_os_error(failed))


#: Errors that stop a writer before it wrote anything (a refusal, a bad argument): a writable close after
#: them still writes the clean-shutdown marker where it is true.
_NOTHING_WRITTEN = (InvalidName, UsageError, UnsafeFileError, InvalidInput, ConfigError, ReadOnlyError,
                    RecordTooLargeError, SettingsUnreadable)


def _folders_a_broker_loads(path: Path) -> list[str]:
    """The folders of the log directory at ``path`` that a Kafka broker loads as logs through its
    LogManager, whose recovery the clean-shutdown marker lets it skip: every folder it reads as
    ``<topic>-<n>`` (partition folders, aliases, ``-future`` and ``-stray`` replicas), but those
    renamed for deletion (removed after the load), tiered storage's index cache and the KRaft
    metadata log (which Kafka recovers at every start, marker or not)."""
    names: list[str] = []
    with doing("list {path}", path), os.scandir(path) as listing:
        for entry in listing:
            name = entry.name
            if name.endswith("-delete") or broker_refuses_folder(name) or not entry.is_dir():
                continue
            if name.rpartition("-")[0] == _METADATA_TOPIC:
                continue
            names.append(name)
    return sorted(names)


def _recorded_topic(path: Path, topic: str, partition: int) -> str | None:
    """The topic id a KRaft broker's metadata log in ``path`` gives ``topic`` (None: no metadata log, one
    that names no topic, or the topic is not in it). A partition the metadata lacks, or assigns to other
    brokers only, is one a broker of this directory will not serve (it renames the folder ``-stray`` at
    its start): said with a warning, the folder still made."""
    if topic == _METADATA_TOPIC:
        return None
    recorded = recorded_topic_configs(path, partitions=True)
    if not recorded.topics:  # no metadata log, or one that names no topic: nothing to go by
        return None
    found = recorded.topics.get(topic)
    if found is None or partition not in found[1]:
        lacks = f"topic {topic}" if found is None else f"partition {partition} of topic {topic}"
        log.warning("%s-%d: the metadata log %s has no %s: a Kafka broker of this directory will not serve it "
                    "(it sets the folder aside as a stray at its start)", topic, partition, path / METADATA_PARTITION,
                    lacks)
    else:
        elsewhere = assigned_elsewhere(recorded, topic, found[0], partition)
        if elsewhere is not None:  # another broker's partition: a broker of this directory is no replica of it
            log.warning("%s-%d: %s: a Kafka broker of this directory will not serve it (it sets the folder aside "
                        "as a stray at its start)", topic, partition, elsewhere)
    return None if found is None else found[0]
