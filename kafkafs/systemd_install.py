"""``kafkafs systemd install LOGDIR MOUNTPOINT``: the systemd unit set up for one log directory.

The unit template (``kafkafs/unitfiles/kafkafs@.service``, also ``systemd/kafkafs@.service``) runs
``kafkafs`` by name, which systemd looks up in its own search path: a kafkafs in a virtualenv is not
there, and ``systemd-analyze verify`` says "Command kafkafs is not executable". The install step
writes the unit with the absolute path of the kafkafs that runs it (and of ``fusermount3``), then what
systemd/README.md lists by hand: the system user (sysusers.d), the instance's environment file, the
mount point, and ``systemctl enable``. It prints one line per step. ``--root DIR`` installs into
another root (as ``systemctl --root`` does): nothing outside DIR changes, nothing is started.

SPEC §6 stands: ``Type=notify``, no mount-namespace settings; only the program paths change.
"""

from __future__ import annotations

import argparse
import os
import pwd
import re
import shutil
import subprocess
import sys
from pathlib import Path

from .errors import InvalidInput, KafkafsError, doing

__all__ = ["add_systemd_arguments", "escape_path", "kafkafs_command", "render_unit", "install"]

UNIT_NAME = "kafkafs@.service"
TEMPLATES = Path(__file__).resolve().parent / "unitfiles"
USER = "kafkafs"


def escape_path(path: str) -> str:
    """``systemd-escape --path PATH``: the instance name of a log directory."""
    trimmed = re.sub("/+", "/", path).strip("/")
    if not trimmed:
        return "-"
    out = []
    for i, ch in enumerate(trimmed):
        if ch == "/":
            out.append("-")
        elif ch.isascii() and (ch.isalnum() or ch in ":_" or (ch == "." and i > 0)):
            out.append(ch)
        else:
            out.extend(f"\\x{b:02x}" for b in ch.encode("utf-8"))
    return "".join(out)


def kafkafs_command() -> list[str]:
    """The running kafkafs as absolute argv words: its console script when there is one (the program
    run, or ``kafkafs`` next to this Python), else this Python with ``-m kafkafs``."""
    argv0 = Path(sys.argv[0]) if sys.argv and sys.argv[0] else None
    candidates = []
    if argv0 is not None and argv0.name == "kafkafs":
        candidates.append(argv0)
    candidates.append(Path(sys.executable).parent / "kafkafs")
    for candidate in candidates:
        resolved = Path(os.path.abspath(candidate))
        if resolved.is_file() and os.access(resolved, os.X_OK):
            return [str(resolved)]
    return [os.path.abspath(sys.executable), "-m", "kafkafs"]


def _word(text: str) -> str:
    """One word of a systemd command line (quoted when it holds a space or a quote)."""
    if re.fullmatch(r"[A-Za-z0-9_@%+=:,./-]+", text):
        return text
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def render_unit(template: str, kafkafs: list[str], fusermount: str) -> str:
    """The unit with absolute program paths: ``ExecStart=kafkafs ...`` runs ``kafkafs``, and every
    ``/usr/bin/fusermount3`` is ``fusermount``."""
    program = " ".join(_word(w) for w in kafkafs)
    lines = []
    replaced = False
    for line in template.splitlines():
        if line.startswith("ExecStart=kafkafs "):
            line = "ExecStart=" + program + line[len("ExecStart=kafkafs"):]
            replaced = True
        elif line.startswith("#") and "ExecStartPre=kafkafs " in line:  # the drop-in the comments suggest
            line = line.replace("ExecStartPre=kafkafs ", "ExecStartPre=" + program + " ")
        elif line.startswith("# \"kafkafs\" is looked up in"):
            line = "# kafkafs as `kafkafs systemd install` found it running (absolute: systemd's PATH may not have it)."
        line = line.replace("/usr/bin/fusermount3", fusermount)
        lines.append(line)
    if not replaced:
        raise KafkafsError(f"{TEMPLATES / UNIT_NAME}: no 'ExecStart=kafkafs ' line to set the program in")
    return "\n".join(lines) + "\n"


def _write(path: Path, text: str, mode: int = 0o644) -> None:
    with doing("create {path}", path.parent):
        path.parent.mkdir(parents=True, exist_ok=True)
    with doing("write {path}", path):
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(text)
        tmp.chmod(mode)
        os.replace(tmp, path)


def _run(argv: list[str]) -> str:
    """Run a systemd tool; its first error line as a KafkafsError when it fails."""
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    except FileNotFoundError:
        raise KafkafsError(f"{argv[0]} is not installed") from None
    if proc.returncode != 0:
        said = (proc.stderr.strip() or proc.stdout.strip()).splitlines()
        raise KafkafsError(f"{' '.join(argv)} failed: {said[0] if said else f'exit status {proc.returncode}'}")
    return proc.stdout


def _check_settings(args: argparse.Namespace) -> None:
    """``--config`` and ``--set`` checked as the mount will read them (SPEC §7: ConfigError, exit 2); a
    word with a space or a quote is refused, as the service splits ``OPTIONS`` at spaces."""
    from .storage.config import Settings, parse_set_options

    Settings.load(args.config, parse_set_options(args.set or []))
    for word in [args.config or "", *(args.set or [])]:
        if re.search(r"[\s'\"\\]", word):
            raise InvalidInput(f"{word!r}: a space or a quote cannot go in the service's OPTIONS; "
                               "use a settings file whose path has none")


