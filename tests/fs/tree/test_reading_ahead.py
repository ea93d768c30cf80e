"""Reading partitions in order (``cat MOUNT/*/records.jsonl``): a reader near the end of one file has the
partition it reads next opened and that file's start rendered for its open (Partitions.reading_to_end,
RecordsStream.prepare), in the order the reader follows (by name, as a shell's glob, or by number),
bounded, on read-only mounts only; a damaged start is left to the reader's read."""

from __future__ import annotations

import contextlib
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from kafkafs.errors import CorruptRecordError
from kafkafs.fs.tree import handles
from kafkafs.fs.tree import partitions as partitions_module
from kafkafs.fs.tree.handles import RecordsHandle
from kafkafs.fs.tree.partition_nodes import RecordsFile
from kafkafs.fs.tree.root import Tree
from kafkafs.fs.views import layout as layout_module
from kafkafs.fs.views import reading
from kafkafs.storage.config import Settings
from kafkafs.storage.logdir import LogDir

from ..conftest import SMALL_SEGMENTS, expected_jsonl, sample_records, tree_of

NAMES = ("t-0", "t-1", "t-2", "t-3", "t-10")  # by name: t-0 t-1 t-10 t-2 t-3


def build(path: Path, records: int = 60) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    with LogDir(path, SMALL_SEGMENTS, writable=True) as logdir:
        for name in NAMES:
            log = logdir.create_partition("t", int(name[2:]))
            for start in range(0, records, 10):
                log.append_records(sample_records(start, 10, seed=int(name[2:])))
    return path


@pytest.fixture(scope="module")
def ordered_logdir(tmp_path_factory) -> Path:
    return build(tmp_path_factory.mktemp("ordered") / "logs")


def settled(partitions) -> None:
    """Wait until the thread that opens partitions ahead has done what it was asked."""
    deadline = time.monotonic() + 10
    while partitions._ahead_asked:
        assert time.monotonic() < deadline
        time.sleep(0.005)


def opened(partitions) -> set[str]:
    return {name for name in NAMES if partitions.open_state(name) is not None}


def spare_of(partitions, name: str):
    return partitions.records_generations(name).current()._spare


def opened_now(node):
    """``node.open_now()`` after its lookup, as the kernel opens it: the lookup's reply gave the kernel its
    size (a read on the FUSE loop stays within the size the kernel holds: RecordsHandle.read_now)."""
    node.attr()
    return node.open_now()


@contextlib.contextmanager
def past_t0(logdir: Path) -> Iterator[Tree]:
    """A read-only tree of ``logdir`` whose reader came near the end of t-0, and what that starts done
    (:func:`settled`); closed at the end."""
    tree = tree_of(logdir)
    try:
        tree.partitions.reading_to_end("t-0")
        settled(tree.partitions)
        yield tree
    finally:
        tree.close()


def test_the_next_partition_is_opened_with_its_start_rendered_and_its_open_takes_it(ordered_logdir):
    with past_t0(ordered_logdir) as tree:
        partitions = tree.partitions
        assert opened(partitions) == {"t-1"}  # by name and by number alike
        node = tree.resolve("t-1/records.jsonl")
        assert isinstance(node, RecordsFile)
        handle = opened_now(node)  # the partition is open: no worker needed
        assert isinstance(handle, RecordsHandle) and spare_of(partitions, "t-1") is None  # taken
        want = expected_jsonl(ordered_logdir, "t-1")
        deadline = time.monotonic() + 10
        while (got := handle.read_now(0, len(want))) is None:  # the spans after the first render on prefill threads
            assert time.monotonic() < deadline
            time.sleep(0.005)
        assert bytes(got) == want
        first = handle.cache.get((handle.stream.view.parts[0].layout, 0))
        assert first is not None  # rendered before the open, in the cache the open took
        handle.release()


