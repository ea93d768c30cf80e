"""``kafkafs mount``: check (:mod:`.mount_checks`), mount, serve, unmount.

By default the command returns once the mount answers and a daemon serves it (:mod:`.daemon`: the
grandchild of two forks mounts and serves, and reports "ready", or the reason it could not mount,
through a pipe; the parent exits 0 or raises). ``foreground`` serves in the calling process. Either way SIGTERM, SIGINT and SIGHUP unmount cleanly, and so does
``fusermount3 -u MOUNTPOINT``.

If the daemon dies without unmounting (SIGKILL, a crash), the kernel keeps a dead mount that answers
"Transport endpoint is not connected"; ``fusermount3 -uz MOUNTPOINT`` clears it, after which the
folder can be mounted again. ``mount()`` recognises that state and says so.
"""

from __future__ import annotations

import gc
import logging
import os
import signal
import sys
from collections.abc import Callable, Iterable
from pathlib import Path

from ..errors import InvalidInput, LogDirLocked, MountError, MountPathError
from ..format.jsonview import VALUES_MODES
from ..storage.config import Settings
from ..storage.logdir import LogDir
from ..storage.schemas import load_registry
from .daemon import (
    StartingStderr,
    daemonize,
    first_exception,
    not_a_reply_nobody_awaits,
    return_large_blocks,
    sd_notify,
    setup_logging,
)
from .mount_checks import check_logdir, check_mountpoint, fuse_option_set
from .tree.partitions import ServeOptions
from .views.layoutcache import LayoutCache, check_outside, default_cache_dir

__all__ = ["mount", "serve"]

log = logging.getLogger("kafkafs.fs")

#: The signals that unmount cleanly (SPEC §3: SIGTERM unmounts).
_UNMOUNT_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


# ---------------------------------------------------------------------------------------------- serving


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
    clean: bool = False,
    on_ready: Callable[[], None] = lambda: None,
    cache_dir: str | None = None,
    list_limit: int | None = None,
    schemas: str | None = None,
) -> int:
    """Mount, serve until unmounted or signalled, unmount. Blocks; returns the exit code."""
    import pyfuse3
    import trio

    from .invalidation import POLL_INTERVAL, Invalidator, poll_forever
    from .operations import Operations
    from .tree.root import Tree
    from .watching import ChangeWatcher

    # Decoding makes many short-lived objects and no cycles: collect the young generation less often.
    gc.freeze()
    gc.set_threshold(50_000, 20, 20)
    return_large_blocks()  # decompression bombs must not leave their memory with the daemon (.daemon)
    directory, rw = _open_logdir(logdir, settings, rw)
    if not rw:
        options = options | {"ro"}
    serving: ServeOptions = {"mode": values, "rw": rw, "cache": _size_cache(cache_dir, logdir)}
    if list_limit is not None:
        serving["list_limit"] = list_limit
    tree = Tree(directory, **serving)
    # Schema Registry schemas: LOGDIR's _schemas topic and --schemas DIR (SPEC §8)
    tree.partitions.registry = load_registry(logdir, schemas)
    ops = Operations(tree)
    starting = StartingStderr()
    # From the mount on, a signal must unmount: held back until trio's receiver takes it (on_signal);
    # delivered before, its default action killed the process and left a dead mount behind
    held = signal.pthread_sigmask(signal.SIG_BLOCK, _UNMOUNT_SIGNALS)
    try:
        pyfuse3.init(ops, mountpoint, options)
    except Exception as exc:
        signal.pthread_sigmask(signal.SIG_SETMASK, held)
        directory.close()
        raise _start_error(mountpoint, starting.restore(replay=False), exc) from None
    logging.getLogger("pyfuse3").addFilter(not_a_reply_nobody_awaits)
    invalidator = Invalidator(ops.inodes, pyfuse3.invalidate_inode, pyfuse3.invalidate_entry)
    tree.partitions.add_listener(invalidator.partition_changed)
    tree.partitions.add_append_listener(invalidator.attrs_now)
    invalidator.start()
    watcher = ChangeWatcher()
    watcher.on_folder_event = invalidator.folder_changed
    watcher.start()
    tree.partitions.watch_folder = watcher.watch_folder  # partitions watched from before they load
    cleaner = None
    if rw and clean:  # retention and compaction in the background, as a broker runs them: asked for only
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

    up = trio.Event()  # set once the mount answered

    async def on_signal() -> None:
        with trio.open_signal_receiver(*_UNMOUNT_SIGNALS) as signals:
            signal.pthread_sigmask(signal.SIG_SETMASK, held)  # one that came meanwhile arrives now
            async for signum in signals:
                log.info("%s: unmounting", signal.Signals(signum).name)
                # not before the mount answered: the FUSE loop stopped first leaves answering()'s stat
                # of the mount point waiting for it forever
                await up.wait()
                pyfuse3.terminate()
                return

    async def answering() -> int:
        """Wait until the mount answers; its device number. The mountpoint is only ever looked at from
        a thread: a stat on the loop's own thread would wait for the loop to answer it (a deadlock as
        soon as the kernel's cached attributes of the root have expired)."""
        parent = os.stat(os.path.dirname(mountpoint) or "/").st_dev
        while True:
            st = await trio.to_thread.run_sync(os.stat, mountpoint)
            if st.st_dev != parent:
                return st.st_dev
            await trio.sleep(0.01)

    async def main() -> None:
        nonlocal answered
        async with trio.open_nursery() as nursery:
            nursery.start_soon(fuse_main, nursery)
            nursery.start_soon(on_signal)
            nursery.start_soon(poll_forever, tree, POLL_INTERVAL, watcher)
            with trio.fail_after(30):
                dev = await answering()
            starting.restore(replay=True)
            answered = True
            up.set()
            larger_reads(dev)
            mode = "read-only" if not rw else "read-write, cleaning" if cleaner else "read-write, not cleaning"
            log.info("mounted %s on %s (%s)", logdir, mountpoint, mode)
            if cleaner is not None:
                cleaner.start()
            on_ready()
            sd_notify("READY=1")

    error: BaseException | None = None
    try:
        trio.run(main)
    except Exception as exc:  # trio wraps what its tasks raise in an ExceptionGroup: said in one line
        failed = True
        error = exc
    finally:
        said = starting.restore(replay=error is None)
        sd_notify("STOPPING=1")
        if cleaner is not None:
            cleaner.stop()  # before the logs close: a compaction in progress is abandoned
        watcher.stop()
        invalidator.stop()
        ops.workers.stop()
        try:
            pyfuse3.close(unmount=True)
        finally:
            tree.close()
            signal.pthread_sigmask(signal.SIG_SETMASK, held)
    if not answered:  # libfuse refused (e.g. -o max_read=...), the session died, or it never answered
        error = error or MountError("the FUSE session ended before the mount answered")
        slow = ["the mount did not answer within 30 s"] if isinstance(first_exception(error), trio.TooSlowError) else []
        raise _start_error(mountpoint, said or slow, error)
    if error is not None:  # it served, then a task failed: one line in the log
        log.error("the mount stopped: %r", first_exception(error))
    return 1 if failed else 0


