"""The systemd notification protocol, without libsystemd.

A service started with ``Type=notify`` tells systemd that it is ready (``READY=1``), that it is going
down (``STOPPING=1``), what it is doing (``STATUS=...``) or that it is alive (``WATCHDOG=1``) by sending
one datagram to the unix socket named in ``$NOTIFY_SOCKET``. Outside systemd the variable is unset and
every call here is a cheap no-op, so callers never need to ask whether they run under systemd.

Sending never raises: a missing or unreachable socket must not take a working mount down, so failures
are logged at debug level and reported as ``False``.
"""

from __future__ import annotations

import logging
import os
import socket

log = logging.getLogger(__name__)

#: Bounds the time one notification can block the caller (the trio loop, typically) if systemd's
#: receive queue is full; libsystemd blocks without limit.
SEND_TIMEOUT = 1.0


def _socket_address(value: str) -> str | None:
    """The address to send to: an absolute path, or '@name' for the abstract namespace."""
    if value.startswith("@"):
        return "\0" + value[1:]
    if value.startswith("/"):
        return value
    # systemd >= 253 may also hand out "vsock:CID:PORT" (for VMs); kafkafs has no use for it.
    return None


def notify(state: str) -> bool:
    """Send ``state`` (e.g. ``"READY=1"`` or ``"READY=1\\nSTATUS=mounted"``) to ``$NOTIFY_SOCKET``.

    Returns True when the datagram was sent, False when there is nowhere to send it or sending failed.
    """
    value = os.environ.get("NOTIFY_SOCKET")
    if not value:
        return False
    address = _socket_address(value)
    if address is None:
        log.debug("NOTIFY_SOCKET=%r is not a unix socket address; not notifying %r", value, state)
        return False
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
            sock.settimeout(SEND_TIMEOUT)
            sock.sendto(state.encode("utf-8"), address)
    except OSError as exc:
        log.debug("could not notify systemd at %r of %r: %s", value, state, exc)
        return False
    return True


def watchdog_interval() -> float | None:
    """The watchdog period in seconds that systemd expects ``WATCHDOG=1`` within, or None if none.

    Mirrors sd_watchdog_enabled(): ``$WATCHDOG_USEC`` sets the period, and ``$WATCHDOG_PID``, when set,
    must be this process (the variables leak into children otherwise). Ping at half the period.
    """
    usec = os.environ.get("WATCHDOG_USEC")
    if not usec:
        return None
    pid = os.environ.get("WATCHDOG_PID")
    try:
        if pid and int(pid) != os.getpid():
            return None
        period = int(usec)
    except ValueError:
        log.debug("ignoring malformed WATCHDOG_USEC=%r / WATCHDOG_PID=%r", usec, pid)
        return None
    return period / 1_000_000 if period > 0 else None
