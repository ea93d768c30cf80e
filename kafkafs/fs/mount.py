"""``kafkafs mount``: check (:mod:`.mount_checks`), mount, serve, unmount.

By default the command returns once the mount answers and a daemon serves it: the parent forks, the
child starts a new session and forks again, and the grandchild mounts and serves; it reports "ready"
(or the reason it could not mount) through a pipe, and the parent exits 0 (or raises). ``foreground``
serves in the calling process. Either way SIGTERM, SIGINT and SIGHUP unmount cleanly, and so does
``fusermount3 -u MOUNTPOINT``.

If the daemon dies without unmounting (SIGKILL, a crash), the kernel keeps a dead mount that answers
"Transport endpoint is not connected"; ``fusermount3 -uz MOUNTPOINT`` clears it, after which the
folder can be mounted again. ``mount()`` recognises that state and says so.
"""

from __future__ import annotations

import gc
import logging
import logging.handlers
import os
import signal
import sys
from collections.abc import Callable, Iterable
from pathlib import Path

from ..errors import KafkafsError, LogDirLocked, UsageError, describe_os_error
from ..format.jsonview import VALUES_MODES
from ..storage.config import Settings
from ..storage.logdir import LogDir
from ..storage.schemas import load_registry
from .memory import return_large_blocks
from .mount_checks import MountError, MountPathError, check_logdir, check_mountpoint, fuse_option_set
from .starting import StartingStderr, first_exception

__all__ = ["mount", "MountError", "fuse_option_set"]

log = logging.getLogger("kafkafs.fs")


# ---------------------------------------------------------------------------------------------- serving


def _sd_notify(message: str) -> None:
    try:
        from . import notify
    except ImportError:
        return
    try:
        notify.notify(message)
    except Exception as exc:  # never let systemd plumbing take the mount down
        log.debug("sd_notify failed: %s", exc)


def _start_error(mountpoint: str, said: list[str], exc: BaseException) -> MountError:
    """One line for a mount that failed as it started; an option libfuse does not know is a usage error."""
    exc = first_exception(exc)
    reason = "; ".join(said) or (exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc))
    kind = MountPathError if "unknown option" in reason else MountError
    return kind(f"{mountpoint}: FUSE could not mount it: {reason}")


def _open_logdir(path: str, settings: Settings | None, rw: bool) -> tuple[LogDir, bool]:
    """The log directory, writable with ``rw``; a directory another writer holds fails (SPEC §3: a
    user or systemd who asked for a writable mount must not get a read-only one)."""
    if rw:
        try:
            return LogDir(path, settings, writable=True), True
        except LogDirLocked as exc:
            raise MountError(f"{exc}; not mounted (mount it without --rw to read it)") from None
    return LogDir(path, settings), False


