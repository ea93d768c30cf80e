"""What a Spark write is about to append, kept until it has (review21 R21-4): all of a job or none.

A batch write's driver (:func:`kafkafs.spark.publish.commit_staged`) appends the staged batches of
every partition under the log directory's lock. Before the first append it writes an intent,
``LOGDIR/.kafkafs-staging/<job>/publishing.json`` (fsynced, renamed into place): per partition, the log
end offset the job starts at and the size, CRC and offset span of each batch it appends, in order.
It removes the intent once every partition is appended and flushed, or truncated back after an error.

An intent found later belongs to a driver that died while publishing (the lock it held went with its
process; whoever holds the lock now is alone). Per partition the log then holds nothing of the job
(its end is where the job started), the job's batches only, from the start (all, or a prefix: a kill
in the middle), or something else (appended since by another writer, or not what was recorded): the
intent cannot tell which records are the job's then, and nothing is taken out.

``kafkafs verify`` names the job, and per partition the offsets it appended (exit 1); ``kafkafs
recover`` takes them out (truncates each partition back to where the job started), so the failed job
appended nothing and running it again appends its rows once, then removes the job's folder.

Functions only; :func:`resolve` runs under the log directory's lock (a writable LogDir).
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from .names import STAGING_DIR_NAME
from .safefiles import make_dir, open_file, read_regular_file

if TYPE_CHECKING:
    from .log import Log


class LogDirLike(Protocol):
    """What :func:`judge` and :func:`resolve` use of a :class:`~kafkafs.storage.logdir.LogDir` (which
    imports this module: no import of it here)."""

    path: Path

    def log(self, name: str, *, read_only_fallback: bool = False) -> Log: ...

    def handle_unfinished(self, job: str) -> None: ...

__all__ = ["INTENT_FILE", "Unfinished", "PartitionState", "write_intent", "clear_intent", "unfinished_writes",
           "ours", "judge", "resolve"]

INTENT_FILE = "publishing.json"


@dataclasses.dataclass(frozen=True, slots=True)
class Unfinished:
    """The intent a job left: ``partitions``: name -> {"start": offset, "batches": [[size, crc, span], ...]}."""

    job: str
    path: Path
    partitions: dict[str, dict[str, Any]]
    damage: str | None = None  # the intent file could not be read


@dataclasses.dataclass(frozen=True, slots=True)
class PartitionState:
    """What a partition holds of an unfinished job: offsets ``start .. after - 1`` are ``matched`` of its
    ``total`` batches; ``end`` is the log end now (``end == after``: nothing but the job's after ``start``)."""

    name: str
    start: int
    matched: int
    total: int
    after: int
    end: int

    @property
    def undoable(self) -> bool:
        return self.end == self.after

    def describe(self) -> str:
        if self.end <= self.start:
            return f"{self.name}: nothing of it appended (next offset {self.start})"
        if not self.undoable:
            return (f"{self.name}: offsets {self.start}..{self.after - 1} are {self.matched} of its {self.total} "
                    f"batches, but offsets {self.after}..{self.end - 1} are not the job's (appended since, or not "
                    f"what it recorded): nothing can be taken out safely")
        whole = "all" if self.matched == self.total else f"{self.matched} of"
        return f"{self.name}: offsets {self.start}..{self.end - 1} ({whole} its {self.total} batches)"


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_intent(logdir: str | os.PathLike[str], job: str, partitions: dict[str, dict[str, Any]]) -> Path:
    """Record what job ``job`` is about to append (fsynced and in place before this returns)."""
    folder = Path(logdir) / STAGING_DIR_NAME / job
    make_dir(folder, parents=True, exist_ok=True)  # owned as LOGDIR when running as root (safefiles)
    path = folder / INTENT_FILE
    tmp = folder / f".{INTENT_FILE}.tmp"
    with os.fdopen(open_file(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC), "w") as f:
        json.dump({"job": job, "partitions": partitions}, f, sort_keys=True)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    _fsync_dir(folder)
    _fsync_dir(folder.parent)
    return path


def clear_intent(logdir: str | os.PathLike[str], job: str) -> None:
    """The job's appends are all in (or all taken back): remove its intent, and its folder and the
    staging folder when that leaves them empty."""
    folder = Path(logdir) / STAGING_DIR_NAME / job
    try:
        (folder / INTENT_FILE).unlink()
    except FileNotFoundError:
        return
    _fsync_dir(folder)
    for empty in (folder, folder.parent):
        try:
            empty.rmdir()
        except OSError:
            break


def unfinished_writes(logdir: str | os.PathLike[str]) -> list[Unfinished]:
    """The intents left in ``LOGDIR/.kafkafs-staging`` (by jobs whose driver died while publishing)."""
    root = Path(logdir) / STAGING_DIR_NAME
    try:
        jobs = sorted(p for p in root.iterdir() if p.is_dir() and not p.is_symlink())
    except OSError:
        return []
    found = []
    for job in jobs:
        path = job / INTENT_FILE
        if not path.exists():
            continue
        try:
            data = json.loads(read_regular_file(path))
            partitions = {str(k): {"start": int(v["start"]), "batches": [[int(x) for x in b] for b in v["batches"]]}
                          for k, v in data["partitions"].items()}
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            found.append(Unfinished(job.name, path, {}, f"unreadable: {exc}"))
            continue
        found.append(Unfinished(job.name, path, partitions))
    return found


def ours(log_: Log, start: int, batches: list[list[int]]) -> tuple[int, int]:
    """How many of the recorded ``[size, crc, span]`` batches the log holds from ``start`` on, and the
    offset after them (CRCs are not compared on a LogAppendTime topic: the append rewrote them)."""
    matched = 0
    offset = start
    if start >= log_.log_end_offset:
        return 0, start
    check_crc = not log_.config.log_append_time
    for _segment, view in log_.batches(start):
        if matched == len(batches):
            break
        size, crc, span = batches[matched]
        h = view.header
        if h.base_offset != offset or h.size != size or (check_crc and h.crc != crc):
            break
        matched += 1
        offset += span
    return matched, offset


def judge(ld: LogDirLike, unfinished: Unfinished) -> list[PartitionState]:
    """Per partition of the intent, what the log holds of the job (a partition folder that is gone:
    nothing of it). A writable ``ld`` opens them for writing from now on: its caller takes the job out."""
    ld.handle_unfinished(unfinished.job)
    out = []
    for name, entry in sorted(unfinished.partitions.items()):
        start, batches = entry["start"], entry["batches"]
        if not (ld.path / name).is_dir():
            out.append(PartitionState(name, start, 0, len(batches), start, start))
            continue
        log_ = ld.log(name)
        matched, after = ours(log_, start, batches)
        out.append(PartitionState(name, start, matched, len(batches), after, max(log_.log_end_offset, start)))
    return out


def resolve(ld: LogDirLike, unfinished: Unfinished) -> tuple[list[str], bool]:
    """Take an unfinished job's appends out (a writable LogDir, its lock held): lines saying what was
    done per partition, and whether all of it could be (then the job's folder is removed)."""
    if unfinished.damage is not None:
        return [f"{unfinished.path}: {unfinished.damage}; left as it is"], False
    states = judge(ld, unfinished)
    if not all(s.undoable for s in states):
        return [s.describe() for s in states], False
    lines = []
    for s in states:
        if s.end > s.start:
            log_ = ld.log(s.name)
            log_.truncate_to(s.start)
            log_.flush()
            lines.append(f"{s.name}: took out offsets {s.start}..{s.end - 1}")
    folder = unfinished.path.parent
    shutil.rmtree(folder, ignore_errors=True)
    try:
        folder.parent.rmdir()
    except OSError:
        pass
    return lines, True
