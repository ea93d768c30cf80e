"""Which partitions a read covers: the partition folders of its log directories that its options
(``topics``, ``topicPattern``, ``assign``) and pushed-down filters want, and opening them in the
driver. Functions only.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator

from ..errors import InvalidInput, KafkafsError
from ..storage.log import Log
from ..storage.logdir import LogDir
from ..storage.names import parse_partition_dir_name
from ..storage.partition_folders import alias_reason, list_partition_folders
from .options import ReadOptions
from .predicates import NO_PREDICATES, Predicates

__all__ = ["discover_partitions", "iter_logs"]

log = logging.getLogger("kafkafs.spark")


def discover_partitions(options: ReadOptions, predicates: Predicates = NO_PREDICATES) -> list[tuple[str, str, int]]:
    """``(logdir, topic, partition)`` of every partition folder the read wants, sorted; the same partition
    in two directories is an error (its rows would be read twice)."""
    if not options.paths:
        raise InvalidInput("no log directory given: load(LOGDIR) or option path")
    found: dict[tuple[str, int], str] = {}
    for path in options.paths:
        if not os.path.isdir(path):
            raise InvalidInput(f"{path}: no such log directory")
        try:
            names, aliases = list_partition_folders(path)
        except OSError as exc:
            raise InvalidInput(f"{path}: {exc.strerror}") from None
        for alias, own in aliases.items():  # the same log under a second name: read once, by its own
            if _wanted(*parse_partition_dir_name(alias), options, predicates):
                log.warning("%s: skipped, read as %s only", alias_reason(path, alias, own), own)
        seen_any = False
        for name in names:
            topic, partition = parse_partition_dir_name(name)
            if not _wanted(topic, partition, options, predicates):
                continue
            other = found.get((topic, partition))
            if other is not None:
                raise InvalidInput(
                    f"partition {name} is in both {other} and {path}; read one of them (copies of a partition "
                    "would give every record twice)"
                )
            found[(topic, partition)] = path
            seen_any = True
        if not seen_any and _is_partition_folder(path):
            raise InvalidInput(
                f"{path} is a partition folder; load its log directory {os.path.dirname(os.path.abspath(path))} "
                f"(option topics selects topics)"
            )
    return sorted(((d, t, p) for (t, p), d in found.items()), key=lambda x: (x[1], x[2]))


def _is_partition_folder(path: str) -> bool:
    try:
        parse_partition_dir_name(os.path.basename(os.path.abspath(path)))
    except KafkafsError:
        return False
    return any(name.endswith(".log") for name in os.listdir(path))


def _wanted(topic: str, partition: int, options: ReadOptions, predicates: Predicates) -> bool:
    return options.accepts_partition(topic, partition) and predicates.accepts_partition(topic, partition)


def iter_logs(targets: list[tuple[str, str, int]]) -> Iterator[tuple[str, Log]]:
    """Open each target partition read-only, one log directory at a time (for offsets in the driver)."""
    by_dir: dict[str, list[tuple[str, int]]] = {}
    for d, t, p in targets:
        by_dir.setdefault(d, []).append((t, p))
    for d, parts in by_dir.items():
        with LogDir(d) as ld:
            for t, p in parts:
                yield d, ld.log(f"{t}-{p}")
