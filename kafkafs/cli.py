"""The ``kafkafs`` command: parse arguments, call the layers, turn errors into one line and an exit code.

Exit codes, the same for every command (SPEC §4), are :mod:`kafkafs.outcome`'s.
"""

from __future__ import annotations

import argparse
import errno
import logging
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

from . import __version__
from .errors import (
    KafkafsError,
    UninflatableBatch,
    UnsafeFileError,
    UsageError,
    describe_os_error,
    note_os_error,
    tag_os_error,
)
from .outcome import EXIT_DAMAGE, EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE, run_command
from .stderr import guard_stderr

if TYPE_CHECKING:
    from .storage.logdir import LogDir
    from .storage.recovery import RecoveryReport

log = logging.getLogger("kafkafs")


class CommandError(UsageError):
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


def _add_rendering_options(parser: argparse.ArgumentParser) -> None:
    """How records render: --values, and --schemas for Schema Registry payloads."""
    parser.add_argument(
        "--values", choices=["auto", "string", "base64"], default="auto", help="how keys and values render"
    )
    parser.add_argument(
        "--schemas", metavar="DIR",
        help="Schema Registry schemas as <id>.avsc / <id>.json files (besides LOGDIR's _schemas topic)",
    )


def _open_logdir(path: str, args: argparse.Namespace, *, writable: bool, strict: bool = True):
    """The log directory at ``path``; UsageError (exit 2) for a path that is not one (``strict``: an
    existing log directory is required, see :func:`~kafkafs.storage.logdir.check_log_directory`)."""
    from .storage.logdir import LogDir, check_log_directory

    if strict or os.path.exists(path):
        check_log_directory(path, strict=strict)
    return LogDir(path, _settings(args), writable=writable)


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


def cmd_umount(args: argparse.Namespace) -> int:
    from .fs.unmount import unmount

    if not args.timeout >= 0:
        raise UsageError(f"--timeout must be 0 or more seconds, not {args.timeout:g}")
    return unmount(args.mountpoint, args.timeout)


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
        clean=args.clean,
        foreground=args.foreground,
        fuse_options=options,
        values=args.values,
        settings=_settings(args),
        debug=args.debug,
        cache_dir=args.cache_dir,
        list_limit=args.list_limit,
        schemas=args.schemas,
    )


def cmd_index(args: argparse.Namespace) -> int:
    from .fs.views.prefill import index_logdir
    from .storage.logdir import check_log_directory

    check_log_directory(args.logdir)  # a missing path, a partition folder: usage errors (SPEC §4)
    _check_cache_dir(args.cache_dir, args.logdir)
    report = index_logdir(args.logdir, cache_dir=args.cache_dir, mode=args.values, settings=_settings(args),
                          schemas=args.schemas, keys=args.keys)
    print(report.line(), file=sys.stderr)
    damaged = report.damaged - report.too_large
    if damaged:  # SPEC §4: damage found is exit 1, whatever else the command did
        print(f"kafkafs: damage found ({damaged}, said above); `kafkafs verify {args.logdir}` lists it",
              file=sys.stderr)
    if report.too_large:  # valid data whose records the views cannot show (R15-7): the work did not all succeed
        print(f"kafkafs: {report.too_large} batch(es) too large to inflate (said above; valid data, no damage): "
              "the reads of a mount that need their records fail with EIO", file=sys.stderr)
    return EXIT_DAMAGE if damaged or report.too_large else EXIT_OK


