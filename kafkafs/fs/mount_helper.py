"""``mount.kafkafs``: lets ``/etc/fstab`` and ``mount -t fuse.kafkafs`` mount a Kafka log directory.

mount(8) runs a helper as ``mount.<type> SOURCE TARGET [-sfnv] [-N NS] [-o OPTIONS] [-t TYPE]``. For the
type ``fuse.kafkafs`` it looks for ``/sbin/mount.fuse.kafkafs`` (then falls back to ``mount.fuse``, which
would run ``kafkafs SOURCE TARGET``: not our command line), for ``kafkafs`` it looks for
``/sbin/mount.kafkafs``; install this helper under both names. It rewrites the mount options into a
``kafkafs mount`` command line and execs it, so the mount daemonizes once it answers, as mount(8) expects.

Options
  ``ro``, ``rw``, ``defaults``   ignored: mount(8) passes ``rw`` whenever ``ro`` is absent, so ``rw`` cannot
                                 tell an explicit request from the default. kafkafs mounts read-only.
  ``writable``                   ``--rw``: the append file and mkdir; takes the log directory's lock, so a
                                 broker cannot start on it while mounted. Deletes and compacts nothing...
  ``clean``                      ``--clean`` (with ``writable``): ...unless asked: retention and
                                 compaction in the background, as a broker runs them.
  ``values=auto|string|base64``  ``--values``
  ``config=FILE``                ``--config FILE``
  ``cache_dir=DIR``              ``--cache-dir DIR`` (where sizes are kept across mounts)
  ``list_limit=N``               ``--list-limit N``
  ``set=KEY=VALUE``              ``--set KEY=VALUE`` (repeatable); a value with a comma (a list:
                                 ``cleanup.policy``) in double quotes, ``set="cleanup.policy=compact,delete"``,
                                 or with the comma escaped, ``set=cleanup.policy=compact\\,delete``
  ``foreground``                 ``-f``: stay attached (for systemd; mount(8)'s own ``-f`` means "fake")
  ``realtime_loop``              passed on: the FUSE loop thread at real-time priority 1 where the
                                 daemon may take it (default: the normal scheduling policy)
  ``drop_privileges``,           handed to libfuse's ``mount.fuse3``, which (as root) opens /dev/fuse,
  ``setuid=USER``                mounts, drops every capability (and switches to USER) and runs this
                                 helper again with the mountpoint ``/dev/fd/N``; that second run then
                                 execs ``kafkafs mount ... LOGDIR /dev/fd/N``.
  ``_netdev``, ``nofail``, ``auto``, ``noauto``, ``user``, ``users``, ``nouser``, ``owner``, ``group``,
  ``user=``, ``comment=``, ``x-*``: for mount(8) and systemd only, dropped.
  anything else                  passed to FUSE with ``-o`` (``allow_other``, ``default_permissions``,
                                 ``noatime``, ``fsname=``, ...).

Exit status follows mount(8): 1 for a bad invocation, 2 when a program cannot be run; once exec'd, the
status is kafkafs's own.
"""

from __future__ import annotations

import os
import shlex
import shutil
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field

PROG = "mount.kafkafs"
USAGE = f"usage: {PROG} LOGDIR MOUNTPOINT [-sfnv] [-o OPTION[,OPTION...]] [-t TYPE]"

EXIT_USAGE = 1  # mount(8): incorrect invocation or permissions
EXIT_SYSTEM = 2  # mount(8): system error

VALUE_MODES = ("auto", "string", "base64")

IGNORED = frozenset({"", "ro", "rw", "defaults"})
USERSPACE_ONLY = frozenset(
    {"_netdev", "nofail", "auto", "noauto", "user", "users", "nouser", "owner", "group"}
)
USERSPACE_PREFIXES = ("user=", "comment=", "x-")


class UsageError(Exception):
    """A mistake on the command line; the message is one line, without the program name."""


class HelpRequested(Exception):
    """-h or --help."""


@dataclass
class Request:
    """What mount(8) asked for."""

    source: str
    target: str
    options: list[str] = field(default_factory=list)
    fake: bool = False
    verbose: bool = False

    @property
    def privileged(self) -> bool:
        """True when mount.fuse3 must mount first and start kafkafs without privileges."""
        return any(opt == "drop_privileges" or opt.startswith("setuid=") for opt in self.options)


def split_options(text: str) -> list[str]:
    """Split a mount option string at commas outside double quotes (libmount's quoting) and not
    escaped by a backslash (libfuse's: ``\\,`` is a comma, ``\\X`` is X); mount(8) passes both through."""
    options: list[str] = []
    current: list[str] = []
    quoted = escaped = False
    for char in text:
        if escaped:
            current.append(char)
            escaped = False
        elif char == "\\":
            escaped = True
        elif char == '"':
            quoted = not quoted
        elif char == "," and not quoted:
            options.append("".join(current))
            current = []
        else:
            current.append(char)
    if quoted:
        raise UsageError(f"unbalanced double quote in options {text!r}")
    if escaped:
        current.append("\\")
    options.append("".join(current))
    return [opt for opt in options if opt]