def test_a_file_opened_already_is_not_prepared_again(ordered_logdir):
    """A reader faster than the thread that prepares: the file it opened (the spare taken, no read yet) is
    not rendered whole again for no open when that thread comes to it once more (it was: 13 of 200 files
    of a first cat MOUNT/*/records.jsonl rendered twice, 75 MB)."""
    with past_t0(ordered_logdir) as tree:
        partitions = tree.partitions
        assert spare_of(partitions, "t-1") is not None
        handle = opened_now(tree.resolve("t-1/records.jsonl"))
        assert isinstance(handle, RecordsHandle) and spare_of(partitions, "t-1") is None  # taken by the open
        partitions.reading_to_end("t-0")  # the thread behind the reader, asked for what follows t-0 again
        settled(partitions)
        assert spare_of(partitions, "t-1") is None  # nothing rendered for an open that already happened
        handle.release()


def test_the_order_followed_is_learnt_by_name_or_by_number(ordered_logdir, monkeypatch):
    monkeypatch.setattr(partitions_module, "PREPARED_AHEAD", 1)  # the next file only: which one it is
    for read, by_number in ((("t-0", "t-1", "t-2"), True), (("t-0", "t-1", "t-10"), False)):
        tree = tree_of(ordered_logdir)
        partitions = tree.partitions
        try:
            partitions.reading_to_end(read[0])
            settled(partitions)
            partitions.reading_to_end(read[1])  # t-0 then t-1: either order; both next ones
            settled(partitions)
            assert opened(partitions) == {"t-1", "t-2", "t-10"}
            partitions.reading_to_end(read[2])
            settled(partitions)
            # after t-2 by number: t-3; after t-10 by name: t-2 (open already), not t-3 (by number: none)
            assert ("t-3" in opened(partitions)) == by_number
        finally:
            tree.close()


def test_while_the_order_is_unknown_the_file_after_the_next_by_name_is_prepared_too(tmp_path):
    """t-0 then t-1 read: next comes t-10 by name (a shell's glob: t-0 t-1 t-10 t-11 t-2) or t-2 by number;
    both are prepared, and t-11 too, the file after t-10 by name (issue 25: in a glob's ``cat`` of 200
    partitions, t-100 was prepared only as t-10 was read, one file ahead of the reader)."""
    logdir = built_in_order(tmp_path / "logs", names=("t-0", "t-1", "t-2", "t-10", "t-11"))
    tree = tree_of(logdir)
    partitions = tree.partitions
    try:
        partitions.reading_to_end("t-0")
        settled(partitions)
        partitions.reading_to_end("t-1")
        settled(partitions)
        for name in ("t-10", "t-2", "t-11"):
            assert partitions.open_state(name) is not None and spare_of(partitions, name) is not None, name
    finally:
        tree.close()


def test_spares_are_bounded_and_dropped_at_close(ordered_logdir, monkeypatch):
    monkeypatch.setattr(partitions_module, "SPARES_KEPT", 2)
    with past_t0(ordered_logdir) as tree:
        partitions = tree.partitions
        assert spare_of(partitions, "t-1") is not None
        partitions.reading_to_end("t-1")  # t-10 and t-2 prepared: t-1's spare (the oldest) goes
        settled(partitions)
        assert spare_of(partitions, "t-1") is None
        assert spare_of(partitions, "t-10") is not None and spare_of(partitions, "t-2") is not None
        kept = [partitions.records_generations(n).current() for n in ("t-10", "t-2")]
    assert all(stream._spare is None for stream in kept)
    assert partitions._ahead is None


