"""What ``kafkafs verify`` prints: a log directory's health (``kafkafs dump`` lives in :mod:`kafkafs.dump`).

It reads only (nothing here writes), so it is safe on a directory a broker owns.
"""

from __future__ import annotations

import io
import os
import sys
from collections.abc import Callable, Collection
from pathlib import Path
from typing import TextIO

from .errors import CorruptRecordError, KafkafsError, UninflatableBatch, UnsafeFileError, describe_os_error
from .format.batch import BatchHeader, decode_batch, validate_batch
from .format.bigbatch import check_in_pieces
from .format.checkpoint import EPOCH_CHECKPOINT_FILE, parse_epoch_checkpoint, parse_offset_checkpoint
from .format.txnindex import AbortedTxn
from .storage.dirlock import LOCK_FILE, describe_holder, holder_kind, holder_of
from .storage.leader_epochs import read_regular_file
from .storage.log import Log
from .storage.logdir import (
    CLEANER_OFFSET_FILE,
    LOG_START_FILE,
    RECOVERY_POINT_FILE,
    REPLICATION_OFFSET_FILE,
    LogDir,
)
from .storage.names import (
    DELETED,
    STAGING_DIR_NAME,
    broker_refuses_folder,
    parse_partition_dir_name,
    parse_segment_file_name,
)
from .storage.partition_metadata import PARTITION_METADATA_FILE, partition_metadata_problem
from .storage.producer_state import unreadable_snapshots
from .storage.publish_intent import INTENT_FILE, judge, unfinished_writes
from .storage.recovery import interrupted_leftovers
from .storage.recovery_plan import left_by_unclean_stop, snapshot_left_by_unclean_stop, zeros_from
from .storage.safefiles import check_partition_folder, regular_files, unsafe_entries
from .storage.segment import LogSegment
from .storage.strays import stray_consequence, stray_partitions
from .storage.transactions import abort_markers, rebuilt_aborted, txn_index_difference
from .storage.validation import in_order

__all__ = ["verify_logdir", "check_segment"]


def check_indexes(segment: LogSegment) -> list[str]:
    """``kafka-dump-log --verify-index-only`` rules: each offset index entry names a batch start whose
    last offset is the entry's offset; both indexes strictly increase; time entries name real batches."""
    problems = []
    starts = {}
    cut = None  # where unreadable bytes start: check_segment reports them, entries past them are moot
    try:
        for view in segment.batches(0):
            starts[view.position] = view.header
    except CorruptRecordError as exc:
        cut = exc.position if exc.position is not None else 0
    last_offsets = {h.last_offset: h for h in starts.values()}
    prev = None
    readable_end = max((h.last_offset for h in starts.values()), default=-1)
    for entry in segment.offset_index:
        if cut is not None and entry.position >= cut:
            break
        h = starts.get(entry.position)
        if h is None:
            problems.append(f"{segment.offset_index.path.name}: entry {entry} does not point at a batch start")
        elif h.last_offset != entry.offset:
            problems.append(
                f"{segment.offset_index.path.name}: entry {entry} names offset {entry.offset} but the batch there ends at {h.last_offset}"
            )
        if prev is not None and (entry.offset <= prev.offset or entry.position <= prev.position):
            problems.append(f"{segment.offset_index.path.name}: entry {entry} does not increase after {prev}")
        prev = entry
    prev_t = None
    for tentry in segment.time_index:
        if cut is not None and tentry.offset > readable_end:
            break
        if tentry.offset not in last_offsets:
            problems.append(f"{segment.time_index.path.name}: entry {tentry} names no batch's last offset")
        elif last_offsets[tentry.offset].max_timestamp > tentry.timestamp:
            problems.append(f"{segment.time_index.path.name}: entry {tentry} is below its batch's max timestamp")
        if prev_t is not None and (tentry.timestamp <= prev_t.timestamp or tentry.offset < prev_t.offset):
            problems.append(f"{segment.time_index.path.name}: entry {tentry} does not increase after {prev_t}")
        prev_t = tentry
    return problems


