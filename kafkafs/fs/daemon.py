"""The mount's daemon: how the process starts, detaches, logs, tells systemd, and gives memory back.

* :func:`daemonize` forks twice; the grandchild mounts and serves, and tells the parent "ready" (or why
  it could not mount) through a pipe, so ``kafkafs mount`` returns once the mount answers.
* :class:`StartingStderr` keeps what libfuse prints while the mount starts, for the one error line.
* :func:`notify` is the systemd notification protocol without libsystemd: a service started with
  ``Type=notify`` hears ``READY=1``, ``STOPPING=1``, ``STATUS=...`` or ``WATCHDOG=1`` as one datagram
  on the unix socket named in ``$NOTIFY_SOCKET``. Outside systemd the variable is unset and every call
  is a cheap no-op. Sending never raises: a missing or unreachable socket must not take a working
  mount down, so failures are logged at debug level and reported as ``False``.
* :func:`wake_stuck_reads`: the FUSE loop's thread is never left for more than
  :data:`READ_WAKE_INTERVAL` seconds in a read of ``/dev/fuse`` that found nothing to read (the hang of
  a fresh ``--rw`` mount's ``mkdir``, 2026-11-27 22:56).
* :func:`stacks_on_request`: ``kill -USR1 PID`` writes every thread's stack to the daemon's stderr (the
  journal under systemd, the terminal or file of ``--foreground``), and the daemon serves on.
* Logging: stderr until detached; then syslog, or where there is none (:func:`syslog_here`) a file the
  mount names before detaching (the cache folder's ``logs/``, :func:`log_file_name`), rotated at
  :data:`LOG_FILE_BYTES`, which file descriptor 2 follows too (review23 R23-11).
* :func:`return_large_blocks` (issue 9, finding 7): blocks of :data:`LARGE_BLOCK` or more always go
  back to the system when freed, so a few decompression bombs (every one cleanly EIO) do not leave
  hundreds of MiB in the worker threads' arenas (:mod:`kafkafs.storage.memory`); smaller ones, such
  as a rendered span of ``records.jsonl`` (a few MB) and a read's reply, are reused from the heap.

Used by the one thread that starts the mount (and, for :func:`notify`, the FUSE loop).
"""

from __future__ import annotations

import faulthandler
import hashlib
import json
import logging
import logging.handlers
import os
import signal
import socket
import stat
import sys
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path

from ..errors import KafkafsError, MountError, MountPathError, UsageError, describe_os_error, one_line
from ..storage.memory import tune_malloc

__all__ = [
    "StartingStderr", "first_exception", "notify", "sd_notify", "return_large_blocks", "daemonize",
    "setup_logging", "syslog_here", "log_file_name", "open_log_file", "LOG_FILE_BYTES",
    "not_a_reply_nobody_awaits", "wake_stuck_reads", "with_reads_woken", "stacks_on_request", "note_folder", "leave_failure_note",
    "take_failure_note", "take_failure_notes_of", "ending_line",
]

log = logging.getLogger("kafkafs.fs")


# ---------------------------------------------------------------------------------------------- starting


class StartingStderr:
    """File descriptor 2 into a temporary file while the mount starts (``pyfuse3.init`` until the mount
    answers), so that what libfuse and fusermount3 print there ("fuse: unknown option(s): `-o bogus'")
    becomes part of the one error line instead of lines before it; replayed as it was once the mount
    answers. Used by the one thread that starts the mount."""

    def __init__(self) -> None:
        sys.stderr.flush()
        self._saved: int | None = os.dup(2)
        self._file = tempfile.TemporaryFile()  # noqa: SIM115 - closed by restore()
        os.dup2(self._file.fileno(), 2)
        self.said: list[str] = []

    def restore(self, *, replay: bool) -> list[str]:
        """fd 2 back; what was printed meanwhile (written out again with ``replay``), as lines."""
        if self._saved is not None:
            sys.stderr.flush()
            os.dup2(self._saved, 2)
            os.close(self._saved)
            self._saved = None
            self._file.seek(0)
            text = self._file.read()
            self._file.close()
            if replay and text:
                os.write(2, text)
            lines = text.decode("utf-8", "replace").splitlines()
            self.said = [line.strip().removeprefix("fuse: ") for line in lines if line.strip()]
        return self.said