def _check_cache_dir(cache_dir: str | None, logdir: str) -> None:
    """``index`` only fills the size cache: a cache folder it cannot have is a usage error (a folder
    inside LOGDIR, a path through a file) or a failure (no permission), said before any work."""
    from .fs.views.layoutcache import check_outside, default_cache_dir

    if cache_dir == "":  # '' turns the cache off (mount, consume): never the current directory
        raise CommandError("--cache-dir '' turns the size cache off, and filling it is all index does: name a "
                           "folder, or leave the option out for the default ($XDG_CACHE_HOME/kafkafs)")
    directory = check_outside(cache_dir if cache_dir is not None else default_cache_dir(), logdir)
    try:
        os.makedirs(directory, exist_ok=True)  # outside LOGDIR (checked above); index writes there anyway
    except (FileExistsError, NotADirectoryError):
        raise CommandError(f"--cache-dir {cache_dir or directory}: not a folder (or below a file)") from None
    except OSError as exc:
        raise tag_os_error(exc, "create the size cache {path}", directory) from None
    if not os.access(directory, os.W_OK | os.X_OK):
        denied = PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(directory))
        raise tag_os_error(denied, "write to the size cache {path}")


def _add_cache_dir_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--cache-dir", metavar="DIR",
        help="where rendered sizes are kept across mounts, outside LOGDIR (default: $XDG_CACHE_HOME/kafkafs)",
    )


# ---------------------------------------------------------------------------------------------- produce


def cmd_produce(args: argparse.Namespace) -> int:
    from .produce import appended_before, count_records, produce, stops_between_batches
    from .storage.names import parse_partition_dir_name, refuse_internal_topic

    refuse_internal_topic(parse_partition_dir_name(args.partition)[0])  # before the log directory's lock
    if sys.stdin is None:  # `<&-`: no standard input at all (as cat says it: bad file descriptor)
        raise tag_os_error(OSError(errno.EBADF, os.strerror(errno.EBADF)), "read {path}", "standard input")
    if (Path(args.logdir) / "__cluster_metadata-0").is_dir():  # refused before the lock is taken (produce checks too)
        from .produce import leader_epoch_refusal, produce_refusal
        from .storage.config import SettingsUnreadable

        with _open_logdir(args.logdir, args, writable=False) as reading:
            refusal = produce_refusal(reading, args.partition)
            epoch_refusal = (None if args.leader_epoch is None
                             else leader_epoch_refusal(reading, args.partition, args.leader_epoch))
        if refusal is not None:
            raise SettingsUnreadable(refusal)
        if epoch_refusal is not None:  # a usage error (exit 2), before the lock
            raise UsageError(epoch_refusal)
    done = None
    stopped: KeyboardInterrupt | None = None
    late: KeyboardInterrupt | None = None
    try:
        # SIGINT/SIGTERM/SIGHUP are taken only while it waits for input: between whole batches, said by
        # produce; the log directory then closes as after the end of input, marker and all (review22 R22-3)
        with stops_between_batches(), _open_logdir(args.logdir, args, writable=True, strict=False) as logdir:
            try:
                done = produce(logdir, args.partition, sys.stdin.fileno(), no_create=args.no_create,
                               leader_epoch=args.leader_epoch)
            except KeyboardInterrupt as exc:
                stopped = exc
    except OSError as exc:  # the close failed (an index it could not write): the records are in the log all the same
        if done is not None and done.total:
            note_os_error(exc, f"; {appended_before(done.total)}, at offsets "
                               f"{done.first_offset}..{done.last_offset} (do not send them again)")
        raise
    except KeyboardInterrupt as exc:  # held while it closed after the end of input: what it did is said first
        if stopped is not None or done is None:
            raise
        late = exc
    if stopped is not None:
        raise stopped  # exit 128 + the signal (run_command)
    assert done is not None
    if done.failure is not None:
        print(f"kafkafs: error: {done.failure}", file=sys.stderr)
        code = EXIT_DAMAGE
    else:
        if done.total:
            print(f"kafkafs: appended {count_records(done.total)} to {args.partition} at offsets {done.first_offset}.."
                  f"{done.last_offset}", file=sys.stderr)
        else:
            print("kafkafs: nothing to append (empty input)", file=sys.stderr)
        code = EXIT_OK
    if late is not None:
        raise late
    return code


# ---------------------------------------------------------------------------------------------- consume


