"""``kafkafs consume``'s command line: its arguments, and what they ask :func:`.consume.consume` for
(where to start and stop, which records, the key indexes to read); :mod:`.consume` says what each
form means. Usage errors are :class:`~.errors.InvalidInput`, raised before anything is read."""

from __future__ import annotations

import argparse
import base64
import binascii
import re
from typing import Any

from .consume_plan import OffsetSpec, parse_offset_spec
from .errors import InvalidInput
from .format.recordfilter import MAX_HEADERS, RecordFilter
from .format.timestamps import parse_target_time

__all__ = ["add_consume_arguments", "start_from_args", "filter_from_args", "filters_from_args", "keys_store_for"]


def _count(text: str) -> int:
    """``-c N``: how many records, 0 or more."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid int value: {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{value} is not a count (0 or more)")
    return value


def add_consume_arguments(p: argparse.ArgumentParser) -> None:
    """``kafkafs consume``'s own arguments (values, schemas and settings come from the command line)."""
    p.add_argument("partition", nargs="?", metavar="TOPIC[-PARTITION]", help="a partition folder, or a whole topic")
    p.add_argument("-t", "--topic", help="the topic, never a partition folder (kcat style; every partition unless -p)")
    p.add_argument("-p", dest="partition_number", type=int, metavar="N", help="the partition (with -t)")
    p.add_argument("-o", "--offset", "--from-offset", dest="offset", action="append", metavar="OFFSET",
                   help="beginning|earliest, end|latest, N, -N (from the end), s@TS (start), e@TS (stop)")
    p.add_argument("--from-time", metavar="TS", help="first record at or after TS (epoch ms or ISO-8601 UTC)")
    p.add_argument("-c", "--count", "--max-records", dest="count", type=_count, metavar="N", help="stop after N records")
    p.add_argument("-f", "--follow", action="store_true", help="keep printing new records")
    p.add_argument("-e", dest="exit_at_end", action="store_true", help="exit at the end (the default; kcat's -e)")
    p.add_argument("--no-interleave", action="store_true", help="a whole topic partition by partition, not by time")
    key = p.add_mutually_exclusive_group()
    key.add_argument("--key", metavar="K", help="only records whose key is K (its UTF-8 text)")
    key.add_argument("--key-base64", metavar="B", help="only records whose key is these bytes (base64)")
    p.add_argument("--header", action="append", metavar="NAME[=VALUE]",
                   help="only records with this header (and value; an empty NAME is the empty header key, "
                        "'=VALUE'); repeat for several, all must hold")
    p.add_argument("--grep", metavar="REGEX", help="only records whose rendered JSON line REGEX matches (Python re)")


def filters_from_args(args: argparse.Namespace) -> dict[str, Any]:
    """consume()'s ``record_filter``, ``grep`` and ``keys_store`` from the command line."""
    record_filter, grep = filter_from_args(args)
    keyed = record_filter is not None and record_filter.key is not None
    return {"record_filter": record_filter, "grep": grep, "keys_store": keys_store_for(args) if keyed else None}


def keys_store_for(args: argparse.Namespace):
    """The key indexes of the cache folder (``--cache-dir``; '' turns them off), read only: consume never
    builds one (a segment without one is scanned). None when there is no cache folder."""
    from .storage.cachedir import check_outside, default_cache_dir
    from .storage.keyindex import KeyIndexStore

    if args.cache_dir == "":
        return None
    directory = check_outside(args.cache_dir if args.cache_dir is not None else default_cache_dir(), args.logdir)
    return KeyIndexStore(directory) if directory.is_dir() else None


def filter_from_args(args: argparse.Namespace) -> tuple[RecordFilter | None, re.Pattern | None]:
    """``--key``/``--key-base64``/``--header`` as a record filter, ``--grep`` compiled; InvalidInput for
    what does not parse."""
    key = None
    if args.key is not None:
        key = args.key.encode("utf-8", "surrogateescape")
    elif args.key_base64 is not None:
        text = args.key_base64.strip().replace("-", "+").replace("_", "/")  # base64url too
        try:
            key = base64.b64decode(text + "=" * (-len(text.rstrip("=")) % 4 if "=" not in text else 0), validate=True)
        except (binascii.Error, ValueError):
            raise InvalidInput(f"--key-base64 {args.key_base64!r}: not base64") from None
    headers = []
    for item in args.header or []:
        name, sep, value = item.partition("=")  # an empty NAME: the empty header key, which Kafka allows
        headers.append((name, value.encode("utf-8", "surrogateescape") if sep else None))
    if len(headers) > MAX_HEADERS:
        raise InvalidInput(f"at most {MAX_HEADERS} --header options")
    grep = None
    if args.grep is not None:
        try:
            grep = re.compile(args.grep)
        except re.error as exc:
            raise InvalidInput(f"--grep {args.grep!r}: {exc}") from None
    wanted = RecordFilter(key=key, headers=tuple(headers))
    return (None if wanted.empty else wanted), grep


def start_from_args(args: argparse.Namespace) -> tuple[OffsetSpec, int | None]:
    """(where to start, the timestamp to stop before) from ``-o`` (repeatable: one start and one
    ``e@TS`` stop, as kcat takes them) and ``--from-time``. Two starts are a usage error (InvalidInput):
    SPEC §4's ``--from-offset N | --from-time TS`` are alternatives, and a second start quietly winning
    would read other records than the user asked for."""
    spec, stop_ts = OffsetSpec("beginning"), None
    starts = []
    for item in args.offset or []:
        if item.lower().startswith("e@"):
            stop_ts = parse_target_time(item[2:])
        else:
            spec = parse_offset_spec(item)
            starts.append(f"-o/--from-offset {item}")
    if args.from_time is not None:
        spec = OffsetSpec("time", parse_target_time(args.from_time))
        starts.append(f"--from-time {args.from_time}")
    if len(starts) > 1:
        raise InvalidInput(f"give one place to start (got {' and '.join(starts)})")
    return spec, stop_ts