def _txn_entry(e: AbortedTxn) -> str:
    return f"producer {e.producer_id} ({e.first_offset}..{e.last_offset}, lastStableOffset {e.last_stable_offset})"


def txn_index_problems(segment: LogSegment, rebuilt: list[AbortedTxn]) -> list[str]:
    """How the segment's ``.txnindex`` differs from what ``recover`` rebuilds there (``rebuilt``:
    :func:`~kafkafs.storage.transactions.rebuilt_aborted`), by the rule ``recover`` judges it with
    (:func:`~kafkafs.storage.transactions.txn_index_difference`): each wrong entry (no ABORT marker
    of its producer at its last offset, or another first or last stable offset than the log gives) and
    each missing one. Readers trust these entries (``read_committed``, ``transactions``), as a broker does."""
    try:
        kept = segment.txn_index.entries()
    except CorruptRecordError as exc:
        return [f"{segment.txn_index.path.name}: {exc.reason}"]
    if not kept and not rebuilt:
        return []
    name = segment.txn_index.path.name
    wrong, missing = txn_index_difference(kept, rebuilt, abort_markers(segment))
    by_marker = {(e.producer_id, e.last_offset): e for e in missing}
    out = []
    for e in wrong:
        right = by_marker.pop((e.producer_id, e.last_offset), None)
        if right is None:
            out.append(f"{name}: entry of producer {e.producer_id} ({e.first_offset}..{e.last_offset}) names no "
                       f"ABORT marker at offset {e.last_offset}")
        else:
            out.append(f"{name}: entry {kept.index(e)} of {_txn_entry(e)} is not what the log gives for that ABORT "
                       f"marker: {_txn_entry(right)} (what `kafkafs recover` writes)")
    out += [f"{name}: lacks the entry of {_txn_entry(e)} that the ABORT marker at offset {e.last_offset} gives "
            "(what `kafkafs recover` writes)" for e in by_marker.values()]
    return out


def check_index_files(segment: LogSegment, *, sealed: bool, clean_shutdown: bool,
                      rebuilt_txns: list[AbortedTxn] | None = None, in_use: str | None = None,
                      ) -> tuple[list[str], list[str]]:
    """Problems and notes about the index files: Kafka's sanity checks and ``--verify-index-only``'s
    rules (:func:`check_indexes`); a sealed segment's index must hold only real entries (Kafka counts
    every whole entry of a sealed file and would reject trailing zeros); a missing index is a note,
    since a writer rebuilds it from the ``.log``. The active segment's indexes after an unclean stop
    (no ``clean_shutdown``) are notes too: whatever they hold, a broker's start rebuilds them
    (:func:`~kafkafs.storage.recovery_plan.left_by_unclean_stop`, the rule ``recover`` judges by).
    ``rebuilt_txns``: the ``.txnindex`` entries a recovery writes for the segment (:func:`txn_index_problems`;
    None: the ``.txnindex`` is not checked). ``in_use``: what holds the log directory's ``.lock`` now
    (:func:`~kafkafs.storage.dirlock.holder_kind`; ``clean_shutdown`` False then): the active segment's indexes are being written
    (review26 R26-1), said so."""
    problems: list[str] = []
    notes: list[str] = []
    try:
        segment.sanity_check()
    except CorruptRecordError as exc:
        problems.append(exc.reason)
    problems.extend(check_indexes(segment))
    if rebuilt_txns is not None:
        problems.extend(txn_index_problems(segment, rebuilt_txns))
    if problems and left_by_unclean_stop(not sealed, clean_shutdown):
        if in_use is not None:
            notes = [f"{p} (the active segment's index, {_being_written(in_use)})" for p in problems]
        else:
            notes = [f"{p} (the active segment's index after an unclean stop: a writable open rebuilds it, as a "
                     "broker's start does; no damage)" for p in problems]
        problems = []
    for index in (segment.offset_index, segment.time_index):
        if not index.path.exists():
            if segment.size:
                notes.append(f"{index.path.name} is missing (a writable open rebuilds it from the log)")
            continue
        if sealed and index.length != index.size_in_bytes:
            extra = (index.length - index.size_in_bytes) // index.entry_size
            problems.append(
                f"{index.path.name}: {index.length} bytes hold {index.entries} valid entries and "
                f"{extra} more that are not (a sealed index is trimmed to its entries)"
            )
    return problems, notes