def serve(
    logdir: str,
    mountpoint: str,
    *,
    rw: bool,
    values: str,
    settings: Settings | None,
    options: set[str],
    on_ready: Callable[[], None] = lambda: None,
    cache_dir: str | None = None,
    list_limit: int | None = None,
    schemas: str | None = None,
) -> int:
    """Mount, serve until unmounted or signalled, unmount. Blocks; returns the exit code."""
    import pyfuse3
    import trio

    from .live import Invalidator, poll_forever
    from .operations import Operations
    from .tree import Tree

    # Decoding makes many short-lived objects and no cycles: collect the young generation less often.
    gc.freeze()
    gc.set_threshold(50_000, 20, 20)
    return_large_blocks()  # decompression bombs must not leave their memory with the daemon (fs/memory)
    directory, rw = _open_logdir(logdir, settings, rw)
    if not rw:
        options = options | {"ro"}
    tree = Tree(directory, mode=values, rw=rw, cache=_size_cache(cache_dir, logdir),
                **({"list_limit": list_limit} if list_limit is not None else {}))
    # Schema Registry schemas: LOGDIR's _schemas topic and --schemas DIR (SPEC §8)
    tree.registry = load_registry(logdir, schemas)
    ops = Operations(tree)
    starting = StartingStderr()
    try:
        pyfuse3.init(ops, mountpoint, options)
    except Exception as exc:
        directory.close()
        raise _start_error(mountpoint, starting.restore(replay=False), exc) from None
    logging.getLogger("pyfuse3").addFilter(_not_a_reply_nobody_awaits)
    invalidator = Invalidator(ops.inodes, pyfuse3.invalidate_inode, pyfuse3.invalidate_entry)
    tree.add_listener(invalidator.partition_changed)
    tree.add_append_listener(invalidator.attrs_now)
    invalidator.start()
    cleaner = None
    if rw:  # retention and compaction run in the background, as a broker runs them
        from ..storage.cleaner import LogCleaner

        cleaner = LogCleaner(directory)
    failed = answered = False

    async def fuse_main(nursery) -> None:
        nonlocal failed
        try:
            await pyfuse3.main()
        except Exception:
            failed = True
            log.exception("the FUSE loop stopped")
        nursery.cancel_scope.cancel()

    async def on_signal() -> None:
        with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT, signal.SIGHUP) as signals:
            async for signum in signals:
                log.info("%s: unmounting", signal.Signals(signum).name)
                pyfuse3.terminate()
                return

    async def answering() -> None:
        parent = os.stat(os.path.dirname(mountpoint) or "/").st_dev
        while True:
            st = await trio.to_thread.run_sync(os.stat, mountpoint)
            if st.st_dev != parent:
                return
            await trio.sleep(0.01)

    async def main() -> None:
        nonlocal answered
        async with trio.open_nursery() as nursery:
            nursery.start_soon(fuse_main, nursery)
            nursery.start_soon(on_signal)
            nursery.start_soon(poll_forever, tree)
            with trio.fail_after(30):
                await answering()
            starting.restore(replay=True)
            answered = True
            log.info("mounted %s on %s (%s)", logdir, mountpoint, "read-write" if rw else "read-only")
            if cleaner is not None:
                cleaner.start()
            on_ready()
            _sd_notify("READY=1")

    error: BaseException | None = None
    try:
        trio.run(main)
    except Exception as exc:  # trio wraps what its tasks raise in an ExceptionGroup: said in one line
        failed = True
        error = exc
    finally:
        said = starting.restore(replay=error is None)
        _sd_notify("STOPPING=1")
        if cleaner is not None:
            cleaner.stop()  # before the logs close: a compaction in progress is abandoned
        invalidator.stop()
        ops.workers.stop()
        try:
            pyfuse3.close(unmount=True)
        finally:
            tree.close()
    if not answered:  # libfuse refused (e.g. -o max_read=...), the session died, or it never answered
        error = error or MountError("the FUSE session ended before the mount answered")
        slow = ["the mount did not answer within 30 s"] if isinstance(first_exception(error), trio.TooSlowError) else []
        raise _start_error(mountpoint, said or slow, error)
    if error is not None:  # it served, then a task failed: one line in the log
        log.error("the mount stopped: %r", first_exception(error))
    return 1 if failed else 0


def _size_cache(cache_dir: str | None, logdir: str):
    """The size cache: ``cache_dir`` (an error if inside LOGDIR), else the default one (off, with a
    warning, if that one happens to be inside LOGDIR); ``""`` turns it off."""
    from ..errors import InvalidInput
    from .sizecache import SizeCache, check_outside, default_cache_dir

    if cache_dir == "":
        return SizeCache(None)
    if cache_dir is not None:
        return SizeCache(check_outside(cache_dir, logdir))
    try:
        return SizeCache(check_outside(default_cache_dir(), logdir))
    except InvalidInput as exc:
        log.warning("%s; sizes will not be kept across mounts", exc)
        return SizeCache(None)


# ---------------------------------------------------------------------------------------------- daemon


def _not_a_reply_nobody_awaits(record: logging.LogRecord) -> bool:
    """pyfuse3 logs an error when the kernel refuses a reply with ENOENT: it no longer waits for that
    request (interrupted, or the mount is going away, e.g. the RELEASE of a killed ``tail`` answered
    during unmount). Nothing is lost then: not worth an error line."""
    return not (record.name == "pyfuse3" and "fuse_reply_* failed with No such file or directory" in record.getMessage())


