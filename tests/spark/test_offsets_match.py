"""review25: offsets/timestamps JSON checked against the partitions read, negative times, and the
start-past-end message, as Spark 4.2's Kafka source has them (messages recorded on a live Kafka 4.4)."""

from __future__ import annotations

import json

import pytest

from kafkafs.errors import InvalidInput
from kafkafs.spark.options import parse_read_options
from kafkafs.spark.stream import initial_offsets
from kafkafs.storage.logdir import LogDir

from .helpers import plan, read_plan

START = ("Partitions specified for Kafka start offsets don't match what are assigned. Maybe topic partitions are "
         "created or deleted while the query is running. Use -1 for latest, -2 for earliest. ")
BY_TIME = ("Partitions specified for Kafka timestamp based {} offsets don't match what are assigned. Maybe topic "
           "partitions are created or deleted while the query is running, or you didn't specify all the partitions. ")
ORDERS = "Assigned: Set(orders-0, orders-1)"
EVERY_TOPIC = (" (no subscribe, subscribePattern or assign: every topic of the log directories is read; name the "
               "topics with subscribe)")


@pytest.mark.parametrize(
    "options, message",
    [
        # a typo'd topic: the read returned every row of orders
        ({"subscribe": "orders", "startingOffsets": {"order": {"0": 5, "1": 5}}},
         "option startingOffsets: " + START + "Specified: Set(order-0, order-1) " + ORDERS),
        # a partition that is not there
        ({"subscribe": "orders", "startingOffsets": {"orders": {"0": 5, "1": 5, "9": 5}}},
         "option startingOffsets: " + START + "Specified: Set(orders-0, orders-1, orders-9) " + ORDERS),
        # a partition outside assign
        ({"assign": '{"orders": [1]}', "startingOffsets": {"orders": {"0": 7, "1": 7}}},
         "option startingOffsets: " + START + "Specified: Set(orders-0, orders-1) Assigned: Set(orders-1)"),
        # an extra topic in endingOffsets (Spark says "start offsets" there too)
        ({"subscribe": "orders", "endingOffsets": {"orders": {"0": 50, "1": 50}, "typo": {"0": 1}}},
         "option endingOffsets: " + START + "Specified: Set(orders-0, orders-1, typo-0) " + ORDERS),
        # a partition left out: Spark 4.2 refuses it too
        ({"subscribe": "orders", "startingOffsets": {"orders": {"0": 10}}},
         "option startingOffsets: " + START + "Specified: Set(orders-0) " + ORDERS),
        ({"subscribePattern": "ord.*", "startingOffsetsByTimestamp": {"orderz": {"0": 1}}},
         "option startingOffsetsByTimestamp: " + BY_TIME.format("start") + "Specified: Set(orderz-0) " + ORDERS),
        ({"subscribe": "orders", "endingOffsetsByTimestamp": {"orders": {"0": 1}}},
         "option endingOffsetsByTimestamp: " + BY_TIME.format("end") + "Specified: Set(orders-0) " + ORDERS),
        # no strategy (every topic): a name that matches nothing still fails
        ({"startingOffsets": {"nosuch": {"0": 1}}}, "option startingOffsets: " + START + "Specified: Set(nosuch-0) "
         "Assigned: Set(audit-0, events-0, orders-0, orders-1)" + EVERY_TOPIC),
        # and, as with Spark's every strategy, every partition read must be named (fix66: the others took
        # the default, a rule Spark has nowhere)
        ({"startingOffsets": {"audit": {"0": 25}}}, "option startingOffsets: " + START + "Specified: Set(audit-0) "
         "Assigned: Set(audit-0, events-0, orders-0, orders-1)" + EVERY_TOPIC),
        ({"endingOffsetsByTimestamp": {"orders": {"0": 1, "1": 1}}}, "option endingOffsetsByTimestamp: "
         + BY_TIME.format("end") + "Specified: Set(orders-0, orders-1) Assigned: Set(audit-0, events-0, orders-0, "
         "orders-1)" + EVERY_TOPIC),
    ],
)
def test_offsets_json_must_name_the_partitions_read(generated, options, message):
    """R25-1: names that matched nothing were passed over, and the read gave more rows than asked."""
    opts = {k: json.dumps(v) if isinstance(v, dict) else v for k, v in options.items()}
    with pytest.raises(InvalidInput) as caught:
        plan(generated, **opts)
    assert str(caught.value) == message
    if "endingOffsets" not in opts and "endingOffsetsByTimestamp" not in opts:  # a stream's start: the same
        with pytest.raises(InvalidInput) as caught:
            initial_offsets(parse_read_options({"path": str(generated), **opts}, streaming=True))
        assert str(caught.value) == message


