"""AppendBuffer: the ``append`` file's lines in, records out (SPEC §3), without a kernel."""

from __future__ import annotations

import contextlib

import pytest

from kafkafs.errors import InvalidInput
from kafkafs.storage.logdir import LogDir

from ..conftest import tree_of


def _pieces(data: bytes, size: int = 1048528) -> list[bytes]:
    """``data`` as the kernel hands one large ``write()`` to the file system (``max_write`` bytes)."""
    return [data[i : i + size] for i in range(0, len(data), size)]


@pytest.mark.parametrize("now", [False, True])
def test_append_buffer_alone(logdir_copy, now):
    """The same rules whether a write may wait (a worker's) or must not (the FUSE loop's write_now, which
    appends as write does when nothing else holds the file or the log)."""
    from kafkafs.fs.tree.append import AppendBuffer

    with LogDir(logdir_copy, writable=True) as d:
        log = d.log("empty-0")
        buf = AppendBuffer(log)
        if now:
            buf.write = buf.write_now
        assert buf.write(b"no newline yet") is None
        with pytest.raises(InvalidInput):
            buf.write(b'\n{"nope": 1}\n')  # an unknown field: the whole write fails
        assert log.log_end_offset == 0 and buf.pending == b""  # ... and the line it ended went too
        with pytest.raises(InvalidInput):
            buf.write(b'\n{"nope": 1}\n')  # the same write again (a retry) fails the same way
        result = buf.write(b"first\n")
        assert (result.first_offset, result.last_offset) == (0, 0)
        buf.write(b"a\n")
        with pytest.raises(InvalidInput):
            buf.write(b"{bad\nc")  # not in the middle of a line: as if it never happened
        buf.write(b"b")
        with pytest.raises(InvalidInput):
            buf.write(b"\n{bad\n")  # in the middle of the line "b": "b" goes too
        buf.write(b"d")
        buf.flush()
        assert [r.value for r in log.records()] == [b"first", b"a", b"d"]
        assert log.recovery_point == log.log_end_offset


def test_append_buffer_refuses_kafkas_internal_topics(logdir_copy):
    # a raw line in __cluster_metadata is a record no broker can replay; a broker refuses client writes
    from kafkafs.errors import InternalTopicRefused
    from kafkafs.fs.tree.append import AppendBuffer

    with LogDir(logdir_copy, writable=True) as d:
        for topic in ("__cluster_metadata", "__consumer_offsets"):
            log = d.create_partition(topic, 0)
            buf = AppendBuffer(log)
            for data in (b"hello\n", b"partial"):
                with pytest.raises(InternalTopicRefused, match=topic):
                    buf.write(data)
            buf.flush()
            assert log.log_end_offset == 0 and buf.pending == b""


def test_a_line_too_large_is_dropped_whole(logdir_copy):
    """A 2,000,000-byte line comes in pieces; the last one fails (the record is too large). Nothing of
    it may be appended: not at close, not when the writer retries the failed piece."""
    from kafkafs.errors import RecordTooLargeError
    from kafkafs.fs.tree.append import AppendBuffer
    from kafkafs.storage.config import Settings

    settings = Settings({"max.message.bytes": 1_500_000})  # the first piece alone would fit
    with LogDir(logdir_copy, settings, writable=True) as d:
        log = d.log("empty-0")
        buf = AppendBuffer(log)
        first, rest = _pieces(b"x" * 2_000_000 + b"\n")
        assert buf.write(first) is None
        with pytest.raises(RecordTooLargeError):
            buf.write(rest)
        with pytest.raises(RecordTooLargeError):
            buf.write(rest)  # stdio / Python retry the rest of a short write: the same piece again
        buf.flush()
        assert log.log_end_offset == 0
        # a line that grows past any record it could be fails as soon as it does, and its rest too
        pieces = _pieces(b"y" * 3_000_000 + b"\nnext\n")
        assert buf.write(pieces[0]) is None
        with pytest.raises(RecordTooLargeError):
            buf.write(pieces[1])
        assert buf.pending == b""
        with pytest.raises(RecordTooLargeError):
            buf.write(pieces[2])  # the rest of the dropped line, with its newline: the write fails
        buf.write(b"after\n")
        buf.flush()
        assert [r.value for r in log.records()] == [b"after"]
        # a record too large among good lines: the whole write fails
        with pytest.raises(RecordTooLargeError):
            buf.write(b"ok\n" + b"z" * 1_600_000 + b"\n")
        assert log.log_end_offset == 1


