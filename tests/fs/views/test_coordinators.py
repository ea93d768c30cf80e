"""groups/, transactions/ and transactions.json as views: the storage models rendered, kept until their
topics change."""

from __future__ import annotations

import logging

import orjson
import pytest

from kafkafs.errors import CorruptRecordError
from kafkafs.fs.views.coordinators import Coordinators
from kafkafs.fs.views.partition import PartitionState
from kafkafs.storage.logdir import LogDir

from ...storage.groupslogs import classic_group, commit_key, commit_value, read_groups, read_transaction_ids
from ...storage.test_replay import build_damaged
from ...storage.test_txnstate import build


def test_groups_and_transactions(tmp_path):
    logs = build(tmp_path)
    with LogDir(logs, writable=True) as logdir:
        offsets = logdir.create_partition("__consumer_offsets", 3)
        offsets.append_records([(1, *classic_group("g", 1, [("m", "c", {"t": [0]})]), ()),
                                (1, commit_key("g", "t", 0), commit_value(2), ())])
        c = Coordinators(logdir)
        assert c.has("__consumer_offsets") and c.has("__transaction_state") and not c.has("nope")
        assert c.groups() == ["g"]
        assert orjson.loads(c.group_json("g")) == read_groups(logdir)["g"]
        assert c.group_json("other") is None
        assert sorted(c.transaction_ids()) == sorted(read_transaction_ids(logdir))
        assert orjson.loads(c.transaction_json("app-3"))["state"] == "Ongoing"
        state = PartitionState("t-0", 0, logdir.log("t-0"), "auto")
        first = c.partition_transactions(state)
        assert c.partition_transactions(state) is first  # held: stat then open see the same bytes
        assert orjson.loads(first)["lastStableOffset"] == 7
        # a new commit: the lag follows the log end, the replay is made again
        offsets.append_records([(1, commit_key("g", "t", 0), commit_value(5), ())])
        assert orjson.loads(c.group_json("g"))["offsets"][0]["offset"] == 5


def test_damage_fails_only_the_files_that_need_it(tmp_path, caplog):
    """review6 F10: one damaged partition of each coordinator's topic; the files of the ids whose records
    lie there fail (EIO), every other file is served exact, and what the damage hides is logged once."""
    logs = build_damaged(tmp_path)
    with LogDir(logs) as logdir:
        c = Coordinators(logdir)
        with caplog.at_level(logging.ERROR, logger="kafkafs.fs"):
            assert c.groups() == ["a", "b", "d"] and c.groups() == ["a", "b", "d"]
            assert orjson.loads(c.group_json("a")) == read_groups(logdir)["a"]
            for g in ("b", "d"):
                with pytest.raises(CorruptRecordError):
                    c.group_json(g)
            assert c.transaction_ids() == ["app-3", "app-7"]
            assert orjson.loads(c.transaction_json("app-3"))["producerId"] == 3
            with pytest.raises(CorruptRecordError):
                c.transaction_json("app-7")
            t = orjson.loads(c.partition_transactions(PartitionState("t-0", 0, logdir.log("t-0"), "auto")))
            assert [o["hanging"] for o in t["open"]] == [False]
            v = orjson.loads(c.partition_transactions(PartitionState("v-0", 0, logdir.log("v-0"), "auto")))
            assert v["open"] == [] and v["lastStableOffset"] == 3
            with pytest.raises(CorruptRecordError):  # producer 7's coordinator record is in the damage
                c.partition_transactions(PartitionState("u-0", 0, logdir.log("u-0"), "auto"))
    said = [r.getMessage() for r in caplog.records]
    assert len(said) == 2, said  # once per damaged partition, however often it is asked
    assert said[0].startswith("__consumer_offsets-1: ") and "groups/: b, d fail with EIO" in said[0]
    assert said[1].startswith("__transaction_state-1: ") and "transactions/: app-7 fail with EIO" in said[1]
    # an id whose records all lie in the damaged bytes cannot be named: said (review6 F10 remainder)
    assert said[0].endswith("; the damaged bytes may hide more groups, which get no file"), said
    assert said[1].endswith("; the damaged bytes may hide more transactional ids, which get no file"), said
