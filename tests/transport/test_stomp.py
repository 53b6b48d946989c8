"""The STOMP transport against real brokers (scripts/brokers): no mocks.

ActiveMQ Classic on 61613 (and a standby on 61614) and RabbitMQ on 61623. Publishers and monitors
run on the real clock with a 0.2 s period; every wait is bounded and names what it waited for.
Tests that kill or pause a broker bring it back before they end (and every test first makes sure
the brokers it needs are up).
"""

from __future__ import annotations

import inspect
import re
import threading
import time
import uuid
from typing import Any

import pytest
import stomp

import heartwire as hw
from heartwire.transport import (
    ConnectFailed,
    Message,
    SendTimeout,
    StompTransport,
    TransportClosed,
    connect,
)
from tests import brokers as B
from tests.brokers import brokers, wait_for  # noqa: F401  (brokers: the session fixture)

pytestmark = pytest.mark.usefixtures("brokers")

PERIOD = 0.2
# Test-sized timings: heart-beats every second, reconnect attempts every 0.2 s.
FAST = "heartbeat=1&reconnect_interval=0.2&connect_timeout=2&keepalive_interval=0"
_GRACE = {"grace": 0.1} if "grace" in inspect.signature(hw.HeartbeatMonitor).parameters else {}


def uid() -> str:
    return "t" + uuid.uuid4().hex[:10]


class TimedLog:
    """Callbacks by kind, each with the monotonic time it arrived; thread-safe."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.events: list[tuple[str, float, Any]] = []

    def _add(self, kind: str, what: Any) -> None:
        with self.lock:
            self.events.append((kind, time.monotonic(), what))

    def of(self, kind: str, after: float = 0.0) -> list[tuple[float, Any]]:
        with self.lock:
            return [(t, e) for k, t, e in self.events if k == kind and t > after]


class Recorder(TimedLog, hw.SubscriberListener):
    """A monitor's events, with the monotonic time each arrived."""

    def on_failed(self, event: hw.Failed) -> None:
        self._add("failed", event)

    def on_resumed(self, event: hw.Resumed) -> None:
        self._add("resumed", event)

    def on_received(self, event: hw.Received) -> None:
        self._add("received", event)

    def on_exception(self, event: hw.ExceptionEvent) -> None:
        self._add("exception", event)

    def on_disconnected(self, event: hw.Disconnected) -> None:
        self._add("disconnected", event)

    def on_reconnected(self, event: hw.Reconnected) -> None:
        self._add("reconnected", event)


class Connections(TimedLog):
    """Connection listener: on_disconnected / on_reconnected / on_reconnect_failed (as
    "gave_up") with their times; each event's arguments as a tuple."""

    def on_disconnected(self, broker: str, reason: str) -> None:
        self._add("disconnected", (broker, reason))

    def on_reconnected(self, broker: str) -> None:
        self._add("reconnected", (broker,))

    def on_reconnect_failed(self, reason: str) -> None:
        self._add("gave_up", (reason,))


def state(mon: hw.HeartbeatMonitor, topic: str) -> hw.State | None:
    """The topic's state, None while the monitor has not heard of it."""
    return mon.status(topic).state if topic in mon else None


def _stomp_threads() -> int:
    return sum(
        "__io_loop" in t.name or "__heartbeat_loop" in t.name or t.name.startswith("heartwire-")
        for t in threading.enumerate()
    )


def _collector() -> tuple[list[Message], Any]:
    got: list[Message] = []
    return got, got.append


# -- publish / subscribe ----------------------------------------------------------------------


@pytest.mark.parametrize("name", ["activemq", "rabbitmq"])
def test_round_trip_with_wildcards(name: str, closing: list[Any]) -> None:
    B.ensure(name)
    t = connect(B.url(name) + "?" + FAST)
    closing.append(t)
    assert isinstance(t, StompTransport)
    assert t.dialect == name and t.server and t.server.lower().startswith(name)
    root = uid()
    one, one_h = _collector()
    many, many_h = _collector()
    exact, exact_h = _collector()
    t.subscribe(f"{root}.*", one_h)
    t.subscribe(f"{root}.>", many_h)
    t.subscribe(f"{root}.a", exact_h)
    time.sleep(0.2)  # SUBSCRIBE frames are not acknowledged: let the broker register them
    ids = {}
    for topic in (f"{root}.a", f"{root}.b", f"{root}.a.b", root, f"{root}x.a"):
        ids[topic] = t.send(topic, topic.encode())
    wait_for(lambda: len(many) >= 3 and len(one) >= 2 and exact, 5, "the wildcard deliveries")
    time.sleep(0.2)  # anything extra would show up now
    assert sorted(m.destination for m in one) == [f"{root}.a", f"{root}.b"]
    assert sorted(m.destination for m in many) == [f"{root}.a", f"{root}.a.b", f"{root}.b"]
    assert [m.destination for m in exact] == [f"{root}.a"]
    for m in many:
        assert m.body == m.destination.encode()
        assert m.headers["hw-message-id"] == ids[m.destination]
        assert m.headers["destination"] == f"/topic/{m.destination}"
    stats = t.stats()
    assert stats["published"] == 5 and stats["delivered"] == 6 and stats["handler_errors"] == 0