@pytest.mark.parametrize("now", [False, True])
def test_a_write_that_begins_a_line_too_long_fails_whole(logdir_copy, now):
    """R15-1: the first 1 MiB request of ``small\\n`` + a 1.1 MB line already holds more of that line than
    a record of max.message.bytes can: the request fails whole, ``small`` is not appended (nor the line
    that request ended), and the writer's retry fails the same way; the next write starts afresh."""
    from kafkafs.errors import RecordTooLargeError
    from kafkafs.fs.tree.append import AppendBuffer

    with LogDir(logdir_copy, writable=True) as d:
        log = d.log("empty-0")
        buf = AppendBuffer(log)
        if now:
            buf.write = buf.write_now
        buf.write(b"begun ")
        first, rest = _pieces(b"ended\nsmall\n" + b"x" * 1_100_000 + b"\n", 1024 * 1024)
        with pytest.raises(RecordTooLargeError):
            buf.write(first)
        with pytest.raises(RecordTooLargeError):
            buf.write(first + rest)  # the retry
        assert log.log_end_offset == 0 and buf.pending == b""
        buf.write(b"after\n")
        assert [r.value for r in log.records()] == [b"after"]


def test_a_large_write_of_small_lines_is_appended(logdir_copy):
    """Lines that one batch of max.message.bytes cannot hold go in several, appended as one."""
    from kafkafs.fs.tree.append import AppendBuffer

    with LogDir(logdir_copy, writable=True) as d:
        log = d.log("empty-0")
        buf = AppendBuffer(log)
        lines = [b"line %07d" % i for i in range(80_000)]  # 1 MB of text, 1.6 MB as records
        data = b"\n".join(lines) + b"\n"
        for piece in _pieces(data):
            buf.write(piece)
        buf.flush()
        assert [r.value for r in log.records()] == lines
        batches = list(log.batches())
        assert len(batches) > 1 and all(view.size <= log.config.max_message_bytes for _s, view in batches)


def test_fsync_keeps_a_partial_line(logdir_copy):
    """fsync makes the complete lines durable; the partial one waits for its newline (or close)."""
    t = tree_of(logdir_copy, rw=True)
    try:
        log = t.partitions.state("events-3").log
        handle = t.resolve("events-3/append").open(True)
        handle.write(0, b"one\nab")
        handle.fsync()
        assert log.recovery_point == log.log_end_offset == 6
        handle.write(0, b"c")
        handle.fsync()
        handle.write(0, b"def\ntail")
        handle.fsync()
        assert log.log_end_offset == 7
        handle.flush()
        handle.release()
        assert [r.value for r in log.records(5)] == [b"one", b"abcdef", b"tail"]
    finally:
        t.close()


def test_write_now_waits_for_nobody(logdir_copy):
    """write_now appends nothing and changes nothing (WouldWait) while another thread holds the log's
    writer lock or this file's lock (a worker's write, fsync or close), or when the append would fsync
    (flush.messages); write then does the same write in full. The FUSE loop must never wait on a lock."""
    import threading

    from kafkafs.fs.tree.append import AppendBuffer, WouldWait
    from kafkafs.storage.config import Settings

    def held(lock_cm):  # hold ``lock_cm`` in another thread until released
        got, release = threading.Event(), threading.Event()

        def hold():
            with lock_cm:
                got.set()
                release.wait(10)

        thread = threading.Thread(target=hold)
        thread.start()
        got.wait(10)
        return release, thread

    with LogDir(logdir_copy, writable=True) as d:
        log = d.log("empty-0")
        buf = AppendBuffer(log)
        assert buf.write_now(b"a\nb") is not None and buf.pending == b"b"
        for lock_cm in (log.appending_now(1), buf._lock):
            release, thread = held(lock_cm)
            try:
                for data in (b"c\nd", b"no newline", b"\n{bad\n"):
                    with pytest.raises(WouldWait):
                        buf.write_now(data)
                    assert buf.pending == b"b" and log.log_end_offset == 1
            finally:
                release.set()
                thread.join()
        assert buf.write_now(b"c\nd").last_offset == 1 and buf.pending == b"d"
        buf.flush()
        assert [r.value for r in log.records()] == [b"a", b"bc", b"d"]

    with LogDir(logdir_copy, Settings({"flush.messages": 1}), writable=True) as d:
        log = d.log("empty-0")
        buf = AppendBuffer(log)
        with pytest.raises(WouldWait):
            buf.write_now(b"e\n")  # it would fsync: a worker's write does it
        assert log.log_end_offset == 3
        assert buf.write(b"e\n").durable and log.recovery_point == 4


