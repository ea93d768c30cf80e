"""How a command ends: its errors as one line on stderr and an exit code, whatever its standard output.

Exit codes, the same for every command (SPEC §4): 0 done, nothing wrong found; 1 damage found or the
work failed (a directory another writer holds, a partition refused because it holds a link, a disk
error), the reason said; 2 a usage error (bad arguments, a path that is not what the command takes);
130 interrupted. An OS error names its file and what kafkafs was doing with it
(:func:`~kafkafs.errors.describe_os_error`); a closed standard output changes neither the work nor the
exit code (:mod:`kafkafs.stdout`).
"""

from __future__ import annotations

import argparse
import sys

from .errors import (
    ConfigError,
    CorruptRecordError,
    InvalidInput,
    InvalidName,
    KafkafsError,
    UninflatableBatch,
    UsageError,
    describe_os_error,
    doing,
)
from .stdout import guarded_stdout

__all__ = ["EXIT_OK", "EXIT_DAMAGE", "EXIT_USAGE", "EXIT_INTERRUPTED", "run_command"]

EXIT_OK = 0
EXIT_DAMAGE = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130

#: What a command was doing, for an OS error that did not say (``{path}``: its first path argument);
#: the rest read.
_DOING = {"produce": "write {path}", "recover": "recover {path}", "clean": "clean {path}", "demo": "write {path}",
          "mount": "mount {path}", "systemd": "install {path}"}
#: Commands whose work is their output: a closed standard output ends them (exit 0).
_OUTPUT_IS_THE_WORK = frozenset({"consume"})
#: Commands whose work is on disk: an output that cannot be written (a full disk) is said, and their exit
#: code stays what the work found; for the rest (reports), the work failed: exit 1.
_WORK_ON_DISK = frozenset({"produce", "recover", "clean", "demo", "mount", "systemd", "index"})


def run_command(args: argparse.Namespace) -> int:
    """``args.func(args)``'s exit code, its errors said in one line on stderr."""
    with guarded_stdout(stop=args.command in _OUTPUT_IS_THE_WORK) as out:
        code = _run(args)
    if out is not None and out.failure is not None:  # output lost, not a reader gone (SPEC §4: said, exit 1)
        print(f"kafkafs: error: {describe_os_error(out.failure)}", file=sys.stderr)
        on_disk = args.command in _WORK_ON_DISK and not getattr(args, "dry_run", False)
        if code == EXIT_OK and not on_disk:
            code = EXIT_DAMAGE
    return code


def _run(args: argparse.Namespace) -> int:
    path = getattr(args, "logdir", None) or getattr(args, "dir", None)
    if isinstance(path, list):
        path = path[0] if len(path) == 1 else None
    try:
        with doing(_DOING.get(args.command, "read {path}"), path):
            return args.func(args)
    except KeyboardInterrupt as exc:  # SIGINT; a command that turns SIGTERM into it says 128 + 15
        return int(getattr(exc, "exit_code", EXIT_INTERRUPTED))
    except BrokenPipeError:
        # consume's reader went away (e.g. `| head`): not an error; stdout points at /dev/null now
        return EXIT_OK
    except (InvalidInput, InvalidName, ConfigError, UsageError) as exc:
        print(f"kafkafs: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except UninflatableBatch as exc:  # valid data this work cannot read (R15-7): the work failed, no damage
        print(f"kafkafs: error: {exc} (a batch too large to inflate: valid data, not damage; kafkafs does not "
              f"decode its records)", file=sys.stderr)
        return EXIT_DAMAGE
    except CorruptRecordError as exc:
        print(f"kafkafs: damaged data: {exc}", file=sys.stderr)
        return EXIT_DAMAGE
    except KafkafsError as exc:
        print(f"kafkafs: error: {exc}", file=sys.stderr)
        return EXIT_DAMAGE
    except OSError as exc:
        print(f"kafkafs: error: {describe_os_error(exc)}", file=sys.stderr)
        return EXIT_DAMAGE