@pytest.mark.parametrize("name", ["activemq", "rabbitmq"])
def test_headers_binary_bodies_and_cancel(name: str, closing: list[Any]) -> None:
    B.ensure(name)
    t = connect(B.url(name), login="guest", passcode="guest", vhost="/", heartbeat=1)
    closing.append(t)
    topic = f"{uid()}.hdr"
    got, handler = _collector()
    sub = t.subscribe(topic, handler)
    time.sleep(0.2)
    expires = str(int((time.time() + 60) * 1000))
    body = b"\x00binary\xff\x00 body\n"
    t.publish(topic, body, {"expires": expires, "persistent": "true", "x-app": "a:b c"})
    wait_for(lambda: got, 5, "the message")
    m = got[0]
    assert m.body == body and m.destination == topic
    assert m.headers["expires"] == expires
    assert m.headers["persistent"] == "true"
    assert m.headers["x-app"] == "a:b c"
    with pytest.raises(TypeError):
        m.headers["x"] = "y"  # type: ignore[index]
    sub.cancel()
    sub.cancel()
    assert not sub.active and t.subscriptions() == []
    t.publish(topic, b"after cancel")
    time.sleep(0.3)
    assert len(got) == 1


def test_handler_errors_are_counted_and_the_receiver_goes_on(closing: list[Any]) -> None:
    B.ensure("activemq")
    t = connect(B.url("activemq") + "?" + FAST)
    closing.append(t)
    topic = f"{uid()}.err"
    seen: list[bytes] = []

    def flaky(m: Message) -> None:
        seen.append(m.body)
        if m.body == b"2":
            raise RuntimeError("handler bug")

    sub = t.subscribe(topic, flaky)
    time.sleep(0.2)
    for i in range(1, 5):
        t.publish(topic, str(i).encode())
    wait_for(lambda: len(seen) == 4, 5, "all four messages despite the failing handler")
    assert seen == [b"1", b"2", b"3", b"4"]
    assert t.stats()["handler_errors"] == 1 and sub.errors == 1 and sub.delivered == 4
    assert t.connected


def test_bad_arguments_and_closed_transport(closing: list[Any]) -> None:
    B.ensure("activemq")
    t = connect(B.url("activemq"), keepalive_interval=0)
    closing.append(t)
    with pytest.raises(ValueError, match=re.escape("topic 'a.>'")):
        t.publish("a.>", b"x")
    with pytest.raises(TypeError, match="body must be bytes"):
        t.publish("a", "text")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=re.escape("pattern 'a..b'")):
        t.subscribe("a..b", print)
    with pytest.raises(TypeError, match="handler must be callable"):
        t.subscribe("a", None)  # type: ignore[arg-type]
    sub = t.subscribe("a", print)
    t.close()
    t.close()
    assert t.closed and not sub.active
    with pytest.raises(TransportClosed, match="closed"):
        t.publish("a", b"x")
    with pytest.raises(TransportClosed):
        t.subscribe("a", print)


def test_connect_failures_name_each_broker() -> None:
    t0 = time.monotonic()
    with pytest.raises(ConnectFailed) as info:
        connect("failover:(stomp://127.0.0.1:61698,stomp://127.0.0.1:61699)", connect_timeout=1)
    assert time.monotonic() - t0 < 5
    assert set(info.value.reasons) == {"stomp://127.0.0.1:61698", "stomp://127.0.0.1:61699"}
    assert "refused" in str(info.value)
    B.ensure("rabbitmq")
    secret = "not-the-password-42"
    with pytest.raises(ConnectFailed) as info:
        connect(B.url("rabbitmq"), login="guest", passcode=secret)
    assert "refused" in str(info.value).lower() and secret not in str(info.value)


# -- publishers and monitors --------------------------------------------------------------------


