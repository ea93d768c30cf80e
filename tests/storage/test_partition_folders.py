"""storage/partition_folders: the partition folders of a log directory, and the aliases among them (a
link to another partition folder of the same directory: the same log under a second name, review9 R9-9)."""

from __future__ import annotations

import logging
import os

import pytest

from kafkafs.errors import InvalidName
from kafkafs.storage.logdir import LogDir
from kafkafs.storage.partition_folders import list_partition_folders


@pytest.fixture
def logdir(tmp_path):
    path = tmp_path / "logs"
    for name in ("t1-0", "t1-1", "t2-0"):
        (path / name).mkdir(parents=True)
    (path / "meta.properties").write_text("")
    (path / "not-a-partition").mkdir()
    return path


def test_without_links_nothing_is_an_alias(logdir):
    assert list_partition_folders(logdir) == (["t1-0", "t1-1", "t2-0"], {})


def test_a_link_to_another_partition_folder_is_an_alias(logdir):
    os.symlink("t1-0", logdir / "t9-0")
    os.symlink(logdir / "t2-0", logdir / "t1-2")  # absolute, same topic
    assert list_partition_folders(logdir) == (["t1-0", "t1-1", "t2-0"], {"t9-0": "t1-0", "t1-2": "t2-0"})


def test_a_link_out_of_the_directory_is_a_partition(logdir, tmp_path):
    # SPEC §3: partition folders may be links (to another disk); one name for one folder is no alias
    (tmp_path / "disk2" / "t1-0").mkdir(parents=True)
    os.symlink(tmp_path / "disk2" / "t1-0", logdir / "t3-0")
    os.symlink(logdir / "gone", logdir / "t4-0")  # dangling: not a folder
    assert list_partition_folders(logdir) == (["t1-0", "t1-1", "t2-0", "t3-0"], {})


def test_two_links_to_one_folder_outside(logdir, tmp_path):
    (tmp_path / "disk2" / "t5-0").mkdir(parents=True)
    os.symlink(tmp_path / "disk2" / "t5-0", logdir / "t5-0")
    os.symlink(tmp_path / "disk2" / "t5-0", logdir / "t6-0")
    assert list_partition_folders(logdir) == (["t1-0", "t1-1", "t2-0", "t5-0"], {"t6-0": "t5-0"})  # named as its folder


def test_a_missing_directory_raises(tmp_path):
    with pytest.raises(FileNotFoundError):
        list_partition_folders(tmp_path / "nope")


def test_logdir_names_an_alias_once_and_never_reads_it(logdir, caplog):
    os.symlink("t1-0", logdir / "t9-0")
    caplog.set_level(logging.WARNING)
    with LogDir(logdir) as d:
        assert d.partition_names() == ["t1-0", "t1-1", "t2-0"]
        assert d.partition_names(aliases=True) == ["t1-0", "t1-1", "t2-0", "t9-0"]
        said = [r.getMessage() for r in caplog.records]
        assert len(said) == 1 and "t9-0: a link to t1-0, another partition folder" in said[0], said
        assert d.alias_of("t9-0") == "t1-0" and d.alias_of("t1-0") is None
        with pytest.raises(InvalidName, match="t9-0: a link to t1-0"):
            d.log("t9-0")
    caplog.clear()
    with LogDir(logdir) as d:
        assert d.aliases() == {"t9-0": "t1-0"}  # its caller says it: no warning then
        d.partition_names()
        assert caplog.records == []
