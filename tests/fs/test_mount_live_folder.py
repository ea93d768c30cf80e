"""A read-only mount beside another process that changes a partition without appending to it (SPEC §2
readers beside a broker, §3 "Live"): review8 R8-5, a log start the broker checkpoints while the mount is
up (kafka-delete-records: log-start-offset-checkpoint renamed into place), and R8-6, a topic deleted and
created again (the broker renames the folder ``-delete``, a new folder of the same name appears)."""

from __future__ import annotations

import json
import os
import time

from kafkafs.format.jsonview import ProducerRecord
from kafkafs.storage.log import Log

TS = 1_763_700_000_000


def _write(folder, values: list[str], keys: bool = True) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    log_ = Log.open(folder, writable=True, clean_shutdown=True)
    try:
        start = log_.log_end_offset
        for i, value in enumerate(values):
            key = f"k{(start + i) % 5}".encode() if keys else None
            log_.append_records([ProducerRecord(TS + start + i, key, value.encode(), ())])
    finally:
        log_.close()


def _offsets(path) -> list[int]:
    return [json.loads(line)["offset"] for line in path.read_text().splitlines()]


def _until(check, seconds: float = 6.0):
    deadline = time.monotonic() + seconds
    while True:
        got = check()
        if got or time.monotonic() > deadline:
            return got
        time.sleep(0.1)


def test_a_log_start_checkpointed_while_mounted_applies_to_new_opens(tmp_path, mounted):
    logs = tmp_path / "logs"
    _write(logs / "d-0", [f"v{i}" for i in range(20)])
    m = mounted(logs)
    part = m.path / "d-0"
    assert _offsets(part / "records.jsonl") == list(range(20))
    assert (part / "by-offset" / "13.json").exists()
    # what a broker does when it checkpoints the log start: a temp file renamed into place
    tmp = logs / "log-start-offset-checkpoint.tmp"
    tmp.write_text("0\n1\nd 0 12\n")
    os.rename(tmp, logs / "log-start-offset-checkpoint")
    got = _until(lambda: _offsets(part / "records.jsonl")[:1] == [12])
    assert got, f"records.jsonl still starts at {_offsets(part / 'records.jsonl')[:1]} (log start 12 checkpointed)"
    assert _offsets(part / "records.jsonl") == list(range(12, 20))
    assert json.loads((part / "partition.json").read_text())["logStartOffset"] == 12
    assert not (part / "by-offset" / "3.json").exists()
    assert _offsets(part / "by-key" / "k0.jsonl") == [15]


def test_a_partition_folder_created_again_while_mounted_is_a_new_partition(tmp_path, mounted):
    logs = tmp_path / "logs"
    _write(logs / "gone-0", [f"old-{i}" for i in range(5)], keys=False)
    m = mounted(logs)
    part = m.path / "gone-0"
    assert len((part / "records.jsonl").read_text().splitlines()) == 5
    # the broker deletes the topic (renames the folder) and the topic is created again
    os.rename(logs / "gone-0", logs / "gone-0.0123456789abcdef0123456789abcdef-delete")
    _write(logs / "gone-0", ["new-0"], keys=False)

    def values() -> list[str]:
        try:
            return [json.loads(line)["value"] for line in (part / "records.jsonl").read_text().splitlines()]
        except FileNotFoundError:
            return []

    assert _until(lambda: values() == ["new-0"]), f"records.jsonl after the re-creation: {values()}"
    _write(logs / "gone-0", ["new-1"], keys=False)
    assert _until(lambda: values() == ["new-0", "new-1"]), f"records.jsonl after a second record: {values()}"
    assert sorted(os.listdir(part / "by-offset")) == ["0.json", "1.json"]


def test_a_deleted_topics_partition_is_enoent_at_once(tmp_path, mounted):
    # review13 R13-3: the root listing dropped gone-1 at once, but for ~10 s (the time the kernel keeps a
    # watched folder's name) gone-1/ resolved and served an EMPTY partition (logEndOffset 0)
    logs = tmp_path / "logs"
    _write(logs / "gone-1", [f"v{i}" for i in range(5)], keys=False)
    _write(logs / "kept-0", ["w"], keys=False)
    m = mounted(logs)
    part = m.path / "gone-1"
    assert json.loads((part / "partition.json").read_text())["logEndOffset"] == 5
    assert len((part / "records.jsonl").read_text().splitlines()) == 5
    assert os.path.isdir(part)
    os.rename(logs / "gone-1", logs / "gone-1.0123456789abcdef0123456789abcdef-delete")
    t0 = time.monotonic()
    seen = []
    while time.monotonic() - t0 < 3:
        try:
            seen.append(len((part / "records.jsonl").read_text().splitlines()))
            seen.append(json.loads((part / "partition.json").read_text())["logEndOffset"])
        except FileNotFoundError:
            break
        time.sleep(0.02)
    else:
        raise AssertionError(f"gone-1/partition.json still resolves 3 s after the rename: {seen[-3:]}")
    assert 0 not in seen, f"served as an empty partition: {seen}"
    # the kernel's entry for the name goes at the rename's event (it kept a watched folder's name 10 s)
    assert _until(lambda: not os.path.exists(part), 0.5), (
        f"gone-1/ still resolves {time.monotonic() - t0:.1f} s after the rename")
    for name in ("gone-1/records.jsonl", "gone-1/partition.json", "gone-1/by-offset", "gone-1/by-key"):
        assert not os.path.exists(m.path / name), name
    assert "gone-1" not in os.listdir(m.path)
    assert len((m.path / "kept-0" / "records.jsonl").read_text().splitlines()) == 1


def test_a_by_key_size_the_kernel_keeps_follows_the_records_another_process_appends(tmp_path, mounted):
    """review24 R24-5: by-key/<name>.json's attributes are kept as long as records.jsonl's in a watched
    partition (du and find read a folder whole before they stat it: each name was looked up again past
    0.1 s); an append by another process still shows in its size, the kept one dropped by the event."""
    logs = tmp_path / "logs"
    _write(logs / "d-0", [f"v{i}" for i in range(10)])
    m = mounted(logs)
    part = m.path / "d-0"
    names = sorted(os.listdir(part / "by-key"))
    assert names == [f"k{i}.json" for i in range(5)]
    before = {name: os.stat(part / "by-key" / name).st_size for name in names}
    assert before["k0.json"] == len((part / "by-key" / "k0.json").read_bytes())
    _write(logs / "d-0", ["a much longer value than any before it"])  # offset 10: key k0
    got = _until(lambda: os.stat(part / "by-key" / "k0.json").st_size != before["k0.json"])
    assert got, "by-key/k0.json kept its size after a record of k0 was appended"
    data = (part / "by-key" / "k0.json").read_bytes()
    assert json.loads(data)["offset"] == 10 and os.stat(part / "by-key" / "k0.json").st_size == len(data)
    assert os.stat(part / "by-key" / "k1.json").st_size == before["k1.json"]
