"""``kafkafs mount``: check (:mod:`.mount_checks`), mount, serve, unmount.

By default the command returns once the mount answers and a daemon serves it (:mod:`.daemon`: the
grandchild of two forks mounts and serves, and reports "ready", or the reason it could not mount,
through a pipe; the parent exits 0 or raises). ``foreground`` serves in the calling process. Either way SIGTERM, SIGINT and SIGHUP unmount cleanly, and so does
``fusermount3 -u MOUNTPOINT``. A stop ends in bounded time whatever the daemon was doing: no thread of
the daemon ever waits for its own mount (its one look at the mount point is made by a child process,
:mod:`.mount_probe`), the invalidator stops while the loop still answers (a loop that died of an
error is started again to refuse what the kernel queued, until the invalidator has stopped), and the
loop has :data:`STOP_GRACE` seconds to answer the requests it took. While it serves, the loop's thread is
never left more than a second in a read of ``/dev/fuse`` that found nothing to read
(:func:`~.daemon.wake_stuck_reads`), and ``kill -USR1`` writes every thread's stack to stderr.

If the daemon dies without unmounting (SIGKILL, a crash), the kernel keeps a dead mount that answers
"Transport endpoint is not connected"; ``fusermount3 -uz MOUNTPOINT`` clears it, after which the
folder can be mounted again. ``mount()`` recognises that state and says so.
"""

from __future__ import annotations

import errno
import gc
import logging
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import InvalidInput, LogDirLocked, MountError, MountPathError, describe_os_error, doing
from ..format.jsonview import VALUES_MODES
from ..storage.config import Settings
from ..storage.kraft import METADATA_PARTITION
from ..storage.logdir import LogDir
from ..storage.segment import read_denied_as_unreadable
from .daemon import (
    StartingStderr,
    daemonize,
    ending_line,
    first_exception,
    leave_failure_note,
    log_file_name,
    not_a_reply_nobody_awaits,
    open_log_file,
    return_large_blocks,
    sd_notify,
    setup_logging,
    stacks_on_request,
    syslog_here,
    take_failure_note,
    take_failure_notes_of,
    with_reads_woken,
)
from .mount_checks import check_logdir, check_mountpoint, fuse_fd, fuse_option_set
from .mount_probe import MountProbe, mounted_device
from .tree.partitions import Partitions, ServeOptions
from .views.layoutcache import LayoutCache, check_outside, default_cache_dir

if TYPE_CHECKING:
    from .invalidation import Invalidator

__all__ = ["mount", "serve"]

log = logging.getLogger("kafkafs.fs")

#: The signals that unmount cleanly (SPEC §3: SIGTERM unmounts).
_UNMOUNT_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
#: Seconds the mount has, once mounted, to answer its first stat.
ANSWER_TIMEOUT = 30.0
#: Seconds the FUSE loop has, once asked to stop, to answer the requests it took (then they are given up).
STOP_GRACE = 5.0


# ---------------------------------------------------------------------------------------------- serving