def cmd_consume(args: argparse.Namespace) -> int:
    from .consume import consume, past_end_note, resolve_partitions, skipped_segments
    from .consume_args import filters_from_args, start_from_args
    from .consume_spans import tune_malloc
    from .storage.schemas import load_registry

    tune_malloc()
    spec, stop_ts, filters = *start_from_args(args), filters_from_args(args)  # usage errors first
    logdir = _open_logdir(args.logdir, args, writable=False)
    try:
        names = resolve_partitions(logdir, args.partition, args.topic, args.partition_number)
        for name in names:  # consume says these itself (R27-8), not the reader's warning as it lists them
            skipped_segments(os.fspath(logdir.path / name))
        if not args.follow:
            for name in names:
                try:
                    note = past_end_note(logdir.log(name), spec)
                except OSError:
                    continue  # a partition that cannot be opened: consume says it
                if note:
                    print(f"kafkafs: {note}", file=sys.stderr)
        damage = []

        def damaged(exc: Exception) -> None:  # damage is local: that partition ends there, the rest is read
            sys.stdout.buffer.flush()  # the lines before it first
            if isinstance(exc, OSError):  # a partition that cannot be opened: not read, the rest is
                print(f"kafkafs: error: {describe_os_error(exc)}", file=sys.stderr)
            elif isinstance(exc, UninflatableBatch):  # valid data not shown, read on past it (R15-7): exit 1
                print(f"kafkafs: {exc.not_shown()}", file=sys.stderr)
            else:
                print(f"kafkafs: damaged data: {exc}", file=sys.stderr)
            damage.append(exc)

        try:
            consume(logdir, names, sys.stdout.buffer, spec=spec, stop_ts=stop_ts, count=args.count,
                    follow=args.follow, interleave=not args.no_interleave, mode=args.values,
                    registry=load_registry(args.logdir, args.schemas), on_damage=damaged, **filters)
        except BrokenPipeError:  # the reader went away (`| head`): the end (SPEC §4), but damage said is exit 1
            if damage:
                return EXIT_DAMAGE
            raise
    finally:
        logdir.close()
    return EXIT_DAMAGE if damage else EXIT_OK


# ---------------------------------------------------------------------------------------------- dump


def cmd_dump(args: argparse.Namespace) -> int:
    from .dump.options import run_from_args

    return run_from_args(args, sys.stdout.buffer, sys.stderr)


def _say_failed_closes(path: str) -> None:
    """The failed close of the last ``--rw`` mount of ``path`` that nobody said (stopped without
    ``kafkafs umount``: ``fusermount3 -u``, a SIGTERM), one line each, on standard error."""
    from .fs.daemon import take_failure_notes_of

    for line in take_failure_notes_of(path):
        print(line, file=sys.stderr)


def cmd_verify(args: argparse.Namespace) -> int:
    from .inspect import verify_logdir

    _raise_fd_limit()
    logdir = _open_logdir(args.logdir, args, writable=False)
    _say_failed_closes(args.logdir)
    try:
        problems = verify_logdir(logdir, sys.stdout, deep=not args.shallow, partitions=args.partition)
    finally:
        logdir.close()
    return EXIT_DAMAGE if problems else EXIT_OK


def cmd_recover(args: argparse.Namespace) -> int:
    # the directory as found, read-only, before the writable open takes the clean-shutdown marker away
    look = _open_logdir(args.logdir, args, writable=False)
    _say_failed_closes(args.logdir)
    try:
        return _recover(args, look)
    finally:
        look.close()


