"""Kafka's LogValidator rules for an append (storage/append_rules.py; the broker's own answers are in
tests/broker/test_append_rules_vs_kafka.py): a compacted topic takes only keyed records, a CreateTime
topic only timestamps within message.timestamp.before.max.ms / after.max.ms of now; one refused record
refuses the whole append, nothing written."""

from __future__ import annotations

import pytest

from kafkafs.errors import ConfigError, InvalidInput
from kafkafs.format.batch import encode_batch, encode_control_batch
from kafkafs.storage.append_rules import RecordRefused
from kafkafs.storage.config import LONG_MAX, Settings, parse_setting

from .helpers import Clock, config, open_log

NOW = 1_700_000_000_000
HOUR = 3600 * 1000


@pytest.mark.parametrize("policy", ["compact", "compact,delete", "delete,compact"])
def test_a_compacted_topic_takes_only_records_with_a_key(tmp_path, policy):
    log = open_log(tmp_path / "kv-0", config(cleanup_policy=policy), clock=Clock(NOW))
    log.append_records([(NOW, b"k", b"v", ()), (NOW, b"k", None, ()), (NOW, b"", b"empty key", ())])
    for rows in ([(NOW, None, b"no key", ())], [(NOW, None, None, ())],  # a tombstone needs a key too
                 [(NOW, b"a", b"1", ()), (NOW, None, b"2", ())]):
        with pytest.raises(RecordRefused, match="Compacted topic cannot accept message without key in topic "
                                                "partition kv-0") as info:
            log.append_records(rows)
        assert info.value.index == len(rows) - 1
    assert "tombstone" in str(pytest.raises(RecordRefused, log.append_records, [(NOW, None, None, ())]).value)
    assert log.log_end_offset == 3
    # a transaction's marker (a control record, its key always there) is taken
    log.append_batches(encode_batch([(NOW, b"t", b"x", ())], transactional=True, producer_id=7, producer_epoch=0,
                                    base_sequence=0))
    log.append_batches(encode_control_batch("COMMIT", producer_id=7, producer_epoch=0, timestamp=NOW))
    assert log.log_end_offset == 5


def test_one_refused_record_refuses_every_batch_given_at_once(tmp_path):
    log = open_log(tmp_path / "kv-0", config(cleanup_policy="compact"), clock=Clock(NOW))
    data = encode_batch([(NOW, b"a", b"1", ())]) + encode_batch([(NOW, b"b", b"2", ()), (NOW, None, b"3", ())])
    with pytest.raises(RecordRefused) as info:
        log.append_batches(data)
    assert info.value.index == 2 and log.log_end_offset == 0
    with pytest.raises(InvalidInput, match="^line 5: a record without a key"):  # a line is a record
        log.append_lines(b'{"key": "a", "value": 1}\nno key here', first_number=4)
    assert log.log_end_offset == 0 and log.size_in_bytes() == 0


def test_a_topic_that_is_not_compacted_takes_records_without_a_key(tmp_path):
    log = open_log(tmp_path / "t-0", config(), clock=Clock(NOW))
    log.append_lines(b"plain\n{\"value\": null}")
    assert log.log_end_offset == 2


def test_timestamps_more_than_an_hour_ahead_are_refused_by_default(tmp_path):
    # Kafka 4's defaults (KIP-1030): message.timestamp.after.max.ms 1 hour, before.max.ms unbounded
    assert config().message_timestamp_after_max_ms == HOUR
    assert config().message_timestamp_before_max_ms == LONG_MAX
    log = open_log(tmp_path / "t-0", config(), clock=Clock(NOW))
    log.append_records([(NOW + HOUR, None, b"at the bound", ()), (0, None, b"1970", ()), (-1, None, b"none", ())])
    with pytest.raises(RecordRefused, match=r"message.timestamp.after.max.ms=3600000 .*INVALID_TIMESTAMP"):
        log.append_records([(NOW, None, b"now", ()), (NOW + HOUR + 1, None, b"past the bound", ())])
    assert log.log_end_offset == 3


def test_timestamp_bounds_are_settable_per_topic(tmp_path):
    settings = Settings({"message.timestamp.after.max.ms": "0"},
                        {"old": {"message.timestamp.before.max.ms": 1000},
                         "any": {"message.timestamp.after.max.ms": LONG_MAX}})
    strict = open_log(tmp_path / "t-0", settings.for_topic("t"), clock=Clock(NOW))
    with pytest.raises(RecordRefused):
        strict.append_records([(NOW + 1, None, b"1 ms ahead", ())])
    old = open_log(tmp_path / "old-0", settings.for_topic("old"), clock=Clock(NOW))
    old.append_records([(NOW - 1000, None, b"1 s ago", ())])
    with pytest.raises(RecordRefused, match="message.timestamp.before.max.ms=1000 before now"):
        old.append_records([(NOW - 1001, None, b"too old", ())])
    anytime = open_log(tmp_path / "any-0", settings.for_topic("any"), clock=Clock(NOW))
    anytime.append_records([(9_999_999_999_999, None, b"2286", ())])
    with pytest.raises(ConfigError, match="below the minimum 0"):
        parse_setting("message.timestamp.after.max.ms", "-1")


def test_a_log_append_time_topic_takes_any_timestamp(tmp_path):
    log = open_log(tmp_path / "t-0", config(message_timestamp_type="LogAppendTime"), clock=Clock(NOW))
    log.append_records([(9_999_999_999_999, None, b"2286", ())])
    assert log.log_end_offset == 1
