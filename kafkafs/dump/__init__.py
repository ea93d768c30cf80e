"""``kafkafs dump``: Kafka's ``kafka-dump-log`` (``DumpLogSegments``), line for line.

Every file a partition folder holds is taken, chosen by its suffix as Kafka does: ``.log`` and KRaft
snapshots (``.checkpoint``) print their batches (and records with ``--deep-iteration``), ``.index``
and ``.timeindex`` their entries (or their checks with ``--verify-index-only`` and
``--index-sanity-check``), ``.snapshot`` the producer state, ``.txnindex`` the aborted transactions.
``leader-epoch-checkpoint``, which Kafka's tool cannot read, prints ``epoch: E startOffset: O`` lines.

What goes to standard output is exactly what Kafka prints; the mismatches that Kafka collects go to
standard error at the end, in Kafka's words and order. Where Kafka would die with a stack trace
(a batch that names an unknown codec, an index that fails its sanity check, a damaged snapshot) one
clear line goes to standard error instead and the dump goes on. The exit code is 1 when anything was
found wrong (SPEC §4), else 0. Nothing here writes.
"""

from __future__ import annotations

import os
from typing import TextIO

from .indexes import IndexErrors, dump_index, dump_time_index
from .log import dump_log
from .options import DumpOptions
from .state import dump_epoch_checkpoint, dump_producer_snapshot, dump_txn_index

__all__ = ["DumpOptions", "dump_files"]


def dump_files(files: list[str], out: TextIO, err: TextIO, options: DumpOptions) -> int:
    """Dump each of ``files`` as Kafka would; return the exit code (1 if anything was found wrong)."""
    errors = IndexErrors()
    problems = 0
    for name in files:
        print(f"Dumping {name}", file=out)
        base = os.path.basename(name)
        suffix = base[base.rfind(".") :] if "." in base else base
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
            elif base == "leader-epoch-checkpoint":
                problems += dump_epoch_checkpoint(name, out, err)
            else:
                print(f"Ignoring unknown file {name}", file=err)
        except BrokenPipeError:
            raise
        except OSError as exc:
            print(f"kafkafs: error: {name}: {exc.strerror or exc}", file=err)
            problems += 1
    problems += errors.print(err)
    return 1 if problems else 0