def _recover(args: argparse.Namespace, look: LogDir) -> int:
    from .inspect import damaged_checkpoints, misnamed_segment_files, refused_folders, untouched_by_recovery
    from .storage.names import STAGING_DIR_NAME, parse_partition_dir_name
    from .storage.producer_state import remove_unreadable_snapshots
    from .storage.publish_intent import resolve, unfinished_writes
    from .storage.recovery_plan import snapshot_left_by_unclean_stop
    from .storage.strays import repair_partition_metadata_files, stray_consequence, stray_partitions

    _raise_fd_limit()
    logdir = _open_logdir(args.logdir, args, writable=True)
    # recover every segment of every partition, as after a crash with no recovery point (what it finds
    # is judged by how the last writer stopped: logdir.clean_shutdown)
    logdir.recover_all = True
    names = logdir.partition_names(aliases=True)  # an alias is refused and said, as a link out of LOGDIR
    reports: dict[str, tuple[RecoveryReport | None, int, int]] = {}  # the load's report (None: not opened for writing)
    snapshots: dict[str, list[tuple[str, str]]] = {}
    unclean_snapshots: dict[str, list[tuple[str, str]]] = {}  # past the recovery point after an unclean stop
    with logdir:  # a failure midway leaves the marker unwritten and the checkpoints' other entries as they were
        # checkpoint files verify calls damaged, read before recovery rewrites them (SPEC §4's exit code)
        checkpoints = damaged_checkpoints(logdir.path, names)
        # after a clean stop (the marker there before and under the lock), a partition in which verify's
        # checks find nothing to do is left byte for byte, as a broker's clean start rebuilds nothing:
        # not opened for writing (an open rewrites valid indexes as a recovery builds them, drops older
        # producer snapshots and leader-epoch entries at the log end: review20 R20-2)
        untouched = set()
        if look.clean_shutdown and logdir.clean_shutdown and not checkpoints and not unfinished_writes(logdir.path):
            own = set(look.partition_names())  # not the aliases: refused below, as before
            strays_found = stray_partitions(logdir.path, names)
            untouched = {name for name in names if name in own and untouched_by_recovery(look, name, strays_found)}
        in_jobs = {partition for job in unfinished_writes(logdir.path) for partition in job.partitions}
        for name in names:
            if name in untouched:
                found_log = look.log(name)
                reports[name] = (None, found_log.log_start_offset, found_log.log_end_offset)
                continue
            try:
                log_ = logdir.log(name)
            except UnsafeFileError:
                continue  # refused: said below, and nothing in it touched
            reports[name] = (log_.last_recovery, log_.log_start_offset, log_.log_end_offset)
            # what verify calls damaged: a broker's load deletes it and rebuilds the state from the log
            found = remove_unreadable_snapshots(logdir.path / name)
            recovery_point = logdir.recovery_points.get(parse_partition_dir_name(name))  # the checkpoint's, as read
            unclean_snapshots[name] = [(file, why) for file, why in found
                                       if snapshot_left_by_unclean_stop(file, recovery_point, logdir.clean_shutdown)]
            snapshots[name] = [entry for entry in found if entry not in unclean_snapshots[name]]
            if found:
                log_.state_files.producers()  # loaded past them: the close snapshots it at the log end again
            if name not in in_jobs:  # one partition's descriptors at a time (R24-3); a job's are written below
                logdir.close_log(name)
        metadata_files = repair_partition_metadata_files(logdir.path, list(reports))
        # a Spark write whose driver died while appending: its part taken out (review21 R21-4)
        unfinished: list[str] = []
        unfinished_left = taken_out = 0
        for job in unfinished_writes(logdir.path):
            try:
                said_lines, resolved = resolve(logdir, job)
            except (OSError, KafkafsError) as exc:
                said_lines, resolved = [f"not taken out: {exc}"], False
            for name in job.partitions:
                if name in reports and name not in logdir.refused:
                    reports[name] = reports[name][:2] + (logdir.log(name).log_end_offset,)
            said = "; ".join(said_lines) if said_lines else "nothing of it was appended"
            unfinished.append(f"{STAGING_DIR_NAME}/{job.job}: a Spark write whose driver stopped while appending: {said}"
                              + ("; its staging folder removed: the job appended none of its rows" if resolved
                                 else "; left as it is"))
            unfinished_left += not resolved
            taken_out += sum(": took out offsets " in line for line in said_lines)
    changed, kept, misnamed = taken_out, 0, 0
    for name in names:
        if name in logdir.refused:
            print(f"{name}: refused: {logdir.refused[name]}")
            continue
        report, start, end = reports[name]
        rewritten = [] if report is None else report.no_damage_lines()
        removed = [f"removed damaged {file} ({why}; the producer state is rebuilt from the log, as a broker's load "
                   "does)" for file, why in snapshots.get(name, ())]
        rewritten = rewritten + [f"removed {file} ({why}; past the recovery point after an unclean stop: a broker's start deletes "
                      "it unread, and the producer state is rebuilt from the log)"
                      for file, why in unclean_snapshots.get(name, ())]
        if report is None or not report.damaged():  # the report is exact: it names every file changed
            pending = [] if report is None or not report.pending_deletions() else [
                f"removed {len(report.pending_deletions())} file(s) pending deletion (.deleted)"]
            done = pending + rewritten
            status = "; ".join(["checked, nothing wrong", *done]) if done else "checked, nothing to change"
            if removed:
                status = "; ".join([*removed, *done])
                changed += 1
        else:
            changed += report.repaired() or bool(removed)
            kept += bool(report.kept_batches)  # damage recover leaves as Kafka does: exit 1 all the same
            lines = [line for line in report.lines() if not line.startswith("rebuilt indexes")]
            if report.damaged_files():
                lines.append("rebuilt " + ", ".join(sorted(report.damaged_files())))
            status = "; ".join(lines + removed + rewritten)
        span = f"offsets {start}..{end - 1}" if end > start else f"empty, next offset {end}"
        print(f"{name}: {status} ({span})")
        # what verify calls damage and recover does not repair: which segment such a file was meant to
        # be is not kafkafs's to guess (never renamed, never deleted)
        for problem in misnamed_segment_files(logdir.path / name):
            print(f"{name}: {problem}; left as it is")
            misnamed += 1
    for line in checkpoints:
        print(f"damaged checkpoint {line}")
    for line in metadata_files:
        print(line)
    for line in unfinished:
        print(line)
    folders = refused_folders(logdir.path)  # left as they are: not kafkafs's to delete
    for line in folders:
        print(line)
    # left as they are too: which copy is the topic's is not kafkafs's to decide (a folder may hold the
    # records of a deleted topic of the same name)
    strays = stray_partitions(logdir.path, list(reports))
    for name, why in strays.items():
        print(f"{name}: stray: {why}: {stray_consequence(name)}; left as it is")
    refused = len(logdir.refused)
    marked = "clean shutdown marked" if logdir.marked_clean else f"clean shutdown not marked: {logdir.not_marked_because}"
    print(f"recovered {len(names) - refused} partition(s), {changed} changed; {marked}"
          + (f"; {refused} refused" if refused else "")
          + (f"; {kept} with damaged batches kept, as Kafka keeps them" if kept else "")
          + (f"; {len(checkpoints)} damaged checkpoint file(s)" if checkpoints else "")
          + (f"; {len(folders)} folder(s) a broker refuses, left as they are" if folders else "")
          + (f"; {len(metadata_files)} damaged partition.metadata file(s)" if metadata_files else "")
          + (f"; {len(unfinished)} unfinished Spark write(s)"
             + (f", {unfinished_left} left as they are" if unfinished_left else " taken out") if unfinished else "")
          + (f"; {len(strays)} stray folder(s) a broker sets aside, left as they are" if strays else "")
          + (f"; {misnamed} misnamed segment file(s) left as they are" if misnamed else ""))
    # SPEC §4: what verify would have said before (damage repaired is damage found, as e2fsck's)
    failed = refused or changed or kept or checkpoints or folders or metadata_files or strays or unfinished or misnamed
    return EXIT_DAMAGE if failed else EXIT_OK