@pytest.mark.parametrize("name", ["activemq", "rabbitmq"])
def test_publisher_and_monitor(name: str, closing: list[Any]) -> None:
    B.ensure(name)
    pub_t = connect(B.url(name) + "?" + FAST)
    mon_t = connect(B.url(name) + "?" + FAST)
    closing.extend([pub_t, mon_t])
    root = uid()
    topic = f"{root}.svc.a"
    rec = Recorder()
    mon = hw.HeartbeatMonitor(mon_t, f"{root}.>", period=PERIOD, listeners=[rec], **_GRACE)
    closing.append(mon)
    mon.start()
    time.sleep(0.2)
    pub = hw.HeartbeatPublisher(pub_t, topic, period=PERIOD, ttl=5.0, persistent=True)
    closing.append(pub)
    pub.start()
    wait_for(lambda: len(rec.of("received")) >= 3, 5, f"three beats through {name}")
    assert mon.status(topic).state == hw.State.ALIVE
    seqs = [e.seq for _, e in rec.of("received")]
    assert seqs == sorted(seqs) and seqs[0] >= 1
    paused = time.monotonic()
    pub.pause()
    wait_for(lambda: rec.of("failed", paused), 3, f"{topic} failed after the publisher paused")
    assert mon.status(topic).state == hw.State.FAILED
    resumed_at = time.monotonic()
    pub.resume()
    _, event = wait_for(lambda: rec.of("resumed", resumed_at), 3, f"{topic} resumed")[0]
    assert event.topic == topic and event.missed >= 1
    assert mon.status(topic).state == hw.State.ALIVE
    assert pub.stats()["send_failures"] == 0


def test_legacy_text_beats_from_another_client(closing: list[Any]) -> None:
    B.ensure("activemq")
    mon_t = connect(B.url("activemq") + "?" + FAST)
    closing.append(mon_t)
    root = uid()
    topic = f"{root}.legacy"
    rec = Recorder()
    mon = hw.HeartbeatMonitor(mon_t, f"{root}.*", period=PERIOD, listeners=[rec], **_GRACE)
    closing.append(mon)
    mon.start()
    time.sleep(0.2)
    # A plain stomp.py client, as an existing JMS heartbeat publisher would send.
    other = stomp.Connection12([(B.HOST, B.PORTS["activemq"])])
    other.connect(wait=True)
    try:
        for _ in range(4):
            other.send(f"/topic/{topic}", f"{topic} HEARTBEAT", content_type="text/plain")
            time.sleep(0.05)
    finally:
        other.disconnect()
    wait_for(lambda: len(rec.of("received")) >= 4, 5, "the four legacy beats")
    assert all(e.topic == topic and e.seq is None for _, e in rec.of("received"))
    assert rec.of("exception") == []


# -- broker crashes -----------------------------------------------------------------------------


def test_kill9_and_restart_three_times(closing: list[Any]) -> None:
    """The broker dies (kill -9) and comes back, three times: the monitor reports the publisher
    failed during each outage and resumed after it; no user code restores anything; no thread
    is left behind."""
    B.ensure("activemq")
    url = B.url("activemq") + "?" + FAST
    pub_t = connect(url, request_blocking_time=0.3)
    mon_t = connect(url)
    closing.extend([pub_t, mon_t])
    conns = Connections()
    mon_t.add_connection_listener(conns)
    topic = f"{uid()}.crash"
    rec = Recorder()
    mon = hw.HeartbeatMonitor(mon_t, topic, period=PERIOD, listeners=[rec], **_GRACE)
    closing.append(mon)
    mon.start()
    pub = hw.HeartbeatPublisher(pub_t, topic, period=PERIOD)
    closing.append(pub)
    pub.start()
    wait_for(lambda: state(mon, topic) == hw.State.ALIVE, 5, f"{topic} alive")
    threads = threading.active_count()
    stomp_threads = _stomp_threads()
    timings = []
    try:
        for round_ in range(3):
            killed = time.monotonic()
            B.kill9("activemq")
            wait_for(
                lambda k=killed: rec.of("failed", k), 5, f"round {round_}: failed in the outage"
            )
            t_failed = time.monotonic()
            assert mon_t.broker is None or not mon_t.connected
            B.start("activemq")
            t_res, event = wait_for(
                lambda k=killed: rec.of("resumed", k), 10, f"round {round_}: {topic} resumed"
            )[0]
            assert event.topic == topic
            (t_rec, _), *_ = wait_for(
                lambda k=killed: conns.of("reconnected", k), 5, "on_reconnected"
            )
            timings.append(
                (round(t_failed - killed, 3), round(t_rec - killed, 3), round(t_res - killed, 3))
            )
            assert conns.of("disconnected", killed)
            # The same reach the monitor's listeners as events.
            (_, lost), *_ = wait_for(
                lambda k=killed: rec.of("disconnected", k), 5, "monitor on_disconnected"
            )
            (_, back), *_ = wait_for(
                lambda k=killed: rec.of("reconnected", k), 5, "monitor on_reconnected"
            )
            assert lost.broker == back.broker == B.url("activemq")
    finally:
        B.ensure("activemq")
    assert mon_t.stats()["reconnects"] == 3 and pub_t.stats()["reconnects"] == 3
    assert mon_t.subscriptions() and mon.status(topic).state == hw.State.ALIVE
    # Threads of earlier tests may end meanwhile: the count must not grow (a leak of the three
    # reconnections would add two stomp.py threads per transport and round).
    wait_for(
        lambda: threading.active_count() <= threads and _stomp_threads() <= stomp_threads,
        5,
        f"the thread count to come back to {threads} (now {threading.active_count()}: "
        f"{[t.name for t in threading.enumerate()]})",
    )
    print(f"kill -9 -> failed, reconnected, resumed (s; the restart included): {timings}")


