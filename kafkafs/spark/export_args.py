"""``kafkafs export``'s command line: every kafkalog option (``--option KEY=VALUE``, repeatable), the
common ones as flags, and the run (:func:`kafkafs.spark.export.export`)."""

from __future__ import annotations

import argparse

from ..errors import InvalidInput
from ..format.timestamps import parse_target_time

__all__ = ["add_export_arguments", "options_from_args", "run_from_args"]

#: flag -> (its attribute, the kafkalog option it sets, how its value becomes the option's)
_FLAGS: dict[str, tuple[str, str, str]] = {
    "--pattern": ("pattern", "subscribePattern", "a whole-name regex of topics (subscribePattern)"),
    "--assign": ("assign", "assign", 'partitions, as JSON: {"orders": [0, 1]}'),
    "--starting-offsets": ("starting_offsets", "startingOffsets", 'earliest (default) or {"orders": {"0": 42}}'),
    "--ending-offsets": ("ending_offsets", "endingOffsets", 'latest (default) or {"orders": {"0": 99}}'),
    "--starting-timestamp": ("starting_timestamp", "startingTimestamp",
                             "the first record at or after TS in every partition (epoch ms or ISO-8601 UTC)"),
    "--ending-timestamp": ("ending_timestamp", "endingTimestamp",
                           "stop before the first record at or after TS (epoch ms or ISO-8601 UTC)"),
    "--isolation-level": ("isolation_level", "kafka.isolation.level",
                          "read_uncommitted (default) or read_committed"),
    "--min-partitions": ("min_partitions", "minPartitions", "at least N Spark tasks"),
}
_TIMES = ("startingTimestamp", "endingTimestamp")


def add_export_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("logdir", nargs="+")
    p.add_argument("out")
    p.add_argument("--format", choices=["parquet", "json", "csv"], default="parquet")
    p.add_argument("--master", default="local[*]", help="Spark master (default local[*])")
    p.add_argument("--topics", help="comma-separated topics (the subscribe option; default: all)")
    for flag, (dest, _option, text) in _FLAGS.items():
        p.add_argument(flag, dest=dest, metavar="TS" if "timestamp" in flag else None, help=text)
    p.add_argument("--no-headers", action="store_true", help="leave the headers column out (includeHeaders=false)")
    p.add_argument(
        "--option", "-O", action="append", default=[], metavar="KEY=VALUE",
        help="any kafkalog option (repeatable), e.g. -O failOnDataLoss=false -O onCorrupt=skip",
    )


def options_from_args(args: argparse.Namespace) -> dict[str, str]:
    """The kafkalog options the flags and ``--option``s give; InvalidInput (exit 2) for one given twice
    or not in KEY=VALUE form."""
    options: dict[str, str] = {}
    seen: dict[str, str] = {}

    def put(key: str, value: str, said: str) -> None:
        low = key.lower()
        if low in seen:
            raise InvalidInput(f"option {key} is given twice ({seen[low]} and {said})")
        seen[low] = said
        options[key] = value

    for item in args.option:
        key, eq, value = item.partition("=")
        if not eq or not key.strip():
            raise InvalidInput(f"--option {item!r}: expected KEY=VALUE, e.g. startingTimestamp=1795255200000")
        put(key.strip(), value, f"--option {key.strip()}")
    for flag, (dest, option, _text) in _FLAGS.items():
        value = getattr(args, dest)
        if value is None:
            continue
        if option in _TIMES:
            value = _time(flag, value)
        put(option, value, flag)
    if args.no_headers:
        put("includeHeaders", "false", "--no-headers")
    return options


def _time(flag: str, text: str) -> str:
    """The epoch ms of a time flag (ISO-8601 as well as epoch ms; a bound rounds up), which takes times
    only, never negative, as ``consume --from-time`` (review16 R16-1): Spark's -2 and -1 (earliest,
    latest) are the option's (``-O startingTimestamp=-2``) or the offsets flags'. InvalidInput naming the flag."""
    try:
        return str(parse_target_time(text))
    except InvalidInput as exc:
        said = f"{flag}: {exc}"
    if "never negative" in said:
        offsets = flag.replace("timestamp", "offsets")
        said += (f"; for the earliest or latest offset use {offsets} earliest|latest (or -O "
                 f"{_FLAGS[flag][1]}=-2|-1, Spark's meaning)")
    raise InvalidInput(said)


def run_from_args(args: argparse.Namespace) -> int:
    from .export import export

    topics = [t for t in (args.topics or "").split(",") if t] or None
    return export(args.logdir, args.out, fmt=args.format, topics=topics, options=options_from_args(args),
                  master=args.master)
