"""The failover options against the real brokers (scripts/brokers), never stopping them: a
broker that goes away and comes back is a loopback proxy in front of one (tests/proxy.py),
closed, made to drop connections, and reopened.

- ``priority_backup``: connected to the backup, the transport moves back to the preferred
  broker once it is reachable again, with its subscriptions and with no reliable send lost, as
  a planned switch (``on_switched``, ``Reconnected.switched_from``, no ``Disconnected``);
- ``max_reconnect_attempts``: that many tries, then the transport closes and a monitor's
  listeners get ``on_exception(reason="reconnect_failed")``;
- ``startup_max_reconnect_attempts``: retries at start-up, then ``ConnectFailed``;
- exponential back-off: the tries come no earlier than the schedule says;
- ``randomize``: connections spread over the list.
"""

from __future__ import annotations

import itertools
import logging
import socket
import threading
import time
import uuid
from typing import Any

import pytest

import heartwire as hw
from heartwire.transport import ConnectFailed, Message, StompTransport, TransportClosed, connect
from tests import brokers as B
from tests.brokers import brokers, wait_for  # noqa: F401  (brokers: the session fixture)
from tests.proxy import TcpProxy

pytestmark = pytest.mark.usefixtures("brokers")

# Test-sized timings (heart-beats every second, no self-pings); each test sets its tries' waits.
QUICK = "heartbeat=1&connect_timeout=2&keepalive_interval=0"


def stomp(url: str, **options: Any) -> StompTransport:
    """``connect(url)``, typed as the STOMP transport it is."""
    t = connect(url, **options)
    assert isinstance(t, StompTransport)
    return t


def uid() -> str:
    return "fo" + uuid.uuid4().hex[:10]


class Events:
    """Connection observer and monitor listener: every event with its monotonic time."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.events: list[tuple[str, float, Any]] = []

    def _add(self, kind: str, what: Any) -> None:
        with self.lock:
            self.events.append((kind, time.monotonic(), what))

    def of(self, kind: str, after: float = 0.0) -> list[Any]:
        with self.lock:
            return [e for k, t, e in self.events if k == kind and t > after]

    # transport observer
    def on_disconnected(self, broker: str, reason: str) -> None:
        self._add("disconnected", broker)
        self._add("disconnected_why", (broker, reason))

    def on_reconnected(self, broker: Any) -> None:
        self._add("reconnected", broker)  # a str from a transport, a Reconnected from a monitor

    def on_switched(self, from_broker: str, to_broker: str) -> None:
        self._add("switched", (from_broker, to_broker))

    def on_reconnect_failed(self, reason: str) -> None:
        self._add("gave_up", reason)

    def on_exception(self, event: hw.ExceptionEvent) -> None:
        self._add("exception", event)


class MonitorEvents(Events, hw.SubscriberListener):
    """A monitor's connection events, as its listeners get them."""

    def on_disconnected(self, event: Any) -> None:  # type: ignore[override]
        self._add("disconnected", event)


def _drain(url: str, queue: str, want: set[str], timeout: float) -> set[str]:
    """The ``hw-message-id``s of the messages a consumer of ``queue`` on ``url`` gets, waited
    for until ``want`` is covered or ``timeout`` passes."""
    got: set[str] = set()
    lock = threading.Lock()

    def on_message(m: hw.ReceivedMessage) -> None:
        with lock:
            got.add(m.id)

    t = stomp(url + "?" + QUICK)
    try:
        consumer = hw.Consumer(t, queue, on_message=on_message)
        consumer.start()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with lock:
                if want <= got:
                    break
            time.sleep(0.05)
        consumer.stop()
    finally:
        t.close()
    with lock:
        return set(got)