def _options(args: argparse.Namespace) -> str:
    words = (["--rw"] if args.rw else []) + ([f"--values={args.values}"] if args.values else [])
    if args.config:
        words.append(f"--config={os.path.abspath(args.config)}")
    words += [f"--set={item.strip()}" for item in args.set or []]
    for item in args.fuse_options or []:
        words += ["-o", item]
    return " ".join(words)


def install(args: argparse.Namespace, say=print) -> int:
    """The steps, each said in one line (see the module docstring)."""
    from .storage.logdir import check_log_directory

    logdir = os.path.abspath(args.logdir)
    mountpoint = os.path.abspath(args.mountpoint)
    check_log_directory(logdir)
    _check_settings(args)
    if Path(mountpoint).resolve().is_relative_to(Path(logdir).resolve()):
        raise InvalidInput(f"{mountpoint}: the mount point cannot be inside the log directory")
    root = Path(args.root).absolute() if args.root else Path("/")
    if args.root and not root.is_dir():
        raise InvalidInput(f"--root {args.root}: no such folder")

    def at(path: str) -> Path:
        return root / path.lstrip("/")

    fusermount = shutil.which("fusermount3") or "/usr/bin/fusermount3"
    kafkafs = kafkafs_command()
    unit = render_unit((TEMPLATES / UNIT_NAME).read_text(), kafkafs, fusermount)
    unit_path = at(f"/etc/systemd/system/{UNIT_NAME}")
    _write(unit_path, unit)
    say(f"wrote {unit_path} (ExecStart={' '.join(kafkafs)} mount --foreground ...)")

    sysusers = at("/usr/lib/sysusers.d/kafkafs.conf")
    _write(sysusers, (TEMPLATES / "kafkafs.sysusers").read_text())
    if shutil.which("systemd-sysusers"):
        _run(["systemd-sysusers", *([f"--root={root}"] if args.root else []), "kafkafs.conf"])
        say(f"wrote {sysusers}; the system user {USER} exists (systemd-sysusers)")
    else:
        say(f"wrote {sysusers}; systemd-sysusers is missing: create the system user {USER} yourself")

    instance = escape_path(logdir)
    env = at(f"/etc/kafkafs/{instance}.env")
    _write(env, f"MOUNTPOINT={mountpoint}\nOPTIONS={_options(args)}\n")  # LOGDIR: %f, the instance unescaped
    say(f"wrote {env} (MOUNTPOINT={mountpoint}, OPTIONS={_options(args) or 'none'})")

    target = at(mountpoint)
    with doing("create {path}", target):
        target.mkdir(parents=True, exist_ok=True)
    owner = None if args.root else _owner()
    if owner is not None:
        with doing("give {path} to " + USER, target):
            os.chown(target, owner[0], owner[1])
        say(f"made {target}, owned by {USER} (the service mounts there as {USER})")
    else:
        say(f"made {target}")

    name = f"kafkafs@{instance}.service"
    booted = not args.root and os.path.isdir("/run/systemd/system")
    if booted:
        _run(["systemctl", "daemon-reload"])
    if args.no_enable:
        say(f"not enabled (--no-enable): systemctl enable --now {name}")
        return 0
    _run(["systemctl", *([f"--root={root}"] if args.root else []), "enable", name])
    if args.now and booted:
        _run(["systemctl", "start", name])
        say(f"enabled and started {name}: systemctl status {name}")
    elif booted:
        say(f"enabled {name} (at boot); start it now with: systemctl start {name}")
    else:
        say(f"enabled {name} (at boot; systemd is not running here, nothing started)")
    return 0


def _owner() -> tuple[int, int] | None:
    try:
        entry = pwd.getpwnam(USER)
    except KeyError:
        return None
    return entry.pw_uid, entry.pw_gid


def add_systemd_arguments(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="action", metavar="ACTION", required=True, parser_class=type(p))
    q = sub.add_parser(
        "install", help="install kafkafs@.service for LOGDIR on MOUNTPOINT (absolute paths) and enable it",
    )
    q.add_argument("logdir")
    q.add_argument("mountpoint")
    q.add_argument("--rw", action="store_true", help="mount read-write (the service takes the log directory's .lock)")
    q.add_argument("--values", choices=["auto", "string", "base64"], help="how keys and values render")
    q.add_argument("-o", dest="fuse_options", action="append", metavar="OPT[,OPT]", help="FUSE options, e.g. allow_other")
    q.add_argument("--root", metavar="DIR", help="install into DIR as a root (systemctl --root), start nothing")
    q.add_argument("--now", action="store_true", help="also start it")
    q.add_argument("--no-enable", action="store_true", help="write the files only")
    q.add_argument("--config", metavar="FILE",
                   help="TOML settings file for the mount (checked now; default: /etc/kafkafs/kafkafs.toml when it exists)")
    q.add_argument("--set", action="append", metavar="KEY=VALUE",
                   help="a one-off default setting for the mount, e.g. segment.bytes=1048576 (checked now)")
