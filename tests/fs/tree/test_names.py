from kafkafs.fs.tree import names


def test_offset_files():
    assert names.parse_offset_file("0.json") == 0
    assert names.parse_offset_file("42.json") == 42
    for bad in (
        "042.json",
        "-1.json",
        "4.jsonl",
        "x.json",
        "4.json.tmp",
        "",
        ".json",
        "99999999999999999999.json",
    ):
        assert names.parse_offset_file(bad) is None, bad


def test_offset_ranges():
    assert names.parse_offset_range("10-19.jsonl") == (10, 19)
    assert names.parse_offset_range("5-5.jsonl") == (5, 5)
    for bad in ("19-10.jsonl", "1-2.json", "01-2.jsonl", "1--2.jsonl", "a-b.jsonl", "1-2"):
        assert names.parse_offset_range(bad) is None, bad


def test_time_files():
    assert names.parse_time_file("1763700000000.json") == 1763700000000
    assert names.parse_time_file("2026-11-21T10:00:00Z.json") == 1795255200000
    assert names.parse_time_file("2026-11-21T10:00:00.123Z.json") == 1795255200123
    for bad in ("yesterday.json", "2026-13-01T00:00:00Z.json", "1..2.json", " 5.json", "5.jsonl"):
        assert names.parse_time_file(bad) is None, bad


def test_time_names_round_sub_millisecond_digits_up():
    # by-time/2026-11-21T10:01:00.0015Z.json gave the record at .001, before the time asked for
    at = 1795255260000
    assert names.parse_time_file("2026-11-21T10:01:00.0015Z.json") == at + 2
    assert names.parse_time_range("2026-11-21T10:01:00.0005Z..2026-11-21T10:01:00.0015Z.jsonl") == (at + 1, at + 2)


def test_time_ranges():
    assert names.parse_time_range("1000..2000.jsonl") == (1000, 2000)
    assert names.parse_time_range("2026-11-21T10:00:00Z..2026-11-21T10:00:00.500Z.jsonl") == (
        1795255200000,
        1795255200500,
    )
    assert names.parse_time_range("5..5.jsonl") == (5, 5)
    for bad in ("2000..1000.jsonl", "1000..2000.json", "1000.jsonl", "a..b.jsonl", "1...2.jsonl"):
        assert names.parse_time_range(bad) is None, bad


def test_negative_times_are_no_names():
    """review16 R16-1: by-time/-5.json, -1.json and -1..0.jsonl answered with offset 0 (a magic 0 record's
    timestamp is -1); Kafka's offsetsForTimes refuses a negative target time: ENOENT."""
    for bad in ("-5.json", "-1.json", "1969-12-31T23:59:59Z.json"):
        assert names.parse_time_file(bad) is None, bad
    for bad in ("-1..0.jsonl", "-5..-1.jsonl", "1969-12-31T23:59:59Z..1000.jsonl"):
        assert names.parse_time_range(bad) is None, bad
    assert names.parse_time_file("0.json") == 0 and names.parse_time_range("0..1.jsonl") == (0, 1)


def test_segment_files():
    assert names.is_segment_file("00000000000000000042.log")
    assert names.is_segment_file("00000000000000000042.timeindex")
    assert names.is_segment_file("00000000000000000042.txnindex")
    for bad in (
        "00000000000000000042.snapshot",
        "00000000000000000042.log.deleted",
        "00000000000000000042.log.cleaned",
        "00000000000000000042.index.swap",
        "42.log",
        "leader-epoch-checkpoint",
        "partition.metadata",
    ):
        assert not names.is_segment_file(bad)
    keys = [names.partition_file_key(f"{b:020d}.{e}") for b in (0, 7) for e in ("log", "index", "timeindex")]
    assert keys == sorted(keys) and len(set(keys)) == len(keys)