@pytest.mark.parametrize("name", ["activemq", "rabbitmq"])
def test_priority_backup_returns_to_the_preferred_broker_without_losing_reliable_sends(
    name: str, closing: list[Any]
) -> None:
    # ActiveMQ: the preferred broker is 61613 (behind the proxy), the backup the standby.
    # RabbitMQ (one broker here): the preferred is RabbitMQ behind the proxy, the backup
    # RabbitMQ reached directly.
    B.ensure(name, "standby") if name == "activemq" else B.ensure(name)
    target = B.PORTS[name]
    backup = B.url("standby") if name == "activemq" else B.url(name)
    proxy = TcpProxy((B.HOST, target))
    closing.append(proxy)
    t = stomp(
        f"failover:({proxy.url},{backup})?{QUICK}&reconnect_interval=0.2&priority_backup=true"
        "&request_blocking_time=5"
    )
    closing.append(t)
    seen = Events()
    t.add_observer(seen)
    root = uid()
    mon_events = MonitorEvents()
    mon = hw.HeartbeatMonitor(t, f"{root}.>", period=5.0, listeners=[mon_events])
    closing.append(mon)
    mon.start()
    got: list[Message] = []
    t.subscribe(f"{root}.direct", got.append)
    assert t.broker == proxy.url

    # A reliable sender on the transport sends all along: before, during the outage, and
    # across the switch back.
    queue = f"/queue/{root}"
    sender = hw.ReliableSender(t, queue)
    closing.append(sender)
    ids: list[str] = []
    stop = threading.Event()

    def send() -> None:
        n = 0
        while not stop.is_set():
            n += 1
            ids.append(sender.send(f"m{n}"))
            time.sleep(0.01)

    pump = threading.Thread(target=send, daemon=True)
    pump.start()
    try:
        wait_for(lambda: len(ids) >= 20, 5, "20 reliable sends on the preferred broker")
        lost = time.monotonic()
        proxy.close()  # the preferred broker "dies"
        wait_for(lambda: t.broker == backup, 10, f"the transport to fail over to {backup}")
        assert seen.of("disconnected", lost) == [proxy.url]
        on_backup = len(ids)
        wait_for(lambda: len(ids) >= on_backup + 20, 5, "20 reliable sends on the backup")
        assert t.stats()["switches"] == 0
        back = time.monotonic()
        proxy.open()  # ... and comes back
        wait_for(lambda: t.broker == proxy.url, 10, "the transport to move back to the preferred")
        print(f"{name}: on the preferred broker {time.monotonic() - back:.3f} s after it returned")
        wait_for(lambda: seen.of("switched", back), 5, "on_switched")
        more = len(ids)
        wait_for(lambda: len(ids) >= more + 20, 5, "20 reliable sends after the move back")
    finally:
        stop.set()
        pump.join(5)
    # A planned switch: on_switched, no disconnection; the monitor's listeners get it as a
    # Reconnected that says where from.
    assert seen.of("switched", back) == [(backup, proxy.url)]
    assert seen.of("disconnected", back) == []
    stats = t.stats()
    assert stats["switches"] == 1 and stats["priority_probes"] >= 1
    moved = wait_for(
        lambda: [e for e in mon_events.of("reconnected", back) if e.switched_from],
        5,
        "the monitor's listener to get the switch as a Reconnected",
    )
    assert moved == [hw.Reconnected(proxy.url, switched_from=backup)]
    assert mon_events.of("disconnected", back) == []
    assert mon.metrics()["connected"] is True
    # Subscriptions were restored on the preferred broker before the switch.
    with stomp(f"{B.url(name)}?{QUICK}") as direct:
        direct.publish(f"{root}.direct", b"after the switch")
        wait_for(lambda: got, 5, "a message through the subscription restored on the preferred")
    # No reliable send was lost: every one was receipted by a broker, and consumers of the
    # brokers together got them all (duplicates allowed: a re-send after a switch).
    assert sender.flush(10), f"flush: {sender.stats()}"
    assert sender.outstanding == 0 and sender.stats()["refused"] == 0
    want = set(ids)
    urls = [B.url(name), B.url("standby")] if name == "activemq" else [B.url(name)]
    received: set[str] = set()
    for url in urls:
        received |= _drain(url, queue, want - received, 10 if url == urls[-1] else 3)
    assert want <= received, f"{len(want - received)} of {len(want)} reliable sends lost"


