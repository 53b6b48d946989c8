"""One connection-observer protocol (issue 16): :class:`ConnectionObserver` and the
:class:`Observers` registry that the STOMP transport, its failover connector and reliable
senders keep their observers in."""

from __future__ import annotations

import logging
import threading
from typing import Any

import pytest

import heartwire as hw
from heartwire.listeners import ConnectionEvents, ListenerSet, SubscriberListener
from heartwire.transport import ConnectionListener, ConnectionObserver
from heartwire.transport.observers import OBSERVER_METHODS, Observers
from tests.brokers import brokers  # noqa: F401  (the session fixture)

log = logging.getLogger("test.observers")


class Recorder(ConnectionObserver):
    def __init__(self, name: str, calls: list[tuple[str, str]]) -> None:
        self.name = name
        self.calls = calls

    def on_disconnected(self, broker: str, reason: str) -> None:
        self.calls.append((self.name, "on_disconnected"))


class Raising(ConnectionObserver):
    def on_disconnected(self, broker: str, reason: str) -> None:
        raise RuntimeError("test: an observer raised")


def test_the_protocol_names_every_event_and_the_old_names_are_it() -> None:
    assert OBSERVER_METHODS == (
        "on_disconnected",
        "on_reconnected",
        "on_switched",
        "on_reconnect_failed",
        "on_attached",
        "on_published",
        "on_receipt",
        "on_error_frame",
    )
    assert ConnectionListener is ConnectionObserver
    assert issubclass(ConnectionEvents, ConnectionObserver)


def test_notify_calls_in_order_and_isolates_one_that_raises(
    caplog: pytest.LogCaptureFixture,
) -> None:
    calls: list[tuple[str, str]] = []
    obs = Observers(log, "connection observer")
    a, bad, b = Recorder("a", calls), Raising(), Recorder("b", calls)
    for o in (a, bad, b):
        assert obs.add(o)
    assert not obs.add(a), "added twice"
    with caplog.at_level(logging.ERROR, "test.observers"):
        errors = obs.notify("on_disconnected", "stomp://h:1", "gone")
    assert calls == [("a", "on_disconnected"), ("b", "on_disconnected")]
    assert [str(e) for e in errors] == ["test: an observer raised"]
    assert obs.errors == 1
    assert "connection observer" in caplog.text and "on_disconnected raised" in caplog.text
    # A method nobody has, and a plain object with only some methods: skipped, no error.
    plain = type("Plain", (), {"on_reconnected": lambda self, broker: calls.append(("p", broker))})
    obs.add(plain())
    assert obs.notify("on_reconnect_failed", "why") == []
    obs.notify("on_reconnected", "stomp://h:2")
    assert calls[-1] == ("p", "stomp://h:2")
    assert obs.remove(bad) and not obs.remove(bad)
    assert bad not in obs.items and len(obs) == 3


def test_an_object_with_no_method_of_the_protocol_is_refused_by_name() -> None:
    with pytest.raises(TypeError, match=r"a sender listener needs on_flushed or on_error; got"):
        Observers(log, "sender listener", ("on_flushed", "on_error")).add(object())
    with pytest.raises(TypeError, match=r"needs at least one of on_disconnected, .*got int"):
        Observers(log, "connection observer").add(3)


def test_an_observer_may_remove_itself_and_add_another_while_called() -> None:
    obs = Observers(log, "observer")
    seen: list[str] = []

    class Once(ConnectionObserver):
        def on_reconnected(self, broker: str) -> None:
            seen.append("once")
            obs.remove(self)
            obs.add(Later())

    class Later(ConnectionObserver):
        def on_reconnected(self, broker: str) -> None:
            seen.append("later")

    obs.add(Once())
    obs.notify("on_reconnected", "b")  # the snapshot taken before: Later waits for the next
    obs.notify("on_reconnected", "b")
    assert seen == ["once", "later"]


