"""The cleaner: retention and compaction over a log directory, once (``kafkafs clean``) or all the
time in the background of a ``--rw`` mount (Kafka's LogCleaner thread and the log manager's retention
task, reduced).

- :mod:`.retention` deletes whole segments by ``retention.ms`` / ``retention.bytes``;
- :mod:`.compaction` keeps the latest record per key, in rounds bounded by the offset map
  (:mod:`.offset_map`, ``log.cleaner.dedupe.buffer.size``);
- this module runs them: :func:`clean_logdir` over every partition once (with a progress line on
  long runs), :class:`LogCleaner` in a thread, which every ``log.retention.check.interval.ms`` applies
  retention to the logs that are not compacted and otherwise compacts the dirtiest log whose dirty
  ratio reaches ``min.cleanable.dirty.ratio`` (or whose oldest dirty record is past
  ``max.compaction.lag.ms``), looking for one again ``log.cleaner.backoff.ms`` after finding none. The
  two run on their own schedules, as a broker's retention task and cleaner thread do: the backoff never
  delays a retention check (retention first runs ``log.initial.task.delay.ms`` after the start, as a
  broker's does).

Compacted logs (``compact``, ``compact,delete``) get their retention from the cleaner, after the
compaction, as Kafka's do (review17 R17-1): its retention task skips them (``LogManager.cleanupLogs``),
and the LogCleaner's thread, each time it looks for a log to clean, compacts the filthiest one (if any
is cleanable) and then runs ``deleteOldSegments`` on every compacted log (``deletableLogs``): so
``retention.bytes`` and ``retention.ms`` judge what compaction left, and still apply when nothing was
cleanable. ``clean`` does the same per partition: compaction, then retention; a dry run judges the
segments its compaction foresees. With ``log.cleaner.enable=false`` there is no cleaner, so a
compacted log gets neither (nor does a broker's), and the other logs keep their retention.

After each compaction round the offset a partition is clean up to goes to the log directory's
``cleaner-offset-checkpoint``, where the next round (or run) starts.

Neither deletes by settings it could not read: when the topic settings a KRaft broker recorded in
``__cluster_metadata`` cannot all be read (damage: the records in or past it may set or delete any
topic's), :func:`clean_logdir` refuses every topic (:class:`SettingsUnreadable`, before anything is
read or changed) and :class:`LogCleaner` cleans nothing, said once (SPEC §8; review6 F16).
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, TextIO

from ..errors import CorruptRecordError, UninflatableBatch, UnsafeFileError, note_os_error
from .compaction import PlannedSegment, clean_log, cleanable_segments, log_to_clean, now_ms
from .compaction_filter import CleanStats
from .config import LONG_MAX, Settings, SettingsUnreadable, broker_setting, recorded_refusal
from .offset_map import BYTES_PER_ENTRY, OffsetMap
from .retention import apply_retention
from .strays import unnamed_partitions, unnamed_refusal

if TYPE_CHECKING:
    from .log import Log
    from .logdir import LogDir
    from .segment import LogSegment

__all__ = ["apply_retention", "compact", "cleanable_segments", "clean_logdir", "LogCleaner", "CleanerStopped",
           "SettingsUnreadable", "settings_refusal", "settings_note", "partition_topics", "not_compacted_reason",
           "damaged_reason"]

log = logging.getLogger("kafkafs.cleaner")


class CleanerStopped(Exception):
    """Raised inside a compaction when its cleaner is being stopped (the round is abandoned)."""


def settings_refusal(settings: Settings, topics: Iterable[str] = ()) -> str | None:
    """Why cleaning ``topics`` by ``settings`` is refused (:func:`~.config.recorded_refusal`), or None."""
    return recorded_refusal(settings, topics, "no topic is cleaned by them")


def settings_note(settings: Settings) -> str | None:
    """A note to say when the settings are read from a metadata log that ends in a torn tail."""
    return settings.recorded_torn()[0]


def not_compacted_reason(exc: UninflatableBatch) -> str:
    """Why a partition holding a batch too large to inflate is not compacted (its records cannot be
    keyed): valid data, kept as it is, like a damaged partition's refusal but not damage (review19 R19-1)."""
    return f"not compacted: a batch is too large to inflate (valid data, not damage; kept as is): {exc}"