@pytest.mark.parametrize("name", ["activemq", "rabbitmq"])
def test_max_reconnect_attempts_ends_the_transport_with_reconnect_failed(
    name: str, closing: list[Any]
) -> None:
    B.ensure(name)
    proxy = TcpProxy((B.HOST, B.PORTS[name]))
    closing.append(proxy)
    t = stomp(f"failover:({proxy.url})?{QUICK}&max_reconnect_attempts=3&reconnect_interval=0.05")
    closing.append(t)
    seen = Events()
    t.add_observer(seen)
    mon_events = MonitorEvents()
    mon = hw.HeartbeatMonitor(t, f"{uid()}.>", period=5.0, listeners=[mon_events])
    closing.append(mon)
    mon.start()
    assert mon.metrics()["connected"] is True
    proxy.refuse()  # every new connection is dropped at once: each try counted
    proxy.cut()
    (reason,) = wait_for(lambda: seen.of("gave_up"), 10, "on_reconnect_failed")
    assert len(proxy.refused) == 3, proxy.refused  # the check of the lost broker, then 2 more
    assert t.stats()["connect_attempts"] == 1 + 3
    assert "in 3 tries (max_reconnect_attempts=3)" in reason and proxy.url in reason
    assert t.closed and t.failure == reason
    with pytest.raises(TransportClosed, match="max_reconnect_attempts=3"):
        t.publish("x", b"y")
    # What a monitor's users see: on_exception(reason="reconnect_failed"), and not connected.
    (event,) = wait_for(lambda: mon_events.of("exception"), 5, "the monitor's on_exception")
    assert event.reason == "reconnect_failed" and "max_reconnect_attempts=3" in event.detail
    assert mon.metrics()["connected"] is False
    time.sleep(0.3)  # no try after giving up (6 x reconnect_interval)
    assert len(proxy.refused) == 3


def test_max_reconnect_attempts_zero_gives_up_at_the_first_loss(closing: list[Any]) -> None:
    B.ensure("activemq")
    proxy = TcpProxy((B.HOST, B.PORTS["activemq"]))
    closing.append(proxy)
    t = stomp(f"failover:({proxy.url})?{QUICK}&max_reconnect_attempts=0&reconnect_interval=0.05")
    closing.append(t)
    seen = Events()
    t.add_observer(seen)
    proxy.refuse()
    proxy.cut()
    (reason,) = wait_for(lambda: seen.of("gave_up"), 10, "on_reconnect_failed")
    assert "in 0 tries (max_reconnect_attempts=0)" in reason
    assert proxy.refused == [] and t.stats()["connect_attempts"] == 1


def test_startup_max_reconnect_attempts(closing: list[Any]) -> None:
    B.ensure("activemq")
    proxy = TcpProxy((B.HOST, B.PORTS["activemq"]))
    closing.append(proxy)
    url = f"failover:({proxy.url})?{QUICK}&reconnect_interval=0.05"
    # The default: one try per broker, then ConnectFailed, as before.
    proxy.refuse()
    with pytest.raises(ConnectFailed) as info:
        stomp(url)
    assert len(proxy.refused) == 1 and info.value.attempts == 0
    assert str(info.value).startswith(f"could not connect to failover:({proxy.url}): ")
    # Two more tries, then ConnectFailed saying how many.
    with pytest.raises(ConnectFailed, match=r"in 3 tries") as info:
        stomp(url, startup_max_reconnect_attempts=2)
    assert len(proxy.refused) == 1 + 3 and info.value.attempts == 3
    # -1: until one connects (the proxy drops two connections, then forwards).
    proxy.refuse(count=2)
    t = stomp(url, startup_max_reconnect_attempts=-1)
    closing.append(t)
    assert t.connected and len(proxy.refused) == 4 + 2
    assert t.stats()["connect_attempts"] == 3


