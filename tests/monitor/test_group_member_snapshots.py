"""The group member's snapshots (issue 18, review findings 1, 2, 4, 5 of
``MonitorGroupMember``): a takeover read holds the old owner's snapshot until the reader's own
is out, and gives it back when the reader stops, dies or loses the shard; ``stop()`` joins the
takeovers and leaves a last snapshot; paused topics are in the snapshots (and paused again by
the next owner); ActiveMQ's state queue does not keep a snapshot per period for a minute.
Real brokers, bounded waits."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

import heartwire as hw
from heartwire.groups import (
    MonitorGroupMember,
    ShardLayout,
    ShardSnapshot,
    TopicRecord,
    decode_snapshot,
    encode_snapshot,
    publish_snapshot,
    read_snapshot,
)
from heartwire.transport.stomp import StompTransport
from tests import brokers as B
from tests.brokers import brokers  # noqa: F401  (the session fixture)
from tests.monitor.group_util import KEY
from tests.monitor.group_util import close as _close
from tests.monitor.group_util import connect as _transport
from tests.monitor.group_util import new_layout as _layout
from tests.monitor.group_util import new_member as _member
from tests.monitor.group_util import wait as _wait


def _takeover_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("heartwire-group-takeover-")]


# -- the snapshot format: the paused flag ----------------------------------------------------


def test_a_paused_record_round_trips_and_older_rows_stay_readable() -> None:
    lay = ShardLayout("g", 1)
    recs = (
        TopicRecord("svc.a"),
        TopicRecord("svc.b", paused=True),
        TopicRecord("svc.c", 1_700_000_000.0, 2, None, 1.0, alerted=False, paused=True),
    )
    body = encode_snapshot(ShardSnapshot(lay, 0, "m", 1, 1_700_000_001.0, recs))
    rows = json.loads(body)["topics"]
    assert rows[0] == ["svc.a", None, 0, None, None]  # unchanged for a plain record
    assert rows[1] == ["svc.b", None, 0, None, None, None, True]  # marks null, then paused
    assert rows[2][5] == [False, False, None, False] and rows[2][6] is True
    got = decode_snapshot(body, lay, 0, max_age=None)
    assert got.topics == recs
    # A row of a decoder before `paused` (6 elements) decodes unpaused.
    old = body.replace(b",[false,false,null,false],true]", b",[false,false,null,false]]")
    assert [t.paused for t in decode_snapshot(old, lay, 0, max_age=None).topics] == [
        False,
        True,
        False,
    ]
    other = body.replace(b"null,null,true]", b'null,null,"yes"]')  # not true: not paused
    assert [t.paused for t in decode_snapshot(other, lay, 0, max_age=None).topics][1] is False


# -- finding 1: the snapshot read by a member that loses the shard mid-read ---------------------


@pytest.mark.usefixtures("brokers")
@pytest.mark.parametrize("broker", ["activemq", "rabbitmq"])
def test_a_snapshot_read_by_a_member_stopping_mid_read_reaches_the_next_owner(
    broker: str,
) -> None:
    """The state queue holds the old owner's snapshot naming ``svc.dead``. Member a takes the
    shard over and stops while its read is under way: the read ends, gives the snapshot back,
    and b (the next owner) learns ``svc.dead``. (Before the fix a's read took it off the queue
    and dropped it: b read an empty queue.)"""
    lay = _layout(broker, 1)
    feeder = _transport(broker)
    a = b = None
    try:
        old = ShardSnapshot(lay, 0, "old", 1, time.time(), (TopicRecord("svc.dead"),))
        publish_snapshot(feeder, old, KEY, ttl=60, timeout=5)
        a = _member(broker, lay, "a")
        _wait("a to take shard 0 over", lambda: a is not None and a.takeovers >= 1)
        assert _takeover_threads(), "a's read was expected to be still under way"
        a.stop()
        assert not [t for t in _takeover_threads() if t.is_alive()]
        b = _member(broker, lay, "b")
        _wait("b to take shard 0 over", lambda: b is not None and b.takeovers >= 1)
        _wait(
            "b to learn svc.dead from the shard's snapshot",
            lambda: b is not None and "svc.dead" in b.monitor,
            8.0,
        )
    finally:
        _close(*[m for m in (a, b) if m is not None])
        feeder.close()


@pytest.mark.usefixtures("brokers")
@pytest.mark.parametrize("broker", ["activemq", "rabbitmq"])
def test_a_member_stopping_after_its_read_hands_the_state_on(broker: str) -> None:
    """The read done and adopted, a's own snapshot (with ``svc.dead`` and a topic of its own)
    replaces the old one, which a consumes: b learns both, and the queue is not left with the
    old owner's snapshot next to a's (ActiveMQ)."""
    lay = _layout(broker, 1)
    feeder = _transport(broker)
    a = b = None
    try:
        old = ShardSnapshot(lay, 0, "old", 1, time.time(), (TopicRecord("svc.dead"),))
        publish_snapshot(feeder, old, KEY, ttl=60, timeout=5)
        a = _member(broker, lay, "a")
        _wait("a to adopt svc.dead", lambda: a is not None and "svc.dead" in a.monitor)
        _wait("a's read to end", lambda: not _takeover_threads())
        a.monitor.expect("svc.mine")
        a.stop()  # its last snapshot, with svc.mine
        b = _member(broker, lay, "b")
        _wait(
            "b to learn svc.dead and svc.mine",
            lambda: b is not None and "svc.dead" in b.monitor and "svc.mine" in b.monitor,
            8.0,
        )
        assert b.taken and b.taken[0][1] == "a", f"b read {list(b.taken)}, not a's snapshot"
    finally:
        _close(*[m for m in (a, b) if m is not None])
        feeder.close()


def _spawn_member(broker: str, lay: ShardLayout, out: Path) -> subprocess.Popen[bytes]:
    root = Path(__file__).resolve().parents[2]
    # the heartwire this process imported (a clean clone's python/ has no compiled core: CI
    # installs it), and the repository for tests.monitor.group_helper
    where = os.path.dirname(os.path.dirname(hw.__file__))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([where, str(root)]))
    argv = ["member", "--url", B.url(broker) + "?heartbeat=1", "--group", lay.group]
    argv += ["--shards", str(lay.shards), "--out", str(out), "--name", "a"]
    return subprocess.Popen(
        [sys.executable, "-m", "tests.monitor.group_helper", *argv],
        cwd=root,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


@pytest.mark.usefixtures("brokers")
@pytest.mark.parametrize("broker", ["activemq", "rabbitmq"])
def test_a_snapshot_read_by_a_member_killed_mid_read_reaches_the_next_owner(
    broker: str, tmp_path: Path
) -> None:
    """As above with the reader a member process killed (-9) mid-read, as in a cascade: a owns
    the shard and its read waits (up to 2 s) for a first snapshot; 0.6 s on the old owner's
    comes, and
    a is killed 0.1 s later, within the 0.2 s of quiet its read waits for after one. What it
    took was unacknowledged: the broker redelivers it, and the next owner learns the dead
    topic. (Before: taken off the queue, it died with a.) The topic is in the helper's
    pattern (``<group>.>``)."""
    lay = _layout(broker, 1)
    feeder = _transport(broker)
    out = tmp_path / "a.jsonl"
    dead = f"{lay.group}.dead"
    proc = _spawn_member(broker, lay, out)
    b = None
    try:

        def owns() -> bool:
            rows = [json.loads(x) for x in out.read_text().splitlines()] if out.exists() else []
            return any(r["event"] == "owned" and r["shards"] == [0] for r in rows)

        _wait("the member process to own shard 0", owns, 30)
        time.sleep(0.6)  # its worker (every 0.25 s) has started the read: subscribed, waiting
        # Stopped, then given the snapshot (the broker writes it to its socket), then killed:
        # within its read, whatever the machine's load.
        os.kill(proc.pid, signal.SIGSTOP)
        old = ShardSnapshot(lay, 0, "old", 1, time.time(), (TopicRecord(dead),))
        publish_snapshot(feeder, old, None, ttl=60, timeout=5)
        time.sleep(0.3)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)
        mon = hw.HeartbeatMonitor(None, f"{lay.group}.>", period=0.5)
        b = MonitorGroupMember(_transport(broker), mon, lay, member="b").start()
        _wait("b to take shard 0 over", lambda: b is not None and b.takeovers >= 1)
        _wait(
            f"b to learn {dead} from the shard's snapshot",
            lambda: b is not None and dead in b.monitor,
            8.0,
        )
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if b is not None:
            _close(b)
        feeder.close()


# -- finding 5: stop() joins the takeovers ----------------------------------------------------


@pytest.mark.usefixtures("brokers")
def test_stop_leaves_no_takeover_thread_running() -> None:
    lay = _layout("activemq", 2)
    a = _member("activemq", lay, "a")
    try:
        _wait("a to take its shards over", lambda: a.takeovers >= 2)
        t0 = time.monotonic()
        a.stop()
        took = time.monotonic() - t0
        alive = [t.name for t in _takeover_threads() if t.is_alive()]
        assert alive == [], f"threads of the stopped member still running: {alive}"
        assert took < 5.0, f"stop took {took:.1f} s"
    finally:
        a.stop()
        a.transport.close()


# -- finding 2: paused topics in the snapshots --------------------------------------------------


@pytest.mark.usefixtures("brokers")
def test_a_paused_failed_topic_is_in_the_shard_snapshot() -> None:
    lay = _layout("activemq", 1)
    a = _member("activemq", lay, "a", period=0.3)
    reader = _transport("activemq")
    try:
        _wait("a to own shard 0 and read its snapshot", lambda: a.takeovers >= 1)
        _wait("the takeover read to end", lambda: not _takeover_threads())
        a.monitor.expect("svc.dead")
        a.monitor.expect("svc.other")
        _wait("svc.dead to fail", lambda: a.monitor.status("svc.dead").state == "FAILED", 5)
        a.monitor.pause("svc.dead")
        time.sleep(0.9)  # 3 periods: snapshots with the topic paused
        snap, _ = read_snapshot(reader, lay, 0, KEY, wait=3.0, quiet=0.5)
        assert snap is not None and snap.member == "a"
        paused = {t.topic: t.paused for t in snap.topics}
        assert paused == {"svc.dead": True, "svc.other": False}, paused
    finally:
        _close(a)
        reader.close()


@pytest.mark.usefixtures("brokers")
def test_a_paused_monitor_publishes_its_topics_in_the_shard_snapshot() -> None:
    """The whole monitor paused (a pause broadcast to every member): its topics stay in the
    snapshots, not paused by name (the next owner gets the group's pause itself)."""
    lay = _layout("activemq", 1)
    a = _member("activemq", lay, "a", period=0.3)
    reader = _transport("activemq")
    try:
        _wait("a to own shard 0 and read its snapshot", lambda: a.takeovers >= 1)
        _wait("the takeover read to end", lambda: not _takeover_threads())
        a.monitor.expect("svc.one")
        a.monitor.expect("svc.two")
        a.monitor.pause()
        time.sleep(0.9)  # 3 periods paused
        snap, _ = read_snapshot(reader, lay, 0, KEY, wait=3.0, quiet=0.5)
        assert snap is not None
        paused = {t.topic: t.paused for t in snap.topics}
        assert paused == {"svc.one": False, "svc.two": False}, paused
    finally:
        _close(a)
        reader.close()


@pytest.mark.usefixtures("brokers")
def test_the_next_owner_adopts_a_paused_topic_and_pauses_it() -> None:
    """A snapshot with a paused topic and a paused FAILED one: the member taking the shard over
    watches both, paused, nothing refused; resumed, the FAILED one keeps its outage."""
    lay = _layout("activemq", 1)
    feeder = _transport("activemq")
    a = None
    try:
        since = time.time() - 5.0
        recs = (
            TopicRecord("svc.quiet", paused=True),
            TopicRecord("svc.down", since, 3, None, 0.5, paused=True),
        )
        publish_snapshot(feeder, ShardSnapshot(lay, 0, "old", 1, time.time(), recs), KEY, ttl=60)
        a = _member("activemq", lay, "a")
        _wait("a to adopt both", lambda: "svc.quiet" in a.monitor and "svc.down" in a.monitor)
        _wait("a's read to end", lambda: not _takeover_threads())
        states = {t: a.monitor.status(t).state for t in ("svc.quiet", "svc.down")}
        assert states == {"svc.quiet": "PAUSED", "svc.down": "PAUSED"}, states
        assert a.refused == 0
        a.monitor.resume("svc.down")
        st = a.monitor.status("svc.down")
        assert st.state == "FAILED" and st.wall_failed_since == pytest.approx(since, abs=0.01)
    finally:
        if a is not None:
            _close(a)
        feeder.close()


# -- finding 4: ActiveMQ's state queue ----------------------------------------------------------


@pytest.mark.usefixtures("brokers")
def test_activemq_state_queue_does_not_keep_a_snapshot_per_period() -> None:
    """Periodic snapshots live ``periodic_snapshot_ttl`` (here 1 s), the stop's last one
    ``snapshot_ttl``: 1.5 s after a stop, after 3 s of snapshots every 0.2 s (15 or more), the
    queue gives the last one alone (before: every one of them, for 60 s)."""
    lay = _layout("activemq", 1)
    a = _member("activemq", lay, "a", period=0.2, periodic_snapshot_ttl=1.0)
    reader = _transport("activemq")
    try:
        _wait("a to own shard 0", lambda: a.takeovers >= 1)
        a.monitor.expect("svc.one")
        time.sleep(3.0)  # 15 periods
    finally:
        _close(a)
    time.sleep(1.5)
    got: list[bytes] = []
    lock = threading.Lock()

    def take(_link: object, message: object) -> None:
        with lock:
            got.append(message.body)  # type: ignore[attr-defined]

    sub = reader.subscribe_destination(f"/queue/{lay.queue(0)}.state", take, confirm=3.0)
    try:
        time.sleep(1.0)
    finally:
        sub.cancel()
        reader.close()
    assert len(got) == 1, f"{len(got)} snapshots of one shard held by the broker"
    snap = decode_snapshot(got[0], lay, 0, KEY)
    assert snap.member == "a" and [t.topic for t in snap.topics] == ["svc.one"]


@pytest.mark.usefixtures("brokers")
def test_a_paused_monitor_takes_a_failed_topic_over_as_a_fresh_start() -> None:
    """The member's monitor paused as a whole (the group's pause): the core carries no outage
    to a paused topic, so a FAILED record comes in as a fresh start, paused (before: refused,
    the topic forgotten); resumed, it is PENDING."""
    lay = _layout("activemq", 1)
    feeder = _transport("activemq")
    mon = hw.HeartbeatMonitor(None, "svc.>", period=0.5)
    mon.start()
    mon.pause()
    a = None
    try:
        recs = (TopicRecord("svc.down", time.time() - 5.0, 3, None, 0.5),)
        publish_snapshot(feeder, ShardSnapshot(lay, 0, "old", 1, time.time(), recs), KEY, ttl=60)
        a = MonitorGroupMember(_transport("activemq"), mon, lay, member="a", key=KEY).start()
        _wait("a to take svc.down over", lambda: "svc.down" in mon)
        assert mon.status("svc.down").state == "PAUSED" and a.refused == 0
        mon.resume()
        assert mon.status("svc.down").state == "PENDING"
    finally:
        if a is not None:
            _close(a)
        feeder.close()


@pytest.mark.usefixtures("brokers")
def test_a_member_owning_its_shard_again_with_an_empty_state_queue_carries_on() -> None:
    """A member whose connection is lost (hung longer than its periodic snapshots live, then
    dropped) owns its shard again on the new connection, but the state queue is empty: its own
    snapshots expired. It carries on from the last snapshot it published (the outage kept,
    same since), not from nothing (before: the FAILED topic was swept and never heard of again;
    the takeover test on ActiveMQ lost stopped topics this way after the SIGSTOP)."""
    lay = _layout("activemq", 1)
    t = hw.connect(B.url("activemq") + "?heartbeat=1&reconnect_interval=0.3")
    assert isinstance(t, StompTransport)
    mon = hw.HeartbeatMonitor(None, "svc.>", period=0.5)
    # Periodic snapshots live 50 ms: expired by the time the new connection reads the queue.
    a = MonitorGroupMember(t, mon, lay, member="a", key=KEY, periodic_snapshot_ttl=0.05)
    a.start()
    try:
        _wait("a to own shard 0", lambda: a.takeovers >= 1 and len(a.taken) >= 1)
        mon.expect("svc.dead")
        _wait("svc.dead to fail", lambda: mon.status("svc.dead").state == "FAILED")
        since = mon.wall_time(mon.status("svc.dead").failed_since)
        time.sleep(1.0)  # two periods: a snapshot with the outage published (and expired)
        link = t.current_link
        assert link is not None
        link.abort("test: connection lost")
        _wait("a to take shard 0 over again", lambda: len(a.taken) >= 2, 15)
        _wait("the takeover read to end", lambda: not _takeover_threads(), 10)
        _shard, by, topics, failed, _at = a.taken[-1]
        assert (by, topics, failed) == ("a", 1, 1), a.taken
        st = mon.status("svc.dead")
        assert st.state == "FAILED"
        assert st.failed_since is not None
        assert abs(mon.wall_time(st.failed_since) - since) < 0.01
    finally:
        _close(a)
