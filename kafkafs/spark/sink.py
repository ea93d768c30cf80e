"""``writeStream.format("kafkalog")``: each micro-batch appended exactly once, across failures and restarts.

Spark replays a micro-batch whose commit it has not recorded (after a crash, a restart, a failed
task), and may call the sink's ``commit`` for it again. So, as Spark's file sink does with its
``_spark_metadata`` log, the sink keeps its own log in the query's checkpoint
(``<checkpointLocation>/kafkalog-sink/``): one small JSON file per committed batch id with the offsets
the batch got in each partition. A commit, under the log directory's lock:

1. finishes what a killed commit left (``pending``, below);
2. returns at once when the batch id is already in the sink log (a replay: the rows are in the log);
3. writes ``pending``: the batch id and, per partition, the log end offset it starts at and the size
   and CRC of every batch it is about to append (fsynced, renamed into place);
4. appends through the engine (every partition truncated back if an append fails), flushes;
5. writes the batch's entry, then removes ``pending``.

A ``pending`` found at step 1 tells exactly what is in the log: per partition, nothing of the batch
(the log end is where it started), all of it (the batches from the start have the recorded sizes and
CRCs), or a prefix of it (a kill in the middle of step 4). When every partition got all of it, the
entry is written (the batch is done; the replay skips it); otherwise partitions are truncated back
to where the batch started and the replay appends it whole. Data appended by someone else after a
killed commit makes a partial batch impossible to undo safely: that stops the query with one line.

Tasks stage their rows under ``<checkpoint>/kafkalog-sink/staging/`` (see :mod:`kafkafs.spark.write`),
so executors need the checkpoint location, as Spark itself requires for any sink.

Thread safety: a :class:`SinkLog` is used by one commit at a time, under the log directory's lock.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
from pathlib import Path

from ..errors import InvalidInput, KafkafsError
from ..storage.config import Settings
from ..storage.log import fsync_directory
from ..storage.logdir import LogDir
from ..storage.publish_intent import ours
from .publish import append_staged, check_staged, create_topics, intent_of
from .write import StagedFile

__all__ = ["SinkLog", "commit_micro_batch", "sink_dir", "SinkConflict"]

log = logging.getLogger("kafkafs.spark")

SINK_DIR_NAME = "kafkalog-sink"
KEEP_ENTRIES = 100
PENDING = "pending"


class SinkConflict(KafkafsError):
    """A killed commit left part of a batch that cannot be undone (other appends followed it)."""


def sink_dir(checkpoint_location: str | None, option: str | None = None) -> Path:
    """Where the sink log lives: option ``sinkLog``, else ``<checkpointLocation>/kafkalog-sink``."""
    if option:
        return Path(option)
    if not checkpoint_location:
        raise InvalidInput(
            "writeStream.format('kafkalog') needs option('checkpointLocation', DIR): the sink records there "
            "which micro-batches it appended, so that each is appended exactly once"
        )
    path = checkpoint_location
    if path.startswith("file:"):
        path = path[len("file:"):]
        while path.startswith("//"):
            path = path[1:]
    return Path(path) / SINK_DIR_NAME


def _write_atomically(path: Path, data: dict) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "w") as f:
        json.dump(data, f, sort_keys=True)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fsync_directory(path.parent)


class SinkLog:
    """The sink's own log: ``<batch id>`` files of committed batches and the ``pending`` intent."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.mkdir(parents=True, exist_ok=True)

    def entry(self, batch_id: int) -> dict | None:
        try:
            return json.loads((self.path / str(batch_id)).read_text())
        except FileNotFoundError:
            return None

    def latest(self) -> int | None:
        ids = [int(p.name) for p in self.path.iterdir() if p.name.isdigit()]
        return max(ids) if ids else None

    def pending(self) -> dict | None:
        try:
            return json.loads((self.path / PENDING).read_text())
        except FileNotFoundError:
            return None

    def begin(self, batch_id: int, partitions: dict[str, dict]) -> None:
        _write_atomically(self.path / PENDING, {"batch": batch_id, "partitions": partitions})

    def complete(self, batch_id: int, appended: dict[str, list[int]]) -> None:
        _write_atomically(self.path / str(batch_id), {"batch": batch_id, "offsets": appended})
        self.clear_pending()
        for old in [p for p in self.path.iterdir() if p.name.isdigit() and int(p.name) <= batch_id - KEEP_ENTRIES]:
            old.unlink()

    def clear_pending(self) -> None:
        try:
            (self.path / PENDING).unlink()
        except FileNotFoundError:
            return
        fsync_directory(self.path)