@pytest.mark.parametrize("jitter", [0.0, 0.5])
def test_exponential_back_off_spaces_the_tries_as_scheduled(
    jitter: float, closing: list[Any]
) -> None:
    B.ensure("activemq")
    proxy = TcpProxy((B.HOST, B.PORTS["activemq"]))
    closing.append(proxy)
    t = stomp(
        f"failover:({proxy.url})?{QUICK}&reconnect_interval=0.05&use_exponential_back_off=true"
        f"&back_off_multiplier=2&max_reconnect_delay=0.4&reconnect_jitter={jitter}"
        "&max_reconnect_attempts=6"
    )
    closing.append(t)
    seen = Events()
    t.add_observer(seen)
    proxy.refuse()
    proxy.cut()
    wait_for(lambda: seen.of("gave_up"), 10, "on_reconnect_failed after 6 tries")
    times = proxy.refused
    assert len(times) == 6
    gaps = [b - a for a, b in itertools.pairwise(times)]
    # The waits of the plan: 0.05, 0.1, 0.2, 0.4, 0.4 (capped), each shortened by jitter by
    # at most its fraction. A try never comes early; a loaded machine may make it late.
    # (The times are the proxy's accepts: a late accept may shorten the next gap a little.)
    bases = [0.05, 0.1, 0.2, 0.4, 0.4]
    for gap, base in zip(gaps, bases, strict=True):
        assert base * (1 - jitter) - 0.03 <= gap <= base + 0.5, (gaps, jitter)
    assert sum(gaps) >= sum(bases) * (1 - jitter) - 0.03, (gaps, jitter)
    if jitter == 0:
        assert gaps[3] >= 0.39 and gaps[4] >= 0.39  # the cap, reached and kept


def test_randomize_spreads_connections_over_the_list(closing: list[Any]) -> None:
    B.ensure("activemq", "standby")
    first = TcpProxy((B.HOST, B.PORTS["activemq"]))
    second = TcpProxy((B.HOST, B.PORTS["standby"]))
    closing.extend([first, second])
    url = f"failover:({first.url},{second.url})?connect_timeout=2&keepalive_interval=0&heartbeat=0"
    for _ in range(4):  # in order: always the first
        closing.append(stomp(url))
    assert (first.accepted, second.accepted) == (4, 0)
    # Shuffled: 16 connections all on one broker would happen once in 2 ** 15 runs.
    spread = [stomp(url, randomize=True) for _ in range(16)]
    closing.extend(spread)
    assert first.accepted > 4 and second.accepted > 0, (first.accepted, second.accepted)
    assert first.accepted - 4 + second.accepted == 16
    assert {t.broker for t in spread} == {first.url, second.url}


def test_priority_backup_from_the_start_and_a_switch_whose_old_link_was_lost(
    closing: list[Any],
) -> None:
    """The preferred broker down at start: the transport starts on the backup and moves to the
    preferred once it listens. And a switch that finds the link it meant to replace no longer
    current (lost meanwhile: its outage comes next) drops the new link unattached."""
    B.ensure("activemq", "standby")
    proxy = TcpProxy((B.HOST, B.PORTS["activemq"]), listening=False)
    closing.append(proxy)
    t = stomp(
        f"failover:({proxy.url},{B.url('standby')})?{QUICK}&reconnect_interval=0.1"
        "&priority_backup=true"
    )
    closing.append(t)
    seen = Events()
    t.add_observer(seen)
    assert t.broker == B.url("standby")
    # Failed tries of the preferred broker change nothing.
    wait_for(lambda: t.stats()["priority_probes"] >= 2, 5, "two tries of the preferred broker")
    assert t.broker == B.url("standby")
    assert seen.events == []
    proxy.open()
    wait_for(lambda: t.broker == proxy.url, 5, "the move to the preferred broker")
    assert seen.of("switched") == [(B.url("standby"), proxy.url)]
    assert seen.of("disconnected") == [] and seen.of("reconnected") == []
    # The guard of a switch (under the connector's lock): replacing a link that is not
    # current any more publishes nothing and closes the new link.
    c = t._connector
    current = c.current
    stray = t._new_link(c.options.brokers[1])
    stray.connect()
    other = t._new_link(c.options.brokers[1])
    assert not c._install(stray, replacing=other)
    assert c.current is current and not stray.open