def test_offsets_json_naming_every_partition_read_plans(generated):
    """The check does not get in the way: the exact set plans (with no strategy: every partition)."""
    exact = plan(generated, subscribe="orders", startingOffsets=json.dumps({"orders": {"0": 990, "1": -2}}))
    assert len([r for r in read_plan(exact) if r[1] == 0]) == 10
    # a filter on partition does not change what Spark calls "assigned"
    from kafkafs.spark.predicates import IntBounds, Predicates

    one = plan(generated, Predicates(partition=IntBounds(1, 1)), subscribe="orders",
               startingOffsets=json.dumps({"orders": {"0": 990, "1": 995}}))
    assert {r[1] for r in read_plan(one)} == {1}
    every = {"audit": {"0": 25}, "events": {"0": -2}, "orders": {"0": -2, "1": -2}}
    assert len(plan(generated, startingOffsets=json.dumps(every)).partitions) == 4


def test_subscribe_to_a_missing_topic_fails(generated):
    """R25-4: subscribe=nosuch read 0 rows with no word; Spark's Kafka source fails."""
    with pytest.raises(InvalidInput) as caught:
        plan(generated, subscribe="orders,nosuch")
    assert str(caught.value) == ("UnknownTopicOrPartitionException: This server does not host this topic-partition: "
                                 f"no topic nosuch in {generated}")


def test_negative_times_are_earliest_and_latest_as_in_spark(generated):
    """R25-2: -2 is earliest and -1 latest in startingTimestamp/endingTimestamp and the by-timestamp JSON
    (Spark looks times up with Kafka's ListOffsets); another negative time matches no offset."""
    every = read_plan(plan(generated, subscribe="orders"))
    assert len(every) == 2000
    assert read_plan(plan(generated, subscribe="orders", startingTimestamp="-2")) == every
    assert read_plan(plan(generated, subscribe="orders", endingTimestamp="-1")) == every
    assert read_plan(plan(generated, subscribe="orders",
                          startingOffsetsByTimestamp=json.dumps({"orders": {"0": -2, "1": -2}}),
                          endingOffsetsByTimestamp=json.dumps({"orders": {"0": -1, "1": -1}}))) == every
    assert read_plan(plan(generated, subscribe="orders", startingTimestamp="-1")) == []
    assert read_plan(plan(generated, subscribe="orders", endingTimestamp="-2")) == []
    with pytest.raises(InvalidInput, match="No offset matched from request of topic-partition orders-0 and timestamp -5"):
        plan(generated, subscribe="orders", startingTimestamp="-5")
    stream = parse_read_options({"path": str(generated), "subscribe": "orders", "startingTimestamp": "-2"},
                                streaming=True)
    assert initial_offsets(stream) == {("orders", 0): 0, ("orders", 1): 0}


def test_a_bad_time_names_its_own_option():
    """R25-2: endingOffsetsByTimestamp's errors named endingTimestamp."""
    with pytest.raises(InvalidInput, match="^option endingOffsetsByTimestamp: "):
        parse_read_options({"path": "/x", "endingOffsetsByTimestamp": '{"a": {"0": "x"}}'})
    with pytest.raises(InvalidInput, match="^option startingOffsetsByTimestamp: "):
        parse_read_options({"path": "/x", "startingOffsetsByTimestamp": '{"a": {"0": 1.5}}'})


def test_a_start_past_the_end_has_spark_4s_message(generated):
    """R25-3: Spark 4's KafkaSourceRDD text, not Spark 3's "Beginning offset N is after the ending offset"."""
    with LogDir(generated) as ld:
        end = ld.log("orders-0").log_end_offset
    with pytest.raises(InvalidInput) as caught:
        plan(generated, subscribe="orders", startingOffsets=json.dumps({"orders": {"0": end + 5, "1": -2}}))
    assert str(caught.value) == (
        f"The resolved start offset {end + 5} is greater than the resolved end offset {end} for topic orders "
        "partition 0. Please investigate in this order: 1. Check whether start offset is set beyond the end offset "
        "or the latest available offset after resolution. Possible inputs are: (a) Start offset is set to a "
        "timestamp, and the end offset is set to an index of offset. (b) Start offset is set to an index of offset, "
        "and the end offset is set to a timestamp. (c) Start offset is set, and the end offset is set to latest. "
        "2. Check whether the Kafka topic-partition is deleted and re-created.")
