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

def _suffix(base: str) -> str:
    return base[base.rfind(".") :] if "." in base else base


def unusable(name: str) -> str | None:
    """Why ``name`` is not a file ``dump`` can take (a segment name without its base offset, where
    kafka-dump-log stops with a stack trace), or None. The same rules as the dumpers' own, asked before
    anything is printed. A file of any other kind is taken and ignored, as kafka-dump-log (4.x) takes
    it: a broker's state files (``meta.properties``, ``leader-epoch-checkpoint``, ...), the leftovers
    of a deletion or a compaction (``.deleted``, ``.cleaned``, ``.swap``), any other name print
    ``Dumping FILE``, then ``Ignoring unknown file FILE`` on standard error, exit 0."""
    base = os.path.basename(name)
    suffix = _suffix(base)
    if suffix not in _KINDS:
        return None
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
                print(f"Ignoring unknown file {java_path(name)}", file=err)  # a java.io.File, as "Dumping"
        except BrokenPipeError:
            raise
        except OSError as exc:
            print(f"kafkafs: error: {describe_os_error(tag_os_error(exc, 'read {path}', name))}", file=err)
            problems += 1
    problems += errors.print(err)
    return 1 if problems else 0