def test_a_switch_rejected_after_attaching_reconnects_and_reliable_sends_go_on(
    closing: list[Any],
) -> None:
    """An observer rejects every connection to the preferred broker (on_attached raises): the
    reliable senders had already moved their re-send to it, so the backup link cannot just go
    on. It is dropped and reconnected as after a loss, and reliable sends keep being
    receipted. (Before: the senders waited on the rejected link, and a flush never came.)"""
    B.ensure("activemq", "standby")
    proxy = TcpProxy((B.HOST, B.PORTS["activemq"]), listening=False)
    closing.append(proxy)
    t = stomp(
        f"failover:({proxy.url},{B.url('standby')})?{QUICK}&reconnect_interval=0.3"
        "&priority_backup=true&request_blocking_time=5"
    )
    closing.append(t)

    class RejectPreferred:
        def on_attached(self, link: Any) -> None:
            if str(link.broker) == proxy.url:
                raise RuntimeError("test: the preferred broker is refused")

    seen = Events()
    t.add_observer(seen)
    t.add_observer(RejectPreferred())
    sender = hw.ReliableSender(t, f"/queue/{uid()}")
    closing.append(sender)
    assert t.broker == B.url("standby")
    began = time.monotonic()
    proxy.open()
    reason = "the move to the preferred broker failed after attaching"
    wait_for(
        lambda: (B.url("standby"), reason) in seen.of("disconnected_why", began),
        5,
        "a rejected switch to drop and reconnect the backup link",
    )
    for n in range(50):
        sender.send(f"m{n}")
    assert sender.flush(5), f"reliable sends stalled after a rejected switch: {sender.stats()}"
    assert t.broker == B.url("standby") and t.stats()["switches"] == 0


def test_the_default_reconnection_is_as_before_these_options(closing: list[Any]) -> None:
    """Without the new options the tries are those of before (the proxy stands for the killed
    standby of test_stomp's kill tests, which stop shared brokers): failover_check_count checks
    of the lost broker, failover_check_timeout apart, then the next broker of the list; and
    reconnect_period gives up, closing the transport."""
    B.ensure("activemq", "standby")
    standby = TcpProxy((B.HOST, B.PORTS["standby"]))
    closing.append(standby)
    checker = stomp(
        f"failover:({standby.url},{B.url('activemq')})?{QUICK}&reconnect_interval=0.2",
        failover_check_count=3,
        failover_check_timeout=0.4,
    )
    quitter = stomp(
        f"failover:({standby.url})?{QUICK}&reconnect_interval=0.2", reconnect_period=0.6
    )
    closing.extend([checker, quitter])
    checks, gave_up = Events(), Events()
    checker.add_observer(checks)
    quitter.add_observer(gave_up)
    killed = time.monotonic()
    standby.close()
    (broker,) = wait_for(lambda: checks.of("reconnected"), 5, "the checker to fail over")
    assert broker == B.url("activemq")
    took = checks.events[-1][1] - killed
    assert took >= 2 * 0.4, took  # three checks, 0.4 s apart, before the next broker
    assert checker.stats()["connect_attempts"] == 1 + 3 + 1
    (reason,) = wait_for(lambda: gave_up.of("gave_up"), 5, "reconnect_period to give up")
    assert "reconnect_period=0.6 s" in reason and quitter.closed
    assert quitter.failure == reason


def test_reconnect_period_cuts_a_long_back_off_wait_short(closing: list[Any]) -> None:
    """With a 5 s wait due and reconnect_period=0.5, the transport gives up at 0.5 s after
    the loss, not after the wait."""
    B.ensure("activemq")
    proxy = TcpProxy((B.HOST, B.PORTS["activemq"]))
    closing.append(proxy)
    t = stomp(f"failover:({proxy.url})?{QUICK}&reconnect_interval=5&reconnect_period=0.5")
    closing.append(t)
    seen = Events()
    t.add_observer(seen)
    lost = time.monotonic()
    proxy.close()
    wait_for(lambda: seen.of("gave_up"), 4, "reconnect_period to give up before the 5 s wait")
    took = seen.events[-1][1] - lost
    assert 0.5 <= took < 3, took
    assert "reconnect_period=0.5 s" in seen.of("gave_up")[0]