def _print_flushed(line: str) -> None:
    print(line, flush=True)


def cmd_clean(args: argparse.Namespace) -> int:
    from .storage.cleaner import (
        SettingsUnreadable,
        clean_logdir,
        partition_topics,
        settings_note,
        settings_refusal,
    )

    _raise_fd_limit()
    # refused before the .lock is taken and the checkpoints are written (clean_logdir checks too); a dry
    # run says the same
    with _open_logdir(args.logdir, args, writable=False) as reading:
        refusal = settings_refusal(reading.settings, partition_topics(reading))
        note = settings_note(reading.settings)
    if refusal is not None:
        raise SettingsUnreadable(f"{args.logdir}: refused: {refusal}")
    if note is not None:
        print(f"kafkafs: note: {note}", file=sys.stderr)
    # a dry run reads only: no .lock, no checkpoint, no rename (SPEC §4), so it may also look at a
    # directory that a broker holds
    with _open_logdir(args.logdir, args, writable=not args.dry_run) as logdir:
        # progress (partitions, bytes read, bytes reclaimed) on stderr once a second on long runs
        # each line as its change is made: a failure later (a full disk) leaves what was done said
        not_compacted: dict[str, str] = {}  # a batch too large to inflate: valid, kept, exit as for a refusal
        clean_logdir(logdir, dry_run=args.dry_run, progress=sys.stderr, on_line=_print_flushed,
                     not_compacted=not_compacted)
        refused = dict(logdir.refused)
    for name, reason in sorted(refused.items()):
        print(f"{name}: refused: {reason}")
    for name, reason in sorted(not_compacted.items()):
        print(f"{name}: {reason}")
    return EXIT_DAMAGE if refused or not_compacted else EXIT_OK