def _folder_event(partitions: Partitions, invalidator: Invalidator) -> Callable[[str], None]:
    """What the watcher calls when a watched partition folder changed (on its thread): the kernel's
    attributes of the folder go (and its name, when the folder left LOGDIR: a topic deleted), and a
    change of a ``_schemas`` folder is followed at once (a schema registered: its event comes before
    those of the records framed with it), and so is one of ``__cluster_metadata-0`` (the topic
    settings a broker recorded: a topic created, ``kafka-configs --alter``)."""

    def changed(name: str) -> None:
        there = (partitions.logdir.path / name).is_dir()  # a stat here, off the FUSE loop
        partitions.folder_seen(name, there)
        if there:
            invalidator.folder_changed(name)
        else:
            invalidator.folder_gone(name)
        if partitions.is_schemas_folder(name):
            try:
                partitions.follow_schemas()
            except Exception as exc:  # the poll loop looks again at its next turn
                log.warning("could not read the schemas again: %s", exc)
        elif name == METADATA_PARTITION:  # the topic settings a broker recorded (SPEC §8)
            try:
                partitions.follow_settings()
            except Exception as exc:  # the metadata log's next event reads again
                log.warning("could not read the recorded topic settings again: %s", exc)

    return changed


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
    read_denied_as_unreadable()  # a segment of mode 000 fails only the reads that need it (R22-4)
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
    from .watching import open_watcher

    # Decoding makes many short-lived objects and no cycles: collect the young generation less often.
    gc.freeze()
    gc.set_threshold(50_000, 20, 20)
    return_large_blocks()  # decompression bombs must not leave their memory with the daemon (.daemon)
    directory, rw = _open_logdir(logdir, settings, rw)
    realtime_loop = REALTIME_LOOP in options  # kafkafs's own -o word, never FUSE's
    options = options - {REALTIME_LOOP}
    if not rw:
        options = options | {"ro"}
    serving: ServeOptions = {"mode": values, "rw": rw, "cache": _size_cache(cache_dir, logdir)}
    if list_limit is not None:
        serving["list_limit"] = list_limit
    tree = Tree(directory, **serving)
    # Schema Registry schemas: LOGDIR's _schemas topic and --schemas DIR (SPEC §8)
    tree.partitions.load_schemas(schemas)
    if tree.partitions.cache.enabled:  # entries of segments deleted while nothing was mounted (R15-6)
        threading.Thread(target=tree.partitions.prune_cache, name="kafkafs-cache-prune", daemon=True).start()
    ops = Operations(tree)
    starting = StartingStderr()
    watcher = open_watcher()  # None: inotify cannot be had, every partition is polled (said)
    # From the mount on, a signal must unmount: held back until trio's receiver takes it (on_signal);
    # delivered before, its default action killed the process and left a dead mount behind. Blocked in
    # this thread; one that another thread takes meanwhile is kept by this handler for on_signal, which
    # trio also puts back after its run, so that a signal while the mount is taken down is harmless.
    early: list[int] = []
    previous = {
        signum: signal.signal(signum, lambda signum, _frame: early.append(signum)) for signum in _UNMOUNT_SIGNALS
    }
    held = signal.pthread_sigmask(signal.SIG_BLOCK, _UNMOUNT_SIGNALS)
    # the look at the mount point (.mount_probe), ready by the time the mount is; it inherits the mask,
    # so a stop that signals the whole group (systemd) ends it through its input, after the daemon's
    # a mount point /dev/fd/N is a /dev/fuse that mount.fuse3 mounted already (-o drop_privileges): its
    # real mount point is unknown here, and the daemon has no privilege to look at or unmount it
    handed_over = fuse_fd(mountpoint) is not None
    probe = MountProbe(mountpoint)
    if not handed_over:
        probe.start()
    try:
        pyfuse3.init(ops, mountpoint, options)
    except Exception as exc:
        probe.reap()
        _restore_signals(previous, held)
        if watcher is not None:
            watcher.stop()
        directory.close()
        raise _start_error(mountpoint, starting.restore(replay=False), exc) from None
    logging.getLogger("pyfuse3").addFilter(not_a_reply_nobody_awaits)
    invalidator = Invalidator(ops.inodes, pyfuse3.invalidate_inode, pyfuse3.invalidate_entry)
    invalidator.records_held = tree.partitions.records_held
    tree.partitions.on_schemas_changed = invalidator.folders_changed
    tree.partitions.add_listener(invalidator.partition_changed)
    tree.partitions.add_append_listener(invalidator.attrs_now)
    invalidator.start()
    if watcher is not None:
        watcher.on_folder_event = _folder_event(tree.partitions, invalidator)
        watcher.start()
        tree.partitions.watch_folder = watcher.watch_folder  # partitions watched from before they load
        tree.partitions.watch_schemas()  # a schema registered is followed at its event
    cleaner = None
    if rw and clean:  # retention and compaction in the background, as a broker runs them: asked for only
        from ..storage.cleaner import LogCleaner

        cleaner = LogCleaner(directory)
    failed = answered = too_slow = stopping = False
    stopped_by: list[str] = []  # the signal that asked the mount to stop
    device = None if handed_over else mounted_device(mountpoint)  # of this mount, as the mount table says

    async def fuse_main(nursery) -> None:
        nonlocal failed
        try:
            await pyfuse3.main()
        except Exception:
            failed = True
            log.exception("the FUSE loop stopped")
            await refuse_until_invalidator_stopped()
        nursery.cancel_scope.cancel()

    async def refuse_until_invalidator_stopped() -> None:
        """The loop died of an error (a signal stops the invalidator first, while the loop answers): the
        requests the kernel queued meanwhile are answered ENOTCONN by a loop that refuses everything until
        the invalidator has stopped. A page invalidation it sends waits for any page a queued read holds
        locked, and that read for a loop: unanswered, the invalidator's thread stays in the kernel, and
        the process can never end, nor be killed (hang10's leftover). At most STOP_GRACE seconds."""
        _refuse_every_request(ops)
        async with trio.open_nursery() as refusing:

            async def refuse() -> None:
                try:
                    await pyfuse3.main()
                except Exception as exc:  # nothing more can be answered: the stop goes on without it
                    log.debug("the loop refusing requests stopped: %r", first_exception(exc))

            refusing.start_soon(refuse)
            await trio.to_thread.run_sync(invalidator.stop)  # bounded: it waits for its thread 5 s at most
            pyfuse3.terminate()
            refusing.cancel_scope.deadline = trio.current_time() + STOP_GRACE

    async def stop_serving(nursery) -> None:
        """End the FUSE loop in the one order that leaves no thread of the daemon waiting for it (a
        thread that waits for its own mount after the loop stopped can never end, nor the process):
        the invalidator first, while the loop still answers (dropping a file's pages waits for a read
        in flight to fill them), then the loop, which answers the requests it took; those still
        unanswered after STOP_GRACE seconds are given up (the kernel fails them when the mount's
        /dev/fuse closes)."""
        nonlocal stopping
        if stopping:
            return
        stopping = True
        await trio.to_thread.run_sync(invalidator.stop)
        pyfuse3.terminate()
        await trio.sleep(STOP_GRACE)  # fuse_main cancels this once the loop has ended
        level = logging.WARNING if answered else logging.INFO
        log.log(level, "requests still unanswered %g s after the stop: given up", STOP_GRACE)
        nursery.cancel_scope.cancel()

    async def on_signal(nursery) -> None:
        with trio.open_signal_receiver(*_UNMOUNT_SIGNALS) as signals:
            signal.pthread_sigmask(signal.SIG_SETMASK, held)  # one that came meanwhile arrives now
            if early:
                stopped_by.append(signal.Signals(early[0]).name)
                log.info("%s: unmounting", stopped_by[0])
                nursery.start_soon(stop_serving, nursery)
            # received until the loop ends: a second signal must not kill a daemon that is unmounting
            async for signum in signals:
                name = signal.Signals(signum).name
                log.info("%s: %s", name, "unmounting" if not stopped_by else "already unmounting")
                stopped_by.append(name)
                nursery.start_soon(stop_serving, nursery)

    # the first GETATTR the loop answers (whoever asked: the probe, a user's ls) says the mount answers
    asked = trio.Event()
    getattr_of_class = ops.getattr

    async def first_getattr(*args):
        answer = False
        try:
            result = await getattr_of_class(*args)
            answer = True
            return result
        except pyfuse3.FUSEError:  # an answer too (not so a cancellation)
            answer = True
            raise
        finally:
            if answer:
                asked.set()
                ops.__dict__.pop("getattr", None)  # the class's own from now on

    setattr(ops, "getattr", first_getattr)  # noqa: B010 - an instance attribute, for this one request

    # the kernel's FUSE_INIT, which libfuse answers on the loop (pyfuse3 calls Operations.init): on a
    # handed-over /dev/fuse the kernel sent it when mount.fuse3 mounted, so the loop answers once it came
    initialized = trio.Event()
    init_of_class = ops.init

    def first_init() -> None:
        initialized.set()
        init_of_class()

    setattr(ops, "init", first_init)  # noqa: B010 - an instance attribute, for the one FUSE_INIT

    async def answering() -> int:
        """Wait until the mount answers; its device number. The mount point is looked at from a child
        process, never from a thread of this one (:mod:`.mount_probe`); a request from anyone else that
        comes first says it as well (the device is then the mount table's). On a handed-over
        ``/dev/fuse`` (``/dev/fd/N``), the answer to FUSE_INIT says it, and the device is unknown: 0."""
        if handed_over:
            await initialized.wait()
            return 0
        parent = os.stat(os.path.dirname(mountpoint) or "/").st_dev
        known = os.makedev(*map(int, device.split(":"))) if device is not None else None
        found: list[int] = []
        async with trio.open_nursery() as looking:

            async def by_probe() -> None:
                while True:
                    dev = await probe.stat()
                    if dev != parent:
                        found.append(dev)
                        looking.cancel_scope.cancel()
                        return
                    await trio.sleep(0.01)

            async def by_request() -> None:
                await asked.wait()
                if known is not None:
                    found.append(known)
                    looking.cancel_scope.cancel()

            looking.start_soon(by_probe)
            looking.start_soon(by_request)
        return found[0]

    async def main() -> None:
        nonlocal answered, too_slow
        async with trio.open_nursery() as nursery:
            nursery.start_soon(fuse_main, nursery)
            nursery.start_soon(on_signal, nursery)
            nursery.start_soon(poll_forever, tree, POLL_INTERVAL, watcher)
            dev = None
            with trio.move_on_after(ANSWER_TIMEOUT):
                dev = await answering()
            if dev is None:
                too_slow = True
                nursery.start_soon(stop_serving, nursery)
                return
            if not handed_over:
                probe.release()  # its child ends
                nursery.start_soon(probe.collect)
            starting.restore(replay=True)
            answered = True
            if dev:
                larger_reads(dev)
            mode = "read-only" if not rw else "read-write, cleaning" if cleaner else "read-write, not cleaning"
            log.info("mounted %s on %s (%s)", logdir, mountpoint, mode)
            if handed_over:
                log.info("%s: mounted by mount.fuse3; unmount it with `umount`: this daemon cannot", mountpoint)
            if cleaner is not None:
                cleaner.start()
            on_ready()
            sd_notify("READY=1")

    error: BaseException | None = None
    first = realtime_loop and loop_first()
    try:
        trio.run(with_reads_woken, main)  # the loop never waits long for a request that left (.daemon)
    except Exception as exc:  # trio wraps what its tasks raise in an ExceptionGroup: said in one line
        failed = True
        error = exc
    finally:
        if first:
            loop_as_others()  # the stop (the layouts saved, the logs closed) takes its turn with the rest
        said = starting.restore(replay=answered and error is None)
        sd_notify("STOPPING=1")
        if cleaner is not None:
            cleaner.stop()  # before the logs close: a compaction in progress is abandoned
        if watcher is not None:
            watcher.stop()
        invalidator.stop()
        ops.workers.stop()
        try:
            pyfuse3.close(unmount=True)  # closes /dev/fuse (the kernel fails what is unanswered), lazy unmount
        finally:
            probe.reap()
            _clear_dead_mount(mountpoint, device)
            try:
                with doing("close {path} at the unmount", logdir):  # checkpoints, marker: not "cannot mount"
                    tree.close()
            finally:
                _restore_signals(previous, held)
    if handed_over and stopped_by:
        log.warning("%s: stopped by %s; the mount mount.fuse3 made is left dead (this daemon has no privilege "
                    "to unmount it): unmount it first with `umount`, or clear it with `umount -l`",
                    mountpoint, stopped_by[0])
    if not answered and stopped_by and not too_slow and error is None and not failed:
        log.info("stopped by %s before the mount answered", stopped_by[0])
        return 0
    if not answered and handed_over and failed and not initialized.is_set():  # no FUSE_INIT could be read
        raise MountError(
            f"{mountpoint}: FUSE could not serve it: that /dev/fuse is not mounted (a /dev/fd/N mount point "
            "is the /dev/fuse that mount.fuse3 -o drop_privileges mounted)"
        )
    if not answered:  # libfuse refused (e.g. -o max_read=...), the session died, or it never answered
        error = error or MountError("the FUSE session ended before the mount answered")
        slow = [f"the mount did not answer within {ANSWER_TIMEOUT:g} s"] if too_slow else []
        raise _start_error(mountpoint, slow or said, error)
    if error is not None:  # it served, then a task failed: one line in the log
        log.error("the mount stopped: %r", first_exception(error))
    return 1 if failed else 0