def test_notify_holds_no_lock_while_an_observer_runs() -> None:
    obs = Observers(log, "observer")
    inside, release = threading.Event(), threading.Event()

    class Slow(ConnectionObserver):
        def on_reconnected(self, broker: str) -> None:
            inside.set()
            assert release.wait(5), "never released"

    obs.add(Slow())
    t = threading.Thread(target=obs.notify, args=("on_reconnected", "b"))
    t.start()
    assert inside.wait(5)
    other = Recorder("x", [])
    assert obs.add(other) and obs.remove(other), "add/remove waited for a running observer"
    release.set()
    t.join(5)


def test_sender_listeners_are_observers_and_their_errors_counted() -> None:
    broker = hw.connect()
    got: list[Any] = []

    class Boom(hw.SenderListener):
        def on_flushed(self, ack: hw.FlushAck) -> None:
            raise RuntimeError("test: listener raised")

    class Keep(hw.SenderListener):
        def on_flushed(self, ack: hw.FlushAck) -> None:
            got.append(ack)

    sender = hw.ReliableSender(broker, "/queue/obs", listeners=[Boom(), Keep()])
    sender.send(b"x")
    sender.request_flush()
    assert got == [hw.FlushAck(1, 1)], "a raising listener stopped the next one"
    assert sender.stats()["callback_errors"] == 1


FAST = "heartbeat=1&reconnect_interval=0.2&connect_timeout=2&keepalive_interval=0"


@pytest.mark.usefixtures("brokers")
def test_a_stomp_transport_reports_every_event_to_its_observers_in_order() -> None:
    from tests import brokers as B

    B.ensure("activemq")
    t = hw.connect(B.url("activemq") + "?" + FAST)
    try:
        events: list[str] = []
        links: list[Any] = []

        class Order(ConnectionObserver):
            def on_disconnected(self, broker: str, reason: str) -> None:
                events.append("on_disconnected")

            def on_attached(self, link: Any) -> None:
                events.append("on_attached")
                links.append(link)

            def on_published(self, link: Any) -> None:
                events.append("on_published" if link.open else "on_published (rejected)")

            def on_reconnected(self, broker: str) -> None:
                events.append("on_reconnected")

        class RejectOnce(ConnectionObserver):
            rejected = 0

            def on_attached(self, link: Any) -> None:
                if not self.rejected:
                    self.rejected += 1
                    raise RuntimeError("test: reject this link")

        reject = RejectOnce()
        first = t.current_link
        assert t.add_observer(reject) is first  # registered first: runs before Order
        assert t.add_observer(Order()) is first
        first.abort("test: connection lost")
        B.wait_for(lambda: "on_reconnected" in events, 15, "a reconnection")
        # The rejected link still reached the other observer, then a second one was made.
        assert events == [
            "on_disconnected",
            "on_attached",
            "on_published (rejected)",
            "on_attached",
            "on_published",
            "on_reconnected",
        ], events
        assert links[1] is t.current_link and links[0] is not links[1]
        assert t.stats()["listener_errors"] == 1 and reject.rejected == 1
        assert t.remove_observer(reject) and not t.remove_observer(reject)
    finally:
        t.close()


def test_connection_events_attach_through_add_connection_listener() -> None:
    # Before: only add_observer was looked for; a transport (or a wrapper around one) offering
    # the earlier documented hook silently got no connection events.
    class Proxy:
        url = "stomp://proxy:1"

        def __init__(self) -> None:
            self.listeners: list[Any] = []

        def add_connection_listener(self, listener: Any) -> None:
            self.listeners.append(listener)

        def remove_connection_listener(self, listener: Any) -> bool:
            self.listeners.remove(listener)
            return True

    seen: list[str] = []
    events = ConnectionEvents(
        ListenerSet(SubscriberListener, "svc.>"), lambda method, event: seen.append(method)
    )
    proxy = Proxy()
    events.attach(proxy)
    assert proxy.listeners == [events]
    proxy.listeners[0].on_disconnected("stomp://proxy:1", "gone")
    assert seen == ["on_disconnected"]
    events.detach(proxy)
    assert proxy.listeners == []


