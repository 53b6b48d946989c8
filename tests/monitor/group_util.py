"""What the group member tests share: a group on a real broker, members in this process,
bounded waits."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest

import heartwire as hw
from heartwire.groups import MonitorGroupMember, ShardLayout, declare_rabbitmq
from heartwire.transport.stomp import StompTransport
from tests import brokers as B

#: The group's key: snapshots and status messages are signed with it.
KEY = b"group-key"


def wait(what: str, cond: Callable[[], bool], timeout: float = 10.0) -> None:
    """Until ``cond()``, at most ``timeout`` seconds (then an AssertionError naming ``what``)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.02)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def new_layout(broker: str, shards: int) -> ShardLayout:
    """A fresh group of ``shards`` shards watching ``svc.>`` (declared on RabbitMQ)."""
    lay = ShardLayout(f"hwg{uuid.uuid4().hex[:8]}", shards)
    if broker == "rabbitmq":
        pytest.importorskip("pika")
        declare_rabbitmq(lay, "svc.>", expires=60)
    return lay


def connect(broker: str) -> StompTransport:
    t = hw.connect(B.url(broker) + "?heartbeat=1")
    assert isinstance(t, StompTransport)
    return t


def new_member(
    broker: str,
    lay: ShardLayout,
    name: str,
    period: float = 0.5,
    start: bool = True,
    **kw: Any,
) -> MonitorGroupMember:
    """A member of ``lay`` on its own connection, its monitor watching ``svc.>``."""
    mon = hw.HeartbeatMonitor(None, "svc.>", period=period)
    m = MonitorGroupMember(connect(broker), mon, lay, member=name, key=KEY, **kw)
    return m.start() if start else m


def close(*members: MonitorGroupMember) -> None:
    for m in members:
        m.stop()
        m.transport.close()