#: The requests of pyfuse3's ``Operations`` that the kernel waits an answer for (``forget`` has none).
_REQUESTS = (
    "lookup", "getattr", "setattr", "readlink", "mknod", "mkdir", "unlink", "rmdir", "symlink", "rename", "link",
    "open", "read", "write", "flush", "release", "fsync", "poll", "opendir", "readdir", "releasedir", "fsyncdir",
    "statfs", "setxattr", "getxattr", "listxattr", "removexattr", "access", "create",
)


def _refuse_every_request(ops: object) -> None:
    """From now on every request to ``ops`` is answered ENOTCONN at once (the mount is going away)."""
    import pyfuse3

    async def refused(*_args: object) -> None:
        raise pyfuse3.FUSEError(errno.ENOTCONN)

    for name in _REQUESTS:
        setattr(ops, name, refused)


def _restore_signals(previous: dict, held: set) -> None:
    """The signal handlers and mask as they were before :func:`serve` (in the thread that called it)."""
    for signum, handler in previous.items():
        signal.signal(signum, handler)
    signal.pthread_sigmask(signal.SIG_SETMASK, held)


def _clear_dead_mount(mountpoint: str, device: str | None) -> None:
    """Unmount (lazily) this daemon's mount if it is still there once the daemon let go of it: the
    unmount at close is skipped when the connection was aborted (``umount -f``, fusectl's abort)."""
    if device is None or mounted_device(mountpoint) != device:
        return
    log.warning("%s: the mount was still there after the daemon let go of it: unmounting it lazily", mountpoint)
    try:
        subprocess.run(["fusermount3", "-uz", mountpoint], capture_output=True, timeout=30, check=False)
    except (OSError, subprocess.SubprocessError) as exc:
        log.warning("%s: could not unmount it: %s (clear it with `fusermount3 -uz %s`)", mountpoint, exc, mountpoint)


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