def _records_at_or_after(h: BatchHeader, log_start: int) -> int:
    """The records of the batch ``h`` at or after ``log_start``, by its header (no gaps assumed). A legacy
    wrapper's header carries no count (``record_count`` -1): it counts 1, the message at its own offset
    (its last), the least it holds; the caller says "at least" then (review19 R19-4)."""
    if h.record_count < 0:
        return 1 if h.last_offset >= log_start else 0
    if h.base_offset >= log_start:
        return h.record_count
    if h.last_offset >= log_start:  # the batch the log start falls in
        return min(h.last_offset - log_start + 1, h.record_count)
    return 0


def check_segment(
    segment: LogSegment, expected_start: int, *, deep: bool, log_start: int = 0, upper: int | None = None,
    notes: list[str] | None = None, uninflated: list[str] | None = None,
) -> tuple[int, int, list[str], bool]:
    """Validate one segment; return (records at or after ``log_start``, next offset, problems, whether
    that count is exact: False when a legacy wrapper was not inflated, counted as its one sure message).
    ``expected_start``: one past the last offset before the segment; ``upper``: the next segment's base
    offset. Offsets are judged between neighbours as ``recover`` judges them
    (:func:`~kafkafs.storage.validation.in_order`). ``notes`` given (the active segment after an unclean
    stop): a preallocated tail of zeros (:func:`~kafkafs.storage.recovery_plan.zeros_from`) is a note
    there, as ``recover`` trims it with no damage. ``uninflated`` given: a note for each batch whose
    records inflate past the limit (valid data that kafkafs does not decode, R15-7: no problem)."""
    problems: list[str] = []
    records = 0
    exact = True
    next_offset = expected_start
    end = 0
    try:
        for view, order in in_order(segment.batches(0), next_offset=expected_start, upper=upper,
                                    segment_base=segment.base_offset):
            h = view.header
            end = view.position + h.size
            where = f"{segment.log_path.name} position {view.position}"
            first = next_offset  # where the batch's records should start (a legacy wrapper's header lacks it)
            next_offset = max(next_offset, h.next_offset)
            if order is not None:
                problems.append(f"{where}: {order}")
            try:
                validate_batch(view.buf, h)
            except CorruptRecordError as exc:
                problems.append(f"{where}: {exc.reason}")
                continue
            if deep:
                try:
                    batch = decode_batch(view.buf, h, validate=False, inner_crcs=True)
                    records += sum(1 for o in batch.offsets if o >= log_start)
                except UninflatableBatch as exc:  # valid data not inflated at once (R15-7): checked in pieces
                    checked = None
                    if h.magic == 2:
                        try:
                            checked = check_in_pieces(view.buf, h, log_start)
                        except UninflatableBatch:  # a piece past the limit (a snappy chunk): not decoded
                            checked = None
                        except CorruptRecordError as damage:
                            problems.append(f"{where}: {damage.reason}")
                            continue
                    if checked is None:  # a legacy wrapper, or a piece past the limit: a note
                        records += _records_at_or_after(h, log_start)
                        exact = exact and h.record_count >= 0
                        if uninflated is not None:
                            uninflated.append(f"{where}: offsets {exc.offsets_text(first)}: batch inflates past "
                                              f"{exc.size_text}; its records are not decoded (valid data)")
                    else:
                        records += checked[0]
                        if uninflated is not None:
                            uninflated.extend(f"{where}: offsets {e.offsets_text()}: {e.reason}; not decoded "
                                              "(valid data)" for e in checked[1])
                except CorruptRecordError as exc:
                    problems.append(f"{where}: {exc.reason}")
            else:
                records += _records_at_or_after(h, log_start)
                exact = exact and h.record_count >= 0
    except CorruptRecordError as exc:
        problems.append(f"{segment.log_path.name}: {exc.reason} at position {exc.position}")
        end = segment.size
    if end < segment.size:
        zeros = zeros_from(segment) if notes is not None else None
        if notes is not None and zeros is not None and zeros <= end:
            notes.append(f"{segment.log_path.name}: {segment.size - end} zero bytes after the last batch, as a "
                         "broker that preallocates segments leaves the active one (its start trims them; no damage)")
        else:
            problems.append(f"{segment.log_path.name}: {segment.size - end} bytes after the last whole batch")
    return records, next_offset, problems, exact


