"""Beats read off a real broker's socket and recorded by the core (ActiveMQ, RabbitMQ): the
monitor's STOMP subscription never hands them to stomp.py or Python, whatever their form, and
a connection cut in the middle of a frame leaves nothing half-read behind."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
import uuid
from typing import Any

import pytest
import stomp  # type: ignore[import-untyped]

import heartwire as hw
from heartwire import connect
from heartwire.beat import Beat, BeatCodec
from tests import brokers as B
from tests.brokers import brokers, wait_for  # noqa: F401  (brokers: the session fixture)

pytestmark = pytest.mark.usefixtures("brokers")

FAST = "heartbeat=1&reconnect_interval=0.2&connect_timeout=2&keepalive_interval=0"
KEY = b"native-key"


def uid() -> str:
    return "n" + uuid.uuid4().hex[:10]


class Errors(hw.SubscriberListener):
    def __init__(self) -> None:
        self.seen: list[hw.ExceptionEvent] = []

    def on_exception(self, event: hw.ExceptionEvent) -> None:
        self.seen.append(event)


def watching(
    url: str, closing: list[Any], pattern: str, errors: Errors, **options: Any
) -> tuple[Any, hw.HeartbeatMonitor]:
    """A started monitor (period 5 s) of ``pattern`` on a new connection to ``url``; both are
    closed after the test."""
    transport = connect(url)
    closing.append(transport)
    mon = hw.HeartbeatMonitor(transport, pattern, period=5.0, listeners=[errors], **options)
    closing.append(mon)
    mon.start()
    return transport, mon


def raw_sender(name: str) -> Any:
    conn = stomp.Connection12([(B.HOST, B.PORTS[name])], vhost="/" if name == "rabbitmq" else None)
    login = ("guest", "guest") if name == "rabbitmq" else (None, None)
    conn.connect(*login, wait=True)
    return conn


@pytest.mark.parametrize("name", ["activemq", "rabbitmq"])
def test_json_legacy_and_signed_beats_are_recorded_off_the_socket(
    name: str, closing: list[Any]
) -> None:
    B.ensure(name)
    root = uid()
    errors = Errors()
    transport, mon = watching(B.url(name) + "?" + FAST, closing, f"{root}.*.>", errors)
    signed_t, signed = watching(B.url(name) + "?" + FAST, closing, f"{root}.s.>", errors, key=KEY)
    time.sleep(0.3)  # both subscriptions are in place at the broker
    sender = raw_sender(name)
    plain, keyed = BeatCodec(), BeatCodec(key=KEY)
    try:
        for seq in range(1, 4):
            for i in range(3):
                topic = f"{root}.a.{i}"
                sender.send(f"/topic/{topic}", plain.encode(Beat(topic, seq=seq, period=2.0)))
            legacy = f"{root}.l.x"
            sender.send(f"/topic/{legacy}", f"{legacy} HEARTBEAT")
            topic = f"{root}.s.x"
            body = keyed.encode(Beat(topic, seq=seq, boot_id="b1", sent_at=time.time()))
            sender.send(f"/topic/{topic}", body)
    finally:
        sender.disconnect()
    # 3 topics x 3 + 3 legacy + the signed ones reach `mon` too (unsigned rules: recorded).
    wait_for(lambda: mon.stats()["beats"] >= 15, 10, "15 beats recorded by the first monitor")
    wait_for(lambda: signed.stats()["beats"] >= 3, 10, "3 signed beats recorded")
    assert transport.stats()["native"] == 15, transport.stats()
    assert transport.stats()["delivered"] == 0, "no beat went through stomp.py's frame handling"
    assert signed_t.stats()["native"] == 3
    assert mon.detector.status(f"{root}.a.0").period == 2.0  # learned from the beat
    assert sorted(s.topic for s in signed.statuses()) == [f"{root}.s.x"]
    assert mon.stats()["rejected"] == {} and signed.stats()["rejected"] == {}
    assert errors.seen == []


@pytest.mark.parametrize("name", ["activemq", "rabbitmq"])
def test_forged_and_replayed_beats_off_the_socket_are_refused_and_reported(
    name: str, closing: list[Any]
) -> None:
    B.ensure(name)
    root = uid()
    errors = Errors()
    transport, mon = watching(B.url(name) + "?" + FAST, closing, f"{root}.>", errors, key=KEY)
    time.sleep(0.3)
    topic = f"{root}.x"
    good = BeatCodec(key=KEY).encode(Beat(topic, seq=7, boot_id="b", sent_at=time.time()))
    forged = BeatCodec(key=b"wrong").encode(Beat(topic, seq=8, boot_id="b", sent_at=time.time()))
    sender = raw_sender(name)
    try:
        for body in (good, forged, good, f"{topic} HEARTBEAT".encode()):
            sender.send(f"/topic/{topic}", body)
    finally:
        sender.disconnect()
    wait_for(lambda: len(errors.seen) >= 3, 10, "three refusals reported")
    assert mon.stats()["beats"] == 1
    assert mon.stats()["rejected"] == {"bad_signature": 1, "replayed": 1, "unsigned": 1}
    assert [e.reason for e in errors.seen] == ["bad_signature", "replayed", "unsigned"]
    assert transport.stats()["native"] == 4


class CuttingRelay:
    """A TCP relay to a broker that, on its first connection, forwards the broker's bytes only
    up to the middle of the first MESSAGE frame holding ``marker``, then closes both sides (as a
    broker killed mid-frame would); later connections are relayed whole."""

    def __init__(self, port: int, marker: bytes) -> None:
        self.port = port
        self.marker = marker
        self.server = socket.create_server(("127.0.0.1", 0))
        self.address = self.server.getsockname()
        self.connections = 0
        self.cut = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.server.accept()
            except OSError:
                return
            self.connections += 1
            upstream = socket.create_connection((B.HOST, self.port))
            cut = self.connections == 1
            threading.Thread(target=self._pipe, args=(client, upstream, False), daemon=True).start()
            threading.Thread(target=self._pipe, args=(upstream, client, cut), daemon=True).start()

    def _pipe(self, src: socket.socket, dst: socket.socket, cut: bool) -> None:
        seen = b""
        try:
            while data := src.recv(65536):
                if cut:
                    forwarded = len(seen)
                    seen += data
                    at = seen.find(self.marker)
                    if at >= 0:
                        start = seen.rfind(b"MESSAGE", 0, at)
                        end = start + len(b"MESSAGE") + (at - start) // 2
                        dst.sendall(seen[forwarded:end])
                        self.cut.set()
                        break
                dst.sendall(data)
        except OSError:
            pass
        for s in (src, dst):
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            s.close()

    def close(self) -> None:
        self.server.close()


def test_a_connection_cut_in_the_middle_of_a_frame_leaves_nothing_behind(
    closing: list[Any],
) -> None:
    B.ensure("activemq")
    root = uid()
    relay = CuttingRelay(B.PORTS["activemq"], f"{root}.cut".encode())
    closing.append(relay)
    host, port = relay.address
    errors = Errors()
    transport, mon = watching(f"stomp://{host}:{port}?{FAST}", closing, f"{root}.>", errors)
    time.sleep(0.3)
    codec = BeatCodec()
    sender = raw_sender("activemq")
    try:
        sender.send(f"/topic/{root}.before", codec.encode(Beat(f"{root}.before", seq=1)))
        sender.send(f"/topic/{root}.cut", codec.encode(Beat(f"{root}.cut", seq=1)))
        relay.cut.wait(10)
        assert relay.cut.is_set(), "the relay never saw the frame to cut"
        wait_for(lambda: relay.connections >= 2 and transport.connected, 10, "the reconnection")
        time.sleep(0.3)  # the subscription is restored at the broker
        sender.send(f"/topic/{root}.after", codec.encode(Beat(f"{root}.after", seq=1)))
    finally:
        sender.disconnect()
    wait_for(lambda: f"{root}.after" in mon, 10, "the beat after the reconnection")
    assert f"{root}.before" in mon
    assert f"{root}.cut" not in mon, "half a frame must not be recorded"
    assert mon.stats()["rejected"] == {}
    assert errors.seen == []