def test_a_second_partition_opened_has_the_topics_others_opened_in_the_background(ordered_logdir):
    """``cat MOUNT/*/records.jsonl``: the reader's second file of a topic has the topic's other partitions
    opened, each with the records.jsonl stream its open takes, on a sizing thread (issue 25: opened one at
    a time between the renders of the files before, the same opens cost 3-5 times their CPU and the FUSE
    loop its GIL; a first cat of 200 partitions 0.81-0.86x per pair with this); the first alone (one
    file read) opens nothing more, nor does the same one again."""
    tree = tree_of(ordered_logdir)
    try:
        partitions = tree.partitions
        first = tree.resolve("t-2/records.jsonl").open(False)
        again = tree.resolve("t-2/records.jsonl").open(False)
        assert partitions._sizer is None and opened(partitions) == {"t-2"}
        second = tree.resolve("t-0/records.jsonl").open(False)
        deadline = time.monotonic() + 10
        while opened(partitions) != set(NAMES) or set(partitions._generations) != set(NAMES):
            assert time.monotonic() < deadline, (opened(partitions), set(partitions._generations))
            time.sleep(0.005)
        streams = {name: partitions.records_generations(name).current() for name in NAMES}
        assert all(stream.view is not None for stream in streams.values())  # composed: the open takes it as it is
        for handle in (first, again, second):
            handle.release()
    finally:
        tree.close()


def test_a_writable_mount_opens_no_partition_for_a_reader_of_two(tmp_path):
    logdir = build(tmp_path / "logs", records=20)
    tree = tree_of(logdir, rw=True)
    try:
        for name in ("t-0", "t-1"):
            tree.resolve(f"{name}/records.jsonl").open(False).release()
        assert tree.partitions._sizer is None and opened(tree.partitions) == {"t-0", "t-1"}
    finally:
        tree.close()


def test_a_writable_mount_sizes_no_partition_nobody_asked_for(tmp_path):
    """review27 R27-1: a stat of one partition's records.jsonl on a --rw mount opened every partition of
    its topic in the background (300 partitions: 917 descriptors, 600 index files rewritten): a writable
    open recovers a partition, which nobody asked for. A read-only mount still sizes them ahead."""
    logdir = build(tmp_path / "logs", records=20)
    tree = tree_of(logdir, rw=True)
    try:
        tree.resolve("t-0/records.jsonl").attr()
        assert tree.partitions._sizer is None and opened(tree.partitions) == {"t-0"}
    finally:
        tree.close()


def test_a_writable_mount_opens_nothing_ahead(tmp_path):
    logdir = build(tmp_path / "logs", records=20)
    tree = tree_of(logdir, rw=True)
    try:
        tree.partitions.reading_to_end("t-0")
        assert tree.partitions._ahead is None and opened(tree.partitions) == set()
    finally:
        tree.close()


def test_a_handle_says_once_when_a_read_comes_near_the_end(ordered_logdir, monkeypatch):
    monkeypatch.setattr(handles, "NEAR_END", 1000)
    tree = tree_of(ordered_logdir)
    try:
        stream = tree.partitions.records_generations("t-3").current()
        told: list[int] = []
        handle = RecordsHandle(stream, lambda: told.append(1))
        total = stream.view.total
        assert total > 3000
        handle.read(0, 1000)
        assert told == []
        handle.read(1000, total - 1500)  # ends 500 bytes before the end
        assert told == [1]
        handle.read(total - 500, 4096)
        assert told == [1]
        handle.release()
    finally:
        tree.close()


def test_a_damaged_start_is_left_to_the_reader(tmp_path, caplog):
    """The damaged first batch of the partition opened ahead: nothing of it is rendered ahead; the
    reader's read of it is EIO (CorruptRecordError), the rest of the file reads, the damage is said once."""
    from kafkafs.format.batch import scan_batches

    logdir = build(tmp_path / "logs")
    segment = sorted((logdir / "t-1").glob("*.log"))[0]
    data = bytearray(segment.read_bytes())
    first = next(iter(scan_batches(data)))
    data[first.position + 70] ^= 0xFF  # inside the first batch's records: its CRC fails
    segment.write_bytes(bytes(data))
    with past_t0(logdir) as tree:
        partitions = tree.partitions
        assert "t-1" in opened(partitions)
        node = tree.resolve("t-1/records.jsonl")
        handle = node.open(False)
        size = node.attr().size
        with pytest.raises(CorruptRecordError):
            handle.read(0, 100)
        want = expected_jsonl(logdir, "t-1", lo=first.last_offset + 1)
        assert bytes(handle.read(size - len(want), len(want))) == want  # the rest stays readable
        handle.release()
        said = [r for r in caplog.records if segment.name in r.getMessage()]
        assert len(said) == 1  # said once (when the partition was laid out), as a stat would


