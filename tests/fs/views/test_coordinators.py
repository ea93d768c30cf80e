"""groups/, transactions/ and transactions.json as views: the storage models rendered, kept until their
topics change."""

from __future__ import annotations

import orjson

from kafkafs.fs.views.coordinators import Coordinators
from kafkafs.fs.views.partition import PartitionState
from kafkafs.storage.groups import read_groups
from kafkafs.storage.logdir import LogDir
from kafkafs.storage.txnstate import read_transaction_ids

from ...storage.groupslogs import classic_group, commit_key, commit_value
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