def test_after_a_switch_the_backup_link_keeps_receiving_for_a_while(closing: list[Any]) -> None:
    """Clients of the same list move back one by one: a publisher still on the backup right
    after this transport moved is still heard (the old link lingers one wait plus
    connect_timeout before its DISCONNECT); after that, the backup is no longer read."""
    B.ensure("activemq", "standby")
    proxy = TcpProxy((B.HOST, B.PORTS["activemq"]), listening=False)
    closing.append(proxy)
    t = stomp(
        f"failover:({proxy.url},{B.url('standby')})?heartbeat=1&keepalive_interval=0"
        "&connect_timeout=1&reconnect_interval=0.2&priority_backup=true"
    )
    closing.append(t)
    laggard = stomp(f"{B.url('standby')}?{QUICK}")
    closing.append(laggard)
    topic = f"{uid()}.beats"
    got: list[bytes] = []
    t.subscribe(topic, lambda m: got.append(m.body))
    proxy.open()
    wait_for(lambda: t.broker == proxy.url, 5, "the move back to the preferred broker")
    laggard.publish(topic, b"from a client still on the backup")
    wait_for(lambda: got, 2, "the lingering backup link to deliver the laggard's message")
    wait_for(lambda: not t._connector._lingering, 5, "the backup link's DISCONNECT")
    laggard.publish(topic, b"after the linger")
    time.sleep(0.5)  # a bounded check that nothing more comes
    assert got == [b"from a client still on the backup"]


class Beats(Events, hw.SubscriberListener):
    """A monitor's failed / resumed / received events."""

    def on_failed(self, event: hw.Failed) -> None:
        self._add("failed", event)

    def on_resumed(self, event: hw.Resumed) -> None:
        self._add("resumed", event)

    def on_received(self, event: hw.Received) -> None:
        self._add("received", event)


def test_a_fleet_on_priority_backup_fails_over_and_moves_back_without_a_false_alarm(
    closing: list[Any],
) -> None:
    """A publisher and a monitor with the same priority_backup list (the preferred ActiveMQ
    behind the proxy, the standby as backup): the preferred broker goes away and comes back;
    both move there and back, and the live topic never fails (allowed_misses=2: each move is
    a client's own, and a beat sent in between may be lost, as docs/failover.md says)."""
    B.ensure("activemq", "standby")
    proxy = TcpProxy((B.HOST, B.PORTS["activemq"]))
    closing.append(proxy)
    url = (
        f"failover:({proxy.url},{B.url('standby')})?{QUICK}&reconnect_interval=0.1"
        "&priority_backup=true"
    )
    pub_t, mon_t = stomp(url), stomp(url)
    closing.extend([pub_t, mon_t])
    root = uid()
    topic = f"{root}.svc"
    beats = Beats()
    mon = hw.HeartbeatMonitor(mon_t, f"{root}.>", period=0.5, allowed_misses=2, listeners=[beats])
    closing.append(mon)
    mon.start()
    pub = hw.HeartbeatPublisher(pub_t, topic, period=0.5)
    closing.append(pub)
    pub.start()
    wait_for(lambda: len(beats.of("received")) >= 2, 5, "two beats on the preferred broker")
    lost = time.monotonic()
    proxy.close()
    wait_for(lambda: pub_t.broker == mon_t.broker == B.url("standby"), 5, "both on the backup")
    wait_for(lambda: len(beats.of("received", lost)) >= 3, 5, "three beats on the backup")
    back = time.monotonic()
    proxy.open()
    wait_for(lambda: pub_t.broker == mon_t.broker == proxy.url, 5, "both moved back")
    wait_for(lambda: len(beats.of("received", back)) >= 4, 5, "four beats after the move back")
    assert beats.of("failed") == [] and beats.of("resumed") == []
    assert pub_t.stats()["switches"] == mon_t.stats()["switches"] == 1
    assert mon.status(topic).state == hw.State.ALIVE