_LOGDIR_CHECKPOINTS = (RECOVERY_POINT_FILE, LOG_START_FILE, REPLICATION_OFFSET_FILE, CLEANER_OFFSET_FILE)


def checkpoint_problems(folder: Path, names: tuple[str, ...], parse: Callable[[bytes], object]) -> list[tuple[str, str]]:
    """(file, why) for each of the checkpoint files ``names`` in ``folder`` that does not parse as Kafka
    reads it (a broker refuses the log directory then: "Malformed line in checkpoint file"). The engine
    reads them leniently, with a warning; a missing file is no problem."""
    found = []
    for name in names:
        try:
            parse(read_regular_file(folder / name))
        except (FileNotFoundError, UnsafeFileError):  # a link inside a partition folder is said apart
            continue
        except CorruptRecordError as exc:
            found.append((name, exc.reason))
        except OSError as exc:  # a link (never followed) or an unreadable file
            found.append((name, str(exc.strerror or exc)))
    return found


def refused_folders(path: Path) -> list[str]:
    """``NAME: why`` for each folder of the log directory at ``path`` that a broker refuses to start with
    (:func:`~kafkafs.storage.names.broker_refuses_folder`: not ``TOPIC-PARTITION``): kafkafs reads past
    it, a broker stops. Nothing when the folder cannot be listed (the partitions' listing says that)."""
    try:
        with os.scandir(path) as listing:
            entries = sorted(listing, key=lambda e: e.name)
    except OSError:
        return []
    found = []
    for entry in entries:
        try:
            folder = entry.is_dir()
        except OSError:
            folder = False
        if not folder or not broker_refuses_folder(entry.name):
            continue
        if entry.name != STAGING_DIR_NAME:
            why = "not a partition folder (TOPIC-PARTITION); "
        elif any((Path(entry.path) / job / INTENT_FILE).exists() for job in _listing(Path(entry.path))):
            why = ("left by a Spark write to this directory whose driver stopped while appending: `kafkafs recover` "
                   "takes out what it appended and removes it (deleting it by hand keeps those records); ")
        else:
            why = ("left by a Spark write to this directory that did not finish (its driver stopped): delete it "
                   "when no write runs; ")
        found.append(f"{entry.name}: {why}a broker refuses to start with it in its log directory")
    return found


def _listing(path: Path) -> list[str]:
    try:
        return os.listdir(path)
    except OSError:
        return []


def unfinished_write_lines(logdir: LogDir) -> list[str]:
    """One line per Spark write whose driver died while appending (its intent in ``.kafkafs-staging``):
    per partition, the offsets it appended (:mod:`~kafkafs.storage.publish_intent`)."""
    out = []
    for unfinished in unfinished_writes(logdir.path):
        where = f"{STAGING_DIR_NAME}/{unfinished.job}"
        if unfinished.damage is not None:
            out.append(f"{where}: a Spark write's record of what it appends is {unfinished.damage}")
            continue
        try:
            said = "; ".join(state.describe() for state in judge(logdir, unfinished))
        except (OSError, KafkafsError) as exc:
            said = f"not judged: {exc}"
        out.append(f"{where}: a Spark write whose driver stopped while appending left part of its job: {said}; "
                   "`kafkafs recover` takes it out (a job appends all of its rows or none)")
    return out


def damaged_checkpoints(path: Path, names: list[str]) -> list[str]:
    """``FILE: why`` for each checkpoint file of the log directory at ``path`` and of its partitions
    ``names`` that verify reports as damaged (what ``recover`` must count before it rewrites them)."""
    found = [f"{file}: {why}" for file, why in checkpoint_problems(path, _LOGDIR_CHECKPOINTS, parse_offset_checkpoint)]
    for name in names:
        found += [f"{name}/{file}: {why}" for file, why in
                  checkpoint_problems(path / name, (EPOCH_CHECKPOINT_FILE,), parse_epoch_checkpoint)]
    return found