def cmd_demo(args: argparse.Namespace) -> int:
    from .demo import build_demo

    summary = build_demo(Path(args.dir), force=args.force)
    print(summary)
    return EXIT_OK


def cmd_export(args: argparse.Namespace) -> int:
    from .spark.export_args import run_from_args

    _settings(args)  # --config and --set as every command takes them (SPEC §7): checked before Spark starts
    return run_from_args(args)


def cmd_describe(args: argparse.Namespace) -> int:
    from .describe import describe

    with _open_logdir(args.logdir, args, writable=False) as logdir:  # 1: hanging transactions found (--hanging)
        return EXIT_DAMAGE if describe(args, logdir, sys.stdout) else EXIT_OK


# ---------------------------------------------------------------------------------------------- parser


class _Parser(argparse.ArgumentParser):
    """argparse with SPEC §4's errors: one line on stderr (with where to look), exit 2."""

    commands: list[str] = []  # the top-level parser's command names

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"kafkafs: error: {message} (see '{self.prog} --help')\n")


def _logdir_command(
    sub, name: str, func: Callable[[argparse.Namespace], int], summary: str
) -> argparse.ArgumentParser:
    """The parser of a command whose first argument is a log directory."""
    p = sub.add_parser(name, help=summary)
    p.add_argument("logdir")
    p.set_defaults(func=func)
    return p