def test_each_observer_gets_its_first_errors_logged(caplog: pytest.LogCaptureFixture) -> None:
    # Before: one error count for every observer of a transport, so one noisy observer used
    # up the throttle and another's first error went unlogged.
    class NoisyReceipts(ConnectionObserver):
        def on_receipt(self, link: Any, receipt: str) -> None:
            raise RuntimeError("noisy")

    class Other(ConnectionObserver):
        def on_disconnected(self, broker: str, reason: str) -> None:
            raise RuntimeError("first failure of another observer")

    obs = Observers(logging.getLogger("test.observers"), "connection observer")
    noisy, other = NoisyReceipts(), Other()
    obs.add(noisy)
    obs.add(other)
    for i in range(50):
        obs.notify("on_receipt", None, f"r{i}")
    with caplog.at_level(logging.ERROR, "test.observers"):
        obs.notify("on_disconnected", "stomp://h:1", "gone")
    assert "on_disconnected raised" in caplog.text
    assert obs.errors == 51  # the total count goes on


@pytest.mark.usefixtures("brokers")
@pytest.mark.parametrize(
    ("step", "also"),
    [("on_attached", "rejected"), ("on_published", None)],
    ids=["rejected-link", "on-published-error"],
)
def test_an_observers_error_on_a_new_link_is_logged_once(
    caplog: pytest.LogCaptureFixture, step: str, also: str | None
) -> None:
    # Before: logged twice, by the observer registry and then by the connector: a rejected link
    # (on_attached raised) as "restoring the subscriptions failed" (not what happened), an
    # on_published error as "after attaching the connection".
    from tests import brokers as B

    B.ensure("activemq")
    t = hw.connect(B.url("activemq") + "?" + FAST)
    try:
        reconnected = threading.Event()

        class FailOnce(ConnectionObserver):
            failed = 0

            def _fail(self, where: str) -> None:
                if where == step and not self.failed:
                    self.failed += 1
                    raise RuntimeError("test: fail this link")

            def on_attached(self, link: Any) -> None:
                self._fail("on_attached")

            def on_published(self, link: Any) -> None:
                self._fail("on_published")

            def on_reconnected(self, broker: str) -> None:
                reconnected.set()

        t.add_observer(FailOnce())
        with caplog.at_level(logging.DEBUG, "heartwire"):
            t.current_link.abort("test: connection lost")
            assert reconnected.wait(15), "no reconnection"
        about = [
            r
            for r in caplog.records
            if "fail this link" in r.getMessage()
            or (r.exc_info and "fail this link" in repr(r.exc_info[1]))
        ]
        assert len(about) == 1, [r.getMessage() for r in about]
        if also is not None:
            assert also in about[0].getMessage()
        assert f"{step} raised RuntimeError('test: fail this link')" in about[0].getMessage()
        assert "restoring the subscriptions failed" not in caplog.text
        assert t.stats()["listener_errors"] == 1  # still counted
    finally:
        t.close()


def test_a_planned_switch_reaches_listeners_as_a_reconnected_that_says_where_from() -> None:
    from heartwire.events import Reconnected, wall_fields

    seen: list[tuple[str, object]] = []
    events = ConnectionEvents(
        ListenerSet(SubscriberListener, "svc.>"), lambda method, event: seen.append((method, event))
    )
    events.on_switched("stomp://b:2", "stomp://a:1")
    events.on_reconnected("stomp://a:1")
    assert seen == [
        ("on_reconnected", Reconnected("stomp://a:1", switched_from="stomp://b:2")),
        ("on_reconnected", Reconnected("stomp://a:1")),
    ]
    assert (events.switches, events.reconnects, events.disconnects) == (1, 1, 0)
    # In JSON lines, a Reconnected after an outage has the fields it had before switches.
    assert set(wall_fields(seen[1][1], now=1.0)) == {"broker", "at", "at_iso"}
    assert wall_fields(seen[0][1], now=1.0)["switched_from"] == "stomp://b:2"
