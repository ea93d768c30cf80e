"""review9 R9-9, readers: a partition folder that is a link to another partition folder of the same log
directory (``ln -s orders-0 LOGDIR/extra-0``) is the same log under a second name. Before, every reader
showed it twice (consume, verify, the mount, Spark's kafkalog), its records under both topics; writers
already refused it (1bb657f). Now readers leave it out and name it in one line: consume exits 2 when it
is what was asked (a path that is not a partition of its own), verify counts it as a problem (exit 1).
A broker loads such a folder as a log of its own over the same files (storage/partition_folders)."""

from __future__ import annotations

import json
import os
import shutil

import pytest

from .test_cli import run


@pytest.fixture(scope="module")
def aliased(tmp_path_factory):
    target = tmp_path_factory.mktemp("alias") / "logs"
    run("demo", str(target))
    os.symlink("orders-0", target / "extra-0")  # another topic
    os.symlink(target / "orders-1", target / "orders-7")  # the same topic, absolute
    return target


def _records(out: bytes) -> list[dict]:
    return [json.loads(line) for line in out.splitlines()]


def test_consume_of_an_alias_is_refused_in_one_line(aliased):
    out = run("consume", str(aliased), "extra-0", check_rc=2)
    err = out.stderr.decode()
    assert out.stdout == b"" and err.count("\n") == 1, err
    assert "extra-0: a link to orders-0, another partition folder of this log directory" in err
    out = run("consume", str(aliased), "extra", check_rc=2)  # the topic has nothing else
    assert out.stderr.decode().count("\n") == 1 and "extra-0: a link to orders-0" in out.stderr.decode()
    run("consume", str(aliased), "-t", "extra", "-p", "0", check_rc=2)


def test_consume_of_a_topic_reads_each_log_once(aliased):
    out = run("consume", str(aliased), "orders")
    records = _records(out.stdout)
    keys = [(r["partition"], r["offset"]) for r in records]
    assert len(keys) == len(set(keys)) and {p for p, _o in keys} == {0, 1}
    assert len(records) == len(_records(run("consume", str(aliased), "orders-0").stdout)) + len(
        _records(run("consume", str(aliased), "orders-1").stdout))
    err = out.stderr.decode()
    assert err.count("\n") == 1 and "orders-7: a link to orders-1" in err and "skipped" in err, err


def test_verify_names_the_alias_and_counts_the_log_once(aliased):
    out = run("verify", str(aliased), check_rc=1)
    lines = out.stdout.decode().splitlines()
    named = [line for line in lines if line.startswith(("extra-0:", "orders-7:"))]
    assert len(named) == 2 and all("another partition folder" in line for line in named), lines
    assert not [line for line in lines if "segment(s)" in line and line.startswith(("extra-0", "orders-7"))]
    assert out.stderr == b""
    assert run("verify", str(aliased), "--partition", "orders-0").returncode == 0
    only = run("verify", str(aliased), "--partition", "extra-0", check_rc=1).stdout.decode()
    assert only.startswith("extra-0: a link to orders-0") and only.count("\n") == 1, only


def test_writers_still_refuse_it(aliased, tmp_path):
    copy = tmp_path / "logs"
    shutil.copytree(aliased, copy, symlinks=True)
    os.unlink(copy / "orders-7")
    os.symlink(copy / "orders-1", copy / "orders-7")
    out = run("recover", str(copy), check_rc=1)
    refused = [line for line in out.stdout.decode().splitlines() if ": refused:" in line]
    assert {line.split(":")[0] for line in refused} == {"extra-0", "orders-7"}, refused
