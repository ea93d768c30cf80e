"""Settings files as people write them."""

import pytest

from kafkafs.errors import ConfigError
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


def test_a_value_of_the_wrong_toml_type_is_one_usage_error(tmp_path):
    # an array, a table or a date where a number is due was a TypeError traceback (exit 1)
    import subprocess
    import sys

    import pytest

    from kafkafs.errors import ConfigError

    (tmp_path / "logs").mkdir()
    for i, text in enumerate(['"segment.bytes" = [1]\n', '[topics."orders"]\n"segment.bytes" = [1]\n',
                              '"retention.ms" = 2026-11-21\n', '"min.cleanable.dirty.ratio" = [0.5]\n']):
        path = tmp_path / f"k{i}.toml"
        path.write_text(text)
        with pytest.raises(ConfigError, match=r"is not (an integer|a number)"):
            Settings.load(path)
    proc = subprocess.run(
        [sys.executable, "-m", "kafkafs.cli", "verify", str(tmp_path / "logs"), "--config", str(tmp_path / "k1.toml")],
        capture_output=True, timeout=60,
    )
    err = proc.stderr.decode()
    assert proc.returncode == 2 and "Traceback" not in err
    assert err == "kafkafs: error: segment.bytes: [1] is not an integer\n"


def test_an_empty_cleanup_policy_is_no_cleanup(tmp_path):
    """review9 R9-1: an empty cleanup.policy is Kafka 4's "no cleanup" (neither delete nor compact), from
    --set, a TOML string or an empty TOML list; a part that is neither stays an error."""
    from kafkafs.storage.config import parse_set_options

    for config in (
        Settings(parse_set_options(["cleanup.policy="])).for_topic("t"),
        Settings(None, {"t": {"cleanup.policy": []}}).for_topic("t"),
        Settings({"cleanup.policy": " "}).for_topic("t"),
    ):
        assert (config.cleanup_policy, config.delete, config.compact) == ("", False, False)
    with pytest.raises(ConfigError, match="cleanup.policy"):
        Settings({"cleanup.policy": "delete,forever"})
