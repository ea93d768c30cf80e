"""Options and pushed-down filters, parsed without Spark."""

from __future__ import annotations

import datetime as dt

import pytest
from pyspark.sql.datasource import (
    EqualTo,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    IsNotNull,
    IsNull,
    LessThan,
    LessThanOrEqual,
    Not,
    StringStartsWith,
)

from kafkafs.errors import InvalidInput
from kafkafs.spark.options import EARLIEST, LATEST, parse_read_options
from kafkafs.spark.predicates import IntBounds, from_filters
from kafkafs.spark.stream import cap_offsets, from_json, to_json

UTC = dt.UTC


def test_filters_claimed_and_handed_back():
    t0 = dt.datetime(2026, 1, 1, tzinfo=UTC)
    filters = [
        IsNotNull(("offset",)),
        EqualTo(("topic",), "orders"),
        In(("partition",), (0, 2)),
        GreaterThan(("offset",), 10),
        LessThanOrEqual(("offset",), 20),
        GreaterThanOrEqual(("timestamp",), t0),
        LessThan(("timestamp",), t0 + dt.timedelta(milliseconds=5)),
        IsNull(("key",)),
        StringStartsWith(("topic",), "or"),
        Not(EqualTo(("partition",), 1)),
        EqualTo(("offset",), True),
        GreaterThan(("timestamp",), dt.datetime(2026, 1, 1)),  # naive: not exact here
        EqualTo(("headers", "key"), "x"),
    ]
    preds, rest = from_filters(filters)
    assert [f for f in filters if any(f is r for r in rest)] == filters[7:]
    assert preds.topics == frozenset({"orders"})
    assert preds.partition == IntBounds(0, 2, frozenset({0, 2}))
    assert preds.offset == IntBounds(11, 20)
    us = 1_767_225_600_000_000
    assert preds.timestamp == IntBounds(us, us + 4999)
    assert not preds.never
    assert from_filters([EqualTo(("topic",), "a"), EqualTo(("topic",), "b")])[0].never
    assert from_filters([GreaterThan(("offset",), 5), LessThan(("offset",), 3)])[0].never


def test_read_options():
    o = parse_read_options(
        {
            "PATH": "/x",
            "topics": "a, b",
            "startingOffsets": '{"a": {"0": 5, "1": -2}}',
            "endingOffsets": "latest",
            "kafka.isolation.level": "read_committed",
            "onCorrupt": "SKIP",
            "maxBytesPerPartition": "1000",
        }
    )
    assert o.paths == ("/x",)
    assert o.topics == frozenset({"a", "b"})
    assert o.starting.for_partition("a", 0) == 5 and o.starting.for_partition("a", 1) == EARLIEST
    assert o.starting.for_partition("b", 0) == EARLIEST
    assert o.ending.default == LATEST
    assert (o.isolation_level, o.on_corrupt, o.max_bytes_per_partition) == ("read_committed", "skip", 1000)
    assert parse_read_options({"path": "/x"}, streaming=True).starting.default == LATEST
    ts = parse_read_options({"path": "/x", "startingTimestamp": "1000", "startingOffsetsByTimestamp": '{"a": {"0": 7}}'})
    assert ts.starting_timestamp.for_partition("z", 3) == 1000
    ts = parse_read_options({"path": "/x", "endingOffsetsByTimestamp": '{"a": {"0": 7}}'})
    assert ts.ending_timestamp.for_partition("a", 0) == 7 and ts.ending_timestamp.for_partition("a", 1) is None


@pytest.mark.parametrize(
    "options, message",
    [
        ({"startingOffsets": "first"}, "startingOffsets"),
        ({"startingOffsets": '{"a": 5}'}, "startingOffsets"),
        ({"endingOffsets": "earliest"}, "ending offset can't be earliest for batch queries on Kafka"),
        ({"endingOffsets": '{"a": {"0": -2}}'}, "ending offset for a-0 can't be earliest"),
        ({"startingOffsets": "latest"}, "starting offset can't be latest for batch queries on Kafka"),
        ({"startingOffsets": '{"a": {"0": -1}}'}, "startingOffsets for a-0 can't be latest"),
        ({"startingOffsets": '{"a": {"0": 9}}', "endingOffsets": '{"a": {"0": 3}}'}, "start offset 9 is greater than the end offset 3 for topic a partition 0"),
        ({"startingTimestamp": "yesterday"}, "Expected a single long value, got yesterday"),
        # negative times are Spark's (review25 R25-2: -2 earliest, -1 latest): tests/spark/test_offsets_match.py
        ({"endingOffsetsByTimestamp": '{"a": {"0": "x"}}'}, "option endingOffsetsByTimestamp: a-0: 'x' is not an integer"),
        ({"subscribe": "a", "subscribePattern": "b"}, "Only one of the following options can be specified"),
        ({"topics": "a", "assign": '{"a": [0]}'}, "Only one of the following options"),
        ({"subscribe": " , "}, "No topics to subscribe to"),
        ({"subscribePattern": " "}, "Pattern to subscribe is empty"),
        ({"assign": "a-0"}, "No topicpartitions to assign"),
        ({"minPartitions": "0"}, "minPartitions must be positive"),
        ({"includeHeaders": "yes"}, "includeHeaders"),
        ({"failOnDataLoss": "maybe"}, "failOnDataLoss"),
        ({"onCorrupt": "ignore"}, "onCorrupt"),
        ({"isolationLevel": "serializable"}, "isolationLevel"),
        ({"maxBytesPerPartition": "0"}, "positive"),
        ({"topicPattern": "("}, "subscribePattern"),
        ({"paths": "[1, 2]"}, "paths"),
    ],
)
def test_bad_options_name_the_option(options, message):
    with pytest.raises(InvalidInput, match=message):
        parse_read_options({"path": "/x", **options})


