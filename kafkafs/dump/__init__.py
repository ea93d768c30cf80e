"""``kafkafs dump``: Kafka's ``kafka-dump-log`` (``DumpLogSegments``), line for line.

Every file a partition folder holds is taken, chosen by its suffix as Kafka does: ``.log`` and KRaft
snapshots (``.checkpoint``) print their batches (and records with ``--deep-iteration``), ``.index``
and ``.timeindex`` their entries (or their checks with ``--verify-index-only`` and
``--index-sanity-check``), ``.snapshot`` the producer state, ``.txnindex`` the aborted transactions.
A file of any other kind (a broker's state files: ``leader-epoch-checkpoint``, ``partition.metadata``,
``meta.properties``, the checkpoints; a ``.deleted``, ``.cleaned`` or ``.swap`` leftover; any other
name) prints ``Dumping FILE`` and ``Ignoring unknown file FILE`` (stderr), exit 0, as Kafka 4's tool does.

What goes to standard output is exactly what Kafka prints; the mismatches that Kafka collects go to
standard error at the end, in Kafka's words and order. Where Kafka would die with a stack trace
(a batch that names an unknown codec, an index that fails its sanity check, a damaged snapshot) one
clear line goes to standard error instead and the dump goes on. The exit code is 1 when anything was
found wrong (SPEC §4), else 0. Nothing here writes.
"""

from __future__ import annotations

from typing import TextIO

from .options import DumpOptions

__all__ = ["DumpOptions", "dump_files", "unusable"]


def unusable(name: str) -> str | None:
    """Why ``name`` is not a file ``dump`` takes, or None (:func:`.files.unusable`, imported on use)."""
    from .files import unusable as why

    return why(name)


def dump_files(files: list[str], out: TextIO, err: TextIO, options: DumpOptions) -> int:
    """Dump each of ``files`` as Kafka would; return the exit code (1 if anything was found wrong).
    (Imported on use, so that building the command line's parser stays cheap.)"""
    from .files import dump_files as run

    if options.json:
        from .jsonout import JsonLines

        lines = JsonLines(out)
        try:
            return run(files, lines, err, options)  # type: ignore[arg-type]  # JsonLines writes what the text printers write
        finally:
            lines.flush()
    return run(files, out, err, options)