def build_parser() -> _Parser:
    from .consume_args import add_consume_arguments
    from .describe import DESCRIBE_COMMANDS
    from .dump.options import add_dump_arguments
    from .spark.export_args import add_export_arguments
    from .systemd_install import add_systemd_arguments, install

    parser = _Parser(
        prog="kafkafs", description="Apache Kafka's on-disk log as ordinary files.",
    )
    parser.add_argument("--version", action="version", version=f"kafkafs {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="log what happens (to stderr)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

    p = _logdir_command(sub, "mount", cmd_mount, "mount a log directory (read-only unless --rw)")
    p.add_argument("mountpoint")
    p.description = (
        "Mount LOGDIR on MOUNTPOINT (read-only unless --rw) and return once it answers; a daemon serves it. "
        "The mount's log (its warnings and errors, e.g. why a partition is served read-only): with -f, "
        "stderr (the journal under systemd); detached, syslog where there is one (/dev/log), else the file "
        "logs/<mount point's path, / as _>.log of the cache folder, named on stderr as the command returns "
        "(rotated at 1 MiB, one older file kept)."
    )
    p.add_argument("--rw", action="store_true", help="allow appends (takes LOGDIR's .lock); deletes and compacts nothing")
    p.add_argument("--clean", action="store_true", help="with --rw: retention and compaction in the background")
    p.add_argument("-f", "--foreground", action="store_true", help="stay attached instead of daemonizing")
    p.add_argument("-o", dest="options", action="append", metavar="OPT[,OPT]", help="FUSE options, e.g. allow_other")
    _add_rendering_options(p)
    p.add_argument("-d", "--debug", action="store_true", help="debug logging (implies --foreground)")
    _add_cache_dir_option(p)
    p.add_argument(
        "--list-limit", type=int, metavar="N",
        help="by-offset/ lists offsets up to N records (then a range per segment), by-key/ keys up to N (default 100000)",
    )
    _add_settings_options(p)

    p = sub.add_parser(
        "umount", aliases=["unmount"],
        help="unmount a kafkafs mount; for a --rw mount, return once its daemon released LOGDIR's lock",
    )
    p.description = (
        "Unmount MOUNTPOINT as `fusermount3 -u` does; for a --rw mount, then wait until its daemon has "
        "closed the log directory (checkpoints and .kafka_cleanshutdown written, LOGDIR/.lock released), so "
        "that a broker, `kafkafs produce` or a copy can start at once. Exit 1 when the unmount fails, the "
        "daemon still holds the lock after --timeout seconds, or its close failed (its reason said)."
    )
    p.add_argument("mountpoint")
    p.add_argument("--timeout", type=float, default=60.0, metavar="SECONDS",
                   help="how long to wait for the daemon to release the lock (default 60)")
    p.set_defaults(func=cmd_umount)

    p = _logdir_command(
        sub, "index", cmd_index, "fill the mount's size cache ahead of time (for ExecStartPre or cron)"
    )
    p.add_argument("--keys", action="store_true", help="also build the key indexes (by-key/, table.jsonl, consume --key)")
    _add_cache_dir_option(p)
    _add_rendering_options(p)
    _add_settings_options(p)

    p = _logdir_command(
        sub, "produce", cmd_produce, "append lines from stdin to a partition (as the append file does)"
    )
    p.description = (
        "Append the lines of stdin to a partition, as the append file does: a line that does not parse, or "
        "a record a Kafka broker refuses (no key on a compacted topic; a timestamp more than "
        "message.timestamp.after.max.ms ahead or message.timestamp.before.max.ms behind now), fails its "
        "batch, said in one line, exit 1; the batches before it stay appended."
    )
    p.add_argument("partition", metavar="TOPIC-PARTITION")
    p.add_argument("--no-create", action="store_true", help="fail instead of creating a missing partition")
    p.add_argument("--leader-epoch", type=int, metavar="N", help="write as leader epoch N (not below the partition's, "
                   "nor above the one its metadata log records)")
    _add_settings_options(p)

    p = _logdir_command(
        sub, "consume", cmd_consume,
        "print records as JSON lines (a partition, or every partition of a topic)",
    )
    add_consume_arguments(p)
    _add_cache_dir_option(p)
    _add_rendering_options(p)
    _add_settings_options(p)

    for name, add_arguments in DESCRIBE_COMMANDS.items():  # groups, transactions
        _add_settings_options(add_arguments(_logdir_command(sub, name, cmd_describe, add_arguments.__doc__ or name)))

    p = sub.add_parser("dump", help="print any file of a partition folder as kafka-dump-log does")
    add_dump_arguments(p)
    p.set_defaults(func=cmd_dump)

    p = _logdir_command(sub, "verify", cmd_verify, "check CRCs, offsets and indexes; exit 1 on damage")
    p.add_argument("--partition", action="append", metavar="TOPIC-PARTITION", help="only these partitions")
    p.add_argument("--shallow", action="store_true", help="check batch headers and CRCs only, not every record")
    _add_settings_options(p)

    p = _logdir_command(
        sub, "recover", cmd_recover, "recover a log directory as after a crash: validate, truncate, reindex"
    )
    _add_settings_options(p)

    p = _logdir_command(
        sub, "clean", cmd_clean, "apply retention (cleanup.policy=delete) and compaction (compact)"
    )
    p.add_argument("--dry-run", action="store_true", help="say what would be removed, change nothing")
    _add_settings_options(p)

    p = sub.add_parser("demo", help="write a sample log directory")
    p.add_argument("dir")
    p.add_argument("--force", action="store_true", help="write it again where DIR holds an earlier demo (its partitions replaced; nothing else there is removed)")
    p.set_defaults(func=cmd_demo)

    p = sub.add_parser("systemd", help="install the systemd unit for a log directory (systemd install LOGDIR MOUNTPOINT)")
    add_systemd_arguments(p)
    p.set_defaults(func=lambda args: install(args))

    p = sub.add_parser("export", help="export log directories with Spark (parquet, json or csv)")
    add_export_arguments(p)
    _add_settings_options(p)
    p.set_defaults(func=cmd_export)
    parser.commands = list(sub.choices)
    return parser


_kernel_noted = False


def _note_missing_kernel() -> None:
    """The missing-kernel warning, once per process (main() may run many times in one, as tests do)."""
    global _kernel_noted
    from .format.kernel import missing_note

    note = None if _kernel_noted else missing_note()
    _kernel_noted = True
    if note:
        print(f"kafkafs: warning: {note}", file=sys.stderr)


class _SaidOnce(logging.Filter):
    """A command says a warning once: the same line again (the log directory opened twice, as `clean`
    does for its check and then its work: review23 R23-10) is left out. Used by the logging handler
    (its lock held)."""

    LIMIT = 10_000  # lines remembered

    def __init__(self) -> None:
        super().__init__()
        self._said: set[tuple[int, str]] = set()

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.WARNING:
            return True
        key = (record.levelno, record.getMessage())
        if key in self._said:
            return False
        if len(self._said) < self.LIMIT:
            self._said.add(key)
        return True


def main(argv: Sequence[str] | None = None, *, on_start: Callable[[], object] | None = None) -> int:
    """The command line; exit code. Ctrl-C while it starts (its imports take a second or more on a busy
    machine) ends it as quietly as later: exit 130, no traceback (review12 R12-9). ``on_start``: called
    once the command line is parsed, as the command starts (:mod:`kafkafs.__main__` gives SIGINT back to
    Python's handler there)."""
    try:
        return _main(argv, on_start)
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED


def _main(argv: Sequence[str] | None, on_start: Callable[[], object] | None) -> int:
    guard_stderr()  # before anything is said: a closed or full stderr loses messages, never files or exit codes
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "command", None):  # one line, as every usage error (SPEC §4)
        parser.error(f"a command is required: {', '.join(parser.commands)}")
    logging.basicConfig(
        level=logging.DEBUG if getattr(args, "debug", False) else (logging.INFO if args.verbose else logging.WARNING),
        format="kafkafs: %(levelname)s: %(message)s",
    )
    # a mount's log is a log: a line again is news there. Each handler its own filter, taken off again
    # when the command ends (main() may run many times in one process, as tests do: a filter left on
    # a handler that outlives the command dropped the next commands' lines)
    filters = [] if args.command == "mount" else [(h, _SaidOnce()) for h in logging.getLogger().handlers]
    for handler, said_once in filters:
        handler.addFilter(said_once)
    try:
        if args.command in ("consume", "mount", "dump"):  # the commands that render records
            _note_missing_kernel()
        if on_start is not None:
            on_start()
        return run_command(args)
    finally:
        for handler, said_once in filters:
            handler.removeFilter(said_once)


if __name__ == "__main__":
    sys.exit(main())