def first_exception(exc: BaseException) -> BaseException:
    """The first exception inside (nested) exception groups, as trio raises them."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


# ---------------------------------------------------------------------------------------------- systemd

#: Bounds the time one notification can block the caller (the trio loop, typically) if systemd's
#: receive queue is full; libsystemd blocks without limit.
SEND_TIMEOUT = 1.0


def _socket_address(value: str) -> str | None:
    """The address to send to: an absolute path, or '@name' for the abstract namespace."""
    if value.startswith("@"):
        return "\0" + value[1:]
    if value.startswith("/"):
        return value
    # systemd >= 253 may also hand out "vsock:CID:PORT" (for VMs); kafkafs has no use for it.
    return None


def notify(state: str) -> bool:
    """Send ``state`` (e.g. ``"READY=1"`` or ``"READY=1\\nSTATUS=mounted"``) to ``$NOTIFY_SOCKET``.

    Returns True when the datagram was sent, False when there is nowhere to send it or sending failed.
    """
    value = os.environ.get("NOTIFY_SOCKET")
    if not value:
        return False
    address = _socket_address(value)
    if address is None:
        log.debug("NOTIFY_SOCKET=%r is not a unix socket address; not notifying %r", value, state)
        return False
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
            sock.settimeout(SEND_TIMEOUT)
            sock.sendto(state.encode("utf-8"), address)
    except OSError as exc:
        log.debug("could not notify systemd at %r of %r: %s", value, state, exc)
        return False
    return True


def sd_notify(message: str) -> None:
    """:func:`notify`, never raising (systemd plumbing must not take the mount down)."""
    try:
        notify(message)
    except Exception as exc:
        log.debug("sd_notify failed: %s", exc)


# ---------------------------------------------------------------------------------------------- stuck loop

#: Seconds the FUSE loop's thread can be left waiting in a read of ``/dev/fuse`` with nothing to read.
READ_WAKE_INTERVAL = 1.0


def _end_a_read(_signum: int, _frame: object) -> None:
    """SIGALRM while the mount serves: its one job is done in the kernel (a read it interrupts ends, EINTR)."""


def wake_stuck_reads(interval: float = READ_WAKE_INTERVAL) -> Callable[[], None]:
    """From now on, every ``interval`` seconds, end a read of ``/dev/fuse`` the calling thread (the
    process's main thread: the FUSE loop's) may be stuck in; returns the function that stops it.

    Why: pyfuse3 reads the next request (``fuse_session_receive_buf``, a blocking ``read(2)`` of a
    descriptor without ``O_NONBLOCK``, the GIL held) right after trio said ``/dev/fuse`` readable. A
    request can leave the kernel's queue in between: its process was killed while it waited (any
    ``kill``, ``timeout`` or Ctrl-C of a reader; the mount's own probe was, until it was let go instead:
    :meth:`~.mount_probe.MountProbe.stat`), or it is an INTERRUPT of a request answered meanwhile. The read then sleeps until the next
    request comes, the GIL held: every other thread of the daemon waits for it, and so does any request
    the loop took already (a ``mkdir``'s LOOKUP at a worker thread), whose answer only the loop can send;
    when its process is the mount's one client, nothing more ever comes (a fresh ``--rw`` mount's ``mkdir
    MNT/t-0`` waited 10 minutes: the loop's thread in ``fuse_dev_do_read``, the others in futex waits).
    A SIGALRM ends such a read (EINTR, as the handler is Python's, without ``SA_RESTART``); libfuse
    returns ``-EINTR``, and pyfuse3 waits for the descriptor again. Other waits of the main thread are
    taken up again where they were (PEP 475). Children do not inherit the timer (``fork``).

    The signal is process-directed and goes to the main thread unless that one has a signal pending
    already; another thread it wakes takes up its wait again the same way."""
    previous = signal.signal(signal.SIGALRM, _end_a_read)
    signal.setitimer(signal.ITIMER_REAL, interval, interval)

    def stop() -> None:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, signal.SIG_IGN)  # one raised before and not delivered yet is dropped
        signal.signal(signal.SIGALRM, previous if previous is not None else signal.SIG_DFL)

    return stop


async def with_reads_woken(main: Callable[[], Awaitable[None]], interval: float = READ_WAKE_INTERVAL) -> None:
    """``await main()`` with :func:`wake_stuck_reads` on: the ``trio.run`` target of a mount. Started and
    stopped inside trio's run, so no SIGALRM comes after trio closed its wakeup descriptor (one did at a
    stop: "Exception ignored when trying to write to the signal wakeup fd: EBADF" in the mount's log), and
    none after the run (a SIGALRM would cut short a wait for a child, as fusermount3's at the unmount)."""
    stop = wake_stuck_reads(interval)
    try:
        await main()
    finally:
        stop()


def stacks_on_request(signum: int = signal.SIGUSR1) -> Callable[[], None]:
    """``kill -USR1 PID``: every thread's Python stack to stderr (``faulthandler``: written from the
    signal handler in C, so also while a thread holds the GIL in a call that never returns); the
    process goes on. Returns the function that stops it. A detached daemon's stderr is ``/dev/null``:
    mount with ``--foreground`` (as the systemd unit does) to read them."""
    faulthandler.register(signum, all_threads=True, chain=False)
    return lambda: faulthandler.unregister(signum)


# ---------------------------------------------------------------------------------------------- memory

#: Freed blocks of this many bytes or more go back to the system (a daemon keeps nothing it read once).
#: Below it, blocks come from the heap and are reused: a rendered span of records.jsonl (~1.5 MB of JSON
#: for 512 KiB of log) and a 1 MiB read's reply were fresh mmap'd pages at 1 MiB, faulted in and zeroed
#: by the kernel at every read, then unmapped (a third of a first ``cat``'s time in the daemon).
LARGE_BLOCK = 4 << 20
#: Free heap kept for reuse (per arena) before its top is given back: a few spans' worth.
KEPT_FREE = 16 << 20


def return_large_blocks(threshold: int = LARGE_BLOCK, keep: int = KEPT_FREE) -> bool:
    """Make freed blocks of ``threshold`` bytes or more go back to the system, and trim the heap's
    free top past ``keep`` bytes; True when it could (:func:`kafkafs.storage.memory.tune_malloc`)."""
    return tune_malloc(threshold, keep)


# ---------------------------------------------------------------------------------------------- detaching


def not_a_reply_nobody_awaits(record: logging.LogRecord) -> bool:
    """pyfuse3 logs an error when the kernel refuses a reply with ENOENT: it no longer waits for that
    request (interrupted, or the mount is going away, e.g. the RELEASE of a killed ``tail`` answered
    during unmount). Nothing is lost then: not worth an error line."""
    return not (record.name == "pyfuse3" and "fuse_reply_* failed with No such file or directory" in record.getMessage())


def setup_logging(debug: bool, foreground: bool) -> None:
    """stderr until detached; a daemon says nothing on success unless asked (``--debug``)."""
    logger = logging.getLogger("kafkafs")
    logger.setLevel(logging.DEBUG if debug else logging.INFO if foreground else logging.WARNING)
    if not logger.handlers and not logging.getLogger().handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("kafkafs: %(levelname)s: %(message)s"))
        logger.addHandler(handler)


#: A detached mount's log file (where there is no syslog) is rotated at this size, and one older file
#: (``NAME.log.1``) is kept: at most twice this much per mount point.
LOG_FILE_BYTES = 1 << 20


def syslog_here() -> bool:
    """Whether a detached daemon's log reaches syslog (``/dev/log`` takes a connection)."""
    if not os.path.exists("/dev/log"):
        return False
    try:
        logging.handlers.SysLogHandler(address="/dev/log").close()
    except OSError:
        return False
    return True


def log_file_name(mountpoint: str) -> str:
    """The name of a mount's log file in the logs folder: its mount point's path, ``/`` as ``_``
    (``/tmp/x/mnt`` -> ``tmp_x_mnt.log``); a long path is its last folder's name and a hash."""
    path = os.path.abspath(mountpoint)
    name = path.strip("/").replace("/", "_") or "root"
    if len(name.encode("utf-8", "surrogateescape")) > 200:
        digest = hashlib.sha256(path.encode("utf-8", "surrogateescape")).hexdigest()[:16]
        name = f"{os.path.basename(path)[:100]}-{digest}"
    return f"{name}.log"


class _DaemonLogFile(logging.handlers.RotatingFileHandler):
    """The detached daemon's log file, rotated at :data:`LOG_FILE_BYTES`; file descriptor 2 follows it
    (what Python and libfuse print there, the stacks of ``kill -USR1``), so their lines count toward the
    size too. Thread-safe (the handler's lock) as any handler."""

    def __init__(self, path: str) -> None:
        super().__init__(path, maxBytes=LOG_FILE_BYTES, backupCount=1, encoding="utf-8", delay=False)
        self._follow()

    def _follow(self) -> None:
        if self.stream is not None:
            self.stream.flush()
            os.dup2(self.stream.fileno(), 2)

    def doRollover(self) -> None:  # noqa: N802 - logging's name
        super().doRollover()
        self._follow()


def open_log_file(path: str) -> None:
    """Check that the log file ``path`` can be written (its folder made, mode 0700): OSError if not."""
    os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
    with open(path, "a", encoding="utf-8"):
        pass


def _to_log(log_file: str | None) -> None:
    """Once detached, log to ``log_file`` (the mount said where, there being no syslog), else to syslog
    (or nowhere, if it went away meanwhile)."""
    logger = logging.getLogger("kafkafs")
    for handler in list(logger.handlers) + list(logging.getLogger().handlers):
        if isinstance(handler, logging.StreamHandler) and not isinstance(handler, logging.FileHandler):
            logger.removeHandler(handler)
            logging.getLogger().removeHandler(handler)
    if log_file is not None:
        try:
            handler = _DaemonLogFile(log_file)
            handler.setFormatter(logging.Formatter("%(asctime)s kafkafs[%(process)d]: %(levelname)s: %(message)s"))
            logger.addHandler(handler)
            logger.propagate = False
            return
        except OSError:
            pass
    if os.path.exists("/dev/log"):
        try:
            handler = logging.handlers.SysLogHandler(address="/dev/log")
            handler.setFormatter(logging.Formatter("kafkafs[%(process)d]: %(levelname)s: %(message)s"))
            logger.addHandler(handler)
            return
        except OSError:
            pass
    logger.addHandler(logging.NullHandler())
    logger.propagate = False


# ---------------------------------------------------------------------------------------------- a failed stop


def note_folder() -> Path:
    """Where a ``--rw`` mount's daemon (detached or ``-f``) leaves the one line of a failed stop (its close of LOGDIR:
    a checkpoint on a full disk) for ``kafkafs umount``, which knows the daemon by its pid, as the holder
    of ``LOGDIR/.lock`` (review23 R23-7): ``/run/user/UID/kafkafs``, else ``/tmp/kafkafs-UID``: found by
    both whatever their environment."""
    uid = os.getuid()
    run = Path(f"/run/user/{uid}")
    return run / "kafkafs" if run.is_dir() else Path(f"/tmp/kafkafs-{uid}")


def _note_path(pid: int) -> Path | None:
    """The note of daemon ``pid``, in a folder that is this user's (never through a link), else None."""
    folder = note_folder()
    try:
        st = os.lstat(folder)
    except OSError:
        return None
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid():
        return None
    return folder / f"daemon-{pid}.failed"


def ending_line(exc: BaseException) -> str:
    """The line a daemon says of an error that ended it (:func:`~kafkafs.errors.one_line`; anything else
    is unexpected)."""
    if isinstance(exc, (KafkafsError, OSError)):
        return one_line(exc)
    return f"unexpected error: {exc!r}"


def leave_failure_note(text: str, logdir: str | None = None) -> None:
    """This daemon's stop failed: ``text`` (one line) for ``kafkafs umount``, or, where the mount was
    stopped otherwise (``fusermount3 -u``, a SIGTERM), for the next command that looks at ``logdir``
    (:func:`take_failure_notes_of`). Never raises."""
    try:
        os.makedirs(note_folder(), mode=0o700, exist_ok=True)
        path = _note_path(os.getpid())
        if path is None:
            return
        note = json.dumps({"logdir": None if logdir is None else os.path.realpath(logdir), "line": text})
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            os.write(fd, note.encode("utf-8", "replace")[:8192])
        finally:
            os.close(fd)
    except OSError as exc:
        log.debug("no note of the failed stop: %s", exc)


def _read_note(path: Path) -> tuple[str | None, str] | None:
    """The log directory (None: not said) and the line of the note at ``path``, removed; None when it is
    gone (another command took it) or unreadable."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            data = os.read(fd, 8192)
        finally:
            os.close(fd)
        os.unlink(path)  # whoever removes it says it: each note said once
    except OSError:
        return None
    text = data.decode("utf-8", "replace").strip()
    try:
        note = json.loads(text)
        logdir, line = note.get("logdir"), note.get("line")
    except (ValueError, AttributeError):
        logdir, line = None, text  # a note of an earlier kafkafs: its line only
    if not isinstance(line, str) or not line.strip():
        line = "(no reason given)"
    return (logdir if isinstance(logdir, str) else None), " ".join(line.split())


def take_failure_note(pid: int) -> str | None:
    """The note daemon ``pid`` left of its failed stop (removed), else None. A daemon starting removes
    a note its pid had from an earlier process."""
    path = _note_path(pid)
    if path is None:
        return None
    note = _read_note(path)
    return None if note is None else note[1]


def _ended_before(pid: int, written: float) -> bool:
    """Whether daemon ``pid``, which wrote its note at ``written`` (epoch seconds), has ended: no such
    process, a zombie, or another process that took its pid since."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rpartition(b")")[2].split()
        with open("/proc/stat", "rb") as f:
            boot = next(int(line.split()[1]) for line in f if line.startswith(b"btime "))
    except (OSError, StopIteration, ValueError, IndexError):
        return not os.path.exists(f"/proc/{pid}")
    if fields[:1] in ([b"Z"], [b"X"]):
        return True
    try:
        started = boot + int(fields[19]) / os.sysconf("SC_CLK_TCK")
    except (IndexError, ValueError, OSError):
        return False
    return started > written + 1


def take_failure_notes_of(logdir: str) -> list[str]:
    """One warning line for each note a ``--rw`` mount of ``logdir`` left of its failed close when it
    was stopped without ``kafkafs umount`` (which would have said it): its daemon has ended and nobody
    took the note. Each is removed, so said once (by ``verify``, ``recover`` or the next mount)."""
    folder = note_folder()
    if _note_path(0) is None:  # no folder of this user's: no notes
        return []
    wanted = os.path.realpath(logdir)
    lines = []
    try:
        names = sorted(os.listdir(folder))
    except OSError:
        return []
    for name in names:
        pid_text = name.removeprefix("daemon-").removesuffix(".failed")
        if not name.startswith("daemon-") or not name.endswith(".failed") or not pid_text.isdigit():
            continue
        path = folder / name
        try:
            st = os.lstat(path)
            with open(path, "rb") as f:
                said_dir = json.loads(f.read(8192)).get("logdir")
        except (OSError, ValueError, AttributeError):
            continue
        if said_dir != wanted or not stat.S_ISREG(st.st_mode) or not _ended_before(int(pid_text), st.st_mtime):
            continue
        note = _read_note(path)
        if note is not None:
            lines.append(f"kafkafs: warning: the last --rw mount of {logdir} (pid {pid_text}) was stopped without "
                         f"`kafkafs umount`, and its close failed: {note[1]}")
    return lines


def _detach_stdio() -> None:
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    if null > 2:
        os.close(null)


def daemonize(run: Callable[[Callable[[], None]], int], debug: bool = False, log_file: str | None = None) -> int:
    """Fork twice; the grandchild calls ``run(ready)``. Returns 0 in the parent once ``ready`` was
    called; raises MountError with the grandchild's message if it failed first. Once detached, the
    grandchild logs to ``log_file`` when given (see :func:`syslog_here`), else to syslog."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid > 0:
        os.close(write_end)
        chunks = []
        while True:
            data = os.read(read_end, 4096)
            if not data:
                break
            chunks.append(data)
        os.close(read_end)
        os.waitpid(pid, 0)
        message = b"".join(chunks).decode("utf-8", "replace")
        if message.startswith("OK"):
            return 0
        if message.startswith("USAGE "):
            raise MountPathError(message.removeprefix("USAGE ").strip())
        raise MountError(
            message.removeprefix("ERR ").strip() or "the daemon exited before the mount was ready"
        )
    # first child: a session of its own, then the grandchild does the work
    try:
        os.close(read_end)
        os.setsid()
        if os.fork() > 0:
            os._exit(0)
        os.chdir("/")
    except BaseException:
        os._exit(1)
    code = 1
    reported = False

    def ready() -> None:
        nonlocal reported
        os.write(write_end, b"OK\n")
        os.close(write_end)
        reported = True
        logging.getLogger("kafkafs").setLevel(logging.DEBUG if debug else logging.INFO)
        _detach_stdio()
        _to_log(log_file)

    try:
        code = run(ready)
    except KafkafsError as exc:
        if not reported:
            os.write(write_end, f"{'USAGE' if isinstance(exc, UsageError) else 'ERR'} {exc}".encode())
        else:
            log.error("%s", exc)
    except OSError as exc:  # the file and what kafkafs was doing with it (SPEC §4)
        if not reported:
            os.write(write_end, f"ERR {describe_os_error(exc)}".encode())
        else:
            log.error("%s", describe_os_error(exc))
    except BaseException as exc:  # the parent prints it; nothing else may escape a daemon
        if not reported:
            os.write(write_end, f"ERR unexpected error: {exc!r}".encode())
        else:
            log.exception("unexpected error")
    finally:
        logging.shutdown()
        os._exit(code)
