"""The ``kafkafs`` command: parse arguments, call the layers, turn errors into one line and an exit code.

Exit codes: 0 success, 1 damage found (``verify``) or an operation that failed on bad data, 2 a usage
or input mistake, 130 interrupted.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from . import __version__
from .errors import ConfigError, CorruptRecordError, InvalidInput, InvalidName, KafkafsError, LogDirLocked

EXIT_OK = 0
EXIT_DAMAGE = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130

log = logging.getLogger("kafkafs")


class CommandError(KafkafsError):
    """A user mistake found by the command line itself."""


# ---------------------------------------------------------------------------------------------- shared


def _settings(args: argparse.Namespace):
    from .storage.config import Settings, parse_set_options

    overrides = parse_set_options(getattr(args, "set", None) or [])
    return Settings.load(getattr(args, "config", None), overrides)


def _add_settings_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--config", metavar="FILE", help="TOML settings file (default: /etc/kafkafs/kafkafs.toml when it exists)"
    )
    parser.add_argument(
        "--set", action="append", metavar="KEY=VALUE", help="a one-off default setting, e.g. segment.bytes=1048576"
    )


def _add_values_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--values", choices=["auto", "string", "base64"], default="auto", help="how keys and values render"
    )


def _open_logdir(path: str, args: argparse.Namespace, *, writable: bool):
    from .storage.logdir import LogDir

    if os.path.exists(path) and not os.path.isdir(path):
        raise CommandError(f"{path} is not a directory (a log directory holds <topic>-<partition> folders)")

    return LogDir(path, _settings(args), writable=writable)


def _stdout() -> object:
    return sys.stdout.buffer


def _raise_fd_limit() -> None:
    """Partitions can have thousands of segments: let this process open as many files as it may."""
    try:
        import resource

        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft != hard:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    except (ImportError, ValueError, OSError):
        pass


# ---------------------------------------------------------------------------------------------- mount


def cmd_mount(args: argparse.Namespace) -> int:
    try:
        from .fs.mount import mount
    except ImportError as exc:
        raise CommandError(f"the FUSE mount is not available here: {exc}") from None

    options: list[str] = []
    for item in args.options or []:
        options.extend(o for o in item.split(",") if o)
    return mount(
        args.logdir,
        args.mountpoint,
        rw=args.rw,
        foreground=args.foreground,
        fuse_options=options,
        values=args.values,
        settings=_settings(args),
        debug=args.debug,
    )


# ---------------------------------------------------------------------------------------------- produce


def _read_line_groups(fd: int, max_lines: int = 1000, max_bytes: int = 512 * 1024):
    """Complete lines as they arrive on ``fd``, as ``(first line number, lines)`` groups: the complete
    lines of one ``read()`` form a group (cut at ``max_lines`` / ``max_bytes`` so a batch stays under
    ``max.message.bytes``), as the ``append`` file does with one ``write()``. A last line without a
    newline counts at end of input."""
    pending = b""
    number = 1
    while True:
        chunk = os.read(fd, 1 << 20)
        if not chunk:
            lines = [pending] if pending else []
        else:
            data = pending + chunk
            cut = data.rfind(b"\n")
            if cut < 0:
                pending = data
                continue
            lines = data[:cut].split(b"\n")
            pending = data[cut + 1 :]
        group: list[bytes] = []
        size = 0
        first = number
        for line in lines:
            group.append(line)
            size += len(line)
            number += 1
            if len(group) >= max_lines or size >= max_bytes:
                yield first, group
                group, size, first = [], 0, number
        if group:
            yield first, group
        if not chunk:
            return


def cmd_produce(args: argparse.Namespace) -> int:
    from .format.jsonview import parse_lines
    from .storage.log import parse_partition_dir_name

    topic, partition = parse_partition_dir_name(args.partition)
    with _open_logdir(args.logdir, args, writable=True) as logdir:
        exists = args.partition in logdir.partition_names()
        if not exists and args.no_create:
            raise InvalidName(f"no partition {args.partition} in {args.logdir} (drop --no-create to create it)")
        log_ = logdir.log(args.partition) if exists else None
        total = 0
        first_offset = None
        last_offset = None
        for first_line, lines in _read_line_groups(sys.stdin.fileno()):
            try:
                records = parse_lines(lines, first_line)
            except InvalidInput as exc:
                done = f"; the {total} records before it were appended" if total else ""
                raise InvalidInput(f"{exc}; nothing from its batch was appended{done}") from None
            if log_ is None:  # created once there is something valid to put in it
                print(f"kafkafs: creating partition {args.partition}", file=sys.stderr)
                log_ = logdir.create_partition(topic, partition)
            result = log_.append_records(records)
            total += len(records)
            first_offset = result.first_offset if first_offset is None else first_offset
            last_offset = result.last_offset
        if log_ is not None:
            log_.flush()
    if total:
        print(f"kafkafs: appended {total} records to {args.partition} at offsets {first_offset}..{last_offset}", file=sys.stderr)
    else:
        print("kafkafs: nothing to append (empty input)", file=sys.stderr)
    return EXIT_OK


# ---------------------------------------------------------------------------------------------- consume


def cmd_consume(args: argparse.Namespace) -> int:
    from .format.jsonview import parse_timestamp, render_batch_jsonl

    logdir = _open_logdir(args.logdir, args, writable=False)
    log_ = logdir.log(args.partition)
    out = _stdout()
    start = log_.log_start_offset
    if args.from_offset is not None:
        start = args.from_offset
        if start < 0:
            start = max(log_.log_end_offset + start, log_.log_start_offset)
    elif args.from_time is not None:
        found = log_.offset_for_timestamp(parse_timestamp(args.from_time))
        start = found[0] if found else log_.log_end_offset
    start = max(start, log_.log_start_offset)
    remaining = args.max_records
    next_offset = start
    try:
        while True:
            for batch in log_.read(next_offset, validate=True) if next_offset <= log_.log_end_offset else ():
                if not len(batch):
                    next_offset = max(next_offset, batch.header.next_offset)
                    continue
                stop = None
                if remaining is not None:
                    stop = min(len(batch), remaining)
                out.write(render_batch_jsonl(log_.topic, log_.partition, batch, args.values, 0, stop))
                if remaining is not None:
                    remaining -= stop
                    if remaining <= 0:
                        out.flush()
                        return EXIT_OK
                next_offset = max(next_offset, batch.header.next_offset)
            out.flush()
            if not args.follow:
                return EXIT_OK
            while not log_.wait_for_records(next_offset - 1, timeout=1.0):
                pass
    finally:
        logdir.close()


# ---------------------------------------------------------------------------------------------- dump


def cmd_dump(args: argparse.Namespace) -> int:
    from .inspect import dump_segment

    return dump_segment(Path(args.segment), _stdout(), deep=args.deep, payload=args.print_data,
                        verify_index=args.verify_index, values=args.values)


def cmd_verify(args: argparse.Namespace) -> int:
    from .inspect import verify_logdir

    _raise_fd_limit()
    logdir = _open_logdir(args.logdir, args, writable=False)
    try:
        problems = verify_logdir(logdir, sys.stdout, deep=not args.shallow, partitions=args.partition)
    finally:
        logdir.close()
    return EXIT_DAMAGE if problems else EXIT_OK


def _segment_files_state(directory: Path) -> dict[str, object]:
    """What recovery may change in a partition folder: index bytes (hashed) and ``.log`` sizes."""
    import hashlib

    state: dict[str, object] = {}
    for entry in os.scandir(directory):
        name = entry.name
        if name.endswith((".index", ".timeindex", ".txnindex")):
            with open(entry.path, "rb") as f:
                state[name] = hashlib.sha1(f.read(), usedforsecurity=False).digest()
        elif name.endswith(".log") or name.endswith((".deleted", ".cleaned", ".swap")):
            state[name] = entry.stat().st_size
    return state


def cmd_recover(args: argparse.Namespace) -> int:
    from .storage.logdir import LogDir

    _raise_fd_limit()
    logdir = LogDir(args.logdir, _settings(args), writable=True)
    # recover every segment of every partition, as after a crash with no recovery point
    logdir.clean_shutdown = False
    logdir.recovery_points = {}
    names = logdir.partition_names()
    before = {name: _segment_files_state(logdir.path / name) for name in names}
    reports = {}
    try:
        for name in names:
            log_ = logdir.log(name)
            reports[name] = (log_.last_recovery, log_.log_start_offset, log_.log_end_offset)
    finally:
        logdir.close()
    changed = 0
    for name in names:
        report, start, end = reports[name]
        after = _segment_files_state(logdir.path / name)
        if after == before[name]:
            status = "checked, nothing to change"
        else:
            changed += 1
            lines = [line for line in (report.lines() if report else []) if not line.startswith("rebuilt indexes")]
            rebuilt = sorted(f for f in after if f.endswith(("index", "timeindex")) and after[f] != before[name].get(f))
            if rebuilt:
                lines.append("rebuilt " + ", ".join(rebuilt))
            status = "; ".join(lines) or "files changed"
        span = f"offsets {start}..{end - 1}" if end > start else f"empty, next offset {end}"
        print(f"{name}: {status} ({span})")
    print(f"recovered {len(names)} partition(s), {changed} changed; clean shutdown marked")
    return EXIT_OK


def cmd_clean(args: argparse.Namespace) -> int:
    from .storage.cleaner import clean_logdir

    _raise_fd_limit()
    with _open_logdir(args.logdir, args, writable=True) as logdir:
        for line in clean_logdir(logdir, dry_run=args.dry_run):
            print(line)
    return EXIT_OK


def cmd_demo(args: argparse.Namespace) -> int:
    from .demo import build_demo

    summary = build_demo(Path(args.dir), force=args.force)
    print(summary)
    return EXIT_OK


def cmd_export(args: argparse.Namespace) -> int:
    try:
        from .spark.export import export
    except ImportError as exc:
        raise CommandError(f"the Spark export is not available here: {exc}") from None

    topics = [t for t in (args.topics or "").split(",") if t] or None
    return export(args.logdir, args.out, fmt=args.format, topics=topics, master=args.master)


# ---------------------------------------------------------------------------------------------- parser


class _Parser(argparse.ArgumentParser):
    """argparse with SPEC §4's errors: one line on stderr (with where to look), exit 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(EXIT_USAGE, f"kafkafs: error: {message} (see '{self.prog} --help')\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="kafkafs", description="Apache Kafka's on-disk log as ordinary files.",
    )
    parser.add_argument("--version", action="version", version=f"kafkafs {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="log what happens (to stderr)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

    p = sub.add_parser("mount", help="mount a log directory (read-only unless --rw)")
    p.add_argument("logdir")
    p.add_argument("mountpoint")
    p.add_argument("--rw", action="store_true", help="allow appends (takes the log directory's .lock)")
    p.add_argument("-f", "--foreground", action="store_true", help="stay attached instead of daemonizing")
    p.add_argument("-o", dest="options", action="append", metavar="OPT[,OPT]", help="FUSE options, e.g. allow_other")
    _add_values_option(p)
    p.add_argument("-d", "--debug", action="store_true", help="debug logging (implies --foreground)")
    _add_settings_options(p)
    p.set_defaults(func=cmd_mount)

    p = sub.add_parser("produce", help="append lines from stdin to a partition (as the append file does)")
    p.add_argument("logdir")
    p.add_argument("partition", metavar="TOPIC-PARTITION")
    p.add_argument("--no-create", action="store_true", help="fail instead of creating a missing partition")
    _add_settings_options(p)
    p.set_defaults(func=cmd_produce)

    p = sub.add_parser("consume", help="print a partition's records as JSON lines")
    p.add_argument("logdir")
    p.add_argument("partition", metavar="TOPIC-PARTITION")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--from-offset", type=int, metavar="N", help="first offset (negative: that many from the end)")
    g.add_argument("--from-time", metavar="TS", help="first record at or after TS (epoch ms or ISO-8601 UTC)")
    p.add_argument("--follow", action="store_true", help="keep printing new records")
    p.add_argument("--max-records", type=int, metavar="N", help="stop after N records")
    _add_values_option(p)
    _add_settings_options(p)
    p.set_defaults(func=cmd_consume)

    p = sub.add_parser("dump", help="print a segment's batches (and records), like kafka-dump-log")
    p.add_argument("segment", metavar="SEGMENT.log")
    p.add_argument("--deep", "--deep-iteration", action="store_true", help="print every record too")
    p.add_argument("--print-data", action="store_true", help="print keys and values (implies --deep)")
    p.add_argument("--verify-index", action="store_true", help="check the .index and .timeindex against the log")
    _add_values_option(p)
    p.set_defaults(func=cmd_dump)

    p = sub.add_parser("verify", help="check CRCs, offsets and indexes; exit 1 on damage")
    p.add_argument("logdir")
    p.add_argument("--partition", action="append", metavar="TOPIC-PARTITION", help="only these partitions")
    p.add_argument("--shallow", action="store_true", help="check batch headers and CRCs only, not every record")
    _add_settings_options(p)
    p.set_defaults(func=cmd_verify)

    p = sub.add_parser("recover", help="recover a log directory as after a crash: validate, truncate, reindex")
    p.add_argument("logdir")
    _add_settings_options(p)
    p.set_defaults(func=cmd_recover)

    p = sub.add_parser("clean", help="apply retention (cleanup.policy=delete) and compaction (compact)")
    p.add_argument("logdir")
    p.add_argument("--dry-run", action="store_true", help="say what would be removed, change nothing")
    _add_settings_options(p)
    p.set_defaults(func=cmd_clean)

    p = sub.add_parser("demo", help="write a sample log directory")
    p.add_argument("dir")
    p.add_argument("--force", action="store_true", help="replace DIR if it holds an earlier demo")
    p.set_defaults(func=cmd_demo)

    p = sub.add_parser("export", help="export log directories with Spark (parquet, json or csv)")
    p.add_argument("logdir", nargs="+")
    p.add_argument("out")
    p.add_argument("--format", choices=["parquet", "json", "csv"], default="parquet")
    p.add_argument("--topics", help="comma-separated topics (default: all)")
    p.add_argument("--master", default="local[*]", help="Spark master (default local[*])")
    p.set_defaults(func=cmd_export)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "command", None):
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    logging.basicConfig(
        level=logging.DEBUG if getattr(args, "debug", False) else (logging.INFO if args.verbose else logging.WARNING),
        format="kafkafs: %(levelname)s: %(message)s",
    )
    if args.command in ("consume", "mount", "dump"):  # the commands that render records
        from .format.kernel import missing_note

        note = missing_note()
        if note:
            print(f"kafkafs: warning: {note}", file=sys.stderr)
    try:
        return args.func(args)
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        # the reader went away (e.g. `| head`): not an error
        try:
            sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - silence the flush at exit
        except OSError:
            pass
        return EXIT_OK
    except (InvalidInput, InvalidName, ConfigError, LogDirLocked, CommandError) as exc:
        print(f"kafkafs: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except CorruptRecordError as exc:
        print(f"kafkafs: damaged data: {exc}", file=sys.stderr)
        return EXIT_DAMAGE
    except KafkafsError as exc:
        print(f"kafkafs: error: {exc}", file=sys.stderr)
        return EXIT_DAMAGE
    except OSError as exc:
        where = f"{exc.filename}: " if exc.filename else ""
        print(f"kafkafs: error: {where}{exc.strerror or exc}", file=sys.stderr)
        return EXIT_DAMAGE


if __name__ == "__main__":
    sys.exit(main())