# ---------------------------------------------------------------------------------------------- whole files ahead


def small_pieces(monkeypatch) -> None:
    """Pieces of ~1 KiB and runs of a few of them, laid out afresh: a segment of many pieces."""
    monkeypatch.setattr(layout_module, "GROUP_BYTES", 1024)
    monkeypatch.setattr(reading, "READ_AHEAD_BYTES", 4 * 1024)


def built_in_order(path: Path, names=("t-0", "t-1", "t-2", "t-3")) -> Path:
    """One segment a partition, of 40 batches."""
    path.mkdir(parents=True, exist_ok=True)
    with LogDir(path, Settings({"segment.bytes": 1 << 20}), writable=True) as logdir:
        for name in names:
            log = logdir.create_partition("t", int(name[2:]))
            for start in range(0, 200, 5):
                log.append_records(sample_records(start, 5, seed=int(name[2:])))
    return path


def rendered(cache) -> None:
    """Wait until no render of ``cache`` is going on (prefill threads included)."""
    deadline = time.monotonic() + 10
    while cache._claimed:
        assert time.monotonic() < deadline
        time.sleep(0.005)


def rendered_ahead(partitions, name: str):
    """The spare of ``name`` once its render ahead is done, and the layout of its first segment."""
    spare = spare_of(partitions, name)
    rendered(spare)
    return spare, partitions.records_generations(name).current().view.parts[0].layout


def kept_pieces(cache, layout) -> list[int]:
    return [i for i in range(len(layout)) if cache.has((layout, i))]


def test_the_next_two_files_are_rendered_whole_before_their_opens(tmp_path, monkeypatch):
    """The file read next and the one after it (the order is the same by name and by number here) have
    their first segment rendered whole before anyone opens them, in FILE_RUNS kernel calls side by side
    into one buffer; the open takes them; every read of that segment is answered from memory, a read
    across two runs too as one slice of that buffer (issue 25: no join on the FUSE loop); the bytes are
    exact."""
    small_pieces(monkeypatch)
    monkeypatch.setattr(partitions_module, "PREPARED_AHEAD", 2)  # of the three after t-0, two
    logdir = built_in_order(tmp_path / "logs")
    with past_t0(logdir) as tree:
        partitions = tree.partitions
        assert spare_of(partitions, "t-1") is not None and spare_of(partitions, "t-2") is not None
        assert spare_of(partitions, "t-3") is None  # two ahead, no more
        for name in ("t-1", "t-2"):
            spare = spare_of(partitions, name)
            rendered(spare)
            part = partitions.records_generations(name).current().view.parts[0]
            assert part.pieces > 4  # several pieces, several runs
            assert kept_pieces(spare, part.layout) == list(range(part.pieces))
            assert len(spare._runs) == reading.FILE_RUNS
        handle = opened_now(tree.resolve("t-2/records.jsonl"))
        assert isinstance(handle, RecordsHandle) and spare_of(partitions, "t-2") is None
        part = handle.stream.view.parts[0]
        want = expected_jsonl(logdir, "t-2")
        first_run = len(handle.cache._runs[0]) if handle.cache._runs[0][:1] == want[:1] else None
        head = part.layout.total(part.pieces)
        got = handle.read_now(0, head)  # rendered before the open: no render, no wait
        assert got is not None and bytes(got) == want[:head]
        some = handle.read_now(10, 2000)
        assert isinstance(some, memoryview) and any(some.obj is run for run in handle.cache._runs)
        assert first_run is None or first_run > 2010
        runs = handle.cache._runs
        assert all(run is runs[0] for run in runs)  # the runs side by side in one buffer
        for k in range(1, part.pieces):  # a read across two pieces, across two runs too: one slice of it
            across = handle.read_now(part.layout.start(k) - 5, 10)
            assert isinstance(across, memoryview) and across.obj is runs[0], k
            assert bytes(across) == want[part.layout.start(k) - 5 : part.layout.start(k) + 5]
        out = b""
        while len(out) < len(want):  # the rest as a reader would
            out += bytes(handle.read(len(out), 4096))
        assert out == want
        handle.release()