def test_failover_from_active_to_standby(closing: list[Any]) -> None:
    """Kill the active ActiveMQ: publisher and monitor move to the standby, subscriptions are
    restored, and beats flow again within 2 x reconnect_interval of the kill."""
    B.ensure("activemq", "standby")
    interval = 1.0
    url = (
        f"failover:({B.url('activemq')},{B.url('standby')})"
        f"?reconnect_interval={interval}&heartbeat=1&request_blocking_time=3&keepalive_interval=0"
    )
    pub_t = connect(url)
    mon_t = connect(url)
    closing.extend([pub_t, mon_t])
    assert pub_t.broker == mon_t.broker == B.url("activemq")
    conns = Connections()
    mon_t.add_connection_listener(conns)
    root = uid()
    topic = f"{root}.fo"
    rec = Recorder()
    mon = hw.HeartbeatMonitor(mon_t, f"{root}.>", period=PERIOD, listeners=[rec], **_GRACE)
    closing.append(mon)
    mon.start()
    pub = hw.HeartbeatPublisher(pub_t, topic, period=PERIOD)
    closing.append(pub)
    pub.start()
    wait_for(lambda: state(mon, topic) == hw.State.ALIVE, 5, f"{topic} alive")
    try:
        killed = time.monotonic()
        B.kill9("activemq")
        (t_back, (broker,)), *_ = wait_for(
            lambda: conns.of("reconnected", killed), 2 * interval, "on_reconnected to the standby"
        )
        assert broker == B.url("standby")
        wait_for(lambda: rec.of("received", t_back), 2 * interval, "a beat through the standby")
        resumed_after = rec.of("received", t_back)[0][0] - killed
        assert resumed_after <= 2 * interval
        wait_for(lambda: pub_t.broker == B.url("standby"), 2 * interval, "the publisher on standby")
        (_, (lost, reason)), *_ = conns.of("disconnected", killed)
        assert lost == B.url("activemq") and reason
        print(f"traffic resumed on the standby {resumed_after:.3f} s after the kill")
    finally:
        B.ensure("activemq")