def _say_once(exc: OSError, said: set[str], err: TextIO) -> str:
    """The error line of ``exc``, printed on ``err`` unless it is in ``said`` (then added)."""
    line = f"kafkafs: error: {describe_os_error(exc)}"
    if line not in said:
        said.add(line)
        print(line, file=err)
    return line


#: The file name endings Kafka's log loader takes for a segment's files, whatever comes before them.
_LOADER_LOG, _LOADER_INDEXES = ".log", (".index", ".timeindex", ".txnindex")


def _java_long(text: str) -> int | None:
    """``text`` as Java's ``Long.parseLong`` reads it (an optional sign, ASCII digits), else None."""
    digits = text[1:] if text[:1] in ("+", "-") else text
    if not digits or not digits.isascii() or not digits.isdigit():
        return None
    value = int(text)
    return value if -(2**63) <= value < 2**63 else None


def misnamed_segment_files(folder: Path) -> list[str]:
    """The problems of files a broker's log loader takes for segment files but kafkafs does not (review23
    R23-9). Kafka's loader takes every ``*.log`` as a segment, and reads every ``*.index``, ``*.timeindex``
    and ``*.txnindex``, at the base offset ``Long.parseLong`` of the name before its first dot: a name
    that is no number stops the load (NumberFormatException: the log directory goes offline), and a
    ``.log`` named otherwise than with 20 digits is loaded as a segment at that base, from the file of
    the 20-digit name (created empty where missing), not from its own bytes: a segment kafkafs does not
    read. Either way what kafkafs reads there is not what the directory's broker serves."""
    problems = []
    for file in regular_files(folder, warn=False):
        if not file.endswith((_LOADER_LOG, *_LOADER_INDEXES)) or parse_segment_file_name(file) is not None:
            continue
        base = _java_long(file.partition(".")[0])
        if base is None:
            problems.append(f"{file}: a broker's log loader reads a base offset from this name and fails "
                            "(NumberFormatException: the log directory goes offline); kafkafs reads no segment there")
        elif file.endswith(_LOADER_LOG) and not (folder / f"{base:020d}.log").exists():
            problems.append(f"{file}: a broker loads it as a segment at base offset {base} (an empty "
                            f"{base:020d}.log, not these bytes) and kafkafs reads no segment there: what kafkafs reads "
                            "is not what the directory's broker serves")
    return problems


def verify_logdir(
    logdir: LogDir, out: TextIO, *, deep: bool = True, partitions: list[str] | None = None, err: TextIO | None = None
) -> int:
    """Check every partition; print one line each (and one per problem); return the problem count. A
    partition that cannot be read gets its OS error on ``err`` (standard error by default) and a line.
    A directory another process holds the ``.lock`` of (a running broker, a ``kafkafs mount --rw``) is
    said first: what that writer is writing now is said as in flight, not as what an unclean stop or an
    interrupted compaction leaves, and no writer (``kafkafs recover``) is advised there (review26 R26-1)."""
    err = sys.stderr if err is None else err
    total_problems = 0
    holder = holder_of(logdir.path)
    in_use = None if holder is None else holder_kind(holder)
    if holder is not None:
        print(f"{logdir.path}: in use by {in_use}: {describe_holder(holder)} holds "
              f"{logdir.path / LOCK_FILE}; what it is writing now is said as in flight (notes), not as damage",
              file=out)
    aliases = logdir.aliases()  # said here, as problems (a broker would load each as a log of its own)
    names = [name for name in partitions if name not in aliases] if partitions else logdir.partition_names()
    for name, reason in checkpoint_problems(logdir.path, _LOGDIR_CHECKPOINTS, parse_offset_checkpoint):
        print(f"{name}: {reason}", file=out)
        total_problems += 1
    for line in refused_folders(logdir.path):
        print(line, file=out)
        total_problems += 1
    for line in unfinished_write_lines(logdir):
        print(line, file=out)
        total_problems += 1
    for alias, own in aliases.items():
        if not partitions or alias in partitions:
            print(f"{alias}: a link to {own}, another partition folder of this log directory (the same log): read "
                  f"as {own} only; writers refuse it; a broker loads it as a log of its own over the same files",
                  file=out)
            total_problems += 1
    if not names and not (partitions and aliases):
        print(f"{logdir.path}: no partitions", file=out)
    strays = stray_partitions(logdir.path, names)
    for name in names:
        said: set[str] = set()  # the OS errors said on err for this partition: each once (review17 R17-6)
        try:
            line, problems, notes = _check_partition(logdir, name, deep=deep, strays=strays, err=err, said=said,
                                                     in_use=in_use)
            print(line, file=out)
            for p in problems:
                print(f"  {p}", file=out)
            for note in notes:
                print(f"  note: {note}", file=out)
            total_problems += len(problems)
        except OSError as exc:  # one unreadable partition: said, counted, and the others still checked
            print(f"{name}: not checked ({_say_once(exc, said, err)})", file=out)
            total_problems += 1
    return total_problems


