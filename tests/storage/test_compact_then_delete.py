"""``cleanup.policy=compact,delete``: compaction first, then retention on what it left (review17 R17-1).

Kafka 4.4's retention task (LogManager.cleanupLogs) leaves compacted logs to the LogCleaner, whose
thread compacts the filthiest log and then runs ``deleteOldSegments`` on every compacted log
(``deletableLogs``), cleaned this time or not: ``retention.bytes`` and ``retention.ms`` judge the
compacted segments. With ``log.cleaner.enable=false`` there is no cleaner, and a compacted log gets no
retention at all. tests/broker/test_compact_delete_vs_kafka.py holds this to a real broker.
"""

from __future__ import annotations

import shutil

from kafkafs.storage.cleaner import LogCleaner, clean_logdir
from kafkafs.storage.config import Settings
from kafkafs.storage.logdir import LogDir

from .test_cleaner import _fill

UNIQUE, HOT = 20, 40
BASE = {"segment.bytes": 600, "min.cleanable.dirty.ratio": 0.01, "retention.ms": -1,
        "log.cleaner.backoff.ms": 0, "log.initial.task.delay.ms": 0}
NOW = 10**13


def _key(i: int) -> bytes:
    return b"u%03d" % i if i < UNIQUE else b"hot%d" % (i % 3)


def _value(i: int) -> bytes:
    return b"only value of u%03d" % i if i < UNIQUE else b"update %d " % i + b"h" * 40


def _settings(**topic) -> Settings:
    return Settings(dict(BASE, **{"cleanup.policy": "compact,delete"}, **topic))


def _written(path, order=lambda i: i) -> None:
    """``t-0``: UNIQUE keys written once, then HOT updates of three hot keys (``order`` may change
    which comes first), a record a batch (as a producer with linger.ms=0 writes them), in segments of
    600 bytes, timestamped just before NOW."""
    path.mkdir()
    with LogDir(path, Settings(BASE), writable=True) as logdir:
        _fill(logdir.create_partition("t", 0), UNIQUE + HOT, key=lambda i: _key(order(i)),
              value=lambda i: _value(order(i)), ts=lambda i: NOW - 100_000 + i)


def _kept(path, settings: Settings) -> list[tuple[int, bytes | None, bytes | None]]:
    with LogDir(path, settings) as logdir:
        return [(r[0], r[2], r[3]) for r in logdir.log("t-0").records()]


def _compacted_then_retained(tmp_path, **topic):
    """The reference: the log compacted alone (policy compact), then retention alone on the result (a
    second run, with nothing left to compact: whatever order a run takes, only retention acts)."""
    ref = tmp_path / "reference"
    shutil.copytree(tmp_path / "written", ref)
    with LogDir(ref, Settings(dict(BASE, **{"cleanup.policy": "compact"})), writable=True) as logdir:
        clean_logdir(logdir, now_ms=NOW)
        size = logdir.log("t-0").size_in_bytes()
    with LogDir(ref, _settings(**topic), writable=True) as logdir:
        clean_logdir(logdir, now_ms=NOW)
    return _kept(ref, _settings(**topic)), size


def test_size_retention_judges_the_compacted_log(tmp_path):
    """R17-1: the log is 6.7 KB as written, 2.3 KB compacted; with retention.bytes 3000 Kafka keeps every
    key (it compacts first). kafkafs deleted the oldest whole segments by the written sizes first, and
    with them every key written once."""
    _written(tmp_path / "written")
    expected, compacted = _compacted_then_retained(tmp_path, **{"retention.bytes": 3000})
    assert compacted < 3000
    shutil.copytree(tmp_path / "written", tmp_path / "one")
    with LogDir(tmp_path / "one", _settings(**{"retention.bytes": 3000}), writable=True) as logdir:
        assert logdir.log("t-0").size_in_bytes() > 3000
        lines = clean_logdir(logdir, now_ms=NOW)
    kept = _kept(tmp_path / "one", _settings())
    assert kept == expected, lines
    assert {key for _o, key, _v in kept} == {_key(i) for i in range(UNIQUE + 3)}
    assert not any("deleted" in line for line in lines), lines