def _setup_logging(debug: bool, foreground: bool) -> None:
    """stderr until detached; a daemon says nothing on success unless asked (``--debug``)."""
    logger = logging.getLogger("kafkafs")
    logger.setLevel(logging.DEBUG if debug else logging.INFO if foreground else logging.WARNING)
    if not logger.handlers and not logging.getLogger().handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("kafkafs: %(levelname)s: %(message)s"))
        logger.addHandler(handler)


def _to_syslog() -> None:
    """Once detached, log to syslog (or nowhere, if there is no syslog)."""
    logger = logging.getLogger("kafkafs")
    for handler in list(logger.handlers) + list(logging.getLogger().handlers):
        if isinstance(handler, logging.StreamHandler) and not isinstance(handler, logging.FileHandler):
            logger.removeHandler(handler)
            logging.getLogger().removeHandler(handler)
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


def _detach_stdio() -> None:
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    if null > 2:
        os.close(null)


def _daemonize(run: Callable[[Callable[[], None]], int], debug: bool = False) -> int:
    """Fork twice; the grandchild calls ``run(ready)``. Returns 0 in the parent once ``ready`` was
    called; raises MountError with the grandchild's message if it failed first."""
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
        _to_syslog()
        _detach_stdio()

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


# ---------------------------------------------------------------------------------------------- entry point


def mount(
    logdir: str,
    mountpoint: str,
    *,
    rw: bool = False,
    foreground: bool = False,
    fuse_options: Iterable[str] = (),
    values: str = "auto",
    settings: Settings | None = None,
    debug: bool = False,
    cache_dir: str | None = None,
    list_limit: int | None = None,
    schemas: str | None = None,
) -> int:
    """Mount ``logdir`` on ``mountpoint`` (SPEC §3); returns the exit code.

    User mistakes (no such log directory, a missing, busy or non-empty mount point, a bad option) raise
    :class:`~kafkafs.errors.KafkafsError` subclasses with a one-line message.
    """
    asked_rw = rw
    options, rw, values_override = fuse_option_set(rw, fuse_options, os.path.abspath(logdir))
    if asked_rw and not rw:
        print("kafkafs: -o ro overrides --rw: mounting read-only", file=sys.stderr)
    if values_override is not None:
        values = values_override
    if values not in VALUES_MODES:
        raise MountPathError(f"--values must be one of {', '.join(VALUES_MODES)}, not {values!r}")
    logdir = check_logdir(logdir)
    mountpoint = check_mountpoint(mountpoint)
    if not os.path.exists("/dev/fuse"):
        raise MountError("FUSE is not available here (/dev/fuse is missing; load the fuse module)")
    if Path(mountpoint).resolve().is_relative_to(Path(logdir).resolve()):
        raise MountPathError(f"{mountpoint}: the mount point cannot be inside the log directory")
    if list_limit is not None and list_limit < 0:
        raise MountPathError(f"--list-limit must be 0 or more, not {list_limit}")
    _size_cache(cache_dir, logdir)  # a --cache-dir inside LOGDIR fails here, before mounting
    if schemas is not None and not os.path.isdir(schemas):
        raise MountPathError(f"--schemas {schemas}: not a directory")
    _setup_logging(debug, foreground)

    def run(ready: Callable[[], None]) -> int:
        return serve(
            logdir, mountpoint, rw=rw, values=values, settings=settings, options=options, on_ready=ready,
            cache_dir=cache_dir, list_limit=list_limit, schemas=schemas,
        )

    if foreground:
        return run(lambda: None)
    return _daemonize(run, debug)


if __name__ == "__main__":  # the command line is the CLI's: say so rather than exit quietly
    print("kafkafs: error: run `kafkafs mount LOGDIR MOUNTPOINT` (or `python -m kafkafs mount ...`)", file=sys.stderr)
    sys.exit(2)
