"""Settings files as people write them."""

from kafkafs.storage.config import Settings


def test_unquoted_dotted_names_and_list_policies(tmp_path):
    path = tmp_path / "kafkafs.toml"
    path.write_text(
        'segment.bytes = 2000\n[topics."kv"]\n"cleanup.policy" = ["compact", "delete"]\nindex.interval.bytes = 100\n'
    )
    settings = Settings.load(path)
    kv = settings.for_topic("kv")
    assert (kv.segment_bytes, kv.cleanup_policy, kv.index_interval_bytes) == (2000, "compact,delete", 100)
    assert settings.for_topic("other").cleanup_policy == "delete"