def parse(argv: Sequence[str]) -> Request:
    """Parse mount(8)'s helper calling convention; options may come before or after the operands."""
    positional: list[str] = []
    options: list[str] = []
    fake = verbose = False
    args = list(argv)
    i = 0
    while i < len(args):
        arg = args[i]
        i += 1
        if arg == "--":
            positional.extend(args[i:])
            break
        if not arg.startswith("-") or arg == "-":
            positional.append(arg)
            continue
        if arg in ("-h", "--help"):
            raise HelpRequested
        if arg.startswith("--"):
            raise UsageError(f"unknown option {arg}")
        flags = arg[1:]
        while flags:
            flag, flags = flags[0], flags[1:]
            if flag in "otN":
                if flags:
                    value, flags = flags, ""
                elif i < len(args):
                    value = args[i]
                    i += 1
                else:
                    raise UsageError(f"option -{flag} needs an argument")
                if flag == "o":
                    options.extend(split_options(value))
                elif flag == "N":
                    raise UsageError("mounting in another namespace (-N) is not supported")
                # -t TYPE: we are the helper for exactly one type; nothing to do.
            elif flag == "f":
                fake = True
            elif flag == "v":
                verbose = True
            elif flag in "sn":
                pass  # sloppy: unknown options are passed on anyway; no mtab: there is none to write
            else:
                raise UsageError(f"unknown option -{flag}")
    if len(positional) < 2:
        missing = "LOGDIR and MOUNTPOINT" if not positional else "MOUNTPOINT"
        raise UsageError(f"missing {missing}")
    if len(positional) > 2:
        raise UsageError(f"unexpected argument {positional[2]!r}")
    source, target = positional
    if not source or not target:
        raise UsageError("LOGDIR and MOUNTPOINT must not be empty")
    return Request(source=source, target=target, options=options, fake=fake, verbose=verbose)


def _is_fd_path(path: str) -> bool:
    """``/dev/fd/N``: an open /dev/fuse handed over by mount.fuse3 (libfuse >= 3.3 accepts it)."""
    prefix = "/dev/fd/"
    return path.startswith(prefix) and path[len(prefix) :].isdigit()


def _absolute(path: str) -> str:
    return path if _is_fd_path(path) else os.path.abspath(path)


def kafkafs_args(request: Request) -> list[str]:
    """The arguments of ``kafkafs`` (starting with ``mount``) that carry out ``request``."""
    flags: list[str] = []
    fuse: list[str] = []
    writable = read_only = clean = False
    for opt in request.options:
        name, eq, value = opt.partition("=")
        if opt == "ro":
            read_only = True
        elif opt in IGNORED or opt in USERSPACE_ONLY or opt.startswith(USERSPACE_PREFIXES):
            pass
        elif opt == "writable":
            writable = True
        elif opt == "clean":
            clean = True
        elif opt == "foreground":
            flags.append("-f")
        elif name == "values" and eq:
            if value not in VALUE_MODES:
                raise UsageError(f"values={value}: expected one of {', '.join(VALUE_MODES)}")
            flags += ["--values", value]
        elif name == "config" and eq:
            if not value:
                raise UsageError("config= needs a file name")
            flags += ["--config", value]
        elif name == "cache_dir" and eq:
            flags += ["--cache-dir", value]
        elif name == "list_limit" and eq:
            if not value.isdigit():
                raise UsageError(f"list_limit={value}: expected a number")
            flags += ["--list-limit", value]
        elif name == "set" and eq:
            if "=" not in value or value.startswith("="):
                raise UsageError(f"set={value}: expected set=KEY=VALUE")
            flags += ["--set", value]
        elif opt == "drop_privileges" or opt.startswith("setuid="):
            pass  # consumed by mount.fuse3 before we run as the daemon
        elif name in ("values", "config", "set", "writable", "clean", "foreground", "cache_dir", "list_limit"):
            raise UsageError(f"malformed option {opt!r}")
        elif opt in ("delete", "compact"):  # the rest of set=cleanup.policy=compact,delete, cut at its comma
            raise UsageError(f"{opt!r} is not a mount option: a list value keeps its comma in double quotes "
                             '(set="cleanup.policy=compact,delete") or escaped (set=cleanup.policy=compact\\,delete)')
        else:
            fuse.append(opt)
    if writable and read_only:
        raise UsageError("options ro and writable contradict each other")
    if clean and not writable:
        raise UsageError("option clean needs writable (a read-only mount deletes and compacts nothing)")
    args = ["mount"]
    if writable:
        args.append("--rw")
    if clean:
        args.append("--clean")
    args += flags
    if fuse:
        args += ["-o", ",".join(fuse)]
    args += [_absolute(request.source), _absolute(request.target)]
    return args


