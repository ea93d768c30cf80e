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


def test_a_settings_file_that_is_not_utf8_is_one_usage_error(tmp_path):
    # tomllib decodes the bytes itself: a binary or Latin-1 file was a UnicodeDecodeError traceback
    import subprocess
    import sys

    path = tmp_path / "kafkafs.toml"
    path.write_bytes(b'"segment.bytes" = 100\n# caf\xe9\n')
    (tmp_path / "logs").mkdir()
    proc = subprocess.run(
        [sys.executable, "-m", "kafkafs.cli", "verify", str(tmp_path / "logs"), "--config", str(path)],
        capture_output=True, timeout=60,
    )
    err = proc.stderr.decode()
    assert proc.returncode == 2 and "Traceback" not in err
    assert err.count("\n") == 1 and "UTF-8" in err and str(path) in err