def _being_written(in_use: str) -> str:
    return f"being written: the log directory is in use by {in_use}; no damage"


def _check_partition(logdir: LogDir, name: str, *, deep: bool, strays: dict[str, str], err: TextIO,
                     said: set[str], in_use: str | None = None) -> tuple[str, list[str], list[str]]:
    """:func:`verify_logdir`'s look at one partition: its line, its problems and its notes (what a writable
    open would rebuild or remove that is no damage). ``in_use``: what holds the directory's ``.lock``
    (:func:`~kafkafs.storage.dirlock.holder_kind`): its in-flight writes are notes that say so, and ``kafkafs recover`` (a writer)
    is not advised. OSError: the partition could not be read."""
    log_: Log = logdir.log(name)
    # a running writer removed the clean-shutdown marker at its start (a broker, a --rw mount): what it
    # writes now is judged as after an unclean stop, said as in flight
    settled = logdir.clean_shutdown and in_use is None
    # a link (or special file) in the folder was skipped by the reader and makes writers refuse the
    # partition (SPEC §4): something wrong, whatever the regular files say
    problems: list[str] = [
        f"{entry}: not a regular file (a symbolic link, special file or folder): skipped, never followed; "
        "writers refuse this partition"
        for entry in unsafe_entries(logdir.path / name)
    ]
    problems += [f"{file}: {reason}" for file, reason in
                 checkpoint_problems(logdir.path / name, (EPOCH_CHECKPOINT_FILE,), parse_epoch_checkpoint)]
    why = partition_metadata_problem(logdir.path / name)
    if why is not None and in_use is not None:
        problems.append(f"{PARTITION_METADATA_FILE}: {why}: a Kafka broker does not start with it in its log "
                        "directory (\"Error starting LogManager\")")
    elif why is not None:
        problems.append(f"{PARTITION_METADATA_FILE}: {why}: a Kafka broker does not start with it in its log "
                        "directory (\"Error starting LogManager\"); `kafkafs recover` rewrites it with the "
                        "topic's id (or removes it where nothing in the directory names that id)")
    if name in strays:
        problems.append(f"stray: {strays[name]}: {stray_consequence(name)}")
    # what a compaction or deletion cut short leaves: routine after an unclean stop (a broker's
    # start finishes it: Kafka says "recoverable" at INFO), damage where the last writer said it
    # closed cleanly (R21-8)
    problems += misnamed_segment_files(logdir.path / name)
    leftover_files = interrupted_leftovers(regular_files(logdir.path / name, warn=False))
    leftovers = [f"{file}: left by an interrupted compaction or deletion; `kafkafs recover` finishes or "
                 "undoes it, as a broker's start does" for file in leftover_files]
    if settled:
        problems += leftovers
    recovery_point = logdir.recovery_points.get(parse_partition_dir_name(name))
    snapshots = unreadable_snapshots(logdir.path / name)
    refused = "Kafka's reader refuses this producer snapshot (a broker's load deletes it and rebuilds the producer " \
              "state from the log)" + ("; `kafkafs recover` removes it" if in_use is None else "")
    problems += [f"{file}: {why}: {refused}" for file, why in snapshots
                 if not snapshot_left_by_unclean_stop(file, recovery_point, settled)]
    if in_use is not None:
        notes: list[str] = [f"{file}: {why} (a producer snapshot {_being_written(in_use)})" for file, why in snapshots
                            if snapshot_left_by_unclean_stop(file, recovery_point, settled)]
        notes += [f"{file}: a compaction or deletion in flight ({_being_written(in_use)})" for file in leftover_files]
    else:
        notes = [
            f"{file}: {why} (a producer snapshot past the recovery point after an unclean stop: a broker's start "
            "deletes it unread and rebuilds the producer state from the log; so does `kafkafs recover`)"
            for file, why in snapshots if snapshot_left_by_unclean_stop(file, recovery_point, settled)]
        if not settled:
            notes += [f"{line} (after an unclean stop)" for line in leftovers]
    records = 0
    counted = True  # every batch's records counted (not a legacy wrapper left uninflated)
    expected = log_.log_start_offset
    segments = list(log_.segments)
    # what `recover` writes into each .txnindex (up to a segment that cannot be read: said below)
    rebuilt = rebuilt_aborted(segments, unreadable=[])
    for i, segment in enumerate(segments):
        first = i == 0
        upper = segments[i + 1].base_offset if i + 1 < len(segments) else None
        if segment.base_offset < expected and not first:
            problems.append(f"{segment.log_path.name}: base offset {segment.base_offset} overlaps the previous segment")
        # the first segment is checked from its base: a log start inside it (DeleteRecords) leaves
        # the records before it on disk, which are no damage
        try:
            n, expected, found, exact = check_segment(
                segment, segment.base_offset if first else expected, deep=deep,
                log_start=log_.log_start_offset, upper=upper,
                notes=notes if left_by_unclean_stop(upper is None, settled) else None,
                uninflated=notes,
            )
            index_problems, index_notes = check_index_files(
                segment, sealed=segment is not segments[-1], clean_shutdown=settled,
                rebuilt_txns=rebuilt.get(segment.base_offset), in_use=in_use)
        except OSError as exc:  # one unreadable segment (a disk error): said, the others still checked
            problems.append(f"{segment.log_path.name}: not checked ({_say_once(exc, said, err)})")
            expected = upper if upper is not None else expected
            continue
        records += n
        counted = counted and exact
        problems.extend(found)
        problems.extend(index_problems)
        notes.extend(index_notes)
    status = "OK" if not problems else f"{len(problems)} problem(s)"
    span = (
        f"offsets {log_.log_start_offset}..{log_.log_end_offset - 1}"
        if log_.log_end_offset > log_.log_start_offset
        else f"empty, next offset {log_.log_end_offset}"
    )
    how_many = f"{records} records" if counted else f"at least {records} records"  # R19-4
    return f"{name}: {len(segments)} segment(s), {how_many}, {span}: {status}", problems, notes


def untouched_by_recovery(logdir: LogDir, name: str, strays: Collection[str]) -> bool:
    """Whether ``kafkafs recover`` has nothing to do in partition ``name`` of a directory whose last writer
    stopped cleanly (``logdir``: read-only, opened while the clean-shutdown marker was there): what
    ``verify`` checks finds neither a problem nor a note (no damage, no missing index, nothing a
    writable open rebuilds), no pending deletion, nothing a writer refuses (a link out of LOGDIR, hard-linked
    files), and it is not a stray (``strays``: the directory's). A
    broker's clean start rebuilds nothing there either (review20 R20-2: recover leaves it byte for byte)."""
    if not logdir.clean_shutdown or name in strays:
        return False
    if any(f.endswith(DELETED) for f in regular_files(logdir.path / name, warn=False)):
        return False
    try:
        check_partition_folder(logdir.path / name)  # what a writer refuses is refused and said, as before
        # what it finds is said by the writable open that follows, once (not here too: review fix58)
        _line, problems, notes = _check_partition(logdir, name, deep=True, strays={}, err=io.StringIO(), said=set())
    except (OSError, KafkafsError):
        return False
    return not problems and not notes