@pytest.mark.parametrize(
    "options, message",
    [
        ({"endingOffsets": "latest"}, "ending offset not valid in streaming queries"),
        ({"endingTimestamp": "5"}, "ending timestamp not valid in streaming queries"),
        ({"endingOffsetsByTimestamp": '{"a": {"0": 5}}'}, "ending timestamp not valid in streaming queries"),
    ],
)
def test_streams_refuse_an_end_as_spark_does(options, message):
    with pytest.raises(InvalidInput, match=message):
        parse_read_options({"path": "/x", **options}, streaming=True)
    parse_read_options({"path": "/x", **options})  # a batch read takes it


def test_spark_defaults_and_strategies():
    o = parse_read_options({"path": "/x"})
    assert (o.include_headers, o.fail_on_data_loss, o.min_partitions) == (False, True, None)
    o = parse_read_options({"path": "/x", "INCLUDEHEADERS": "True", "failondataloss": "false", "minPartitions": "7"})
    assert (o.include_headers, o.fail_on_data_loss, o.min_partitions) == (True, False, 7)
    o = parse_read_options({"path": "/x", "subscribe": "a,b"})
    assert o.topics == frozenset({"a", "b"}) and o.accepts_topic("a") and not o.accepts_topic("c")
    o = parse_read_options({"path": "/x", "subscribePattern": "or.*"})
    assert o.accepts_topic("orders") and not o.accepts_topic("xorders")  # a whole-name match, as Java's
    o = parse_read_options({"path": "/x", "assign": '{"a": [0, 2]}'})
    assert o.accepts_partition("a", 2) and not o.accepts_partition("a", 1) and not o.accepts_partition("b", 0)
    assert parse_read_options({"path": "/x", "isolationLevel": "read_committed"}).isolation_level == "read_committed"


def test_stream_offsets_json_and_cap():
    offsets = {("a", 0): 5, ("a", 1): 7, ("b", 0): 0}
    assert to_json(offsets) == {"a": {"0": 5, "1": 7}, "b": {"0": 0}}
    assert from_json(to_json(offsets)) == offsets
    start = {("a", 0): 0, ("a", 1): 90, ("b", 0): 0}
    end = {("a", 0): 100, ("a", 1): 100, ("b", 0): 0}
    capped = cap_offsets(start, end, 55)
    assert capped == {("a", 0): 50, ("a", 1): 95, ("b", 0): 0}
    assert cap_offsets(start, end, None) == end
    assert cap_offsets(start, end, 1000) == end
    assert cap_offsets({("a", 0): 0, ("a", 1): 0}, {("a", 0): 1000, ("a", 1): 1}, 10) == {("a", 0): 9, ("a", 1): 1}


def test_a_pattern_leaves_out_internal_topics_as_kafkas_consumer_does():
    """Spark's subscribePattern goes through Kafka's consumer, whose ``exclude.internal.topics`` (default
    true) leaves Kafka's internal topics out of a pattern subscription; the KRaft metadata log is no
    topic at all. ``kafka.exclude.internal.topics=false`` lets a pattern match them; by name they
    are always read."""
    internal = ("__consumer_offsets", "__transaction_state", "__share_group_state", "__cluster_metadata")
    o = parse_read_options({"path": "/x", "subscribePattern": ".*"})
    assert o.accepts_topic("orders") and not any(o.accepts_topic(t) for t in internal)
    o = parse_read_options({"path": "/x", "subscribePattern": "__.*", "kafka.exclude.internal.topics": "false"})
    assert all(o.accepts_topic(t) for t in internal)
    o = parse_read_options({"path": "/x", "subscribe": ",".join(internal)})
    assert all(o.accepts_topic(t) for t in internal)
