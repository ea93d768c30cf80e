"""sd_notify without libsystemd: real AF_UNIX datagram sockets, by path and in the abstract namespace."""

from __future__ import annotations

import logging
import os
import socket
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from kafkafs.fs.notify import notify, watchdog_interval


@pytest.fixture
def receiver(tmp_path: Path) -> Iterator[tuple[socket.socket, str]]:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    path = tmp_path / "notify.sock"
    sock.bind(str(path))
    sock.settimeout(2)
    yield sock, str(path)
    sock.close()


def test_unset_variable_is_a_noop(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NOTIFY_SOCKET", raising=False)
    assert notify("READY=1") is False
    monkeypatch.setenv("NOTIFY_SOCKET", "")
    assert notify("READY=1") is False


def test_sends_to_a_path_socket(monkeypatch: pytest.MonkeyPatch, receiver: tuple[socket.socket, str]) -> None:
    sock, path = receiver
    monkeypatch.setenv("NOTIFY_SOCKET", path)
    assert notify("READY=1\nSTATUS=mounted /var/lib/kafka on /mnt/kafka") is True
    assert sock.recv(4096) == b"READY=1\nSTATUS=mounted /var/lib/kafka on /mnt/kafka"
    assert notify("STOPPING=1") is True
    assert sock.recv(4096) == b"STOPPING=1"


def test_sends_to_an_abstract_socket(monkeypatch: pytest.MonkeyPatch) -> None:
    name = f"kafkafs-test-{uuid.uuid4().hex}"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind("\0" + name)
        sock.settimeout(2)
        monkeypatch.setenv("NOTIFY_SOCKET", "@" + name)
        assert notify("STATUS=caf\u00e9") is True
        assert sock.recv(4096) == "STATUS=caf\u00e9".encode()


@pytest.mark.parametrize("value", ["relative/notify.sock", "vsock:2:1234"])
def test_unsupported_addresses_are_ignored(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv("NOTIFY_SOCKET", value)
    assert notify("READY=1") is False


def test_missing_socket_does_not_raise(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("NOTIFY_SOCKET", str(tmp_path / "absent.sock"))
    with caplog.at_level(logging.DEBUG, logger="kafkafs.fs.notify"):
        assert notify("READY=1") is False
    assert [r.levelno for r in caplog.records] == [logging.DEBUG]


def test_socket_that_nobody_reads_from_any_more(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    path = tmp_path / "stale.sock"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(str(path))
    sock.close()  # the file stays, nobody listens: ECONNREFUSED
    monkeypatch.setenv("NOTIFY_SOCKET", str(path))
    assert notify("READY=1") is False


def test_abstract_socket_that_does_not_exist(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NOTIFY_SOCKET", f"@kafkafs-test-absent-{uuid.uuid4().hex}")
    assert notify("READY=1") is False


def test_watchdog_interval(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("WATCHDOG_USEC", raising=False)
    monkeypatch.delenv("WATCHDOG_PID", raising=False)
    assert watchdog_interval() is None
    monkeypatch.setenv("WATCHDOG_USEC", "30000000")
    assert watchdog_interval() == 30.0
    monkeypatch.setenv("WATCHDOG_PID", str(os.getpid()))
    assert watchdog_interval() == 30.0
    monkeypatch.setenv("WATCHDOG_PID", str(os.getpid() + 1))
    assert watchdog_interval() is None
    monkeypatch.setenv("WATCHDOG_PID", str(os.getpid()))
    for bad in ("0", "soon", "-5"):
        monkeypatch.setenv("WATCHDOG_USEC", bad)
        assert watchdog_interval() is None