def _name(topic: str, partition: int) -> str:
    return f"{topic}-{partition}"


def _resolve_pending(ld: LogDir, sink: SinkLog) -> None:
    """Finish what a killed commit left: record a batch that is all in, or take a partial one out."""
    pending = sink.pending()
    if pending is None:
        return
    batch_id = pending["batch"]
    if sink.entry(batch_id) is not None:
        sink.clear_pending()
        return
    state = {}
    for name, entry in pending["partitions"].items():
        log_ = ld.log(name)
        start, batches = entry["start"], entry["batches"]
        matched, after = ours(log_, start, batches)
        end = log_.log_end_offset
        state[name] = (log_, start, matched, after, end, len(batches))
    if all(matched == total for _l, _s, matched, _a, _e, total in state.values()):
        appended = {name: [start, after - 1] for name, (_l, start, _m, after, _e, _t) in state.items()}
        log.warning("kafkalog sink: micro-batch %d was appended before the query stopped; recording it", batch_id)
        sink.complete(batch_id, appended)
        return
    for name, (_log, start, _matched, after, end, _total) in state.items():
        if end != after:
            raise SinkConflict(
                f"{name}: micro-batch {batch_id} was cut short at offset {after} by a crash and offsets "
                f"{after}..{end - 1} were appended by someone else since; the sink cannot take its part out "
                f"without losing them (truncate {name} to {start} by hand, then restart the query)"
            )
    for name, (log_, start, _matched, _after, end, _total) in state.items():
        if end > start:
            log.warning("kafkalog sink: taking out part of micro-batch %d from %s (offsets %d..%d)",
                        batch_id, name, start, end - 1)
            log_.truncate_to(start)
            log_.flush()
    sink.clear_pending()


def commit_micro_batch(
    logdir: str,
    sink_path: Path,
    batch_id: int,
    files: list[StagedFile],
    settings: Settings,
    *,
    new_topic_partitions: int = 1,
) -> dict[str, list[int]] | None:
    """Append one micro-batch's staged files exactly once; ``{partition: [first, last]}``, or None when
    the sink log shows the batch was appended already."""
    with LogDir(logdir, settings, writable=True) as ld:
        sink = SinkLog(sink_path)
        _resolve_pending(ld, sink)
        if sink.entry(batch_id) is not None:
            log.info("kafkalog sink: micro-batch %d was appended already; skipping its replay", batch_id)
            return None
        latest = sink.latest()
        if latest is not None and batch_id < latest:
            log.warning("kafkalog sink: micro-batch %d is older than the last one recorded (%d)", batch_id, latest)
        check_staged(ld, files)
        create_topics(ld, {sf.topic for sf in files if sf.records}, new_topic_partitions)
        sink.begin(batch_id, intent_of(ld, files))
        try:
            appended = append_staged(ld, files, new_topic_partitions=new_topic_partitions, check=False)
        except BaseException:
            sink.clear_pending()  # append_staged truncated every partition back
            raise
        result = {_name(t, p): [first, last] for (t, p), (first, last) in sorted(appended.items())}
        sink.complete(batch_id, result)
        return result


def clear_staging(root: Path) -> None:
    """Remove what tasks staged (after a commit, an abort, or a restart of the query)."""
    if not root.exists():
        return
    for child in root.iterdir():
        if child.is_dir():
            shutil.rmtree(child, ignore_errors=True)