def damaged_reason(exc: CorruptRecordError) -> str:
    """Why a partition whose cleaning met damage is not cleaned (review22 R22-5): as Kafka's LogCleaner
    marks such a log uncleanable, it is left as it is from there (a compaction round under way leaves
    nothing behind; a round done before it is said above) and the other partitions are cleaned."""
    return (f"not compacted: damaged data: {exc} (no compaction or retention there from it on; "
            "kafkafs recover repairs it)")


def partition_topics(logdir: LogDir) -> set[str]:
    """The topics of the partition folders of ``logdir``."""
    return {name.rpartition("-")[0] for name in logdir.partition_names()}


def _map_for(dirty_bytes: int, memory: int, load_factor: float) -> OffsetMap:
    """An offset map of ``memory`` bytes, or less when the dirty section cannot hold that many keys (a
    record takes at least 7 bytes): small logs do not pay for a large map."""
    needed = int(dirty_bytes // 7 / load_factor + 2) * BYTES_PER_ENTRY
    return OffsetMap(max(min(memory, needed), 64 * BYTES_PER_ENTRY), load_factor)


def compact(target: Log, now_ms: int, *, dry_run: bool = False, checkpoint: int | None = None,
            memory: int | None = None, settings: Settings | None = None) -> list[str]:
    """Compact the cleanable part of ``target`` from ``checkpoint`` (default: the log start); return a
    line per rewritten group of segments."""
    return _compact(target, now_ms, dry_run=dry_run, checkpoint=checkpoint, memory=memory, settings=settings)[0]


def _compact(target: Log, now: int, *, dry_run: bool, checkpoint: int | None = None, memory: int | None = None,
             settings: Settings | None = None, stats: CleanStats | None = None, on_round: Callable[[int], None] | None = None,
             on_line: Callable[[str], None] | None = None,
             layout: list[LogSegment | PlannedSegment] | None = None) -> tuple[list[str], int | None]:
    if not target.config.compact:
        return [], None
    memory = broker_setting(settings, "log.cleaner.dedupe.buffer.size") if memory is None else memory
    load = broker_setting(settings, "log.cleaner.io.buffer.load.factor")
    io_buffer = broker_setting(settings, "log.cleaner.io.buffer.size")
    state = log_to_clean(target, now, checkpoint)
    if state.first_dirty >= state.upper:
        if layout is not None:
            layout.extend(target.segments)
        return [], None
    omap = _map_for(state.dirty_bytes, memory, load)
    return clean_log(target, now, omap, checkpoint=checkpoint, io_buffer=io_buffer, dry_run=dry_run,
                     stats=stats, on_round=on_round,
                     producer_expiration_ms=broker_setting(settings, "producer.id.expiration.ms"), on_line=on_line,
                     layout=layout)


class Progress:
    """``clean``'s progress on a long run: partitions done, bytes read, bytes reclaimed, on ``stream``
    at most once per ``interval`` seconds (nothing for runs shorter than that). One thread."""

    def __init__(self, partitions: int, stream: TextIO | None = None, interval: float = 1.0) -> None:
        self.partitions = partitions
        self.done = 0
        self.stream = stream if stream is not None else sys.stderr
        self.interval = interval
        self.stats = CleanStats(tick=self.tick)
        self._started = self._last = time.monotonic()
        self.printed = False

    def tick(self) -> None:
        now = time.monotonic()
        if now - self._last >= self.interval:
            self._last = now
            self.print()

    def print(self) -> None:
        s = self.stats
        mib = 1024 * 1024
        self.stream.write(
            f"clean: {self.done}/{self.partitions} partition(s), {(s.map_bytes_read + s.bytes_read) / mib:.1f} MiB read, "
            f"{s.reclaimed / mib:.1f} MiB reclaimed, {time.monotonic() - self._started:.0f} s\n"
        )
        self.stream.flush()
        self.printed = True


def clean_logdir(logdir: LogDir, *, dry_run: bool = False, now_ms: int | None = None,
                 progress: TextIO | None = None, progress_interval: float = 1.0,
                 on_line: Callable[[str], None] | None = None,
                 not_compacted: dict[str, str] | None = None) -> list[str]:
    """Retention and compaction for every partition of a :class:`LogDir`, as a broker orders them (module
    docstring): first the files of segments deleted earlier whose ``file.delete.delay.ms`` has passed
    go; a compacted log is compacted, then retention judges what is left (none of either with
    ``log.cleaner.enable=false``); any other log gets retention. Compaction starts where the
    ``cleaner-offset-checkpoint`` says, and each round's end is written there. ``progress`` (a stream)
    gets a line a second on long runs. Returns a line per change; ``on_line`` gets each as it is made,
    so that when a later step fails (a full disk: the OS error, which then says that the changes before
    it were made) what was done is said (review11 R11-2). A partition whose compaction meets a batch
    too large to inflate, or damage, is left as it is (no compaction, no retention) and put in
    ``not_compacted`` (name: reason); the others go on (review19 R19-1, review22 R22-5)."""
    refusal = settings_refusal(logdir.settings, partition_topics(logdir))
    if refusal is not None:  # before any partition is opened: nothing read, nothing changed
        raise SettingsUnreadable(f"{logdir.path}: refused: {refusal}")
    now = _now() if now_ms is None else now_ms
    lines: list[str] = []

    def said(line: str) -> None:
        lines.append(line)
        if on_line is not None:
            on_line(line)

    try:
        _clean_partitions(logdir, dry_run, now, said, progress, progress_interval,
                          {} if not_compacted is None else not_compacted)
    except OSError as exc:
        if lines and not dry_run:
            note_os_error(exc, f"; the {len(lines)} change(s) said before it were made")
        raise
    if not lines:
        said("nothing to clean")
    return lines


def _clean_partitions(logdir: LogDir, dry_run: bool, now: int, said: Callable[[str], None],
                      progress: TextIO | None, progress_interval: float, not_compacted: dict[str, str]) -> None:
    names = logdir.partition_names(aliases=True)  # an alias is refused and said
    meter = Progress(len(names), progress, progress_interval) if progress is not None else None
    stats = meter.stats if meter is not None else CleanStats()
    checkpoints = logdir.cleaner_offsets() if hasattr(logdir, "cleaner_offsets") else {}
    compaction = broker_setting(logdir.settings, "log.cleaner.enable")
    strays = unnamed_partitions(logdir.path, names, logdir.settings.recorded_topic_ids())
    for name in names:
        if name in strays:  # never by Kafka's default settings (review19 R19-5): said with the refused
            logdir.refused.setdefault(name, unnamed_refusal(strays[name], _NOT_CLEANED))
            continue
        if dry_run and logdir.writer_refusal(name) is not None:  # what the real run refuses (refused says why)
            continue
        try:
            target = logdir.log(name)
        except UnsafeFileError:  # a link in it, or batches its recovery would cut: refused, untouched
            continue
        if not dry_run:
            target.delete_expired_files()
        try:
            _clean_partition(logdir, target, dry_run, now, said, stats, checkpoints, compaction)
        except UninflatableBatch as exc:  # valid data its keys cannot be read from: this partition only
            not_compacted[name] = not_compacted_reason(exc)
        except CorruptRecordError as exc:  # as Kafka's LogCleaner marks the log uncleanable: the others go on
            not_compacted[name] = damaged_reason(exc)
        if meter is not None:
            meter.done += 1
    if meter is not None and meter.printed:
        meter.print()


def _clean_partition(logdir: LogDir, target: Log, dry_run: bool, now: int, said: Callable[[str], None],
                     stats: CleanStats, checkpoints: dict[tuple[str, int], int], compaction: bool) -> None:
    """Compaction (a compacted log), then retention, of one partition (:func:`clean_logdir`)."""
    layout: list[LogSegment | PlannedSegment] | None = None
    if target.config.compact and compaction:
        key = (target.topic, target.partition)

        def checkpoint_round(end: int) -> None:
            logdir.update_cleaner_checkpoint({key: end})

        # a dry run's retention judges the segments its compaction foresees (the real run's: the log)
        layout = [] if dry_run else None
        _compact(target, now, dry_run=dry_run, checkpoint=checkpoints.get(key), settings=logdir.settings,
                 stats=stats, on_round=None if dry_run else checkpoint_round, on_line=said, layout=layout)
    if compaction or not target.config.compact:  # log.cleaner.enable=false: a broker's retention task
        for line in apply_retention(target, now, dry_run=dry_run, layout=layout):  # skips compacted logs
            said(line)


_NOT_CLEANED = "nothing deleted or compacted there"


def _now() -> int:
    return now_ms()


class LogCleaner:
    """Retention and compaction of a writable :class:`LogDir` in a background thread.

    Thread safety: :meth:`start` and :meth:`stop` may be called from any thread (once each). The work
    runs on the cleaner's own thread, the only one that deletes or swaps segments; it reads sealed
    segments lock-free and takes a log's writer lock only to swap (see :mod:`.compaction`), so appends
    from other threads go on meanwhile. :meth:`stop` abandons a compaction in progress (its ``.cleaned``
    files are removed) and returns once the thread is gone.
    """

    def __init__(self, logdir: LogDir, *, clock: Callable[[], int] = _now) -> None:
        self.logdir = logdir
        self.clock = clock
        settings = logdir.settings
        self.enabled = broker_setting(settings, "log.cleaner.enable")
        self.backoff = broker_setting(settings, "log.cleaner.backoff.ms") / 1000
        self.retention_interval = broker_setting(settings, "log.retention.check.interval.ms") / 1000
        self.memory = broker_setting(settings, "log.cleaner.dedupe.buffer.size")
        #: As a broker: the first retention check waits ``log.initial.task.delay.ms`` after the start.
        self.initial_delay = broker_setting(settings, "log.initial.task.delay.ms") / 1000
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._next_retention = 0.0
        self._next_compaction = 0.0  # monotonic time of the next look for a log to compact
        self._checkpoints: dict[tuple[str, int], int] | None = None
        #: Totals since start (for logs and tests): compaction rounds and bytes, retention deletions.
        self.stats = CleanStats(tick=self._check_stop)
        self.segments_deleted = 0
        self.errors = 0
        self.passes = 0
        self.refusal_said = False
        #: Compacted partitions holding a batch too large to inflate, or damage: not compacted while mounted
        #: (said once).
        self.not_compacted: set[tuple[str, int]] = set()
        #: Partition folders the metadata does not name (strays.unnamed_partitions): never cleaned, said once.
        self.strays_said: set[str] = set()
        #: Partition folders that did not open (said once).
        self.unopened_said: set[str] = set()

    def start(self) -> None:
        if self._thread is not None:  # log.cleaner.enable=false turns compaction off, not retention
            return
        self._next_retention = time.monotonic() + self.initial_delay
        self._thread = threading.Thread(target=self._run, name="kafkafs-cleaner", daemon=True)
        self._thread.start()

    def stop(self, timeout: float | None = 30) -> None:
        self._stop.set()
        thread = self._thread
        if thread is not None:
            thread.join(timeout)

    def _check_stop(self) -> None:
        if self._stop.is_set():
            raise CleanerStopped()

    def _run(self) -> None:
        log.info("cleaner started (backoff %.1f s, retention check every %.1f s)", self.backoff, self.retention_interval)
        while not self._stop.is_set():
            try:
                worked = self.run_once()
            except CleanerStopped:
                break
            except Exception:  # noqa: BLE001 - a bad partition must not stop cleaning the others
                self.errors += 1
                log.exception("cleaner pass failed")
                worked = False
            if not worked:
                self._stop.wait(self.idle_wait())
        log.info("cleaner stopped")

    def idle_wait(self) -> float:
        """Seconds until the next thing is due: the next retention check, or the next look for a log
        to compact (``log.cleaner.backoff.ms`` after one that found none)."""
        due = self._next_retention
        if self.enabled:
            due = min(due, self._next_compaction)
        return max(due - time.monotonic(), 0.0)

    def run_once(self) -> bool:
        """One step of the loop: retention of the logs not compacted when it is due, then, when its
        backoff has passed, the dirtiest log compacted and retention applied to every compacted log
        (Kafka's ``cleanFilthiestLog``); True when something was compacted."""
        self.passes += 1
        if self._refused():
            return False
        if time.monotonic() >= self._next_retention:
            self._next_retention = time.monotonic() + self.retention_interval
            self._retention()
        if not self.enabled or time.monotonic() < self._next_compaction:
            return False
        compacted = self._compact_filthiest()
        self._retention(compacted=True)
        if compacted:
            return True
        self._next_compaction = time.monotonic() + self.backoff
        return False

    def _refused(self) -> bool:
        """Whether the settings cannot be trusted for deleting (said once)."""
        refusal = settings_refusal(self.logdir.settings, partition_topics(self.logdir))
        if refusal is not None and not self.refusal_said:
            self.refusal_said = True
            log.error("cleaner: refused: %s; the mount deletes and compacts nothing", refusal)
        return refusal is not None

    def _logs(self) -> list[Log]:
        names = self.logdir.partition_names()
        strays = unnamed_partitions(self.logdir.path, names, self.logdir.settings.recorded_topic_ids())
        out = []
        for name in names:
            if self._stop.is_set():
                break
            if name in strays:  # never by guessed settings (review19 R19-5), as clean: said once
                if name not in self.strays_said:
                    self.strays_said.add(name)
                    log.warning("cleaner: %s: refused: %s", name, unnamed_refusal(strays[name], _NOT_CLEANED))
                continue
            try:
                # as the mount's reads open it: a partition a writer refuses (a link in it, damage its load
                # would cut) is opened read-only and said once there, whoever opens it first (it was
                # skipped in silence when the cleaner came first)
                target = self.logdir.log(name, read_only_fallback=True)
            except UnsafeFileError:  # refused, and not even readable: said when it was opened
                continue
            except Exception as exc:  # noqa: BLE001 - a folder that does not open is skipped (said once)
                if name not in self.unopened_said:
                    self.unopened_said.add(name)
                    log.warning("cleaner: %s: %s; not deleted or compacted", name, exc)
                continue
            if target.writable:  # a partition a writer refused is served read-only (said when it was opened)
                out.append(target)
        return out

    def _retention(self, *, compacted: bool = False) -> None:
        """Retention of the logs that are not compacted (the broker's retention task), or, ``compacted``,
        of those that are (the cleaner's ``deletableLogs``, after a look for a log to compact)."""
        now = self.clock()
        for target in self._logs():
            if target.config.compact != compacted:
                continue
            target.delete_expired_files()
            deleted = apply_retention(target, now)
            self.segments_deleted += len(deleted)
            for line in deleted:
                log.info("%s", line)

    def _compact_filthiest(self) -> bool:
        now = self.clock()
        if self._checkpoints is None:
            self._checkpoints = self.logdir.cleaner_offsets()
        best = None
        for target in self._logs():
            config = target.config
            if not config.compact:
                continue
            key = (target.topic, target.partition)
            if key in self.not_compacted:
                continue
            state = log_to_clean(target, now, self._checkpoints.get(key))
            if state.first_dirty >= state.upper or not state.dirty_bytes:
                continue
            overdue = (
                config.max_compaction_lag_ms < LONG_MAX
                and 0 <= state.first_dirty_timestamp < now - config.max_compaction_lag_ms
            )
            if state.dirty_ratio < config.min_cleanable_dirty_ratio and not overdue:
                continue
            rank = (overdue, state.dirty_ratio)
            if best is None or rank > best[0]:
                best = (rank, target, state)
        if best is None:
            return False
        _rank, target, state = best
        key = (target.topic, target.partition)

        def checkpoint_round(end: int) -> None:
            assert self._checkpoints is not None
            self._checkpoints[key] = end
            self.logdir.update_cleaner_checkpoint({key: end})

        try:
            lines, _end = _compact(target, now, dry_run=False, checkpoint=state.first_dirty, memory=self.memory,
                                   settings=self.logdir.settings, stats=self.stats, on_round=checkpoint_round)
        except UninflatableBatch as exc:  # said once, no traceback; the next pass looks at the others at once
            self.not_compacted.add(key)
            log.warning("cleaner: %s: %s", target.dir.name, not_compacted_reason(exc))
            return True
        except CorruptRecordError as exc:  # damage: uncleanable while mounted, as Kafka's (said once)
            self.not_compacted.add(key)
            log.warning("cleaner: %s: %s", target.dir.name, damaged_reason(exc))
            return True
        for line in lines:
            log.info("%s", line)
        target.delete_expired_files()
        return True