def test_size_retention_cuts_into_the_compacted_log_as_a_second_run_would(tmp_path):
    _written(tmp_path / "written")
    expected, compacted = _compacted_then_retained(tmp_path, **{"retention.bytes": 900})
    assert compacted > 900
    shutil.copytree(tmp_path / "written", tmp_path / "one")
    shutil.copytree(tmp_path / "written", tmp_path / "dry")
    with LogDir(tmp_path / "dry", _settings(**{"retention.bytes": 900})) as logdir:
        predicted = clean_logdir(logdir, now_ms=NOW, dry_run=True)
    with LogDir(tmp_path / "one", _settings(**{"retention.bytes": 900}), writable=True) as logdir:
        done = clean_logdir(logdir, now_ms=NOW)
    assert _kept(tmp_path / "one", _settings()) == expected
    assert 0 < len([k for _o, k, _v in expected if k.startswith(b"u")]) < UNIQUE  # some of the keys written once
    # the dry run says what the run does, in its order: compactions, then the deletions of what they left
    assert any("deleted" in line for line in done) and any("compacted" in line for line in done)
    assert [line.replace("would delete", "deleted").replace("would compact", "compacted") for line in predicted] == done
    first_deletion = next(i for i, line in enumerate(done) if " deleted " in line)
    assert all("compacted" in line for line in done[:first_deletion])


def test_time_retention_judges_the_compacted_segments(tmp_path):
    """The segments compaction empties have no timestamp left and age by their file's time (Kafka's
    largestTimestamp): retention after compaction deletes them (the log start moves past them), where
    retention first found every segment young. The dry run foresees it, from the files' times."""
    _written(tmp_path / "written", order=lambda i: (i + UNIQUE) % (UNIQUE + HOT))  # 20 hot updates first
    topic = {"retention.ms": 1_000_000}
    expected, _size = _compacted_then_retained(tmp_path, **topic)
    shutil.copytree(tmp_path / "written", tmp_path / "one")
    shutil.copytree(tmp_path / "written", tmp_path / "dry")
    with LogDir(tmp_path / "dry", _settings(**topic)) as logdir:
        predicted = clean_logdir(logdir, now_ms=NOW, dry_run=True)
    with LogDir(tmp_path / "one", _settings(**topic), writable=True) as logdir:
        done = clean_logdir(logdir, now_ms=NOW)
    assert _kept(tmp_path / "one", _settings()) == expected
    assert any(" deleted " in line for line in done), done
    with LogDir(tmp_path / "one", _settings(**topic)) as logdir:
        assert logdir.log("t-0").log_start_offset > 0
    assert [line.replace("would delete", "deleted").replace("would compact", "compacted") for line in predicted] == done


def test_without_the_cleaner_a_compacted_log_gets_no_retention(tmp_path):
    """Kafka: with log.cleaner.enable=false the retention task still skips compacted logs (their
    deleteOldSegments belongs to the cleaner), so a compact,delete log keeps every segment."""
    _written(tmp_path / "written")
    settings = Settings(dict(BASE, **{"cleanup.policy": "compact,delete", "retention.bytes": 900,
                                      "log.cleaner.enable": False}))
    before = _kept(tmp_path / "written", settings)
    with LogDir(tmp_path / "written", settings, writable=True) as logdir:
        assert clean_logdir(logdir, now_ms=NOW) == ["nothing to clean"]
        assert LogCleaner(logdir, clock=lambda: NOW).run_once() is False
    assert _kept(tmp_path / "written", settings) == before


def test_the_background_cleaner_compacts_then_deletes(tmp_path):
    """A --rw --clean mount's cleaner: its retention check leaves compacted logs alone; each look for a
    log to compact ends with retention on every compacted log, after the compaction."""
    _written(tmp_path / "written")
    expected, _size = _compacted_then_retained(tmp_path, **{"retention.bytes": 3000})
    with LogDir(tmp_path / "written", _settings(**{"retention.bytes": 3000}), writable=True) as logdir:
        cleaner = LogCleaner(logdir, clock=lambda: NOW)
        cleaner._retention()  # the periodic retention check: not for a compacted log
        assert cleaner.segments_deleted == 0
        assert cleaner.run_once() is True
        assert cleaner.errors == 0
    assert _kept(tmp_path / "written", _settings()) == expected