def test_three_files_are_prepared_ahead_of_a_reader(tmp_path):
    """Once the order is known (both orders agree here), the three files after the one read are prepared."""
    logdir = built_in_order(tmp_path / "logs", names=("t-0", "t-1", "t-2", "t-3", "t-4"))
    with past_t0(logdir) as tree:
        partitions = tree.partitions
        assert [spare_of(partitions, n) is not None for n in ("t-1", "t-2", "t-3", "t-4")] == [True, True, True, False]


def test_what_is_rendered_ahead_of_an_open_is_bounded(tmp_path, monkeypatch):
    """At most FILE_AHEAD_BYTES of a file are rendered ahead (the first piece at least); the rest renders
    as the reader comes, exactly."""
    small_pieces(monkeypatch)
    monkeypatch.setattr(reading, "FILE_AHEAD_BYTES", 3000)
    logdir = built_in_order(tmp_path / "logs")
    with past_t0(logdir) as tree:
        partitions = tree.partitions
        spare, layout = rendered_ahead(partitions, "t-1")
        kept = kept_pieces(spare, layout)
        assert kept and kept == list(range(len(kept))) and len(kept) < len(layout)
        assert layout.ends[kept[-1]] - layout.start(0) <= 3000 or kept == [0]
        handle = opened_now(tree.resolve("t-1/records.jsonl"))
        want = expected_jsonl(logdir, "t-1")
        out = b""
        while len(out) < len(want):
            out += bytes(handle.read(len(out), 4096))
        assert out == want
        handle.release()


def test_a_damaged_piece_stops_what_is_rendered_ahead(tmp_path, monkeypatch, caplog):
    """A damaged batch in the middle of the next file's first segment: the pieces before it are rendered
    ahead, it and those after it are not; its read is EIO (CorruptRecordError), the bytes before and
    after it read exactly, the damage is said once."""
    from kafkafs.format.batch import scan_batches

    small_pieces(monkeypatch)
    clean = built_in_order(tmp_path / "clean")
    logdir = tmp_path / "logs"
    shutil.copytree(clean, logdir)
    segment = sorted((logdir / "t-1").glob("*.log"))[0]
    data = bytearray(segment.read_bytes())
    batches = list(scan_batches(data))
    bad = batches[len(batches) // 2]
    data[bad.position + 70] ^= 0xFF  # inside its records: its CRC fails
    segment.write_bytes(bytes(data))
    with past_t0(logdir) as tree:
        partitions = tree.partitions
        spare, layout = rendered_ahead(partitions, "t-1")
        assert len(layout.bad) == 1
        (k,) = layout.bad
        assert 0 < k and kept_pieces(spare, layout) == list(range(k))
        handle = opened_now(tree.resolve("t-1/records.jsonl"))
        want = expected_jsonl(clean, "t-1")
        before = want[: layout.start(k)]
        assert before.endswith(b"\n") and bytes(handle.read_now(0, len(before))) == before
        with pytest.raises(CorruptRecordError):
            handle.read(len(before), 100)
        size = handle.stream.view.total
        after = expected_jsonl(clean, "t-1", lo=bad.last_offset + 1)
        assert bytes(handle.read(size - len(after), len(after))) == after
        handle.release()
        said = [r for r in caplog.records if segment.name in r.getMessage()]
        assert len(said) == 1