def translate(argv: Sequence[str]) -> list[str]:
    """mount(8)'s helper arguments (without the program name) -> the arguments of ``kafkafs``."""
    return kafkafs_args(parse(argv))


def privileged_command(request: Request, mount_fuse3: str, helper: str) -> list[str]:
    """The mount.fuse3 command that mounts as root, then runs ``helper`` unprivileged on /dev/fd/N.

    mount.fuse3 runs ``<type> SOURCE /dev/fd/N -o OPTIONS`` through /bin/sh and names the mount
    ``fuse.<type>``; the type is this helper's path so that it gets a second, unprivileged turn, and
    ``subtype=kafkafs`` (applied after mount.fuse3's own) keeps the mount's type ``fuse.kafkafs``.
    """
    kafkafs_args(request)  # reject bad options before anything is mounted
    options = list(request.options)
    if any("," in opt for opt in options):
        raise UsageError("mount.fuse3 cannot pass an option value that holds a comma: put it in a config=FILE")
    source = _absolute(request.source)
    names = {opt.partition("=")[0] for opt in options}
    # mount.fuse3 mounts with dev,suid unless told otherwise; fusermount3 and libfuse never would.
    options += [flag for flag in ("nosuid", "nodev") if not names & {flag, flag[2:]}]
    # the mount as `kafkafs mount` would make it: read-only unless writable (mount(8)'s `rw` is its
    # default, not a request), and the kernel checks the files' modes (with allow_other, only the daemon's
    # user may append)
    options = [opt for opt in options if opt != "rw"]
    if "writable" not in names and "ro" not in names:
        options.append("ro")
    if "default_permissions" not in names:
        options.append("default_permissions")
    if "subtype" not in names:
        options.append("subtype=kafkafs")
    if "fsname" not in names and not any(c in source for c in ',\\"'):
        options.append(f"fsname={source}")
    return [mount_fuse3, source, _absolute(request.target), "-t", helper, "-o", ",".join(options)]


def _executable(path: str) -> bool:
    return os.path.isfile(path) and os.access(path, os.X_OK)


def find_kafkafs(helper: str) -> str | None:
    """$KAFKAFS, then next to this helper (as invoked and as resolved), next to Python, then $PATH."""
    explicit = os.environ.get("KAFKAFS")
    if explicit:
        return explicit if _executable(explicit) else None
    dirs = [
        os.path.dirname(helper),
        os.path.dirname(os.path.realpath(helper)),
        os.path.dirname(sys.executable),
    ]
    for directory in dict.fromkeys(d for d in dirs if d):
        candidate = os.path.join(directory, "kafkafs")
        if _executable(candidate):
            return candidate
    return shutil.which("kafkafs")


def find_mount_fuse3() -> str | None:
    for candidate in ("/sbin/mount.fuse3", "/usr/sbin/mount.fuse3", "/usr/local/sbin/mount.fuse3"):
        if _executable(candidate):
            return candidate
    return shutil.which("mount.fuse3")


def _helper_path(argv0: str) -> str:
    """The absolute path this helper was started by, for mount.fuse3 to run it again."""
    if os.sep in argv0:
        return os.path.abspath(argv0)
    return shutil.which(argv0) or os.path.abspath(argv0)


def _fail(prog: str, message: str, status: int) -> int:
    print(f"{prog}: {message}", file=sys.stderr)
    return status


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``mount.kafkafs`` / ``mount.fuse.kafkafs``; execs and so returns only on failure."""
    args = list(sys.argv if argv is None else argv)
    helper = _helper_path(args[0] if args else PROG)
    prog = os.path.basename(helper)
    try:
        request = parse(args[1:])
        if request.privileged:
            mount_fuse3 = find_mount_fuse3()
            if mount_fuse3 is None:
                return _fail(
                    prog, "drop_privileges and setuid= need libfuse's mount.fuse3, not found", EXIT_SYSTEM
                )
            command = privileged_command(request, mount_fuse3, helper)
        else:
            kafkafs_argv = kafkafs_args(request)
            kafkafs = find_kafkafs(helper)
            if kafkafs is None:
                return _fail(
                    prog, "cannot find the kafkafs program; set KAFKAFS=/path/to/kafkafs", EXIT_SYSTEM
                )
            command = [kafkafs, *kafkafs_argv]
    except HelpRequested:
        print(USAGE)
        return 0
    except UsageError as exc:
        return _fail(prog, f"{exc} ({USAGE})", EXIT_USAGE)
    if request.verbose or request.fake:
        print(f"{prog}: {shlex.join(command)}", file=sys.stderr)
    if request.fake:
        return 0
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execv(command[0], command)
    except OSError as exc:
        return _fail(prog, f"cannot run {command[0]}: {exc.strerror}", EXIT_SYSTEM)
    return EXIT_SYSTEM  # not reached


if __name__ == "__main__":
    sys.exit(main())
