"""Each file dumped by its suffix, as ``DumpLogSegments.main`` chooses."""

from __future__ import annotations

import io
import os
from typing import TextIO

from ..errors import describe_os_error, tag_os_error
from .indexes import IndexErrors, dump_index, dump_time_index, java_path
from .log import _start_line, dump_log
from .options import DumpOptions
from .state import dump_producer_snapshot, dump_txn_index

__all__ = ["dump_files", "unusable"]

_KINDS = (".log", ".checkpoint", ".index", ".timeindex", ".snapshot", ".txnindex")

#: files a broker keeps in its log directories that kafka-dump-log (4.x) takes and ignores: it prints
#: "Dumping FILE", then "Ignoring unknown file FILE" on standard error, and exits 0
_STATE_FILES = (
    "meta.properties", "partition.metadata", "leader-epoch-checkpoint", "quorum-state", ".kafka_cleanshutdown",
    ".lock", "recovery-point-offset-checkpoint", "log-start-offset-checkpoint", "cleaner-offset-checkpoint",
    "replication-offset-checkpoint",
)


def _suffix(base: str) -> str:
    return base[base.rfind(".") :] if "." in base else base


def unusable(name: str) -> str | None:
    """Why ``name`` is not a file ``dump`` can take (an unknown kind, a segment name without its base
    offset), or None. The same rules as the dumpers' own, asked before anything is printed."""
    base = os.path.basename(name)
    suffix = _suffix(base)
    if base in _STATE_FILES:
        return None  # taken and ignored, as Kafka does
    if suffix not in _KINDS:
        return (f"{name}: not a file of a partition folder (.log, .index, .timeindex, .txnindex, .snapshot, "
                "a KRaft .checkpoint, or a broker's state file)")
    if suffix in (".log", ".checkpoint"):
        said = io.StringIO()
        if not _start_line(name, said)[1]:
            return said.getvalue().strip().removeprefix("kafkafs: error: ")
    if suffix in (".index", ".timeindex") and not base.split(".")[0].isdigit():
        return f"{name}: not a segment file name (<20-digit base offset>{base[base.find('.') :]})"
    return None


def dump_files(files: list[str], out: TextIO, err: TextIO, options: DumpOptions) -> int:
    """Dump each of ``files`` as Kafka would; return the exit code (1 if anything was found wrong)."""
    errors = IndexErrors()
    problems = 0
    for name in files:
        print(f"Dumping {java_path(name)}", file=out)  # println(s"Dumping $file"), a java.io.File
        base = os.path.basename(name)
        suffix = _suffix(base)
        try:
            if suffix in (".log", ".checkpoint"):
                problems += dump_log(name, out, err, options, errors)
            elif suffix == ".index":
                problems += dump_index(name, out, err, options, errors)
            elif suffix == ".timeindex":
                problems += dump_time_index(name, out, err, options, errors)
            elif suffix == ".snapshot":
                problems += dump_producer_snapshot(name, out, err)
            elif suffix == ".txnindex":
                problems += dump_txn_index(name, out, err)
            else:
                print(f"Ignoring unknown file {name}", file=err)
        except BrokenPipeError:
            raise
        except OSError as exc:
            print(f"kafkafs: error: {describe_os_error(tag_os_error(exc, 'read {path}', name))}", file=err)
            problems += 1
    problems += errors.print(err)
    return 1 if problems else 0