# -- review 19 (findings 1, 7, 10) ---------------------------------------------------------------


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then let go)."""
    with socket.socket() as s:
        s.bind((B.HOST, 0))
        return int(s.getsockname()[1])


def test_a_loss_right_after_a_switch_back_to_the_backup_does_not_deliver_twice(
    closing: list[Any],
) -> None:
    """priority_backup moved to the preferred broker and the old backup link lingers; the
    preferred link is lost at once and the outage lands on the backup again. The lingering
    link to the backup is closed as the new one is installed: each message arrives once (it
    came twice while both links to the backup were subscribed)."""
    B.ensure("activemq", "standby")
    proxy = TcpProxy((B.HOST, B.PORTS["activemq"]), listening=False)
    closing.append(proxy)
    t = stomp(
        f"failover:({proxy.url},{B.url('standby')})?heartbeat=1&keepalive_interval=0"
        "&connect_timeout=3&reconnect_interval=0.2&priority_backup=true"
    )
    closing.append(t)
    other = stomp(f"{B.url('standby')}?{QUICK}")
    closing.append(other)
    topic = f"{uid()}.beats"
    got: list[bytes] = []
    t.subscribe(topic, lambda m: got.append(m.body))
    proxy.open()
    wait_for(lambda: t.broker == proxy.url, 5, "the move back to the preferred broker")
    # (the old link is put to linger just after the new one is published)
    wait_for(lambda: t._connector._lingering, 5, "the backup link to linger")
    with t._connector.cond:
        ((_, lingering),) = t._connector._lingering
    proxy.close()  # the preferred broker goes away again at once (refused from now on)
    wait_for(
        lambda: t.broker == B.url("standby") and t.stats()["reconnects"] >= 1,
        5,
        "the reconnection to the backup",
    )
    assert not lingering.open, "the lingering link to the backup is still open"
    assert not t._connector._lingering
    other.publish(topic, b"one message")
    wait_for(lambda: got, 2, "the message on the backup")
    time.sleep(0.5)  # a bounded check that no copy follows
    assert got == [b"one message"], f"delivered {len(got)} times: {got}"


def test_a_lingering_link_ends_on_time_during_a_long_outage(closing: list[Any]) -> None:
    """The linger after a switch ends at its deadline even while the supervisor is busy
    reconnecting (before, only the top of its loop ended it, which an endless outage never
    reaches)."""
    B.ensure("activemq", "standby")
    preferred = TcpProxy((B.HOST, B.PORTS["activemq"]), listening=False)
    backup = TcpProxy((B.HOST, B.PORTS["standby"]))
    closing.extend([preferred, backup])
    t = stomp(
        f"failover:({preferred.url},{backup.url})?heartbeat=1&keepalive_interval=0"
        "&connect_timeout=1&reconnect_interval=0.2&priority_backup=true"
    )
    closing.append(t)
    t.subscribe(f"{uid()}.beats", lambda m: None)
    preferred.open()
    wait_for(lambda: t.broker == preferred.url, 5, "the move back to the preferred broker")
    # (the old link is put to linger just after the new one is published)
    wait_for(lambda: t._connector._lingering, 5, "the backup link to linger")
    with t._connector.cond:
        ((deadline, lingering),) = t._connector._lingering
    backup.refuse()  # new connections to the backup fail; the lingering one stays
    preferred.close()  # the preferred link is lost, and it refuses from now on: an outage
    wait_for(lambda: t.broker is None, 5, "the outage")
    wait_for(
        lambda: not lingering.open,
        deadline - time.monotonic() + 2,
        "the lingering link to end at its deadline during the outage",
    )
    assert time.monotonic() >= deadline - 0.05
    assert t.broker is None and not t._connector._lingering


def test_reconnect_period_cuts_a_startup_wait_short() -> None:
    """startup_max_reconnect_attempts=-1 with reconnect_period=0.3 and reconnect_interval=3:
    the start-up gives up 0.3 s in, as an outage would, not after the whole 3 s wait."""
    began = time.monotonic()
    with pytest.raises(ConnectFailed):
        connect(
            f"stomp://{B.HOST}:{closed_port()}?startup_max_reconnect_attempts=-1"
            f"&reconnect_interval=3&reconnect_period=0.3&{QUICK}"
        )
    took = time.monotonic() - began
    assert 0.3 <= took < 1.5, f"ConnectFailed after {took:.2f} s for reconnect_period=0.3"


def test_probes_of_a_down_preferred_broker_log_once(
    closing: list[Any], caplog: pytest.LogCaptureFixture
) -> None:
    """A client on the backup tries the down preferred broker after each wait: the first
    failed try is logged once (INFO), the rest and stomp.py's own "could not connect"
    warnings only at DEBUG (they were one WARNING per wait)."""
    caplog.set_level(logging.DEBUG)
    t = stomp(
        f"failover:(stomp://{B.HOST}:{closed_port()},{B.url('activemq')})"
        f"?priority_backup=true&reconnect_interval=0.1&{QUICK}"
    )
    closing.append(t)
    wait_for(lambda: t.stats()["priority_probes"] >= 5, 5, "5 probes (4 of them over)")
    # (the start-up's try of it, on this thread, warns as any failed connection does)
    records = [r for r in caplog.records if r.threadName == "heartwire-stomp-failover"]
    loud = [f"{r.name}: {r.getMessage()}" for r in records if r.levelno >= logging.WARNING]
    assert not loud, f"probes of the down preferred broker logged warnings: {loud[:3]}"
    told = [r for r in records if r.levelno == logging.INFO and "not back yet" in r.getMessage()]
    assert len(told) == 1, [r.getMessage() for r in told]
    quiet = [r for r in records if r.name == "stomp.py" and "could not connect" in r.getMessage()]
    assert len(quiet) >= 4 and all(r.levelno == logging.DEBUG for r in quiet)


def test_priority_backup_and_back_off_refuse_a_zero_reconnect_interval() -> None:
    """Review 19, finding 2: priority_backup with reconnect_interval=0 probed the down preferred
    broker back to back (hundreds of tries a second, each with a warning) and the back-off
    never grew from 0; both are refused, naming the options."""
    url = f"failover:(stomp://{B.HOST}:{closed_port()},{B.url('activemq')})?{QUICK}"
    with pytest.raises(ValueError, match=r"reconnect_interval=0\.0 must be >= 0\.01 with priority"):
        connect(url + "&priority_backup=true&reconnect_interval=0")
    with pytest.raises(ValueError, match="with use_exponential_back_off=True"):
        connect(url, use_exponential_back_off=True, reconnect_interval=0)
    with pytest.raises(ValueError, match="option reconnect_interval='1e10' must be at most 86400"):
        connect(url + "&priority_backup=true&reconnect_interval=1e10")


def test_reliable_sends_racing_a_switch_are_not_lost(closing: list[Any]) -> None:
    """Review 19, suspected 14: a sender writing on the backup link while the switch attaches
    the preferred one. Two reliable senders send back to back (their drain threads write
    batches of up to 512 on the link they took, so writes on the backup go on after the
    switch's attach re-queued what was outstanding) across the move back: every message is
    receipted by a broker and received from one of them (the receipts of the backup's frames
    are dropped after the attach, so those frames go again on the preferred broker: duplicates,
    never a loss)."""
    B.ensure("activemq", "standby")
    proxy = TcpProxy((B.HOST, B.PORTS["activemq"]), listening=False)
    closing.append(proxy)
    t = stomp(
        f"failover:({proxy.url},{B.url('standby')})?{QUICK}&reconnect_interval=0.1"
        "&priority_backup=true&request_blocking_time=5"
    )
    closing.append(t)
    assert t.broker == B.url("standby")
    queue = f"/queue/{uid()}"
    senders = [hw.ReliableSender(t, queue) for _ in range(2)]
    closing.extend(senders)
    ids: list[list[str]] = [[], []]
    switched = threading.Event()
    after: list[int] = [0, 0]

    def pump(i: int) -> None:
        while after[i] < 300:  # back to back, until 300 more went after the switch
            ids[i].append(senders[i].send(f"m{len(ids[i])}"))
            if switched.is_set():
                after[i] += 1

    threads = [threading.Thread(target=pump, args=(i,), daemon=True) for i in range(2)]
    for th in threads:
        th.start()
    wait_for(lambda: min(map(len, ids)) >= 200, 10, "200 reliable sends each on the backup")
    proxy.open()
    wait_for(lambda: t.broker == proxy.url, 10, "the move back to the preferred broker")
    switched.set()
    for th in threads:
        th.join(30)
        assert not th.is_alive(), "a sender did not finish"
    for s in senders:
        assert s.flush(15), f"flush: {s.stats()}"
        assert s.outstanding == 0 and s.stats()["refused"] == 0, s.stats()
    want = set(ids[0]) | set(ids[1])
    received: set[str] = set()
    # (the backup first, 2 s: it holds only what was receipted there; then the preferred)
    received |= _drain(B.url("standby"), queue, want, 2)
    received |= _drain(B.url("activemq"), queue, want - received, 10)
    assert want <= received, f"{len(want - received)} of {len(want)} reliable sends lost"
    print(f"{len(want)} sent, {sum(s.stats()['resent'] for s in senders)} resent")