#: The FUSE loop thread's real-time priority (SCHED_RR; 1 is the lowest) where the daemon may take one.
LOOP_PRIORITY = 1
#: The ``-o`` word that asks for :func:`loop_first` (off by default: on a quiet machine it gained nothing,
#: and beside a busy broker it would take cores before the broker's threads).
REALTIME_LOOP = "realtime_loop"


def loop_first() -> bool:
    """Have the calling thread, the FUSE loop's, run before the daemon's other threads whenever it has a
    request to answer: real-time priority :data:`LOOP_PRIORITY` (``SCHED_RR``), where the process may
    (root, or ``RLIMIT_RTPRIO`` as systemd's ``LimitRTPRIO=`` gives; anyone else keeps the default,
    quietly). True when set. Every thread and process it starts from then on runs at the normal policy
    (``SCHED_RESET_ON_FORK``): the threads that render ahead and the workers stay as they were.

    Why: the loop answers every request in turn, and a first ``cat MNT/*/records.jsonl`` keeps both
    cores busy with the render threads and the reader, so the loop waited for a core 0.5-0.8 s of a
    1.5-1.8 s read (its run-queue wait), the reader waiting with it. The kernel throttles real-time
    threads (95% of a core at most by default), and the loop sleeps in the kernel between requests.
    A nice value instead (-20 for the loop alone) was slower than none (issue 25). Asked for with
    ``-o realtime_loop`` (:data:`REALTIME_LOOP`) only: the gain was measured on a machine loaded by other
    processes (1.31 vs 2.24 s), which it preempted; on a quiet one the same first read took 1.90 s with it
    and 1.82 s without (bench/many.py --only read --repeat 5, same run)."""
    try:
        os.sched_setscheduler(0, os.SCHED_RR | os.SCHED_RESET_ON_FORK, os.sched_param(LOOP_PRIORITY))
        return True
    except (OSError, AttributeError) as exc:  # EPERM: not allowed; AttributeError: no such call here
        log.debug("the FUSE loop keeps the normal scheduling policy: %s", exc)
        return False


