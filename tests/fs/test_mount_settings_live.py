"""A read-only mount follows the topic settings a KRaft broker records (review13 R13-4; SPEC §8): a
``ConfigRecord`` appended to ``__cluster_metadata-0`` after the mount started (``kafka-configs --alter``,
a topic created with its own settings; a null value deletes a setting: back to the default) shows in
``partition.json`` within about a second. tests/broker/test_settings_vs_kafka.py does it beside a real
broker."""

from __future__ import annotations

import os
import shutil
import time

import orjson
import pytest

from kafkafs.format.encode import encode_batch
from tests.fs.views.test_schemas_change import _append
from tests.storage.test_kraft import _config, _uuid

pytestmark = pytest.mark.fuse

if not os.path.exists("/dev/fuse") or shutil.which("fusermount3") is None:
    pytest.skip("FUSE is not available", allow_module_level=True)


def _metadata(meta, base_offset: int, *records: bytes) -> int:
    with open(meta / f"{0:020d}.log", "ab") as f:
        f.write(encode_batch([(1, None, v, ()) for v in records], base_offset=base_offset))
    return base_offset + len(records)


def _shown_within(path, settings: dict, seconds: float) -> float:
    start = time.monotonic()
    while True:
        config = orjson.loads(path.read_bytes())["config"]
        if all(config[k] == v for k, v in settings.items()):
            return time.monotonic() - start
        assert time.monotonic() < start + seconds, {k: config[k] for k in settings}
        time.sleep(0.02)


def test_partition_json_shows_the_settings_recorded_after_the_mount_started(mounted, tmp_path):
    from kafkafs.format.decoders.internal import metadata_frame

    logdir = tmp_path / "logs"
    logdir.mkdir()
    for name in ("a-0", "b-0"):
        _append(logdir, name, [(b"k", b"v")])
    meta = logdir / "__cluster_metadata-0"
    meta.mkdir()
    end = _metadata(meta, 0, metadata_frame("TOPIC_RECORD", 0, {"name": "a", "topicId": _uuid(1)}),
                    _config("a", "retention.ms", "1000"))
    m = mounted(logdir)
    a, b = m / "a-0" / "partition.json", m / "b-0" / "partition.json"
    assert orjson.loads(a.read_bytes())["config"]["retention.ms"] == 1000
    assert orjson.loads(b.read_bytes())["config"]["max.message.bytes"] == 1048588
    _metadata(meta, end, _config("a", "retention.ms", None), _config("a", "cleanup.policy", "compact"),
              metadata_frame("TOPIC_RECORD", 0, {"name": "b", "topicId": _uuid(2)}),
              _config("b", "max.message.bytes", "5000"))
    took = _shown_within(a, {"retention.ms": 7 * 24 * 3600 * 1000, "cleanup.policy": "compact"}, 3.0)
    assert took < 3.0  # (about a second: a margin for a loaded machine)
    _shown_within(b, {"max.message.bytes": 5000}, 1.0)
