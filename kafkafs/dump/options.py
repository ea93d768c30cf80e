"""The flags of ``kafka-dump-log`` that change what is printed."""

from __future__ import annotations

import argparse
import io
import os
import stat
from dataclasses import dataclass
from typing import BinaryIO, TextIO

from ..errors import InvalidInput, tag_os_error

__all__ = ["DumpOptions", "INT_MAX", "add_dump_arguments", "options_from_args", "run_from_args"]

INT_MAX = 2**31 - 1


@dataclass
class DumpOptions:
    """Kafka's options, with Kafka's implications: a decoder implies ``--print-data-log``, which
    implies ``--deep-iteration``."""

    print_data_log: bool = False
    deep_iteration: bool = False
    verify_index_only: bool = False
    index_sanity_check: bool = False
    skip_record_metadata: bool = False
    decoder: str | None = None  # a value of parsers.DECODERS: "offsets", "transaction-log", ...
    max_bytes: int = INT_MAX
    max_message_size: int = 5 * 1024 * 1024
    json: bool = False  # kafkafs's own: each line as a JSON object (jsonout.py)

    def __post_init__(self) -> None:
        if self.decoder is not None:
            self.print_data_log = True
        if self.print_data_log:
            self.deep_iteration = True


def _size(text: str) -> int:
    """A byte count for ``--max-bytes`` / ``--max-message-size``: a Java int, 0 or more (Kafka's
    ``FileRecords.slice`` refuses a negative size)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid int value: {text!r}") from None
    if not 0 <= value <= INT_MAX:
        raise argparse.ArgumentTypeError(f"{value} is not a size from 0 to {INT_MAX}")
    return value


def add_dump_arguments(p: argparse.ArgumentParser) -> None:
    """``kafkafs dump``'s arguments: Kafka's flags (argparse also takes unambiguous prefixes, so the
    older ``--deep``, ``--print-data`` and ``--verify-index`` keep working)."""
    p.add_argument(
        "file", nargs="*", metavar="FILE", help=".log, .index, .timeindex, .txnindex, .snapshot, ..."
    )
    p.add_argument(
        "--files", action="append", metavar="FILE1,FILE2", help="comma-separated files (Kafka's form)"
    )
    p.add_argument(
        "--print-data-log", action="store_true", help="print keys and values (implies --deep-iteration)"
    )
    p.add_argument("--deep-iteration", action="store_true", help="print every record, not only batches")
    p.add_argument(
        "--verify-index-only", action="store_true", help="check index entries against the log, print none"
    )
    p.add_argument(
        "--index-sanity-check", action="store_true", help="only the check a broker runs at startup"
    )
    p.add_argument(
        "--skip-record-metadata", action="store_true",
        help="record lines without offset, sizes, ...; a control record's line is left empty (as Kafka 4.x)",
    )
    p.add_argument(
        "--max-bytes", type=_size, default=INT_MAX, metavar="N", help="read only the first N bytes of a .log"
    )
    p.add_argument(
        "--max-message-size",
        type=_size,
        default=5 * 1024 * 1024,
        metavar="N",
        help="largest batch (index checks)",
    )
    p.add_argument("--json", action="store_true", help="kafkafs's own: each line as a JSON object, for scripts")
    g = p.add_mutually_exclusive_group()
    for flag, name, topic in (
        ("--offsets-decoder", "offsets", "__consumer_offsets"),
        ("--transaction-log-decoder", "transaction-log", "__transaction_state"),
        ("--cluster-metadata-decoder", "cluster-metadata", "__cluster_metadata"),
        ("--share-group-state-decoder", "share-group-state", "__share_group_state"),
        ("--remote-log-metadata-decoder", "remote-log-metadata", "__remote_log_metadata"),
    ):
        g.add_argument(
            flag,
            dest="decoder",
            action="store_const",
            const=name,
            help=f"decode {topic} records (implies --print-data-log)",
        )


def options_from_args(args: argparse.Namespace) -> DumpOptions:
    return DumpOptions(
        print_data_log=args.print_data_log,
        deep_iteration=args.deep_iteration,
        verify_index_only=args.verify_index_only,
        index_sanity_check=args.index_sanity_check,
        skip_record_metadata=args.skip_record_metadata,
        decoder=args.decoder,
        max_bytes=args.max_bytes,
        max_message_size=args.max_message_size,
        json=args.json,
    )


def run_from_args(args: argparse.Namespace, out: BinaryIO, err: TextIO) -> int:
    """``kafkafs dump``: the files named (``InvalidInput`` for none, or one that is not a file), dumped
    to ``out`` as UTF-8 text; the exit code."""
    from . import dump_files, unusable

    files = [*args.file, *(f for item in args.files or [] for f in item.split(",") if f)]
    if not files:
        raise InvalidInput("nothing to dump: name a file, or --files FILE1,FILE2 as kafka-dump-log takes them")
    for name in files:
        try:
            mode = os.stat(name).st_mode
        except (FileNotFoundError, NotADirectoryError):
            raise InvalidInput(f"{name}: no such file") from None
        except OSError as exc:  # it may well be there (a folder without search permission): the work failed
            raise tag_os_error(exc, "read {path}", name) from None
        if not stat.S_ISREG(mode):
            raise InvalidInput(f"{name}: not a file")
    # a file of no kind dump knows: Kafka's "Ignoring unknown file", exit 0 (files.unusable); a segment
    # name without its base offset, where Kafka stops with a stack trace: when no path named is one dump
    # takes, that is a usage error (SPEC §4: exit 2), said in one line
    reasons = [unusable(name) for name in files]
    if all(reasons):
        raise InvalidInput(f"{reasons[0]}" + (f" (and {len(files) - 1} more such)" if len(files) > 1 else ""))
    text = io.TextIOWrapper(out, encoding="utf-8", errors="replace", newline="\n")
    try:
        return dump_files(files, text, err, options_from_args(args))
    finally:
        text.flush()
        text.detach()