def loop_as_others() -> None:
    """The calling thread back to the normal scheduling policy (after :func:`loop_first`)."""
    try:
        os.sched_setscheduler(0, os.SCHED_OTHER, os.sched_param(0))
    except OSError as exc:
        log.debug("the FUSE loop keeps its scheduling policy: %s", exc)


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


def daemon_log_file(cache_dir: str | None, logdir: str, mountpoint: str) -> tuple[str | None, str | None]:
    """Where a detached daemon logs when there is no syslog (review23 R23-11: its warnings were lost):
    ``(path, None)``, the file ``logs/<mount point>.log`` of the cache folder (the default one when the
    cache is off), made here so that a folder that cannot be written is said before detaching;
    ``(None, None)`` when syslog is there; ``(None, why)`` when the file cannot be had."""
    if syslog_here():
        return None, None
    base = cache_dir or str(default_cache_dir())
    try:
        folder = check_outside(base, logdir) / "logs"
    except InvalidInput:
        return None, f"its log file cannot be in {base}, inside the log directory"
    path = str(folder / log_file_name(mountpoint))
    try:
        open_log_file(path)
    except OSError as exc:
        return None, f"its log file cannot be written: {describe_os_error(exc)}"
    return path, None


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
    # paths are the user's, from the folder they are in: the daemon leaves it (review16 R16-5)
    cache_dir = os.path.abspath(cache_dir) if cache_dir else cache_dir  # "" (no cache) stays ""
    schemas = os.path.abspath(schemas) if schemas is not None else None
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
    for line in take_failure_notes_of(logdir):  # the last --rw mount's failed close, if nobody said it
        print(line, file=sys.stderr)

    def run(ready: Callable[[], None]) -> int:
        stop_dumps = stacks_on_request()  # kill -USR1: every thread's stack on stderr (a hang made diagnosable)
        # a failed stop is noted for `kafkafs umount` (review23 R23-7) or the next verify/recover/mount:
        # detached or not (-f is the systemd unit's way, stopped by SIGTERM: review27 R27-3)
        noted = rw
        answered = False

        def on_ready() -> None:
            nonlocal answered
            answered = True
            ready()

        if noted:
            take_failure_note(os.getpid())  # an earlier process's, under the same pid
        try:
            return serve(
                logdir, mountpoint, rw=rw, values=values, settings=settings, options=options, on_ready=on_ready,
                cache_dir=cache_dir, list_limit=list_limit, schemas=schemas, clean=clean,
            )
        except BaseException as exc:
            if noted and answered:
                leave_failure_note(ending_line(exc), logdir)
            raise
        finally:
            stop_dumps()

    if foreground:
        return run(lambda: None)
    log_file, lost = daemon_log_file(cache_dir, logdir, mountpoint)
    code = daemonize(run, debug, log_file)
    if log_file is not None:
        print(f"kafkafs: no syslog here: this mount's log (warnings, errors) is {log_file}", file=sys.stderr)
    elif lost is not None:
        print(f"kafkafs: no syslog here, and {lost}: this mount's warnings and errors are lost "
              "(mount with -f to see them)", file=sys.stderr)
    return code


if __name__ == "__main__":  # the command line is the CLI's: say so rather than exit quietly
    print("kafkafs: error: run `kafkafs mount LOGDIR MOUNTPOINT` (or `python -m kafkafs mount ...`)", file=sys.stderr)
    sys.exit(2)