#: The mount's read-ahead window: a sequential reader of records.jsonl gets requests this large (the
#: kernel's FUSE default is 128 KiB, which it ramps to 256 KiB; each request costs pyfuse3 about the
#: same whatever its size, so four times fewer of them). FUSE caps a request at its max_pages (1 MiB).
READ_AHEAD_KB = 1024


def larger_reads(dev: int, kb: int = READ_AHEAD_KB) -> bool:
    """Set the read-ahead of the mount with device number ``dev`` to ``kb`` KiB through its
    ``read_ahead_kb`` in sysfs (root may; anyone else keeps the kernel's default, quietly). True when
    set. Touches nothing under the mount (it runs on the loop that answers the mount's requests)."""
    path = f"/sys/class/bdi/{os.major(dev)}:{os.minor(dev)}/read_ahead_kb"
    try:
        with open(path, "w") as f:
            f.write(str(kb))
        return True
    except OSError as exc:
        log.debug("read-ahead of the mount left as it is: %s", exc)
        return False


def _size_cache(cache_dir: str | None, logdir: str) -> LayoutCache:
    """The layout cache (``--cache-dir``, the size cache): ``cache_dir`` (an error if inside LOGDIR),
    else the default one (off, with a warning, if that one happens to be inside LOGDIR); ``""`` turns
    it off."""
    if cache_dir == "":
        return LayoutCache(None)
    if cache_dir is not None:
        return LayoutCache(check_outside(cache_dir, logdir))
    try:
        return LayoutCache(check_outside(default_cache_dir(), logdir))
    except InvalidInput as exc:
        log.warning("%s; sizes will not be kept across mounts", exc)
        return LayoutCache(None)


# ---------------------------------------------------------------------------------------------- entry point


def mount(
    logdir: str,
    mountpoint: str,
    *,
    rw: bool = False,
    clean: bool = False,
    foreground: bool = False,
    fuse_options: Iterable[str] = (),
    values: str = "auto",
    settings: Settings | None = None,
    debug: bool = False,
    cache_dir: str | None = None,
    list_limit: int | None = None,
    schemas: str | None = None,
) -> int:
    """Mount ``logdir`` on ``mountpoint`` (SPEC §3); returns the exit code. ``clean`` (with ``rw``):
    retention and compaction run in the background; a ``--rw`` mount deletes and compacts nothing
    without it (kafkafs is used on copies and archives: data past ``retention.ms`` is not lost by
    mounting it).

    User mistakes (no such log directory, a missing, busy or non-empty mount point, a bad option) raise
    :class:`~kafkafs.errors.KafkafsError` subclasses with a one-line message.
    """
    if clean and not rw:
        raise MountPathError("--clean needs --rw (a read-only mount deletes and compacts nothing)")
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
    setup_logging(debug, foreground)

    def run(ready: Callable[[], None]) -> int:
        return serve(
            logdir, mountpoint, rw=rw, values=values, settings=settings, options=options, on_ready=ready,
            cache_dir=cache_dir, list_limit=list_limit, schemas=schemas, clean=clean,
        )

    if foreground:
        return run(lambda: None)
    return daemonize(run, debug)


if __name__ == "__main__":  # the command line is the CLI's: say so rather than exit quietly
    print("kafkafs: error: run `kafkafs mount LOGDIR MOUNTPOINT` (or `python -m kafkafs mount ...`)", file=sys.stderr)
    sys.exit(2)
