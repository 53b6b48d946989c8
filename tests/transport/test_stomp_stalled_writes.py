"""A broker that stops reading, or a name that resolves slowly: neither blocks a caller for good.

The peer is a real TCP server on loopback that answers CONNECT with CONNECTED and then never
reads again (a hung broker whose process still holds the socket). The socket's buffers fill;
before the fix, ``sendall`` then blocked forever, holding the caller (a plain publisher's shared
scheduler thread) whatever ``timeout`` it passed.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from heartwire.transport import ConnectFailed, SendTimeout, connect


@pytest.fixture
def deaf_broker() -> Iterator[int]:
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(10)
    held: list[socket.socket] = []

    def serve() -> None:
        try:
            peer, _ = server.accept()
        except OSError:
            return
        held.append(peer)
        data = b""
        while b"\x00" not in data:
            chunk = peer.recv(4096)
            if not chunk:
                return
            data += chunk
        peer.sendall(b"CONNECTED\nversion:1.2\nheart-beat:0,0\nserver:deaf/1\n\n\x00")
        # ... and never read again.

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield server.getsockname()[1]
    finally:
        server.close()
        for peer in held:
            peer.close()
        thread.join(5)


def test_a_send_to_a_broker_that_stopped_reading_ends_in_a_bounded_time(deaf_broker: int) -> None:
    url = (
        f"stomp://127.0.0.1:{deaf_broker}?heartbeat=0&keepalive_interval=0&connect_timeout=1"
        "&reconnect_interval=0.2&dialect=activemq"
    )
    transport = connect(url)
    outcome: list[BaseException | str] = []
    body = b"x" * (1 << 20)

    def publish_until_stuck() -> None:
        try:
            for _ in range(200):  # 200 MB: far more than any socket buffer
                transport.publish("svc.a", body, timeout=0)
            outcome.append("all sent: the broker read after all")
        except BaseException as exc:  # the outcome is what the test checks
            outcome.append(exc)

    started = time.monotonic()
    sender = threading.Thread(target=publish_until_stuck, daemon=True)
    sender.start()
    try:
        sender.join(10)
        assert not sender.is_alive(), "publish(timeout=0) still blocked in a write after 10 s"
        assert len(outcome) == 1 and isinstance(outcome[0], SendTimeout), outcome
        assert time.monotonic() - started < 10
    finally:
        transport.close()


def test_a_slow_name_lookup_is_bounded_by_connect_timeout(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # stomp.py looked the name up in socket.create_connection, outside connect_timeout. The
    # resolver is made slow for one name (a dead first nameserver); the broker is real.
    from tests import brokers as B

    real = socket.getaddrinfo
    release = threading.Event()

    def slow(host: Any, *args: Any, **kwargs: Any) -> Any:
        if host == "slow.heartwire.test":
            release.wait(5)
            return real(B.HOST, *args, **kwargs)
        return real(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", slow)
    started = time.monotonic()
    try:
        with pytest.raises(ConnectFailed) as info:
            connect(
                f"stomp://slow.heartwire.test:{B.PORTS['activemq']}"
                "?connect_timeout=0.5&reconnect_period=0&keepalive_interval=0"
            )
        took = time.monotonic() - started
    finally:
        release.set()
    assert took < 1.5, f"connect took {took:.2f} s with connect_timeout=0.5"
    assert "name lookup" in str(info.value)


def test_a_name_the_resolver_refuses_fails_the_connect_with_its_reason(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Review R6: the lookup thread caught OSError only; a name IDNA refuses (UnicodeError) killed
    # it, and every connect then failed with IndexError('list index out of range').
    real = socket.getaddrinfo

    def refusing(host: Any, *args: Any, **kwargs: Any) -> Any:
        if host == "refused.heartwire.test":
            raise UnicodeError("label too long")
        return real(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", refusing)
    with pytest.raises(ConnectFailed) as info:
        connect(
            "stomp://refused.heartwire.test:61613"
            "?connect_timeout=0.5&reconnect_period=0&keepalive_interval=0"
        )
    assert "name lookup" in str(info.value) and "label too long" in str(info.value), info.value
