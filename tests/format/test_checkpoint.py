"""Checkpoint files: the real ones a broker wrote, Kafka's reader rules, round trips."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kafkafs.errors import CorruptRecordError, InvalidInput
from kafkafs.format.checkpoint import (
    EPOCH_CHECKPOINT_FILE,
    OFFSET_CHECKPOINT_FILES,
    parse_epoch_checkpoint,
    parse_offset_checkpoint,
    render_epoch_checkpoint,
    render_offset_checkpoint,
)

from ..conftest import FIXTURES

LOGS_A = FIXTURES / "kafka-logs-a"


# -- the real files -------------------------------------------------------------------------------------


def test_real_recovery_point_checkpoint() -> None:
    data = (LOGS_A / "recovery-point-offset-checkpoint").read_bytes()
    table = parse_offset_checkpoint(data)
    assert len(table) == 84 == int(data.split(b"\n")[1])
    assert table[("__consumer_offsets", 12)] == 869
    assert table[("my-first-topic", 2)] == 2
    assert table[("location_update", 0)] == 1
    assert all(offset >= 0 for offset in table.values())


def test_real_replication_checkpoint_has_the_same_partitions() -> None:
    recovery = parse_offset_checkpoint((LOGS_A / "recovery-point-offset-checkpoint").read_text())
    replication = parse_offset_checkpoint((LOGS_A / "replication-offset-checkpoint").read_text())
    assert recovery.keys() == replication.keys()
    assert replication[("__consumer_offsets", 12)] == 869


def test_real_small_checkpoints() -> None:
    assert parse_offset_checkpoint((LOGS_A / "log-start-offset-checkpoint").read_bytes()) == {}
    assert parse_offset_checkpoint((LOGS_A / "cleaner-offset-checkpoint").read_bytes()) == {
        ("__consumer_offsets", 12): 0
    }


@pytest.mark.parametrize("name", OFFSET_CHECKPOINT_FILES)
def test_real_offset_checkpoints_round_trip(name: str) -> None:
    data = (LOGS_A / name).read_bytes()
    table = parse_offset_checkpoint(data)
    rendered = render_offset_checkpoint(table)
    assert parse_offset_checkpoint(rendered) == table
    # same lines, only the order differs (Kafka writes its hash map's order)
    assert sorted(rendered.splitlines()[2:]) == sorted(data.splitlines()[2:])
    assert rendered.splitlines()[:2] == data.splitlines()[:2]


def test_real_leader_epoch_checkpoints() -> None:
    seen = {}
    for path in sorted(LOGS_A.glob(f"*/{EPOCH_CHECKPOINT_FILE}")):
        data = path.read_bytes()
        seen[path.parent.name] = parse_epoch_checkpoint(data)
        assert render_epoch_checkpoint(seen[path.parent.name]) == data  # byte for byte
    assert seen["__consumer_offsets-12"] == [(0, 0)]
    assert seen["demo-0"] == []


# -- Kafka's reader rules -------------------------------------------------------------------------------


def test_render_is_sorted_and_kafka_shaped() -> None:
    data = render_offset_checkpoint({("b", 1): 7, ("a", 10): 3, ("a", 2): 5})
    assert data == b"0\n3\na 2 5\na 10 3\nb 1 7\n"
    assert render_offset_checkpoint([]) == b"0\n0\n"
    assert render_epoch_checkpoint([(0, 0), (3, 120)]) == b"0\n2\n0 0\n3 120\n"


def test_empty_and_header_only_files_hold_nothing() -> None:
    assert parse_offset_checkpoint(b"") == {}
    assert parse_offset_checkpoint("0\n") == {}
    assert parse_offset_checkpoint("0") == {}
    assert parse_epoch_checkpoint(b"0\n0\n") == []


def test_line_ends_and_separators_kafka_accepts() -> None:
    assert parse_offset_checkpoint("0\r\n1\r\nt 0 5\r\n") == {("t", 0): 5}
    assert parse_offset_checkpoint("0\r1\rt 0 5") == {("t", 0): 5}
    assert parse_offset_checkpoint("0\n1\nt \t 0  5 \n") == {("t", 0): 5}
    assert parse_offset_checkpoint("0\n1\nt 0 +5\n") == {("t", 0): 5}
    assert parse_epoch_checkpoint("0\n2\n0 0\n1 -1\n") == [(0, 0), (1, -1)]


def test_later_duplicate_wins() -> None:
    assert parse_offset_checkpoint("0\n2\nt 0 5\nt 0 9\n") == {("t", 0): 9}


@pytest.mark.parametrize(
    ("data", "line"),
    [
        ("1\n0\n", 1),  # unknown version
        ("x\n0\n", 1),
        (" 0\n0\n", 1),
        ("0\nmany\n", 2),
        ("0\n2\nt 0 5\n", 2),  # count mismatch
        ("0\n0\nt 0 5\n", 2),
        ("0\n1\nt 0\n", 3),
        ("0\n1\nt 0 5 6\n", 3),
        ("0\n1\n t 0 5\n", 3),  # a leading blank makes an empty first field, as in Java's split
        ("0\n1\nt zero 5\n", 3),
        ("0\n1\nt 0 5x\n", 3),
        ("0\n1\nt 0 1_000\n", 3),
        ("0\n1\nt 2147483648 5\n", 3),
        ("0\n1\nt 0 9223372036854775808\n", 3),
        ("0\n1\nt 0 5\n\n", 4),  # a blank line is an entry, and a malformed one
        ("0\n1\nt 0 ５\n", 3),  # non-ASCII digits
    ],
)
def test_malformed_offset_checkpoints(data: str, line: int) -> None:
    with pytest.raises(CorruptRecordError) as err:
        parse_offset_checkpoint(data)
    assert f"line {line}" in err.value.reason
    start = sum(len(x.encode()) + 1 for x in data.split("\n")[: line - 1])
    assert err.value.position == start


@pytest.mark.parametrize(
    "data", ["0\n1\n0\n", "0\n1\n0 0 0\n", "0\n1\n2147483648 0\n", "0\n1\n1 x\n", "3\n0\n"]
)
def test_malformed_epoch_checkpoints(data: str) -> None:
    with pytest.raises(CorruptRecordError):
        parse_epoch_checkpoint(data)


def test_not_utf8() -> None:
    with pytest.raises(CorruptRecordError) as err:
        parse_offset_checkpoint(b"0\n1\nt\xff 0 5\n")
    assert err.value.position == 5


def test_other_version_on_request() -> None:
    assert parse_epoch_checkpoint("1\n1\n2 3\n", version=1) == [(2, 3)]
    assert render_epoch_checkpoint([(2, 3)], version=1) == b"1\n1\n2 3\n"


@pytest.mark.parametrize(
    "entries",
    [
        {("bad topic", 0): 1},
        {("", 0): 1},
        {("t", 2**31): 1},
        {("t", 0): 2**63},
        {("t", 0): "5"},
        {("t", True): 5},
    ],
)
def test_render_rejects_what_kafka_could_not_read(entries: dict) -> None:
    with pytest.raises(InvalidInput):
        render_offset_checkpoint(entries)


def test_render_epoch_rejects_out_of_range() -> None:
    with pytest.raises(InvalidInput):
        render_epoch_checkpoint([(2**31, 0)])


# -- round trips ----------------------------------------------------------------------------------------

topics = st.text(alphabet="abcxyz._-019", min_size=1, max_size=20)
int32 = st.integers(-(2**31), 2**31 - 1)
int64 = st.integers(-(2**63), 2**63 - 1)


@given(st.dictionaries(st.tuples(topics, int32), int64, max_size=30))
def test_offset_round_trip(table: dict[tuple[str, int], int]) -> None:
    data = render_offset_checkpoint(table)
    assert parse_offset_checkpoint(data) == table
    assert parse_offset_checkpoint(data.decode()) == table
    assert render_offset_checkpoint(parse_offset_checkpoint(data)) == data


@given(st.lists(st.tuples(int32, int64), max_size=30))
def test_epoch_round_trip(entries: list[tuple[int, int]]) -> None:
    assert parse_epoch_checkpoint(render_epoch_checkpoint(entries)) == entries


@given(st.binary(max_size=60))
def test_garbage_raises_only_corrupt_record(data: bytes) -> None:
    for parse in (parse_offset_checkpoint, parse_epoch_checkpoint):
        try:
            parse(data)
        except CorruptRecordError:
            pass