class _Loop:
    """A stand-in for handles.LARGE_WRITES: large writes on the loop or not."""

    def __init__(self, on_loop: bool) -> None:
        self.on_loop = lambda: on_loop
        self.timed = contextlib.nullcontext


def test_the_append_handle_writes_on_the_loop_when_small(logdir_copy, monkeypatch):
    """AppendHandle.write_now: a small write is appended there (and the kernel told of it, as write
    does); a large one while the loop's thread loses the CPU, or one that would wait, is left to a worker
    (None, nothing done); a large one while it gets the CPU is appended there too."""
    from kafkafs.fs.tree import handles

    monkeypatch.setattr(handles, "LARGE_WRITES", _Loop(on_loop=False))

    t = tree_of(logdir_copy, rw=True)
    told = []
    t.partitions.add_append_listener(lambda state, since: told.append(state.name))
    try:
        log = t.partitions.state("events-3").log
        end = log.log_end_offset
        handle = t.resolve("events-3/append").open(True)
        assert handle.write_now(0, b"one\ntw") == 6 and told == ["events-3"]
        assert log.log_end_offset == end + 1
        monkeypatch.setattr(handles, "WRITE_NOW_MAX", 4)
        assert handle.write_now(0, b"o\nthree\n") is None and log.log_end_offset == end + 1
        monkeypatch.setattr(handles, "LARGE_WRITES", _Loop(on_loop=True))
        assert handle.write_now(0, b"o\nthree\n") == 8 and log.log_end_offset == end + 3
        monkeypatch.setattr(handles, "LARGE_WRITES", _Loop(on_loop=False))
        monkeypatch.setattr(handles, "WRITE_NOW_MAX", 64 * 1024)
        with log.appending_now(1):  # this thread holds it: another thread would wait
            import threading

            out = []
            thread = threading.Thread(target=lambda: out.append(handle.write_now(0, b"o\n")))
            thread.start()
            thread.join()
        assert out == [None] and log.log_end_offset == end + 3 and told == ["events-3"] * 2
        # a large write that would wait is left to a worker and not counted as a write on the loop
        from kafkafs.fs.tree.contention import Contention

        loop = Contention(thread_clock=lambda: 0.0)  # any write it counts "waited" its whole time
        monkeypatch.setattr(handles, "LARGE_WRITES", loop)
        monkeypatch.setattr(handles, "WRITE_NOW_MAX", 1)
        with log.appending_now(1):
            out = []
            thread = threading.Thread(target=lambda: out.append(handle.write_now(0, b"o\n")))
            thread.start()
            thread.join()
        assert out == [None] and loop.waited == 0.0 and log.log_end_offset == end + 3
        monkeypatch.setattr(handles, "WRITE_NOW_MAX", 64 * 1024)
        assert handle.write(0, b"o\n") == 2 and log.log_end_offset == end + 4
        handle.flush()
        handle.release()
        assert [r.value for r in log.records(end)] == [b"one", b"two", b"three", b"o"]
    finally:
        t.close()


def test_a_shared_close_keeps_the_partial_line_for_the_last_close(logdir_copy):
    """R21-7: a close while another descriptor of the open file remains (a child's copy) makes the records
    durable and leaves the partial line, also one that is not a record yet, for the next write; the last
    close appends it, or release when a close took another descriptor for a holder."""
    from kafkafs.fs.tree.append import AppendBuffer

    with LogDir(logdir_copy, writable=True) as d:
        log = d.log("empty-0")
        buf = AppendBuffer(log)
        asked = []

        def shared(answer: bool):
            return lambda: asked.append(answer) or answer

        buf.write(b"done\n")
        buf.flush(shared(True))  # nothing pending: not asked
        assert asked == [] and log.recovery_point == 1
        buf.write(b'{"key":"k","value":"')
        buf.flush(shared(True))  # a child's copy: the half object waits, no error
        assert buf.pending == b'{"key":"k","value":"' and log.log_end_offset == 1
        buf.write(b'x"}\nCCC')
        buf.flush(shared(True))
        assert asked == [True, True] and buf.pending == b"CCC"
        buf.write(b"333")
        buf.flush(shared(False))  # the last close
        assert buf.pending == b"" and buf.release() is False
        buf.write(b"left")
        buf.flush(shared(True))
        assert buf.release() is True and log.recovery_point == log.log_end_offset
        assert [(r.key, r.value) for r in log.records()] == [
            (None, b"done"), (b"k", b"x"), (None, b"CCC333"), (None, b"left")
        ]
        buf.write(b'{"half')
        with pytest.raises(InvalidInput):
            buf.flush(shared(False))  # the last close says it; nothing appended
        assert buf.pending == b"" and log.log_end_offset == 4
