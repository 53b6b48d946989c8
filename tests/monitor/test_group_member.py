"""MonitorGroupMember in one process on the real brokers (the takeover with real processes is
test_group_takeover_processes.py): ownership learned from the ticks (which the native path
leaves to the member), group_status, bad arguments, forged status messages."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import heartwire as hw
from heartwire.beat import BeatCodec
from heartwire.groups import (
    GroupStatus,
    MemberStatus,
    MonitorGroupMember,
    ShardLayout,
    SnapshotError,
    _decode_status,
    _encode_status,
    declare_rabbitmq,
    group_status,
    shard_destination,
    status_topic,
)
from heartwire.transport.dialect import ACTIVEMQ, RABBITMQ
from heartwire.transport.stomp import StompTransport
from tests import brokers as B
from tests.brokers import brokers  # noqa: F401  (the session fixture)

KEY = b"group-key"


def _wait(what: str, cond: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


@pytest.fixture
def layout(request: pytest.FixtureRequest) -> Iterator[tuple[str, ShardLayout]]:
    broker = request.param
    lay = ShardLayout(f"hwt{uuid.uuid4().hex[:8]}", 4)
    if broker == "rabbitmq":
        pytest.importorskip("pika")
        declare_rabbitmq(lay, "svc.>", expires=60)
    yield broker, lay


def _member(broker: str, layout: ShardLayout, name: str) -> MonitorGroupMember:
    t = hw.connect(B.url(broker) + "?heartbeat=1")
    assert isinstance(t, StompTransport)
    mon = hw.HeartbeatMonitor(None, "svc.>", period=0.5)
    return MonitorGroupMember(t, mon, layout, member=name, key=KEY).start()


def _close(*members: MonitorGroupMember) -> None:
    for m in members:
        m.stop()
        m.transport.close()


@pytest.mark.usefixtures("brokers")
@pytest.mark.parametrize("layout", ["activemq", "rabbitmq"], indirect=True)
def test_a_tick_reaches_the_handler_and_shards_are_shared(layout: tuple[str, ShardLayout]) -> None:
    """No beat at all: a lone member learns it owns every shard from the ticks alone (the
    native path defers them to it); a second member gets half once they have heard each
    other; group_status says who owns a topic's shard."""
    broker, lay = layout
    a = _member(broker, lay, "a")
    b = None
    try:
        _wait("a to own the 4 shards from its ticks", lambda: a.owned == frozenset(range(4)))
        b = _member(broker, lay, "b")
        _wait(
            "the shards shared 2 and 2",
            lambda: len(a.owned) == 2 and len(b.owned) == 2 and not a.owned & b.owned,
            15,
        )
        assert a.releases == 2 and set(a.members()) == {"a", "b"}
        st = group_status(a.transport, lay.group, key=KEY, wait=1.5)
        assert isinstance(st, GroupStatus) and set(st.members) == {"a", "b"}
        assert st.owners == {k: ("a" if k in a.owned else "b") for k in range(4)}
        shard, owner = st.owner_of("svc.db")
        assert shard == lay.shard_of("svc.db") and owner == st.owners[shard]
        # signed with the group's key: a reader without it hears nobody
        assert group_status(a.transport, lay.group, key=b"other", wait=1.0).members == {}
    finally:
        _close(a, *([b] if b else []))


def test_bad_arguments_are_named() -> None:
    lay = ShardLayout("payments", 4)
    t = hw.connect()  # the embedded broker: no StompTransport
    mon = hw.HeartbeatMonitor(None, "svc.>")
    with pytest.raises(TypeError, match="transport must be a StompTransport"):
        MonitorGroupMember(t, mon, lay)  # type: ignore[arg-type]
    t.close()
    assert shard_destination(lay, 3, RABBITMQ) == "/amq/queue/heartwire.payments.3"
    assert shard_destination(lay, 3, ACTIVEMQ) == "/queue/heartwire.payments.3"
    assert status_topic("payments") == "_hw.group.payments"


def test_a_status_message_is_checked() -> None:
    lay = ShardLayout("payments", 4)
    st = MemberStatus("m1", (0, 2), {"ALIVE": 3}, 1.0, 1764000000.0)
    body = _encode_status(lay, st, BeatCodec(KEY))
    assert _decode_status(body, lay, BeatCodec(KEY)) == st
    for bad, reason in [
        (_encode_status(lay, st, BeatCodec(b"x")), "bad_signature"),
        (_encode_status(lay, st, BeatCodec(None)), "unsigned"),
        (_encode_status(ShardLayout("other", 4), st, BeatCodec(KEY)), "other_group"),
        (_encode_status(lay, MemberStatus("m1", (9,), {}, 1.0, 0.0), BeatCodec(KEY)), "malformed"),
        (b"\xff", "not_utf8"),
    ]:
        with pytest.raises(SnapshotError) as info:
            _decode_status(bad, lay, BeatCodec(KEY))
        assert info.value.reason == reason


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(Path(hw.__file__).resolve().parents[1]))
    return subprocess.run(
        [sys.executable, "-m", "heartwire", "status", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )


@pytest.mark.usefixtures("brokers")
@pytest.mark.parametrize("layout", ["rabbitmq"], indirect=True)
def test_status_group_command(layout: tuple[str, ShardLayout]) -> None:
    """``heartwire status --broker URL --group NAME --topic T``: the members, their shards, and
    who owns T; exit 1 when no member speaks; 2 for a bad group name or no pattern at all."""
    broker, lay = layout
    a = _member(broker, lay, "a")
    try:
        _wait("a to own the 4 shards", lambda: a.owned == frozenset(range(4)))
        out = _cli(
            "--broker",
            B.url(broker),
            "--group",
            lay.group,
            "--key",
            KEY.decode(),
            "--topic",
            "svc.db",
            "--wait",
            "1.5",
        )
        assert out.returncode == 0, out.stderr
        shard = lay.shard_of("svc.db")
        assert f"group {lay.group}: 1 members, 4 shards, 4 owned" in out.stdout
        assert "  a: shards 0,1,2,3" in out.stdout
        assert f"  svc.db: shard {shard}, owner a" in out.stdout
    finally:
        _close(a)
    quiet = _cli("--broker", B.url(broker), "--group", lay.group, "--wait", "0.5")
    assert quiet.returncode == 1 and "no member heard" in quiet.stdout
    bad = _cli("--broker", B.url(broker), "--group", "bad group")
    assert bad.returncode == 2 and "--group" in bad.stderr
    none = _cli("--broker", B.url(broker))
    assert none.returncode == 2 and "a pattern (or --group NAME) is required" in none.stderr