def test_send_timeout_give_up_and_failover_checks(closing: list[Any]) -> None:
    """Every broker of the list is down: sends raise SendTimeout after request_blocking_time,
    close() wakes a blocked sender, reconnect_period gives up. And failover_check_count: a
    lost broker is checked that many times before the next one is tried."""
    B.ensure("standby", "activemq")
    dead = "stomp://127.0.0.1:61699"  # nothing listens there
    url = f"failover:({B.url('standby')},{dead})?" + FAST
    t = connect(url, request_blocking_time=0.5)
    quitter = connect(url, reconnect_period=0.6)
    blocked = connect(url, request_blocking_time=30)
    checker = connect(
        f"failover:({B.url('standby')},{B.url('activemq')})?" + FAST,
        failover_check_count=3,
        failover_check_timeout=0.4,
    )
    closing.extend([t, quitter, blocked, checker])
    conns = Connections()
    quitter.add_connection_listener(conns)
    checks = Connections()
    checker.add_connection_listener(checks)
    t.publish("sendtimeout.ok", b"while up")
    try:
        killed = time.monotonic()
        B.kill9("standby")
        wait_for(lambda: not t.connected, 5, "the transport to notice the broker died")
        with pytest.raises(SendTimeout, match=r"within 0\.1"):
            t.publish("sendtimeout.w", b"lost", timeout=0.1)
        started = time.monotonic()
        with pytest.raises(SendTimeout) as info:
            t.publish("sendtimeout.x", b"lost")
        waited = time.monotonic() - started
        assert 0.45 <= waited < 2.0, waited
        err = info.value
        assert err.topic == "sendtimeout.x" and err.message_id in str(err)
        assert err.message_id.split(":")[-1] == "3"  # the third publish of this transport
        assert t.stats()["send_timeouts"] == 2
        # close() wakes a publisher blocked in an outage.
        wait_for(lambda: not blocked.connected, 5, "the third transport to notice")
        outcome: list[BaseException] = []

        def send() -> None:
            try:
                blocked.publish("sendtimeout.y", b"x")
            except BaseException as exc:
                outcome.append(exc)

        sender = threading.Thread(target=send)
        sender.start()
        time.sleep(0.2)
        blocked.close()
        sender.join(2.0)
        assert not sender.is_alive() and isinstance(outcome[0], TransportClosed)
        # reconnect_period: give up, close the transport, tell the listeners.
        wait_for(lambda: conns.of("gave_up"), 5, "on_reconnect_failed")
        assert quitter.closed and "reconnect_period" in (quitter.failure or "")
        with pytest.raises(TransportClosed, match="reconnect_period"):
            quitter.publish("sendtimeout.z", b"x")
        # Three checks of the lost standby, 0.4 s apart, before the next broker.
        (t_back, (broker,)), *_ = wait_for(
            lambda: checks.of("reconnected", killed), 5, "the checker to fail over"
        )
        assert broker == B.url("activemq")
        assert t_back - killed >= 2 * 0.4, t_back - killed
        assert checker.stats()["connect_attempts"] == 1 + 3 + 1
    finally:
        B.start("standby")
    wait_for(lambda: t.connected, 5, "the transport to reconnect to the restarted standby")
    t.publish("sendtimeout.ok", b"up again")


# -- hung brokers -------------------------------------------------------------------------------


def test_keepalive_tears_down_a_silent_connection(closing: list[Any]) -> None:
    """SIGSTOP the broker: the socket stays open and STOMP heart-beating is off, so only the
    keep-alive self-ping notices; the connection is torn down and re-established (here on the
    other broker of the list) with its subscription."""
    B.ensure("activemq", "standby")
    url = (
        f"failover:({B.url('standby')},{B.url('activemq')})?heartbeat=0&keepalive_interval=0.25"
        "&keepalive_allowed=2&connect_timeout=0.5&reconnect_interval=0.2"
    )
    t = connect(url)
    closing.append(t)
    assert t.broker == B.url("standby")
    conns = Connections()
    t.add_connection_listener(conns)
    topic = f"{uid()}.ka"
    got, handler = _collector()
    t.subscribe(topic, handler)
    wait_for(lambda: t.keepalive is not None and t.stats()["keepalive_returned"] >= 2, 3, "pings")
    paused = time.monotonic()
    B.pause("standby")
    try:
        (t_lost, (broker, reason)), *_ = wait_for(
            lambda: conns.of("disconnected", paused), 3, "the keep-alive to drop the connection"
        )
        assert broker == B.url("standby") and "keep-alive" in reason, reason
        (_, (back,)), *_ = wait_for(lambda: conns.of("reconnected", paused), 5, "reconnection")
        assert back == B.url("activemq")
        assert t.stats()["keepalive_expirations"] == 1
        print(f"keep-alive noticed the hung broker after {t_lost - paused:.3f} s")
    finally:
        B.resume("standby")
    other = connect(B.url("activemq"), keepalive_interval=0)
    closing.append(other)
    time.sleep(0.2)
    other.publish(topic, b"after the keep-alive reconnect")
    wait_for(lambda: got, 5, "a message on the restored subscription")


def test_stomp_heartbeat_drops_a_hung_broker(closing: list[Any]) -> None:
    B.ensure("standby")
    t = connect(
        B.url("standby"),
        heartbeat=0.3,
        keepalive_interval=0,
        connect_timeout=2.0,  # the standby JVM, just resumed by an earlier test, may be slow
        reconnect_interval=0.2,
    )
    closing.append(t)
    conns = Connections()
    t.add_connection_listener(conns)
    paused = time.monotonic()
    B.pause("standby")
    try:
        (_, (_, reason)), *_ = wait_for(
            lambda: conns.of("disconnected", paused), 4, "the heart-beat timeout"
        )
        assert "heart-beat" in reason, reason
    finally:
        B.resume("standby")
    wait_for(lambda: conns.of("reconnected", paused), 10, "reconnection once the broker resumed")
    assert t.broker == B.url("standby")
